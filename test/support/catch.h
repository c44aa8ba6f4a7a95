// One include for tests that compiles against Catch2 2.x (Debian 12) and 3.x (Ubuntu 24.04).
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define NMT_CATCH2_MAJOR 3
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#define NMT_CATCH2_MAJOR 2
#endif  // Catch2 2.x already puts Approx in the global namespace

// Test main for CPU suites.
#include "test/support/catch_session.h"

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }

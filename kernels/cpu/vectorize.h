// NMT_CPU_CLONES: compile a hot CPU loop twice on x86-64, for the SSE2 baseline the build targets
// and for AVX2, and let the loader pick the clone the CPU supports (GCC/Clang target_clones).
#pragma once

// Why: the build targets the portable x86-64 baseline, where the GEMM runs at half the width the
// CPUs we train on offer. Why the results stay bit-identical between clones: "avx2" does not
// enable FMA, so each clone performs the same multiplies and adds in the same order, only wider.
// Define NMT_CPU_CLONES as empty on the command line to build the baseline only.
#ifndef NMT_CPU_CLONES
#if defined(__x86_64__) && defined(__has_attribute) && !defined(__CUDACC__)
#if __has_attribute(target_clones)
#define NMT_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#endif
#ifndef NMT_CPU_CLONES
#define NMT_CPU_CLONES
#endif

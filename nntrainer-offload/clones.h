/*
 * clones.h - NTO_CLONES, for the kernels that are our own loops
 * (depthwise convolution, im2col/col2im, batch normalization, activations,
 * optimizer updates): GCC compiles the function three times, for
 * x86-64-v4 (AVX-512), x86-64-v3 (AVX2) and the baseline x86-64 (SSE2),
 * and the loader picks the widest one this CPU runs (target_clones, an
 * ifunc). Elsewhere (other architectures, other compilers, meson
 * -Dclones=false, ThreadSanitizer builds) it is empty.
 *
 * The clones compute the same bits: -std=c11 keeps GCC from contracting
 * a*b+c into an FMA (-ffp-contract=off, ISO C's default), GCC does not
 * reorder floating-point sums without -ffast-math (our sums' order is
 * written out: batch normalization's lanes), and every vector instruction
 * used rounds like its scalar form. So the weights a run saves do not
 * depend on the x86-64 CPU's vector width. tools/test.sh checks it: its
 * sanitizer build has no clones, and small nets trained by both builds
 * must save the same bytes.
 */
#ifndef NTO_CLONES_H
#define NTO_CLONES_H

/* Not under ThreadSanitizer: the ifunc resolvers GCC emits are
 * instrumented and run while the loader relocates, before the TSan runtime
 * is set up (test binaries died with SIGSEGV before main). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    defined(__linux__) && !defined(NTO_NO_CLONES) &&                           \
    !defined(__SANITIZE_THREAD__)
#define NTO_CLONES                                                             \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NTO_CLONES
#endif

#endif

/*
 * blas.h - which OpenBLAS kernels run the GEMMs, and whether they leave
 * the CPU's AVX-512 unused.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernel family once,
 * when the library loads, from the CPU's family and model; the environment
 * variable OPENBLAS_CORETYPE overrides that choice and is read at the same
 * time. On an AVX-512 CPU, an AVX2 family (Haswell, Zen) runs sgemm at
 * about half the speed of the AVX-512 ones (docs/results.md). The trainer
 * keeps the family the library and the environment chose, and reports it
 * (nto_blas_core) with a note when nto_blas_avx512_unused holds.
 *
 * Results depend on the kernel family (another blocking, another order of
 * the sums), not on the window, the I/O backend or the thread count: runs
 * to be compared bit for bit use the same family.
 */
#ifndef NTO_BLAS_H
#define NTO_BLAS_H

/*
 * Nonzero when GEMMs run on kernels without AVX-512 that the library could
 * replace with AVX-512 ones on this CPU: config is openblas_get_config()'s
 * string and contains DYNAMIC_ARCH (OPENBLAS_CORETYPE can choose), core
 * (openblas_get_corename(), the running family) is not an AVX-512 family
 * (SkylakeX, Cooperlake, SapphireRapids, any case), and avx512 is nonzero
 * (nto_cpu_avx512()). 0 otherwise, and for NULL config or core. Pure; any
 * thread.
 */
int nto_blas_avx512_unused(const char *config, const char *core, int avx512);

/*
 * Nonzero when this CPU and the OS (saved AVX-512 state) support AVX-512
 * F, CD, BW, DQ and VL, what OpenBLAS's SkylakeX kernels use; 0 otherwise
 * and on other architectures than x86-64. Any thread.
 */
int nto_cpu_avx512(void);

/*
 * The OpenBLAS kernel family running GEMMs in this process
 * (openblas_get_corename(), e.g. "Cooperlake", "Haswell"); a static
 * string, never NULL. Any thread.
 */
const char *nto_blas_core(void);

/*
 * nto_blas_avx512_unused for this process: the linked OpenBLAS, its
 * running family and this CPU. Any thread.
 */
int nto_blas_avx512_unused_here(void);

/* Side of the square GEMMs nto_gemm_rate times: the size of a
 * convolution's GEMM on a board (a 3x3 convolution of 64 channels is K =
 * 576). */
#define NTO_GEMM_RATE_N 256

/*
 * The compute rate of single-precision GEMMs on the compute threads
 * (parallel.h nto_parallel_for_blas, as the convolutions run them), in
 * floating-point operations per second (2 n^3 per n x n GEMM): square
 * GEMMs of NTO_GEMM_RATE_N, four per thread at a time, for at least
 * `seconds` of wall time. A CPU quota (cgroup cpu.cfs_quota_us, periods of
 * 100 ms by default) shows only in a measurement of several periods: 0.3 s
 * sees its average; a few ms see the CPU's peak. Returns the rate, or
 * NTO_ENOMEM (< 0) when the matrices cannot be allocated. Executor thread
 * (the pool's caller), before training.
 */
double nto_gemm_rate(double seconds);

#endif

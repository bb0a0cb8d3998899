/* blas.c - OpenBLAS's kernel family, and AVX-512 it leaves unused. */
#include "blas.h"
#include "error.h"
#include "parallel.h"
#include "tensor.h"

#include <cblas.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* OpenBLAS 0.3.21's x86-64 families with AVX-512 kernels
 * (driver/others/dynamic.c, its corename table). */
static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake",
                                           "SapphireRapids"};

int nto_blas_avx512_unused(const char *config, const char *core, int avx512) {
  if (!config || !core || !avx512 || !strstr(config, "DYNAMIC_ARCH"))
    return 0;
  for (size_t i = 0; i < sizeof avx512_cores / sizeof *avx512_cores; i++)
    if (!strcasecmp(core, avx512_cores[i]))
      return 0;
  return 1;
}

int nto_cpu_avx512(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  /* libgcc's and compiler-rt's cpu model report AVX-512 features only
   * when XCR0 says the OS saves the opmask and ZMM registers */
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
#else
  return 0;
#endif
}

const char *nto_blas_core(void) {
  const char *core = openblas_get_corename();
  return core ? core : "unknown";
}

int nto_blas_avx512_unused_here(void) {
  return nto_blas_avx512_unused(openblas_get_config(), openblas_get_corename(),
                                nto_cpu_avx512());
}

/* nto_gemm_rate's matrices: a, b shared, c one per thread slot. */
typedef struct gemm_job {
  const float *a, *b;
  float *c[NTO_PARALLEL_MAX];
} gemm_job;

static void gemm_range(void *ctx, size_t begin, size_t end, int slot) {
  const gemm_job *j = ctx;
  const int n = NTO_GEMM_RATE_N;
  for (size_t i = begin; i < end; i++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, j->a,
                n, j->b, n, 0.0f, j->c[slot], n);
}

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double nto_gemm_rate(double seconds) {
  const size_t n = NTO_GEMM_RATE_N, bytes = n * n * sizeof(float);
  int T = nto_parallel_threads();
  gemm_job j = {0};
  float *a = nto_alloc_aligned(bytes), *b = nto_alloc_aligned(bytes);
  int ok = a && b;
  for (int t = 0; ok && t < T; t++)
    ok = (j.c[t] = nto_alloc_aligned(bytes)) != NULL;
  double rate = NTO_ENOMEM;
  if (ok) {
    for (size_t i = 0; i < n * n; i++) {
      a[i] = (float)(i % 7) * 0.25f;
      b[i] = (float)(i % 5) * 0.5f;
    }
    j.a = a;
    j.b = b;
    size_t per = (size_t)T * 4;
    gemm_range(&j, 0, 1, 0); /* packing buffers, pages: not timed */
    double t0 = seconds_now(), t = t0;
    long calls = 0;
    do {
      nto_parallel_for_blas(per, 1, T, gemm_range, &j);
      calls += (long)per;
      t = seconds_now();
    } while (t - t0 < seconds);
    rate = 2.0 * (double)n * n * n * (double)calls / (t - t0);
  }
  for (int t = 0; t < T; t++)
    nto_free_aligned(j.c[t]);
  nto_free_aligned(a);
  nto_free_aligned(b);
  return rate;
}

/* blas.c - OpenBLAS's kernel family, and AVX-512 it leaves unused. */
#include "blas.h"

#include <cblas.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

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

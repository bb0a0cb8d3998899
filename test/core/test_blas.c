/* test_blas.c - when the report says OpenBLAS leaves AVX-512 unused. */
#include "blas.h"

#include <cblas.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static const char dyn[] = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY "
                          "Haswell MAX_THREADS=64";
static const char fixed[] = "OpenBLAS 0.3.21 NO_LAPACKE Haswell MAX_THREADS=64";

/* AVX2 families on an AVX-512 CPU leave it unused; AVX-512 ones do not */
static void test_families(void **state) {
  (void)state;
  assert_true(nto_blas_avx512_unused(dyn, "Haswell", 1));
  assert_true(nto_blas_avx512_unused(dyn, "Zen", 1));
  assert_true(nto_blas_avx512_unused(dyn, "Sandybridge", 1));
  assert_false(nto_blas_avx512_unused(dyn, "SkylakeX", 1));
  assert_false(nto_blas_avx512_unused(dyn, "Cooperlake", 1));
  assert_false(nto_blas_avx512_unused(dyn, "SapphireRapids", 1));
  assert_false(nto_blas_avx512_unused(dyn, "skylakex", 1));
}

/* no AVX-512, a build without DYNAMIC_ARCH (OPENBLAS_CORETYPE cannot
 * choose) or no strings: nothing to say */
static void test_nothing_to_choose(void **state) {
  (void)state;
  assert_false(nto_blas_avx512_unused(dyn, "Haswell", 0));
  assert_false(nto_blas_avx512_unused(fixed, "Haswell", 1));
  assert_false(nto_blas_avx512_unused(NULL, "Haswell", 1));
  assert_false(nto_blas_avx512_unused(dyn, NULL, 1));
}

/* this process: the running family, and the rule applied to it */
static void test_here(void **state) {
  (void)state;
  const char *core = nto_blas_core();
  assert_non_null(core);
  assert_string_equal(core, openblas_get_corename());
  assert_int_equal(
      nto_blas_avx512_unused_here(),
      nto_blas_avx512_unused(openblas_get_config(), core, nto_cpu_avx512()));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_families),
      cmocka_unit_test(test_nothing_to_choose),
      cmocka_unit_test(test_here),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

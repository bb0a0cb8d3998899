/*
 * test_parallel.c - the compute helpers (parallel.h): every element is
 * visited exactly once, in ranges of whole grains placed as documented,
 * range 0 (when not empty) on the caller; the thread cap; many jobs in a row
 * and resizing between them (no lost wake-up: a worker started after a job must
 * not take that job for its own); bad thread counts; BLAS held at one thread
 * inside nto_parallel_for_blas's ranges and restored after. Also run under
 * ThreadSanitizer (tools/test.sh).
 */
#include "parallel.h"

#include <cblas.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define N_MAX 100000

typedef struct visit {
  unsigned char seen[N_MAX]; /* times each element was visited */
  size_t begin[NTO_PARALLEL_MAX], end[NTO_PARALLEL_MAX];
  int calls[NTO_PARALLEL_MAX]; /* per slot */
  pthread_t caller;
  int caller_ran_0; /* slot 0 ran on the caller */
} visit;

static void mark(void *ctx, size_t a, size_t b, int slot) {
  visit *v = ctx;
  for (size_t i = a; i < b; i++)
    v->seen[i]++;
  v->begin[slot] = a;
  v->end[slot] = b;
  v->calls[slot]++;
  if (slot == 0)
    v->caller_ran_0 = pthread_equal(pthread_self(), v->caller);
}

/* One job of n elements with grain g, cap m, on t threads: checked. */
static void check_job(size_t n, size_t g, int m, int t) {
  static visit v;
  memset(&v, 0, sizeof v);
  v.caller = pthread_self();
  nto_parallel_for(n, g, m, mark, &v);
  for (size_t i = 0; i < n; i++)
    if (v.seen[i] != 1)
      fail_msg("n %zu grain %zu: element %zu visited %d times", n, g, i,
               v.seen[i]);
  int T = m > 0 && m < t ? m : t;
  if (n <= g)
    T = 1;
  for (int k = 0; k < NTO_PARALLEL_MAX; k++) {
    if (k >= T) {
      assert_int_equal(v.calls[k], 0);
      continue;
    }
    /* r_k = round_down(n*k/T, grain), r_T = n; empty ranges skipped */
    size_t a = (size_t)((unsigned long long)n * k / T) / g * g;
    size_t b =
        k + 1 == T ? n : (size_t)((unsigned long long)n * (k + 1) / T) / g * g;
    assert_int_equal(v.calls[k], a < b ? 1 : 0);
    if (a < b) {
      assert_int_equal(v.begin[k], a);
      assert_int_equal(v.end[k], b);
    }
  }
  if (v.calls[0] > 0)
    assert_true(v.caller_ran_0);
}

static void test_ranges(void **state) {
  (void)state;
  nto_err err = {0};
  const size_t ns[] = {0, 1, 7, 64, 1000, 4097, N_MAX};
  const size_t gs[] = {1, 16, 4096};
  for (int t = 1; t <= 5; t++) {
    assert_int_equal(nto_parallel_set_threads(t, &err), 0);
    assert_int_equal(nto_parallel_threads(), t);
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
      for (size_t j = 0; j < sizeof gs / sizeof *gs; j++)
        for (int m = 0; m <= 3; m++)
          check_job(ns[i], gs[j], m, t);
  }
  nto_parallel_free();
  assert_int_equal(nto_parallel_threads(), 1);
}

static void add_one(void *ctx, size_t a, size_t b, int slot) {
  long *x = ctx;
  (void)slot;
  for (size_t i = a; i < b; i++)
    x[i]++;
}

/* Thousands of short jobs, resizing the pool every 500: every job runs
 * completely before nto_parallel_for returns (a lost wake-up hangs, a
 * range run twice or not at all shows in the counts). */
static void test_many_jobs(void **state) {
  (void)state;
  nto_err err = {0};
  enum { N = 64, JOBS = 4000 };
  long x[N] = {0};
  for (int j = 0; j < JOBS; j++) {
    if (j % 500 == 0)
      assert_int_equal(nto_parallel_set_threads(1 + (j / 500) % 4, &err), 0);
    nto_parallel_for(N, 1, 0, add_one, x);
  }
  for (int i = 0; i < N; i++)
    assert_int_equal(x[i], JOBS);
  nto_parallel_free();
}

/* A refused count leaves the pool as it was: the 3 threads set before
 * still run a job's three ranges. */
static void test_bad_counts(void **state) {
  (void)state;
  nto_err err = {0};
  assert_int_equal(nto_parallel_set_threads(3, &err), 0);
  assert_int_equal(nto_parallel_set_threads(0, &err), NTO_EINVAL);
  assert_non_null(strstr(err.msg, "threads"));
  assert_int_equal(nto_parallel_set_threads(NTO_PARALLEL_MAX + 1, &err),
                   NTO_EINVAL);
  assert_non_null(strstr(err.msg, "threads"));
  assert_int_equal(nto_parallel_threads(), 3);
  check_job(300, 1, 0, 3);
  nto_parallel_free();
}

/* Each range records OpenBLAS's thread count as it runs. */
static void blas_count(void *ctx, size_t a, size_t b, int slot) {
  int *seen = ctx;
  (void)a, (void)b;
  seen[slot] = openblas_get_num_threads();
}

/* nto_parallel_for_blas: every range (the caller's and the workers') sees
 * OpenBLAS at one thread, and the count set before is back afterwards,
 * also when the job runs on the caller alone. */
static void test_blas_single_threaded(void **state) {
  (void)state;
  nto_err err = {0};
  int before = openblas_get_num_threads();
  for (int t = 1; t <= 3; t += 2) {
    assert_int_equal(nto_parallel_set_threads(t, &err), 0);
    openblas_set_num_threads(2);
    int seen[NTO_PARALLEL_MAX] = {0};
    nto_parallel_for_blas(3, 1, 0, blas_count, seen);
    for (int k = 0; k < t; k++)
      assert_int_equal(seen[k], 1);
    assert_int_equal(openblas_get_num_threads(), 2);
  }
  openblas_set_num_threads(before);
  nto_parallel_free();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ranges),
      cmocka_unit_test(test_many_jobs),
      cmocka_unit_test(test_bad_counts),
      cmocka_unit_test(test_blas_single_threaded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

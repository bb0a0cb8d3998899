/*
 * test_parallel.c - the compute helpers (parallel.h): every element is
 * visited exactly once, in the documented ranges of whole grains, each run
 * once, by slots below the job's thread count with one thread per slot (the
 * caller's slot 0); a worker held up in its range holds up only that range;
 * the thread cap; many jobs in a row with two contexts and resizing between
 * them (no lost wake-up, no range run with another job's context, a worker
 * started after a job does not take it); bad thread counts; BLAS held at
 * one thread inside nto_parallel_for_blas's ranges and restored after. Also
 * run under ThreadSanitizer (tools/test.sh).
 */
#include "parallel.h"

#include <cblas.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#define N_MAX 100000
#define CALLS_MAX (NTO_PARALLEL_MAX * NTO_PARALLEL_SPLIT)

/* The calls of one job, in the order they started. */
typedef struct visit {
  pthread_mutex_t mu;
  unsigned char seen[N_MAX]; /* times each element was visited */
  int n_calls;
  size_t begin[CALLS_MAX], end[CALLS_MAX];
  int slot[CALLS_MAX];
  pthread_t thread[CALLS_MAX];
} visit;

static void mark(void *ctx, size_t a, size_t b, int slot) {
  visit *v = ctx;
  for (size_t i = a; i < b; i++)
    v->seen[i]++; /* ranges are disjoint: no two threads share an element */
  pthread_mutex_lock(&v->mu);
  int c = v->n_calls++;
  if (c < CALLS_MAX) {
    v->begin[c] = a;
    v->end[c] = b;
    v->slot[c] = slot;
    v->thread[c] = pthread_self();
  }
  pthread_mutex_unlock(&v->mu);
}

/* r_k = round_down(n*k/R, grain), r_R = n (parallel.h). */
static size_t boundary(size_t n, size_t g, int k, int r) {
  return k == r ? n : (size_t)((unsigned long long)n * k / r) / g * g;
}

/* One job of n elements with grain g, cap m, on t threads: checked. */
static void check_job(size_t n, size_t g, int m, int t) {
  static visit v;
  memset(&v, 0, sizeof v);
  pthread_mutex_init(&v.mu, NULL);
  nto_parallel_for(n, g, m, mark, &v);
  for (size_t i = 0; i < n; i++)
    if (v.seen[i] != 1)
      fail_msg("n %zu grain %zu: element %zu visited %d times", n, g, i,
               v.seen[i]);
  int T = m > 0 && m < t ? m : t;
  if (n <= g)
    T = 1;
  /* R = min(units, NTO_PARALLEL_SPLIT * T), or one range on one thread */
  size_t units = (n + g - 1) / g;
  int R = T == 1 ? 1
                 : (int)(units < (size_t)(NTO_PARALLEL_SPLIT * T)
                             ? units
                             : (size_t)(NTO_PARALLEL_SPLIT * T));
  int want = 0;
  for (int k = 0; k < R; k++) {
    size_t a = boundary(n, g, k, R), b = boundary(n, g, k + 1, R);
    if (a >= b)
      continue; /* empty ranges are skipped */
    want++;
    int found = 0;
    for (int c = 0; c < v.n_calls; c++)
      found += v.begin[c] == a && v.end[c] == b;
    if (found != 1)
      fail_msg("n %zu grain %zu T %d: range %d [%zu, %zu) ran %d times", n, g,
               T, k, a, b, found);
  }
  assert_int_equal(v.n_calls, want);
  pthread_t owner[NTO_PARALLEL_MAX];
  int owned[NTO_PARALLEL_MAX] = {0};
  for (int c = 0; c < v.n_calls; c++) {
    int s = v.slot[c];
    assert_in_range(s, 0, T - 1);
    if (s == 0)
      assert_true(pthread_equal(v.thread[c], pthread_self()));
    if (owned[s])
      assert_true(pthread_equal(v.thread[c], owner[s]));
    owner[s] = v.thread[c];
    owned[s] = 1;
  }
  pthread_mutex_destroy(&v.mu);
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

/* A job's ranges run by the caller (slot 0) and by any worker. */
typedef struct held {
  atomic_int by_caller, by_worker;
  int ranges;
  int timed_out; /* the worker waited 10 s in vain */
} held;

/* The first range a worker takes waits until the caller has run every
 * other range: with ranges fixed per thread it would wait for ever. */
static void hold_worker(void *ctx, size_t a, size_t b, int slot) {
  held *h = ctx;
  (void)a, (void)b;
  if (slot == 0) {
    atomic_fetch_add(&h->by_caller, 1);
    return;
  }
  if (atomic_fetch_add(&h->by_worker, 1) > 0)
    return;
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 10000; i++) {
    if (atomic_load(&h->by_caller) == h->ranges - 1)
      return;
    nanosleep(&ms, NULL);
  }
  h->timed_out = 1;
}

/* A worker held up inside a range holds up only that range: the caller
 * takes all the others, and the job ends when the held range does. */
static void test_held_worker(void **state) {
  (void)state;
  nto_err err = {0};
  assert_int_equal(nto_parallel_set_threads(2, &err), 0);
  for (int rep = 0; rep < 20; rep++) {
    held h = {.ranges = 2 * NTO_PARALLEL_SPLIT};
    nto_parallel_for((size_t)h.ranges, 1, 0, hold_worker, &h);
    assert_false(h.timed_out);
    int w = atomic_load(&h.by_worker), c = atomic_load(&h.by_caller);
    assert_int_equal(c + w, h.ranges);
    assert_true(w <= 1); /* the worker got at most its held range */
  }
  nto_parallel_free();
}

static void add_one(void *ctx, size_t a, size_t b, int slot) {
  long *x = ctx;
  (void)slot;
  for (size_t i = a; i < b; i++)
    x[i]++;
}

/* Thousands of short jobs alternating between two arrays, resizing the
 * pool every 500: every job runs completely before nto_parallel_for
 * returns (a lost wake-up hangs, a range run twice, not at all, or with
 * the other job's array shows in the counts). */
static void test_many_jobs(void **state) {
  (void)state;
  nto_err err = {0};
  enum { N = 64, JOBS = 4000 };
  long x[2][N] = {{0}};
  for (int j = 0; j < JOBS; j++) {
    if (j % 500 == 0)
      assert_int_equal(nto_parallel_set_threads(1 + (j / 500) % 4, &err), 0);
    nto_parallel_for(N, 1, 0, add_one, x[j % 2]);
  }
  for (int i = 0; i < N; i++) {
    assert_int_equal(x[0][i], JOBS / 2);
    assert_int_equal(x[1][i], JOBS / 2);
  }
  nto_parallel_free();
}

/* A refused count leaves the pool as it was: the 3 threads set before
 * still run a job's ranges. */
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
 * also when the job runs on the caller alone. Slots that took no range
 * keep -1. */
static void test_blas_single_threaded(void **state) {
  (void)state;
  nto_err err = {0};
  int before = openblas_get_num_threads();
  for (int t = 1; t <= 3; t += 2) {
    assert_int_equal(nto_parallel_set_threads(t, &err), 0);
    openblas_set_num_threads(2);
    int seen[NTO_PARALLEL_MAX], ran = 0;
    for (int k = 0; k < NTO_PARALLEL_MAX; k++)
      seen[k] = -1;
    nto_parallel_for_blas(3, 1, 0, blas_count, seen);
    for (int k = 0; k < NTO_PARALLEL_MAX; k++) {
      if (k >= t)
        assert_int_equal(seen[k], -1);
      else if (seen[k] != -1)
        assert_int_equal(seen[k], 1), ran++;
    }
    assert_true(ran >= 1);
    assert_int_equal(openblas_get_num_threads(), 2);
  }
  openblas_set_num_threads(before);
  nto_parallel_free();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ranges),
      cmocka_unit_test(test_held_worker),
      cmocka_unit_test(test_many_jobs),
      cmocka_unit_test(test_bad_counts),
      cmocka_unit_test(test_blas_single_threaded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_lookahead.c - the compute-weighted read frontier (lookahead.h):
 * hand-worked cases (a cheap step before a large read, reads queued behind
 * each other, the read-bound and zero-compute fallbacks, the cap), and a
 * property check: on random passes whose reads fit in the compute, a FIFO
 * read queue driven by the frontier never makes the executor wait. The fit
 * into a memory target (nto_lookahead_fit): hand-worked moves, partial
 * moves, the steps a move takes along, the wrap, and random profiles.
 */
#include "lookahead.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

static void expect_upto(const int *upto, const int *want, int S) {
  for (int s = 0; s < S; s++)
    if (upto[s] != want[s])
      fail_msg("upto[%d] = %d, expected %d", s, upto[s], want[s]);
}

/* upto[0..S) is a valid frontier for window n (s + n <= upto[s] <= s + S
 * - 1, nondecreasing across the wrap), within cap[s] where cap is given.
 * Returns the most steps entered beyond the window. */
static int expect_valid(const int *upto, int S, int n, const int *cap) {
  int most = 0;
  for (int s = 0; s < S; s++) {
    assert_true(upto[s] >= s + n && upto[s] <= s + S - 1);
    assert_true(!cap || upto[s] <= cap[s]);
    if (s > 0)
      assert_true(upto[s] >= upto[s - 1]);
    most = upto[s] - s - n > most ? upto[s] - s - n : most;
  }
  assert_true(upto[S - 1] - S <= upto[0]);
  return most;
}

/* Reads that fit behind one step each: the plain window, s + n. */
static void test_plain_when_reads_fit(void **state) {
  (void)state;
  const double c[] = {10, 10, 10, 10}, r[] = {5, 5, 5, 5};
  int upto[4];
  assert_int_equal(nto_lookahead_frontier(4, 1, c, r, -1, upto), 0);
  expect_upto(upto, (const int[]){1, 2, 3, 4}, 4);
  assert_int_equal(nto_lookahead_frontier(4, 2, c, r, -1, upto), 0);
  expect_upto(upto, (const int[]){2, 3, 4, 5}, 4);
}

/* Step 2 reads 8 ms behind a 0.5 ms step: T = 0, 10, 10.5, 20.5, so its
 * read must start by 2.5 ms, i.e. at the start of step 0. */
static void test_cheap_step_before_large_read(void **state) {
  (void)state;
  const double c[] = {10, 0.5, 10, 10}, r[] = {0, 0, 8, 0};
  int upto[4];
  assert_int_equal(nto_lookahead_frontier(4, 1, c, r, -1, upto), 1);
  expect_upto(upto, (const int[]){2, 2, 3, 4}, 4);
  /* capped at 0 steps beyond the window: the plain window */
  assert_int_equal(nto_lookahead_frontier(4, 1, c, r, 0, upto), 0);
  expect_upto(upto, (const int[]){1, 2, 3, 4}, 4);
}

/* Steps 3 and 4 read 18 ms each, steps are 10 ms (T(s) = 10 s). Alone,
 * step 3's read could start at 12 ms (step 1); queued before step 4's,
 * which must start by 22 ms, it must end by 22 and start by 4: step 0. */
static void test_reads_queue_behind_each_other(void **state) {
  (void)state;
  const double c[] = {10, 10, 10, 10, 10, 10}, r[] = {0, 0, 0, 18, 18, 0};
  int upto[6];
  assert_int_equal(nto_lookahead_frontier(6, 1, c, r, -1, upto), 2);
  expect_upto(upto, (const int[]){3, 3, 4, 4, 5, 6}, 6);
}

/* Reads longer than the compute of a pass: scaled to the period (here
 * to 1 ms each behind 1 ms steps), not pulled ever earlier. No compute at
 * all: the plain window. */
static void test_read_bound_and_zero_compute(void **state) {
  (void)state;
  const double c[] = {1, 1, 1, 1}, r[] = {10, 10, 10, 10}, z[] = {0, 0, 0, 0};
  int upto[4];
  assert_int_equal(nto_lookahead_frontier(4, 1, c, r, -1, upto), 0);
  expect_upto(upto, (const int[]){1, 2, 3, 4}, 4);
  assert_int_equal(nto_lookahead_frontier(4, 1, z, r, -1, upto), 0);
  expect_upto(upto, (const int[]){1, 2, 3, 4}, 4);
}

/* Executor stall of K passes driven by the frontier: at the start of each
 * step the steps up to the frontier enter and queue their reads (one FIFO
 * server); a step waits for its own read. The steps entered before the
 * first pass are read at time 0. Returns the stall of passes 2..K-1. */
static double simulate(int S, const double *c, const double *r, const int *upto,
                       int K) {
  double t = 0, busy = 0, stall = 0;
  long n = (long)K * S + S;
  double *done = calloc((size_t)n, sizeof *done);
  long next = upto[S - 1] - S + 1; /* steps 0..next-1: primed */
  for (long a = 0; a < (long)K * S; a++) {
    long lim = a - a % S + upto[a % S];
    for (; next <= lim && next < n; next++) {
      busy = (busy > t ? busy : t) + r[next % S];
      done[next] = busy;
    }
    double wait = done[a] > t ? done[a] - t : 0;
    if (a >= 2L * S)
      stall += wait;
    t += wait + c[a % S];
  }
  free(done);
  return stall;
}

/* Random passes whose reads take at most half the compute (no single read
 * more than a quarter, no step more than half): the frontier is valid and
 * hides every read. */
static void test_random_passes_never_stall(void **state) {
  (void)state;
  srand(12345);
  int checked = 0;
  for (int it = 0; it < 400; it++) {
    int S = 2 + rand() % 40, n = 1 + rand() % (S - 1);
    double c[48], r[48], P = 0, R = 0;
    for (int s = 0; s < S; s++) {
      c[s] = rand() % 4 == 0 ? 0.01 : (rand() % 1000) / 10.0;
      r[s] = rand() % 3 == 0 ? 0 : (rand() % 1000) / 10.0;
      P += c[s];
      R += r[s];
    }
    int big = 0; /* a step of more than half the pass: the S-1 steps
                    before it may not hide its read; out of scope */
    for (int s = 0; s < S; s++)
      big |= c[s] > P / 2;
    if (big)
      continue;
    double lim = P / 4;
    for (int s = 0; s < S; s++) /* scale reads to R <= P/2, each <= P/4 */
      r[s] = R > 0 ? r[s] * P / (2 * R) : 0;
    for (int s = 0; s < S; s++)
      r[s] = r[s] > lim ? lim : r[s];
    int upto[48];
    int most = nto_lookahead_frontier(S, n, c, r, -1, upto);
    assert_true(most >= 0);
    assert_int_equal(expect_valid(upto, S, n, NULL), most);
    double st = simulate(S, c, r, upto, 5);
    if (st > 1e-6)
      fail_msg("case %d (S %d, n %d): stall %g ms", it, S, n, st);
    checked++;
  }
  assert_true(checked > 200);
}

/* ---- nto_lookahead_fit ---- */

/* Step 2 wants to enter at step 0 (plain: 1), 8 bytes: it fits a target
 * of 20 over an empty profile; with 15 bytes resident at instant 1 (step
 * 0's writes) it does not, and the plain window stays. Gain 0: no move. */
static void test_fit_moves_where_room(void **state) {
  (void)state;
  const int desired[] = {2, 2, 3, 4};
  const uint64_t bytes[] = {0, 0, 8, 0};
  const double gain[] = {0, 0, 3, 0}, none[] = {0, 0, 0, 0};
  size_t live[12] = {0};
  int upto[4];
  assert_int_equal(
      nto_lookahead_fit(4, 1, desired, live, bytes, gain, 20, upto), 1);
  expect_upto(upto, desired, 4);
  live[1] = 15;
  assert_int_equal(
      nto_lookahead_fit(4, 1, desired, live, bytes, gain, 20, upto), 0);
  expect_upto(upto, (const int[]){1, 2, 3, 4}, 4);
  live[1] = 0;
  assert_int_equal(
      nto_lookahead_fit(4, 1, desired, live, bytes, none, 20, upto), 0);
  expect_upto(upto, (const int[]){1, 2, 3, 4}, 4);
}

/* Step 4 wants to enter at step 1 (plain: 3). Entering there brings step
 * 3 (plain: 2) along, so instants 3..5 hold 8 + 5 bytes: above a target
 * of 10, and the earliest entry that fits is step 2 (8 bytes over 6..8).
 * With a target of 13 the desired entry fits. */
static void test_fit_partial_and_followers(void **state) {
  (void)state;
  const int desired[] = {1, 4, 4, 4, 5, 6};
  const uint64_t bytes[] = {0, 0, 0, 5, 8, 0};
  const double gain[] = {0, 0, 0, 0, 9, 0};
  size_t live[18] = {0};
  int upto[6];
  assert_int_equal(
      nto_lookahead_fit(6, 1, desired, live, bytes, gain, 10, upto), 1);
  expect_upto(upto, (const int[]){1, 2, 4, 4, 5, 6}, 6);
  assert_int_equal(
      nto_lookahead_fit(6, 1, desired, live, bytes, gain, 13, upto), 2);
  expect_upto(upto, desired, 6);
}

/* Across the wrap: step 0 of the next pass wants to enter at step 2
 * (plain: at step 3, upto[3] = 4); it is held over instants 6..8. */
static void test_fit_across_the_wrap(void **state) {
  (void)state;
  const int desired[] = {1, 2, 4, 4};
  const uint64_t bytes[] = {7, 0, 0, 0};
  const double gain[] = {4, 0, 0, 0};
  size_t live[12] = {0};
  int upto[4];
  assert_int_equal(
      nto_lookahead_fit(4, 1, desired, live, bytes, gain, 10, upto), 1);
  expect_upto(upto, desired, 4);
  live[7] = 4;
  assert_int_equal(
      nto_lookahead_fit(4, 1, desired, live, bytes, gain, 10, upto), 0);
  expect_upto(upto, (const int[]){1, 2, 3, 4}, 4);
}

/* Random profiles: the fitted frontier is valid, between the plain window
 * and the desired one, and the modelled resident bytes it implies stay
 * within the target wherever the plain profile did. */
static void test_fit_random_within_target(void **state) {
  (void)state;
  srand(777);
  int moved_cases = 0;
  for (int it = 0; it < 300; it++) {
    int S = 2 + rand() % 30, n = 1 + rand() % (S - 1);
    double c[32], r[32], gain[32];
    uint64_t bytes[32];
    size_t live[96];
    int desired[32], upto[32];
    for (int s = 0; s < S; s++) {
      c[s] = rand() % 3 == 0 ? 0.1 : (rand() % 100) / 10.0;
      r[s] = rand() % 3 == 0 ? 0 : (rand() % 100) / 10.0;
      bytes[s] = r[s] > 0 ? (uint64_t)(1 + rand() % 50) : 0;
      gain[s] = r[s];
    }
    for (int t = 0; t < 3 * S; t++)
      live[t] = (size_t)(rand() % 100);
    size_t target = 60 + (size_t)(rand() % 80);
    assert_true(nto_lookahead_frontier(S, n, c, r, -1, desired) >= 0);
    int moved =
        nto_lookahead_fit(S, n, desired, live, bytes, gain, target, upto);
    assert_true(moved >= 0);
    moved_cases += moved > 0;
    expect_valid(upto, S, n, desired);
    /* the model's profile: step j of pass 1 enters at the first step a of
     * passes 0..1 whose frontier reaches it; held from 3a to 3(j - n) */
    size_t prof[96];
    for (int t = 0; t < 3 * S; t++)
      prof[t] = live[t];
    for (long j = S; j < 2L * S; j++) {
      long a = 0;
      while (upto[a % S] + (a / S) * S < j)
        a++;
      for (long t = 3 * a; t < 3 * (j - n); t++)
        prof[t % (3 * S)] += (size_t)bytes[j - S];
    }
    for (int t = 0; t < 3 * S; t++)
      if (prof[t] > live[t] && prof[t] > target)
        fail_msg("case %d (S %d, n %d): instant %d holds %zu > %zu", it, S, n,
                 t, prof[t], target);
  }
  assert_true(moved_cases > 30);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain_when_reads_fit),
      cmocka_unit_test(test_cheap_step_before_large_read),
      cmocka_unit_test(test_reads_queue_behind_each_other),
      cmocka_unit_test(test_read_bound_and_zero_compute),
      cmocka_unit_test(test_random_passes_never_stall),
      cmocka_unit_test(test_fit_moves_where_room),
      cmocka_unit_test(test_fit_partial_and_followers),
      cmocka_unit_test(test_fit_across_the_wrap),
      cmocka_unit_test(test_fit_random_within_target),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

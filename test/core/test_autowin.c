/*
 * test_autowin.c - the adaptive window controller against simulated
 * iterations: it finds the smallest window that hides the reads (within an
 * eighth), shrinks to the minimum when reads cost nothing, never leaves
 * [min, max], settles on the fastest window when every window stalls,
 * grows again when the disk slows down, and does not move for one
 * marginal stall (a noisy machine) but grows by a quarter for two in a
 * row, judges an iteration that primed a new window only by a far stall,
 * and probes below a good window at the window that stalled last, less
 * often after every probe that stalled again. Budgeted (read-ahead by time
 * under a memory budget): it starts at max, halves only while stalling
 * and faster, settles on the fastest and measures max again once calm.
 */
#include "autowin.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* A simulated disk: windows below `need` stall 30% of a 100 ms
 * iteration with the I/O threads busy (with `latency`: busy only `busy`
 * of it, the stall coming from reads started too late rather than from
 * the disk's bandwidth); from `need` on nothing stalls and the I/O
 * threads are busy `busy` of the iteration. */
typedef struct sim {
  int need;
  double busy;
  int latency;
} sim;

static nto_autowin_sample measure(const sim *d, int n) {
  nto_autowin_sample s = {n, 100.0, 0, 0, 100.0};
  if (n < d->need) {
    s.stall_ms = 30.0;
    s.io_busy_ms = d->latency ? d->busy * 100.0 : 95.0;
    s.full_ms = 130.0;
  } else {
    s.io_busy_ms = d->busy * 100.0;
  }
  return s;
}

/* Run `iters` iterations; returns the first iteration (1-based) from which
 * the window stays at `want` until the end, or 0. */
static int converge(nto_autowin *c, const sim *d, int iters, int want) {
  int from = 0;
  for (int i = 1; i <= iters; i++) {
    nto_autowin_sample s = measure(d, c->n);
    int next = nto_autowin_next(c, &s);
    assert_true(next >= c->min && next <= c->max);
    if (next == want && from == 0)
      from = i;
    else if (next != want)
      from = 0;
  }
  return from;
}

/* Run `iters` iterations on d from the window before, `prev`; counts the
 * probes (moves from a good window to one below d->need) into *probes and
 * the iterations run below d->need into *stalled. With probe_at > 0, every
 * window below d->need must be probe_at. */
static void count_probes(nto_autowin *c, const sim *d, int iters, int prev,
                         int probe_at, int *probes, int *stalled) {
  *probes = *stalled = 0;
  for (int i = 0; i < iters; i++) {
    nto_autowin_sample s = measure(d, c->n);
    *stalled += c->n < d->need;
    int next = nto_autowin_next(c, &s);
    *probes += next < d->need && prev >= d->need;
    if (probe_at > 0 && next < d->need)
      assert_int_equal(next, probe_at);
    prev = next;
  }
}

/* The smallest window without stalls is found, and kept, in a number of
 * iterations logarithmic in it (doubling, then bisection); bisection stops
 * within an eighth of it (need <= N <= need + need / 8). */
static void test_finds_smallest_window(void **state) {
  (void)state;
  const int needs[] = {1, 2, 3, 5, 8, 13, 40, 50, 64};
  for (size_t i = 0; i < sizeof needs / sizeof *needs; i++) {
    nto_autowin c;
    nto_autowin_init(&c, 1, 64);
    sim d = {needs[i], 0.9, 0}; /* busy I/O: no reason to shrink */
    int from = 0, settled = 0;
    for (int it = 1; it <= 40; it++) {
      int n = c.n;
      nto_autowin_sample s = measure(&d, n);
      int next = nto_autowin_next(&c, &s);
      if (next == n && from == 0)
        from = it;
      else if (next != n)
        from = 0;
      settled = next;
    }
    assert_true(from > 0);
    assert_true(from <= 14); /* 2 * log2(64) + 2 */
    assert_true(settled >= needs[i] && settled <= needs[i] + needs[i] / 8);
    if (needs[i] <= 8)
      assert_int_equal(settled, needs[i]); /* exact for small windows */
  }
  /* 45 stalls, 50 does not: 50 - 45 <= 50 / 8, so 50 stays (no probe of
   * 47, whose priming would cost more than its memory saves) */
  nto_autowin c;
  nto_autowin_init(&c, 1, 64);
  nto_autowin_sample stall = {45, 100.0, 30.0, 95.0, 130.0};
  nto_autowin_sample good = {50, 100.0, 0.0, 95.0, 100.0};
  nto_autowin_next(&c, &stall);
  assert_int_equal(nto_autowin_next(&c, &good), 50);
  good.window = 60; /* 60 - 45 > 60 / 8: bisects */
  assert_int_equal(nto_autowin_next(&c, &good), 52);
}

/* Noise: at the good window in use, one stall of at most two targets
 * (here 7% against 5%) between good iterations does not move the window;
 * two in a row do (the disk got slower: a quarter more), and so does one
 * stall beyond two targets. */
static void test_forgives_one_marginal_stall(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 64);
  sim d = {13, 0.9, 0};
  assert_true(converge(&c, &d, 20, 13) > 0);
  for (int i = 0; i <= 20; i++) { /* every other one stalls 7%, the last not */
    nto_autowin_sample s = measure(&d, c.n);
    s.stall_ms = i % 2 ? 7.0 : 0.0;
    assert_int_equal(nto_autowin_next(&c, &s), 13);
  }
  nto_autowin_sample s = measure(&d, c.n);
  s.stall_ms = 7.0;
  assert_int_equal(nto_autowin_next(&c, &s), 13); /* forgiven */
  assert_int_equal(nto_autowin_next(&c, &s), 17); /* twice: grows by 1/4 */
  /* 13 is now the largest window seen stalling: back to just above it */
  assert_true(converge(&c, &d, 20, 14) > 0);
  s = measure(&d, c.n);
  s.stall_ms = 11.0; /* beyond two targets: grows at once */
  assert_true(nto_autowin_next(&c, &s) > 14);
}

/* An iteration that primed a new window (full_ms 0) is judged only when
 * it stalled beyond 4 targets; otherwise the window stays for a steady
 * iteration to decide. */
static void test_judges_steady_iterations(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 64);
  nto_autowin_sample good = {20, 100.0, 0.0, 95.0, 100.0};
  assert_int_equal(nto_autowin_next(&c, &good), 20);
  nto_autowin_sample primed = {10, 100.0, 12.0, 95.0, 0.0};
  assert_int_equal(nto_autowin_next(&c, &primed), 10); /* not judged */
  nto_autowin_sample steady = {10, 100.0, 12.0, 95.0, 112.0};
  assert_int_equal(nto_autowin_next(&c, &steady), 15); /* bisects 10..20 */
  primed.window = 15;
  primed.stall_ms = 30.0; /* beyond 4 targets: judged at once */
  assert_int_equal(nto_autowin_next(&c, &primed), 17);
}

/* With read-ahead by time, a growth must pay: the priming iteration after
 * it is not judged (not even for a far stall), and when the steady one
 * still stalls with its stall fraction cut by less than
 * NTO_AUTOWIN_RESPONSE, N goes back and settles there. One that pays
 * grows on. Without by_time the same samples make N grow on. */
static void test_growth_must_pay_by_time(void **state) {
  (void)state;
  for (int by_time = 0; by_time < 2; by_time++) {
    for (int pays = 0; pays < 2; pays++) {
      nto_autowin c;
      nto_autowin_init(&c, 1, 64);
      c.by_time = by_time;
      nto_autowin_sample s1 = {1, 100.0, 16.0, 90.0, 100.0};
      assert_int_equal(nto_autowin_next(&c, &s1), 2); /* 16%: grows 2x */
      nto_autowin_sample primed = {2, 100.0, 30.0, 90.0, 0.0};
      int after = nto_autowin_next(&c, &primed); /* far (30%) */
      assert_int_equal(after, by_time ? 2 : 8);
      if (!by_time)
        continue; /* judged at once: grew 4x */
      /* 16% -> 12.5%: a cut of 22%, not 25%; 16% -> 11.9%: 26% */
      nto_autowin_sample s2 = {2, 100.0, pays ? 11.9 : 12.5, 90.0, 100.0};
      assert_int_equal(nto_autowin_next(&c, &s2), pays ? 4 : 1);
      if (pays)
        continue;
      for (int i = 0; i < 5; i++) /* settled: it stays while it stalls */
        assert_int_equal(nto_autowin_next(&c, &s1), 1);
      nto_autowin_sample good = {1, 100.0, 0.0, 90.0, 100.0};
      assert_int_equal(nto_autowin_next(&c, &good), 1);
      assert_int_equal(nto_autowin_next(&c, &s1), 2); /* grows again */
    }
  }
}

/* With free reads (no stall, idle I/O) a large window shrinks to min. */
static void test_shrinks_when_reads_are_free(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 64);
  sim slow = {32, 0.9, 0}, free_reads = {1, 0.0, 0};
  assert_true(converge(&c, &slow, 20, 32) > 0);
  int from = converge(&c, &free_reads, 20, 1);
  assert_true(from > 0 && from <= 8);
  assert_int_equal(c.n, 1);
  /* free reads, yet windows below 6 stall (reads issued too late): after
   * the first probe stalls, the next ones wait too, not one every few
   * iterations */
  nto_autowin_init(&c, 1, 64);
  sim late = {6, 0.05, 1};
  int probes, stalled;
  count_probes(&c, &late, 100, 0, 0, &probes, &stalled);
  /* the search (1, 4, 16), its bisection (8, 4), the free probe at once
   * (6 to 3), a bisection step to 5 (not measured before), then probes of
   * 5 that wait 20 and 40 iterations; each one iteration (a far stall),
   * never a walk back up through the windows in between */
  assert_in_range(probes, 2, 5);
  assert_int_equal(stalled, probes + 2); /* + the search's 1 and 4 */
  assert_true(c.n >= late.need && c.n <= late.need + 1);
}

/* Small windows stall while the I/O threads idle (ResNet-18 b32 within
 * 64 MiB: 8-12% stall at N = 2-3, I/O busy 25%): the good window is
 * probed below again, at the window that stalled last, and every probe
 * that stalls doubles the wait for the next one: over 320 iterations 4
 * probes cost 4 stalled iterations. A disk that got faster is still found
 * by the next probe, which resets the wait. */
static void test_probes_back_off(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 64);
  sim d = {5, 0.2, 1};
  assert_true(converge(&c, &d, 16, 5) > 0);
  int probes, stalled; /* each probe at 4, the window that stalled last */
  count_probes(&c, &d, 320, c.n, d.need - 1, &probes, &stalled);
  /* waits of 10, 20, 40, 80, 160 iterations: probes at about iterations
   * 11, 32, 73, 154 and 315, 4 of them here (without the backoff: 24),
   * each one iteration at window 4, the one that stalled last (far beyond
   * the target: judged at once), then straight back to 5 */
  assert_in_range(probes, 3, 5);
  assert_in_range(stalled, probes - 1, probes);
  assert_int_equal(c.n, 5);
  assert_true(c.reprobe >= 8 * NTO_AUTOWIN_REPROBE);
  /* the disk gets faster: window 2 suffices; the next probe finds it
   * (within the longest wait) and its success resets the wait */
  d.need = 2;
  int i = 0;
  while (c.n != 2 && i++ < NTO_AUTOWIN_REPROBE_MAX + 10) {
    nto_autowin_sample s = measure(&d, c.n);
    nto_autowin_next(&c, &s);
  }
  assert_int_equal(c.n, 2);
  nto_autowin_sample s = measure(&d, 2);
  nto_autowin_next(&c, &s);
  assert_int_equal(c.reprobe, NTO_AUTOWIN_REPROBE);
  assert_true(converge(&c, &d, 40, 2) > 0);
}

/* Whatever the measurements, the window stays within [min, max]. */
static void test_bounds(void **state) {
  (void)state;
  uint64_t x = 12345;
  for (int round = 0; round < 20; round++) {
    nto_autowin c;
    int min = 1 + round % 3, max = min + round % 7;
    nto_autowin_init(&c, min, max);
    for (int i = 0; i < 200; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      nto_autowin_sample s = {c.n, 10.0 + (double)(x >> 60),
                              (double)((x >> 40) & 15),
                              (double)((x >> 20) & 31), (double)(x >> 61)};
      int n = nto_autowin_next(&c, &s);
      assert_true(n >= min && n <= max);
    }
  }
}

/* Storage slower than compute at every window: the controller grows to
 * max, then settles on the window whose iterations were fastest. */
static void test_settles_on_fastest(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 16);
  for (int i = 0; i < 30; i++) {
    int n = c.n;
    /* time falls until N = 8, then rises (memory pressure, say) */
    double t = 200.0 + 10.0 * (n > 8 ? n - 8 : 8 - n);
    nto_autowin_sample s = {n, t, 0.15 * t, t, t}; /* 1, 2, 4, 8, 16 */
    nto_autowin_next(&c, &s);
  }
  assert_int_equal(c.n, 8);
}

/* Settling among noisy times: within NTO_AUTOWIN_TIE of the fastest, the
 * largest window wins (the README's run: 1: 2389, 4: 1919, 8: 2166,
 * 11: 2226 ms, every one stalling 8-20%). */
static void test_settle_ties_go_to_larger(void **state) {
  (void)state;
  for (int close = 0; close < 2; close++) {
    nto_autowin c;
    nto_autowin_init(&c, 1, 11);
    for (int i = 0; i < 12; i++) {
      int n = c.n;
      double t = n == 1   ? 2389
                 : n == 2 ? 2300
                 : n == 4 ? 1919
                 : n == 8 ? 2166
                 : close  ? 2150
                          : 2226; /* 11: tied with 4 or not */
      nto_autowin_sample s = {n, t, 0.10 * t, t, t};
      nto_autowin_next(&c, &s);
    }
    /* 1919 * 1.15 = 2206.9: 8 is tied; 11 only when close */
    assert_int_equal(c.n, close ? 11 : 8);
  }
}

/* A window that was good starts to stall (the disk slowed down): the
 * controller grows again. */
static void test_grows_again_when_disk_slows(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 64);
  sim fast = {4, 0.9, 0}, slow = {16, 0.9, 0};
  assert_true(converge(&c, &fast, 20, 4) > 0);
  assert_true(converge(&c, &slow, 20, 16) > 0);
}

/* Budgeted (read-ahead by time under a memory budget): one steady
 * iteration at the current window with iteration time t, stalling 15% or
 * 9% (below 2 targets: not a stall there). Returns the next window. */
static int budgeted_step(nto_autowin *c, double t, int stalls) {
  int n = c->n;
  nto_autowin_sample s = {n, t, (stalls ? 0.15 : 0.09) * t, 0.5 * t, t};
  return nto_autowin_next(c, &s);
}

/* An iteration that primed a new window (full_ms 0), stalling 40%: never
 * judged, not even for a far stall. Returns the next window. */
static int budgeted_primed(nto_autowin *c) {
  nto_autowin_sample p = {c->n, 100.0, 40.0, 90.0, 0.0};
  return nto_autowin_next(c, &p);
}

/* Budgeted: N starts at max and stays there while it does not stall by
 * more than 2 targets (9%: noise), whatever primed iterations show. */
static void test_budgeted_stays_at_max(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 12);
  nto_autowin_budgeted(&c);
  assert_int_equal(c.n, 12);
  assert_int_equal(budgeted_primed(&c), 12);
  for (int i = 0; i < 40; i++)
    assert_int_equal(budgeted_step(&c, 200.0, 0), 12);
}

/* Budgeted, every window stalling: N halves while each halving is
 * faster (12: 200, 6: 180, 3: 170 ms), goes back to the fastest when one
 * is not (1: 190 ms) and stays there, stalling. */
static void test_budgeted_halves_while_faster(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 12);
  nto_autowin_budgeted(&c);
  const int path[] = {12, 6, 3, 1, 3};
  for (int k = 0; k < 4; k++) {
    assert_int_equal(c.n, path[k]);
    assert_int_equal(budgeted_primed(&c), path[k]);
    int n = c.n;
    double t = n == 12 ? 200.0 : n == 6 ? 180.0 : n == 3 ? 170.0 : 190.0;
    assert_int_equal(budgeted_step(&c, t, 1), path[k + 1]);
  }
  for (int i = 0; i < 40; i++)
    assert_int_equal(budgeted_step(&c, 170.0, 1), 3);
}

/* Budgeted: a halving faster by less than NTO_AUTOWIN_TIE_BUDGETED
 * (200 -> 196 ms) does not pay: back to the larger window, which then
 * stays although it stalls; 190 ms (5% faster) pays. */
static void test_budgeted_tie_goes_to_larger(void **state) {
  (void)state;
  for (int pays = 0; pays < 2; pays++) {
    nto_autowin c;
    nto_autowin_init(&c, 1, 12);
    nto_autowin_budgeted(&c);
    assert_int_equal(budgeted_step(&c, 200.0, 1), 6);
    assert_int_equal(budgeted_step(&c, pays ? 190.0 : 196.0, !pays),
                     pays ? 6 : 12);
    for (int i = 0; i < 20; i++)
      assert_int_equal(budgeted_step(&c, 200.0, 1), pays ? 6 : 12);
  }
}

/* Budgeted, settled below max: after NTO_AUTOWIN_REPROBE steady
 * iterations in a row without a stall (one stall restarts the count), N
 * goes back to max and measures again; there, without a stall, it
 * stays. */
static void test_budgeted_measures_again(void **state) {
  (void)state;
  nto_autowin c;
  nto_autowin_init(&c, 1, 12);
  nto_autowin_budgeted(&c);
  assert_int_equal(budgeted_step(&c, 200.0, 1), 6);
  assert_int_equal(budgeted_step(&c, 150.0, 0), 6); /* faster, settled */
  for (int i = 0; i < NTO_AUTOWIN_REPROBE - 1; i++)
    assert_int_equal(budgeted_step(&c, 150.0, 0), 6);
  assert_int_equal(budgeted_step(&c, 150.0, 1), 6); /* a stall: anew */
  for (int i = 0; i < NTO_AUTOWIN_REPROBE - 1; i++)
    assert_int_equal(budgeted_step(&c, 150.0, 0), 6);
  assert_int_equal(budgeted_step(&c, 150.0, 0), 12);
  assert_int_equal(budgeted_primed(&c), 12);
  for (int i = 0; i < 20; i++)
    assert_int_equal(budgeted_step(&c, 140.0, 0), 12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_finds_smallest_window),
      cmocka_unit_test(test_forgives_one_marginal_stall),
      cmocka_unit_test(test_judges_steady_iterations),
      cmocka_unit_test(test_growth_must_pay_by_time),
      cmocka_unit_test(test_shrinks_when_reads_are_free),
      cmocka_unit_test(test_probes_back_off),
      cmocka_unit_test(test_bounds),
      cmocka_unit_test(test_settles_on_fastest),
      cmocka_unit_test(test_settle_ties_go_to_larger),
      cmocka_unit_test(test_grows_again_when_disk_slows),
      cmocka_unit_test(test_budgeted_stays_at_max),
      cmocka_unit_test(test_budgeted_halves_while_faster),
      cmocka_unit_test(test_budgeted_tie_goes_to_larger),
      cmocka_unit_test(test_budgeted_measures_again),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

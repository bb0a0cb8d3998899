/* lookahead.c - the compute-weighted read frontier. See lookahead.h. */
#include "lookahead.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PASSES 4 /* unrolled; pass 1 is kept (see below) */

/* Start of absolute step j of the unrolled passes (ms). */
static double t_abs(const double *T, int S, long j) {
  return (double)(j / S) * T[S] + T[j % S];
}

int nto_lookahead_frontier(int S, int n, const double *step_ms,
                           const double *read_ms, int max_ahead, int *upto) {
  if (n < 1)
    n = 1;
  if (n > S - 1)
    n = S - 1;
  long J = (long)PASSES * S;
  double *T = malloc((size_t)(S + 1) * sizeof *T);
  double *start = malloc((size_t)J * sizeof *start);
  long *issue = malloc((size_t)J * sizeof *issue);
  if (!T || !start || !issue) {
    free(T);
    free(start);
    free(issue);
    return NTO_ENOMEM;
  }
  double R = 0;
  T[0] = 0;
  for (int s = 0; s < S; s++) {
    T[s + 1] = T[s] + (step_ms[s] > 0 ? step_ms[s] : 0);
    R += read_ms[s] > 0 ? read_ms[s] : 0;
  }
  /* read-bound: scale the reads to the period (see lookahead.h) */
  double scale = R > T[S] ? (R > 0 ? T[S] / R : 0) : 1;
  /* ALAP from the far end; the last pass is not constrained by a next
   * one, so passes 0 and 1 are the settled ones and pass 1 is used. */
  double next = INFINITY;
  for (long j = J - 1; j >= 0; j--) {
    double r = read_ms[j % S] > 0 ? read_ms[j % S] * scale : 0;
    double fin = t_abs(T, S, j) < next ? t_abs(T, S, j) : next;
    start[j] = fin - r;
    next = start[j];
  }
  /* issue(j): the last step s <= j - n starting by start(j), and
   * s >= j - (S - 1); nondecreasing in j since start() is. */
  long s = 0;
  for (long j = 0; j < J; j++) {
    long hi = j - n, lo = j - (S - 1);
    if (hi < 0) { /* before the first step: unused */
      issue[j] = hi;
      continue;
    }
    while (s + 1 <= hi && t_abs(T, S, s + 1) <= start[j])
      s++;
    issue[j] = s < lo ? lo : s;
  }
  /* upto over pass 1: the last j whose issue step is <= s */
  int most = 0;
  long j = S;
  for (long a = S; a < 2L * S; a++) {
    while (j + 1 < J && issue[j + 1] <= a)
      j++;
    long u = j, cap = a + n + (max_ahead >= 0 ? max_ahead : S);
    if (u < a + n)
      u = a + n;
    if (u > a + S - 1)
      u = a + S - 1;
    if (u > cap)
      u = cap;
    upto[a - S] = (int)(u - S);
    if (u - a - n > most)
      most = (int)(u - a - n);
  }
  free(T);
  free(start);
  free(issue);
  return most;
}

/* ---- fitting a frontier into a memory target (nto_lookahead_fit) ---- */

typedef struct fit {
  int S;
  long *entry;  /* S: the step at whose start step j enters, counted
                   from the start of j's pass (negative: the previous
                   pass) */
  size_t *live; /* 3S: the modelled resident bytes, updated per move */
  const uint64_t *bytes;
  size_t target;
  long *mv_entry;   /* scratch, S: entries of the steps a move takes */
  uint64_t *mv_sum; /* scratch, S + 1: their bytes, prefix sums */
} fit;

static long floor_div(long a, long b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* Entry step of step a of any pass (a counted from the start of pass 0). */
static long entry_at(const fit *f, long a) {
  long q = floor_div(a, f->S);
  return f->entry[a - q * f->S] + q * f->S;
}

/* The steps that entering step j (of pass 0) at step e takes along: j and
 * the steps before it that enter after e, latest first, into mv_*;
 * returns their count. Entries are nondecreasing, so they are a run. */
static int gather_move(fit *f, int j, long e) {
  int m = 0;
  f->mv_sum[0] = 0;
  for (long a = j; a > (long)j - f->S && entry_at(f, a) > e; a--, m++) {
    long q = floor_div(a, f->S);
    f->mv_entry[m] = entry_at(f, a);
    f->mv_sum[m + 1] = f->mv_sum[m] + f->bytes[a - q * f->S];
  }
  return m;
}

static size_t *live_at(const fit *f, long t) {
  long T = 3L * f->S, q = floor_div(t, T);
  return &f->live[t - q * T];
}

/* Moving the m gathered steps' entries to step e: over the instants
 * [3e, 3 * entry of j), at instant t the steps whose old entry is after t
 * add their bytes (a prefix of the run, since the entries fall along it).
 * apply == 0: does every instant stay within the target? apply == 1: add
 * the bytes to the profile and set the entries (j: the run's first step);
 * returns 1. */
static int sweep_move(fit *f, int j, int m, long e, int apply) {
  int k = m;
  for (long t = 3 * e; t < 3 * f->mv_entry[0]; t++) {
    while (k > 0 && 3 * f->mv_entry[k - 1] <= t)
      k--;
    if (!apply && *live_at(f, t) + f->mv_sum[k] > f->target)
      return 0;
    if (apply)
      *live_at(f, t) += f->mv_sum[k];
  }
  for (int i = 0; apply && i < m; i++) {
    long a = (long)j - i, q = floor_div(a, f->S);
    f->entry[a - q * f->S] = e - q * f->S;
  }
  return 1;
}

typedef struct fit_cand {
  double gain;
  int j;
} fit_cand;

static int by_gain(const void *pa, const void *pb) {
  const fit_cand *a = pa, *b = pb;
  if (a->gain != b->gain)
    return a->gain > b->gain ? -1 : 1;
  return a->j - b->j;
}

int nto_lookahead_fit(int S, int n, const int *desired, const size_t *live,
                      const uint64_t *enter_bytes, const double *gain,
                      size_t target, int *upto) {
  if (n < 1)
    n = 1;
  if (n > S - 1)
    n = S - 1;
  fit f = {.S = S, .bytes = enter_bytes, .target = target};
  long *want = malloc((size_t)S * sizeof *want);
  fit_cand *cand = malloc((size_t)S * sizeof *cand);
  f.entry = malloc((size_t)S * sizeof *f.entry);
  f.live = malloc(3 * (size_t)S * sizeof *f.live);
  f.mv_entry = malloc((size_t)S * sizeof *f.mv_entry);
  f.mv_sum = malloc(((size_t)S + 1) * sizeof *f.mv_sum);
  int rc = want && cand && f.entry && f.live && f.mv_entry && f.mv_sum
               ? 0
               : NTO_ENOMEM;
  if (rc == 0) {
    memcpy(f.live, live, 3 * (size_t)S * sizeof *f.live);
    /* desired entry of step j of pass 1: the first step s (of passes 0
     * and 1) whose frontier reaches it, within [j - S + 1, j - n] */
    long s = 0;
    for (long j = S; j < 2L * S; j++) {
      while (s < j - n && desired[s % S] + (s / S) * S < j)
        s++;
      want[j - S] = (s < j - S + 1 ? j - S + 1 : s) - S;
      f.entry[j - S] = j - S - n;
    }
    int nc = 0;
    for (int j = 0; j < S; j++)
      if (gain[j] > 0 && want[j] < f.entry[j])
        cand[nc++] = (fit_cand){gain[j], j};
    qsort(cand, (size_t)nc, sizeof *cand, by_gain);
    for (int c = 0; c < nc; c++) {
      /* the run entering at want[j]; a later entry takes a prefix of it */
      int j = cand[c].j, m = gather_move(&f, j, want[j]);
      for (long e = want[j]; e < f.entry[j]; e++) {
        while (m > 0 && f.mv_entry[m - 1] <= e)
          m--;
        if (sweep_move(&f, j, m, e, 0)) {
          sweep_move(&f, j, m, e, 1);
          break;
        }
      }
    }
    for (int t = 0; t < S; t++) {
      long u = t + n;
      while (u + 1 <= (long)t + S - 1 && entry_at(&f, u + 1) <= t)
        u++;
      upto[t] = (int)u;
    }
    for (int j = 0; j < S; j++)
      rc += f.entry[j] < j - n;
  }
  free(want);
  free(cand);
  free(f.entry);
  free(f.live);
  free(f.mv_entry);
  free(f.mv_sum);
  return rc;
}

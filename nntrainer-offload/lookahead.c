/* lookahead.c - the compute-weighted read frontier. See lookahead.h. */
#include "lookahead.h"

#include <math.h>
#include <stdlib.h>

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

/* autowin.c - the adaptive window controller. See autowin.h. */
#include "autowin.h"

#include <string.h>

static int clamp(const nto_autowin *c, int n) {
  return n < c->min ? c->min : n > c->max ? c->max : n;
}

void nto_autowin_init(nto_autowin *c, int min, int max) {
  memset(c, 0, sizeof *c);
  c->max = max < 1 ? 1 : max;
  c->min = min < 1 ? 1 : min > c->max ? c->max : min;
  c->n = c->min;
  c->reprobe = NTO_AUTOWIN_REPROBE;
  c->target = 0.05;
  c->idle = 0.5;
}

/* Remember the iteration time of window n (the latest one counts). */
static void remember(nto_autowin *c, int n, double ms) {
  for (int i = 0; i < c->n_tried; i++)
    if (c->tried_n[i] == n) {
      c->tried_ms[i] = ms;
      return;
    }
  int i = c->n_tried < NTO_AUTOWIN_TRIED ? c->n_tried++ : n % NTO_AUTOWIN_TRIED;
  c->tried_n[i] = n;
  c->tried_ms[i] = ms;
}

/* The measured window with the shortest iteration, or the largest one
 * within a fraction tie of it (autowin.h). */
static int fastest(const nto_autowin *c, double tie) {
  double best_ms = -1;
  for (int i = 0; i < c->n_tried; i++)
    if (best_ms < 0 || c->tried_ms[i] < best_ms)
      best_ms = c->tried_ms[i];
  int best = c->n_tried ? 0 : c->n;
  for (int i = 0; i < c->n_tried; i++)
    if (c->tried_ms[i] <= best_ms * (1.0 + tie) && c->tried_n[i] > best)
      best = c->tried_n[i];
  return best;
}

/* far: the stall was more than 4 targets (grow 4x instead of 2x);
 * a good window that now stalls less than that grows by a quarter. */
static int after_stall(nto_autowin *c, int n, int far) {
  int was_good = c->hi == n, probe = c->probing;
  if (probe) { /* no good window below the probe's start: back off */
    c->probing = 0;
    c->reprobe = 2 * c->reprobe < NTO_AUTOWIN_REPROBE_MAX
                     ? 2 * c->reprobe
                     : NTO_AUTOWIN_REPROBE_MAX;
  }
  if (!probe || n > c->lo) /* a probe keeps the larger window it knew */
    c->lo = n;
  c->since_lo = 0;
  if (c->hi && c->hi <= n)
    c->hi = 0; /* it stalls now: conditions changed */
  if (c->settled)
    return n;
  if (probe && c->hi)
    return c->hi; /* nothing changed: straight back to the good window */
  if (c->hi)
    return c->hi > c->lo + 1 ? c->lo + (c->hi - c->lo) / 2 : c->hi;
  if (n < c->max && was_good && !far)
    return n + (n + 3) / 4 < c->max ? n + (n + 3) / 4 : c->max;
  if (n < c->max) {
    int grow = far ? 4 : 2;
    return n <= c->max / grow ? n * grow : c->max;
  }
  c->settled = 1; /* slower than compute at every window we may use */
  return fastest(c, NTO_AUTOWIN_TIE);
}

/* idled: the I/O threads were busy less than `idle` of the iteration;
 * free: less than a fifth of that (reads cost next to nothing). */
static int after_good(nto_autowin *c, int n, int idled, int free) {
  c->settled = 0;
  if (!c->hi || n < c->hi)
    c->hi = n;
  if (c->lo >= n)
    c->lo = n - 1;
  if (c->probing && n < c->probing) { /* found a smaller good window */
    c->probing = 0;
    c->reprobe = NTO_AUTOWIN_REPROBE;
    c->lo = 0; /* what stalled before no longer does: bisect below */
  }
  /* a stalling window seen long ago may not stall any more: probe it
   * again; with free reads at once, halfway down, until a probe stalled */
  int now = free && c->reprobe == NTO_AUTOWIN_REPROBE;
  if (idled && c->lo >= c->min && (now || c->since_lo >= c->reprobe)) {
    c->probing = n;
    int to = now ? n / 2 : c->lo;
    return to > c->min ? to : c->min;
  }
  int floor = c->lo + 1 > c->min ? c->lo + 1 : c->min;
  if (c->lo > 0 && n - c->lo <= n / 8)
    return n; /* close enough to the smallest good window */
  if (n > floor && (idled || c->lo > 0)) { /* bisect towards lo */
    int mid = c->lo + (n - c->lo) / 2;
    return mid > floor ? mid : floor;
  }
  return n;
}

void nto_autowin_budgeted(nto_autowin *c) {
  c->by_time = 1;
  c->budgeted = 1;
  c->n = c->max;
}

/* The budgeted rule (autowin.h) after a steady iteration at window n. */
static int budgeted_next(nto_autowin *c, int n, int stalled) {
  if (c->settled) {
    c->calm = stalled ? 0 : c->calm + 1;
    if (n < c->max && c->calm >= NTO_AUTOWIN_REPROBE) {
      c->settled = 0; /* measure again from max */
      c->n_tried = 0;
      c->calm = 0;
      return c->max;
    }
    return n;
  }
  int best = fastest(c, NTO_AUTOWIN_TIE_BUDGETED);
  if (best == n && stalled && n > c->min)
    return n / 2 > c->min ? n / 2 : c->min;
  c->settled = 1; /* no stall, the floor, or the halving did not pay */
  c->calm = 0;
  return best;
}

int nto_autowin_next(nto_autowin *c, const nto_autowin_sample *s) {
  int n = clamp(c, s->window);
  if (c->budgeted) {
    /* only steady iterations are judged */
    if (s->full_ms > 0) {
      double it = s->iteration_ms > 0 ? s->iteration_ms : 0;
      remember(c, n, s->full_ms);
      n = clamp(c, budgeted_next(c, n, s->stall_ms > 2 * c->target * it));
    }
    c->n = n;
    return n;
  }
  double it = s->iteration_ms > 0 ? s->iteration_ms : 0;
  if (s->full_ms > 0)
    remember(c, n, s->full_ms);
  int stalled = s->stall_ms > c->target * it;
  int idled = s->io_busy_ms < c->idle * it;
  int free = s->io_busy_ms < 0.2 * c->idle * it;
  c->since_lo++;
  int far = s->stall_ms > 4 * c->target * it;
  /* after a change of N the part after the priming reads looks better
   * than the steady state (the priming read ahead for it): only a far
   * stall is judged there, else the next, steady iteration decides; by
   * time it looks worse and is never judged */
  if (s->full_ms <= 0 && (!far || c->by_time)) {
    c->n = n;
    return n;
  }
  double frac = it > 0 ? s->stall_ms / it : 0;
  int from = c->grown_from;
  c->grown_from = 0;
  if (from && from < n && stalled &&
      frac > (1.0 - NTO_AUTOWIN_RESPONSE) * c->grown_stall) {
    c->settled = 1; /* the growth did not pay: back, and stay */
    c->forgiven = 0;
    c->n = clamp(c, from);
    return c->n;
  }
  /* a marginal stall at the good window in use: forgiven once */
  int marginal = stalled && n == c->hi && s->stall_ms <= 2 * c->target * it;
  if (marginal && !c->forgiven) {
    c->forgiven = 1;
    c->n = n;
    return n;
  }
  c->forgiven = 0;
  c->n = clamp(c, stalled ? after_stall(c, n, far)
                          : after_good(c, n, idled, free));
  if (c->by_time && stalled && c->n > n && s->full_ms > 0) {
    c->grown_from = n; /* judged at the next steady iteration */
    c->grown_stall = frac;
  }
  return c->n;
}

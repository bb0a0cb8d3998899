/*
 * autowin.h - the adaptive window (--window auto): after every training
 * iteration, choose the window N of the next one from what the last one
 * measured.
 *
 * Goal: executor stall below `target` (5%) of the iteration time at the
 * smallest N that achieves it, within [min, max] (max: the largest window
 * the memory budget allows). Rules, per measured iteration at window N:
 *   - stalled (stall > target * iteration): N is too small (lo = N). Next:
 *     while no good N is known, double N, or quadruple it when the stall
 *     exceeded 4 targets (capped at max); else bisect between lo and the
 *     smallest good N (hi). A good N that stalls later (the disk got
 *     slower) is forgotten, but not for one marginal stall: at the good N
 *     in use, a stall of at most 2 targets is forgiven once (the next
 *     iteration decides), since a shared machine's noise alone moves the
 *     stall by a few percent and every change of N pays its priming. A
 *     good N forgotten for a stall of at most 4 targets grows by a
 *     quarter (rounded up), not twofold.
 *   - not stalled: N is good (hi = N). If a stalling N below is known
 *     and N > lo + 1, bisect between lo and N (doubling overshoots);
 *     bisection stops once N - lo <= N / 8 (N stays: within an eighth of
 *     the smallest good window, for a change of N costs more than the
 *     memory it would save). If
 *     the I/O threads idled (busy less than `idle` of the iteration),
 *     shrink the same way; the stalling N known is then probed again
 *     when it is NTO_AUTOWIN_REPROBE iterations old (N goes to that
 *     window; if it no longer stalls, bisection goes on below it), or
 *     forgotten at once when the reads cost next to nothing (busy below a
 *     fifth of `idle`; until a probe has stalled), so that a disk that
 *     got faster is noticed. A
 *     probe that stalls before it finds a good window smaller than the
 *     one it started from goes straight back to that window and doubles
 *     the age (up to NTO_AUTOWIN_REPROBE_MAX); one that finds it resets
 *     it. (The stall at small windows need not come from a busy disk: a
 *     window can stall while the I/O threads count as idle, and without
 *     the backoff every probe would walk down into it again.) Otherwise
 *     stay.
 *   - at max and still stalled (storage slower than compute at any
 *     window): settle on the window with the shortest iteration measured
 *     so far and stay there; windows within NTO_AUTOWIN_TIE of that time
 *     count as tied and the largest of them wins (it stalls least and
 *     moves the fewest bytes, and one iteration on a shared host varies
 *     by that much).
 * Growing geometrically then bisecting reaches the smallest good N in
 * O(log max) iterations.
 * With read-ahead by time (`by_time`), the window is not what reads ahead:
 * the frontier (lookahead.h) starts each step's reads as early as the
 * measured times ask, beyond the window. A larger window then only holds
 * more, so a growth must pay: when the first steady iteration after a
 * growth from window g (decided on a steady iteration) still stalls, and
 * its stall fraction did not fall by NTO_AUTOWIN_RESPONSE of g's, N goes
 * back to g and settles there (as at max: it stays while it stalls; a
 * good iteration ends it). And an iteration that primed a new window is
 * never judged: after a drain the read-ahead catches up with the whole
 * frontier, so the part after the priming stalls more than the steady
 * state, not less (growths judged there climb without the stall
 * falling).
 * The first N steps after a window change wait for the
 * reads that prime the new window, which no window hides: the caller judges the
 * rest of that iteration (offload.h prime_ms, prime_stall_ms), but since
 * the priming read ahead for it, it looks better than the steady state
 * (ResNet-18 b10 at N = 52: 3% after the priming, 8-9% steady), so it
 * only counts when it stalled more than 4 targets; otherwise N stays and
 * the next, steady iteration is judged. Only steady iterations' times are
 * compared across windows.
 *
 * Under a memory budget the user gave (the tuner's choice: not the limit
 * the process lives under, which bounds it but is not memory to fill)
 * with read-ahead by time (`budgeted`, nto_autowin_budgeted) the goal is
 * the shortest iteration instead: the frontier is fitted into what the
 * budget leaves beside the window's region, so a smaller window saves no
 * peak memory; it only trades keeping (a larger window moves fewer
 * bytes) for read-ahead room. N
 * starts at max and stays there while it does not stall by more than 2
 * targets (a halving costs two primings and moves more bytes, and a
 * shared machine's noise alone moves the stall by a few percent; ResNet-18
 * b10 within 48M stalls 4-9% at every window on a fast disk). A stalling N
 * halves (down to min) while each halving gave a shorter steady iteration
 * than every larger window measured; as soon as one did not, N goes to
 * the window with the shortest iteration (the largest within
 * NTO_AUTOWIN_TIE_BUDGETED of it) and settles. Settled below max, N goes
 * back to max to measure again after NTO_AUTOWIN_REPROBE steady
 * iterations in a row without such a stall (the disk may have got
 * faster). Only steady iterations are judged. (There the stall controller
 * wandered between windows 1 and 4, priming at every change, and a plain
 * window 4 beat it in time at a lower peak.)
 *
 * Pure logic, no I/O, no allocation: any thread, one caller at a time.
 */
#ifndef NTO_AUTOWIN_H
#define NTO_AUTOWIN_H

#define NTO_AUTOWIN_TRIED 32 /* windows whose iteration time is kept */
/* iterations before a stalling window is probed again: at first, and at
 * most after probes that stalled (each doubles the wait) */
#define NTO_AUTOWIN_REPROBE 10
#define NTO_AUTOWIN_REPROBE_MAX 320
/* by_time: the fraction of the stall a growth must remove to pay */
#define NTO_AUTOWIN_RESPONSE 0.25
#define NTO_AUTOWIN_TIE                                                        \
  0.15 /* settling: iteration times within this                                \
          fraction of the fastest are tied */
/* budgeted: the same, where memory is not at stake (a larger window moves
 * fewer bytes; one iteration on a shared host varies by a few percent) */
#define NTO_AUTOWIN_TIE_BUDGETED 0.03

typedef struct nto_autowin {
  int min, max;   /* bounds of N, 1 <= min <= max */
  int n;          /* the window in use */
  int lo, hi;     /* largest N seen stalling, smallest seen good; 0: none */
  int since_lo;   /* iterations since lo was last seen stalling */
  int reprobe;    /* since_lo at which lo is probed (NTO_AUTOWIN_REPROBE,
                     doubled by every probe that stalled again) */
  int probing;    /* a probe started at good window `probing` (lo was
                     forgotten) and has seen neither a stall nor a smaller
                     good window since; 0: no probe */
  int settled;    /* stalled at max: stays on the largest window within
                     NTO_AUTOWIN_TIE of the fastest seen; or, by_time, on
                     the window a growth that did not pay came from */
  int forgiven;   /* the last iteration's marginal stall at hi was forgiven */
  int by_time;    /* read-ahead by time (set after nto_autowin_init; 0:
                     the window is the read-ahead) */
  int grown_from; /* by_time: N grew from this window on a steady
                     stall and has not been judged since; 0: none */
  double grown_stall; /* that iteration's stall fraction */
  int budgeted;       /* under a budget: the shortest iteration (above;
                         nto_autowin_budgeted sets it) */
  int calm;           /* budgeted, settled below max: steady iterations
                         in a row without a stall */
  double target;      /* stall fraction that counts as stalled (0.05) */
  double idle; /* I/O busy fraction below which the threads idled (0.5) */
  int n_tried;
  int tried_n[NTO_AUTOWIN_TRIED];     /* windows measured */
  double tried_ms[NTO_AUTOWIN_TRIED]; /* their last iteration time, ms */
} nto_autowin;

/* One measured training iteration (all in ms). */
typedef struct nto_autowin_sample {
  int window;          /* N it ran with */
  double iteration_ms; /* wall time of the part judged (after priming) */
  double stall_ms;     /* executor waiting for reads in that part */
  double io_busy_ms;   /* the busier I/O thread's busy time in it */
  double full_ms;      /* the whole iteration when it was steady (no
                          priming), else 0: compared across windows */
} nto_autowin_sample;

/* Start at min (clamped into [1, max]), targets 5% stall and 50% idle. */
void nto_autowin_init(nto_autowin *c, int min, int max);

/* Read-ahead by time under a memory budget: the goal becomes the
 * shortest iteration (see above) and N starts at max. Call after
 * nto_autowin_init, before the first nto_autowin_next. */
void nto_autowin_budgeted(nto_autowin *c);

/* The window for the next iteration after sample s (s->window is taken
 * as the current N). Always within [min, max]. */
int nto_autowin_next(nto_autowin *c, const nto_autowin_sample *s);

#endif /* NTO_AUTOWIN_H */

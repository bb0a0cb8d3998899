/*
 * window.h - residency decisions of the sliding window (single-threaded
 * logic, no I/O).
 *
 * With the executor at step s of a pass (plan.h), the window holds every
 * tensor used by steps s .. s+N-1, and the tensors of step s+N are being
 * read (a one-step lookahead, so that even N = 1 overlaps reads with
 * compute). The driver, for every step s of every pass, calls
 *   nto_window_enter(s + N)  (wrapping into the next pass), then runs s,
 *   then nto_window_leave(s),
 * after priming with nto_window_enter(0 .. N-1). Entering before leaving
 * keeps tensors shared by s and s+N resident: the turnaround (last forward,
 * first backward) costs no I/O. Each call returns the actions it decided:
 *
 *   enter: a tensor whose window reference count goes 0 -> 1 is
 *     SWAPPED  -> LOAD    (read it from the swap file)
 *     NONE     -> ALLOC   (no content yet: a buffer, zero-filled when the
 *                          tensor is zero-initialized optimizer state)
 *     WRITING  -> RECLAIM (keep the buffer once its write completes)
 *   leave: a tensor the step wrote becomes dirty; one whose count goes to 0
 *     not needed later      -> FREE  (dead: no I/O)
 *     dirty                 -> WRITE (then its buffer is released)
 *     clean, swap copy current -> DROP (no I/O: e.g. weights in forward)
 *     still zero-initialized -> FREE, back to NONE (zero) without I/O
 *
 * Loads and writes complete later (nto_window_loaded / nto_window_written),
 * possibly on other threads: callers serialize all calls on one window
 * with their own lock. schedule.h runs this logic ahead of time with
 * modelled I/O and records its decisions.
 */
#ifndef NTO_WINDOW_H
#define NTO_WINDOW_H

#include "plan.h"

#include <stddef.h>
#include <stdint.h>

/* Residency of one tensor as the window sees it. */
typedef enum {
  NTO_WS_NONE,     /* no content (not yet produced, dead, or zero-init) */
  NTO_WS_RESIDENT, /* in RAM */
  NTO_WS_SWAPPED,  /* content only in the swap file */
  NTO_WS_LOADING,  /* LOAD or ALLOC issued, not complete */
  NTO_WS_WRITING,  /* WRITE issued, not complete */
} nto_wstate;

typedef enum {
  NTO_ACT_LOAD,
  NTO_ACT_ALLOC,
  NTO_ACT_RECLAIM,
  NTO_ACT_WRITE,
  NTO_ACT_DROP,
  NTO_ACT_FREE,
} nto_act_kind;

typedef struct nto_act {
  nto_act_kind kind;
  int t;    /* tensor index */
  int zero; /* ALLOC: fill with zeros */
} nto_act;

typedef struct nto_window {
  const nto_plan *plan;   /* borrowed */
  int n;                  /* window N, 1 <= N <= S-1 */
  int *refcnt;            /* per tensor: window steps using it */
  unsigned char *state;   /* per tensor: nto_wstate */
  unsigned char *dirty;   /* per tensor: RAM copy newer than the swap copy */
  unsigned char *zero;    /* per tensor: content is all zeros, no swap copy */
  unsigned char *reclaim; /* per tensor: keep after the write */
} nto_window;

/*
 * Create a window of n steps over plan p (borrowed; must outlive w); n is
 * clamped to [1, S-1]. initial[t] (copied) is each tensor's starting
 * state: persistent tensors NTO_WS_SWAPPED (content in the swap file) or
 * NTO_WS_NONE with zero[t] = 1 (zero-initialized, e.g. optimizer state);
 * transient tensors NTO_WS_NONE. zero may be NULL. Returns 0 or
 * NTO_ENOMEM.
 */
int nto_window_init(nto_window *w, const nto_plan *p, int n,
                    const unsigned char *initial, const unsigned char *zero,
                    nto_err *err);
void nto_window_free(nto_window *w);

/*
 * Step s (0 <= s < S) enters the window. Appends at most
 * nto_plan_step_count(p, s) actions to acts, returns their number.
 */
int nto_window_enter(nto_window *w, int s, nto_act *acts);

/*
 * Step s has run and leaves the window: marks what it wrote dirty and
 * evicts tensors no longer used by the window. Appends at most
 * nto_plan_step_count(p, s) actions to acts; returns their number.
 */
int nto_window_leave(nto_window *w, int s, nto_act *acts);

/* A LOAD or ALLOC of t completed: t is RESIDENT (clean after a LOAD). */
void nto_window_loaded(nto_window *w, int t, nto_act_kind kind);

/* The WRITE of t completed. Returns 1 if t stays RESIDENT (reclaimed,
 * clean), 0 if its buffer must be released (t is SWAPPED). */
int nto_window_written(nto_window *w, int t);

#endif /* NTO_WINDOW_H */

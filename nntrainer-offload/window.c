/* window.c - residency decisions of the sliding window. See window.h. */
#include "window.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int nto_window_init(nto_window *w, const nto_plan *p, int n,
                    const unsigned char *initial, const unsigned char *zero,
                    nto_err *err) {
  memset(w, 0, sizeof *w);
  w->plan = p;
  int max_n = p->n_steps > 1 ? p->n_steps - 1 : 1;
  w->n = n < 1 ? 1 : n > max_n ? max_n : n;
  size_t nt = (size_t)(p->n_tensors ? p->n_tensors : 1);
  w->refcnt = calloc(nt, sizeof *w->refcnt);
  w->state = calloc(nt, 1);
  w->dirty = calloc(nt, 1);
  w->zero = calloc(nt, 1);
  w->reclaim = calloc(nt, 1);
  if (!w->refcnt || !w->state || !w->dirty || !w->zero || !w->reclaim) {
    nto_window_free(w);
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  memcpy(w->state, initial, (size_t)p->n_tensors);
  if (zero)
    memcpy(w->zero, zero, (size_t)p->n_tensors);
  return 0;
}

void nto_window_free(nto_window *w) {
  free(w->refcnt);
  free(w->state);
  free(w->dirty);
  free(w->zero);
  free(w->reclaim);
  memset(w, 0, sizeof *w);
}

/* Tensor t is needed by the window and was not: how it gets there. */
static int bring_in(nto_window *w, int t, nto_act *a) {
  switch ((nto_wstate)w->state[t]) {
  case NTO_WS_SWAPPED:
    *a = (nto_act){NTO_ACT_LOAD, t, 0};
    break;
  case NTO_WS_NONE:
    *a = (nto_act){NTO_ACT_ALLOC, t, w->zero[t]};
    break;
  case NTO_WS_WRITING:
    w->reclaim[t] = 1;
    *a = (nto_act){NTO_ACT_RECLAIM, t, 0};
    return 1;
  case NTO_WS_RESIDENT:
  case NTO_WS_LOADING:
    return 0;
  }
  w->state[t] = NTO_WS_LOADING;
  return 1;
}

int nto_window_enter(nto_window *w, int s, nto_act *acts) {
  const nto_plan *p = w->plan;
  int n = 0;
  for (int k = p->step_first[s]; k < p->step_first[s + 1]; k++) {
    int t = p->step_t[k];
    if (w->refcnt[t]++ == 0)
      n += bring_in(w, t, &acts[n]);
  }
  return n;
}

/* Tensor t (RESIDENT) left the window after step s: write, drop or free. */
static nto_act evict(nto_window *w, int t, int s) {
  const nto_plan *p = w->plan;
  if (!nto_plan_needed_after(p, t, s)) {
    w->state[t] = NTO_WS_NONE;
    w->dirty[t] = 0;
    w->zero[t] = 0;
    return (nto_act){NTO_ACT_FREE, t, 0};
  }
  if (w->dirty[t]) {
    w->state[t] = NTO_WS_WRITING;
    return (nto_act){NTO_ACT_WRITE, t, 0};
  }
  if (w->zero[t]) { /* still all zeros: re-created on the next ALLOC */
    w->state[t] = NTO_WS_NONE;
    return (nto_act){NTO_ACT_FREE, t, 0};
  }
  w->state[t] = NTO_WS_SWAPPED;
  return (nto_act){NTO_ACT_DROP, t, 0};
}

int nto_window_leave(nto_window *w, int s, nto_act *acts) {
  const nto_plan *p = w->plan;
  int n = 0;
  for (int k = p->step_first[s]; k < p->step_first[s + 1]; k++) {
    int t = p->step_t[k];
    assert(w->refcnt[t] > 0 && w->state[t] == NTO_WS_RESIDENT);
    if (p->step_mode[k] & NTO_USE_WRITE) {
      w->dirty[t] = 1;
      w->zero[t] = 0;
    }
    if (--w->refcnt[t] == 0)
      acts[n++] = evict(w, t, s);
  }
  return n;
}

void nto_window_loaded(nto_window *w, int t, nto_act_kind kind) {
  assert(w->state[t] == NTO_WS_LOADING);
  w->state[t] = NTO_WS_RESIDENT;
  if (kind == NTO_ACT_LOAD)
    w->dirty[t] = 0;
}

int nto_window_written(nto_window *w, int t) {
  assert(w->state[t] == NTO_WS_WRITING);
  w->dirty[t] = 0;
  w->zero[t] = 0;
  if (w->reclaim[t]) {
    w->reclaim[t] = 0;
    w->state[t] = NTO_WS_RESIDENT;
    return 1;
  }
  w->state[t] = NTO_WS_SWAPPED;
  return 0;
}

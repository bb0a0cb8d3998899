/*
 * plan.h - the static execution plan: which tensors every step uses.
 *
 * One pass over the model (a training iteration, or an inference pass) is a
 * fixed sequence of S steps; for training
 *   F_0 .. F_{L-1}, then B_{L-1} (U ...) .. B_0 (U ...)   (step F_i = i),
 * with the optimizer update of layer i fused into B_i, or split into U
 * steps after B_i for large weights (model.h). For every step the
 * plan lists the tensors it touches and how (read, write, both, or a hold), and
 * for every tensor the ordered steps that use it. From these lists the
 * residency window (window.h) answers every scheduling question: what to
 * prefetch next, whether a tensor's content is still needed (its next use
 * reads it, or it persists across passes), and whether it is dirty.
 *
 * Persistent tensors (weights, running statistics, optimizer state) carry
 * their content from one pass to the next; all other tensors are transient:
 * their first use in a pass writes them and their content is dead after
 * their last use.
 *
 * Building a plan: nto_plan_init, nto_plan_use for every (step, tensor)
 * access in any order, then nto_plan_finish. A plan is read-only afterwards
 * and may be read from any thread.
 */
#ifndef NTO_PLAN_H
#define NTO_PLAN_H

#include "error.h"

#include <stddef.h>

/* How a step accesses a tensor (bit set). HOLD: the step does not touch
 * the tensor but keeps it resident through itself (a short step between
 * two that use it), and is transparent to content (needed_after). */
enum { NTO_USE_READ = 1, NTO_USE_WRITE = 2, NTO_USE_RW = 3, NTO_USE_HOLD = 4 };

typedef struct nto_plan {
  int n_steps;   /* S */
  int n_tensors; /* size of the model's tensor table */
  /* Per step s: tensors step_t[step_first[s] .. step_first[s+1]) in
   * ascending tensor index, each once, with its access bits step_mode[]. */
  int *step_first; /* S + 1 */
  int *step_t;
  unsigned char *step_mode;
  /* Per tensor t: the steps use_step[use_first[t] .. use_first[t+1]) in
   * ascending order, with access bits use_mode[]. */
  int *use_first; /* n_tensors + 1 */
  int *use_step;
  unsigned char *use_mode;
  unsigned char *persistent; /* per tensor: content survives passes */
  size_t *bytes;             /* per tensor: buffer bytes (page-rounded) */
  /* builder state */
  int n_acc, cap_acc;
  struct nto_plan_acc *acc;
} nto_plan;

/*
 * Start a plan of n_steps steps over n_tensors tensors. bytes[t] (copied)
 * is tensor t's buffer size in bytes; persistent[t] (copied) is 1 for
 * tensors whose content survives passes. Returns 0 or NTO_ENOMEM.
 */
int nto_plan_init(nto_plan *p, int n_steps, int n_tensors, const size_t *bytes,
                  const unsigned char *persistent, nto_err *err);

/* Record that step s accesses tensor t with mode (NTO_USE_*). t < 0 is
 * ignored. Returns 0 or NTO_ENOMEM. */
int nto_plan_use(nto_plan *p, int s, int t, int mode);

/*
 * Build the per-step and per-tensor lists. Checks that every transient
 * tensor's first use writes it: NTO_EINVAL naming the tensor index and step
 * otherwise (a programming error in the plan builder). Returns 0,
 * NTO_EINVAL or NTO_ENOMEM.
 */
int nto_plan_finish(nto_plan *p, nto_err *err);

/* Holds of tensor t on the steps from .. to of a pass (to may be >= S:
 * the steps wrap into the next pass, from .. S-1 and 0 .. to-S). */
typedef struct nto_plan_hold {
  int t, from, to;
} nto_plan_hold;

/*
 * out = p (finished; borrowed) plus the n holds h[0..n): a new finished
 * plan with the same tensors and steps in which every step of h[i] also
 * holds h[i].t (a step that uses it already keeps its mode). Used to keep
 * a tensor resident through a gap between two uses (schedule.h). Returns
 * 0, NTO_EINVAL (a hold naming a bad tensor or step range) or NTO_ENOMEM;
 * out is zeroed on error.
 */
int nto_plan_add_holds(nto_plan *out, const nto_plan *p, const nto_plan_hold *h,
                       int n, nto_err *err);

/* Release the lists; p may be zeroed or half-built. */
void nto_plan_free(nto_plan *p);

/* Number of tensors step s uses. */
static inline int nto_plan_step_count(const nto_plan *p, int s) {
  return p->step_first[s + 1] - p->step_first[s];
}

/* First step after s (same pass) that uses t, or -1. */
int nto_plan_next_use(const nto_plan *p, int t, int s);

/* First and last step using t, or -1 when t is unused. */
int nto_plan_first_use(const nto_plan *p, int t);
int nto_plan_last_use(const nto_plan *p, int t);

/*
 * Is t's content needed after step s? Persistent tensors: always. Transient
 * tensors: when the next use after s in the same pass that reads or writes
 * t (holds are skipped) reads it (a next use that only writes overwrites
 * it whole).
 */
int nto_plan_needed_after(const nto_plan *p, int t, int s);

#endif /* NTO_PLAN_H */

/*
 * steps.h - the step order of a training iteration and of an inference
 * pass, and every tensor's uses in them (plan.h): the execution plan.
 * Step-order decisions live here.
 *
 * Training pass (S steps):
 *   F_0 .. F_{L-1}, then for i = L-1 .. 0: (R ...) B_i (U ...)
 * F_i runs layer i's forward (F_i is step i). B_i gathers dL/d(out of i)
 * from its consumers' edges (summed in consumer order into the first),
 * runs its backward and the optimizer update of its weights of one update
 * chunk; the loss is computed at the start of B_{L-1}. A weight of several
 * chunks (tensors.h) is updated in U steps right after B_i, one per chunk,
 * its gradient computed whole in B_i or by rows in each U step. An R step
 * writes a recomputed twin (tensors.h) right before the B step of its
 * first backward reader; R steps at one B step run in layer order
 * (producers first).
 *
 * Inference pass (L steps): F_0 .. F_{L-1}, the loss in F_{L-1}.
 *
 * Channel groups (tensors.h): the layers of a chain P .. E run one step
 * per group, F group-major (F_P^0 .. F_E^0, F_P^1 ..), B from the last
 * group down (B_E^{G-1} .. B_P^{G-1}, B_E^{G-2} ..), each group's R steps
 * before its B steps as above; an R step of a layer outside the chain
 * due at one of its B steps runs before the first group's. So a pass has
 * more steps than layers; the inference pass is the training pass's F
 * steps (n_fwd).
 *
 * Where U steps go (nto_update_placement): right after B_i (AFTER), or
 * spread over the rest of the backward pass (SPREAD): after each B step
 * the pending U steps (in order, those of B_i and earlier ones) are cut to
 * what an even share over the B steps left allows, ceil(pending / B steps
 * left), so that the updates of the large late weights (ResNet-18's last
 * stage: 9.4 MiB each, read and written with their Adam state) run beside
 * the compute of the earlier layers instead of in one burst. A U step
 * needs only its layer's weight, state, gradient (or what its rows are
 * computed from) and runs before the next pass's F_i either way: the
 * results are the same bits (tests).
 *
 * A U step also holds (plan.h NTO_USE_HOLD) the tensors the step before
 * its run of U steps (a B step) and the step after it both use, so that
 * the updates between them do not push those out of a small window.
 *
 * Pure: no I/O, no threads. Built once per model; read-only afterwards.
 */
#ifndef NTO_STEPS_H
#define NTO_STEPS_H

#include "plan.h"
#include "tensors.h"

/* Kinds of pass; also the plan index given to the offload engine. */
enum { NTO_PASS_TRAIN = 0, NTO_PASS_EVAL = 1 };

/* One step of the training pass. */
typedef struct nto_step {
  char kind; /* 'F', 'B', 'U' or 'R' */
  int layer; /* F, B, U: the layer; R: the layer whose output is recomputed */
  int w, chunk; /* U: weight index and chunk; else -1 */
  int group;    /* F, B, R: the channel group (tensors.h), 0 ungrouped */
} nto_step;

typedef enum {
  NTO_UPDATES_AFTER,  /* U steps right after their B step */
  NTO_UPDATES_SPREAD, /* spread over the rest of the backward pass */
} nto_update_placement;

typedef struct nto_steps {
  nto_step *v;      /* the training pass's steps */
  int n;            /* S */
  int n_fwd;        /* its F steps, v[0 .. n_fwd): the inference pass */
  int *b_step;      /* per layer: index of B_i (of its first group, G-1) */
  nto_plan plan[2]; /* NTO_PASS_TRAIN, NTO_PASS_EVAL */
} nto_steps;

/*
 * Build the steps, U steps placed by `place`, and both plans over table tt
 * (borrowed during the call; the loss reads layer tt->o.logits_layer,
 * fused into B_{L-1} when tt->o.fused). Returns 0, NTO_ENOMEM or
 * NTO_EINVAL (a transient tensor read before it is written: a programming
 * error, plan.h). On error nto_steps_free releases what was built.
 */
int nto_steps_build(nto_steps *st, const nto_tensors *tt,
                    nto_update_placement place, nto_err *err);
void nto_steps_free(nto_steps *st);

/* Steps of a pass (NTO_PASS_*). */
static inline int nto_steps_count(const nto_steps *st, int pass) {
  return st->plan[pass].n_steps;
}

/* Step s's name, e.g. "F3 conv1", "B3 conv1", "F9 expand 2/3" (group 2
 * of 3) or "U7 fc weight 2/3",
 * written into buf (the inference pass's step s is F_s); returns buf. */
const char *nto_steps_name(const nto_steps *st, const nto_tensors *tt, int pass,
                           int s, char *buf, size_t len);

#endif /* NTO_STEPS_H */

/*
 * exec.h - the executor: runs one pass (steps.h) step by step against a
 * residency (residency.h): forward, loss, backward with the optimizer
 * update, the U steps' chunked updates and the R steps' recomputations.
 * It takes no decision about memory; what is resident is the
 * residency's business, and every tensor a step uses is resident while
 * it runs.
 *
 * Threads: the executor's thread only, which is the only caller of BLAS
 * (through the layers' kernels).
 */
#ifndef NTO_EXEC_H
#define NTO_EXEC_H

#include "config.h"
#include "loss.h"
#include "residency.h"
#include "rng.h"
#include "steps.h"

/* Result of one pass. */
typedef struct nto_step_stats {
  double loss; /* mean loss over the valid samples, plus the weight
                  regularizers' term (loss.h nto_loss_regularization) */
  int correct; /* samples whose argmax matches the label's */
  int samples; /* valid samples */
} nto_step_stats;

/* Called for every parameter gradient computed whole, right before its
 * update (tests). Gradients computed by rows in U steps are not
 * reported. */
typedef void (*nto_grad_hook)(void *user, const nto_layer *l, int j,
                              const float *grad, size_t n);

/* Executor steps for a trace: step s of pass `pass` waited for its reads
 * from t_begin_ms to t_ready_ms and ran until t_end_ms (CLOCK_MONOTONIC,
 * ms). Called on the executor thread after each step. */
typedef void (*nto_step_trace_fn)(void *user, int pass, int s,
                                  double t_begin_ms, double t_ready_ms,
                                  double t_end_ms);

/* What a pass runs on; every pointer borrowed from the model. */
typedef struct nto_exec {
  const nto_tensors *tt;
  const nto_steps *st;
  nto_residency *res;
  const nto_opt_conf *opt;
  nto_loss_form form;
  float *ws;         /* the shared workspace (im2col), all layers */
  nto_rng *rng;      /* dropout masks */
  float *output;     /* N x K: a copy of the last layer's output */
  float *input_grad; /* N x c*h*w: dL/d(input), or NULL */
  nto_grad_hook hook;
  void *hook_user;
  nto_step_trace_fn trace;
  void *trace_user;
} nto_exec;

/*
 * Run every step of pass `pass` (NTO_PASS_*) on the batch x (N x c*h*w
 * floats, NCHW) with targets y (N x K); the loss counts the first
 * `valid` samples. Training updates the weights with learning rate lr as
 * optimizer update number `update` (1-based: Adam's bias correction). A
 * failing step abandons the pass after draining the residency, so the
 * next pass starts clean. Returns 0; NTO_ENUMERIC if the loss is not
 * finite (checked before any update: only batch-norm running statistics
 * have moved); or the residency's error.
 */
int nto_exec_pass(const nto_exec *e, int pass, const float *x, const float *y,
                  int valid, double lr, long update, nto_step_stats *st,
                  nto_err *err);

#endif /* NTO_EXEC_H */

/*
 * model.h - a trainable model: the facade that wires the plan, the
 * mechanism and the policy.
 *
 *   plan       tensors.h (the tensor table), steps.h (the step order and
 *              every tensor's uses), schedule.h (what a window keeps and
 *              moves), window.h, lookahead.h, autowin.h: pure, no I/O;
 *   mechanism  exec.h runs one pass step by step against a residency
 *              (residency.h): the all-resident arena (arena.h) or the
 *              offload engine (offload.h: I/O threads, state machine);
 *   policy     tuner.h decides the window, the read-ahead and what stays
 *              resident, before training and between iterations.
 *
 * One training iteration is the step sequence of steps.h: forward,
 * loss, backward with the optimizer update fused per layer (or in U steps
 * per update chunk), recomputations in R steps. Results are bit-identical
 * for every window, budget and I/O backend, and with everything resident.
 *
 * Threads: all functions run on one thread (the executor's); the model
 * owns the BLAS calls made through its layers.
 */
#ifndef NTO_MODEL_H
#define NTO_MODEL_H

#include "config.h"
#include "exec.h"
#include "graph.h"
#include "offload.h"
#include "steps.h"
#include "tensor.h"
#include "tensors.h"
#include "tuner.h"
#include "weights.h"

#include <stddef.h>
#include <stdint.h>

typedef struct nto_model nto_model;

/* Frozen batch normalization in training (layer.h frozen_batch_stats). */
typedef enum {
  NTO_FROZEN_BN_CONFIG,  /* the config's [Model] frozen_bn_statistics */
  NTO_FROZEN_BN_RUNNING, /* running statistics, left as they are */
  NTO_FROZEN_BN_BATCH,   /* the batch's, running ones updated */
} nto_frozen_bn;

typedef struct nto_model_opts {
  int batch;                /* 0: the config's batch_size */
  uint64_t seed;            /* weight initialization and dropout */
  int compute_input_grad;   /* also compute dL/d(input batch) (tests) */
  int plan_only;            /* build graph and plan, allocate no tensor
                               (summary): only the query functions work;
                               with memory_budget, the window it gives is
                               resolved (nto_model_tuner) or refused, as
                               for training */
  size_t update_chunk;      /* bytes; optimizer state of larger weights is
                               updated in chunks of this size, each in a step
                               of its own; 0: NTO_UPDATE_CHUNK */
  nto_offload_opts offload; /* the engine's options; offload.window is the
                               fixed window (NTO_WINDOW_FIXED: 0 all
                               resident) and offload.no_keep the tuner's
                               keeping (tuner.h) */
  nto_window_mode window_mode;
  size_t memory_budget;         /* bytes, 0: none (tuner.h) */
  nto_prefetch prefetch;        /* default (0): the tuner's choice */
  nto_chunk_grads chunk_grads;  /* default (0): auto (tensors.h) */
  nto_update_placement update_placement; /* where U steps go (steps.h);
                                            default (0): right after
                                            their B step */
  nto_recompute recompute;      /* default (0): auto (tensors.h) */
  int segments_max;             /* with recompute segments: at most this
                                   many segment convolutions, in
                                   tensors.h's order; 0: all */
  size_t group_bytes;           /* channel groups (tensors.h): chains whose
                                   outputs are larger run in groups of
                                   channels of at most about this many
                                   bytes each; 0: none */
  const char *freeze_until;     /* NULL, or freeze the layers up to and
                                   including this one (graph.h
                                   nto_graph_freeze) */
  nto_frozen_bn frozen_bn;       /* what frozen batch normalization
                                   normalizes with in training; default
                                   (0): the config's frozen_bn_statistics */
  int inference;                /* forward only (evaluate, predict): every
                                   layer frozen, so no backward step,
                                   gradient or optimizer state is planned
                                   and a memory budget fits the forward
                                   pass alone; use nto_model_eval_step */
  const char *budget_source;    /* names the budget's setting in errors, e.g.
                                   "--memory-budget"; NULL: "memory budget" */
  size_t memory_limit;          /* bytes, 0: none; without a budget only:
                                   the limit the process lives under
                                   (tuner.h; on the whole process when
                                   process_extra is set) */
  const char *limit_source;     /* names that limit in errors, e.g. "the
                                   cgroup memory limit of 512.0 MiB" */
  size_t process_extra;         /* with memory_budget or memory_limit on
                                   the whole process (not 0): the bytes it
                                   will hold beyond its tensors and
                                   workspace and beyond its RSS when the
                                   plans are built (e.g. BLAS buffers per
                                   compute thread); the tensors get the
                                   budget less that RSS and these (tuner.h
                                   overhead) */
  nto_step_trace_fn step_trace; /* NULL: off */
  void *step_trace_user;
} nto_model_opts;

/* Planned memory of training with everything resident (bytes,
 * page-rounded tensors); also when the model offloads (its own figures
 * are in nto_offload_stats). */
typedef struct nto_mem_plan {
  size_t weights;   /* weights incl. running statistics */
  size_t opt_state; /* optimizer state */
  size_t arena;     /* activations + gradients + parameter gradients */
  size_t workspace; /* shared scratch (im2col) */
  size_t total;     /* sum of the above */
} nto_mem_plan;

/*
 * Build the model of config c (borrowed: must outlive the model): graph,
 * tensors, initial weights from opts->seed, optimizer state, the plans,
 * the tuner's decisions, and the arena or the offload engine (whose
 * weights are initialized one tensor at a time straight into the swap
 * file). With recompute auto, a memory budget that refuses the model with
 * cheap convolutions recomputed (a twin is content the window must hold)
 * builds it again with them kept (nto_model_convs_kept), then, refused
 * again, with segments (nto_model_recompute); a refusal names the least
 * of their minimums. Returns 0,
 * NTO_ECONFIG/NTO_ESHAPE (from graph building, with file/section/key, or
 * the budget), NTO_ENOMEM, or the engine's NTO_EIO/NTO_EUNSUPPORTED.
 */
int nto_model_create(nto_model **out, const nto_config *c,
                     const nto_model_opts *opts, nto_err *err);
void nto_model_free(nto_model *m);

/* What segment recomputation (nto_recompute segments) would change in a
 * training run, for recompute auto's choice (nto_model_segments_estimate).
 * Index 0: recompute auto, 1: segments. */
typedef struct nto_segments_estimate {
  int window[2]; /* the window each trains at (auto: its upper bound; 0:
                    all resident, nothing to gain) */
  uint64_t read_bytes[2], written_bytes[2]; /* swap bytes per iteration */
  double flop[2]; /* floating-point operations per iteration, from the
                     convolutions' multiply-adds (2 each in the forward,
                     4 in the backward, 2 per replay) */
} nto_segments_estimate;

/* The share of the iteration time segments must save to be chosen. */
#define NTO_SEGMENTS_GAIN 0.05

/*
 * For recompute auto when offloading: the plans of the model of c with
 * opts (recompute ignored) with recompute auto and with segments, at the
 * window each would train at, into *e. Builds both (no tensor allocated)
 * and frees them. Returns 0 or the first plan's error (NTO_ECONFIG,
 * NTO_ENOMEM: as nto_model_create); the segments plan failing (e.g. the
 * budget refuses it) gives e->window[1] = 0. Caller's thread, before
 * nto_model_create.
 */
int nto_model_segments_estimate(const nto_config *c, const nto_model_opts *opts,
                                nto_segments_estimate *e, nto_err *err);

/* Could segments be faster at some bandwidths (before measuring any)?
 * Both plans offload, segments compute more and read or write fewer
 * bytes: 1, else 0. Pure; any thread. */
int nto_segments_may_pay(const nto_segments_estimate *e);

/* Swap time (ms) of plan k of e per iteration at the sequential bandwidths
 * write_bps and read_bps (bytes/s): read / read rate + written / write
 * rate. */
double nto_segments_io_ms(const nto_segments_estimate *e, int k,
                          double write_bps, double read_bps);

/*
 * The compute rate (flop/s) above which segments make an iteration at
 * least NTO_SEGMENTS_GAIN faster at those bandwidths; < 0: at no rate (not
 * nto_segments_may_pay, or not enough fewer bytes at these rates). An
 * iteration takes about max(compute, swap time) (bench's floor,
 * app/floor.h), and segments trade compute for swap time: with io the
 * swap times and f the operations, they are faster by the gain exactly
 * when io[1] <= (1 - gain) io[0] and f[1] / rate <= (1 - gain) io[0], i.e.
 * above f[1] / ((1 - gain) io[0]) (below it the iteration is compute-bound,
 * and recomputing only adds). Pure; any thread.
 */
double nto_segments_min_flops(const nto_segments_estimate *e, double write_bps,
                              double read_bps);

/* The graph (layers in execution order). */
const nto_graph *nto_model_graph(const nto_model *m);
/* Batch size N the model was planned for. */
int nto_model_batch(const nto_model *m);
/* Bytes of one batch of inputs and labels as float32 (batch x (input
 * sample + outputs) x 4): the buffers a caller feeds the steps from,
 * which a budget on the whole process counts. */
size_t nto_model_batch_io_bytes(const nto_model *m);
/* Input sample shape (n = 1) and number of output values per sample. */
nto_shape nto_model_input_shape(const nto_model *m);
int nto_model_output_size(const nto_model *m);
/* Planned memory. */
nto_mem_plan nto_model_mem_plan(const nto_model *m);
/* Trainable parameter count (frozen layers' weights not counted). */
size_t nto_model_param_count(const nto_model *m);

/* Replace the optimizer / scheduler settings (tests); resets the update
 * count to 0 and zeroes optimizer state. Returns 0 or NTO_ENOMEM;
 * NTO_EUNSUPPORTED when offloading and the new optimizer needs state
 * tensors the model was not built with. */
int nto_model_set_optimizer(nto_model *m, const nto_opt_conf *o,
                            const nto_lr_conf *lr, nto_err *err);

/*
 * One training iteration on a full batch: forward, loss, backward with
 * the optimizer updates. x: N * c*h*w floats (NCHW), y: N * K targets.
 * Returns 0 or NTO_ENUMERIC if the loss is not finite; that check comes
 * before any update, so only batch-norm running statistics have moved.
 * When offloading, also NTO_EIO for a failed swap read or write (the
 * model is then unusable; free it). Takes no residency decision: the
 * caller runs nto_model_tune after it.
 */
int nto_model_train_step(nto_model *m, const float *x, const float *y,
                         nto_step_stats *st, nto_err *err);

/*
 * The tuner's turn after a successful training iteration (tuner.h
 * nto_tuner_after_pass): the window and read frontier for the next one.
 * What changed goes to *r (may be NULL). No-op when everything is
 * resident or no iteration ran since the last call. Returns 0,
 * NTO_ENOMEM or the engine's NTO_EIO.
 */
int nto_model_tune(nto_model *m, nto_tune_report *r, nto_err *err);

/*
 * Forward in inference mode (batch-norm running statistics, no dropout) and
 * loss on the first `valid` samples (valid <= N; the rest is padding).
 */
int nto_model_eval_step(nto_model *m, const float *x, const float *y, int valid,
                        nto_step_stats *st, nto_err *err);

/* Output of the last step: N x K floats (a copy owned by the model),
 * valid until the next step. */
const float *nto_model_output(const nto_model *m);
/* dL/d(input) of the last train step when opts.compute_input_grad, else
 * NULL: N x c*h*w floats, valid until the next step. */
const float *nto_model_input_grad(const nto_model *m);

/* Called for every parameter gradient computed whole, right before its
 * update (tests; exec.h). */
void nto_model_set_grad_hook(nto_model *m, nto_grad_hook hook, void *user);

/*
 * The model's weights as named tensors "<layer>.<weight>" (layer order,
 * then weight order), dims from each weight's export rank. All resident:
 * data points into the model (valid while it lives). Offloading: data is
 * NULL and fetch/store read and write the swap file (io/weights.h), so
 * saving never needs all weights in RAM at once.
 * *out is malloc'd with its names: free with nto_model_weights_free.
 */
int nto_model_weights(nto_model *m, nto_named_tensor **out, int *n,
                      nto_err *err);
void nto_model_weights_free(nto_named_tensor *ts, int n);

/* The same list in the order of nntrainer's .bin files: layers in
 * nntrainer's order (graph.h nto_graph_nntrainer_order), each layer's
 * weights in weight order. Free with nto_model_weights_free. */
int nto_model_weights_bin(nto_model *m, nto_named_tensor **out, int *n,
                          nto_err *err);

/* Number of optimizer updates done. */
long nto_model_iteration(const nto_model *m);

/*
 * Checkpoints (io/checkpoint.h). The full training state is
 *  - every persistent tensor, as named tensors in tensor-table order and
 *    with the table's names and 4-d shapes (n, c, h, w): the weights,
 *    batch-norm running statistics ("<layer>:<weight>") and the optimizer
 *    state ("<layer>:<weight>:opt<q>", or ":opt<q>.<k>" per update chunk
 *    k of a large weight); data or fetch/store as in nto_model_weights;
 *    free with nto_model_weights_free;
 *  - nto_model_train_state: the update count and the model's generator.
 * Restoring both into a model built from the same config (any window)
 * continues training bit for bit. Executor thread, between steps.
 */
int nto_model_state_tensors(nto_model *m, nto_named_tensor **out, int *n,
                            nto_err *err);

typedef struct nto_model_train_state {
  long iteration;  /* optimizer updates done: drives the LR scheduler and
                      Adam's bias correction */
  uint64_t rng[2]; /* the model's generator (dropout masks) */
} nto_model_train_state;

void nto_model_get_train_state(const nto_model *m, nto_model_train_state *s);
void nto_model_set_train_state(nto_model *m, const nto_model_train_state *s);

/* Besides the layers, what fixes the state tensors: the optimizer ("sgd",
 * "adam", "adamw"; with a state format other than fp32 "/bf16" or "/int8"
 * after it, e.g. "adam/int8") and the update chunk in bytes
 * (nto_model_opts). A static string. */
const char *nto_model_optimizer_name(const nto_model *m);
size_t nto_model_update_chunk(const nto_model *m);

/* The tuner (tuner.h): the decisions and what they are checked against.
 * Owned by the model. */
nto_tuner *nto_model_tuner(const nto_model *m);

/* The offload engine's counters; returns 0, or NTO_EINVAL (st zeroed)
 * when everything is resident. */
int nto_model_offload_stats(nto_model *m, nto_offload_stats *st);
/* Compute time of every training step in the last training pass (ms,
 * waits for reads excluded; nto_offload_step_times) into
 * ms[0..nto_model_pass_steps(m, NTO_PASS_TRAIN)). Returns 0, or NTO_EINVAL
 * (ms untouched) when everything is resident. Executor thread. */
int nto_model_step_times(nto_model *m, double *ms);

/* The static plan of a pass (NTO_PASS_*): per-step and per-tensor uses
 * over the tensor table (tests, summary). Valid while the model lives. */
const nto_plan *nto_model_plan(const nto_model *m, int pass);
/* 1 when the output of layer i (0 <= i < n_layers; for a view, of the
 * layer it views) is recomputed in backward instead of kept. */
int nto_model_recomputed(const nto_model *m, int i);
/* 1 when layer i has a backward step that computes something (it trains,
 * or dL/d(its input) is needed: tensors.h bwd), else 0: below the first
 * trainable layer, nothing is kept for backward. */
int nto_model_backward(const nto_model *m, int i);
/* Convolutions whose outputs are recomputed in backward. */
int nto_model_recomputed_convs(const nto_model *m);
/* Segment convolutions recomputed (tensors.h nto_tensors_segment_convs:
 * 0 unless recompute segments), and into *candidates (may be NULL) how
 * many segments would recompute without a limit (segments_max). */
int nto_model_segment_convs(const nto_model *m, int *candidates);
/* Chains of channel groups (tensors.h; 0 without group_bytes), and into
 * *layers (may be NULL) how many layers they hold. */
int nto_model_chains(const nto_model *m, int *layers);
/* Channel groups of layer i's steps (1: not in a chain), and into *role
 * (may be NULL) its role: 'P', 'I', 'E' or 0 (tensors.h). */
int nto_model_groups(const nto_model *m, int i, int *role);
/* 1 when recompute auto kept the convolutions' outputs that it would
 * recompute, because with them recomputed the memory budget refused the
 * model (see nto_model_create). */
int nto_model_convs_kept(const nto_model *m);
/* The recompute setting the model was built with: the one asked for, or
 * where auto fell back under a budget (nto_model_create), activations
 * (nto_model_convs_kept) or segments. */
nto_recompute nto_model_recompute(const nto_model *m);

/* Tensor descriptor t (0 <= t < nto_model_tensor_count). */
const nto_tensor *nto_model_tensor(const nto_model *m, int t);
int nto_model_tensor_count(const nto_model *m);

/* Number of steps of a pass (NTO_PASS_*) and a step's name, e.g.
 * "F3 conv1" or "B3 conv1", written into buf; returns buf. */
int nto_model_pass_steps(const nto_model *m, int pass);
/* The training pass's step table (steps.h), owned by the model. */
const nto_steps *nto_model_steps(const nto_model *m);
const char *nto_model_step_name(const nto_model *m, int pass, int s, char *buf,
                                size_t len);

#endif /* NTO_MODEL_H */

/*
 * model.h - a trainable model: graph + tensor table + static execution plan
 * + the executor loop (all tensors resident; the offload engine replaces
 * the residency policy, not this interface).
 *
 * Execution plan: one training iteration is the step sequence
 *   F_0 .. F_{L-1}, then (R ...) B_{L-1} (U ...) .. (R ...) B_0 (U ...)
 * (step index s: F_i = i; the loss is computed at the start of B_{L-1},
 * step L unless R steps come first), with the optimizer update of layer i fused
 * into B_i; for a weight larger than the update chunk (NTO_UPDATE_CHUNK) the
 * update runs instead in U steps right after B_i, one per chunk of its
 * elements, so its optimizer state is never needed in RAM all at once. An R
 * step recomputes an activation or a convolution's output right before
 * its first backward reader (nto_recompute). Parameter
 * gradients live only from B_i to its last U step. For every tensor the plan
 * records the first and last step that use it. Weights and optimizer state
 * persist; activations, saved tensors, edge gradients and parameter gradients
 * are placed at planned offsets of one arena so that tensors whose step
 * intervals overlap never share bytes (greedy best-fit, largest first, as in
 * TFLite's arena planner). Gradients of a layer with several consumers are
 * summed, in consumer order, at the start of its backward step.
 *
 * Threads: all functions run on one thread (the executor's); the model owns
 * BLAS calls made through its layers.
 */
#ifndef NTO_MODEL_H
#define NTO_MODEL_H

#include "config.h"
#include "graph.h"
#include "offload.h"
#include "tensor.h"
#include "weights.h"

#include <stddef.h>
#include <stdint.h>

typedef struct nto_model nto_model;

/* Default update chunk (bytes): see nto_model_opts.update_chunk. */
#define NTO_UPDATE_CHUNK (1u << 20)

/* Kinds of pass; also the plan index given to the offload engine. */
enum { NTO_PASS_TRAIN = 0, NTO_PASS_EVAL = 1 };

/* How the offload window is chosen (nto_model_opts.window_mode). */
typedef enum {
  NTO_WINDOW_FIXED,  /* offload.window: 0 all resident, N >= 1 */
  NTO_WINDOW_BUDGET, /* all resident if that fits memory_budget, else the
                        largest N whose tensor region + workspace fits */
  NTO_WINDOW_AUTO,   /* start at N = 1 and adapt after every training
                        iteration (autowin.h), up to the largest N within
                        memory_budget (none: the largest N that needs
                        less than everything resident) */
} nto_window_mode;

/* When the offload engine reads a step's tensors (nto_model_opts.prefetch).
 * STEPS (default): step s+N's at the start of step s (N steps resident and
 * one step's reads ahead; the memory the plain schedule and `summary`
 * state). TIME: after the first and third training iterations, from their
 * measured step times and the read bandwidth achieved so far, each step's
 * reads are queued early enough to be done before it runs (a frontier,
 * lookahead.h), within the memory budget if one is given (fitted step by
 * step, nto_lookahead_fit); this holds more than N steps' tensors at
 * times, and the region grows accordingly. ROOM: as TIME, but fitted
 * within the plain window's own region + workspace (and the budget): reads
 * move earlier only where the region has room, so the region + workspace
 * stay within what the plain window (without keeping, schedule.h
 * nto_schedule_build) needs; and only where that pays
 * (nto_model_room_pays), else the plain window. */
typedef enum {
  NTO_PREFETCH_STEPS,
  NTO_PREFETCH_TIME,
  NTO_PREFETCH_ROOM
} nto_prefetch;

/* Where the gradient of a weight of several update chunks is computed
 * (model option chunk_grads): whole in B_i, or chunk by chunk in its U
 * steps (layer.h weight_row), next to the update of the chunk, so that
 * the whole gradient never exists (ResNet-18 b10 window 1: 26.5 -> 20.4
 * MiB of resident tensors). Results differ by rounding between whole and
 * chunked gradients (bit-identical across windows either way). */
typedef enum {
  NTO_CHUNK_GRADS_AUTO, /* by chunk where the layer's rows cache (the
                           batch's column matrix, layer.h
                           weight_rows_cache) is no larger than the
                           whole gradient: less memory at about the
                           same time (ResNet-18's last stage at batch
                           10; at batch 32 the cache is as large, and
                           it frees B_i for the read-ahead); else
                           whole */
  NTO_CHUNK_GRADS_ON,   /* by chunk wherever the layer can (also without
                           a cache: the rows then derive it again for
                           every chunk, slower, least memory) */
  NTO_CHUNK_GRADS_OFF,  /* always whole */
} nto_chunk_grads;

/* What backward recomputes instead of keeping it from the forward (model
 * option recompute). Recomputed outputs are bit for bit the forward's
 * (layer.h replay), so results never depend on this; memory and swap
 * traffic do, and compute a little.
 *
 * Activations. An activation (relu, relu6, leaky_relu, tanh, none) whose
 * input is a batch_normalization output read by nothing else has its
 * output kept from its forward to its backward: for its own backward and
 * for the next layers' (a convolution's weight gradient). Recomputed, that
 * output dies after the forward's last read, and an R step right before
 * its first backward reader writes it again from what batch
 * normalization's backward keeps anyway (its input, mean, inv_std, gamma,
 * beta: layer.h replay), bit for bit, in one element-wise pass. That
 * output then takes no RAM between forward and backward and no swap
 * traffic: ResNet-18 b10 window 1 moves 201.1 + 167.1 instead of 220.4 +
 * 187.1 MiB per iteration, and MobileNetV2 224 b10 167.9 + 167.9 instead
 * of 399.5 + 399.5 MiB (docs/design-offload.md, "Recomputed activations").
 *
 * Convolutions. A convolution's output read by one layer whose backward
 * reads it (batch normalization's input) is kept likewise. When the
 * convolution is cheap per output element (at most NTO_RECOMPUTE_MACS
 * multiply-adds: MobileNetV2's 1x1 expansions, a stem on 3 channels) and
 * its input is kept anyway (its own backward reads it; it is not
 * recomputed itself), an R step runs the convolution's forward again
 * right before the output's first backward reader (before the R step of
 * the activation after it, which then reads the recomputed output), if
 * that reader is at most NTO_RECOMPUTE_SPAN layers on. An expansion's
 * output is 6x its input: MobileNetV2 224 b10 window 4 moves 62.5 instead
 * of 185.0 MiB each way per iteration, and all resident plans 230.8
 * instead of 333.0 MiB (docs/design-offload.md, "Recomputed
 * convolutions"). */
typedef enum {
  NTO_RECOMPUTE_AUTO,        /* default: activations; convolutions too when
                                the tensors are offloaded (any window
                                mode but a fixed window of 0, `all`),
                                where they are read and written, unless
                                the memory budget then refuses the model:
                                it is created with them kept instead
                                (nto_model_convs_kept) */
  NTO_RECOMPUTE_ON,          /* activations and convolutions, resident too
                                (less memory, more compute) */
  NTO_RECOMPUTE_ACTIVATIONS, /* activations only */
  NTO_RECOMPUTE_OFF,         /* nothing: everything kept */
} nto_recompute;

/* Multiply-adds per output element up to which a convolution's output is
 * recomputed (nto_recompute). Recomputing one output element costs 2 x
 * this many flops; keeping it offloaded costs writing and reading 4
 * bytes. At the ~100 GFLOP/s of this machine's small-K GEMMs (2 threads;
 * MobileNetV2 b10's block2_expand forward, 16 -> 96 channels, 385 MFLOP
 * in 4.0 ms in an all-resident --trace) and 1.3 GB/s of swap each way
 * (bench), 256 multiply-adds (5 ns) cost less than the 8 bytes of I/O
 * (6 ns), and on flash (45/25 MB/s) far less. */
#define NTO_RECOMPUTE_MACS 256

/* Layers from a recomputed convolution to the first backward reader of
 * its output (the activation after its normalization, or the layer after
 * that): conv -> batch_normalization -> activation -> its reader. A
 * longer span (ResNet's stem, whose activation a residual block reads)
 * keeps the recomputed output through that block's backward, at its
 * memory peak: ResNet-18 b32 window 1's region 32.9 -> 40.6 MiB. */
#define NTO_RECOMPUTE_SPAN 3

/* Executor steps for a trace: step s of pass `pass` waited for its reads
 * from t_begin_ms to t_ready_ms and ran until t_end_ms (CLOCK_MONOTONIC,
 * ms). Called on the executor thread after each step. */
typedef void (*nto_step_trace_fn)(void *user, int pass, int s,
                                  double t_begin_ms, double t_ready_ms,
                                  double t_end_ms);

typedef struct nto_model_opts {
  int batch;                /* 0: the config's batch_size */
  uint64_t seed;            /* weight initialization and dropout */
  int compute_input_grad;   /* also compute dL/d(input batch) (tests) */
  int plan_only;            /* build graph and plan, allocate no tensor
                               (summary): only the query functions work */
  size_t update_chunk;      /* bytes; optimizer state of larger weights is
                               updated in chunks of this size, each in a step
                               of its own; 0: NTO_UPDATE_CHUNK */
  nto_offload_opts offload; /* offload.window == 0: everything resident
                               (one arena); >= 1: the offload engine with
                               a window of that many steps */
  nto_window_mode window_mode;
  size_t memory_budget;  /* bytes, 0: none. A hard bound on resident tensor
                            bytes (the offload region, or all tensors when
                            resident) + the im2col workspace. A fixed
                            window or `all` above it is refused
                            (NTO_ECONFIG naming the largest window that
                            fits, or the minimum the model needs). */
  nto_prefetch prefetch; /* with a window: how far ahead reads go */
  nto_chunk_grads chunk_grads;  /* default (0): auto */
  nto_recompute recompute;      /* default (0): auto */
  const char *budget_source;    /* names the budget's setting in errors, e.g.
                                  "--memory-budget"; NULL: "memory budget" */
  nto_step_trace_fn step_trace; /* NULL: off */
  void *step_trace_user;
} nto_model_opts;

/* One training iteration of the adaptive window (NTO_WINDOW_AUTO). */
typedef struct nto_window_sample {
  int window;            /* N the iteration ran with */
  double iteration_ms;   /* its wall time */
  double measured_ms;    /* the part after the priming steps (the first N
                            steps after a window change, whose reads no
                            window hides): what the controller judges */
  double stall_ms;       /* executor waiting for reads in that part */
  double io_busy_ms;     /* the busier I/O thread's busy time (whole) */
  double device_ms;      /* a request of either I/O thread at the device
                            (offload.h device_busy_ms; whole) */
  int judged;            /* 0: the controller kept N without judging the
                            iteration: priming took most of it, it primed
                            with read-ahead by time (autowin.h), or
                            before_read_ahead */
  int before_read_ahead; /* 1: --prefetch time or room, and the iteration
                            ran before any step time was measured, i.e.
                            without the read-ahead that the window will
                            have (not judged) */
} nto_window_sample;

/* Result of one step. */
typedef struct nto_step_stats {
  double loss; /* mean loss over the valid samples */
  int correct; /* samples whose argmax matches the label's */
  int samples; /* valid samples */
} nto_step_stats;

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
 * and either the arena or the offload engine (opts->offload.window >= 1;
 * the weights are then initialized one tensor at a time straight into the
 * swap file). Results are bit-identical either way. Returns 0,
 * NTO_ECONFIG/NTO_ESHAPE (from graph building, with file/section/key),
 * NTO_ENOMEM, or the engine's NTO_EIO/NTO_EUNSUPPORTED (swap file).
 */
int nto_model_create(nto_model **out, const nto_config *c,
                     const nto_model_opts *opts, nto_err *err);
void nto_model_free(nto_model *m);

/* The graph (layers in execution order). */
const nto_graph *nto_model_graph(const nto_model *m);
/* Batch size N the model was planned for. */
int nto_model_batch(const nto_model *m);
/* Input sample shape (n = 1) and number of output values per sample. */
nto_shape nto_model_input_shape(const nto_model *m);
int nto_model_output_size(const nto_model *m);
/* Planned memory. */
nto_mem_plan nto_model_mem_plan(const nto_model *m);
/* Trainable parameter count. */
size_t nto_model_param_count(const nto_model *m);

/* Replace the optimizer / scheduler settings (tests); resets the update
 * count to 0 and zeroes optimizer state. Returns 0 or NTO_ENOMEM;
 * NTO_EUNSUPPORTED when offloading and the new optimizer needs state
 * tensors the model was not built with. */
int nto_model_set_optimizer(nto_model *m, const nto_opt_conf *o,
                            const nto_lr_conf *lr, nto_err *err);

/*
 * One training iteration on a full batch: forward, loss, backward with the
 * fused optimizer update. x: N * c*h*w floats (NCHW), y: N * K targets.
 * Returns 0 or NTO_ENUMERIC if the loss is not finite; that check comes
 * before any update, so only batch-norm running statistics have moved.
 * When offloading, also NTO_EIO for a failed swap read or write (the model
 * is then unusable; free it).
 */
int nto_model_train_step(nto_model *m, const float *x, const float *y,
                         nto_step_stats *st, nto_err *err);

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
 * update (tests). Gradients computed by chunk in U steps (a weight of more
 * than one update chunk whose layer has layer.h weight_row) are not
 * reported. */
typedef void (*nto_grad_hook)(void *user, const nto_layer *l, int j,
                              const float *grad, size_t n);
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

/* Number of optimizer updates done. */
long nto_model_iteration(const nto_model *m);

/*
 * Checkpoints (io/checkpoint.h). The full training state is
 *  - every persistent tensor, as named tensors in tensor-table order and
 *    with the table's names and 4-d shapes (n, c, h, w): the weights,
 *    batch-norm running statistics ("<layer>:<weight>") and the optimizer
 *    state ("<layer>:<weight>:opt<q>", or ":opt<q>.<k>" per update chunk
 *    k of a large weight). All resident: data points into the model;
 *    offloading: data is NULL and fetch/store go through the swap file one
 *    tensor at a time (nto_offload_fetch/store, which drain the window
 *    first), as in nto_model_weights. Free with nto_model_weights_free;
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
 * "adam", "adamw") and the update chunk in bytes (nto_model_opts). */
const char *nto_model_optimizer_name(const nto_model *m);
size_t nto_model_update_chunk(const nto_model *m);

/*
 * What a window of n steps (n >= 1) keeps in RAM for this model: the
 * offload schedule's tensor region (the larger of training and inference)
 * plus the im2col workspace, in bytes, into *bytes; what a memory budget
 * is checked against. Works on plan-only models (summary). Returns 0 or
 * NTO_ENOMEM. Executor thread.
 */
int nto_model_window_bytes(const nto_model *m, int n, size_t *bytes,
                           nto_err *err);

/* As nto_model_window_bytes, for window n with the training frontier
 * upto[0..S) (nto_model_frontier; NULL: s + n). */
int nto_model_frontier_bytes(const nto_model *m, int n, const int *upto,
                             size_t *bytes, nto_err *err);

/*
 * Change the offload window between passes (nto_offload_set_window):
 * results stay bit-identical. NTO_EINVAL when the model does not offload
 * (all resident) or n < 1; NTO_ECONFIG when a memory budget is set and
 * the window does not fit it; else as nto_offload_set_window.
 */
int nto_model_set_window(nto_model *m, int n, nto_err *err);

/*
 * As nto_model_set_window, with a read frontier for the training pass
 * (nto_offload_set_frontier; upto[0..S) for the S training steps, NULL:
 * s + n), checked against the memory budget like a window. With
 * NTO_PREFETCH_TIME or ROOM the model replaces it by its own after the next
 * window change or measured iteration. Executor thread, between passes.
 */
int nto_model_set_frontier(nto_model *m, int n, const int *upto, nto_err *err);

/*
 * The read frontier --prefetch time and room use (lookahead.h) for window
 * n (>= 1; clamped to S - 1, the training pass's S steps), from step times
 * step_ms[0..S) (ms) and a read bandwidth bytes_per_ms (> 0): the model
 * computes it after training iterations 1 and 3 from what it measured;
 * tests and tools give their own. Step j's read time is the bytes that
 * bring it in at bytes_per_ms, with a margin. The frontier is fitted so
 * that the tensor region + workspace stay within limit (bytes; 0: no
 * limit) and, with room, within the plain window's own: first with the
 * memory model's target lowered a few times, then, if no target fits
 * once placed, with only some steps moved, chosen in batches by gain (the
 * stall the plain window leaves before a step): a batch stays when its
 * placed schedule fits, else its halves are tried. Writes upto[0..S) and
 * *moved, the steps entering earlier than in the plain window (0: upto is
 * not to be used; the plain window stands). Works on plan-only models.
 * Returns 0, NTO_EINVAL (n < 1, S < 2 or no bandwidth) or NTO_ENOMEM. The
 * model's thread; builds a schedule per try (ResNet-18: ~5 ms each, at most
 * 4 + 48).
 */
int nto_model_frontier(const nto_model *m, int n, const double *step_ms,
                       double bytes_per_ms, int room, size_t limit, int *upto,
                       int *moved, nto_err *err);

/* The adaptive window's record: one sample per training iteration so far
 * (NULL and *n = 0 unless NTO_WINDOW_AUTO). Owned by the model, valid
 * until the next training step. */
const nto_window_sample *nto_model_window_trace(const nto_model *m, int *n);

/* The share of a pass's wall time the device may be busy with room's
 * traffic (nto_model_room_pays). Measured on ResNet-18 and MobileNetV2
 * (docs/benchmarks.md, "Room judged by the device's idle time"): room's
 * bytes would keep this machine's disk busy 0.42-0.74 of the third
 * iteration (0.30-0.92 of the first, which primes), and the throttled
 * device (45/25 MB/s) 0.995 of it. */
#define NTO_ROOM_DEVICE_SHARE 0.9

/*
 * Does the read-ahead of --prefetch room pay for window n with frontier
 * upto[0..S) (nto_model_frontier with room)? Within the same region the
 * read-ahead takes room that keeping tensors resident would use
 * (schedule.h nto_schedule_keep), so the engine's schedule may move more
 * bytes (ResNet-18 b32 window 1: 311.3 + 238.7 against 295.3 + 210.7 MiB
 * per iteration). Those cost little while the device has idle time, and
 * everything where it has none (a slow card). *pays = 1 when the schedule
 * with upto moves no more bytes (read + written) than without it, or when
 * its bytes at the device's rate in a measured pass (pass_bytes read +
 * written in device_ms, the time a request was at the device, offload.h
 * device_busy_ms) keep the device busy for at most NTO_ROOM_DEVICE_SHARE
 * of that pass's wall time pass_ms. The pass may have run
 * with or without the frontier; either way the device's rate and the
 * iteration are measured, not predicted. Nothing measured (pass_ms,
 * device_ms <= 0 or pass_bytes 0): *pays = 0 for more bytes. Costs two
 * nto_schedule_keep (ResNet-18: ~0.1 s; MobileNetV2 224 with a frontier:
 * ~2 s); training applies the same rule after its first and third passes
 * to the schedule the engine built (model.c check_room), computing only
 * the plain window's bytes.
 * Returns 0, NTO_ENOMEM. Any single thread; m is not changed.
 */
int nto_model_room_pays(const nto_model *m, int n, const int *upto,
                        double pass_ms, double device_ms, uint64_t pass_bytes,
                        int *pays, nto_err *err);

/* 1 when training with --prefetch room last declined its read-ahead
 * because it did not pay (nto_model_room_pays): the window reads by
 * steps. Any thread, between steps. */
int nto_model_room_declined(const nto_model *m);

/* The offload engine's counters; returns 0, or NTO_EINVAL (st zeroed)
 * when everything is resident. */
int nto_model_offload_stats(nto_model *m, nto_offload_stats *st);
/* Reset the offload counters and peaks (no-op when all resident). */
void nto_model_reset_offload_stats(nto_model *m);
/* Compute time of every training step in the last training pass (ms,
 * waits for reads excluded; nto_offload_step_times) into
 * ms[0..nto_model_pass_steps(m, NTO_PASS_TRAIN)). Returns 0, or NTO_EINVAL
 * (ms untouched) when everything is resident. Executor thread. */
int nto_model_step_times(nto_model *m, double *ms);

/* The static plan of a pass (NTO_PASS_*): per-step and per-tensor uses
 * over the tensor table (tests, summary). Valid while the model lives. */
const nto_plan *nto_model_plan(const nto_model *m, int pass);
/* 1 when the output of layer i (0 <= i < n_layers; for a view, of the
 * layer it views) is recomputed in backward (nto_recompute) instead of
 * kept from the forward, else 0. */
int nto_model_recomputed(const nto_model *m, int i);

/* Convolutions whose outputs are recomputed in backward (nto_recompute). */
int nto_model_recomputed_convs(const nto_model *m);

/* 1 when recompute auto kept the convolutions' outputs that it would
 * recompute, because with them recomputed the memory budget refused the
 * model (window 1, or the fixed window asked for, did not fit: a recomputed
 * output is content the window must hold or write, which can raise the
 * region); nto_model_create then built it as with
 * NTO_RECOMPUTE_ACTIVATIONS. Else 0. */
int nto_model_convs_kept(const nto_model *m);

/* Tensor descriptor t (0 <= t < nto_model_tensor_count). */
const nto_tensor *nto_model_tensor(const nto_model *m, int t);
int nto_model_tensor_count(const nto_model *m);

/* Number of steps of a pass (NTO_PASS_*) and a step's name, e.g.
 * "F3 conv1" or "B3 conv1", written into buf; returns buf. */
int nto_model_pass_steps(const nto_model *m, int pass);
const char *nto_model_step_name(const nto_model *m, int pass, int s, char *buf,
                                size_t len);

#endif /* NTO_MODEL_H */

/*
 * layer.h - the layer interface: an ops table per layer type plus a small
 * descriptor per layer instance.
 *
 * Life of a layer (all on the thread that builds the model, except
 * forward/backward which run on the executor thread):
 *   1. the registry finds the ops table for the INI `type`;
 *   2. the graph allocates l->priv (ops->priv_size bytes, zeroed), calls
 *      ops->defaults, then ops->set_prop for each INI key it does not handle
 *      itself (type, name, input_layers, activation, trainable, input_shape);
 *   3. the graph sets batch, n_in, in_shape[] (n = batch) and calls plan,
 *      which sets out_shape, requests weights (nto_layer_add_weight), tensors
 *      saved for backward (nto_layer_add_saved), the workspace size, and the
 *      bwd_needs_* flags;
 *   4. the executor calls forward and backward with pointers that are valid
 *      for that one call only. Layers never keep them.
 *
 * Kernels write their outputs with "=" (never accumulate into din/dw): the
 * executor sums gradients of fan-out itself.
 */
#ifndef NTO_LAYER_H
#define NTO_LAYER_H

#include "error.h"
#include "props.h"
#include "rng.h"
#include "tensor.h"

#include <stddef.h>

#define NTO_MAX_INPUTS 8
#define NTO_MAX_WEIGHTS 6
#define NTO_MAX_SAVED 4
#define NTO_NAME_MAX 96

typedef struct nto_layer nto_layer;

/* A weight the layer owns; created by nto_layer_add_weight during plan. */
typedef struct nto_weight_req {
  char name[32];      /* "weight", "bias", "gamma", "moving_mean", ... */
  nto_shape shape;    /* n = 1; e.g. conv: (filters, c/groups, kh, kw) */
  nto_init_kind init; /* initializer */
  int fan_in, fan_out;
  int trainable; /* 0 for running statistics: no gradient, no update */
  int ndim;      /* rank when exported (safetensors): 1 = a vector of
                    all elements, else the trailing ndim dims of shape;
                    e.g. conv weight 4, bias 1, fc weight 2 */
  int tensor;    /* index in the model's tensor table (set by model) */
  float l2;      /* the constant C of the weight's l2norm regularizer
                    (props.h nto_regularizer), 0: none. Set by plan after
                    nto_layer_add_weight; applied by the layer itself:
                    forward sets reg_loss (nto_layer_reg_loss), backward
                    and backward_weight_rows add C * w to the gradient
                    (nto_layer_reg_grad) */
} nto_weight_req;

/* A tensor forward writes and backward reads (e.g. a dropout mask). */
typedef struct nto_saved_req {
  char name[32];
  nto_shape shape; /* n = batch where per-sample */
  int tensor;      /* index in the model's tensor table (set by model) */
} nto_saved_req;

/* What a layer's output is, for fusing the loss (set by plan). */
typedef enum {
  NTO_OUT_PLAIN = 0,
  NTO_OUT_SOFTMAX, /* output = softmax(input) over c*h*w of each sample */
  NTO_OUT_SIGMOID, /* output = sigmoid(input) elementwise */
} nto_out_kind;

/* Arguments of one forward call. Pointers valid for this call only. */
typedef struct nto_fwd {
  const float *in[NTO_MAX_INPUTS]; /* in[i]: l->in_shape[i] */
  float *out;                      /* l->out_shape; written with "=" */
  float *w[NTO_MAX_WEIGHTS];       /* l->w[j].shape; stats may be updated */
  float *saved[NTO_MAX_SAVED];     /* l->saved[k].shape; forward writes;
                                      NULL when no backward runs for the
                                      layer (below the first trainable
                                      layer: model.h nto_model_backward) */
  float *ws;                       /* l->ws_bytes bytes, undefined content */
  int training;                    /* 1: batch stats, dropout active */
  nto_rng *rng;                    /* executor's generator (dropout) */
} nto_fwd;

/* Arguments of one backward call. Pointers valid for this call only. */
typedef struct nto_bwd {
  const float *in[NTO_MAX_INPUTS]; /* forward inputs; NULL unless
                                      l->bwd_needs_input */
  const float *out;                /* forward output; NULL unless
                                      l->bwd_needs_output */
  const float *dout;               /* dL/d(out), l->out_shape */
  float *din[NTO_MAX_INPUTS];      /* dL/d(in[i]) written with "=";
                                      NULL when nobody needs it */
  const float *w[NTO_MAX_WEIGHTS];
  float *dw[NTO_MAX_WEIGHTS]; /* dL/d(w[j]) written with "="; NULL for
                                 non-trainable weights or frozen layers */
  float *saved[NTO_MAX_SAVED];
  float *ws; /* l->ws_bytes bytes, undefined content */
} nto_bwd;

typedef struct nto_layer_ops {
  const char *type; /* INI type name, lowercase, e.g. "conv2d" */
  size_t priv_size; /* bytes of private state, zeroed by the graph */
  int min_inputs, max_inputs;
  /* Set default property values in l->priv. May be NULL. */
  void (*defaults)(nto_layer *l);
  /*
   * Apply one INI property. key is lowercase, value trimmed.
   * Returns 0 if handled, NTO_ENOKEY (no message needed) if this layer type
   * has no such key, NTO_ECONFIG with a message saying what was expected.
   */
  int (*set_prop)(nto_layer *l, const char *key, const char *value,
                  nto_err *err);
  /*
   * Compute out_shape from in_shape[0..n_in) (n = batch), request weights,
   * saved tensors, workspace. Returns 0, NTO_ESHAPE or NTO_ECONFIG with a
   * message (e.g. "kernel 5x5 larger than padded input 3x3").
   */
  int (*plan)(nto_layer *l, nto_err *err);
  void (*forward)(nto_layer *l, const nto_fwd *f);
  void (*backward)(nto_layer *l, const nto_bwd *b);
  /*
   * Optional (NULL: the output is never recomputed). Write into f->out,
   * bit for bit, what the last training forward wrote there, from the same
   * f->in, f->w and f->saved (as that forward left them), updating
   * nothing (no running statistics, no saved tensor, no random draw).
   * f->out may equal f->in[0] when l->replay_macs is 0 (an element-wise
   * replay). f->training is 1. The model uses it to recompute a cheap
   * activation, or a convolution's output, in backward instead of keeping
   * it from the forward (tensors.h nto_recompute).
   */
  void (*replay)(nto_layer *l, const nto_fwd *f);
  /*
   * Optional (NULL: weight gradients only come whole from backward). For
   * optimizer updates in chunks (model.h update_chunk): weight_row gives
   * the row length (elements) of weight j's gradient viewed as rows, 0 if
   * it cannot be computed by rows; backward_weight_rows writes rows
   * [r0, r1) of dL/dw[j] to dst ((r1 - r0) * row floats, "="), what
   * backward writes there up to rounding (BLAS kernels may round a row
   * differently with a different number of rows). b as for backward: in, out,
   * dout, w, saved and ws are read; din and dw are not used. This lets a large
   * weight's gradient be computed chunk by chunk next to its update
   * instead of whole (e.g. 1 MiB at a time instead of 9.4 MiB for a
   * 512x512x3x3 convolution).
   *   cache: NULL, or weight_rows_cache(l, j) floats that keep what every
   * call for weight j derives from b alone (a convolution's column matrix
   * of the batch), so that the calls for the chunks of one weight derive
   * it once: the caller passes fill = 1 to the first call (which builds it
   * from b->in) and fill = 0 to the others (whose b->in may be NULL), with
   * the same contents between them. The rows are bit for bit the same with
   * and without a cache.
   * weight_rows_cache is optional (NULL or 0: no cache).
   */
  int (*weight_row)(const nto_layer *l, int j);
  size_t (*weight_rows_cache)(const nto_layer *l, int j);
  void (*backward_weight_rows)(nto_layer *l, const nto_bwd *b, int j, int r0,
                               int r1, float *dst, float *cache, int fill);
  /*
   * Optional (NULL: never narrowed). For channel groups (tensors.h): make
   * l, a copy of a planned layer, compute `channels` of its output channels
   * only, by setting what its plan derives the channel count from (a
   * convolution's filters, an input shape's c); the caller plans it again
   * (nto_layer_narrow). NTO_NARROW_OUTPUT: the output channels alone, from
   * the whole input (a convolution without groups: a block of its
   * filters); NTO_NARROW_CHANNELS: input and output channels alike, for a
   * layer whose output channel c reads input channel c alone (batch
   * normalization over (N, H, W), an element-wise activation, a depthwise
   * convolution). Returns 0, or NTO_EINVAL when this layer cannot be
   * narrowed that way.
   */
  int (*narrow)(nto_layer *l, int mode, int channels);
} nto_layer_ops;

/* Modes of nto_layer_ops.narrow. */
enum { NTO_NARROW_OUTPUT = 1, NTO_NARROW_CHANNELS = 2 };

struct nto_layer {
  char name[NTO_NAME_MAX]; /* INI section name (as written) */
  const nto_layer_ops *ops;
  void *priv; /* ops->priv_size bytes, owned by the graph */

  int batch;              /* batch size N (set before plan) */
  int n_in;               /* number of input edges */
  int in[NTO_MAX_INPUTS]; /* producer layer index per edge */
  nto_shape in_shape[NTO_MAX_INPUTS];
  nto_shape out_shape;

  nto_weight_req w[NTO_MAX_WEIGHTS];
  int n_w;
  nto_saved_req saved[NTO_MAX_SAVED];
  int n_saved;
  size_t ws_bytes;      /* workspace needed by forward and backward */
  int bwd_needs_input;  /* backward reads in[] */
  int bwd_needs_output; /* backward reads out */
  int out_is_input;     /* 1: the output is a view of in[0] (same bytes,
                           same NCHW order: flatten, multiout). The model
                           gives both one tensor, so forward copies
                           nothing and the content is saved and swapped
                           once; set by plan */
  int bwd_in_place;     /* 1: backward is correct with din[0] the same
                           buffer as dout (each dout element is read
                           before the din element at its index is
                           written, and nothing else): the model may give
                           both one tensor; set by plan */
  nto_out_kind out_kind;
  int replay_macs; /* multiply-adds per output element of ops.replay (a
                      convolution: input channels per group x kernel
                      height x width); 0: an element-wise pass. Set by
                      plan; the model recomputes a convolution's output
                      only when this is small (tensors.h nto_recompute) */
  int trainable;   /* INI `trainable` (default 1), set before plan. 0
                      freezes the layer: no weight gradient, no update,
                      and a training forward writes no weight (batch
                      normalization normalizes with its running
                      statistics and keeps them); plan may then ask less
                      for backward (the model may skip a frozen layer's
                      backward entirely, tensors.h) */
  int frozen_batch_stats; /* batch normalization, frozen: in training,
                             normalize with the batch's statistics and
                             update the running ones, as a trainable layer
                             does (PyTorch's train() mode with the
                             parameters frozen); gamma and beta still get
                             no gradient. 0: the running statistics.
                             Set before plan */
  double reg_loss; /* the regularizers' term of the loss for the weights
                      the layer's last forward read (nto_layer_reg_loss),
                      0 without one; written by forward, training or not
                      (not by replay). The loss adds every layer's
                      (loss.h nto_loss_regularization) */
};

/*
 * Request a weight during plan. name is copied (<= 31 chars). ndim: export
 * rank (1: a vector; 2..4: the trailing dims of shape). fan_in and fan_out feed
 * the initializer formulas (props.h). Returns the weight's index j (used as
 * f->w[j]) or NTO_EINVAL if NTO_MAX_WEIGHTS is reached.
 * Shapes by convention: conv2d weight (filters, c/groups, kh, kw) ndim 4,
 * bias (1, filters, 1, 1) ndim 1; batch-norm vectors (1, c, 1, 1) ndim 1;
 * fully_connected weight (1, 1, in, unit) ndim 2, bias (1, 1, 1, unit)
 * ndim 1.
 */
int nto_layer_add_weight(nto_layer *l, const char *name, nto_shape shape,
                         int ndim, nto_init_kind init, int fan_in, int fan_out,
                         int trainable);

/* Request a saved tensor during plan; returns its index k or NTO_EINVAL. */
int nto_layer_add_saved(nto_layer *l, const char *name, nto_shape shape);

/* Elements of the layer's parameters: its weights that take a gradient
 * when it trains (batch-norm running statistics not counted), frozen or
 * not. After plan. */
size_t nto_layer_param_count(const nto_layer *l);

/*
 * The regularizers' term of the loss from the layer's weights w[j]
 * (l->w[j].shape floats each; read only where l->w[j].l2 > 0): the sum over
 * its weights with an l2norm regularizer of 0.5 * C * ||w[j]|| (the
 * Euclidean norm, computed in double in element order), as nntrainer adds
 * Weight::getRegularizationLoss to the loss. 0 for a frozen layer (l->trainable
 * 0) and for weights without a gradient: nntrainer counts the weights that
 * have one. Deterministic; calling thread (forward's).
 */
double nto_layer_reg_loss(const nto_layer *l, float *const *w);

/*
 * The regularizer's term of the gradient of weight j: dw[i] += C * w[i]
 * for i in [0, n) (C = l->w[j].l2, in float, as nntrainer's
 * Weight::calcRegularizationGradient); nothing when C is 0. w and dw are
 * the same n elements of the weight and of its gradient (a chunk of rows
 * passes both at the chunk's offset). Callers call it only where the
 * gradient is computed (dw not NULL: the layer trains). Calling thread.
 */
void nto_layer_reg_grad(const nto_layer *l, int j, const float *w, float *dw,
                        size_t n);

/* Start of a plan that may run again on the same layer: clears the
 * weights, saved tensors, workspace, bwd_needs_* flags, out_is_input,
 * bwd_in_place, out_kind and replay_macs. */
void nto_layer_plan_reset(nto_layer *l);

/*
 * A copy of planned layer l that computes its output channels [c0, c1)
 * only (ops.narrow with `mode`, then plan), into *out, for the steps of
 * one channel group (tensors.h): its weights and saved tensors are
 * windows of l's, starting w_off[j] and s_off[k] elements into l's weight
 * j and saved tensor k (each of which must hold per-output-channel blocks
 * in channel order: a convolution's filters, a vector per channel). Its
 * tensor indices are l's. out->priv is a copy of l's, owned by *out
 * (nto_layer_narrow_free). Returns 0; NTO_EINVAL naming the layer when it
 * cannot be narrowed so (no ops.narrow, or its weights or saved tensors
 * are not per-channel blocks); NTO_ENOMEM; or plan's error. Model-building
 * thread.
 */
int nto_layer_narrow(const nto_layer *l, int mode, int c0, int c1,
                     nto_layer *out, size_t w_off[NTO_MAX_WEIGHTS],
                     size_t s_off[NTO_MAX_SAVED], nto_err *err);
void nto_layer_narrow_free(nto_layer *out);

/* set_prop of a layer type without keys: always NTO_ENOKEY. */
int nto_layer_no_keys(nto_layer *l, const char *key, const char *value,
                      nto_err *err);

/* Identity forward and backward of layers whose output has the bytes of
 * their single input (flatten, multiout): out = in (skipped when out is
 * in's buffer, as for a view, out_is_input), din = dout (skipped when din
 * is NULL or the same buffer). Sizes from l->out_shape. */
void nto_layer_copy_forward(nto_layer *l, const nto_fwd *f);
void nto_layer_copy_backward(nto_layer *l, const nto_bwd *b);

/* Bytes of one float tensor of this shape (not rounded). */
static inline size_t nto_shape_bytes(nto_shape s) {
  return nto_shape_numel(s) * sizeof(float);
}

#endif /* NTO_LAYER_H */

/* model.c - tensor table, execution plan, arena, executor. See model.h. */
#include "model.h"
#include "autowin.h"
#include "lookahead.h"
#include "loss.h"
#include "lr_scheduler.h"
#include "optimizer.h"
#include "registry.h"
#include "schedule.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Step interval of a transient tensor; first > last means unused. */
typedef struct span {
  int first, last;
} span;

struct nto_model {
  const nto_config *conf;
  nto_opt_conf opt;
  nto_lr_conf lr;
  nto_graph g;
  int L;

  nto_tensor *t; /* tensor table */
  span *life;    /* per tensor: steps of the training pass using it (arena
                    placement); persistent tensors have first = -1 */
  int n_t, cap_t;
  nto_plan plan[2]; /* NTO_PASS_TRAIN, NTO_PASS_EVAL */
  int plan_oom;
  nto_plan *rec_train; /* where training uses are recorded (build_plans) */
  nto_offload *off;    /* NULL: all resident (arena) */
  float *output;       /* copy of the last layer's output (N x K) */

  int *out_t;      /* per layer: output tensor */
  int **edge_t;    /* per layer, per input edge: gradient tensor or -1 */
  int loss_grad_t; /* dL/d(out of last layer), -1 when fused */
  int (*pgrad_t)[NTO_MAX_WEIGHTS]; /* per layer, per weight: param grad */
  /* Optimizer state per layer and weight, in update chunks: n_chunk[i][j]
   * chunks of at most chunk_elems elements; state_t[i][j][2k+q] is state q
   * of chunk k (-1: none). One chunk: updated inside B_i; more: each chunk
   * in a step of its own (U) after B_i, so that the update of a large
   * weight never needs all of its optimizer state in RAM at once. */
  int (*n_chunk)[NTO_MAX_WEIGHTS];
  int *(*state_t)[NTO_MAX_WEIGHTS];
  size_t chunk_elems;
  /* Weights of more than one chunk whose layer computes the gradient by
   * rows (layer.h weight_row): the gradient is computed chunk by chunk in
   * the U steps, into one small tensor per chunk (dw_first[i][j] + k, the
   * whole rows covering chunk k), instead of whole in B_i (pgrad_t[i][j]
   * is then -1); dw_row[i][j] is the row length, 0 for whole gradients.
   * dw_cache[i][j]: the layer's cache for those rows (layer.h
   * weight_rows_cache, written by the first U step, read by the others),
   * or -1: none, or larger than the whole gradient (the rows then
   * derive it again in every U step, slower but smallest). */
  int (*dw_first)[NTO_MAX_WEIGHTS];
  int (*dw_row)[NTO_MAX_WEIGHTS];
  int (*dw_cache)[NTO_MAX_WEIGHTS];
  nto_chunk_grads chunk_grads; /* opts.chunk_grads */
  /* Recomputed activations (model.h nto_recompute): re_t[t] for a tensor
   * t < n_re is the tensor an R step writes its content into again before
   * its first backward reader, which reads that one instead; -1: t itself
   * is kept. re_at[i] for a layer i whose output is recomputed so: the
   * layer before whose B step its R step runs; -1 otherwise. re_conv[i]:
   * that R step replays layer i alone from its own inputs (a convolution);
   * else layer i is an activation and the R step replays its input layer
   * (batch normalization), then it. */
  int *re_t, n_re;
  int *re_at;
  unsigned char *re_conv;
  /* The training pass's steps: F_0..F_{L-1}, then per layer i = L-1..0
   * the R steps of the outputs recomputed before its B step (re_at, in
   * layer order), its B_i, and its U steps. */
  struct step_desc *steps;
  int n_steps;
  int *b_step; /* per layer: index of B_i */

  nto_loss_form form;
  int fused;
  int logits_layer; /* layer whose output the loss reads */

  float *arena;
  size_t arena_bytes;
  float *ws;
  size_t ws_bytes;
  float *input_grad; /* persistent copy when compute_input_grad */
  int compute_input_grad;

  long iteration;
  nto_step_trace_fn step_trace;
  void *step_trace_user;
  size_t budget;             /* memory budget, bytes; 0: none */
  int auto_window;           /* NTO_WINDOW_AUTO */
  nto_autowin ctl;           /* its controller */
  nto_window_sample *wtrace; /* its record, one per iteration */
  int n_wtrace, cap_wtrace;
  nto_prefetch prefetch; /* while offloading */
  int no_keep;           /* the engine keeps nothing resident in gaps */
  int room_declined;     /* the last ROOM frontier was not used: the
                            device had no idle time for its traffic */
  int budget_refused;    /* resolve_window refused the memory budget */
  int convs_kept;        /* recompute auto kept the convolutions' outputs:
                            recomputing them did not fit the budget */
  int plain_n;           /* window of plain_read/written, 0: none yet */
  uint64_t plain_read, plain_written; /* the plain window's engine bytes */
  double *step_ms;                    /* per training step: compute time as
                                         measured for the frontier, NULL: none */
  long passes;                        /* training passes run by this process */
  /* The last training pass (with offloading): its wall time, the device's
   * busy time in it (offload.h device_busy_ms) and the bytes it moved. */
  double pass_ms, pass_device_ms;
  uint64_t pass_bytes;
  nto_rng rng;
  nto_grad_hook hook;
  void *hook_user;
};

/* One step of the training pass. */
typedef struct step_desc {
  char kind; /* 'F', 'B', 'U' or 'R' */
  int layer;
  int w, chunk; /* U: weight index and chunk */
} step_desc;

static int step_b(const nto_model *m, int i) { return m->b_step[i]; }

/* Is weight j of layer i updated (its gradient computed whole or by
 * chunk)? */
static int updated(const nto_model *m, int i, int j) {
  return m->pgrad_t[i][j] >= 0 || m->dw_first[i][j] >= 0;
}

/* Elements [*off, *off + *len) of chunk k of weight j of layer i. */
static void chunk_range(const nto_model *m, int i, int j, int k, size_t *off,
                        size_t *len) {
  size_t n = nto_shape_numel(m->g.layers[i].w[j].shape);
  *off = (size_t)k * m->chunk_elems;
  *len = m->n_chunk[i][j] == 1       ? n
         : n - *off < m->chunk_elems ? n - *off
                                     : m->chunk_elems;
  if (m->n_chunk[i][j] == 1)
    *off = 0;
}

/* Rows [*r0, *r1) of row length dw_row[i][j] covering chunk k. */
static void chunk_rows(const nto_model *m, int i, int j, int k, int *r0,
                       int *r1) {
  size_t off, len, row = (size_t)m->dw_row[i][j];
  chunk_range(m, i, j, k, &off, &len);
  *r0 = (int)(off / row);
  *r1 = (int)((off + len + row - 1) / row);
}

/* Append a tensor descriptor; returns its index or -1. */
static int add_tensor(nto_model *m, const char *layer, const char *what,
                      nto_shape shape, nto_role role, int owner) {
  if (m->n_t == m->cap_t) {
    int cap = m->cap_t ? m->cap_t * 2 : 256;
    nto_tensor *t = realloc(m->t, (size_t)cap * sizeof *t);
    span *s = t ? realloc(m->life, (size_t)cap * sizeof *s) : NULL;
    if (t)
      m->t = t;
    if (!t || !s)
      return -1;
    m->life = s;
    m->cap_t = cap;
  }
  nto_tensor *t = &m->t[m->n_t];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%.60s:%.30s", layer, what);
  t->shape = shape;
  t->role = role;
  t->bytes = nto_round_page(nto_shape_bytes(shape));
  t->swap_offset = -1;
  t->state = NTO_RES_NONE;
  t->layer = owner;
  m->life[m->n_t] = (span){.first = -1, .last = -2};
  return m->n_t++;
}

/* Optimizer state q of chunk k of weight j of layer i (the weight's shape
 * for a single chunk, else a vector); its index or -1. */
static int add_state_tensor(nto_model *m, int i, int j, int k, int q) {
  const nto_layer *l = &m->g.layers[i];
  char what[64];
  nto_shape shape = l->w[j].shape;
  if (m->n_chunk[i][j] > 1) {
    size_t off, len;
    chunk_range(m, i, j, k, &off, &len);
    shape = (nto_shape){1, 1, 1, (int)len};
    snprintf(what, sizeof what, "%.30s:opt%d.%d", l->w[j].name, q, k);
  } else {
    snprintf(what, sizeof what, "%.30s:opt%d", l->w[j].name, q);
  }
  return add_tensor(m, l->name, what, shape, NTO_ROLE_OPT_STATE, i);
}

/* Chunks of weight j of layer i and their state tensors (n_state of 2 per
 * chunk). Returns 0 or -1 when out of memory. */
static int add_weight_state(nto_model *m, int i, int j, int n_state) {
  size_t n = nto_shape_numel(m->g.layers[i].w[j].shape);
  int nc =
      n > m->chunk_elems ? (int)((n + m->chunk_elems - 1) / m->chunk_elems) : 1;
  m->n_chunk[i][j] = nc;
  m->state_t[i][j] = malloc(2 * (size_t)nc * sizeof(int));
  if (!m->state_t[i][j])
    return -1;
  for (int k = 0; k < nc; k++)
    for (int q = 0; q < 2; q++) {
      int t = q < n_state ? add_state_tensor(m, i, j, k, q) : -1;
      if (q < n_state && t < 0)
        return -1;
      m->state_t[i][j][2 * k + q] = t;
    }
  return 0;
}

/* Floats of the rows cache of weight j of layer i worth keeping: the
 * layer's (layer.h weight_rows_cache) when no larger than the whole
 * gradient, else 0. At equal size the cache still wins: it lives from the
 * first U step to the last, while a whole gradient also spans B_i's
 * compute, where the read-ahead needs the room (ResNet-18's last stage
 * at batch 32, docs/design-offload.md). */
static size_t rows_cache(const nto_model *m, int i, int j) {
  const nto_layer *l = &m->g.layers[i];
  size_t c = l->ops->weight_rows_cache ? l->ops->weight_rows_cache(l, j) : 0;
  return c <= nto_shape_numel(l->w[j].shape) ? c : 0;
}

/* Is the gradient of weight j of layer i (row length `row`, 0: none)
 * computed by chunk (model.h nto_chunk_grads)? */
static int by_chunk(const nto_model *m, int i, int j, int row) {
  if (m->chunk_grads == NTO_CHUNK_GRADS_OFF || m->n_chunk[i][j] <= 1 ||
      row <= 0 || (size_t)row > m->chunk_elems || i == m->L - 1)
    return 0;
  return m->chunk_grads == NTO_CHUNK_GRADS_ON || rows_cache(m, i, j) > 0;
}

/* Does U step k of weight j of layer i (gradient by chunk) read the
 * layer's inputs? Its backward does, unless a rows cache built by the
 * first U step stands in for them. The plan's uses (update_uses) and the
 * executor (update_chunk) both ask this. */
static int rows_read_input(const nto_model *m, int i, int j, int k) {
  return m->g.layers[i].bwd_needs_input && (m->dw_cache[i][j] < 0 || k == 0);
}

/* The per-chunk gradient tensors of weight j of layer i (dw_first) and
 * the cache of their rows (dw_cache) when it is no larger than the whole
 * gradient. */
static int add_chunk_grads(nto_model *m, int i, int j) {
  const nto_layer *l = &m->g.layers[i];
  size_t cache = rows_cache(m, i, j);
  if (cache > 0) {
    char what[48];
    snprintf(what, sizeof what, "%.30s.rows_cache", l->w[j].name);
    nto_shape shape = {1, 1, 1, (int)cache};
    m->dw_cache[i][j] =
        add_tensor(m, l->name, what, shape, NTO_ROLE_ACTIVATION, i);
    if (m->dw_cache[i][j] < 0)
      return -1;
  }
  for (int k = 0; k < m->n_chunk[i][j]; k++) {
    int r0, r1;
    chunk_rows(m, i, j, k, &r0, &r1);
    char what[48];
    snprintf(what, sizeof what, "d%.30s.%d", l->w[j].name, k);
    nto_shape shape = {1, 1, r1 - r0, m->dw_row[i][j]};
    int t = add_tensor(m, l->name, what, shape, NTO_ROLE_PARAM_GRAD, i);
    if (t < 0)
      return -1;
    if (k == 0)
      m->dw_first[i][j] = t;
  }
  return 0;
}

static int is_input(const nto_layer *l) { return l->ops == &nto_input_layer; }

/* Does layer p's output need a gradient? */
static int needs_grad(const nto_model *m, int p) {
  return !is_input(&m->g.layers[p]) || m->compute_input_grad;
}

/* edge_t value of a gradient computed in place, until resolved. */
#define EDGE_IN_PLACE (-2)

/* Does layer i compute dL/d(its input) into the tensor of dL/d(its
 * output) (layer.h bwd_in_place)? Only for one input of the output's size,
 * with a consumer whose edge holds that gradient, and when nothing reads
 * the gradient after B_i (no U step of the layer computes a weight's
 * gradient from it). Called once the layer's weights are set up. */
static int grad_in_place(const nto_model *m, int i) {
  const nto_layer *l = &m->g.layers[i];
  if (!l->bwd_in_place || l->n_in != 1 || i == m->L - 1 ||
      m->g.n_consumers[i] < 1 ||
      nto_shape_numel(l->in_shape[0]) != nto_shape_numel(l->out_shape))
    return 0;
  for (int j = 0; j < l->n_w; j++)
    if (m->dw_first[i][j] >= 0)
      return 0;
  return 1;
}

static int dout_tensor(const nto_model *m, int i);

/* Create every tensor descriptor and record its uses. */
static int build_tensors(nto_model *m) {
  int L = m->L;
  nto_graph *g = &m->g;
  m->out_t = calloc((size_t)L, sizeof *m->out_t);
  m->edge_t = calloc((size_t)L, sizeof *m->edge_t);
  m->pgrad_t = calloc((size_t)L, sizeof *m->pgrad_t);
  m->state_t = calloc((size_t)L, sizeof *m->state_t);
  m->n_chunk = calloc((size_t)L, sizeof *m->n_chunk);
  m->dw_first = calloc((size_t)L, sizeof *m->dw_first);
  m->dw_row = calloc((size_t)L, sizeof *m->dw_row);
  m->dw_cache = calloc((size_t)L, sizeof *m->dw_cache);
  if (!m->out_t || !m->edge_t || !m->pgrad_t || !m->state_t || !m->n_chunk ||
      !m->dw_first || !m->dw_row || !m->dw_cache)
    return -1;
  int n_state = nto_opt_state_count(&m->opt);
  for (int i = 0; i < L; i++) {
    nto_layer *l = &g->layers[i];
    /* a view (flatten, multiout) shares its input's tensor */
    m->out_t[i] = l->out_is_input ? m->out_t[l->in[0]]
                                  : add_tensor(m, l->name, "out", l->out_shape,
                                               NTO_ROLE_ACTIVATION, i);
    m->edge_t[i] = malloc((size_t)(l->n_in ? l->n_in : 1) * sizeof(int));
    if (m->out_t[i] < 0 || !m->edge_t[i])
      return -1;
    for (int j = 0; j < l->n_w; j++) {
      char what[48];
      l->w[j].tensor = add_tensor(m, l->name, l->w[j].name, l->w[j].shape,
                                  NTO_ROLE_WEIGHT, i);
      m->pgrad_t[i][j] = m->dw_first[i][j] = m->dw_cache[i][j] = -1;
      if (l->w[j].tensor < 0)
        return -1;
      if (!l->w[j].trainable || !l->trainable)
        continue;
      if (add_weight_state(m, i, j, n_state) != 0)
        return -1;
      int row = l->ops->weight_row ? l->ops->weight_row(l, j) : 0;
      if (by_chunk(m, i, j, row)) {
        m->dw_row[i][j] = row;
        if (add_chunk_grads(m, i, j) != 0)
          return -1;
        continue;
      }
      snprintf(what, sizeof what, "d%.40s", l->w[j].name);
      m->pgrad_t[i][j] =
          add_tensor(m, l->name, what, l->w[j].shape, NTO_ROLE_PARAM_GRAD, i);
      if (m->pgrad_t[i][j] < 0)
        return -1;
    }
    for (int k = 0; k < l->n_saved; k++) {
      l->saved[k].tensor =
          add_tensor(m, l->name, l->saved[k].name, l->saved[k].shape,
                     NTO_ROLE_ACTIVATION, i);
      if (l->saved[k].tensor < 0)
        return -1;
    }
    for (int k = 0; k < l->n_in; k++) {
      char what[32];
      snprintf(what, sizeof what, "grad_in%d", k);
      m->edge_t[i][k] =
          !needs_grad(m, l->in[k]) ? -1
          : grad_in_place(m, i)
              ? EDGE_IN_PLACE
              : add_tensor(m, l->name, what, l->in_shape[k], NTO_ROLE_GRAD, i);
    }
  }
  /* an in-place input gradient is the tensor of the output's gradient:
   * the first consumer's edge (dout_tensor). From the last layer down, so
   * that a chain of such layers (batch normalization, activation) shares
   * one tensor. */
  for (int i = L - 1; i >= 0; i--)
    if (g->layers[i].n_in > 0 && m->edge_t[i][0] == EDGE_IN_PLACE)
      m->edge_t[i][0] = dout_tensor(m, i);
  return 0;
}

/* The latest layer (the first in backward order) after r whose backward
 * step reads layer i's output: a consumer that reads its inputs, or one
 * reading a view (flatten, multiout) of it; r if none. */
static int first_bwd_reader(const nto_model *m, int i, int r) {
  const nto_edge *e = m->g.consumers[i];
  for (int c = 0; c < m->g.n_consumers[i]; c++) {
    const nto_layer *l = &m->g.layers[e[c].layer];
    if (l->out_is_input)
      r = first_bwd_reader(m, e[c].layer, r);
    else if (l->bwd_needs_input && e[c].layer > r)
      r = e[c].layer;
  }
  return r;
}

/* May layer i's output be recomputed in backward (model.h nto_recompute)?
 * i: an activation without weights or saved tensors whose output the loss
 * does not read; its input: a layer with an element-wise replay (batch
 * normalization) read by i alone, whose backward reads its own input
 * (which is therefore kept anyway, or recomputed by a convolution's R
 * step) and whose input is not an activation recomputed itself. */
static int recomputable(const nto_model *m, int i) {
  const nto_layer *a = &m->g.layers[i];
  int t = m->out_t[i];
  if (!a->ops->replay || a->replay_macs || a->n_in != 1 || a->n_w ||
      a->n_saved || a->out_is_input || a->out_kind != NTO_OUT_PLAIN ||
      t == m->out_t[m->L - 1] || t == m->out_t[m->logits_layer])
    return 0;
  const nto_layer *p = &m->g.layers[a->in[0]];
  int x = p->in[0];
  return p->ops->replay && !p->replay_macs && p->n_in == 1 &&
         !p->out_is_input && p->out_kind == NTO_OUT_PLAIN &&
         p->bwd_needs_input && m->g.n_consumers[a->in[0]] == 1 &&
         (m->re_t[m->out_t[x]] < 0 || m->re_conv[x]);
}

/* May convolution i's output be recomputed (model.h nto_recompute)? A
 * replay of at most NTO_RECOMPUTE_MACS multiply-adds per output element,
 * from one input that its own backward reads (kept anyway) and that is not
 * recomputed itself; nothing saved; an output the loss does not read,
 * read by one layer, not a view, whose backward reads it (so that it is
 * kept from forward to backward unless recomputed). */
static int conv_recomputable(const nto_model *m, int i, int act) {
  const nto_layer *l = &m->g.layers[i];
  int t = m->out_t[i];
  if (!l->ops->replay || l->replay_macs <= 0 ||
      l->replay_macs > NTO_RECOMPUTE_MACS || l->n_in != 1 || l->n_saved ||
      !l->bwd_needs_input || l->out_is_input || l->out_kind != NTO_OUT_PLAIN ||
      t == m->out_t[m->L - 1] || t == m->out_t[m->logits_layer] ||
      m->g.n_consumers[i] != 1 || m->re_t[m->out_t[l->in[0]]] >= 0)
    return 0;
  int bn = m->g.consumers[i][0].layer;
  const nto_layer *c = &m->g.layers[bn];
  if (c->out_is_input || !c->bwd_needs_input)
    return 0;
  /* the R step runs before the first backward reader of the activation
   * after it, if that is recomputed: at most NTO_RECOMPUTE_SPAN layers on */
  int r = bn;
  if (act && m->g.n_consumers[bn] == 1) {
    int a = m->g.consumers[bn][0].layer;
    if (recomputable(m, a))
      r = first_bwd_reader(m, a, a);
  }
  return r - i <= NTO_RECOMPUTE_SPAN;
}

/* Decide which outputs are recomputed (activations when `act`,
 * convolutions when `conv`), in layer order so that a producer is decided
 * before its consumers, and add their recomputed tensors. A convolution's
 * R step runs before the R step of the activation that reads its output
 * (build_steps puts R steps at one B step in layer order). Returns 0 or -1
 * when out of memory. */
static int add_recomputed(nto_model *m, int act, int conv) {
  m->n_re = m->n_t;
  m->re_t = malloc((size_t)m->n_re * sizeof *m->re_t);
  m->re_at = malloc((size_t)m->L * sizeof *m->re_at);
  m->re_conv = calloc((size_t)m->L, 1);
  if (!m->re_t || !m->re_at || !m->re_conv)
    return -1;
  for (int t = 0; t < m->n_re; t++)
    m->re_t[t] = -1;
  for (int i = 0; i < m->L; i++) {
    m->re_at[i] = -1;
    int is_conv = conv && conv_recomputable(m, i, act);
    if (!is_conv && !(act && recomputable(m, i)))
      continue;
    const nto_layer *a = &m->g.layers[i];
    int t = add_tensor(m, a->name, "out.recomputed", a->out_shape,
                       NTO_ROLE_ACTIVATION, i);
    if (t < 0)
      return -1;
    m->re_t[m->out_t[i]] = t;
    m->re_at[i] = first_bwd_reader(m, i, i);
    m->re_conv[i] = (unsigned char)is_conv;
    if (!is_conv) { /* the convolution before reads no later than this */
      int x = m->g.layers[a->in[0]].in[0];
      if (m->re_conv[x] && m->re_at[x] < m->re_at[i])
        m->re_at[x] = m->re_at[i];
    }
  }
  return 0;
}

/* The tensor backward reads for t: its recomputed twin, or t. */
static int bwd_tensor(const nto_model *m, int t) {
  return t >= 0 && t < m->n_re && m->re_t[t] >= 0 ? m->re_t[t] : t;
}

/* Step s of pass `pass` accesses tensor t (t < 0: none) with mode. */
static void use(nto_model *m, int pass, int s, int t, int mode) {
  nto_plan *p = pass == NTO_PASS_TRAIN ? m->rec_train : &m->plan[pass];
  if (nto_plan_use(p, s, t, mode) != 0)
    m->plan_oom = 1;
}

/* F_i: the layer's input(s), output, weights (training also writes the
 * running statistics, the weights without gradient) and saved tensors. In
 * an inference pass the loss is computed in F_{L-1}. */
static void forward_uses(nto_model *m, int pass, int i) {
  nto_layer *l = &m->g.layers[i];
  int train = pass == NTO_PASS_TRAIN;
  if (!l->out_is_input) /* a view writes nothing: its input is its output */
    use(m, pass, i, m->out_t[i], NTO_USE_WRITE);
  for (int k = 0; k < l->n_in; k++)
    use(m, pass, i, m->out_t[l->in[k]], NTO_USE_READ);
  for (int j = 0; j < l->n_w; j++)
    use(m, pass, i, l->w[j].tensor,
        NTO_USE_READ | (train && !l->w[j].trainable ? NTO_USE_WRITE : 0));
  for (int k = 0; k < l->n_saved; k++)
    use(m, pass, i, l->saved[k].tensor, NTO_USE_WRITE);
  if (!train && i == m->L - 1)
    use(m, pass, i, m->out_t[m->logits_layer], NTO_USE_READ);
}

/* The tensor holding dL/d(out of layer i) once B_i gathered it. */
static int dout_tensor(const nto_model *m, int i) {
  if (i == m->L - 1)
    return m->loss_grad_t;
  const nto_edge *e = m->g.consumers[i];
  return m->edge_t[e[0].layer][e[0].input];
}

/* dL/d(out of layer i) is gathered in B_i from its consumers' edges (the
 * first one accumulates the others), or is the loss gradient. */
static void gather_uses(nto_model *m, int i, int s) {
  if (i == m->L - 1) {
    use(m, NTO_PASS_TRAIN, s, m->loss_grad_t, NTO_USE_READ);
    return;
  }
  const nto_edge *e = m->g.consumers[i];
  for (int c = 0; c < m->g.n_consumers[i]; c++)
    use(m, NTO_PASS_TRAIN, s, m->edge_t[e[c].layer][e[c].input],
        c == 0 ? NTO_USE_RW : NTO_USE_READ);
}

/* B_i: the loss (for the last layer), the gradient gathering, backward
 * and the fused optimizer update. */
static void backward_uses(nto_model *m, int i) {
  nto_layer *l = &m->g.layers[i];
  int s = step_b(m, i), L = m->L, P = NTO_PASS_TRAIN;
  if (i == L - 1) {
    use(m, P, s, m->out_t[m->logits_layer], NTO_USE_READ);
    use(m, P, s, m->out_t[L - 1], NTO_USE_READ);
    use(m, P, s, m->fused ? m->edge_t[L - 1][0] : m->loss_grad_t,
        NTO_USE_WRITE);
    if (m->fused)
      return; /* the loss gradient is the input gradient */
  }
  if (is_input(l) && !m->compute_input_grad)
    return;
  gather_uses(m, i, s);
  if (is_input(l))
    return;
  for (int k = 0; k < l->n_in; k++) {
    if (l->bwd_needs_input)
      use(m, P, s, bwd_tensor(m, m->out_t[l->in[k]]), NTO_USE_READ);
    use(m, P, s, m->edge_t[i][k], NTO_USE_WRITE);
  }
  if (l->bwd_needs_output)
    use(m, P, s, bwd_tensor(m, m->out_t[i]), NTO_USE_READ);
  for (int k = 0; k < l->n_saved; k++)
    use(m, P, s, l->saved[k].tensor, NTO_USE_READ);
  for (int j = 0; j < l->n_w; j++) {
    int fused = m->pgrad_t[i][j] >= 0 && m->n_chunk[i][j] == 1;
    use(m, P, s, l->w[j].tensor, NTO_USE_READ | (fused ? NTO_USE_WRITE : 0));
    use(m, P, s, m->pgrad_t[i][j], fused ? NTO_USE_RW : NTO_USE_WRITE);
    if (fused) {
      use(m, P, s, m->state_t[i][j][0], NTO_USE_RW);
      use(m, P, s, m->state_t[i][j][1], NTO_USE_RW);
    }
  }
}

/* U step s: chunk k of weight j of layer i is updated. Tensors that B_i
 * and the backward step after the U steps (fb: the plan of B and F uses
 * only) both use are held through it, so that the updates in between do
 * not push them out of a small window. */
static void update_uses(nto_model *m, const nto_plan *fb, int s, int i, int j,
                        int k) {
  int P = NTO_PASS_TRAIN, b = step_b(m, i), next = b + 1;
  use(m, P, s, m->g.layers[i].w[j].tensor, NTO_USE_RW);
  use(m, P, s, m->pgrad_t[i][j], NTO_USE_READ);
  if (m->dw_first[i][j] >= 0) { /* its gradient rows, from B_i's inputs */
    const nto_layer *l = &m->g.layers[i];
    int cache = m->dw_cache[i][j];
    use(m, P, s, m->dw_first[i][j] + k, NTO_USE_WRITE);
    use(m, P, s, dout_tensor(m, i), NTO_USE_READ);
    use(m, P, s, cache, k == 0 ? NTO_USE_WRITE : NTO_USE_READ);
    for (int q = 0; rows_read_input(m, i, j, k) && q < l->n_in; q++)
      use(m, P, s, bwd_tensor(m, m->out_t[l->in[q]]), NTO_USE_READ);
    if (l->bwd_needs_output)
      use(m, P, s, bwd_tensor(m, m->out_t[i]), NTO_USE_READ);
    for (int q = 0; q < l->n_saved; q++)
      use(m, P, s, l->saved[q].tensor, NTO_USE_READ);
  }
  use(m, P, s, m->state_t[i][j][2 * k], NTO_USE_RW);
  use(m, P, s, m->state_t[i][j][2 * k + 1], NTO_USE_RW);
  while (next < m->n_steps &&
         (m->steps[next].kind == 'U' || m->steps[next].kind == 'R'))
    next++;
  if (next == m->n_steps)
    return;
  for (int x = fb->step_first[b]; x < fb->step_first[b + 1]; x++)
    for (int y = fb->step_first[next]; y < fb->step_first[next + 1]; y++)
      if (fb->step_t[x] == fb->step_t[y])
        use(m, P, s, fb->step_t[x], NTO_USE_HOLD);
}

/* The layer whose replay starts R step a: convolution a itself, or the
 * input layer (batch normalization) of activation a. */
static nto_layer *replayed(nto_model *m, int a) {
  return m->re_conv[a] ? &m->g.layers[a] : &m->g.layers[m->g.layers[a].in[0]];
}

/* R step s: convolution a's output is recomputed from its input and
 * weights; activation a's from its input layer's (batch normalization's)
 * input (or that input's recomputed tensor), weights and saved tensors. */
static void recompute_uses(nto_model *m, int s, int a) {
  const nto_layer *p = replayed(m, a);
  int P = NTO_PASS_TRAIN;
  use(m, P, s, bwd_tensor(m, m->out_t[p->in[0]]), NTO_USE_READ);
  for (int j = 0; j < p->n_w; j++)
    use(m, P, s, p->w[j].tensor, NTO_USE_READ);
  for (int k = 0; k < p->n_saved; k++)
    use(m, P, s, p->saved[k].tensor, NTO_USE_READ);
  use(m, P, s, m->re_t[m->out_t[a]], NTO_USE_WRITE);
}

/* The training pass's step table (see struct nto_model). Returns 0 or -1
 * when out of memory. */
static int build_steps(nto_model *m) {
  int n = 2 * m->L;
  for (int i = 0; i < m->L; i++) {
    n += m->re_at[i] >= 0;
    for (int j = 0; j < m->g.layers[i].n_w; j++)
      if (updated(m, i, j) && m->n_chunk[i][j] > 1)
        n += m->n_chunk[i][j];
  }
  m->steps = malloc((size_t)n * sizeof *m->steps);
  m->b_step = malloc((size_t)m->L * sizeof *m->b_step);
  if (!m->steps || !m->b_step)
    return -1;
  int s = 0;
  for (int i = 0; i < m->L; i++)
    m->steps[s++] = (step_desc){'F', i, -1, -1};
  for (int i = m->L - 1; i >= 0; i--) {
    for (int a = 0; a < m->L; a++) /* producers first (add_recomputed) */
      if (m->re_at[a] == i)
        m->steps[s++] = (step_desc){'R', a, -1, -1};
    m->b_step[i] = s;
    m->steps[s++] = (step_desc){'B', i, -1, -1};
    for (int j = 0; j < m->g.layers[i].n_w; j++)
      for (int k = 0;
           updated(m, i, j) && m->n_chunk[i][j] > 1 && k < m->n_chunk[i][j];
           k++)
        m->steps[s++] = (step_desc){'U', i, j, k};
  }
  m->n_steps = s;
  return 0;
}

/* The training and inference plans (plan.h), and the step interval of
 * every transient tensor in the training pass (arena placement). */
static int build_plans(nto_model *m, nto_err *err) {
  size_t *bytes = malloc((size_t)(m->n_t + 1) * sizeof *bytes);
  unsigned char *pers = malloc((size_t)m->n_t + 1);
  if (!bytes || !pers) {
    free(bytes);
    free(pers);
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  for (int t = 0; t < m->n_t; t++) {
    bytes[t] = m->t[t].bytes;
    pers[t] =
        m->t[t].role == NTO_ROLE_WEIGHT || m->t[t].role == NTO_ROLE_OPT_STATE;
  }
  nto_plan fb; /* the F, R and B uses alone, to find what U steps hold */
  int rc = nto_plan_init(&fb, m->n_steps, m->n_t, bytes, pers, err);
  if (rc == 0)
    rc = nto_plan_init(&m->plan[NTO_PASS_TRAIN], m->n_steps, m->n_t, bytes,
                       pers, err);
  if (rc == 0)
    rc = nto_plan_init(&m->plan[NTO_PASS_EVAL], m->L, m->n_t, bytes, pers, err);
  free(bytes);
  free(pers);
  for (int pass = 0; rc == 0 && pass < 2; pass++) {
    m->rec_train = pass == 0 ? &fb : &m->plan[NTO_PASS_TRAIN];
    for (int i = 0; i < m->L; i++) {
      forward_uses(m, NTO_PASS_TRAIN, i);
      backward_uses(m, i);
      if (pass == 1)
        forward_uses(m, NTO_PASS_EVAL, i);
    }
    for (int s = 0; s < m->n_steps; s++)
      if (m->steps[s].kind == 'R')
        recompute_uses(m, s, m->steps[s].layer);
    if (pass == 0)
      rc = m->plan_oom ? nto_err_set(err, NTO_ENOMEM, "out of memory")
                       : nto_plan_finish(&fb, err);
  }
  for (int s = 0; rc == 0 && s < m->n_steps; s++)
    if (m->steps[s].kind == 'U')
      update_uses(m, &fb, s, m->steps[s].layer, m->steps[s].w,
                  m->steps[s].chunk);
  nto_plan_free(&fb);
  if (rc == 0 && m->plan_oom)
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc == 0)
    rc = nto_plan_finish(&m->plan[NTO_PASS_TRAIN], err);
  if (rc == 0)
    rc = nto_plan_finish(&m->plan[NTO_PASS_EVAL], err);
  for (int t = 0; rc == 0 && t < m->n_t; t++) {
    const nto_plan *p = &m->plan[NTO_PASS_TRAIN];
    m->life[t] = (span){.first = -1, .last = -2};
    if (!p->persistent[t] && nto_plan_first_use(p, t) >= 0)
      m->life[t] = (span){nto_plan_first_use(p, t), nto_plan_last_use(p, t)};
  }
  return rc;
}

/* Order of placement: larger first, then earlier first use, then index.
 * ctx: the model (qsort_r). */
static int by_size(const void *a, const void *b, void *ctx) {
  const nto_model *m = ctx;
  int i = *(const int *)a, j = *(const int *)b;
  const nto_tensor *ti = &m->t[i], *tj = &m->t[j];
  if (ti->bytes != tj->bytes)
    return ti->bytes < tj->bytes ? 1 : -1;
  if (m->life[i].first != m->life[j].first)
    return m->life[i].first - m->life[j].first;
  return i - j;
}

static int overlap(span a, span b) {
  return a.first <= b.last && b.first <= a.last;
}

/*
 * Greedy best-fit placement of transient tensors in one arena: each tensor,
 * largest first, goes to the lowest offset where it overlaps no placed
 * tensor whose step interval intersects its own. Offsets are multiples of
 * NTO_PAGE. Sets t->swap_offset temporarily to the arena offset; returns the
 * arena size in bytes.
 */
static size_t place_arena(nto_model *m, size_t *offset) {
  int *idx = malloc((size_t)m->n_t * sizeof *idx);
  int *placed = malloc((size_t)m->n_t * sizeof *placed);
  if (!idx || !placed) {
    free(idx);
    free(placed);
    return (size_t)-1;
  }
  int n = 0, np = 0;
  for (int i = 0; i < m->n_t; i++)
    if (m->life[i].first >= 0 && m->life[i].first <= m->life[i].last)
      idx[n++] = i;
  qsort_r(idx, (size_t)n, sizeof *idx, by_size, m);
  size_t total = 0;
  for (int a = 0; a < n; a++) {
    int i = idx[a];
    size_t off = 0;
    int moved = 1;
    while (moved) { /* lowest offset free of time-overlapping tensors */
      moved = 0;
      for (int b = 0; b < np; b++) {
        int j = placed[b];
        if (!overlap(m->life[i], m->life[j]))
          continue;
        if (off < offset[j] + m->t[j].bytes &&
            offset[j] < off + m->t[i].bytes) {
          off = offset[j] + m->t[j].bytes;
          moved = 1;
        }
      }
    }
    offset[i] = off;
    placed[np++] = i;
    if (off + m->t[i].bytes > total)
      total = off + m->t[i].bytes;
  }
  free(idx);
  free(placed);
  return total;
}

/* The workspace (im2col), shared by all layers and always resident. */
static int alloc_workspace(nto_model *m, nto_err *err) {
  m->ws_bytes = 0;
  for (int i = 0; i < m->L; i++)
    if (m->g.layers[i].ws_bytes > m->ws_bytes)
      m->ws_bytes = m->g.layers[i].ws_bytes;
  if (m->ws_bytes && !(m->ws = nto_alloc_aligned(m->ws_bytes)))
    return nto_err_set(err, NTO_ENOMEM,
                       "cannot allocate %zu bytes of "
                       "workspace",
                       m->ws_bytes);
  return 0;
}

/* All resident: allocate persistent tensors, place transients in the
 * arena. */
static int allocate(nto_model *m, nto_err *err) {
  size_t *offset = calloc((size_t)m->n_t, sizeof *offset);
  if (!offset)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  size_t total = place_arena(m, offset);
  if (total == (size_t)-1) {
    free(offset);
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  m->arena_bytes = total;
  m->arena = nto_alloc_aligned(total);
  if (!m->arena) {
    free(offset);
    return nto_err_set(err, NTO_ENOMEM, "cannot allocate %zu bytes", total);
  }
  for (int i = 0; i < m->n_t; i++) {
    nto_tensor *t = &m->t[i];
    if (t->role == NTO_ROLE_WEIGHT || t->role == NTO_ROLE_OPT_STATE) {
      t->data = nto_alloc_aligned(t->bytes);
      if (!t->data) {
        free(offset);
        return nto_err_set(err, NTO_ENOMEM, "cannot allocate %zu bytes for %s",
                           t->bytes, t->name);
      }
    } else if (m->life[i].first >= 0 && m->life[i].first <= m->life[i].last) {
      t->data = (float *)((char *)m->arena + offset[i]);
    } else {
      continue; /* never used */
    }
    t->state = NTO_RES_RESIDENT;
  }
  free(offset);
  return 0;
}

/* Plan only: arena size and workspace, nothing allocated. */
static int plan_arena(nto_model *m, nto_err *err) {
  size_t *offset = calloc((size_t)m->n_t, sizeof *offset);
  size_t total = offset ? place_arena(m, offset) : (size_t)-1;
  free(offset);
  if (total == (size_t)-1)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  m->arena_bytes = total;
  for (int i = 0; i < m->L; i++)
    if (m->g.layers[i].ws_bytes > m->ws_bytes)
      m->ws_bytes = m->g.layers[i].ws_bytes;
  return 0;
}

/* Offloading: the engine owns every tensor buffer; weights are
 * initialized one at a time through a bounce buffer and stored in the
 * swap file (optimizer state starts as zeros without I/O). */
static int start_offload(nto_model *m, const nto_offload_opts *oo,
                         nto_err *err) {
  const nto_plan *plans[2] = {&m->plan[NTO_PASS_TRAIN],
                              &m->plan[NTO_PASS_EVAL]};
  int rc = nto_offload_create(&m->off, m->t, m->n_t, plans, oo, err);
  for (int i = 0; rc == 0 && i < m->L; i++) {
    nto_layer *l = &m->g.layers[i];
    for (int j = 0; rc == 0 && j < l->n_w; j++) {
      nto_tensor *t = &m->t[l->w[j].tensor];
      float *buf = nto_alloc_aligned(t->bytes);
      if (!buf)
        return nto_err_set(err, NTO_ENOMEM, "out of memory");
      nto_init_fill(buf, nto_tensor_numel(t), l->w[j].init, l->w[j].fan_in,
                    l->w[j].fan_out, &m->rng);
      rc = nto_offload_store(m->off, l->w[j].tensor, buf, err);
      nto_free_aligned(buf);
    }
  }
  return rc;
}

static void init_weights(nto_model *m) {
  for (int i = 0; i < m->L; i++) {
    nto_layer *l = &m->g.layers[i];
    for (int j = 0; j < l->n_w; j++) {
      nto_tensor *t = &m->t[l->w[j].tensor];
      nto_init_fill(t->data, nto_tensor_numel(t), l->w[j].init, l->w[j].fan_in,
                    l->w[j].fan_out, &m->rng);
    }
  }
}

static int setup_loss(nto_model *m, nto_err *err) {
  int last = m->L - 1;
  nto_layer *out = &m->g.layers[last];
  m->form = nto_loss_form_for(m->conf->model.loss, out->out_kind, &m->fused);
  m->logits_layer = m->fused ? out->in[0] : last;
  int inputs = 0;
  for (int i = 0; i < m->L; i++)
    inputs += is_input(&m->g.layers[i]);
  if (inputs != 1 || !is_input(&m->g.layers[0]))
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: exactly one input layer is supported, found %d",
                       m->conf->path, inputs);
  if (last == 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: the model has no layer after "
                       "its input",
                       m->conf->path);
  return 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* "812.0 KiB", "26.5 MiB", "1.2 GiB": bytes in the unit that reads best
 * (a budget of 1K must not print as 0.0 MiB). */
static void fmt_size(char *buf, size_t len, size_t bytes) {
  static const char *const unit[] = {"KiB", "MiB", "GiB"};
  double v = bytes / 1024.0;
  int u = 0;
  while (u < 2 && v >= 1024.0) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, len, "%.1f %s", v, unit[u]);
}

/* The tensor region a window of n steps needs (the larger of the two
 * passes' schedules; schedule.h) into *region; upto: the training pass's
 * read frontier (NULL: s + n). */
static int window_region(const nto_model *m, int n, const int *upto,
                         size_t *region, nto_err *err) {
  *region = 0;
  for (int k = 0; k < 2; k++) {
    nto_schedule sc;
    int rc = nto_schedule_build(&sc, &m->plan[k], n, k ? NULL : upto, err);
    if (rc != 0)
      return rc;
    if (sc.region > *region)
      *region = sc.region;
    nto_schedule_free(&sc);
  }
  return 0;
}

/* Bytes a window of n with frontier upto (NULL: s + n) needs: its
 * region + the workspace; what a memory budget is checked against. */
static int frontier_need(const nto_model *m, int n, const int *upto,
                         size_t *need, nto_err *err) {
  size_t region = 0;
  int rc = window_region(m, n, upto, &region, err);
  *need = rc == 0 ? region + nto_round_page(m->ws_bytes) : 0;
  return rc;
}

/* The largest window (>= 1) whose region + workspace fits budget, or 0;
 * *min_need: what window 1 needs. Regions grow with N but not strictly
 * (placement), so the scan goes on past a miss and stops after 8 misses
 * in a row or at the longest window (the training pass's steps - 1). */
static int largest_fit(const nto_model *m, size_t budget, int *best,
                       size_t *min_need, nto_err *err) {
  size_t need;
  int S = m->plan[NTO_PASS_TRAIN].n_steps, misses = 0;
  *best = 0;
  for (int n = 1; n <= (S > 2 ? S - 1 : 1) && misses < 8; n++) {
    int rc = frontier_need(m, n, NULL, &need, err);
    if (rc != 0)
      return rc;
    if (n == 1)
      *min_need = need;
    if (need <= budget) {
      *best = n;
      misses = 0;
    } else {
      misses++;
    }
  }
  return 0;
}

/* Decide the window from opts (mode, window, budget): *window 0 means all
 * resident; *max the adaptive window's upper bound. NTO_ECONFIG when the
 * budget cannot be met, naming what would fit. */
static int resolve_window(nto_model *m, const nto_model_opts *opts, int *window,
                          int *max, nto_err *err) {
  size_t budget = opts->memory_budget, total = nto_model_mem_plan(m).total;
  size_t ws = nto_round_page(m->ws_bytes), min_need = 0;
  int S = m->plan[NTO_PASS_TRAIN].n_steps, fit = 0, rc = 0;
  char b[32], need[32], w[32];
  const char *src = opts->budget_source ? opts->budget_source : "memory budget";
  *window = opts->window_mode == NTO_WINDOW_AUTO ? 1 : opts->offload.window;
  *max = S > 2 ? S - 1 : 1;
  if (!budget && opts->window_mode == NTO_WINDOW_AUTO) {
    /* no budget: windows that need as much as everything resident are
     * pointless (resident would not stall at all) */
    rc = largest_fit(m, total - 1, &fit, &min_need, err);
    *max = fit > 0 ? fit : 1;
    return rc;
  }
  if (!budget)
    return 0;
  fmt_size(b, sizeof b, budget);
  fmt_size(w, sizeof w, ws);
  if (opts->window_mode == NTO_WINDOW_FIXED && *window == 0) {
    fmt_size(need, sizeof need, total);
    return total <= budget
               ? 0
               : nto_err_set(err, NTO_ECONFIG,
                             "%s %s: training with everything resident "
                             "needs %s; give a window or no window",
                             src, b, need);
  }
  if (opts->window_mode == NTO_WINDOW_BUDGET && total <= budget) {
    *window = 0;
    return 0;
  }
  rc = largest_fit(m, budget, &fit, &min_need, err);
  if (rc != 0)
    return rc;
  fmt_size(need, sizeof need, min_need);
  m->budget_refused = fit == 0;
  if (fit == 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s %s is below the minimum this model needs at "
                       "batch %d: %s (window 1's tensor region plus the "
                       "im2col workspace of %s)",
                       src, b, m->g.batch, need, w);
  if (opts->window_mode == NTO_WINDOW_FIXED) {
    size_t wneed = 0;
    rc = frontier_need(m, *window, NULL, &wneed, err);
    fmt_size(need, sizeof need, wneed);
    m->budget_refused = rc == 0 && wneed > budget;
    if (m->budget_refused)
      return nto_err_set(err, NTO_ECONFIG,
                         "%s %s: window %d needs %s (its tensor region "
                         "plus the im2col workspace of %s); the largest "
                         "window within the budget is %d",
                         src, b, *window, need, w, fit);
    return rc;
  }
  if (opts->window_mode == NTO_WINDOW_BUDGET)
    *window = fit;
  *max = fit;
  return 0;
}

/* Buffers of a runnable model: tensors (arena or offload engine),
 * workspace, output copy, input gradient; initial weights. */
static int alloc_buffers(nto_model *m, const nto_model_opts *opts,
                         nto_err *err) {
  int rc = alloc_workspace(m, err);
  size_t out_bytes = nto_shape_bytes(m->g.layers[m->L - 1].out_shape);
  if (rc == 0 && !(m->output = nto_alloc_aligned(out_bytes)))
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc == 0 && m->compute_input_grad &&
      !(m->input_grad =
            nto_alloc_aligned(nto_shape_bytes(m->g.layers[0].out_shape))))
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc != 0)
    return rc;
  int window = 0, max = 0;
  rc = plan_arena(m, err); /* mem_plan reports the arena when offloading */
  if (rc == 0)
    rc = resolve_window(m, opts, &window, &max, err);
  if (rc != 0)
    return rc;
  if (window > 0) {
    nto_offload_opts oo = opts->offload;
    oo.window = window;
    m->budget = opts->memory_budget;
    m->auto_window = opts->window_mode == NTO_WINDOW_AUTO;
    m->prefetch = opts->prefetch;
    m->no_keep = oo.no_keep;
    if (m->auto_window) {
      nto_autowin_init(&m->ctl, 1, max);
      m->ctl.by_time = m->prefetch == NTO_PREFETCH_TIME;
    }
    return start_offload(m, &oo, err);
  }
  rc = allocate(m, err);
  if (rc == 0)
    init_weights(m);
  return rc;
}

/* Are convolutions' outputs recomputed (model.h nto_recompute)? */
static int recompute_convs(const nto_model_opts *o) {
  int offloaded = o->window_mode != NTO_WINDOW_FIXED || o->offload.window > 0;
  return o->recompute == NTO_RECOMPUTE_ON ||
         (o->recompute == NTO_RECOMPUTE_AUTO && offloaded);
}

int nto_model_recomputed_convs(const nto_model *m) {
  int n = 0;
  for (int i = 0; i < m->L; i++)
    n += m->re_conv[i];
  return n;
}

int nto_model_convs_kept(const nto_model *m) { return m->convs_kept; }

static int create(nto_model **out, const nto_config *c,
                  const nto_model_opts *opts, nto_err *err);

/* A model that recompute auto refused for its memory budget with the
 * convolutions' outputs recomputed (a recomputed output is new content the
 * window must hold or write, which can raise window 1's region: MobileNetV2
 * 224 b10 149.3 instead of 137.9 MiB) is created again with them kept,
 * the budget's minimum as without (docs/design-offload.md, "Recomputed
 * convolutions"). On failure the message is the second attempt's, whose
 * minimum is the lower. */
static int create_convs_kept(nto_model **out, const nto_config *c,
                             const nto_model_opts *opts, nto_err *err) {
  nto_model_opts o = *opts;
  o.recompute = NTO_RECOMPUTE_ACTIVATIONS;
  nto_err e = {0};
  nto_model *m = NULL;
  int rc = create(&m, c, &o, &e);
  if (rc != 0) {
    nto_model_free(m);
    return nto_err_set(err, rc, "%s", e.msg);
  }
  m->convs_kept = 1;
  *out = m;
  return 0;
}

int nto_model_create(nto_model **out, const nto_config *c,
                     const nto_model_opts *opts, nto_err *err) {
  nto_model *m = NULL;
  int rc = create(&m, c, opts, err);
  if (rc == NTO_ECONFIG && m && m->budget_refused &&
      opts->recompute == NTO_RECOMPUTE_AUTO &&
      nto_model_recomputed_convs(m) > 0) {
    nto_model_free(m);
    return create_convs_kept(out, c, opts, err);
  }
  if (rc != 0) {
    nto_model_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

/* nto_model_create without the retry. On failure *out is the half-built
 * model (NULL if none was allocated), for its budget_refused; the caller
 * frees it. */
static int create(nto_model **out, const nto_config *c,
                  const nto_model_opts *opts, nto_err *err) {
  *out = NULL;
  nto_model *m = calloc(1, sizeof *m);
  if (!m)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  m->conf = c;
  m->opt = c->opt;
  m->lr = c->lr;
  m->compute_input_grad = opts->compute_input_grad;
  m->step_trace = opts->step_trace;
  m->step_trace_user = opts->step_trace_user;
  nto_rng_seed(&m->rng, opts->seed);
  int batch = opts->batch > 0 ? opts->batch : c->model.batch_size;
  int rc = nto_graph_build(&m->g, c, batch, err);
  if (rc == 0) {
    m->L = m->g.n_layers;
    rc = setup_loss(m, err);
  }
  m->chunk_elems =
      (opts->update_chunk ? opts->update_chunk : NTO_UPDATE_CHUNK) /
      sizeof(float);
  if (m->chunk_elems == 0)
    m->chunk_elems = 1;
  m->chunk_grads = opts->chunk_grads;
  if (rc == 0 && (build_tensors(m) != 0 ||
                  add_recomputed(m, opts->recompute != NTO_RECOMPUTE_OFF,
                                 recompute_convs(opts)) != 0 ||
                  build_steps(m) != 0))
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc == 0) {
    m->loss_grad_t = -1;
    if (!m->fused) {
      m->loss_grad_t =
          add_tensor(m, m->g.layers[m->L - 1].name, "loss_grad",
                     m->g.layers[m->L - 1].out_shape, NTO_ROLE_GRAD, m->L - 1);
      if (m->loss_grad_t < 0)
        rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
    }
  }
  if (rc == 0)
    rc = build_plans(m, err);
  if (rc == 0 && opts->plan_only)
    rc = plan_arena(m, err);
  else if (rc == 0)
    rc = alloc_buffers(m, opts, err);
  *out = m;
  return rc;
}

void nto_model_free(nto_model *m) {
  if (!m)
    return;
  nto_offload_free(m->off); /* releases the buffers it owns */
  free(m->wtrace);
  free(m->step_ms);
  if (!m->off)
    for (int i = 0; i < m->n_t; i++)
      if (m->t[i].role == NTO_ROLE_WEIGHT || m->t[i].role == NTO_ROLE_OPT_STATE)
        nto_free_aligned(m->t[i].data);
  nto_plan_free(&m->plan[0]);
  nto_plan_free(&m->plan[1]);
  nto_free_aligned(m->output);
  if (m->edge_t)
    for (int i = 0; i < m->L; i++)
      free(m->edge_t[i]);
  free(m->edge_t);
  free(m->out_t);
  free(m->pgrad_t);
  if (m->state_t)
    for (int i = 0; i < m->L; i++)
      for (int j = 0; j < NTO_MAX_WEIGHTS; j++)
        free(m->state_t[i][j]);
  free(m->state_t);
  free(m->n_chunk);
  free(m->dw_first);
  free(m->dw_row);
  free(m->dw_cache);
  free(m->steps);
  free(m->re_t);
  free(m->re_at);
  free(m->re_conv);
  free(m->b_step);
  free(m->t);
  free(m->life);
  nto_free_aligned(m->arena);
  nto_free_aligned(m->ws);
  nto_free_aligned(m->input_grad);
  nto_graph_free(&m->g);
  free(m);
}

/* Data of tensor t (NULL for t < 0). The plan guarantees residency of
 * every tensor a step uses while it runs. */
static float *T(const nto_model *m, int t) {
  assert(t < 0 || m->t[t].data);
  return t >= 0 ? m->t[t].data : NULL;
}

/* The forward arguments of layer i (its inputs, weights, saved tensors,
 * the workspace) writing into out; in an R step (`replay`) the inputs are
 * the tensors backward reads for them (bwd_tensor). */
static nto_fwd fwd_args(nto_model *m, int i, float *out, int training,
                        int replay) {
  const nto_layer *l = &m->g.layers[i];
  nto_fwd f = {0};
  for (int k = 0; k < l->n_in; k++) {
    int t = m->out_t[l->in[k]];
    f.in[k] = T(m, replay ? bwd_tensor(m, t) : t);
  }
  f.out = out;
  for (int j = 0; j < l->n_w; j++)
    f.w[j] = T(m, l->w[j].tensor);
  for (int k = 0; k < l->n_saved; k++)
    f.saved[k] = T(m, l->saved[k].tensor);
  f.ws = m->ws;
  f.training = training;
  f.rng = &m->rng;
  return f;
}

/* F_i: run layer i's forward. */
static void forward_step(nto_model *m, int i, const float *x, int training) {
  nto_layer *l = &m->g.layers[i];
  if (is_input(l))
    memcpy(T(m, m->out_t[i]), x, nto_shape_bytes(l->out_shape));
  nto_fwd f = fwd_args(m, i, T(m, m->out_t[i]), training, 0);
  l->ops->forward(l, &f);
}

/* dL/d(out of layer i): the sum of its consumer edges' gradients, summed
 * in consumer order into the first edge's buffer. */
static const float *gather_dout(nto_model *m, int i) {
  if (i == m->L - 1)
    return T(m, m->loss_grad_t);
  const nto_edge *e = m->g.consumers[i];
  float *d = T(m, m->edge_t[e[0].layer][e[0].input]);
  size_t n = nto_shape_numel(m->g.layers[i].out_shape);
  for (int c = 1; c < m->g.n_consumers[i]; c++) {
    const float *o = T(m, m->edge_t[e[c].layer][e[c].input]);
    for (size_t k = 0; k < n; k++)
      d[k] += o[k];
  }
  return d;
}

/* Optimizer update of chunk k of weight j of layer i (elementwise, so a
 * chunked update equals the whole one bit for bit, given the same
 * gradient). A gradient computed by chunk (dw_first) is computed here
 * first: the rows covering the chunk, from what B_i's backward read. */
static void update_chunk(nto_model *m, int i, int j, int k, double lr) {
  size_t off, len;
  chunk_range(m, i, j, k, &off, &len);
  const float *grad = NULL;
  if (m->dw_first[i][j] >= 0) {
    nto_layer *l = &m->g.layers[i];
    nto_bwd b = {0};
    int cache = m->dw_cache[i][j];
    for (int q = 0; q < l->n_in; q++)
      b.in[q] = rows_read_input(m, i, j, k)
                    ? T(m, bwd_tensor(m, m->out_t[l->in[q]]))
                    : NULL;
    b.out = l->bwd_needs_output ? T(m, bwd_tensor(m, m->out_t[i])) : NULL;
    b.dout = T(m, dout_tensor(m, i));
    for (int q = 0; q < l->n_w; q++)
      b.w[q] = q == j ? T(m, l->w[q].tensor) : NULL;
    for (int q = 0; q < l->n_saved; q++)
      b.saved[q] = T(m, l->saved[q].tensor);
    b.ws = m->ws;
    int r0, r1;
    chunk_rows(m, i, j, k, &r0, &r1);
    float *rows = T(m, m->dw_first[i][j] + k);
    l->ops->backward_weight_rows(l, &b, j, r0, r1, rows,
                                 cache >= 0 ? T(m, cache) : NULL, k == 0);
    grad = rows + (off - (size_t)r0 * m->dw_row[i][j]);
  } else {
    grad = T(m, m->pgrad_t[i][j]) + off;
  }
  float *st[2] = {T(m, m->state_t[i][j][2 * k]),
                  T(m, m->state_t[i][j][2 * k + 1])};
  nto_opt_update(&m->opt, T(m, m->g.layers[i].w[j].tensor) + off, grad, st, len,
                 lr, m->iteration + 1);
}

/* B_i: backward of layer i and the optimizer update of its weights that
 * have a single update chunk (the others get U steps). */
static void backward_step(nto_model *m, int i, double lr) {
  nto_layer *l = &m->g.layers[i];
  if (is_input(l) && !m->input_grad)
    return;
  const float *dout = gather_dout(m, i);
  if (is_input(l)) {
    memcpy(m->input_grad, dout, nto_shape_bytes(l->out_shape));
    return;
  }
  nto_bwd b = {0};
  for (int k = 0; k < l->n_in; k++) {
    b.in[k] =
        l->bwd_needs_input ? T(m, bwd_tensor(m, m->out_t[l->in[k]])) : NULL;
    b.din[k] = T(m, m->edge_t[i][k]);
  }
  b.out = l->bwd_needs_output ? T(m, bwd_tensor(m, m->out_t[i])) : NULL;
  b.dout = dout;
  for (int j = 0; j < l->n_w; j++) {
    b.w[j] = T(m, l->w[j].tensor);
    b.dw[j] = T(m, m->pgrad_t[i][j]);
  }
  for (int k = 0; k < l->n_saved; k++)
    b.saved[k] = T(m, l->saved[k].tensor);
  b.ws = m->ws;
  l->ops->backward(l, &b);
  for (int j = 0; j < l->n_w; j++) {
    if (m->pgrad_t[i][j] < 0)
      continue;
    if (m->hook)
      m->hook(m->hook_user, l, j, b.dw[j], nto_shape_numel(l->w[j].shape));
    if (m->n_chunk[i][j] == 1)
      update_chunk(m, i, j, 0, lr);
  }
}

/* R step: layer a's output again, into its recomputed tensor, bit for
 * bit the forward's (layer.h replay): a convolution's replay from its
 * input; for an activation, its input layer's replay (batch normalization
 * from its input, or that input's recomputed tensor, and the mean and
 * inv_std its forward saved), then the activation's, in place. */
static void recompute_step(nto_model *m, int a) {
  nto_layer *al = &m->g.layers[a];
  nto_layer *pl = replayed(m, a);
  float *out = T(m, m->re_t[m->out_t[a]]);
  nto_fwd f = fwd_args(m, (int)(pl - m->g.layers), out, 1, 1);
  pl->ops->replay(pl, &f);
  if (m->re_conv[a])
    return;
  nto_fwd g = {.in = {out}, .out = out, .ws = m->ws, .training = 1};
  al->ops->replay(al, &g);
}

/* The loss on the last forward; writes its gradient when grad != 0. */
static int loss_step(nto_model *m, const float *y, int valid, int grad,
                     nto_step_stats *st, nto_err *err) {
  int last = m->L - 1;
  int n = m->g.batch;
  int k = (int)nto_shape_sample(m->g.layers[last].out_shape);
  float *g = NULL;
  if (grad)
    g = m->fused ? T(m, m->edge_t[last][0]) : T(m, m->loss_grad_t);
  double loss = nto_loss_compute(m->form, T(m, m->out_t[m->logits_layer]), y, n,
                                 k, valid, g);
  st->loss = loss;
  st->samples = valid;
  st->correct = nto_count_correct(T(m, m->out_t[last]), y, k, valid);
  memcpy(m->output, T(m, m->out_t[last]),
         nto_shape_bytes(m->g.layers[last].out_shape));
  if (!isfinite(loss))
    return nto_err_set(err, NTO_ENUMERIC,
                       "loss is not finite (%g) at iteration %ld", loss,
                       m->iteration);
  return 0;
}

/* Step s of a pass of kind `pass` (the loss runs in B_{L-1} of a
 * training pass, in F_{L-1} of an inference pass). */
static int run_step(nto_model *m, int pass, int s, const float *x,
                    const float *y, int valid, double lr, nto_step_stats *st,
                    nto_err *err) {
  int L = m->L;
  if (s < L) {
    forward_step(m, s, x, pass == NTO_PASS_TRAIN);
    if (pass == NTO_PASS_EVAL && s == L - 1)
      return loss_step(m, y, valid, 0, st, err);
    return 0;
  }
  const step_desc *d = &m->steps[s];
  int i = d->layer;
  if (d->kind == 'U') {
    update_chunk(m, i, d->w, d->chunk, lr);
    return 0;
  }
  if (d->kind == 'R') {
    recompute_step(m, i);
    return 0;
  }
  if (i == L - 1) {
    int rc = loss_step(m, y, valid, 1, st, err);
    if (rc != 0 || m->fused)
      return rc;
  }
  backward_step(m, i, lr);
  return 0;
}

/* All steps of one pass, with the offload engine's window around each. A
 * failing step (non-finite loss) abandons the pass: the window is drained
 * so that the next pass starts from a clean state. */
static int run_pass(nto_model *m, int pass, const float *x, const float *y,
                    int valid, double lr, nto_step_stats *st, nto_err *err) {
  int S = m->plan[pass].n_steps;
  for (int s = 0; s < S; s++) {
    double t_begin = m->step_trace ? now_ms() : 0, t_ready = t_begin;
    int rc = m->off ? nto_offload_begin(m->off, pass, s, err) : 0;
    if (rc == 0) {
      if (m->step_trace && m->off)
        t_ready = now_ms();
      rc = run_step(m, pass, s, x, y, valid, lr, st, err);
      if (m->step_trace)
        m->step_trace(m->step_trace_user, pass, s, t_begin, t_ready, now_ms());
      if (rc != 0 && m->off)
        nto_offload_drain(m->off, NULL);
    } else {
      return rc;
    }
    if (rc == 0 && m->off)
      rc = nto_offload_end(m->off, s, err);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* The adaptive window after a training iteration that started at t0_ms
 * with counters *before: record it, and the window the controller wants
 * next into *next. */
static int adapt_window(nto_model *m, const nto_offload_stats *before,
                        const nto_offload_stats *now, double t0_ms, int *next,
                        nto_err *err) {
  double rb = now->read_busy_ms - before->read_busy_ms;
  double wb = now->write_busy_ms - before->write_busy_ms;
  double it = now_ms() - t0_ms, prime = now->prime_ms - before->prime_ms;
  /* the first pass of time/room ran with the plain read-ahead: its stall
   * says nothing about the window with read-ahead by time */
  int before_read_ahead = m->prefetch != NTO_PREFETCH_STEPS && m->passes == 1;
  /* by time, an iteration that primed is not judged (autowin.h) */
  int primed_by_time = m->ctl.by_time && prime > 0;
  nto_window_sample ws = {
      .window = now->window,
      .iteration_ms = it,
      .measured_ms = it - prime,
      .stall_ms = (now->stall_ms - before->stall_ms) -
                  (now->prime_stall_ms - before->prime_stall_ms),
      .io_busy_ms = rb > wb ? rb : wb,
      .device_ms = now->device_busy_ms - before->device_busy_ms,
      .judged =
          it - prime >= 0.25 * it && !before_read_ahead && !primed_by_time,
      .before_read_ahead = before_read_ahead,
  };
  if (m->n_wtrace == m->cap_wtrace) {
    int cap = m->cap_wtrace ? 2 * m->cap_wtrace : 64;
    nto_window_sample *v = realloc(m->wtrace, (size_t)cap * sizeof *v);
    if (!v)
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
    m->wtrace = v;
    m->cap_wtrace = cap;
  }
  m->wtrace[m->n_wtrace++] = ws;
  *next = ws.window;
  if (!ws.judged)
    return 0;
  nto_autowin_sample as = {ws.window, ws.measured_ms, ws.stall_ms,
                           ws.io_busy_ms * ws.measured_ms / it,
                           prime > 0 ? 0 : it};
  *next = nto_autowin_next(&m->ctl, &as);
  return 0;
}

/* Read time of step j in a frontier (nto_model_frontier): the bytes that
 * bring it in (the plain window's schedule) at the given bandwidth, times
 * PREFETCH_MARGIN, + PREFETCH_LATENCY_MS per step with reads. */
#define PREFETCH_MARGIN 1.25
#define PREFETCH_LATENCY_MS 0.2
/* Tries of fit_frontier, each with the model's target lowered by what the
 * built schedule exceeded the limit by. */
#define FIT_TRIES 4

/* One fit of desired within target with gains g (nto_lookahead_fit) into
 * upto, and the region + workspace of the schedule built from it into
 * *need. *got: the steps moved. */
static int fit_once(const nto_model *m, int n, const nto_schedule *sc,
                    const int *desired, const double *g, size_t target,
                    int *upto, int *got, size_t *need, nto_err *err) {
  int S = sc->n_steps;
  *got = nto_lookahead_fit(S, n, desired, sc->live, sc->enter_read, g, target,
                           upto);
  if (*got < 0)
    return nto_err_set(err, *got, "out of memory");
  return frontier_need(m, n, upto, need, err);
}

/* Schedule builds fit_by_batches may spend (ResNet-18: ~5 ms each). */
#define FIT_BATCH_BUILDS 48

/* The search of fit_by_batches. */
typedef struct fit_search {
  const nto_model *m;
  int n;
  const nto_schedule *sc;
  const int *desired;
  const double *gain; /* per step: its gain */
  size_t target, limit;
  double *g;  /* per step: the gains of the steps kept and being tried */
  int *upto;  /* scratch frontier */
  int *best;  /* the frontier of the last set that fitted */
  int moved;  /* its steps moved, 0: none yet */
  int builds; /* schedules built so far */
} fit_search;

/* Try the steps kept so far plus order[a..b): keep them all when the
 * placed schedule fits within the limit; else, if more than one, each
 * half in turn. Stops trying after FIT_BATCH_BUILDS builds. */
static int fit_batch(fit_search *q, const int *order, int a, int b,
                     nto_err *err) {
  if (a >= b || q->builds >= FIT_BATCH_BUILDS)
    return 0;
  int S = q->sc->n_steps, got = 0;
  size_t need = 0;
  for (int i = a; i < b; i++)
    q->g[order[i]] = q->gain[order[i]];
  q->builds++;
  int rc = fit_once(q->m, q->n, q->sc, q->desired, q->g, q->target, q->upto,
                    &got, &need, err);
  if (rc != 0)
    return rc;
  if (need <= q->limit && got > 0) {
    q->moved = got;
    memcpy(q->best, q->upto, (size_t)S * sizeof *q->best);
    return 0;
  }
  for (int i = a; i < b; i++)
    q->g[order[i]] = 0;
  if (b - a == 1)
    return 0;
  int mid = a + (b - a) / 2;
  rc = fit_batch(q, order, a, mid, err);
  return rc == 0 ? fit_batch(q, order, mid, b, err) : rc;
}

/* qsort_r: step indices by decreasing gain (ctx), then index. */
static int by_step_gain(const void *a, const void *b, void *ctx) {
  const double *gain = ctx;
  int i = *(const int *)a, j = *(const int *)b;
  if (gain[i] != gain[j])
    return gain[i] < gain[j] ? 1 : -1;
  return (i > j) - (i < j);
}

/* The fit when every target tried failed: only some steps move (the others
 * keep their plain entry), chosen like keep_batch in schedule.c chooses
 * gaps: the steps with a gain in decreasing order of gain, the first half
 * tried with those kept so far, kept whole when the placed schedule fits,
 * else split; then the second half. Placement makes need depend on which
 * steps move, not only on how many, so a step with a smaller gain may fit
 * where a larger one did not (the room of a region sized by layer 4's
 * backward is in the steps before and after it). Writes upto and *moved
 * (0: none fits). */
static int fit_by_batches(const nto_model *m, int n, const nto_schedule *sc,
                          const int *desired, const double *gain, size_t target,
                          size_t limit, int *upto, int *moved, nto_err *err) {
  int S = sc->n_steps, h = 0;
  fit_search q = {m,     n,    sc,   desired, gain, target,
                  limit, NULL, upto, NULL,    0,    0};
  int *order = malloc((size_t)S * sizeof *order);
  q.g = calloc((size_t)S, sizeof *q.g);
  q.best = malloc((size_t)S * sizeof *q.best);
  int rc = order && q.g && q.best
               ? 0
               : nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (int j = 0; rc == 0 && j < S; j++)
    if (gain[j] > 0)
      order[h++] = j;
  if (rc == 0) {
    qsort_r(order, (size_t)h, sizeof *order, by_step_gain, (void *)gain);
    /* all h at once failed already: start with the halves */
    rc = fit_batch(&q, order, 0, h / 2, err);
  }
  if (rc == 0)
    rc = fit_batch(&q, order, h / 2, h, err);
  *moved = rc == 0 ? q.moved : 0;
  if (*moved > 0)
    memcpy(upto, q.best, (size_t)S * sizeof *upto);
  free(order);
  free(q.g);
  free(q.best);
  return rc;
}

/* Fit upto (the desired frontier; overwritten) so that region + workspace
 * stay within limit (bytes): nto_lookahead_fit on the plain schedule sc's
 * profile, then the schedule built with the result is checked, and the
 * fit retried with a lower target where placement made it larger; when no
 * target fits, with fewer steps moved (fit_by_batches). The gain of step
 * j: the stall the plain window leaves before it (its read time beyond
 * the compute of the n steps it is read behind). *moved: the steps that
 * enter earlier than the plain window's (0: none fitted; upto is then not
 * to be used). Each try builds one schedule (ResNet-18: ~5 ms). */
static int fit_frontier(const nto_model *m, int n, const nto_schedule *sc,
                        const double *step_ms, const double *read_ms,
                        size_t limit, int *upto, int *moved, nto_err *err) {
  int S = sc->n_steps;
  size_t ws = nto_round_page(m->ws_bytes), need = 0;
  double *gain = malloc((size_t)S * sizeof *gain);
  int *desired = malloc((size_t)S * sizeof *desired);
  int rc = gain && desired ? 0 : nto_err_set(err, NTO_ENOMEM, "out of memory");
  *moved = 0;
  for (int j = 0; rc == 0 && j < S; j++) {
    double behind = 0;
    for (int k = 1; k <= n; k++)
      behind += step_ms[(j - k + S) % S];
    gain[j] = read_ms[j] > behind ? read_ms[j] - behind : 0;
  }
  if (rc == 0)
    memcpy(desired, upto, (size_t)S * sizeof *upto);
  size_t full = limit > ws ? limit - ws : 0, target = full;
  for (int k = 0; rc == 0 && k < FIT_TRIES && target > 0; k++) {
    int got = 0;
    rc = fit_once(m, n, sc, desired, gain, target, upto, &got, &need, err);
    if (rc == 0 && need <= limit) {
      *moved = got;
      break;
    }
    target = rc == 0 && need - limit < target ? target - (need - limit) : 0;
  }
  if (rc == 0 && *moved == 0 && full > 0)
    rc = fit_by_batches(m, n, sc, desired, gain, full, limit, upto, moved, err);
  free(gain);
  free(desired);
  return rc;
}

int nto_model_frontier(const nto_model *m, int n, const double *step_ms,
                       double bytes_per_ms, int room, size_t limit, int *upto,
                       int *moved, nto_err *err) {
  const nto_plan *p = &m->plan[NTO_PASS_TRAIN];
  int S = p->n_steps;
  *moved = 0;
  if (S < 2 || n < 1 || !(bytes_per_ms > 0))
    return nto_err_set(err, NTO_EINVAL,
                       "frontier of window %d over %d steps at %g bytes/ms: "
                       "expected a window >= 1, 2 steps or more and a "
                       "bandwidth > 0",
                       n, S, bytes_per_ms);
  if (n > S - 1)
    n = S - 1; /* as the engine clamps its window */
  double *read_ms = malloc((size_t)S * sizeof *read_ms);
  nto_schedule sc;
  int rc = read_ms ? nto_schedule_build(&sc, p, n, NULL, err)
                   : nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc != 0) {
    free(read_ms);
    return rc;
  }
  for (int j = 0; j < S; j++)
    read_ms[j] = sc.enter_read[j] ? (double)sc.enter_read[j] / bytes_per_ms *
                                            PREFETCH_MARGIN +
                                        PREFETCH_LATENCY_MS
                                  : 0;
  int most = nto_lookahead_frontier(S, n, step_ms, read_ms, -1, upto);
  rc = most < 0 ? nto_err_set(err, most, "out of memory") : 0;
  /* the limit: the budget, and for room the plain window's own need */
  size_t plain = 0, need = 0;
  if (rc == 0 && most > 0 && room) {
    rc = frontier_need(m, n, NULL, &plain, err);
    limit = limit && limit < plain ? limit : plain;
  }
  if (rc == 0 && most > 0 && limit)
    rc = frontier_need(m, n, upto, &need, err);
  if (rc == 0 && most > 0 && limit && need > limit)
    rc = fit_frontier(m, n, &sc, step_ms, read_ms, limit, upto, &most, err);
  nto_schedule_free(&sc);
  free(read_ms);
  *moved = rc == 0 && most > 0 ? most : 0;
  return rc;
}

/* Bytes read and written per pass by the engine's schedule of window n
 * with frontier upto (NULL: s + n), its keeping included, into *read and
 * *written. */
static int engine_bytes(const nto_model *m, int n, const int *upto,
                        uint64_t *read, uint64_t *written, nto_err *err) {
  nto_schedule sc;
  const nto_plan *p = &m->plan[NTO_PASS_TRAIN];
  int rc = m->no_keep ? nto_schedule_build(&sc, p, n, upto, err)
                      : nto_schedule_keep(&sc, p, n, upto, err);
  if (rc != 0)
    return rc;
  *read = sc.read_bytes;
  *written = sc.written_bytes;
  nto_schedule_free(&sc);
  return 0;
}

/* The rule of nto_model_room_pays for room's schedule moving r1 + w1
 * bytes per pass against the plain window's r0 + w0. */
static int pays_with(uint64_t r1, uint64_t w1, uint64_t r0, uint64_t w0,
                     double pass_ms, double device_ms, uint64_t pass_bytes) {
  if (r1 + w1 <= r0 + w0)
    return 1;
  if (!(pass_ms > 0) || !(device_ms > 0) || pass_bytes == 0)
    return 0; /* no rate measured: not known to fit */
  double busy = device_ms * (double)(r1 + w1) / (double)pass_bytes;
  return busy <= NTO_ROOM_DEVICE_SHARE * pass_ms;
}

int nto_model_room_pays(const nto_model *m, int n, const int *upto,
                        double pass_ms, double device_ms, uint64_t pass_bytes,
                        int *pays, nto_err *err) {
  uint64_t r0 = 0, w0 = 0, r1 = 0, w1 = 0;
  *pays = 1;
  int rc = engine_bytes(m, n, NULL, &r0, &w0, err);
  if (rc == 0)
    rc = engine_bytes(m, n, upto, &r1, &w1, err);
  if (rc == 0)
    *pays = pays_with(r1, w1, r0, w0, pass_ms, device_ms, pass_bytes);
  return rc;
}

/* The frontier of window n from the step times and read bandwidth
 * (bytes per busy ms of the onloader) measured so far; *ok = 0 when there
 * is nothing to weigh (no times, no reads) or nothing moves. */
static int make_frontier(nto_model *m, int n, int *upto, int *ok,
                         nto_err *err) {
  *ok = 0;
  nto_offload_stats st;
  nto_offload_get_stats(m->off, &st);
  if (!m->step_ms || st.read_bytes == 0 || st.read_busy_ms <= 0)
    return 0;
  int moved = 0;
  double rbw = (double)st.read_bytes / st.read_busy_ms;
  int rc = nto_model_frontier(m, n, m->step_ms, rbw,
                              m->prefetch == NTO_PREFETCH_ROOM, m->budget, upto,
                              &moved, err);
  *ok = rc == 0 && moved > 0;
  return rc;
}

/* With room's frontier in force for window n: does it pay
 * (nto_model_room_pays, with the engine's own schedule's bytes, so that
 * its keeping is not computed twice, and the last pass's device time)?
 * If not, the plain window instead. The plain window's bytes are computed
 * once per window. */
static int check_room(nto_model *m, int n, nto_err *err) {
  nto_offload_stats st;
  nto_offload_get_stats(m->off, &st);
  if (m->plain_n != n) {
    int rc = engine_bytes(m, n, NULL, &m->plain_read, &m->plain_written, err);
    if (rc != 0)
      return rc;
    m->plain_n = n;
  }
  m->room_declined = !pays_with(st.planned_read, st.planned_written,
                                m->plain_read, m->plain_written, m->pass_ms,
                                m->pass_device_ms, m->pass_bytes);
  return m->room_declined ? nto_offload_set_frontier(m->off, n, NULL, err) : 0;
}

int nto_model_room_declined(const nto_model *m) { return m->room_declined; }

/* After a training pass at window cur: measure step times for the
 * frontier (passes 1 and 3 of this process; the first pays for first
 * touches), and put the window next (autowin) with its frontier in
 * force. */
static int tune_window(nto_model *m, int cur, int next, nto_err *err) {
  int S = m->plan[NTO_PASS_TRAIN].n_steps, remeasured = 0;
  if (m->prefetch != NTO_PREFETCH_STEPS && (m->passes == 1 || m->passes == 3)) {
    if (!m->step_ms && !(m->step_ms = malloc((size_t)S * sizeof *m->step_ms)))
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
    nto_offload_step_times(m->off, m->step_ms);
    remeasured = 1;
  }
  if (!remeasured && next == cur)
    return 0;
  int *upto = malloc((size_t)S * sizeof *upto), ok = 0;
  if (!upto)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  int rc = m->step_ms ? make_frontier(m, next, upto, &ok, err) : 0;
  if (rc == 0)
    rc = nto_offload_set_frontier(m->off, next, ok ? upto : NULL, err);
  if (rc == 0)
    m->room_declined = 0;
  if (rc == 0 && ok && m->prefetch == NTO_PREFETCH_ROOM)
    rc = check_room(m, next, err);
  free(upto);
  return rc;
}

int nto_model_train_step(nto_model *m, const float *x, const float *y,
                         nto_step_stats *st, nto_err *err) {
  double lr = nto_lr_at(&m->lr, &m->opt, m->iteration);
  nto_offload_stats before = {0}, now = {0};
  double t0 = 0;
  if (m->off) {
    nto_offload_get_stats(m->off, &before);
    t0 = now_ms();
  }
  int rc = run_pass(m, NTO_PASS_TRAIN, x, y, m->g.batch, lr, st, err);
  if (rc == 0) {
    m->iteration++;
    m->passes++;
  }
  if (rc == 0 && m->off) {
    nto_offload_get_stats(m->off, &now);
    m->pass_ms = now_ms() - t0;
    m->pass_device_ms = now.device_busy_ms - before.device_busy_ms;
    m->pass_bytes = (now.read_bytes - before.read_bytes) +
                    (now.written_bytes - before.written_bytes);
  }
  if (rc == 0 && m->off &&
      (m->auto_window || m->prefetch != NTO_PREFETCH_STEPS)) {
    int next = now.window;
    if (m->auto_window)
      rc = adapt_window(m, &before, &now, t0, &next, err);
    if (rc == 0)
      rc = tune_window(m, now.window, next, err);
  }
  return rc;
}

int nto_model_window_bytes(const nto_model *m, int n, size_t *bytes,
                           nto_err *err) {
  return frontier_need(m, n < 1 ? 1 : n, NULL, bytes, err);
}

int nto_model_frontier_bytes(const nto_model *m, int n, const int *upto,
                             size_t *bytes, nto_err *err) {
  return frontier_need(m, n < 1 ? 1 : n, upto, bytes, err);
}

int nto_model_set_frontier(nto_model *m, int n, const int *upto, nto_err *err) {
  if (!m->off || n < 1)
    return nto_err_set(err, NTO_EINVAL,
                       m->off ? "window %d: expected >= 1"
                              : "window %d: the model does not offload",
                       n);
  size_t need = 0;
  int rc = m->budget ? frontier_need(m, n, upto, &need, err) : 0;
  if (rc == 0 && m->budget && need > m->budget)
    return nto_err_set(err, NTO_ECONFIG,
                       "window %d needs %zu bytes, above the memory budget "
                       "of %zu",
                       n, need, m->budget);
  return rc == 0 ? nto_offload_set_frontier(m->off, n, upto, err) : rc;
}

int nto_model_set_window(nto_model *m, int n, nto_err *err) {
  return nto_model_set_frontier(m, n, NULL, err);
}

const nto_window_sample *nto_model_window_trace(const nto_model *m, int *n) {
  *n = m->n_wtrace;
  return m->wtrace;
}

int nto_model_eval_step(nto_model *m, const float *x, const float *y, int valid,
                        nto_step_stats *st, nto_err *err) {
  if (valid < 1 || valid > m->g.batch)
    return nto_err_set(err, NTO_EINVAL, "eval: %d valid samples of %d", valid,
                       m->g.batch);
  return run_pass(m, NTO_PASS_EVAL, x, y, valid, 0.0, st, err);
}

const float *nto_model_output(const nto_model *m) { return m->output; }

const float *nto_model_input_grad(const nto_model *m) { return m->input_grad; }

void nto_model_set_grad_hook(nto_model *m, nto_grad_hook hook, void *user) {
  m->hook = hook;
  m->hook_user = user;
}

const nto_graph *nto_model_graph(const nto_model *m) { return &m->g; }
int nto_model_batch(const nto_model *m) { return m->g.batch; }
long nto_model_iteration(const nto_model *m) { return m->iteration; }

nto_shape nto_model_input_shape(const nto_model *m) {
  nto_shape s = m->g.layers[0].out_shape;
  s.n = 1;
  return s;
}

int nto_model_output_size(const nto_model *m) {
  return (int)nto_shape_sample(m->g.layers[m->L - 1].out_shape);
}

nto_mem_plan nto_model_mem_plan(const nto_model *m) {
  nto_mem_plan p = {0};
  for (int i = 0; i < m->n_t; i++) {
    if (m->t[i].role == NTO_ROLE_WEIGHT)
      p.weights += m->t[i].bytes;
    else if (m->t[i].role == NTO_ROLE_OPT_STATE)
      p.opt_state += m->t[i].bytes;
  }
  p.arena = m->arena_bytes;
  p.workspace = nto_round_page(m->ws_bytes);
  p.total = p.weights + p.opt_state + p.arena + p.workspace;
  return p;
}

size_t nto_model_param_count(const nto_model *m) {
  size_t n = 0;
  for (int i = 0; i < m->L; i++)
    for (int j = 0; j < m->g.layers[i].n_w; j++)
      if (m->g.layers[i].w[j].trainable)
        n += nto_shape_numel(m->g.layers[i].w[j].shape);
  return n;
}

/* Zero optimizer state tensor t (resident or in the swap file). */
static int zero_state(nto_model *m, int t, nto_err *err) {
  if (m->off)
    return nto_offload_zero(m->off, t, err);
  memset(m->t[t].data, 0, m->t[t].bytes);
  return 0;
}

/* Make state q of chunk k of weight j of layer i exist (arena mode) and
 * zero it. */
static int reset_state(nto_model *m, int i, int j, int k, int q, int n_state,
                       nto_err *err) {
  int *t = &m->state_t[i][j][2 * k + q];
  if (*t < 0 && q < n_state) {
    if (m->off)
      return nto_err_set(err, NTO_EUNSUPPORTED,
                         "the offload engine cannot "
                         "add optimizer state after creation");
    *t = add_state_tensor(m, i, j, k, q);
    if (*t < 0 || !(m->t[*t].data = nto_alloc_aligned(m->t[*t].bytes)))
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
    m->t[*t].state = NTO_RES_RESIDENT;
  }
  return *t >= 0 ? zero_state(m, *t, err) : 0;
}

int nto_model_set_optimizer(nto_model *m, const nto_opt_conf *o,
                            const nto_lr_conf *lr, nto_err *err) {
  int n_state = nto_opt_state_count(o);
  for (int i = 0; i < m->L; i++)
    for (int j = 0; j < m->g.layers[i].n_w; j++)
      for (int k = 0; updated(m, i, j) && k < m->n_chunk[i][j]; k++)
        for (int q = 0; q < 2; q++) {
          int rc = reset_state(m, i, j, k, q, n_state, err);
          if (rc != 0)
            return rc;
        }
  m->opt = *o;
  m->lr = *lr;
  m->iteration = 0;
  return 0;
}

/* nto_named_tensor callbacks of an offloading model: ctx is the model,
 * index the tensor. */
static int fetch_weight(void *ctx, int index, float *dst, nto_err *err) {
  return nto_offload_fetch(((nto_model *)ctx)->off, index, dst, err);
}

static int store_weight(void *ctx, int index, const float *src, nto_err *err) {
  return nto_offload_store(((nto_model *)ctx)->off, index, src, err);
}

int nto_model_weights(nto_model *m, nto_named_tensor **out, int *n,
                      nto_err *err) {
  int count = 0;
  for (int i = 0; i < m->L; i++)
    count += m->g.layers[i].n_w;
  nto_named_tensor *ts = calloc((size_t)(count ? count : 1), sizeof *ts);
  if (!ts)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  int c = 0;
  for (int i = 0; i < m->L; i++) {
    nto_layer *l = &m->g.layers[i];
    for (int j = 0; j < l->n_w; j++, c++) {
      size_t len = strlen(l->name) + strlen(l->w[j].name) + 2;
      char *name = malloc(len);
      if (!name) {
        nto_model_weights_free(ts, c);
        return nto_err_set(err, NTO_ENOMEM, "out of memory");
      }
      snprintf(name, len, "%s.%s", l->name, l->w[j].name);
      ts[c].name = name;
      int d[4] = {l->w[j].shape.n, l->w[j].shape.c, l->w[j].shape.h,
                  l->w[j].shape.w};
      int nd = l->w[j].ndim >= 1 && l->w[j].ndim <= 4 ? l->w[j].ndim : 4;
      ts[c].ndim = nd;
      for (int k = 0; k < nd; k++)
        ts[c].dims[k] = d[4 - nd + k];
      if (nd == 1) /* vectors stored as (1, F, 1, 1) or (1, 1, 1, F) */
        ts[c].dims[0] = (int)nto_shape_numel(l->w[j].shape);
      if (m->off) { /* in the swap file: moved through callbacks */
        ts[c].fetch = fetch_weight;
        ts[c].store = store_weight;
        ts[c].ctx = m;
        ts[c].index = l->w[j].tensor;
      } else {
        ts[c].data = T(m, l->w[j].tensor);
      }
    }
  }
  *out = ts;
  *n = count;
  return 0;
}

void nto_model_weights_free(nto_named_tensor *ts, int n) {
  if (!ts)
    return;
  for (int i = 0; i < n; i++)
    free((char *)ts[i].name);
  free(ts);
}

int nto_model_state_tensors(nto_model *m, nto_named_tensor **out, int *n,
                            nto_err *err) {
  int count = 0;
  for (int t = 0; t < m->n_t; t++)
    count +=
        m->t[t].role == NTO_ROLE_WEIGHT || m->t[t].role == NTO_ROLE_OPT_STATE;
  nto_named_tensor *ts = calloc((size_t)(count ? count : 1), sizeof *ts);
  if (!ts)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  int c = 0;
  for (int t = 0; t < m->n_t; t++) {
    const nto_tensor *d = &m->t[t];
    if (d->role != NTO_ROLE_WEIGHT && d->role != NTO_ROLE_OPT_STATE)
      continue;
    size_t len = strlen(d->name) + 1;
    char *name = malloc(len);
    if (!name) {
      nto_model_weights_free(ts, c);
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
    }
    memcpy(name, d->name, len);
    ts[c] = (nto_named_tensor){
        .name = name,
        .ndim = 4,
        .dims = {d->shape.n, d->shape.c, d->shape.h, d->shape.w}};
    if (m->off) { /* in the swap file: moved through callbacks */
      ts[c].fetch = fetch_weight;
      ts[c].store = store_weight;
      ts[c].ctx = m;
      ts[c].index = t;
    } else {
      ts[c].data = d->data;
    }
    c++;
  }
  *out = ts;
  *n = count;
  return 0;
}

void nto_model_get_train_state(const nto_model *m, nto_model_train_state *s) {
  s->iteration = m->iteration;
  s->rng[0] = m->rng.s[0];
  s->rng[1] = m->rng.s[1];
}

void nto_model_set_train_state(nto_model *m, const nto_model_train_state *s) {
  m->iteration = s->iteration;
  m->rng.s[0] = s->rng[0];
  m->rng.s[1] = s->rng[1];
}

const char *nto_model_optimizer_name(const nto_model *m) {
  switch (m->opt.kind) {
  case NTO_OPT_SGD:
    return "sgd";
  case NTO_OPT_ADAM:
    return "adam";
  case NTO_OPT_ADAMW:
    return "adamw";
  }
  return "unknown";
}

size_t nto_model_update_chunk(const nto_model *m) {
  return m->chunk_elems * sizeof(float);
}

int nto_model_step_times(nto_model *m, double *ms) {
  if (!m->off)
    return NTO_EINVAL;
  nto_offload_step_times(m->off, ms);
  return 0;
}

int nto_model_offload_stats(nto_model *m, nto_offload_stats *st) {
  if (!m->off) {
    memset(st, 0, sizeof *st);
    return NTO_EINVAL;
  }
  nto_offload_get_stats(m->off, st);
  return 0;
}

void nto_model_reset_offload_stats(nto_model *m) {
  if (m->off)
    nto_offload_reset_stats(m->off);
}

int nto_model_pass_steps(const nto_model *m, int pass) {
  return pass == NTO_PASS_TRAIN ? m->n_steps : m->L;
}

const char *nto_model_step_name(const nto_model *m, int pass, int s, char *buf,
                                size_t len) {
  (void)pass;
  const step_desc *d = &m->steps[s];
  const nto_layer *l = &m->g.layers[d->layer];
  if (d->kind == 'U')
    snprintf(buf, len, "U%d %s %s %d/%d", d->layer, l->name, l->w[d->w].name,
             d->chunk + 1, m->n_chunk[d->layer][d->w]);
  else
    snprintf(buf, len, "%c%d %s", d->kind, d->layer, l->name);
  return buf;
}

const nto_plan *nto_model_plan(const nto_model *m, int pass) {
  return &m->plan[pass];
}

int nto_model_recomputed(const nto_model *m, int i) {
  return bwd_tensor(m, m->out_t[i]) != m->out_t[i];
}

const nto_tensor *nto_model_tensor(const nto_model *m, int t) {
  return &m->t[t];
}

int nto_model_tensor_count(const nto_model *m) { return m->n_t; }

/* exec.c - the executor. See exec.h. */
#include "exec.h"
#include "optimizer.h"

#include <assert.h>
#include <math.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Data of tensor t (NULL for t < 0). The residency guarantees that every
 * tensor a step uses is resident while it runs. */
static float *T(const nto_exec *e, int t) {
  assert(t < 0 || e->tt->t[t].data);
  return t >= 0 ? e->tt->t[t].data : NULL;
}

static nto_layer *layer(const nto_exec *e, int i) {
  return &e->tt->g->layers[i];
}

/* Layer i as its step of group g runs it: the narrowed copy of a chain
 * layer (tensors.h channel groups), else the layer; *x its windows into
 * the weights and saved tensors (NULL: whole). */
static nto_layer *glayer(const nto_exec *e, int i, int g,
                         const nto_group_layer **x) {
  *x = nto_tensors_glayer(e->tt, i, g);
  return *x ? (nto_layer *)&(*x)->l : layer(e, i);
}

/* Data of weight j of layer l (as glayer gave it: x its windows). */
static float *W(const nto_exec *e, const nto_layer *l, const nto_group_layer *x,
                int j) {
  return T(e, l->w[j].tensor) + (x ? x->w_off[j] : 0);
}

/* Data of saved tensor k of layer l (as glayer gave it). */
static float *SV(const nto_exec *e, const nto_layer *l,
                 const nto_group_layer *x, int k) {
  float *d = T(e, l->saved[k].tensor);
  return d && x ? d + x->s_off[k] : d;
}

/* Channels [c0, c1) of `whole` (n, c, hw floats, shape s) from (to = 0)
 * or into (to = 1) `part` (n, c1 - c0, hw). */
static void copy_group(float *whole, float *part, nto_shape s, int c0, int c1,
                       int to) {
  size_t hw = (size_t)s.h * s.w, cg = (size_t)(c1 - c0);
  for (int i = 0; i < s.n; i++) {
    float *a = whole + ((size_t)i * s.c + c0) * hw, *b = part + i * cg * hw;
    memcpy(to ? a : b, to ? b : a, cg * hw * sizeof(float));
  }
}

/* The forward arguments of layer l (layer i, or its copy for group g: x
 * its windows) writing into out; in an R step (`replay`) the inputs are
 * the tensors backward reads for them (their twins). */
static nto_fwd fwd_args(const nto_exec *e, int i, int g, const nto_layer *l,
                        const nto_group_layer *x, float *out, int training,
                        int replay) {
  const nto_tensors *tt = e->tt;
  nto_fwd f = {0};
  for (int k = 0; k < l->n_in; k++) {
    int t = nto_tensors_gin(tt, i, k, g);
    f.in[k] = T(e, replay ? nto_tensors_bwd(tt, t) : t);
  }
  f.out = out;
  for (int j = 0; j < l->n_w; j++)
    f.w[j] = W(e, l, x, j);
  for (int k = 0; k < l->n_saved; k++)
    f.saved[k] = SV(e, l, x, k);
  f.ws = e->ws;
  f.training = training;
  f.rng = e->rng;
  return f;
}

/* F_i of group g: run layer i's forward (a chain's end: its group into a
 * tensor of its own, then into its place in the whole output). */
static void forward_step(const nto_exec *e, int i, int g, const float *x,
                         int training) {
  const nto_tensors *tt = e->tt;
  const nto_group_layer *gx;
  nto_layer *l = glayer(e, i, g, &gx);
  int end = nto_tensors_chain(tt, i) == 'E';
  float *out = T(e, end ? tt->gscratch[i] : nto_tensors_gout(tt, i, g));
  if (nto_is_input(l))
    memcpy(out, x, nto_shape_bytes(l->out_shape));
  nto_fwd f = fwd_args(e, i, g, l, gx, out, training, 0);
  l->ops->forward(l, &f);
  if (end)
    copy_group(T(e, tt->out_t[i]), out, layer(e, i)->out_shape, gx->c0, gx->c1,
               1);
}

/* dL/d(out of layer i): the sum of its consumer edges' gradients, summed
 * in consumer order into the first edge's buffer. */
static const float *gather_dout(const nto_exec *e, int i) {
  const nto_tensors *tt = e->tt;
  if (i == tt->L - 1)
    return T(e, tt->loss_grad_t);
  const nto_edge *c = tt->g->consumers[i];
  float *d = T(e, tt->edge_t[c[0].layer][c[0].input]);
  size_t n = nto_shape_numel(layer(e, i)->out_shape);
  for (int k = 1; k < tt->g->n_consumers[i]; k++) {
    const float *o = T(e, tt->edge_t[c[k].layer][c[k].input]);
    for (size_t q = 0; q < n; q++)
      d[q] += o[q];
  }
  return d;
}

/* The gradient rows of weight j of layer i covering chunk k, computed
 * into their tensor from what B_i's backward read; returns the chunk's
 * first element's gradient. */
static const float *chunk_rows(const nto_exec *e, int i, int j, int k,
                               size_t off) {
  const nto_tensors *tt = e->tt;
  nto_layer *l = layer(e, i);
  nto_bwd b = {0};
  int cache = tt->dw_cache[i][j];
  for (int q = 0; q < l->n_in; q++)
    b.in[q] = nto_tensors_rows_read_input(tt, i, j, k)
                  ? T(e, nto_tensors_bwd(tt, tt->out_t[l->in[q]]))
                  : NULL;
  b.out = l->bwd_needs_output ? T(e, nto_tensors_bwd(tt, tt->out_t[i])) : NULL;
  b.dout = T(e, nto_tensors_dout(tt, i));
  for (int q = 0; q < l->n_w; q++)
    b.w[q] = q == j ? T(e, l->w[q].tensor) : NULL;
  for (int q = 0; q < l->n_saved; q++)
    b.saved[q] = T(e, l->saved[q].tensor);
  b.ws = e->ws;
  int r0, r1;
  nto_tensors_chunk_rows(tt, i, j, k, &r0, &r1);
  float *rows = T(e, tt->dw_first[i][j] + k);
  l->ops->backward_weight_rows(l, &b, j, r0, r1, rows,
                               cache >= 0 ? T(e, cache) : NULL, k == 0);
  return rows + (off - (size_t)r0 * tt->dw_row[i][j]);
}

/* Optimizer update of chunk k of weight j of layer i (elementwise, so a
 * chunked update equals the whole one bit for bit, given the same
 * gradient). A gradient computed by chunk is computed here first. */
static void update_chunk(const nto_exec *e, int i, int j, int k, double lr,
                         long update) {
  const nto_tensors *tt = e->tt;
  size_t off, len;
  nto_tensors_chunk(tt, i, j, k, &off, &len);
  const float *grad = tt->dw_first[i][j] >= 0 ? chunk_rows(e, i, j, k, off)
                                              : T(e, tt->pgrad_t[i][j]) + off;
  void *st[2] = {T(e, tt->state_t[i][j][2 * k]),
                 T(e, tt->state_t[i][j][2 * k + 1])};
  const nto_layer *l = layer(e, i);
  nto_opt_state_format f = nto_opt_weight_format(
      e->opt->state_format, nto_shape_numel(l->w[j].shape));
  uint64_t key = (uint64_t)i << 32 | (uint64_t)j << 24 | (uint64_t)k;
  nto_opt_update(e->opt, f, T(e, l->w[j].tensor) + off, grad, st, len, lr,
                 update, key);
}

/* B_i of group g: backward of layer i (or of its copy for the group) and
 * the optimizer update of its weights that have a single update chunk
 * (the others get U steps), with the layer's last group (0). A chain's end
 * gathers its whole output gradient with its first group (G-1) and takes
 * each group's share of it; a chain producer adds its groups' input
 * gradients after the first into the whole. */
static void backward_step(const nto_exec *e, int i, int g, double lr,
                          long update) {
  const nto_tensors *tt = e->tt;
  const nto_group_layer *gx;
  nto_layer *l = glayer(e, i, g, &gx);
  int r = nto_tensors_chain(tt, i), G = nto_tensors_groups(tt, i);
  if (!tt->bwd[i]) /* nothing needs dL/d(output) (the last layer's step
                       may still run the loss: loss_step) */
    return;
  const float *dout;
  if (r == 'P' || r == 'I') {
    dout = T(e, nto_tensors_gdout(tt, i, g));
  } else if (r == 'E') {
    float *whole =
        g == G - 1 ? (float *)gather_dout(e, i) : T(e, nto_tensors_dout(tt, i));
    float *part = T(e, nto_tensors_gdout(tt, i, g));
    copy_group(whole, part, layer(e, i)->out_shape, gx->c0, gx->c1, 0);
    dout = part;
  } else {
    dout = gather_dout(e, i);
  }
  if (nto_is_input(l)) {
    memcpy(e->input_grad, dout, nto_shape_bytes(l->out_shape));
    return;
  }
  nto_bwd b = {0};
  for (int k = 0; k < l->n_in; k++) {
    b.in[k] = l->bwd_needs_input
                  ? T(e, nto_tensors_bwd(tt, nto_tensors_gin(tt, i, k, g)))
                  : NULL;
    b.din[k] = T(e, nto_tensors_gedge(tt, i, k, g));
  }
  if (l->bwd_needs_output && r == 'E') { /* its group of the whole */
    float *o = T(e, tt->gscratch[i]);
    copy_group(T(e, tt->out_t[i]), o, layer(e, i)->out_shape, gx->c0, gx->c1,
               0);
    b.out = o;
  } else if (l->bwd_needs_output) {
    b.out = T(e, nto_tensors_bwd(tt, nto_tensors_gout(tt, i, g)));
  }
  b.dout = dout;
  for (int j = 0; j < l->n_w; j++) {
    b.w[j] = W(e, l, gx, j);
    b.dw[j] = tt->pgrad_t[i][j] >= 0
                  ? T(e, tt->pgrad_t[i][j]) + (gx ? gx->w_off[j] : 0)
                  : NULL;
  }
  for (int k = 0; k < l->n_saved; k++)
    b.saved[k] = SV(e, l, gx, k);
  b.ws = e->ws;
  l->ops->backward(l, &b);
  if (r == 'P' && g != G - 1 && b.din[0]) { /* the whole += this group's */
    float *d = T(e, tt->edge_t[i][0]);
    size_t n = nto_shape_numel(l->in_shape[0]);
    for (size_t q = 0; q < n; q++)
      d[q] += b.din[0][q];
  }
  if (g != 0)
    return;
  const nto_layer *whole = layer(e, i);
  for (int j = 0; j < whole->n_w; j++) {
    if (tt->pgrad_t[i][j] < 0)
      continue;
    if (e->hook)
      e->hook(e->hook_user, whole, j, T(e, tt->pgrad_t[i][j]),
              nto_shape_numel(whole->w[j].shape));
    if (tt->n_chunk[i][j] == 1)
      update_chunk(e, i, j, 0, lr, update);
  }
}

/* R step of group g: layer a's output again, into its twin, bit for bit
 * the forward's (layer.h replay): a convolution's replay from its input;
 * for an activation, its input layer's replay (batch normalization from
 * its input, or that input's twin, and the mean and inv_std its forward
 * saved), then the activation's, in place. */
static void recompute_step(const nto_exec *e, int a, int g) {
  const nto_tensors *tt = e->tt;
  const nto_group_layer *ax, *px;
  nto_layer *al = glayer(e, a, g, &ax);
  int p = tt->re_conv[a] ? a : layer(e, a)->in[0];
  nto_layer *pl = glayer(e, p, g, &px);
  float *out = T(e, tt->re_t[nto_tensors_gout(tt, a, g)]);
  nto_fwd f = fwd_args(e, p, g, pl, px, out, 1, 1);
  pl->ops->replay(pl, &f);
  if (tt->re_conv[a])
    return;
  nto_fwd h = {.in = {out}, .out = out, .ws = e->ws, .training = 1};
  al->ops->replay(al, &h);
}

/* The loss on the last forward; writes its gradient when grad != 0. */
static int loss_step(const nto_exec *e, const float *y, int valid, int grad,
                     long update, nto_step_stats *st, nto_err *err) {
  const nto_tensors *tt = e->tt;
  int last = tt->L - 1, n = tt->g->batch;
  const nto_layer *l = layer(e, last);
  int k = (int)nto_shape_sample(l->out_shape);
  float *g = NULL;
  if (grad)
    g = tt->o.fused ? T(e, tt->edge_t[last][0]) : T(e, tt->loss_grad_t);
  double loss = nto_loss_compute(e->form, T(e, tt->out_t[tt->o.logits_layer]),
                                 y, n, k, valid, g);
  /* the weight regularizers' term, as nntrainer reports it: each layer's
   * forward of this pass computed its own while its weights were
   * resident (layer.h reg_loss) */
  loss += nto_loss_regularization(tt->g->layers, tt->L);
  st->loss = loss;
  st->samples = valid;
  st->correct = nto_count_correct(T(e, tt->out_t[last]), y, k, valid);
  memcpy(e->output, T(e, tt->out_t[last]), nto_shape_bytes(l->out_shape));
  if (!isfinite(loss))
    return nto_err_set(err, NTO_ENUMERIC,
                       "loss is not finite (%g) at iteration %ld", loss,
                       update - 1);
  return 0;
}

/* Step s of a pass of kind `pass` (the loss runs in B_{L-1} of a
 * training pass, in F_{L-1} of an inference pass). */
static int run_step(const nto_exec *e, int pass, int s, const float *x,
                    const float *y, int valid, double lr, long update,
                    nto_step_stats *st, nto_err *err) {
  int L = e->tt->L;
  const nto_step *d = &e->st->v[s];
  if (d->kind == 'F') {
    forward_step(e, d->layer, d->group, x, pass == NTO_PASS_TRAIN);
    if (pass == NTO_PASS_EVAL && d->layer == L - 1)
      return loss_step(e, y, valid, 0, update, st, err);
    return 0;
  }
  if (d->kind == 'U') {
    update_chunk(e, d->layer, d->w, d->chunk, lr, update);
    return 0;
  }
  if (d->kind == 'R') {
    recompute_step(e, d->layer, d->group);
    return 0;
  }
  if (d->layer == L - 1) {
    int rc = loss_step(e, y, valid, 1, update, st, err);
    if (rc != 0 || e->tt->o.fused)
      return rc;
  }
  backward_step(e, d->layer, d->group, lr, update);
  return 0;
}

int nto_exec_pass(const nto_exec *e, int pass, const float *x, const float *y,
                  int valid, double lr, long update, nto_step_stats *st,
                  nto_err *err) {
  nto_residency *r = e->res;
  int S = nto_steps_count(e->st, pass);
  for (int s = 0; s < S; s++) {
    double t_begin = e->trace ? now_ms() : 0;
    int rc = r->ops->begin(r, pass, s, err);
    if (rc != 0)
      return rc;
    double t_ready = e->trace && !r->always_resident ? now_ms() : t_begin;
    rc = run_step(e, pass, s, x, y, valid, lr, update, st, err);
    if (e->trace)
      e->trace(e->trace_user, pass, s, t_begin, t_ready, now_ms());
    if (rc != 0) {
      r->ops->drain(r, NULL);
      return rc;
    }
    rc = r->ops->end(r, s, err);
    if (rc != 0)
      return rc;
  }
  return 0;
}

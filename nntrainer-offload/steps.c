/* steps.c - the execution plan: step order and tensor uses. See steps.h. */
#include "steps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What records the uses: the table, the steps, and where training uses go
 * (the plan of F, R and B uses alone first, to find what U steps hold). */
typedef struct builder {
  const nto_tensors *tt;
  const nto_steps *st;
  nto_plan *train, *eval;
  int oom;
} builder;

/* Step s of pass `pass` accesses tensor t (t < 0: none) with mode. */
static void use(builder *b, int pass, int s, int t, int mode) {
  nto_plan *p = pass == NTO_PASS_TRAIN ? b->train : b->eval;
  if (nto_plan_use(p, s, t, mode) != 0)
    b->oom = 1;
}

/* F_i: the layer's input(s), output, weights (training also writes the
 * running statistics, the weights without gradient) and saved tensors. In
 * an inference pass the loss is computed in F_{L-1}. */
static void forward_uses(builder *b, int pass, int i) {
  const nto_tensors *tt = b->tt;
  const nto_layer *l = &tt->g->layers[i];
  int train = pass == NTO_PASS_TRAIN;
  if (!l->out_is_input) /* a view writes nothing: its input is its output */
    use(b, pass, i, tt->out_t[i], NTO_USE_WRITE);
  for (int k = 0; k < l->n_in; k++)
    use(b, pass, i, tt->out_t[l->in[k]], NTO_USE_READ);
  /* a training forward updates running statistics; a frozen layer writes
   * no weight, unless its batch normalization keeps batch statistics */
  int stats = train && (l->trainable || l->frozen_batch_stats);
  for (int j = 0; j < l->n_w; j++)
    use(b, pass, i, l->w[j].tensor,
        NTO_USE_READ | (stats && !l->w[j].trainable ? NTO_USE_WRITE : 0));
  for (int k = 0; k < l->n_saved; k++)
    if (l->saved[k].tensor >= 0) /* none without a backward */
      use(b, pass, i, l->saved[k].tensor, NTO_USE_WRITE);
  if (!train && i == tt->L - 1)
    use(b, pass, i, tt->out_t[tt->o.logits_layer], NTO_USE_READ);
}

/* dL/d(out of layer i) is gathered in B_i from its consumers' edges (the
 * first one accumulates the others), or is the loss gradient. */
static void gather_uses(builder *b, int i, int s) {
  const nto_tensors *tt = b->tt;
  if (i == tt->L - 1) {
    use(b, NTO_PASS_TRAIN, s, tt->loss_grad_t, NTO_USE_READ);
    return;
  }
  const nto_edge *e = tt->g->consumers[i];
  for (int c = 0; c < tt->g->n_consumers[i]; c++)
    use(b, NTO_PASS_TRAIN, s, tt->edge_t[e[c].layer][e[c].input],
        c == 0 ? NTO_USE_RW : NTO_USE_READ);
}

/* B_i's weights: read, and with a fused update (one chunk, whole
 * gradient) written with their gradient and optimizer state. */
static void weight_uses(builder *b, int i, int s) {
  const nto_tensors *tt = b->tt;
  const nto_layer *l = &tt->g->layers[i];
  int P = NTO_PASS_TRAIN;
  for (int j = 0; j < l->n_w; j++) {
    int fused = tt->pgrad_t[i][j] >= 0 && tt->n_chunk[i][j] == 1;
    use(b, P, s, l->w[j].tensor, NTO_USE_READ | (fused ? NTO_USE_WRITE : 0));
    use(b, P, s, tt->pgrad_t[i][j], fused ? NTO_USE_RW : NTO_USE_WRITE);
    if (fused) {
      use(b, P, s, tt->state_t[i][j][0], NTO_USE_RW);
      use(b, P, s, tt->state_t[i][j][1], NTO_USE_RW);
    }
  }
}

/* B_i: the loss (for the last layer), the gradient gathering, backward
 * and the fused optimizer update. */
static void backward_uses(builder *b, int i) {
  const nto_tensors *tt = b->tt;
  const nto_layer *l = &tt->g->layers[i];
  int s = b->st->b_step[i], L = tt->L, P = NTO_PASS_TRAIN;
  if (i == L - 1) {
    use(b, P, s, tt->out_t[tt->o.logits_layer], NTO_USE_READ);
    use(b, P, s, tt->out_t[L - 1], NTO_USE_READ);
    use(b, P, s, tt->o.fused ? tt->edge_t[L - 1][0] : tt->loss_grad_t,
        NTO_USE_WRITE);
    if (tt->o.fused)
      return; /* the loss gradient is the input gradient */
  }
  if (!tt->bwd[i])
    return; /* the loss alone, or the input layer's empty step */
  gather_uses(b, i, s);
  if (nto_is_input(l))
    return;
  for (int k = 0; k < l->n_in; k++) {
    if (l->bwd_needs_input)
      use(b, P, s, nto_tensors_bwd(tt, tt->out_t[l->in[k]]), NTO_USE_READ);
    use(b, P, s, tt->edge_t[i][k], NTO_USE_WRITE);
  }
  if (l->bwd_needs_output)
    use(b, P, s, nto_tensors_bwd(tt, tt->out_t[i]), NTO_USE_READ);
  for (int k = 0; k < l->n_saved; k++)
    use(b, P, s, l->saved[k].tensor, NTO_USE_READ);
  weight_uses(b, i, s);
}

/* U step s computing weight j's gradient rows of chunk k: from what B_i's
 * backward read (or the rows cache the first U step built). */
static void row_uses(builder *b, int s, int i, int j, int k) {
  const nto_tensors *tt = b->tt;
  const nto_layer *l = &tt->g->layers[i];
  int P = NTO_PASS_TRAIN, cache = tt->dw_cache[i][j];
  use(b, P, s, tt->dw_first[i][j] + k, NTO_USE_WRITE);
  use(b, P, s, nto_tensors_dout(tt, i), NTO_USE_READ);
  use(b, P, s, cache, k == 0 ? NTO_USE_WRITE : NTO_USE_READ);
  for (int q = 0; nto_tensors_rows_read_input(tt, i, j, k) && q < l->n_in; q++)
    use(b, P, s, nto_tensors_bwd(tt, tt->out_t[l->in[q]]), NTO_USE_READ);
  if (l->bwd_needs_output)
    use(b, P, s, nto_tensors_bwd(tt, tt->out_t[i]), NTO_USE_READ);
  for (int q = 0; q < l->n_saved; q++)
    use(b, P, s, l->saved[q].tensor, NTO_USE_READ);
}

/* U step s: chunk k of weight j of layer i is updated. Tensors that the
 * B step before the run of U steps holding s and the backward step after
 * it (fb: the plan of B and F uses only) both use are held through it, so
 * that the updates in between do not push them out of a small window. */
static void update_uses(builder *b, const nto_plan *fb, int s, int i, int j,
                        int k) {
  const nto_tensors *tt = b->tt;
  const nto_steps *st = b->st;
  int P = NTO_PASS_TRAIN, bs = s, next = s + 1;
  while (st->v[bs].kind == 'U')
    bs--;
  use(b, P, s, tt->g->layers[i].w[j].tensor, NTO_USE_RW);
  use(b, P, s, tt->pgrad_t[i][j], NTO_USE_READ);
  if (tt->dw_first[i][j] >= 0)
    row_uses(b, s, i, j, k);
  use(b, P, s, tt->state_t[i][j][2 * k], NTO_USE_RW);
  use(b, P, s, tt->state_t[i][j][2 * k + 1], NTO_USE_RW);
  while (next < st->n && (st->v[next].kind == 'U' || st->v[next].kind == 'R'))
    next++;
  if (next == st->n)
    return;
  for (int x = fb->step_first[bs]; x < fb->step_first[bs + 1]; x++)
    for (int y = fb->step_first[next]; y < fb->step_first[next + 1]; y++)
      if (fb->step_t[x] == fb->step_t[y])
        use(b, P, s, fb->step_t[x], NTO_USE_HOLD);
}

/* The layer whose replay starts the R step of layer a: convolution a
 * itself, or the input layer (batch normalization) of activation a. */
static const nto_layer *replayed(const nto_tensors *tt, int a) {
  return tt->re_conv[a] ? &tt->g->layers[a]
                        : &tt->g->layers[tt->g->layers[a].in[0]];
}

/* R step s: convolution a's output is recomputed from its input and
 * weights; activation a's from its input layer's (batch normalization's)
 * input (or that input's twin), weights and saved tensors. */
static void recompute_uses(builder *b, int s, int a) {
  const nto_tensors *tt = b->tt;
  const nto_layer *p = replayed(tt, a);
  int P = NTO_PASS_TRAIN;
  use(b, P, s, nto_tensors_bwd(tt, tt->out_t[p->in[0]]), NTO_USE_READ);
  for (int j = 0; j < p->n_w; j++)
    use(b, P, s, p->w[j].tensor, NTO_USE_READ);
  for (int k = 0; k < p->n_saved; k++)
    use(b, P, s, p->saved[k].tensor, NTO_USE_READ);
  use(b, P, s, tt->re_t[tt->out_t[a]], NTO_USE_WRITE);
}

/* Does layer i get a B step? Where the gradient is needed, at the last
 * layer for the loss, and at the input layer (a step without work unless
 * the input gradient is asked for, kept so that the plans of models
 * without frozen layers stay as they were). */
static int has_b_step(const nto_tensors *tt, int i) {
  return tt->bwd[i] || i == tt->L - 1 || nto_is_input(&tt->g->layers[i]);
}

/* Does weight j of layer i get U steps (updated, several chunks)? */
static int has_u_steps(const nto_tensors *tt, int i, int j) {
  return nto_tensors_updated(tt, i, j) && tt->n_chunk[i][j] > 1;
}

/* The training pass's step table (see steps.h). Returns 0 or -1 when out
 * of memory. */
static int order_steps(nto_steps *st, const nto_tensors *tt,
                       nto_update_placement place) {
  int L = tt->L, n = L;
  for (int i = 0; i < L; i++) {
    n += has_b_step(tt, i) + (tt->re_at[i] >= 0) + (tt->re_again[i] >= 0);
    for (int j = 0; j < tt->g->layers[i].n_w; j++)
      n += has_u_steps(tt, i, j) ? tt->n_chunk[i][j] : 0;
  }
  st->v = malloc((size_t)n * sizeof *st->v);
  st->b_step = malloc((size_t)L * sizeof *st->b_step);
  if (!st->v || !st->b_step)
    return -1;
  /* the U steps not yet placed, in order: q[q0..q1) */
  nto_step *q = malloc((size_t)n * sizeof *q);
  if (!q)
    return -1;
  int s = 0, q0 = 0, q1 = 0, b_left = 0;
  for (int i = 0; i < L; i++) {
    st->v[s++] = (nto_step){'F', i, -1, -1};
    b_left += has_b_step(tt, i);
  }
  for (int i = L - 1; i >= 0; i--) {
    for (int a = 0; a < L; a++) /* producers first (tensors.c) */
      if (tt->re_at[a] == i || tt->re_again[a] == i)
        st->v[s++] = (nto_step){'R', a, -1, -1};
    st->b_step[i] = -1;
    if (!has_b_step(tt, i))
      continue;
    st->b_step[i] = s;
    st->v[s++] = (nto_step){'B', i, -1, -1};
    for (int j = 0; j < tt->g->layers[i].n_w; j++)
      for (int k = 0; has_u_steps(tt, i, j) && k < tt->n_chunk[i][j]; k++)
        q[q1++] = (nto_step){'U', i, j, k};
    int take = q1 - q0; /* AFTER, and the last B step: all */
    if (place == NTO_UPDATES_SPREAD && b_left > 1)
      take = (take + b_left - 1) / b_left;
    b_left--;
    while (take-- > 0)
      st->v[s++] = q[q0++];
  }
  free(q);
  st->n = s;
  return 0;
}

/* Start the plans over the table (fb: the F, R and B uses alone). */
static int init_plans(nto_steps *st, const nto_tensors *tt, nto_plan *fb,
                      nto_err *err) {
  size_t *bytes = malloc((size_t)(tt->n + 1) * sizeof *bytes);
  unsigned char *pers = malloc((size_t)tt->n + 1);
  if (!bytes || !pers) {
    free(bytes);
    free(pers);
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  for (int t = 0; t < tt->n; t++) {
    bytes[t] = tt->t[t].bytes;
    pers[t] = (unsigned char)nto_tensor_persistent(&tt->t[t]);
  }
  int rc = nto_plan_init(fb, st->n, tt->n, bytes, pers, err);
  if (rc == 0)
    rc = nto_plan_init(&st->plan[NTO_PASS_TRAIN], st->n, tt->n, bytes, pers,
                       err);
  if (rc == 0)
    rc =
        nto_plan_init(&st->plan[NTO_PASS_EVAL], tt->L, tt->n, bytes, pers, err);
  free(bytes);
  free(pers);
  return rc;
}

/* The F, R and B uses into b->train (and the inference uses when eval). */
static void pass_uses(builder *b, int eval) {
  for (int i = 0; i < b->tt->L; i++) {
    forward_uses(b, NTO_PASS_TRAIN, i);
    if (b->st->b_step[i] >= 0)
      backward_uses(b, i);
    if (eval)
      forward_uses(b, NTO_PASS_EVAL, i);
  }
  for (int s = 0; s < b->st->n; s++)
    if (b->st->v[s].kind == 'R')
      recompute_uses(b, s, b->st->v[s].layer);
}

/* The training and inference plans. */
static int build_plans(nto_steps *st, const nto_tensors *tt, nto_err *err) {
  nto_plan fb;
  memset(&fb, 0, sizeof fb);
  int rc = init_plans(st, tt, &fb, err);
  builder b = {tt, st, &fb, &st->plan[NTO_PASS_EVAL], 0};
  if (rc == 0) {
    pass_uses(&b, 0);
    rc = b.oom ? nto_err_set(err, NTO_ENOMEM, "out of memory")
               : nto_plan_finish(&fb, err);
  }
  if (rc == 0) {
    b.train = &st->plan[NTO_PASS_TRAIN];
    pass_uses(&b, 1);
    for (int s = 0; s < st->n; s++)
      if (st->v[s].kind == 'U')
        update_uses(&b, &fb, s, st->v[s].layer, st->v[s].w, st->v[s].chunk);
  }
  nto_plan_free(&fb);
  if (rc == 0 && b.oom)
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc == 0)
    rc = nto_plan_finish(&st->plan[NTO_PASS_TRAIN], err);
  if (rc == 0)
    rc = nto_plan_finish(&st->plan[NTO_PASS_EVAL], err);
  return rc;
}

int nto_steps_build(nto_steps *st, const nto_tensors *tt,
                    nto_update_placement place, nto_err *err) {
  memset(st, 0, sizeof *st);
  if (order_steps(st, tt, place) != 0)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  return build_plans(st, tt, err);
}

void nto_steps_free(nto_steps *st) {
  nto_plan_free(&st->plan[0]);
  nto_plan_free(&st->plan[1]);
  free(st->v);
  free(st->b_step);
  memset(st, 0, sizeof *st);
}

const char *nto_steps_name(const nto_steps *st, const nto_tensors *tt, int pass,
                           int s, char *buf, size_t len) {
  (void)pass; /* the inference pass's steps are the training pass's first */
  const nto_step *d = &st->v[s];
  const nto_layer *l = &tt->g->layers[d->layer];
  if (d->kind == 'U')
    snprintf(buf, len, "U%d %s %s %d/%d", d->layer, l->name, l->w[d->w].name,
             d->chunk + 1, tt->n_chunk[d->layer][d->w]);
  else
    snprintf(buf, len, "%c%d %s", d->kind, d->layer, l->name);
  return buf;
}

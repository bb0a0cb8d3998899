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

/* F_i (of group g, F step s): the layer's input(s), output, weights
 * (training also writes the running statistics, the weights without
 * gradient) and saved tensors. In an inference pass the loss is computed
 * in F_{L-1}. A chain's end writes its group through a tensor of its own
 * into its whole output; group steps after the first write their share
 * of the saved tensors and of the end's output beside the others'. */
static void forward_uses(builder *b, int pass, int s, int i, int g) {
  const nto_tensors *tt = b->tt;
  const nto_layer *l = &tt->g->layers[i];
  int train = pass == NTO_PASS_TRAIN, r = nto_tensors_chain(tt, i);
  int share = g > 0 ? NTO_USE_RW : NTO_USE_WRITE;
  if (r == 'E') {
    use(b, pass, s, tt->gscratch[i], NTO_USE_WRITE);
    use(b, pass, s, tt->out_t[i], share);
  } else if (!l->out_is_input) { /* a view writes nothing: its input is its
                                    output */
    use(b, pass, s, nto_tensors_gout(tt, i, g), NTO_USE_WRITE);
  }
  for (int k = 0; k < l->n_in; k++)
    use(b, pass, s, nto_tensors_gin(tt, i, k, g), NTO_USE_READ);
  /* a training forward updates running statistics; a frozen layer writes
   * no weight, unless its batch normalization keeps batch statistics */
  int stats = train && (l->trainable || l->frozen_batch_stats);
  for (int j = 0; j < l->n_w; j++)
    use(b, pass, s, l->w[j].tensor,
        NTO_USE_READ | (stats && !l->w[j].trainable ? NTO_USE_WRITE : 0));
  for (int k = 0; k < l->n_saved; k++)
    if (l->saved[k].tensor >= 0) /* none without a backward */
      use(b, pass, s, l->saved[k].tensor, share);
  if (!train && i == tt->L - 1)
    use(b, pass, s, tt->out_t[tt->o.logits_layer], NTO_USE_READ);
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

/* B_i's weights (of group g of G): read, and with a fused update (one
 * chunk, whole gradient) written with their gradient and optimizer state
 * in the last B step of the layer (group 0); the gradient is written in
 * shares, from group G-1 down. */
static void weight_uses(builder *b, int i, int s, int g) {
  const nto_tensors *tt = b->tt;
  const nto_layer *l = &tt->g->layers[i];
  int P = NTO_PASS_TRAIN, first = g == nto_tensors_groups(tt, i) - 1;
  for (int j = 0; j < l->n_w; j++) {
    int fused = tt->pgrad_t[i][j] >= 0 && tt->n_chunk[i][j] == 1 && g == 0;
    use(b, P, s, l->w[j].tensor, NTO_USE_READ | (fused ? NTO_USE_WRITE : 0));
    use(b, P, s, tt->pgrad_t[i][j],
        fused || !first ? NTO_USE_RW : NTO_USE_WRITE);
    if (fused) {
      use(b, P, s, tt->state_t[i][j][0], NTO_USE_RW);
      use(b, P, s, tt->state_t[i][j][1], NTO_USE_RW);
    }
  }
}

/* B_i of group g (step s): the loss (for the last layer), the gradient
 * gathering, backward and the fused optimizer update. A chain's end
 * gathers its whole output gradient in its first B step (group G-1) and
 * copies each group's share into that group's tensor; a chain producer's
 * B steps after the first write a partial input gradient and add it to
 * the whole. */
static void backward_uses(builder *b, int s, int i, int g) {
  const nto_tensors *tt = b->tt;
  const nto_layer *l = &tt->g->layers[i];
  int L = tt->L, P = NTO_PASS_TRAIN, r = nto_tensors_chain(tt, i);
  int first = g == nto_tensors_groups(tt, i) - 1;
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
  if (r == 'P' || r == 'I') {
    use(b, P, s, nto_tensors_gdout(tt, i, g), NTO_USE_READ);
  } else if (r == 'E') {
    if (first)
      gather_uses(b, i, s);
    else
      use(b, P, s, nto_tensors_dout(tt, i), NTO_USE_READ);
    use(b, P, s, nto_tensors_gdout(tt, i, g), NTO_USE_WRITE);
  } else {
    gather_uses(b, i, s);
  }
  if (nto_is_input(l))
    return;
  for (int k = 0; k < l->n_in; k++) {
    if (l->bwd_needs_input)
      use(b, P, s, nto_tensors_bwd(tt, nto_tensors_gin(tt, i, k, g)),
          NTO_USE_READ);
    use(b, P, s, nto_tensors_gedge(tt, i, k, g), NTO_USE_WRITE);
    if (r == 'P' && !first && tt->edge_t[i][k] >= 0)
      use(b, P, s, tt->edge_t[i][k], NTO_USE_RW); /* += the partial */
  }
  if (l->bwd_needs_output && r == 'E') { /* its group, copied out */
    use(b, P, s, tt->out_t[i], NTO_USE_READ);
    use(b, P, s, tt->gscratch[i], NTO_USE_WRITE);
  } else if (l->bwd_needs_output) {
    use(b, P, s, nto_tensors_bwd(tt, nto_tensors_gout(tt, i, g)), NTO_USE_READ);
  }
  for (int k = 0; k < l->n_saved; k++)
    use(b, P, s, l->saved[k].tensor, NTO_USE_READ);
  weight_uses(b, i, s, g);
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

/* R step s (group g): convolution a's output is recomputed from its
 * input and weights; activation a's from its input layer's (batch
 * normalization's) input (or that input's twin), weights and saved
 * tensors. */
static void recompute_uses(builder *b, int s, int a, int g) {
  const nto_tensors *tt = b->tt;
  const nto_layer *p = replayed(tt, a);
  int P = NTO_PASS_TRAIN, pi = (int)(p - tt->g->layers);
  use(b, P, s, nto_tensors_bwd(tt, nto_tensors_gin(tt, pi, 0, g)),
      NTO_USE_READ);
  for (int j = 0; j < p->n_w; j++)
    use(b, P, s, p->w[j].tensor, NTO_USE_READ);
  for (int k = 0; k < p->n_saved; k++)
    use(b, P, s, p->saved[k].tensor, NTO_USE_READ);
  use(b, P, s, tt->re_t[nto_tensors_gout(tt, a, g)], NTO_USE_WRITE);
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

/* Append the R steps due before layer i's B step of group g (steps.h):
 * in layer order, those of grouped layers for group g, the others with
 * the first group (G-1) of a chain, or once for an ungrouped layer. */
static void r_steps(nto_steps *st, const nto_tensors *tt, int i, int g,
                    int *s) {
  int first = g == nto_tensors_groups(tt, i) - 1;
  for (int a = 0; a < tt->L; a++) /* producers first (tensors.c) */
    for (int twice = 0; twice < 2; twice++) {
      if ((twice ? tt->re_again[a] : tt->re_at[a]) != i)
        continue;
      if (nto_tensors_groups(tt, a) > 1)
        st->v[(*s)++] = (nto_step){'R', a, -1, -1, g};
      else if (first)
        st->v[(*s)++] = (nto_step){'R', a, -1, -1, 0};
    }
}

/* The training pass's step table (see steps.h). Returns 0, -1 when out
 * of memory, -2 when an R step of a chain layer is due outside its chain
 * (a programming error: tensors.c keeps them inside). */
static int order_steps(nto_steps *st, const nto_tensors *tt,
                       nto_update_placement place) {
  int L = tt->L, n = 0;
  for (int i = 0; i < L; i++) {
    int G = nto_tensors_groups(tt, i);
    n += G *
         (1 + has_b_step(tt, i) + (tt->re_at[i] >= 0) + (tt->re_again[i] >= 0));
    for (int j = 0; j < tt->g->layers[i].n_w; j++)
      n += has_u_steps(tt, i, j) ? tt->n_chunk[i][j] : 0;
    for (int w = 0; G > 1 && w < 2; w++) { /* due inside its chain */
      int at = w ? tt->re_again[i] : tt->re_at[i], e = i;
      while (nto_tensors_chain(tt, e) != 'E')
        e++;
      if (at >= 0 && (at < i || at > e))
        return -2;
    }
  }
  st->v = malloc((size_t)(n ? n : 1) * sizeof *st->v);
  st->b_step = malloc((size_t)L * sizeof *st->b_step);
  if (!st->v || !st->b_step)
    return -1;
  /* the U steps not yet placed, in order: q[q0..q1) */
  nto_step *q = malloc((size_t)(n ? n : 1) * sizeof *q);
  if (!q)
    return -1;
  int s = 0, q0 = 0, q1 = 0, b_left = 0;
  for (int i = 0; i < L; i++) { /* F, a chain group-major */
    int G = nto_tensors_groups(tt, i), e = i;
    while (G > 1 && nto_tensors_chain(tt, e) != 'E')
      e++;
    for (int g = 0; g < G; g++)
      for (int x = i; x <= e; x++)
        st->v[s++] = (nto_step){'F', x, -1, -1, g};
    for (int x = i; x <= e; x++)
      b_left += has_b_step(tt, x) * G;
    i = e;
  }
  st->n_fwd = s;
  for (int i = L - 1; i >= 0; i--) { /* R, B, U; a chain by group */
    int G = nto_tensors_groups(tt, i), p = i;
    while (G > 1 && nto_tensors_chain(tt, p) != 'P')
      p--;
    for (int x = p; x <= i; x++)
      st->b_step[x] = -1;
    for (int g = G - 1; g >= 0; g--)
      for (int x = i; x >= p; x--) {
        r_steps(st, tt, x, g, &s);
        if (!has_b_step(tt, x))
          continue;
        if (g == G - 1)
          st->b_step[x] = s;
        st->v[s++] = (nto_step){'B', x, -1, -1, g};
        for (int j = 0; j < tt->g->layers[x].n_w; j++)
          for (int k = 0; has_u_steps(tt, x, j) && k < tt->n_chunk[x][j]; k++)
            q[q1++] = (nto_step){'U', x, j, k, 0};
        int take = q1 - q0; /* AFTER, and the last B step: all */
        if (place == NTO_UPDATES_SPREAD && b_left > 1)
          take = (take + b_left - 1) / b_left;
        b_left--;
        while (take-- > 0)
          st->v[s++] = q[q0++];
      }
    i = p;
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
    rc = nto_plan_init(&st->plan[NTO_PASS_EVAL], st->n_fwd, tt->n, bytes, pers,
                       err);
  free(bytes);
  free(pers);
  return rc;
}

/* The F, R and B uses into b->train (and the inference uses when eval). */
static void pass_uses(builder *b, int eval) {
  for (int s = 0; s < b->st->n; s++) {
    const nto_step *d = &b->st->v[s];
    if (d->kind == 'F') {
      forward_uses(b, NTO_PASS_TRAIN, s, d->layer, d->group);
      if (eval)
        forward_uses(b, NTO_PASS_EVAL, s, d->layer, d->group);
    } else if (d->kind == 'B') {
      backward_uses(b, s, d->layer, d->group);
    } else if (d->kind == 'R') {
      recompute_uses(b, s, d->layer, d->group);
    }
  }
}

/* Steps [s0, s1] of pass `pass` (fb: their uses) hold every tensor two
 * of them use from its first use to its last: a chain's run of group steps
 * (forward, or backward with its R steps) keeps the tensors all its groups
 * share (the producer's input, the end's whole output and its gradient,
 * the producer's input gradient, the layers' weights and saved tensors)
 * resident between them, so that a small window does not write and read
 * them again for each group. first, last: -1 per tensor (restored). */
static void hold_run(builder *b, const nto_plan *fb, int pass, int s0, int s1,
                     int *first, int *last) {
  for (int s = s0; s <= s1; s++)
    for (int k = fb->step_first[s]; k < fb->step_first[s + 1]; k++) {
      int t = fb->step_t[k];
      if (first[t] < 0)
        first[t] = s;
      last[t] = s;
    }
  for (int s = s0; s <= s1; s++)
    for (int k = fb->step_first[s]; k < fb->step_first[s + 1]; k++) {
      int t = fb->step_t[k];
      if (first[t] != s)
        continue; /* each tensor once, from its first step */
      for (int h = first[t] + 1; h < last[t]; h++)
        use(b, pass, h, t, NTO_USE_HOLD); /* merged where h uses t */
    }
  for (int s = s0; s <= s1; s++)
    for (int k = fb->step_first[s]; k < fb->step_first[s + 1]; k++)
      first[fb->step_t[k]] = last[fb->step_t[k]] = -1;
}

/* The holds of every chain's forward run (training and inference) and
 * backward run (training): hold_run. */
static int chain_holds(builder *b, const nto_plan *fb) {
  const nto_tensors *tt = b->tt;
  const nto_steps *st = b->st;
  if (!tt->chain)
    return 0;
  int *first = malloc((size_t)tt->n * sizeof *first);
  int *last = malloc((size_t)tt->n * sizeof *last);
  if (!first || !last) {
    free(first);
    free(last);
    return -1;
  }
  for (int t = 0; t < tt->n; t++)
    first[t] = last[t] = -1;
  for (int p = 0; p < tt->L; p++) {
    if (tt->chain[p] != 'P')
      continue;
    int e = p;
    while (tt->chain[e] != 'E')
      e++;
    int f0 = -1, f1 = -1, b0 = -1, b1 = -1;
    for (int s = 0; s < st->n; s++) {
      const nto_step *d = &st->v[s];
      if (d->layer < p || d->layer > e || (d->kind != 'F' && d->kind != 'B'))
        continue;
      int *lo = d->kind == 'F' ? &f0 : &b0, *hi = d->kind == 'F' ? &f1 : &b1;
      if (*lo < 0)
        *lo = s;
      *hi = s;
    }
    while (b0 > 0 && st->v[b0 - 1].kind == 'R') /* the first group's R steps */
      b0--;
    hold_run(b, fb, NTO_PASS_TRAIN, f0, f1, first, last);
    hold_run(b, fb, NTO_PASS_EVAL, f0, f1, first, last);
    if (b0 >= 0)
      hold_run(b, fb, NTO_PASS_TRAIN, b0, b1, first, last);
  }
  free(first);
  free(last);
  return 0;
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
    if (chain_holds(&b, &fb) != 0)
      b.oom = 1;
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
  int rc = order_steps(st, tt, place);
  if (rc == -2)
    return nto_err_set(err, NTO_EINVAL,
                       "steps: a recomputation in a chain of channel groups "
                       "is due outside it");
  if (rc != 0)
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
  int G = nto_tensors_groups(tt, d->layer);
  if (d->kind == 'U')
    snprintf(buf, len, "U%d %s %s %d/%d", d->layer, l->name, l->w[d->w].name,
             d->chunk + 1, tt->n_chunk[d->layer][d->w]);
  else if (G > 1)
    snprintf(buf, len, "%c%d %s %d/%d", d->kind, d->layer, l->name,
             d->group + 1, G);
  else
    snprintf(buf, len, "%c%d %s", d->kind, d->layer, l->name);
  return buf;
}

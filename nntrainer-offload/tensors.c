/* tensors.c - the tensor table. See tensors.h. */
#include "tensors.h"
#include "optimizer.h"
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nto_is_input(const nto_layer *l) { return l->ops == &nto_input_layer; }

int nto_layer_trains(const nto_layer *l) {
  for (int j = 0; l->trainable && j < l->n_w; j++)
    if (l->w[j].trainable)
      return 1;
  return 0;
}

/* bwd[i] of every layer, in graph order (producers first): it trains (the
 * input layer: when its gradient is asked for) or an input's does. */
static int mark_backward(nto_tensors *tt) {
  tt->bwd = calloc((size_t)tt->L, 1);
  if (!tt->bwd)
    return -1;
  for (int i = 0; i < tt->L; i++) {
    const nto_layer *l = &tt->g->layers[i];
    int b = nto_is_input(l) ? tt->o.compute_input_grad : nto_layer_trains(l);
    for (int k = 0; k < l->n_in; k++)
      b |= tt->bwd[l->in[k]];
    tt->bwd[i] = (unsigned char)b;
  }
  return 0;
}

/* Channel bounds of group g of G over C channels: [g C / G, (g+1) C / G). */
static int group_c0(int C, int G, int g) { return (int)((long)g * C / G); }

/* May layer i be in a chain (tensors.h, channel groups)? One input, an
 * output that is not a view, read by the next layer alone (with
 * next_only: P and I) and not by the loss; weights of one update chunk without
 * a regularizer term (a group's share of ||w|| is not a share of the loss). */
static int chain_layer(const nto_tensors *tt, int i, int next_only) {
  const nto_layer *l = &tt->g->layers[i];
  if (!l->ops->narrow || l->n_in != 1 || l->out_is_input || i >= tt->L - 1 ||
      i == tt->o.logits_layer || nto_is_input(l))
    return 0;
  for (int j = 0; j < l->n_w; j++)
    if (l->w[j].l2 > 0 || nto_shape_numel(l->w[j].shape) > tt->chunk_elems)
      return 0;
  return !next_only ||
         (tt->g->n_consumers[i] == 1 && tt->g->consumers[i][0].layer == i + 1 &&
          tt->g->layers[i + 1].n_in == 1);
}

/* Free the narrowed copies of layer i. */
static void free_glayers(nto_tensors *tt, int i) {
  if (!tt->gl || !tt->gl[i])
    return;
  for (int g = 0; g < tt->groups[i]; g++)
    nto_layer_narrow_free(&tt->gl[i][g].l);
  free(tt->gl[i]);
  tt->gl[i] = NULL;
}

/* Layers p..e narrowed to G groups into tt->gl (p with
 * NTO_NARROW_OUTPUT, the others NTO_NARROW_CHANNELS). Returns 1, 0 when
 * one of them cannot be narrowed so (nothing kept), -1 when out of
 * memory. */
static int narrow_chain(nto_tensors *tt, int p, int e, int G) {
  int C = tt->g->layers[p].out_shape.c;
  for (int i = p; i <= e; i++) {
    tt->groups[i] = G;
    if (!(tt->gl[i] = calloc((size_t)G, sizeof *tt->gl[i])))
      return -1;
    for (int g = 0; g < G; g++) {
      nto_group_layer *x = &tt->gl[i][g];
      nto_err err = {0};
      x->c0 = group_c0(C, G, g);
      x->c1 = group_c0(C, G, g + 1);
      int rc = nto_layer_narrow(
          &tt->g->layers[i], i == p ? NTO_NARROW_OUTPUT : NTO_NARROW_CHANNELS,
          x->c0, x->c1, &x->l, x->w_off, x->s_off, &err);
      if (rc != 0) {
        for (int k = p; k <= i; k++) {
          if (k == i) /* the copies before g only */
            tt->groups[k] = g;
          free_glayers(tt, k);
          tt->groups[k] = 1;
        }
        return rc == NTO_ENOMEM ? -1 : 0;
      }
    }
  }
  return 1;
}

/* Can layer i be narrowed with `mode` (a trial narrowing, discarded)? */
static int narrows(const nto_tensors *tt, int i, int mode) {
  const nto_layer *l = &tt->g->layers[i];
  nto_layer n;
  size_t w_off[NTO_MAX_WEIGHTS], s_off[NTO_MAX_SAVED];
  nto_err err = {0};
  if (l->out_shape.c < 2 ||
      nto_layer_narrow(l, mode, 0, 1, &n, w_off, s_off, &err) != 0)
    return 0;
  nto_layer_narrow_free(&n);
  return 1;
}

/* The chains of channel groups (tensors.h), with group_bytes: from each
 * producer whose output is larger, the per-channel layers after it while
 * their input is larger (the last of them, E, may have an output of any
 * size and several consumers). Returns 0 or -1 when out of memory. */
static int find_chains(nto_tensors *tt) {
  size_t limit = tt->o.group_bytes;
  if (!limit)
    return 0;
  tt->groups = malloc((size_t)tt->L * sizeof *tt->groups);
  tt->chain = calloc((size_t)tt->L, 1);
  tt->gl = calloc((size_t)tt->L, sizeof *tt->gl);
  if (!tt->groups || !tt->chain || !tt->gl)
    return -1;
  for (int i = 0; i < tt->L; i++)
    tt->groups[i] = 1;
  const nto_layer *L = tt->g->layers;
  for (int p = 0; p < tt->L; p++) {
    int C = L[p].out_shape.c;
    if (nto_shape_bytes(L[p].out_shape) <= limit || !chain_layer(tt, p, 1) ||
        !narrows(tt, p, NTO_NARROW_OUTPUT))
      continue;
    int e = p; /* the chain: p .. e; e + 1 reads e alone (chain_layer) */
    while (nto_shape_bytes(L[e].out_shape) > limit &&
           chain_layer(tt, e + 1, 0) && L[e + 1].out_shape.c == C &&
           narrows(tt, e + 1, NTO_NARROW_CHANNELS)) {
      e++;
      if (!chain_layer(tt, e, 1))
        break;
    }
    if (e == p)
      continue;
    size_t big = 0; /* the largest grouped output: p .. e-1 */
    for (int i = p; i < e; i++)
      if (nto_shape_bytes(L[i].out_shape) > big)
        big = nto_shape_bytes(L[i].out_shape);
    size_t G = (big + limit - 1) / limit;
    if (G > (size_t)C)
      G = (size_t)C;
    int rc = narrow_chain(tt, p, e, (int)G);
    if (rc < 0)
      return -1;
    if (rc == 0)
      continue;
    tt->chain[p] = 'P';
    for (int i = p + 1; i < e; i++)
      tt->chain[i] = 'I';
    tt->chain[e] = 'E';
    p = e;
  }
  return 0;
}

int nto_tensors_chains(const nto_tensors *tt, int *layers) {
  int n = 0, k = 0;
  for (int i = 0; tt->chain && i < tt->L; i++) {
    n += tt->chain[i] == 'P';
    k += tt->chain[i] != 0;
  }
  if (layers)
    *layers = k;
  return n;
}

const nto_group_layer *nto_tensors_glayer(const nto_tensors *tt, int i, int g) {
  return tt->gl && tt->gl[i] ? &tt->gl[i][g] : NULL;
}

int nto_tensors_gout(const nto_tensors *tt, int i, int g) {
  int r = nto_tensors_chain(tt, i);
  return r == 'P' || r == 'I' ? tt->gout[i][g] : tt->out_t[i];
}

int nto_tensors_gin(const nto_tensors *tt, int i, int k, int g) {
  int r = nto_tensors_chain(tt, i);
  return r == 'I' || r == 'E' ? tt->gout[tt->g->layers[i].in[0]][g]
                              : tt->out_t[tt->g->layers[i].in[k]];
}

int nto_tensors_gedge(const nto_tensors *tt, int i, int k, int g) {
  int r = nto_tensors_chain(tt, i);
  if (r == 'I' || r == 'E')
    return tt->gedge[i] ? tt->gedge[i][g] : -1;
  if (r == 'P' && g != tt->groups[i] - 1 && tt->edge_t[i][0] >= 0)
    return tt->gpart[i];
  return tt->edge_t[i][k];
}

int nto_tensors_gdout(const nto_tensors *tt, int i, int g) {
  int r = nto_tensors_chain(tt, i);
  if (r == 'P' || r == 'I')
    return tt->gedge[i + 1] ? tt->gedge[i + 1][g] : -1;
  if (r == 'E')
    return tt->gdout[i] ? tt->gdout[i][g] : -1;
  return nto_tensors_dout(tt, i);
}

int nto_tensors_updated(const nto_tensors *tt, int i, int j) {
  return tt->pgrad_t[i][j] >= 0 || tt->dw_first[i][j] >= 0;
}

void nto_tensors_chunk(const nto_tensors *tt, int i, int j, int k, size_t *off,
                       size_t *len) {
  size_t n = nto_shape_numel(tt->g->layers[i].w[j].shape);
  *off = (size_t)k * tt->chunk_elems;
  *len = tt->n_chunk[i][j] == 1       ? n
         : n - *off < tt->chunk_elems ? n - *off
                                      : tt->chunk_elems;
  if (tt->n_chunk[i][j] == 1)
    *off = 0;
}

void nto_tensors_chunk_rows(const nto_tensors *tt, int i, int j, int k, int *r0,
                            int *r1) {
  size_t off, len, row = (size_t)tt->dw_row[i][j];
  nto_tensors_chunk(tt, i, j, k, &off, &len);
  *r0 = (int)(off / row);
  *r1 = (int)((off + len + row - 1) / row);
}

int nto_tensors_rows_read_input(const nto_tensors *tt, int i, int j, int k) {
  return tt->g->layers[i].bwd_needs_input && (tt->dw_cache[i][j] < 0 || k == 0);
}

int nto_tensors_bwd(const nto_tensors *tt, int t) {
  return t >= 0 && t < tt->n_re && tt->re_t[t] >= 0 ? tt->re_t[t] : t;
}

int nto_tensors_dout(const nto_tensors *tt, int i) {
  if (i == tt->L - 1)
    return tt->loss_grad_t;
  const nto_edge *e = tt->g->consumers[i];
  return tt->edge_t[e[0].layer][e[0].input];
}

int nto_tensors_recomputed(const nto_tensors *tt, int i) {
  return nto_tensors_bwd(tt, tt->out_t[i]) != tt->out_t[i];
}

int nto_tensors_recomputed_convs(const nto_tensors *tt) {
  int n = 0;
  for (int i = 0; i < tt->L; i++)
    n += tt->re_conv[i];
  return n;
}

int nto_tensors_segment_convs(const nto_tensors *tt, int *candidates) {
  int n = 0;
  for (int i = 0; i < tt->L; i++)
    n += tt->seg_conv[i];
  if (candidates)
    *candidates = tt->seg_candidates;
  return n;
}

/* Append a tensor descriptor; returns its index or -1. */
static int add_tensor(nto_tensors *tt, const char *layer, const char *what,
                      nto_shape shape, nto_role role, int owner) {
  if (tt->n == tt->cap) {
    int cap = tt->cap ? tt->cap * 2 : 256;
    nto_tensor *t = realloc(tt->t, (size_t)cap * sizeof *t);
    if (!t)
      return -1;
    tt->t = t;
    tt->cap = cap;
  }
  nto_tensor *t = &tt->t[tt->n];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%.60s:%.30s", layer, what);
  t->shape = shape;
  t->role = role;
  t->bytes = nto_round_page(nto_shape_bytes(shape));
  t->swap_offset = -1;
  t->state = NTO_RES_NONE;
  t->layer = owner;
  return tt->n++;
}

int nto_tensors_add_state(nto_tensors *tt, int i, int j, int k, int q) {
  const nto_layer *l = &tt->g->layers[i];
  char what[64];
  nto_shape shape = l->w[j].shape;
  size_t numel = nto_shape_numel(shape), off = 0, len = numel;
  if (tt->n_chunk[i][j] > 1) {
    nto_tensors_chunk(tt, i, j, k, &off, &len);
    shape = (nto_shape){1, 1, 1, (int)len};
    snprintf(what, sizeof what, "%.30s:opt%d.%d", l->w[j].name, q, k);
  } else {
    snprintf(what, sizeof what, "%.30s:opt%d", l->w[j].name, q);
  }
  nto_opt_state_format f = nto_opt_weight_format(tt->o.state_format, numel);
  if (f != NTO_OPT_STATE_FP32) /* its bytes, as floats (checkpoints) */
    shape = (nto_shape){1, 1, 1, (int)((nto_opt_state_bytes(f, len) + 3) / 4)};
  return add_tensor(tt, l->name, what, shape, NTO_ROLE_OPT_STATE, i);
}

/* Chunks of weight j of layer i and their state tensors (opt_states of 2
 * per chunk). Returns 0 or -1 when out of memory. */
static int add_weight_state(nto_tensors *tt, int i, int j) {
  size_t n = nto_shape_numel(tt->g->layers[i].w[j].shape);
  int nc = n > tt->chunk_elems
               ? (int)((n + tt->chunk_elems - 1) / tt->chunk_elems)
               : 1;
  tt->n_chunk[i][j] = nc;
  tt->state_t[i][j] = malloc(2 * (size_t)nc * sizeof(int));
  if (!tt->state_t[i][j])
    return -1;
  for (int k = 0; k < nc; k++)
    for (int q = 0; q < 2; q++) {
      int t = q < tt->o.opt_states ? nto_tensors_add_state(tt, i, j, k, q) : -1;
      if (q < tt->o.opt_states && t < 0)
        return -1;
      tt->state_t[i][j][2 * k + q] = t;
    }
  return 0;
}

/* Floats of the rows cache of weight j of layer i worth keeping: the
 * layer's (layer.h weight_rows_cache) when no larger than the whole
 * gradient, else 0. At equal size the cache still wins: it lives from the
 * first U step to the last, while a whole gradient also spans B_i's
 * compute, where the read-ahead needs the room (ResNet-18's last stage at
 * batch 32). */
static size_t rows_cache(const nto_tensors *tt, int i, int j) {
  const nto_layer *l = &tt->g->layers[i];
  size_t c = l->ops->weight_rows_cache ? l->ops->weight_rows_cache(l, j) : 0;
  return c <= nto_shape_numel(l->w[j].shape) ? c : 0;
}

/* Is the gradient of weight j of layer i (row length `row`, 0: none)
 * computed by chunk (nto_chunk_grads)? */
static int by_chunk(const nto_tensors *tt, int i, int j, int row) {
  if (tt->o.chunk_grads == NTO_CHUNK_GRADS_OFF || tt->n_chunk[i][j] <= 1 ||
      row <= 0 || (size_t)row > tt->chunk_elems || i == tt->L - 1)
    return 0;
  return tt->o.chunk_grads == NTO_CHUNK_GRADS_ON || rows_cache(tt, i, j) > 0;
}

/* The per-chunk gradient tensors of weight j of layer i (dw_first) and
 * the cache of their rows (dw_cache) when it is no larger than the whole
 * gradient. */
static int add_chunk_grads(nto_tensors *tt, int i, int j) {
  const nto_layer *l = &tt->g->layers[i];
  size_t cache = rows_cache(tt, i, j);
  if (cache > 0) {
    char what[48];
    snprintf(what, sizeof what, "%.30s.rows_cache", l->w[j].name);
    nto_shape shape = {1, 1, 1, (int)cache};
    tt->dw_cache[i][j] =
        add_tensor(tt, l->name, what, shape, NTO_ROLE_ACTIVATION, i);
    if (tt->dw_cache[i][j] < 0)
      return -1;
  }
  for (int k = 0; k < tt->n_chunk[i][j]; k++) {
    int r0, r1;
    nto_tensors_chunk_rows(tt, i, j, k, &r0, &r1);
    char what[48];
    snprintf(what, sizeof what, "d%.30s.%d", l->w[j].name, k);
    nto_shape shape = {1, 1, r1 - r0, tt->dw_row[i][j]};
    int t = add_tensor(tt, l->name, what, shape, NTO_ROLE_PARAM_GRAD, i);
    if (t < 0)
      return -1;
    if (k == 0)
      tt->dw_first[i][j] = t;
  }
  return 0;
}

/* Does layer p's output need a gradient? */
static int needs_grad(const nto_tensors *tt, int p) { return tt->bwd[p]; }

/* edge_t value of a gradient computed in place, until resolved. */
#define EDGE_IN_PLACE (-2)

/* Does layer i compute dL/d(its input) into the tensor of dL/d(its
 * output) (layer.h bwd_in_place)? Only for one input of the output's size,
 * with a consumer whose edge holds that gradient, and when nothing reads
 * the gradient after B_i (no U step of the layer computes a weight's
 * gradient from it). Called once the layer's weights are set up. */
static int grad_in_place(const nto_tensors *tt, int i) {
  const nto_layer *l = &tt->g->layers[i];
  if (!l->bwd_in_place || l->n_in != 1 || i == tt->L - 1 || !tt->bwd[i] ||
      tt->g->n_consumers[i] < 1 ||
      nto_shape_numel(l->in_shape[0]) != nto_shape_numel(l->out_shape))
    return 0;
  for (int j = 0; j < l->n_w; j++)
    if (tt->dw_first[i][j] >= 0)
      return 0;
  return 1;
}

/* Weight j of layer i: its tensor, optimizer state and gradient (whole
 * or by chunk). Returns 0 or -1 when out of memory. */
static int add_weight(nto_tensors *tt, int i, int j) {
  nto_layer *l = &tt->g->layers[i];
  l->w[j].tensor =
      add_tensor(tt, l->name, l->w[j].name, l->w[j].shape, NTO_ROLE_WEIGHT, i);
  tt->pgrad_t[i][j] = tt->dw_first[i][j] = tt->dw_cache[i][j] = -1;
  if (l->w[j].tensor < 0)
    return -1;
  if (!l->w[j].trainable || !l->trainable)
    return 0;
  if (add_weight_state(tt, i, j) != 0)
    return -1;
  int row = l->ops->weight_row ? l->ops->weight_row(l, j) : 0;
  if (by_chunk(tt, i, j, row)) {
    tt->dw_row[i][j] = row;
    return add_chunk_grads(tt, i, j);
  }
  char what[48];
  snprintf(what, sizeof what, "d%.40s", l->w[j].name);
  tt->pgrad_t[i][j] =
      add_tensor(tt, l->name, what, l->w[j].shape, NTO_ROLE_PARAM_GRAD, i);
  return tt->pgrad_t[i][j] < 0 ? -1 : 0;
}

/* Shape s with c channels. */
static nto_shape with_c(nto_shape s, int c) {
  s.c = c;
  return s;
}

/* G tensors "<what>.g<k>" of layer i, group k of shape s's channels, into
 * a new array *out. Returns 0 or -1. */
static int add_groups(nto_tensors *tt, int i, const char *what, nto_shape s,
                      nto_role role, int **out) {
  const nto_layer *l = &tt->g->layers[i];
  int G = tt->groups[i];
  if (!(*out = malloc((size_t)G * sizeof **out)))
    return -1;
  for (int k = 0; k < G; k++) {
    char name[32];
    snprintf(name, sizeof name, "%s.g%d", what, k);
    int c = group_c0(s.c, G, k + 1) - group_c0(s.c, G, k);
    if (((*out)[k] = add_tensor(tt, l->name, name, with_c(s, c), role, i)) < 0)
      return -1;
  }
  return 0;
}

/* The tensors of chain layer i (channel groups) that differ from an
 * ungrouped layer's: a producer's or an interior layer's output per group,
 * an interior layer's or the end's input gradient per group (EDGE_IN_PLACE
 * where computed in place), the end's group of output and group douts, a
 * producer's partial input gradient. Returns 0 or -1. */
static int add_chain_layer(nto_tensors *tt, int i) {
  nto_layer *l = &tt->g->layers[i];
  int r = tt->chain[i], G = tt->groups[i];
  if (r == 'P' || r == 'I') {
    if (add_groups(tt, i, "out", l->out_shape, NTO_ROLE_ACTIVATION,
                   &tt->gout[i]) != 0)
      return -1;
    tt->out_t[i] = tt->gout[i][0];
  }
  if (r == 'E') {
    int c = group_c0(l->out_shape.c, G, 1); /* the largest group: the first */
    for (int k = 1; k < G; k++)
      if (group_c0(l->out_shape.c, G, k + 1) - group_c0(l->out_shape.c, G, k) >
          c)
        c = group_c0(l->out_shape.c, G, k + 1) - group_c0(l->out_shape.c, G, k);
    tt->gscratch[i] =
        add_tensor(tt, l->name, "out.group", with_c(l->out_shape, c),
                   NTO_ROLE_ACTIVATION, i);
    if (tt->gscratch[i] < 0)
      return -1;
    if (tt->bwd[i] && add_groups(tt, i, "grad_out", l->out_shape, NTO_ROLE_GRAD,
                                 &tt->gdout[i]) != 0)
      return -1;
  }
  if (r == 'P' && needs_grad(tt, l->in[0]) && G > 1) {
    tt->gpart[i] = add_tensor(tt, l->name, "grad_in0.part", l->in_shape[0],
                              NTO_ROLE_GRAD, i);
    if (tt->gpart[i] < 0)
      return -1;
  }
  if ((r == 'I' || r == 'E') && needs_grad(tt, l->in[0])) {
    if (grad_in_place(tt, i)) {
      if (!(tt->gedge[i] = malloc((size_t)G * sizeof(int))))
        return -1;
      for (int k = 0; k < G; k++)
        tt->gedge[i][k] = EDGE_IN_PLACE;
    } else if (add_groups(tt, i, "grad_in0", l->in_shape[0], NTO_ROLE_GRAD,
                          &tt->gedge[i]) != 0) {
      return -1;
    }
    tt->edge_t[i][0] = tt->gedge[i][0];
  }
  return 0;
}

/* Layer i's output, weights, saved tensors and input-gradient edges. */
static int add_layer(nto_tensors *tt, int i) {
  nto_layer *l = &tt->g->layers[i];
  int r = nto_tensors_chain(tt, i);
  /* a view (flatten, multiout) shares its input's tensor; a chain
   * producer's or interior layer's output is one tensor per group */
  tt->out_t[i] = l->out_is_input ? tt->out_t[l->in[0]]
                 : r == 'P' || r == 'I'
                     ? 0
                     : add_tensor(tt, l->name, "out", l->out_shape,
                                  NTO_ROLE_ACTIVATION, i);
  tt->edge_t[i] = malloc((size_t)(l->n_in ? l->n_in : 1) * sizeof(int));
  if (tt->out_t[i] < 0 || !tt->edge_t[i])
    return -1;
  if (r) {
    tt->edge_t[i][0] = -1;
    if (add_chain_layer(tt, i) != 0)
      return -1;
  }
  for (int j = 0; j < l->n_w; j++)
    if (add_weight(tt, i, j) != 0)
      return -1;
  for (int k = 0; k < l->n_saved; k++) { /* none without a backward */
    l->saved[k].tensor = -1;
    if (tt->bwd[i] && (l->saved[k].tensor = add_tensor(
                           tt, l->name, l->saved[k].name, l->saved[k].shape,
                           NTO_ROLE_ACTIVATION, i)) < 0)
      return -1;
  }
  for (int k = 0; k < l->n_in && r != 'I' && r != 'E'; k++) {
    char what[32];
    snprintf(what, sizeof what, "grad_in%d", k);
    tt->edge_t[i][k] =
        !needs_grad(tt, l->in[k]) ? -1
        : grad_in_place(tt, i)
            ? EDGE_IN_PLACE
            : add_tensor(tt, l->name, what, l->in_shape[k], NTO_ROLE_GRAD, i);
    if (tt->edge_t[i][k] == -1 && needs_grad(tt, l->in[k]))
      return -1;
  }
  return 0;
}

/* Every layer's tensors; then the in-place input gradients resolved. */
static int add_layers(nto_tensors *tt) {
  int L = tt->L;
  tt->out_t = calloc((size_t)L, sizeof *tt->out_t);
  tt->edge_t = calloc((size_t)L, sizeof *tt->edge_t);
  tt->pgrad_t = calloc((size_t)L, sizeof *tt->pgrad_t);
  tt->state_t = calloc((size_t)L, sizeof *tt->state_t);
  tt->n_chunk = calloc((size_t)L, sizeof *tt->n_chunk);
  tt->dw_first = calloc((size_t)L, sizeof *tt->dw_first);
  tt->dw_row = calloc((size_t)L, sizeof *tt->dw_row);
  tt->dw_cache = calloc((size_t)L, sizeof *tt->dw_cache);
  if (!tt->out_t || !tt->edge_t || !tt->pgrad_t || !tt->state_t ||
      !tt->n_chunk || !tt->dw_first || !tt->dw_row || !tt->dw_cache)
    return -1;
  if (tt->chain) {
    tt->gout = calloc((size_t)L, sizeof *tt->gout);
    tt->gedge = calloc((size_t)L, sizeof *tt->gedge);
    tt->gdout = calloc((size_t)L, sizeof *tt->gdout);
    tt->gpart = malloc((size_t)L * sizeof *tt->gpart);
    tt->gscratch = malloc((size_t)L * sizeof *tt->gscratch);
    if (!tt->gout || !tt->gedge || !tt->gdout || !tt->gpart || !tt->gscratch)
      return -1;
    for (int i = 0; i < L; i++)
      tt->gpart[i] = tt->gscratch[i] = -1;
  }
  for (int i = 0; i < L; i++)
    if (add_layer(tt, i) != 0)
      return -1;
  /* the narrowed copies (made before the table) share their layer's
   * weights and saved tensors */
  for (int i = 0; tt->gl && i < L; i++)
    for (int g = 0; tt->gl[i] && g < tt->groups[i]; g++) {
      nto_layer *c = &tt->gl[i][g].l;
      for (int j = 0; j < c->n_w; j++)
        c->w[j].tensor = tt->g->layers[i].w[j].tensor;
      for (int k = 0; k < c->n_saved; k++)
        c->saved[k].tensor = tt->g->layers[i].saved[k].tensor;
    }
  /* an in-place input gradient is the tensor of the output's gradient:
   * the first consumer's edge (nto_tensors_dout), or per group
   * (nto_tensors_gdout). From the last layer down, so that a chain of such
   * layers (batch normalization, activation) shares one tensor. */
  for (int i = L - 1; i >= 0; i--) {
    int r = nto_tensors_chain(tt, i);
    if ((r == 'I' || r == 'E') && tt->gedge[i]) {
      for (int g = 0; g < tt->groups[i]; g++)
        if (tt->gedge[i][g] == EDGE_IN_PLACE)
          tt->gedge[i][g] = nto_tensors_gdout(tt, i, g);
      tt->edge_t[i][0] = tt->gedge[i][0];
    } else if (tt->g->layers[i].n_in > 0 && tt->edge_t[i][0] == EDGE_IN_PLACE) {
      tt->edge_t[i][0] = nto_tensors_dout(tt, i);
    }
  }
  return 0;
}

/* The latest layer (the first in backward order) after r whose backward
 * step reads layer i's output: a consumer that reads its inputs, or one
 * reading a view (flatten, multiout) of it; r if none. */
static int first_bwd_reader(const nto_tensors *tt, int i, int r) {
  const nto_edge *e = tt->g->consumers[i];
  for (int c = 0; c < tt->g->n_consumers[i]; c++) {
    const nto_layer *l = &tt->g->layers[e[c].layer];
    if (l->out_is_input)
      r = first_bwd_reader(tt, e[c].layer, r);
    else if (l->bwd_needs_input && tt->bwd[e[c].layer] && e[c].layer > r)
      r = e[c].layer;
  }
  return r;
}

/* Does the loss read tensor t (the last layer's output or the logits)? */
static int loss_reads(const nto_tensors *tt, int t) {
  return t == tt->out_t[tt->L - 1] || t == tt->out_t[tt->o.logits_layer];
}

/* May layer i's output be recomputed (nto_recompute)? i: an activation
 * without weights or saved tensors whose output the loss does not read;
 * its input: a layer with an element-wise replay (batch normalization)
 * read by i alone, whose backward reads its own input (which is therefore
 * kept anyway, or recomputed by a convolution's R step) and whose input
 * is not an activation recomputed itself. */
static int recomputable(const nto_tensors *tt, int i) {
  const nto_layer *a = &tt->g->layers[i];
  if (!tt->bwd[i] || !a->ops->replay || a->replay_macs || a->n_in != 1 ||
      nto_tensors_chain(tt, i) == 'E' || /* whole output, group steps */
      a->n_w || a->n_saved || a->out_is_input || a->out_kind != NTO_OUT_PLAIN ||
      loss_reads(tt, tt->out_t[i]))
    return 0;
  const nto_layer *p = &tt->g->layers[a->in[0]];
  int x = p->in[0];
  return tt->bwd[a->in[0]] && p->ops->replay && !p->replay_macs &&
         p->n_in == 1 && !p->out_is_input && p->out_kind == NTO_OUT_PLAIN &&
         p->bwd_needs_input && tt->g->n_consumers[a->in[0]] == 1 &&
         (tt->re_t[tt->out_t[x]] < 0 || tt->re_conv[x]);
}

/* The layer whose R step writes the twin of tensor t, or -1: t is kept
 * (no twin). */
static int twin_owner(const nto_tensors *tt, int t) {
  return tt->re_t[t] >= 0 ? tt->t[t].layer : -1;
}

/* The input tensor that layer i's R step replays from (steps.c
 * recompute_uses): a convolution's input, or the input of the batch
 * normalization before an activation. */
static int replay_input(const nto_tensors *tt, int i) {
  const nto_layer *l = &tt->g->layers[i];
  int p = tt->re_conv[i] ? i : l->in[0];
  return tt->out_t[tt->g->layers[p].in[0]];
}

/* Convolutions replayed to make tensor t again in backward, following the
 * R steps it is made from back to a kept tensor (0: t is kept). */
static int replay_depth(const nto_tensors *tt, int t) {
  int a = twin_owner(tt, t);
  return a < 0 ? 0 : tt->re_conv[a] + replay_depth(tt, replay_input(tt, a));
}

/* Convolutions replayed in one segment (recompute_segments): a
 * convolution may be recomputed from an input made again by at most one
 * other convolution's replay (ResNet-18: the stem's, for the first block's
 * first convolution). */
#define SEGMENT_CONVS 2

/* May convolution i's output be recomputed (nto_recompute)? A replay of
 * at most NTO_RECOMPUTE_MACS multiply-adds per output element (any, with
 * seg), from one input that its own backward reads (kept anyway) and that
 * is not recomputed itself (with seg: or made again by at most
 * SEGMENT_CONVS - 1 convolutions' replays from a kept tensor,
 * replay_depth); nothing saved; an output the loss does not read, read by
 * one layer, not a view, whose backward reads it (so that it is kept from
 * forward to backward unless recomputed). seg: the rules of
 * recompute_segments. */
static int conv_recomputable(const nto_tensors *tt, int i, int seg) {
  const nto_layer *l = &tt->g->layers[i];
  if (!tt->bwd[i] || !l->ops->replay || l->replay_macs <= 0 ||
      (!seg && l->replay_macs > NTO_RECOMPUTE_MACS) || l->n_in != 1 ||
      nto_tensors_chain(tt, i) == 'E' || l->n_saved || !l->bwd_needs_input ||
      l->out_is_input || l->out_kind != NTO_OUT_PLAIN ||
      loss_reads(tt, tt->out_t[i]) || tt->g->n_consumers[i] != 1)
    return 0;
  int xt = tt->out_t[l->in[0]];
  if (tt->re_t[xt] >= 0 && !(seg && replay_depth(tt, xt) + 1 <= SEGMENT_CONVS))
    return 0;
  int bn = tt->g->consumers[i][0].layer;
  const nto_layer *c = &tt->g->layers[bn];
  if (c->out_is_input || !c->bwd_needs_input || !tt->bwd[bn])
    return 0;
  if (seg) /* every R step of a segment runs right before its first use */
    return 1;
  /* the R step runs before the first backward reader of the activation
   * after it, if that is recomputed: at most NTO_RECOMPUTE_SPAN layers on */
  int r = bn;
  if (tt->o.recompute_act && tt->g->n_consumers[bn] == 1) {
    int a = tt->g->consumers[bn][0].layer;
    if (recomputable(tt, a))
      r = first_bwd_reader(tt, a, a);
  }
  return r - i <= NTO_RECOMPUTE_SPAN;
}

/* Layer i's R step must run no later than the B step of layer r (steps
 * run backward in descending layer order): move it there if it is later,
 * and with it the R steps whose twins it reads. */
static void need_by(nto_tensors *tt, int i, int r) {
  if (tt->re_at[i] >= r)
    return;
  tt->re_at[i] = r;
  int o = twin_owner(tt, replay_input(tt, i));
  if (o >= 0)
    need_by(tt, o, r);
}

/* Decide which outputs are recomputed (re_t[t] = the layer that decided
 * it, which reads as "has a twin" (>= 0) until add_recomputed puts the
 * twin's index there; re_conv, re_at, re_again), in layer order so that a
 * producer is decided before
 * its consumers. The R steps a twin is made from run before its own
 * (need_by; steps.c puts R steps at one B step in layer order). With
 * recompute_segments, a segment convolution (one recomputable only by
 * the rules of segments: a replay above NTO_RECOMPUTE_MACS, from a twin,
 * or further from its reader than NTO_RECOMPUTE_SPAN) is recomputed where
 * allow is NULL or allow[i]; candidate (when not NULL) gets 1 at each,
 * chosen (when not NULL) 1 at each recomputed. */
static void decide_recomputed(nto_tensors *tt, const unsigned char *allow,
                              unsigned char *candidate,
                              unsigned char *chosen) {
  int seg = tt->o.recompute_segments;
  for (int t = 0; t < tt->n_re; t++)
    tt->re_t[t] = -1;
  for (int i = 0; i < tt->L; i++) {
    tt->re_at[i] = tt->re_again[i] = -1;
    tt->re_conv[i] = 0;
    int is_conv = tt->o.recompute_conv && conv_recomputable(tt, i, seg);
    if (is_conv && seg && !conv_recomputable(tt, i, 0)) {
      if (candidate)
        candidate[i] = 1;
      is_conv = !allow || allow[i];
      if (chosen)
        chosen[i] = (unsigned char)is_conv;
    }
    if (!is_conv && !(tt->o.recompute_act && recomputable(tt, i)))
      continue;
    tt->re_t[tt->out_t[i]] = i;
    tt->re_conv[i] = (unsigned char)is_conv;
    need_by(tt, i, first_bwd_reader(tt, i, i));
  }
  /* a cheap convolution from a kept input whose R step a segment moved
   * before the readers of its own activation: again before its own reader
   * (ResNet-18: the stem, whose twin block 1's first convolution needs, is
   * otherwise held or written through that block's backward) */
  for (int i = 0; seg && i < tt->L; i++) {
    const nto_layer *l = &tt->g->layers[i];
    if (!tt->re_conv[i] || l->replay_macs > NTO_RECOMPUTE_MACS ||
        replay_depth(tt, replay_input(tt, i)) > 0)
      continue;
    int own = first_bwd_reader(tt, i, i), bn = tt->g->consumers[i][0].layer;
    int natural = own;
    if (tt->g->n_consumers[bn] == 1) {
      int a = tt->g->consumers[bn][0].layer;
      if (tt->re_at[a] >= 0 && !tt->re_conv[a])
        natural = first_bwd_reader(tt, a, a);
    }
    if (tt->re_at[i] > natural)
      tt->re_again[i] = own;
  }
}

/* Segment convolutions in the order they are chosen (segments_max): does
 * layer a come before layer b? The fewest multiply-adds per output element
 * first (the most bytes of activation not kept per operation replayed),
 * then the larger output, then the earlier layer. */
static int ranks_before(const nto_tensors *tt, int a, int b) {
  const nto_layer *la = &tt->g->layers[a], *lb = &tt->g->layers[b];
  if (la->replay_macs != lb->replay_macs)
    return la->replay_macs < lb->replay_macs;
  size_t na = nto_shape_numel(la->out_shape), nb = nto_shape_numel(lb->out_shape);
  return na != nb ? na > nb : a < b;
}

/* Decide which outputs are recomputed (decide_recomputed; with
 * segments_max, the first segments_max segment convolutions of the
 * ranking) and add their twins, in layer order. Returns 0 or -1 when out
 * of memory. */
static int add_recomputed(nto_tensors *tt) {
  tt->n_re = tt->n;
  tt->re_t = malloc((size_t)tt->n_re * sizeof *tt->re_t);
  tt->re_at = malloc((size_t)tt->L * sizeof *tt->re_at);
  tt->re_again = malloc((size_t)tt->L * sizeof *tt->re_again);
  tt->re_conv = calloc((size_t)tt->L, 1);
  tt->seg_conv = calloc((size_t)tt->L, 1);
  if (!tt->re_t || !tt->re_at || !tt->re_again || !tt->re_conv ||
      !tt->seg_conv)
    return -1;
  decide_recomputed(tt, NULL, tt->seg_conv, NULL);
  for (int i = 0; i < tt->L; i++)
    tt->seg_candidates += tt->seg_conv[i];
  if (tt->o.segments_max > 0 && tt->o.segments_max < tt->seg_candidates) {
    int *order = malloc((size_t)tt->seg_candidates * sizeof *order), n = 0;
    unsigned char *allow = calloc((size_t)tt->L, 1);
    if (!order || !allow) {
      free(order);
      free(allow);
      return -1;
    }
    for (int i = 0; i < tt->L; i++) { /* insertion into the ranking */
      if (!tt->seg_conv[i])
        continue;
      int k = n++;
      for (; k > 0 && ranks_before(tt, i, order[k - 1]); k--)
        order[k] = order[k - 1];
      order[k] = i;
    }
    for (int k = 0; k < tt->o.segments_max; k++)
      allow[order[k]] = 1;
    free(order);
    memset(tt->seg_conv, 0, (size_t)tt->L);
    decide_recomputed(tt, allow, NULL, tt->seg_conv);
    free(allow);
  }
  for (int i = 0; i < tt->L; i++) {
    int t = tt->out_t[i];
    if (tt->re_t[t] != i) /* kept, or a view of a layer's output */
      continue;
    const nto_layer *a = &tt->g->layers[i];
    for (int g = 0; g < nto_tensors_groups(tt, i); g++) { /* per group */
      char what[32];
      int G = nto_tensors_groups(tt, i), C = a->out_shape.c;
      if (G > 1)
        snprintf(what, sizeof what, "out.recomputed.g%d", g);
      nto_shape sh = G > 1 ? with_c(a->out_shape,
                                    group_c0(C, G, g + 1) - group_c0(C, G, g))
                           : a->out_shape;
      int twin = add_tensor(tt, a->name, G > 1 ? what : "out.recomputed", sh,
                            NTO_ROLE_ACTIVATION, i);
      if (twin < 0)
        return -1;
      tt->re_t[nto_tensors_gout(tt, i, g)] = twin;
    }
  }
  return 0;
}

int nto_tensors_build(nto_tensors *tt, nto_graph *g, const nto_tensors_opts *o,
                      nto_err *err) {
  memset(tt, 0, sizeof *tt);
  tt->g = g;
  tt->L = g->n_layers;
  tt->o = *o;
  tt->loss_grad_t = -1;
  tt->chunk_elems =
      (o->update_chunk ? o->update_chunk : NTO_UPDATE_CHUNK) / sizeof(float);
  if (tt->chunk_elems == 0)
    tt->chunk_elems = 1;
  if (mark_backward(tt) != 0 || find_chains(tt) != 0 || add_layers(tt) != 0 ||
      add_recomputed(tt) != 0)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (!o->fused) {
    const nto_layer *last = &g->layers[tt->L - 1];
    tt->loss_grad_t = add_tensor(tt, last->name, "loss_grad", last->out_shape,
                                 NTO_ROLE_GRAD, tt->L - 1);
    if (tt->loss_grad_t < 0)
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  return 0;
}

void nto_tensors_free(nto_tensors *tt) {
  if (tt->edge_t)
    for (int i = 0; i < tt->L; i++)
      free(tt->edge_t[i]);
  free(tt->edge_t);
  free(tt->out_t);
  free(tt->pgrad_t);
  if (tt->state_t)
    for (int i = 0; i < tt->L; i++)
      for (int j = 0; j < NTO_MAX_WEIGHTS; j++)
        free(tt->state_t[i][j]);
  free(tt->state_t);
  free(tt->n_chunk);
  free(tt->dw_first);
  free(tt->dw_row);
  free(tt->dw_cache);
  free(tt->re_t);
  free(tt->re_again);
  free(tt->re_at);
  free(tt->re_conv);
  free(tt->seg_conv);
  for (int i = 0; i < tt->L; i++) {
    if (tt->gl)
      free_glayers(tt, i);
    if (tt->gout)
      free(tt->gout[i]);
    if (tt->gedge)
      free(tt->gedge[i]);
    if (tt->gdout)
      free(tt->gdout[i]);
  }
  free(tt->gl);
  free(tt->gout);
  free(tt->gedge);
  free(tt->gdout);
  free(tt->gpart);
  free(tt->gscratch);
  free(tt->groups);
  free(tt->chain);
  free(tt->bwd);
  free(tt->t);
  memset(tt, 0, sizeof *tt);
}

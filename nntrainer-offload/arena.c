/* arena.c - all tensors resident. See arena.h. */
#include "arena.h"
#include "place.h"

#include <stdlib.h>
#include <string.h>

typedef struct arena {
  nto_residency base; /* first: the residency interface */
  nto_tensors *tt;    /* borrowed */
  float *buf;         /* the transient tensors */
  size_t bytes;
} arena;

/* Does the training plan p use transient tensor t? */
static int placed(const nto_plan *p, int t) {
  return !p->persistent[t] && nto_plan_first_use(p, t) >= 0;
}

/* The arena's layout: each transient tensor p uses from its first to its
 * last step (instants 3 first .. 3 last + 2 of the placer's time) into
 * offset[t]; *bytes the arena's size. */
static int layout(const nto_plan *p, const nto_tensors *tt, size_t *offset,
                  size_t *bytes, nto_err *err) {
  nto_place_item *v = malloc((size_t)(tt->n + 1) * sizeof *v);
  int *at = malloc((size_t)(tt->n + 1) * sizeof *at), n = 0;
  size_t total = (size_t)-1;
  if (v && at) {
    for (int t = 0; t < tt->n; t++) {
      if (!placed(p, t))
        continue;
      at[n] = t;
      v[n++] = (nto_place_item){.bytes = tt->t[t].bytes,
                                .seg = {{3L * nto_plan_first_use(p, t),
                                         3L * nto_plan_last_use(p, t) + 2}},
                                .n_seg = 1};
    }
    total = nto_place(v, n, 3L * p->n_steps, 0);
    for (int i = 0; offset && total != (size_t)-1 && i < n; i++)
      offset[at[i]] = v[i].offset;
  }
  free(v);
  free(at);
  if (total == (size_t)-1)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  *bytes = total;
  return 0;
}

int nto_arena_bytes(const nto_plan *p, const nto_tensors *tt, size_t *bytes,
                    nto_err *err) {
  return layout(p, tt, NULL, bytes, err);
}

static int arena_begin(nto_residency *r, int pass, int s, nto_err *err) {
  (void)r, (void)pass, (void)s, (void)err;
  return 0;
}

static int arena_end(nto_residency *r, int s, nto_err *err) {
  (void)r, (void)s, (void)err;
  return 0;
}

static int arena_drain(nto_residency *r, nto_err *err) {
  (void)r, (void)err;
  return 0;
}

static int arena_fetch(nto_residency *r, int t, float *dst, nto_err *err) {
  (void)err;
  const nto_tensor *d = &((arena *)r)->tt->t[t];
  memcpy(dst, d->data, nto_tensor_numel(d) * sizeof(float));
  return 0;
}

static int arena_store(nto_residency *r, int t, const float *src,
                       nto_err *err) {
  (void)err;
  nto_tensor *d = &((arena *)r)->tt->t[t];
  memcpy(d->data, src, nto_tensor_numel(d) * sizeof(float));
  return 0;
}

static int arena_zero(nto_residency *r, int t, nto_err *err) {
  (void)err;
  nto_tensor *d = &((arena *)r)->tt->t[t];
  memset(d->data, 0, d->bytes);
  return 0;
}

static void arena_free(nto_residency *r) {
  arena *a = (arena *)r;
  if (!a)
    return;
  for (int t = 0; t < a->tt->n; t++)
    if (nto_tensor_persistent(&a->tt->t[t]))
      nto_free_aligned(a->tt->t[t].data);
  nto_free_aligned(a->buf);
  free(a);
}

static const nto_residency_ops arena_ops = {
    arena_begin, arena_end,  arena_drain, arena_fetch,
    arena_store, arena_zero, arena_free,
};

int nto_arena_add(nto_residency *r, int t, nto_err *err) {
  nto_tensor *d = &((arena *)r)->tt->t[t];
  if (!(d->data = nto_alloc_aligned(d->bytes)))
    return nto_err_set(err, NTO_ENOMEM, "cannot allocate %zu bytes for %s",
                       d->bytes, d->name);
  d->state = NTO_RES_RESIDENT;
  return 0;
}

int nto_arena_create(nto_residency **out, const nto_plan *p, nto_tensors *tt,
                     nto_err *err) {
  *out = NULL;
  arena *a = calloc(1, sizeof *a);
  size_t *offset = calloc((size_t)tt->n + 1, sizeof *offset);
  if (!a || !offset) {
    free(a);
    free(offset);
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  a->base = (nto_residency){&arena_ops, 1};
  a->tt = tt;
  int rc = layout(p, tt, offset, &a->bytes, err);
  if (rc == 0 && !(a->buf = nto_alloc_aligned(a->bytes)))
    rc = nto_err_set(err, NTO_ENOMEM, "cannot allocate %zu bytes", a->bytes);
  for (int t = 0; rc == 0 && t < tt->n; t++) {
    nto_tensor *d = &tt->t[t];
    if (nto_tensor_persistent(d)) {
      rc = nto_arena_add(&a->base, t, err);
    } else if (placed(p, t)) {
      d->data = (float *)((char *)a->buf + offset[t]);
      d->state = NTO_RES_RESIDENT;
    }
  }
  free(offset);
  if (rc != 0) {
    arena_free(&a->base);
    return rc;
  }
  *out = &a->base;
  return 0;
}

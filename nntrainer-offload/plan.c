/* plan.c - per-step and per-tensor use lists. See plan.h. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

/* One recorded access, before finish sorts and merges them. */
struct nto_plan_acc {
  int step, t;
  unsigned char mode;
};

int nto_plan_init(nto_plan *p, int n_steps, int n_tensors, const size_t *bytes,
                  const unsigned char *persistent, nto_err *err) {
  memset(p, 0, sizeof *p);
  p->n_steps = n_steps;
  p->n_tensors = n_tensors;
  size_t nt = (size_t)(n_tensors ? n_tensors : 1);
  p->bytes = malloc(nt * sizeof *p->bytes);
  p->persistent = malloc(nt);
  if (!p->bytes || !p->persistent) {
    nto_plan_free(p);
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  memcpy(p->bytes, bytes, (size_t)n_tensors * sizeof *bytes);
  memcpy(p->persistent, persistent, (size_t)n_tensors);
  return 0;
}

int nto_plan_use(nto_plan *p, int s, int t, int mode) {
  if (t < 0)
    return 0;
  if (p->n_acc == p->cap_acc) {
    int cap = p->cap_acc ? p->cap_acc * 2 : 1024;
    struct nto_plan_acc *a = realloc(p->acc, (size_t)cap * sizeof *a);
    if (!a)
      return NTO_ENOMEM;
    p->acc = a;
    p->cap_acc = cap;
  }
  p->acc[p->n_acc++] = (struct nto_plan_acc){s, t, (unsigned char)mode};
  return 0;
}

static int by_step_tensor(const void *a, const void *b) {
  const struct nto_plan_acc *x = a, *y = b;
  if (x->step != y->step)
    return x->step - y->step;
  return x->t - y->t;
}

/* Merge duplicate (step, tensor) accesses in the sorted list; returns the
 * new count. */
static int merge_duplicates(struct nto_plan_acc *a, int n) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (k > 0 && a[k - 1].step == a[i].step && a[k - 1].t == a[i].t)
      a[k - 1].mode |= a[i].mode;
    else
      a[k++] = a[i];
  }
  return k;
}

/* Fill the CSR lists from the merged, (step, tensor)-sorted accesses. */
static int build_lists(nto_plan *p, int n) {
  int S = p->n_steps, T = p->n_tensors;
  size_t nn = (size_t)(n ? n : 1);
  p->step_first = calloc((size_t)S + 1, sizeof(int));
  p->use_first = calloc((size_t)T + 1, sizeof(int));
  p->step_t = malloc(nn * sizeof(int));
  p->step_mode = malloc(nn);
  p->use_step = malloc(nn * sizeof(int));
  p->use_mode = malloc(nn);
  if (!p->step_first || !p->use_first || !p->step_t || !p->step_mode ||
      !p->use_step || !p->use_mode)
    return NTO_ENOMEM;
  for (int i = 0; i < n; i++) {
    p->step_first[p->acc[i].step + 1]++;
    p->use_first[p->acc[i].t + 1]++;
  }
  for (int s = 0; s < S; s++)
    p->step_first[s + 1] += p->step_first[s];
  for (int t = 0; t < T; t++)
    p->use_first[t + 1] += p->use_first[t];
  int *fill = calloc((size_t)T + 1, sizeof(int));
  if (!fill)
    return NTO_ENOMEM;
  for (int i = 0; i < n; i++) { /* accesses are in step order */
    const struct nto_plan_acc *a = &p->acc[i];
    p->step_t[i] = a->t;
    p->step_mode[i] = a->mode;
    int k = p->use_first[a->t] + fill[a->t]++;
    p->use_step[k] = a->step;
    p->use_mode[k] = a->mode;
  }
  free(fill);
  return 0;
}

int nto_plan_finish(nto_plan *p, nto_err *err) {
  for (int i = 0; i < p->n_acc; i++)
    if (p->acc[i].step < 0 || p->acc[i].step >= p->n_steps ||
        p->acc[i].t >= p->n_tensors || !p->acc[i].mode)
      return nto_err_set(err, NTO_EINVAL,
                         "plan: bad access of tensor %d "
                         "at step %d",
                         p->acc[i].t, p->acc[i].step);
  int sorted = 1; /* nto_plan_add_holds records in order */
  for (int i = 1; i < p->n_acc && sorted; i++)
    sorted = by_step_tensor(&p->acc[i - 1], &p->acc[i]) <= 0;
  if (!sorted)
    qsort(p->acc, (size_t)p->n_acc, sizeof *p->acc, by_step_tensor);
  int n = merge_duplicates(p->acc, p->n_acc);
  if (build_lists(p, n) != 0)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  free(p->acc);
  p->acc = NULL;
  p->n_acc = p->cap_acc = 0;
  for (int t = 0; t < p->n_tensors; t++) {
    int k = p->use_first[t];
    while (k < p->use_first[t + 1] && !(p->use_mode[k] & NTO_USE_RW))
      k++; /* holds */
    if (p->persistent[t] || k == p->use_first[t + 1])
      continue;
    if (!(p->use_mode[k] & NTO_USE_WRITE))
      return nto_err_set(err, NTO_EINVAL,
                         "plan: transient tensor %d is "
                         "read at step %d before any step writes it",
                         t, p->use_step[k]);
  }
  return 0;
}

static int by_hold_tensor(const void *a, const void *b) {
  const nto_plan_hold *x = *(const nto_plan_hold *const *)a,
                      *y = *(const nto_plan_hold *const *)b;
  if (x->t != y->t)
    return (x->t > y->t) - (x->t < y->t);
  return (x > y) - (x < y);
}

/* Record step s's accesses of p merged with the holds hs[0..n) (sorted
 * by tensor) in tensor order. */
static int copy_step(nto_plan *out, const nto_plan *p, int s,
                     const nto_plan_hold *const *hs, int n) {
  int k = p->step_first[s], k1 = p->step_first[s + 1], i = 0, rc = 0;
  while (rc == 0 && (k < k1 || i < n)) {
    if (i == n || (k < k1 && p->step_t[k] <= hs[i]->t)) {
      rc = nto_plan_use(out, s, p->step_t[k], p->step_mode[k]);
      k++;
    } else {
      rc = nto_plan_use(out, s, hs[i++]->t, NTO_USE_HOLD);
    }
  }
  return rc;
}

int nto_plan_add_holds(nto_plan *out, const nto_plan *p, const nto_plan_hold *h,
                       int n, nto_err *err) {
  int S = p->n_steps;
  for (int i = 0; i < n; i++)
    if (h[i].t < 0 || h[i].t >= p->n_tensors || h[i].from < 0 ||
        h[i].from > h[i].to || h[i].to - h[i].from >= S) {
      memset(out, 0, sizeof *out);
      return nto_err_set(err, NTO_EINVAL,
                         "plan: bad hold of tensor %d on steps %d..%d", h[i].t,
                         h[i].from, h[i].to);
    }
  int rc = nto_plan_init(out, S, p->n_tensors, p->bytes, p->persistent, err);
  if (rc != 0)
    return rc;
  /* the holds of each step, by tensor: sorted once, then bucketed by
   * step in that order */
  const nto_plan_hold **by_t = malloc(((size_t)n + 1) * sizeof *by_t);
  int *first = by_t ? calloc((size_t)S + 1, sizeof *first) : NULL, total = 0;
  for (int i = 0; first && i < n; i++) {
    by_t[i] = &h[i];
    for (int s = h[i].from; s <= h[i].to; s++, total++)
      first[s % S + 1]++;
  }
  const nto_plan_hold **at =
      first ? malloc(((size_t)total + 1) * sizeof *at) : NULL;
  int *fill = at ? calloc((size_t)S + 1, sizeof *fill) : NULL;
  rc = fill ? 0 : NTO_ENOMEM;
  if (rc == 0) {
    qsort(by_t, (size_t)n, sizeof *by_t, by_hold_tensor);
    for (int s = 0; s < S; s++)
      first[s + 1] += first[s];
    for (int i = 0; i < n; i++)
      for (int s = by_t[i]->from; s <= by_t[i]->to; s++)
        at[first[s % S] + fill[s % S]++] = by_t[i];
  }
  for (int s = 0; s < S && rc == 0; s++)
    rc = copy_step(out, p, s, at + first[s], first[s + 1] - first[s]);
  free(by_t);
  free(first);
  free(at);
  free(fill);
  if (rc == NTO_ENOMEM)
    nto_err_set(err, rc, "out of memory");
  if (rc == 0)
    rc = nto_plan_finish(out, err);
  if (rc != 0)
    nto_plan_free(out);
  return rc;
}

void nto_plan_free(nto_plan *p) {
  free(p->step_first);
  free(p->step_t);
  free(p->step_mode);
  free(p->use_first);
  free(p->use_step);
  free(p->use_mode);
  free(p->persistent);
  free(p->bytes);
  free(p->acc);
  memset(p, 0, sizeof *p);
}

/* Index k in use_step of the first use of t after step s, or -1. */
static int next_index(const nto_plan *p, int t, int s) {
  for (int k = p->use_first[t]; k < p->use_first[t + 1]; k++)
    if (p->use_step[k] > s)
      return k;
  return -1;
}

int nto_plan_next_use(const nto_plan *p, int t, int s) {
  int k = next_index(p, t, s);
  return k < 0 ? -1 : p->use_step[k];
}

int nto_plan_first_use(const nto_plan *p, int t) {
  int k = p->use_first[t];
  return k < p->use_first[t + 1] ? p->use_step[k] : -1;
}

int nto_plan_last_use(const nto_plan *p, int t) {
  int k = p->use_first[t + 1];
  return k > p->use_first[t] ? p->use_step[k - 1] : -1;
}

int nto_plan_needed_after(const nto_plan *p, int t, int s) {
  if (p->persistent[t])
    return 1;
  int k = next_index(p, t, s);
  while (k >= 0 && k < p->use_first[t + 1] && !(p->use_mode[k] & NTO_USE_RW))
    k++; /* holds */
  return k >= 0 && k < p->use_first[t + 1] && (p->use_mode[k] & NTO_USE_READ);
}

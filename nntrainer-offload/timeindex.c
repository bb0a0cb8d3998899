/* timeindex.c - which items live when. See timeindex.h. */
#include "timeindex.h"

#include <stdlib.h>
#include <string.h>

int nto_time_index_init(nto_time_index *x, int n, long T) {
  memset(x, 0, sizeof *x);
  x->nb = (int)(T < 4096 ? (T > 0 ? T : 1) : 4096);
  x->w = (T + x->nb - 1) / x->nb;
  if (x->w < 1)
    x->w = 1;
  x->head = malloc((size_t)x->nb * sizeof *x->head);
  x->lng = malloc(((size_t)n + 1) * sizeof *x->lng);
  x->stamp = malloc(((size_t)n + 1) * sizeof *x->stamp);
  if (!x->head || !x->lng || !x->stamp)
    return -1;
  for (int b = 0; b < x->nb; b++)
    x->head[b] = -1;
  for (int i = 0; i <= n; i++)
    x->stamp[i] = -1;
  return 0;
}

void nto_time_index_free(nto_time_index *x) {
  free(x->head);
  free(x->node);
  free(x->next);
  free(x->lng);
  free(x->stamp);
  memset(x, 0, sizeof *x);
}

/* The buckets [*a, *a + return) that instants [seg[0], seg[1]] touch. */
static long buckets(const nto_time_index *x, const long seg[2], long *a) {
  *a = seg[0] / x->w;
  long b = seg[1] / x->w;
  if (b >= x->nb)
    b = x->nb - 1;
  return b - *a + 1;
}

long nto_time_index_span(const nto_time_index *x, const long (*seg)[2],
                         int n_seg) {
  long total = 0, a;
  for (int i = 0; i < n_seg; i++)
    total += buckets(x, seg[i], &a);
  return total;
}

int nto_time_index_add(nto_time_index *x, int k, const long (*seg)[2],
                       int n_seg, int lng) {
  if (lng) {
    x->lng[x->n_lng++] = k;
    return 0;
  }
  for (int i = 0; i < n_seg; i++) {
    long a, nb = buckets(x, seg[i], &a);
    for (long b = a; b < a + nb; b++) {
      if (x->n_node == x->cap_node) {
        int cap = x->cap_node ? 2 * x->cap_node : 4096;
        int *nd = realloc(x->node, (size_t)cap * sizeof *nd);
        if (!nd)
          return -1;
        x->node = nd;
        int *nx = realloc(x->next, (size_t)cap * sizeof *nx);
        if (!nx)
          return -1;
        x->next = nx;
        x->cap_node = cap;
      }
      x->node[x->n_node] = k;
      x->next[x->n_node] = x->head[b];
      x->head[b] = x->n_node++;
    }
  }
  return 0;
}

int nto_time_index_near(nto_time_index *x, const long (*r)[2], int nr,
                        int *out) {
  int q = x->query++, n = 0;
  for (int i = 0; i < nr; i++) {
    long a, nb = buckets(x, r[i], &a);
    for (long b = a; b < a + nb; b++)
      for (int e = x->head[b]; e >= 0; e = x->next[e])
        if (x->stamp[x->node[e]] != q) {
          x->stamp[x->node[e]] = q;
          out[n++] = x->node[e];
        }
  }
  for (int j = 0; j < x->n_lng; j++)
    if (x->stamp[x->lng[j]] != q) {
      x->stamp[x->lng[j]] = q;
      out[n++] = x->lng[j];
    }
  return n;
}

/* pool.c - recycled page-aligned buffers. See pool.h. */
#include "pool.h"
#include "tensor.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

typedef struct kept_buf {
  void *buf;
  size_t bytes;
} kept_buf;

struct nto_pool {
  pthread_mutex_t mu;
  kept_buf *kept; /* buffers kept for reuse */
  int n_kept, cap_kept;
  size_t in_use, peak, kept_bytes;
};

nto_pool *nto_pool_create(void) {
  nto_pool *p = calloc(1, sizeof *p);
  if (p)
    pthread_mutex_init(&p->mu, NULL);
  return p;
}

void nto_pool_destroy(nto_pool *p) {
  if (!p)
    return;
  for (int i = 0; i < p->n_kept; i++)
    munmap(p->kept[i].buf, p->kept[i].bytes);
  free(p->kept);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* Take a kept buffer of exactly `bytes`; NULL if none. Lock held. */
static void *take_kept(nto_pool *p, size_t bytes) {
  for (int i = p->n_kept - 1; i >= 0; i--) {
    if (p->kept[i].bytes != bytes)
      continue;
    void *buf = p->kept[i].buf;
    p->kept[i] = p->kept[--p->n_kept];
    p->kept_bytes -= bytes;
    return buf;
  }
  return NULL;
}

/* Unmap kept buffers until in_use + kept + extra <= peak (or none is
 * kept). Lock held. */
static void trim(nto_pool *p, size_t extra) {
  while (p->n_kept > 0 && p->in_use + p->kept_bytes + extra > p->peak) {
    kept_buf k = p->kept[--p->n_kept];
    p->kept_bytes -= k.bytes;
    munmap(k.buf, k.bytes);
  }
}

void *nto_pool_get(nto_pool *p, size_t bytes) {
  bytes = nto_round_page(bytes ? bytes : 1);
  pthread_mutex_lock(&p->mu);
  void *buf = take_kept(p, bytes);
  if (!buf) {
    trim(p, bytes);
    pthread_mutex_unlock(&p->mu);
    buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
               -1, 0);
    if (buf == MAP_FAILED)
      return NULL;
    pthread_mutex_lock(&p->mu);
  }
  p->in_use += bytes;
  if (p->in_use > p->peak)
    p->peak = p->in_use;
  pthread_mutex_unlock(&p->mu);
  return buf;
}

void nto_pool_put(nto_pool *p, void *buf, size_t bytes) {
  if (!buf)
    return;
  bytes = nto_round_page(bytes ? bytes : 1);
  pthread_mutex_lock(&p->mu);
  p->in_use -= bytes;
  int keep = p->in_use + p->kept_bytes + bytes <= p->peak;
  if (keep && p->n_kept == p->cap_kept) {
    int cap = p->cap_kept ? p->cap_kept * 2 : 64;
    kept_buf *k = realloc(p->kept, (size_t)cap * sizeof *k);
    if (k) {
      p->kept = k;
      p->cap_kept = cap;
    } else {
      keep = 0;
    }
  }
  if (keep) {
    p->kept[p->n_kept++] = (kept_buf){buf, bytes};
    p->kept_bytes += bytes;
  }
  pthread_mutex_unlock(&p->mu);
  if (!keep)
    munmap(buf, bytes);
}

size_t nto_pool_in_use(nto_pool *p) {
  pthread_mutex_lock(&p->mu);
  size_t v = p->in_use;
  pthread_mutex_unlock(&p->mu);
  return v;
}

size_t nto_pool_peak(nto_pool *p) {
  pthread_mutex_lock(&p->mu);
  size_t v = p->peak;
  pthread_mutex_unlock(&p->mu);
  return v;
}

size_t nto_pool_kept(nto_pool *p) {
  pthread_mutex_lock(&p->mu);
  size_t v = p->kept_bytes;
  pthread_mutex_unlock(&p->mu);
  return v;
}

void nto_pool_reset_peak(nto_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->peak = p->in_use;
  trim(p, 0);
  pthread_mutex_unlock(&p->mu);
}

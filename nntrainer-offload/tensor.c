/* tensor.c - shapes and tensor buffers. See tensor.h. */
#include "tensor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

size_t nto_shape_numel(nto_shape s) {
  return (size_t)s.n * (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

size_t nto_shape_sample(nto_shape s) {
  return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

int nto_argmax(const float *x, int k) {
  int best = 0;
  for (int j = 1; j < k; j++)
    if (x[j] > x[best])
      best = j;
  return best;
}

int nto_shape_eq(nto_shape a, nto_shape b) {
  return a.n == b.n && a.c == b.c && a.h == b.h && a.w == b.w;
}

char *nto_shape_str(nto_shape s, int with_batch, char *buf, size_t len) {
  if (with_batch)
    snprintf(buf, len, "%d:%d:%d:%d", s.n, s.c, s.h, s.w);
  else
    snprintf(buf, len, "%d:%d:%d", s.c, s.h, s.w);
  return buf;
}

size_t nto_round_page(size_t bytes) {
  return (bytes + NTO_PAGE - 1) / NTO_PAGE * NTO_PAGE;
}

char *nto_format_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes / 1024.0;
  int u = 0;
  while (u < 5 && v >= 1024.0) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, len, "%.1f %s", v, unit[u]);
  return buf;
}

float *nto_alloc_aligned(size_t bytes) {
  size_t sz = nto_round_page(bytes ? bytes : 1);
  void *p = NULL;
  if (posix_memalign(&p, NTO_PAGE, sz) != 0)
    return NULL;
  memset(p, 0, sz);
  return p;
}

void nto_free_aligned(float *p) { free(p); }

static size_t map_length(size_t bytes) {
  return bytes ? nto_round_page(bytes) : NTO_PAGE;
}

void *nto_map_buffers(size_t bytes) {
  size_t len = map_length(bytes);
  int huge = len >= NTO_HUGE_PAGE;
  /* Over-map by one huge page, then unmap the head and tail around the
   * first 2 MiB boundary: kernels before 6.7 do not align large
   * anonymous mappings themselves. */
  size_t span = huge ? len + NTO_HUGE_PAGE : len;
  char *r = mmap(NULL, span, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED)
    return NULL;
  if (!huge)
    return r;
  uintptr_t a =
      ((uintptr_t)r + NTO_HUGE_PAGE - 1) & ~(uintptr_t)(NTO_HUGE_PAGE - 1);
  char *p = (char *)a;
  if (p > r)
    munmap(r, (size_t)(p - r));
  if (r + span > p + len)
    munmap(p + len, (size_t)(r + span - (p + len)));
  /* Advice only: EINVAL where THP is not built in changes nothing. */
  (void)madvise(p, len, MADV_HUGEPAGE);
  return p;
}

void nto_unmap_buffers(void *p, size_t bytes) {
  if (p)
    munmap(p, map_length(bytes));
}

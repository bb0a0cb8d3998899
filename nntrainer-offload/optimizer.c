/* optimizer.c - SGD, Adam, AdamW. See optimizer.h for the formulas. */
#include "optimizer.h"

#include "clones.h"
#include "parallel.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int nto_opt_state_count(const nto_opt_conf *o) {
  switch (o->kind) {
  case NTO_OPT_SGD:
    return o->momentum > 0 ? 1 : 0;
  case NTO_OPT_ADAM:
  case NTO_OPT_ADAMW:
    return 2;
  }
  return 0;
}

nto_opt_state_format nto_opt_weight_format(nto_opt_state_format f,
                                           size_t weight_numel) {
  return weight_numel < NTO_OPT_Q_MIN_NUMEL ? NTO_OPT_STATE_FP32 : f;
}

static size_t q_blocks(size_t n) {
  return (n + NTO_OPT_Q_BLOCK - 1) / NTO_OPT_Q_BLOCK;
}

size_t nto_opt_state_bytes(nto_opt_state_format f, size_t n) {
  switch (f) {
  case NTO_OPT_STATE_BF16:
    return 2 * n;
  case NTO_OPT_STATE_INT8:
    return 4 * q_blocks(n) + n;
  case NTO_OPT_STATE_FP32:
    break;
  }
  return 4 * n;
}

const char *nto_opt_state_name(nto_opt_state_format f) {
  switch (f) {
  case NTO_OPT_STATE_BF16:
    return "bf16";
  case NTO_OPT_STATE_INT8:
    return "int8";
  case NTO_OPT_STATE_FP32:
    break;
  }
  return "fp32";
}

/* ------------------------------------------------------------- bfloat16 */

/* SplitMix64's finalizer (Steele, Lea, Flood, "Fast splittable
 * pseudorandom number generators", OOPSLA 2014): 64 well-mixed bits of
 * a counter. */
static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* x rounded stochastically to a neighbouring bfloat16 (up in magnitude
 * with probability the dropped 16 bits / 2^16: unbiased), the bits drawn
 * from r (a NaN stays a quiet NaN). */
static inline uint16_t bf16_encode(float x, uint32_t r) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  u += r & 0xffffu;
  return (uint16_t)(u >> 16);
}

static inline float bf16_decode(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* ------------------------------------------------- block-wise int8 state */

/* A codebook and what finds the nearest entry fast. An entry's index is
 * the number of midpoints below x (ties go to the lower entry), found by
 * a scan up from start[key], where the key is |x|'s exponent and first 8
 * fraction bits (the float's bits >> 15, less Q_KEY0: |x| below 2^-30,
 * far below the smallest non-zero entry, is key 0; 1.0 is key Q_KEYS - 1)
 * and start the index of the smallest value of that bucket, of either
 * sign. A bucket spans 1/256 of its value, less than the gaps between
 * midpoints (at least 1/190 of theirs: the unsigned book's last two), so
 * one step finds the index; build_book checks it (one_step), else every
 * block takes the scan. Either gives the index of a binary search
 * (tests). */
#define Q_KEY0 ((uint32_t)(127 - 30) << 8)
#define Q_KEYS ((0x3f800000u >> 15) - Q_KEY0 + 1)

typedef struct codebook {
  float code[256];
  float mid[256]; /* mid[255] = infinity: the scan's end */
  uint8_t start[2][Q_KEYS]; /* x >= 0, x < 0 (by the sign bit) */
  int one_step;             /* no bucket holds two midpoints */
} codebook;

static codebook books[2]; /* signed, unsigned */
static pthread_once_t books_once = PTHREAD_ONCE_INIT;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Index of the entry of cb nearest x: a binary search over the midpoints. */
static int nearest_search(const codebook *cb, float x) {
  int lo = 0, hi = 255;
  while (lo < hi) {
    int m = (lo + hi) / 2;
    if (cb->mid[m] < x)
      lo = m + 1;
    else
      hi = m;
  }
  return lo;
}

static float float_of_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* bitsandbytes' create_dynamic_map(signed, max_exponent_bits = 7,
 * total_bits = 8), in double precision, then rounded to float. */
static void build_book(codebook *cb, int is_signed) {
  double d[256];
  int n = 0;
  for (int e = 0; e < 7; e++) {
    int parts = is_signed ? 1 << e : 1 << (e + 1);
    for (int k = 0; k < parts; k++) {
      double v = pow(10.0, e - 6) * (0.1 + 0.9 * (k + 0.5) / parts);
      d[n++] = v;
      if (is_signed)
        d[n++] = -v;
    }
  }
  d[n++] = 0.0;
  d[n++] = 1.0;
  qsort(d, (size_t)n, sizeof *d, cmp_double);
  for (int i = 0; i < 256; i++)
    cb->code[i] = (float)d[i];
  for (int i = 0; i < 255; i++)
    cb->mid[i] = (float)((d[i] + d[i + 1]) / 2.0);
  cb->mid[255] = INFINITY;
  cb->one_step = 1;
  for (uint32_t k = 0; k < Q_KEYS; k++) {
    float lo = k ? float_of_bits((k + Q_KEY0) << 15) : 0.0f;
    float hi = float_of_bits(((k + 1 + Q_KEY0) << 15) - 1); /* its last */
    cb->start[0][k] = (uint8_t)nearest_search(cb, lo);
    cb->start[1][k] = (uint8_t)nearest_search(cb, -hi);
    if (nearest_search(cb, hi) - cb->start[0][k] > 1 ||
        nearest_search(cb, k ? -lo : 0.0f) - cb->start[1][k] > 1)
      cb->one_step = 0;
  }
}

static void build_books(void) {
  build_book(&books[0], 1);
  build_book(&books[1], 0);
}

static const codebook *book(int is_unsigned) {
  pthread_once(&books_once, build_books);
  return &books[is_unsigned ? 1 : 0];
}

const float *nto_opt_int8_codebook(int is_unsigned) {
  return book(is_unsigned)->code;
}

/* The entry of cb nearest x; scan: more than one step may be needed
 * (!cb->one_step; the infinity at mid[255] ends it). */
static inline uint8_t nearest(const codebook *cb, float x, int scan) {
  uint32_t u;
  memcpy(&u, &x, 4);
  uint32_t k = (u & 0x7fffffffu) >> 15;
  k = k < Q_KEY0 ? 0 : k - Q_KEY0;
  if (k >= Q_KEYS)
    k = Q_KEYS - 1;
  int i = cb->start[u >> 31][k]; /* -0.0 is key 0 of either: 0's entry */
  i += cb->mid[i] < x;
  while (scan && cb->mid[i] < x)
    i++;
  return (uint8_t)i;
}

/* One block of n <= NTO_OPT_Q_BLOCK values: its maximum and codes. In
 * the unsigned codebook (Adam's v) a value above zero never takes the
 * zero entry (the smallest non-zero one instead): see optimizer.h. */
static void q_encode_block(const codebook *cb, int is_unsigned, const float *x,
                           size_t n, float *absmax, uint8_t *c) {
  float m = 0.0f;
  for (size_t i = 0; i < n; i++) { /* as fmaxf (NaN skipped), inline */
    float a = fabsf(x[i]);
    m = a > m ? a : m;
  }
  float inv = m > 0.0f ? 1.0f / m : 0.0f;
  int scan = !cb->one_step;
  if (is_unsigned)
    for (size_t i = 0; i < n; i++) {
      uint8_t k = nearest(cb, x[i] * inv, scan);
      c[i] = (uint8_t)(k + (k == 0 && x[i] > 0.0f));
    }
  else
    for (size_t i = 0; i < n; i++)
      c[i] = nearest(cb, x[i] * inv, scan);
  *absmax = m;
}

static void q_decode_block(const codebook *cb, float absmax, const uint8_t *c,
                           size_t n, float *x) {
  for (size_t i = 0; i < n; i++)
    x[i] = cb->code[c[i]] * absmax;
}

/* Elements [a, a + n) of a state tensor of `total` elements in format f
 * (a a multiple of NTO_OPT_Q_BLOCK, n at most one block) into x. */
static void state_get(nto_opt_state_format f, int is_unsigned, const void *s,
                      size_t total, size_t a, size_t n, float *x) {
  if (f == NTO_OPT_STATE_BF16) {
    const uint16_t *h = (const uint16_t *)s + a;
    for (size_t i = 0; i < n; i++)
      x[i] = bf16_decode(h[i]);
  } else {
    const float *absmax = s;
    const uint8_t *c = (const uint8_t *)(absmax + q_blocks(total)) + a;
    q_decode_block(book(is_unsigned), absmax[a / NTO_OPT_Q_BLOCK], c, n, x);
  }
}

/* state_get's reverse; bf16 rounds element e stochastically with the bits
 * mix64(seed + e) (of the state tensor's elements: the same whatever the
 * split into ranges). */
static void state_put(nto_opt_state_format f, int is_unsigned, void *s,
                      size_t total, size_t a, size_t n, const float *x,
                      uint64_t seed) {
  if (f == NTO_OPT_STATE_BF16) {
    uint16_t *h = (uint16_t *)s + a;
    for (size_t i = 0; i < n; i++)
      h[i] = bf16_encode(x[i], (uint32_t)mix64(seed + a + i));
  } else {
    float *absmax = s;
    uint8_t *c = (uint8_t *)(absmax + q_blocks(total)) + a;
    q_encode_block(book(is_unsigned), is_unsigned, x, n,
                   &absmax[a / NTO_OPT_Q_BLOCK], c);
  }
}

void nto_opt_state_encode(nto_opt_state_format f, int is_unsigned,
                          const float *x, size_t n, void *dst, uint64_t seed) {
  if (f == NTO_OPT_STATE_FP32) {
    memcpy(dst, x, n * sizeof *x);
    return;
  }
  for (size_t a = 0; a < n; a += NTO_OPT_Q_BLOCK) {
    size_t len = n - a < NTO_OPT_Q_BLOCK ? n - a : NTO_OPT_Q_BLOCK;
    state_put(f, is_unsigned, dst, n, a, len, x + a, seed);
  }
}

uint64_t nto_opt_state_seed(uint64_t key, long t, int q) {
  return mix64(mix64(key) + (uint64_t)t * 0x9e3779b97f4a7c15ull +
               (uint64_t)q * 0xd1b54a32d192ed03ull);
}

void nto_opt_state_decode(nto_opt_state_format f, int is_unsigned,
                          const void *src, size_t n, float *x) {
  if (f == NTO_OPT_STATE_FP32) {
    memcpy(x, src, n * sizeof *x);
    return;
  }
  for (size_t a = 0; a < n; a += NTO_OPT_Q_BLOCK) {
    size_t len = n - a < NTO_OPT_Q_BLOCK ? n - a : NTO_OPT_Q_BLOCK;
    state_get(f, is_unsigned, src, n, a, len, x + a);
  }
}

/* ------------------------------------------------------------- updates */

/* w (n), g (n), v (n) or NULL when momentum == 0. */
NTO_CLONES static void sgd_update(float *w, const float *g, float *v, size_t n,
                                  float lr, float mu, float wd, long t) {
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] + wd * w[i];
    if (v) {
      v[i] = t == 1 ? gi : mu * v[i] + gi;
      gi = v[i];
    }
    w[i] -= lr * gi;
  }
}

/* Adam's moments and step for one element given its gradient gi. */
static inline void adam_element(float *w, float *m, float *v, float gi,
                                float b1, float b2, float eps, float step,
                                float sbc2) {
  *m = b1 * *m + (1.0f - b1) * gi;
  *v = b2 * *v + (1.0f - b2) * gi * gi;
  float denom = sqrtf(*v) / sbc2 + eps;
  *w -= step * (*m / denom);
}

/* w, g, m, v: n floats each. wd is L2 (added to g); decoupled is AdamW.
 * Loops without branches, so that they vectorize (sqrtf too: the build
 * has -fno-math-errno). */
NTO_CLONES static void adam_update(float *w, const float *g, float *m, float *v,
                                   size_t n, const nto_opt_conf *o, double lr,
                                   long t) {
  float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->epsilon;
  double bc1 = 1.0 - pow(o->beta1, (double)t);
  double bc2 = 1.0 - pow(o->beta2, (double)t);
  float step = (float)(lr / bc1);
  float sbc2 = (float)sqrt(bc2);
  float wd = (float)o->weight_decay;
  if (o->kind == NTO_OPT_ADAMW) {
    float shrink = (float)(1.0 - lr * o->weight_decay);
    for (size_t i = 0; i < n; i++) { /* decay, then the step: one pass */
      w[i] *= shrink;
      adam_element(&w[i], &m[i], &v[i], g[i], b1, b2, eps, step, sbc2);
    }
  } else {
    for (size_t i = 0; i < n; i++)
      adam_element(&w[i], &m[i], &v[i], g[i] + wd * w[i], b1, b2, eps, step,
                   sbc2);
  }
}

/* The fp32 update of elements [0, n) with state st (NULL when none). */
static void update_fp32(const nto_opt_conf *o, float *w, const float *g,
                        float *const *st, size_t n, double lr, long t) {
  switch (o->kind) {
  case NTO_OPT_SGD:
    sgd_update(w, g, o->momentum > 0 ? st[0] : NULL, n, (float)lr,
               (float)o->momentum, (float)o->weight_decay, t);
    break;
  case NTO_OPT_ADAM:
  case NTO_OPT_ADAMW:
    adam_update(w, g, st[0], st[1], n, o, lr, t);
    break;
  }
}

/* An update split over the compute threads (parallel.h): every element
 * is updated by one range with the same operations, so the split does not
 * change the result. Ranges are multiples of OPT_GRAIN long, so an int8
 * block lies in one range. */
typedef struct opt_job {
  const nto_opt_conf *o;
  nto_opt_state_format f;
  float *w;
  const float *g;
  void *const *state;
  size_t n;
  double lr;
  long t;
  uint64_t seed[2]; /* per state: nto_opt_state_seed */
} opt_job;

#define OPT_GRAIN 4096 /* elements per range: 16 KiB, whole pages; a
                          multiple of NTO_OPT_Q_BLOCK */

static void opt_range(void *ctx, size_t a, size_t b, int slot) {
  const opt_job *j = ctx;
  const nto_opt_conf *o = j->o;
  int ns = nto_opt_state_count(o);
  (void)slot;
  if (j->f == NTO_OPT_STATE_FP32) {
    float *st[2] = {NULL, NULL};
    for (int q = 0; q < ns; q++)
      st[q] = (float *)j->state[q] + a;
    update_fp32(o, j->w + a, j->g + a, st, b - a, j->lr, j->t);
    return;
  }
  /* decode a block, update it in fp32, encode it (state q = 1 is Adam's
   * v: the unsigned codebook) */
  float buf[2][NTO_OPT_Q_BLOCK];
  float *st[2] = {buf[0], buf[1]};
  for (size_t s = a; s < b; s += NTO_OPT_Q_BLOCK) {
    size_t len = b - s < NTO_OPT_Q_BLOCK ? b - s : NTO_OPT_Q_BLOCK;
    for (int q = 0; q < ns; q++)
      state_get(j->f, q == 1, j->state[q], j->n, s, len, buf[q]);
    update_fp32(o, j->w + s, j->g + s, st, len, j->lr, j->t);
    for (int q = 0; q < ns; q++)
      state_put(j->f, q == 1, j->state[q], j->n, s, len, buf[q], j->seed[q]);
  }
}

void nto_opt_update(const nto_opt_conf *o, nto_opt_state_format f, float *w,
                    const float *g, void *const *state, size_t n, double lr,
                    long t, uint64_t key) {
  if (f != NTO_OPT_STATE_FP32)
    (void)book(0); /* the codebooks, before the workers read them */
  opt_job j = {o,  f, w, g, state, n, lr, t, {nto_opt_state_seed(key, t, 0),
                                                 nto_opt_state_seed(key, t, 1)}};
  nto_parallel_for(n, OPT_GRAIN, 0, opt_range, &j);
}

/* optimizer.c - SGD, Adam, AdamW. See optimizer.h for the formulas. */
#include "optimizer.h"

#include "clones.h"
#include "parallel.h"

#include <math.h>

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

/* An update split over the compute threads (parallel.h): every element
 * is updated by one range with the same operations, so the split does not
 * change the result. */
typedef struct opt_job {
  const nto_opt_conf *o;
  float *w;
  const float *g;
  float *const *state;
  double lr;
  long t;
} opt_job;

#define OPT_GRAIN 4096 /* elements per range: 16 KiB, whole pages */

static void opt_range(void *ctx, size_t a, size_t b, int slot) {
  const opt_job *j = ctx;
  const nto_opt_conf *o = j->o;
  (void)slot;
  float *st[2] = {NULL, NULL};
  for (int q = 0; q < nto_opt_state_count(o); q++)
    st[q] = j->state[q] + a;
  switch (o->kind) {
  case NTO_OPT_SGD:
    sgd_update(j->w + a, j->g + a, o->momentum > 0 ? st[0] : NULL, b - a,
               (float)j->lr, (float)o->momentum, (float)o->weight_decay, j->t);
    break;
  case NTO_OPT_ADAM:
  case NTO_OPT_ADAMW:
    adam_update(j->w + a, j->g + a, st[0], st[1], b - a, o, j->lr, j->t);
    break;
  }
}

void nto_opt_update(const nto_opt_conf *o, float *w, const float *g,
                    float *const *state, size_t n, double lr, long t) {
  opt_job j = {o, w, g, state, lr, t};
  nto_parallel_for(n, OPT_GRAIN, 0, opt_range, &j);
}

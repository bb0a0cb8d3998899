/* loss.c - cross-entropy and mse. See loss.h for the formulas. */
#include "loss.h"

#include <math.h>
#include <string.h>

nto_loss_form nto_loss_form_for(nto_loss_kind k, nto_out_kind out, int *fused) {
  *fused = 0;
  if (k == NTO_LOSS_MSE)
    return NTO_LOSSF_MSE;
  if (out == NTO_OUT_SOFTMAX || out == NTO_OUT_SIGMOID)
    *fused = 1;
  return out == NTO_OUT_SIGMOID ? NTO_LOSSF_SIGMOID_BCE : NTO_LOSSF_SOFTMAX_CE;
}

/* One sample: z (k logits), y (k). Writes dz = softmax(z)*sum(y) - y scaled
 * by inv_n when dz != NULL. Returns -sum y log softmax(z). */
static double softmax_ce(const float *z, const float *y, int k, double inv_n,
                         float *dz) {
  double mx = z[0];
  for (int j = 1; j < k; j++)
    mx = fmax(mx, z[j]);
  double s = 0, ysum = 0;
  for (int j = 0; j < k; j++) {
    s += exp((double)z[j] - mx);
    ysum += y[j];
  }
  double lse = mx + log(s);
  double l = 0;
  for (int j = 0; j < k; j++) {
    l -= (double)y[j] * ((double)z[j] - lse);
    if (dz)
      dz[j] = (float)((exp((double)z[j] - lse) * ysum - y[j]) * inv_n);
  }
  return l;
}

double nto_loss_compute(nto_loss_form f, const float *z, const float *y, int n,
                        int k, int valid, float *grad) {
  double total = 0;
  double inv =
      f == NTO_LOSSF_SOFTMAX_CE ? 1.0 / valid : 1.0 / ((double)valid * k);
  for (int b = 0; b < valid; b++) {
    const float *zb = z + (size_t)b * k, *yb = y + (size_t)b * k;
    float *gb = grad ? grad + (size_t)b * k : NULL;
    if (f == NTO_LOSSF_SOFTMAX_CE) {
      total += softmax_ce(zb, yb, k, inv, gb);
      continue;
    }
    for (int j = 0; j < k; j++) {
      double x = zb[j], t = yb[j];
      if (f == NTO_LOSSF_MSE) {
        total += (x - t) * (x - t);
        if (gb)
          gb[j] = (float)(2.0 * (x - t) * inv);
      } else {
        total += fmax(x, 0) - x * t + log1p(exp(-fabs(x)));
        if (gb)
          gb[j] = (float)((1.0 / (1.0 + exp(-x)) - t) * inv);
      }
    }
  }
  if (grad && valid < n)
    memset(grad + (size_t)valid * k, 0,
           sizeof(float) * (size_t)(n - valid) * k);
  return f == NTO_LOSSF_SOFTMAX_CE ? total / valid : total * inv;
}

double nto_loss_regularization(const nto_layer *layers, int n) {
  double r = 0.0;
  for (int i = 0; i < n; i++)
    r += layers[i].reg_loss;
  return r;
}

int nto_count_correct(const float *out, const float *y, int k, int valid) {
  int c = 0;
  for (int b = 0; b < valid; b++)
    c += nto_argmax(out + (size_t)b * k, k) == nto_argmax(y + (size_t)b * k, k);
  return c;
}

/*
 * optimizer.h - parameter updates: SGD (momentum, L2 weight decay), Adam
 * (L2 weight decay) and AdamW (decoupled weight decay).
 *
 * The update of a layer's weights is fused into that layer's backward step,
 * so parameter gradients are transient. State tensors (momentum, Adam m and
 * v) have the weight's shape and are owned by the model's tensor table.
 * Formulas follow PyTorch 1.13 (torch.optim.SGD/Adam/AdamW) so that golden
 * tests compare directly:
 *   SGD:   g' = g + wd*w;  v = mu*v + g' (v = g' at t=1);  w -= lr*v
 *   Adam:  g' = g + wd*w;  m = b1*m + (1-b1)*g';  v = b2*v + (1-b2)*g'^2;
 *          w -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
 *   AdamW: w *= 1 - lr*wd, then Adam with wd = 0
 *          (Kingma & Ba 2015; Loshchilov & Hutter 2019).
 * g arrives with a layer's weight regularizer term C * w already added by
 * the layer (props.h nto_regularizer; nntrainer adds it before its
 * optimizer too), per update chunk when the gradient is computed by rows;
 * wd is the optimizer's own, on every weight.
 * Executor thread only.
 */
#ifndef NTO_OPTIMIZER_H
#define NTO_OPTIMIZER_H

#include "config.h"

#include <stddef.h>

/* Number of state tensors per trainable weight (0, 1 or 2). */
int nto_opt_state_count(const nto_opt_conf *o);

/*
 * Update n weights w[0..n) in place from gradients g[0..n).
 * state: nto_opt_state_count() arrays of n floats (zero at t = 1).
 * lr: this iteration's learning rate; t: 1-based update count.
 * Runs on the compute threads (parallel.h); the executor calls it.
 */
void nto_opt_update(const nto_opt_conf *o, float *w, const float *g,
                    float *const *state, size_t n, double lr, long t);

#endif /* NTO_OPTIMIZER_H */

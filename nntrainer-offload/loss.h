/*
 * loss.h - losses and their gradients, computed in double per sample.
 *
 * The output layer's kind decides how "cross" is computed:
 *  - softmax output: softmax cross-entropy from the LOGITS (the softmax
 *    layer's input), numerically stable via log-sum-exp; the gradient
 *    dL/dlogits = (p * sum(y) - y) / N bypasses the softmax backward.
 *  - sigmoid output: binary cross-entropy from the logits x,
 *    max(x,0) - x*y + log(1 + exp(-|x|)), mean over all elements;
 *    dL/dx = (sigmoid(x) - y) / (N*K).
 *  - plain output: the output is taken as logits of a softmax cross-entropy.
 * mse: mean over all N*K elements of (o - y)^2; dL/do = 2 (o - y) / (N*K).
 * Matches torch.nn.CrossEntropyLoss / BCEWithLogitsLoss / MSELoss (mean).
 * Executor thread only; no allocation.
 */
#ifndef NTO_LOSS_H
#define NTO_LOSS_H

#include "config.h"
#include "layer.h"

#include <stddef.h>

typedef enum {
  NTO_LOSSF_SOFTMAX_CE, /* from logits */
  NTO_LOSSF_SIGMOID_BCE, /* from logits */
  NTO_LOSSF_MSE,        /* from the output */
} nto_loss_form;

/* The form for a loss kind and the output layer's kind; *fused is 1 when the
 * output layer's own backward must be skipped (gradient goes to logits). */
nto_loss_form nto_loss_form_for(nto_loss_kind k, nto_out_kind out, int *fused);

/*
 * Loss of a batch. z: N x K values (logits or outputs per the form), y: N x K
 * targets; only the first `valid` samples count (valid <= N). grad: N x K
 * dL/dz, or NULL; rows past valid are zeroed. Returns the mean loss.
 */
double nto_loss_compute(nto_loss_form f, const float *z, const float *y,
                        int n, int k, int valid, float *grad);

/*
 * The regularizers' term of the loss (layer.h reg_loss): the sum of
 * layers[0..n)'s reg_loss, in layer order, each set by the layer's forward
 * of this pass. nntrainer's reported loss is the data loss plus this term,
 * in training and in validation alike (its LayerNode::forwarding sets each
 * layer's loss to its weights' regularization loss, and
 * NeuralNetwork::getLoss sums the layers'): the executor adds it to
 * nto_loss_compute's mean once every forward of the pass has run. 0 when no
 * weight has a regularizer.
 */
double nto_loss_regularization(const nto_layer *layers, int n);

/* Number of samples among the first valid (rows of k values) whose
 * argmax(out) == argmax(y). */
int nto_count_correct(const float *out, const float *y, int k, int valid);

#endif /* NTO_LOSS_H */

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
#include <stdint.h>

/* Number of state tensors per trainable weight (0, 1 or 2). */
int nto_opt_state_count(const nto_opt_conf *o);

/*
 * State formats (config.h nto_opt_state_format), chosen per weight:
 *
 * fp32: n floats; the updates are PyTorch's formulas above, exactly.
 *
 * bf16: n uint16, the top half of each float (bfloat16: 8 exponent bits,
 *   7 fraction bits), rounded stochastically: up in magnitude with the
 *   probability of the dropped bits' share, so that the rounding is
 *   unbiased (relative error < 2^-7). Rounding to nearest would freeze
 *   Adam's v: v * beta2 = v * 0.999 changes v by 0.1%, under half an ulp
 *   (2^-9 at least), so v rounds back to itself and never decays, and the
 *   steps shrink (ResNet-18, 1 epoch of Fashion-MNIST: 89.14% against
 *   fp32's 90.20%). The random bits are a hash (SplitMix64) of the
 *   weight, chunk, update count, state and element (nto_opt_state_seed):
 *   deterministic, the same at any window, thread count or backend. The
 *   update decodes, computes in fp32 as above, encodes.
 *
 * int8: block-wise dynamic quantization (Dettmers, Lewis, Shleifer,
 *   Zettlemoyer, "8-bit Optimizers via Block-wise Quantization", ICLR
 *   2022): blocks of NTO_OPT_Q_BLOCK elements, each stored as its absolute
 *   maximum (a float) and one byte per element, the index of the nearest
 *   value of a 256-entry codebook times that maximum. The codebook is the
 *   paper's dynamic tree type as bitsandbytes builds it (functional.py
 *   create_dynamic_map, 7 exponent bits): for decades d = 0..6, the
 *   midpoints of an even split of [0.1, 1] into 2^d (signed) or 2^(d+1)
 *   (unsigned) parts, times 10^(d-6), with 0 and 1: the signed one (with
 *   the negatives) for momentum and Adam's m, the unsigned one for Adam's
 *   v. Layout of a state tensor of n elements: ceil(n / NTO_OPT_Q_BLOCK)
 *   floats (the maxima), then n bytes. The update decodes a block,
 *   computes in fp32 as above, takes the block's new maximum and encodes.
 *   One departure from bitsandbytes: a v above zero is never encoded as
 *   zero (it takes the smallest non-zero entry, 3.25e-7 of the block's
 *   maximum). v ~ g^2 spans twice the decades of m ~ g, so v would round
 *   to zero where m does not, and a later step with a zero gradient (a
 *   ReLU net's idle channel) would move the weight by lr * m / eps: the
 *   "zero-point problem" of Li, Chen, Zhu, "Memory Efficient Optimizers
 *   with 4-bit States" (NeurIPS 2023), who also exclude zero from v's
 *   quantizer.
 *
 * A weight of fewer than NTO_OPT_Q_MIN_NUMEL elements (biases, batch
 * normalization's scale and shift) keeps fp32 state in every format, as
 * bitsandbytes' 8-bit optimizers do (min_8bit_size = 4096): such weights
 * hold a negligible share of the state. Every format is deterministic:
 * the same bits whatever the window, thread count or I/O backend; the
 * approximate ones differ from fp32 by their rounding.
 */
#define NTO_OPT_Q_BLOCK 2048
#define NTO_OPT_Q_MIN_NUMEL 4096

/* The format of the state of a weight of weight_numel elements when the
 * optimizer's is f. */
nto_opt_state_format nto_opt_weight_format(nto_opt_state_format f,
                                           size_t weight_numel);

/* Bytes of one state tensor of n elements in format f (not rounded to
 * pages): 4n, 2n, or 4 ceil(n / NTO_OPT_Q_BLOCK) + n. */
size_t nto_opt_state_bytes(nto_opt_state_format f, size_t n);

/* Name of a format: "fp32", "bf16", "int8". */
const char *nto_opt_state_name(nto_opt_state_format f);

/*
 * Update n weights w[0..n) in place from gradients g[0..n).
 * state: nto_opt_state_count() buffers, each of nto_opt_state_bytes(f, n)
 * bytes in format f (all zero bytes at t = 1: zero values in every
 * format), 4-byte aligned. lr: this iteration's learning rate; t: 1-based
 * update count; key: names these elements among the model's (their
 * layer, weight and chunk: exec.c), for bf16's stochastic rounding (state
 * q's bits from nto_opt_state_seed(key, t, q)). Runs on the compute
 * threads (parallel.h); the executor calls it.
 */
void nto_opt_update(const nto_opt_conf *o, nto_opt_state_format f, float *w,
                    const float *g, void *const *state, size_t n, double lr,
                    long t, uint64_t key);

/* The seed of state q's stochastic rounding in update t of the elements
 * key names. */
uint64_t nto_opt_state_seed(uint64_t key, long t, int q);

/*
 * The state codecs (tests): encode x[0..n) into dst (nto_opt_state_bytes(f,
 * n) bytes), decode src into x. is_unsigned picks int8's unsigned codebook
 * (values >= 0: Adam's v); seed: bf16's random bits (element e rounded
 * with those of seed + e). Any thread.
 */
void nto_opt_state_encode(nto_opt_state_format f, int is_unsigned,
                          const float *x, size_t n, void *dst, uint64_t seed);
void nto_opt_state_decode(nto_opt_state_format f, int is_unsigned,
                          const void *src, size_t n, float *x);

/* The int8 codebook (256 ascending values in [-1, 1], or [0, 1] when
 * is_unsigned), for tests. */
const float *nto_opt_int8_codebook(int is_unsigned);

#endif /* NTO_OPTIMIZER_H */

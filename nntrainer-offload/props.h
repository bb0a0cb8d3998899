/*
 * props.h - parsing of INI property values (numbers, lists, enums) and of
 * weight initializers. Each parser returns 0 or NTO_ECONFIG and writes a
 * message that says what was expected, e.g.
 *   "expected a positive integer, got 'abc'".
 * Callers (the config loader) prefix file, section and key.
 * Pure functions; any thread.
 */
#ifndef NTO_PROPS_H
#define NTO_PROPS_H

#include "error.h"
#include "rng.h"

#include <stddef.h>

/* Case-insensitive string equality. */
int nto_streq(const char *a, const char *b);

/* Integer in [min, max]; decimal only, surrounding blanks allowed. */
int nto_parse_int(const char *v, long min, long max, long *out, nto_err *err);
/* Finite float in [min, max]. Accepts 1e-4, 0.9, etc. */
int nto_parse_float(const char *v, double min, double max, double *out,
                    nto_err *err);
/* "true/false/yes/no/1/0/on/off", case-insensitive. */
int nto_parse_bool(const char *v, int *out, nto_err *err);
/*
 * Comma-separated list of integers in [min, max]: "3,3" or "3".
 * Writes up to max_count values into out and their number into *count.
 * A single value is returned once (callers replicate it if they want).
 */
int nto_parse_int_list(const char *v, long min, long max, long *out,
                       int max_count, int *count, nto_err *err);
/*
 * Index of v in the NULL-terminated names array (case-insensitive), or
 * NTO_ECONFIG with "expected one of a|b|c, got 'x'".
 */
int nto_parse_enum(const char *v, const char *const *names, int *out,
                   nto_err *err);
/*
 * Shape "c:h:w" (also "n:c:h:w", whose n is ignored, or "h:w" -> c=1,
 * or a single "w"). All dimensions >= 1. Sets s->n = 1.
 */
struct nto_shape;
int nto_parse_shape(const char *v, struct nto_shape *s, nto_err *err);

/* Weight initializers (nntrainer names). */
typedef enum {
  NTO_INIT_ZEROS,
  NTO_INIT_ONES,
  NTO_INIT_XAVIER_UNIFORM,
  NTO_INIT_XAVIER_NORMAL,
  NTO_INIT_HE_UNIFORM,
  NTO_INIT_HE_NORMAL,
  NTO_INIT_LECUN_UNIFORM,
  NTO_INIT_LECUN_NORMAL,
  NTO_INIT_COUNT
} nto_init_kind;

/* Parses "zeros", "ones", "xavier_uniform", ..., "lecun_normal". */
int nto_parse_initializer(const char *v, nto_init_kind *out, nto_err *err);

/*
 * The keys every layer with a weight and a bias shares: weight_initializer,
 * bias_initializer, disable_bias. Returns 0 (stored), NTO_ENOKEY (another
 * key) or NTO_ECONFIG (bad value, with a message).
 */
int nto_parse_weight_bias_key(const char *key, const char *v,
                              nto_init_kind *winit, nto_init_kind *binit,
                              int *disable_bias, nto_err *err);

/*
 * The regularizer of a layer's weight (not of its bias), nntrainer's
 * weight_regularizer. l2norm with constant C adds, as nntrainer does,
 *   to the loss:  0.5 * C * ||W||, the norm itself, not its square
 *                 (nntrainer's Weight::getRegularizationLoss);
 *   to dL/dW:     C * W, before the optimizer step
 *                 (Weight::calcRegularizationGradient);
 * so the gradient is that of 0.5 * C * ||W||^2 (PyTorch's weight_decay for
 * SGD and Adam), while the loss reports 0.5 * C * ||W||.
 */
typedef struct nto_regularizer {
  int l2norm;      /* weight_regularizer: 1 l2norm, 0 none (default) */
  double constant; /* weight_regularizer_constant, >= 0 (default 1) */
  /* the key that set each (a static string: today's or nntrainer's 2020
   * spelling), NULL while unset; both spellings of one setting in one
   * section are refused */
  const char *kind_key, *constant_key;
} nto_regularizer;

/* No regularizer, constant 1 (nntrainer's defaults). */
void nto_regularizer_defaults(nto_regularizer *r);

/*
 * The regularizer keys of layers with a weight (conv2d, fully_connected):
 *   weight_regularizer = l2norm | none
 *   weight_regularizer_constant = C (a number >= 0, finite in float32)
 * and nntrainer's 2020 spellings of the same settings,
 *   weight_decay = l2norm | none,  weight_decay_lambda = C
 * (the config loader warns about those: config.h). key is lowercase.
 * Returns 0 (stored), NTO_ENOKEY (another key) or NTO_ECONFIG (bad value,
 * or the other spelling of a setting already given, with a message;
 * *r unchanged). Callers prefix file, section and key.
 */
int nto_parse_regularizer_key(const char *key, const char *v,
                              nto_regularizer *r, nto_err *err);

/* nntrainer's numeric weight_decay / bias_decay keys (a decay added to
 * the gradient in the update, no loss term) on a layer without
 * weight_regularizer (batch_normalization): 0, as nntrainer's exported
 * INIs write them, is accepted and changes nothing; another number is
 * refused naming the feature (NTO_ECONFIG). NTO_ENOKEY for other keys. */
int nto_parse_decay_key(const char *key, const char *v, nto_err *err);

/* The constant C of an l2norm regularizer as the layer applies it
 * (nto_weight_req.l2 in layer.h), 0 for none. */
float nto_regularizer_l2(const nto_regularizer *r);

/*
 * Fill x[0..n) by initializer k with the given fans (fan_in, fan_out >= 1).
 * Formulas (Glorot & Bengio 2010; He et al. 2015; LeCun 1998), as in Keras:
 *   xavier_uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out))
 *   xavier_normal:  N(0, sqrt(2 / (fan_in + fan_out)))
 *   he_uniform:     U(-a, a), a = sqrt(6 / fan_in)
 *   he_normal:      N(0, sqrt(2 / fan_in))
 *   lecun_uniform:  U(-a, a), a = sqrt(3 / fan_in)
 *   lecun_normal:   N(0, sqrt(1 / fan_in))
 * Deterministic for a given rng state.
 */
void nto_init_fill(float *x, size_t n, nto_init_kind k, int fan_in, int fan_out,
                   nto_rng *rng);

#endif /* NTO_PROPS_H */

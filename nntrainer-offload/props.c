/* props.c - property value parsers and weight initializers. See props.h. */
#include "props.h"
#include "tensor.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int nto_streq(const char *a, const char *b) { return strcasecmp(a, b) == 0; }

static const char *skip_blank(const char *p) {
  while (*p && isspace((unsigned char)*p))
    p++;
  return p;
}

/* Parses one long at *p, advancing *p; 0 or -1. */
static int scan_long(const char **p, long *out) {
  const char *s = skip_blank(*p);
  char *end = NULL;
  if (*s == '\0')
    return -1;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || errno == ERANGE)
    return -1;
  *out = v;
  *p = skip_blank(end);
  return 0;
}

int nto_parse_int(const char *v, long min, long max, long *out, nto_err *err) {
  const char *p = v;
  long x;
  if (scan_long(&p, &x) != 0 || *p != '\0')
    return nto_err_set(err, NTO_ECONFIG, "expected an integer, got '%s'", v);
  if (x < min || x > max)
    return nto_err_set(err, NTO_ECONFIG,
                       "expected an integer in [%ld, %ld], got '%s'", min, max,
                       v);
  *out = x;
  return 0;
}

int nto_parse_float(const char *v, double min, double max, double *out,
                    nto_err *err) {
  const char *s = skip_blank(v);
  char *end = NULL;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || *skip_blank(end) != '\0' || errno == ERANGE || !isfinite(x))
    return nto_err_set(err, NTO_ECONFIG, "expected a number, got '%s'", v);
  if (x < min || x > max)
    return nto_err_set(err, NTO_ECONFIG,
                       "expected a number in [%g, %g], got '%s'", min, max, v);
  *out = x;
  return 0;
}

int nto_parse_bool(const char *v, int *out, nto_err *err) {
  static const char *const t[] = {"true", "yes", "1", "on", NULL};
  static const char *const f[] = {"false", "no", "0", "off", NULL};
  const char *s = skip_blank(v);
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1]))
    n--;
  for (int i = 0; t[i]; i++) {
    if (strlen(t[i]) == n && strncasecmp(s, t[i], n) == 0) {
      *out = 1;
      return 0;
    }
    if (strlen(f[i]) == n && strncasecmp(s, f[i], n) == 0) {
      *out = 0;
      return 0;
    }
  }
  return nto_err_set(err, NTO_ECONFIG, "expected true or false, got '%s'", v);
}

int nto_parse_int_list(const char *v, long min, long max, long *out,
                       int max_count, int *count, nto_err *err) {
  const char *p = v;
  int n = 0;
  for (;;) {
    long x;
    if (scan_long(&p, &x) != 0)
      return nto_err_set(err, NTO_ECONFIG,
                         "expected a comma-separated list of integers, got "
                         "'%s'",
                         v);
    if (x < min || x > max)
      return nto_err_set(err, NTO_ECONFIG,
                         "expected integers in [%ld, %ld], got '%s'", min, max,
                         v);
    if (n == max_count)
      return nto_err_set(err, NTO_ECONFIG,
                         "expected at most %d values, got '%s'", max_count, v);
    out[n++] = x;
    if (*p == '\0')
      break;
    if (*p != ',')
      return nto_err_set(err, NTO_ECONFIG,
                         "expected a comma-separated list of integers, got "
                         "'%s'",
                         v);
    p++;
  }
  *count = n;
  return 0;
}

int nto_parse_enum(const char *v, const char *const *names, int *out,
                   nto_err *err) {
  const char *s = skip_blank(v);
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1]))
    n--;
  for (int i = 0; names[i]; i++) {
    if (strlen(names[i]) == n && strncasecmp(s, names[i], n) == 0) {
      *out = i;
      return 0;
    }
  }
  char list[256] = "";
  for (int i = 0; names[i]; i++) {
    if (i)
      strncat(list, "|", sizeof list - strlen(list) - 1);
    strncat(list, names[i], sizeof list - strlen(list) - 1);
  }
  return nto_err_set(err, NTO_ECONFIG, "expected one of %s, got '%s'", list, v);
}

int nto_parse_shape(const char *v, struct nto_shape *s, nto_err *err) {
  long d[4];
  int n = 0;
  const char *p = v;
  for (;;) {
    long x;
    if (n == 4 || scan_long(&p, &x) != 0 || x < 1 || x > (1L << 24))
      return nto_err_set(err, NTO_ECONFIG,
                         "expected a shape c:h:w of positive integers, got "
                         "'%s'",
                         v);
    d[n++] = x;
    if (*p == '\0')
      break;
    if (*p != ':')
      return nto_err_set(err, NTO_ECONFIG,
                         "expected a shape c:h:w of positive integers, got "
                         "'%s'",
                         v);
    p++;
  }
  long values = 1; /* stops past INT_MAX: at most 2^31 * 2^24, no overflow */
  for (int i = n > 3 ? n - 3 : 0; i < n && values <= INT_MAX; i++)
    values *= d[i];
  if (values > INT_MAX)
    return nto_err_set(err, NTO_ECONFIG,
                       "expected a shape c:h:w of at most %d values, got "
                       "'%s'",
                       INT_MAX, v);
  s->n = 1;
  s->c = n >= 3 ? (int)d[n - 3] : 1;
  s->h = n >= 2 ? (int)d[n - 2] : 1;
  s->w = (int)d[n - 1];
  return 0;
}

static const char *const init_names[NTO_INIT_COUNT + 1] = {
    "zeros",         "ones",         "xavier_uniform",
    "xavier_normal", "he_uniform",   "he_normal",
    "lecun_uniform", "lecun_normal", NULL};

int nto_parse_initializer(const char *v, nto_init_kind *out, nto_err *err) {
  int k;
  int rc = nto_parse_enum(v, init_names, &k, err);
  if (rc == 0)
    *out = (nto_init_kind)k;
  return rc;
}

static void fill_uniform(float *x, size_t n, double a, nto_rng *rng) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)((2.0 * nto_rng_uniform(rng) - 1.0) * a);
}

static void fill_normal(float *x, size_t n, double sd, nto_rng *rng) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(nto_rng_normal(rng) * sd);
}

void nto_init_fill(float *x, size_t n, nto_init_kind k, int fan_in, int fan_out,
                   nto_rng *rng) {
  double fi = fan_in > 0 ? fan_in : 1, fo = fan_out > 0 ? fan_out : 1;
  switch (k) {
  case NTO_INIT_ZEROS:
    memset(x, 0, n * sizeof *x);
    break;
  case NTO_INIT_ONES:
    for (size_t i = 0; i < n; i++)
      x[i] = 1.0f;
    break;
  case NTO_INIT_XAVIER_UNIFORM:
    fill_uniform(x, n, sqrt(6.0 / (fi + fo)), rng);
    break;
  case NTO_INIT_XAVIER_NORMAL:
    fill_normal(x, n, sqrt(2.0 / (fi + fo)), rng);
    break;
  case NTO_INIT_HE_UNIFORM:
    fill_uniform(x, n, sqrt(6.0 / fi), rng);
    break;
  case NTO_INIT_HE_NORMAL:
    fill_normal(x, n, sqrt(2.0 / fi), rng);
    break;
  case NTO_INIT_LECUN_UNIFORM:
    fill_uniform(x, n, sqrt(3.0 / fi), rng);
    break;
  case NTO_INIT_LECUN_NORMAL:
    fill_normal(x, n, sqrt(1.0 / fi), rng);
    break;
  default:
    break;
  }
}

int nto_parse_weight_bias_key(const char *key, const char *v,
                              nto_init_kind *winit, nto_init_kind *binit,
                              int *disable_bias, nto_err *err) {
  if (strcmp(key, "weight_initializer") == 0)
    return nto_parse_initializer(v, winit, err);
  if (strcmp(key, "bias_initializer") == 0)
    return nto_parse_initializer(v, binit, err);
  if (strcmp(key, "disable_bias") == 0)
    return nto_parse_bool(v, disable_bias, err);
  return NTO_ENOKEY;
}

void nto_regularizer_defaults(nto_regularizer *r) {
  r->l2norm = 0;
  r->constant = 1.0;
  r->kind_key = r->constant_key = NULL;
}

/* The regularizer keys: today's spelling, then nntrainer's 2020 one. */
static const char *const reg_kind_keys[] = {"weight_regularizer",
                                            "weight_decay"};
static const char *const reg_constant_keys[] = {"weight_regularizer_constant",
                                                "weight_decay_lambda"};

/* nntrainer's current weight_decay / bias_decay = D (a number): the
 * update adds D times the weight (the bias) to its gradient, with no loss
 * term. D = 0, as nntrainer's own exported INIs write it, changes nothing
 * and is accepted; other values are refused, naming the feature. Returns
 * 0, NTO_ECONFIG, or NTO_ENOKEY when v is not a number. */
static int numeric_decay(const char *key, const char *v, nto_err *err);

int nto_parse_decay_key(const char *key, const char *v, nto_err *err) {
  if (strcmp(key, "weight_decay") != 0 && strcmp(key, "bias_decay") != 0)
    return NTO_ENOKEY;
  int rc = numeric_decay(key, v, err);
  return rc != NTO_ENOKEY ? rc
                          : nto_err_set(err, NTO_ECONFIG,
                                        "expected a number (0), got '%s'", v);
}

static int numeric_decay(const char *key, const char *v, nto_err *err) {
  double d;
  if (nto_parse_float(v, -FLT_MAX, FLT_MAX, &d, NULL) != 0)
    return NTO_ENOKEY;
  if (d == 0.0)
    return 0;
  return nto_err_set(err, NTO_ECONFIG,
                     "nntrainer's %s = %s (a decay added to the gradient "
                     "without a loss term) is not supported: only 0; "
                     "weight_regularizer = l2norm with "
                     "weight_regularizer_constant = %s adds the same "
                     "gradient to the weight, with nntrainer's loss term",
                     key, v, v);
}

int nto_parse_regularizer_key(const char *key, const char *v,
                              nto_regularizer *r, nto_err *err) {
  static const char *const kinds[] = {"l2norm", "none", NULL};
  if (strcmp(key, "bias_decay") == 0)
    return nto_parse_decay_key(key, v, err);
  for (int s = 0; s < 2; s++) {
    const char *kk = reg_kind_keys[s], *ck = reg_constant_keys[s];
    int is_kind = strcmp(key, kk) == 0;
    if (!is_kind && strcmp(key, ck) != 0)
      continue;
    const char *by = is_kind ? r->kind_key : r->constant_key;
    if (by && strcmp(by, key) != 0)
      return nto_err_set(err, NTO_ECONFIG, "same setting as '%s', given twice",
                         by);
    if (is_kind) {
      int k;
      if (nto_parse_enum(v, kinds, &k, NULL) != 0) {
        int rc = s == 1 ? numeric_decay(key, v, err) : NTO_ENOKEY;
        if (rc != NTO_ENOKEY) /* today's nntrainer: a number here */
          return rc;
        if (s == 1)
          return nto_err_set(err, NTO_ECONFIG,
                             "expected l2norm or none (nntrainer's 2020 "
                             "spelling of weight_regularizer) or a number "
                             "(today's decay, 0 only), got '%s'",
                             v);
        return nto_parse_enum(v, kinds, &k, err);
      }
      r->l2norm = k == 0;
      r->kind_key = kk;
      return 0;
    }
    double c;
    if (nto_parse_float(v, 0.0, FLT_MAX, &c, NULL) != 0)
      return nto_err_set(err, NTO_ECONFIG,
                         "expected a number >= 0 (finite in float32), got "
                         "'%s'",
                         v);
    r->constant = c;
    r->constant_key = ck;
    return 0;
  }
  return NTO_ENOKEY;
}

float nto_regularizer_l2(const nto_regularizer *r) {
  return r->l2norm ? (float)r->constant : 0.0f;
}

/*
 * init_weights.c - train --init-weights (init_weights.h).
 */
#include "init_weights.h"

#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "d0:d1:..." of n dims into buf. */
static void dims_str(const int64_t *d, int n, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int k = 0; k < n && k < 4 && at < len; k++)
    at += (size_t)snprintf(buf + at, len - at, "%s%lld", k ? ":" : "",
                           (long long)d[k]);
  if (n > 4 && at < len)
    snprintf(buf + at, len - at, ":...");
}

/* Adds "name (file A, model B)" or "name (not in the file)" to
 * res->kept while it has room. */
static void add_kept(init_result *res, const nto_named_tensor *t,
                     const nto_weight_match *mt) {
  char f[64], w[64], what[160] = "not in the file";
  int64_t md[4];
  for (int k = 0; k < t->ndim; k++)
    md[k] = t->dims[k];
  dims_str(mt->dims, mt->ndim, f, sizeof f);
  dims_str(md, t->ndim, w, sizeof w);
  if (mt->status == NTO_MATCH_SHAPE)
    snprintf(what, sizeof what, "file %s, model %s", f, w);
  size_t at = strlen(res->kept);
  if (at + 4 >= sizeof res->kept)
    return;
  int n = snprintf(res->kept + at, sizeof res->kept - at, "%s%s (%s)",
                   at ? ", " : "", t->name, what);
  if (n < 0 || at + (size_t)n >= sizeof res->kept)
    snprintf(res->kept + at, sizeof res->kept - at, "%s...", at ? ", " : "");
}

int init_weights_load(nto_model *m, const char *path, init_result *res,
                      nto_err *err) {
  nto_named_tensor *ts = NULL;
  int n = 0;
  memset(res, 0, sizeof *res);
  nto_weights_format fmt = NTO_WEIGHTS_BIN;
  int rc = nto_weights_file_format(path, &fmt, err);
  if (rc == 0) /* a .bin holds the layers in nntrainer's order */
    rc = fmt == NTO_WEIGHTS_BIN ? nto_model_weights_bin(m, &ts, &n, err)
                                : nto_model_weights(m, &ts, &n, err);
  nto_weight_match *mt = rc == 0 ? calloc((size_t)(n ? n : 1), sizeof *mt)
                                 : NULL;
  if (rc == 0 && !mt)
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc == 0)
    rc = nto_weights_load_init(path, ts, n, mt, &fmt, &res->unused, err);
  for (int c = 0; rc == 0 && c < n; c++) {
    if (mt[c].status != NTO_MATCH_LOADED) {
      add_kept(res, &ts[c], &mt[c]);
      continue;
    }
    res->tensors++;
    if (ts[c].param)
      res->params += nto_named_numel(&ts[c]);
  }
  res->of = n;
  res->format = fmt == NTO_WEIGHTS_SAFETENSORS ? "safetensors"
                                               : "nntrainer .bin";
  free(mt);
  nto_model_weights_free(ts, n);
  return rc;
}

void init_weights_print(const init_result *res, const char *path) {
  printf("init: %zu parameters (%d of %d tensors) from %s (%s)", res->params,
         res->tensors, res->of, path, res->format);
  if (res->unused)
    printf("; %d tensors of the file unused", res->unused);
  printf("\n");
  if (res->kept[0])
    printf("init: kept their initialization: %s\n", res->kept);
}

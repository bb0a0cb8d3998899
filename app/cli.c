/* cli.c - shared CLI helpers. See cli.h. */
#include "cli.h"
#include "blas.h"
#include "parallel.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_int(const char *opt, const char *v, long min, long max, long *out) {
  nto_err err = {0};
  if (v == NULL) {
    cli_error("option %s needs a value", opt);
    return -1;
  }
  if (nto_parse_int(v, min, max, out, &err) != 0) {
    cli_error("option %s: %s", opt, err.msg);
    return -1;
  }
  return 0;
}

int cli_chunk_grads(const char *v, nto_chunk_grads *out) {
  if (!v || !strcmp(v, "auto"))
    *out = NTO_CHUNK_GRADS_AUTO;
  else if (!strcmp(v, "on"))
    *out = NTO_CHUNK_GRADS_ON;
  else if (!strcmp(v, "off"))
    *out = NTO_CHUNK_GRADS_OFF;
  else {
    cli_error("--chunk-grads: expected auto, on or off, got '%s'", v);
    return -1;
  }
  return 0;
}

/* "on" (or NULL: the default) -> 1, "off" -> 0; else -1 after an error
 * naming the option. */
static int on_off(const char *opt, const char *v) {
  if (!v || !strcmp(v, "on"))
    return 1;
  if (!strcmp(v, "off"))
    return 0;
  cli_error("%s: expected on or off, got '%s'", opt, v);
  return -1;
}

int cli_keep_resident(const char *v, int *no_keep) {
  int on = on_off("--keep-resident", v);
  if (on >= 0)
    *no_keep = !on;
  return on < 0 ? -1 : 0;
}

int cli_recompute_word(const char *p, size_t n) {
  static const char *const names[] = {[NTO_RECOMPUTE_AUTO] = "auto",
                                      [NTO_RECOMPUTE_ON] = "on",
                                      [NTO_RECOMPUTE_ACTIVATIONS] =
                                          "activations",
                                      [NTO_RECOMPUTE_OFF] = "off"};
  for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
    if (strlen(names[k]) == n && !strncmp(p, names[k], n))
      return k;
  return -1;
}

int cli_recompute(const char *v, nto_recompute *out) {
  int k = v ? cli_recompute_word(v, strlen(v)) : NTO_RECOMPUTE_AUTO;
  if (k < 0) {
    cli_error("--recompute: expected auto, on, activations or off, got '%s'",
              v);
    return -1;
  }
  *out = (nto_recompute)k;
  return 0;
}

void cli_compute_threads(long threads) {
  nto_err err = {0};
  int t = threads > NTO_PARALLEL_MAX ? NTO_PARALLEL_MAX : (int)threads;
  if (nto_parallel_set_threads(t, &err) != 0)
    fprintf(stderr, "warning: %s\n", err.msg);
}

void cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("nntrainer-offload: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int cli_status(int code) {
  return code == NTO_ECONFIG || code == NTO_ESHAPE || code == NTO_ENOKEY
             ? CLI_USAGE
             : CLI_RUNTIME;
}

const char *cli_bytes(size_t bytes, char *buf, size_t len) {
  double b = (double)bytes;
  if (b >= 1024.0 * 1024 * 1024)
    snprintf(buf, len, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024)
    snprintf(buf, len, "%.1f MiB", b / (1024.0 * 1024));
  else
    snprintf(buf, len, "%.1f KiB", b / 1024.0);
  return buf;
}

const char *cli_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc)
    return NULL;
  return argv[++*i];
}

void cli_print_blas(void) {
  const char *pin = getenv("OPENBLAS_CORETYPE");
  printf("blas: OpenBLAS, %s kernels", nto_blas_core());
  if (pin)
    printf(" (OPENBLAS_CORETYPE=%s)", pin);
  printf("\n");
  if (nto_blas_avx512_unused_here())
    printf("note: this CPU runs AVX-512, which OpenBLAS's SkylakeX and "
           "Cooperlake kernels use for about twice the GEMM speed: %s\n",
           pin ? "unset OPENBLAS_CORETYPE or set it to SkylakeX"
               : "set OPENBLAS_CORETYPE=SkylakeX");
}

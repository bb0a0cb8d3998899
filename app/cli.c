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

int cli_recompute_word(const char *p, size_t n) {
  if (n == 4 && !strncmp(p, "auto", 4))
    return NTO_RECOMPUTE_AUTO;
  if (n == 3 && !strncmp(p, "off", 3))
    return NTO_RECOMPUTE_OFF;
  return -1;
}

int cli_recompute(const char *v, nto_recompute *out) {
  int k = v ? cli_recompute_word(v, strlen(v)) : NTO_RECOMPUTE_AUTO;
  if (k < 0) {
    cli_error("--recompute: expected auto or off, got '%s'", v);
    return -1;
  }
  *out = (nto_recompute)k;
  return 0;
}

int cli_io(const char *v, nto_io_kind *out) {
  if (!strcmp(v, "uring") || !strcmp(v, "io_uring"))
    *out = NTO_IO_URING;
  else if (!strcmp(v, "psync"))
    *out = NTO_IO_PSYNC;
  else {
    cli_error("--io: expected uring or psync, got '%s'", v);
    return -1;
  }
  return 0;
}

void cli_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
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

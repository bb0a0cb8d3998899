/*
 * cli.c - shared CLI helpers. See cli.h.
 *
 * DESIGN (address-space limit). Under RLIMIT_AS (`ulimit -v`) OpenBLAS was
 * the danger: every thread that runs a GEMM takes a buffer of its own
 * (128 MiB of address space on x86-64), and when the limit refuses it,
 * OpenBLAS retries forever at 100% CPU (driver/others/memory.c,
 * blas_memory_alloc), deaf to SIGTERM; its server threads take one each at
 * start-up and exit() waits for them. So, only where RLIMIT_AS is finite:
 * the process runs with OPENBLAS_NUM_THREADS=1 (no server threads: we run
 * OpenBLAS at one thread anyway, parallel.h), malloc keeps one arena
 * (each thread's own would reserve 64 MiB), our threads have stacks of a
 * set size (parallel.c, offload.c), and before the first GEMM
 * cli_address_space checks that the buffers still to come fit beside what
 * the run has mapped, with fewer compute threads if need be, else refuses
 * naming the limit and the minimum. Every other failure to map memory is
 * one of our own allocations: a clear error, never a hang.
 */
#include "cli.h"
#include "blas.h"
#include "optimizer.h"
#include "parallel.h"
#include "run.h"

#include <cblas.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The soft RLIMIT_AS in bytes, or 0 when there is none. */
static uint64_t as_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return 0;
  return (uint64_t)rl.rlim_cur;
}

/*
 * Runs before any shared library's constructor (.preinit_array): under an
 * address-space limit, when OPENBLAS_NUM_THREADS is not 1, the process
 * executes itself again with OPENBLAS_NUM_THREADS=1, so that OpenBLAS's
 * constructor starts no server thread (each would take its GEMM buffer at
 * once, and spin forever where the limit refuses it; see DESIGN). A
 * setenv here would not do: libc's start-up, after this, resets environ to
 * the original array. Without a limit, or if exec fails, nothing changes.
 */
static void blas_threads_preinit(int argc, char **argv, char **envp) {
  static const char var[] = "OPENBLAS_NUM_THREADS=";
  (void)argc;
  if (as_limit() == 0 || envp == NULL)
    return;
  size_t n = 0;
  for (; envp[n]; n++)
    if (strncmp(envp[n], var, sizeof var - 1) == 0 &&
        strcmp(envp[n] + sizeof var - 1, "1") == 0)
      return; /* already so: the run after the exec */
  char **env = malloc((n + 2) * sizeof *env);
  if (env == NULL)
    return;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(envp[i], var, sizeof var - 1) != 0)
      env[k++] = envp[i];
  env[k++] = "OPENBLAS_NUM_THREADS=1";
  env[k] = NULL;
  execve("/proc/self/exe", argv, env);
  free(env); /* exec failed (no /proc): run on as we are */
}

__attribute__((section(".preinit_array"),
               used)) static void (*const cli_preinit)(int, char **, char **) =
    blas_threads_preinit;

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

/* "segments:N" with N a number of segment convolutions from 1 to
 * CLI_SEGMENTS_MAX: N, else 0. */
#define CLI_SEGMENTS_MAX 1000000
static long segments_count(const char *p, size_t n) {
  if (n < 10 || strncmp(p, "segments:", 9) != 0 || n > 9 + 7)
    return 0;
  long v = 0;
  for (size_t i = 9; i < n; i++) {
    if (p[i] < '0' || p[i] > '9')
      return 0;
    v = v * 10 + (p[i] - '0');
  }
  return v >= 1 && v <= CLI_SEGMENTS_MAX ? v : 0;
}

int cli_recompute_word(const char *p, size_t n) {
  if (segments_count(p, n) > 0)
    return NTO_RECOMPUTE_SEGMENTS;
  if (n == 4 && !strncmp(p, "auto", 4))
    return NTO_RECOMPUTE_AUTO;
  if (n == 3 && !strncmp(p, "off", 3))
    return NTO_RECOMPUTE_OFF;
  if (n == 8 && !strncmp(p, "segments", 8))
    return NTO_RECOMPUTE_SEGMENTS;
  if (n == 5 && !strncmp(p, "cheap", 5))
    return NTO_RECOMPUTE_CHEAP;
  return -1;
}

int cli_recompute(const char *v, nto_recompute *out, int *segments_max) {
  int k = v ? cli_recompute_word(v, strlen(v)) : NTO_RECOMPUTE_AUTO;
  if (k < 0) {
    cli_error("--recompute: expected auto, cheap, segments, segments:N (N "
              "from 1 to %d) or off, got '%s'",
              CLI_SEGMENTS_MAX, v);
    return -1;
  }
  *out = (nto_recompute)k;
  if (segments_max)
    *segments_max = v ? (int)segments_count(v, strlen(v)) : 0;
  return 0;
}

int cli_update_placement(const char *v, nto_update_placement *out) {
  if (!v || !strcmp(v, "after")) {
    *out = NTO_UPDATES_AFTER;
    return 0;
  }
  if (!strcmp(v, "spread")) {
    *out = NTO_UPDATES_SPREAD;
    return 0;
  }
  cli_error("--updates: expected after or spread, got '%s'", v);
  return -1;
}

int cli_optimizer_state(const char *v, nto_opt_conf *o) {
  static const nto_opt_state_format fs[] = {
      NTO_OPT_STATE_FP32, NTO_OPT_STATE_BF16, NTO_OPT_STATE_INT8};
  if (!v)
    return 0;
  for (size_t i = 0; i < sizeof fs / sizeof *fs; i++)
    if (!strcmp(v, nto_opt_state_name(fs[i]))) {
      o->state_format = fs[i];
      return 0;
    }
  cli_error("--optimizer-state: expected fp32, bf16 or int8, got '%s'", v);
  return -1;
}

const char *cli_state_note(const nto_opt_conf *o) {
  switch (o->state_format) {
  case NTO_OPT_STATE_BF16:
    return " (bf16)";
  case NTO_OPT_STATE_INT8:
    return " (int8)";
  case NTO_OPT_STATE_FP32:
    break;
  }
  return "";
}

/* Whether size s names a unit (K, M, G, T or B): a bare number is bytes. */
static int has_unit(const char *s) {
  for (; *s; s++)
    if (strchr("KkMmGgTtBb", *s))
      return 1;
  return 0;
}

int cli_budget(const char *what, const char *v, size_t *out) {
  nto_err e = {0};
  if (nto_parse_size(v, out, &e) != 0 || *out == 0) {
    cli_error("%s: expected a size > 0 with an optional K, M or G suffix, "
              "got '%s'",
              what, v);
    return -1;
  }
  if (*out < ((size_t)1 << 20) && !has_unit(v)) {
    /* a bare number is bytes: "10" meant as megabytes would be refused
     * later as below the model's minimum, which hides the slip */
    cli_error("%s %s: a size without a suffix is in bytes, and %zu bytes "
              "hold no model: did you mean %sM? (suffixes K, M, G; bare "
              "numbers from 1048576 = 1 MiB up)",
              what, v, *out, v);
    return -1;
  }
  return 0;
}

int cli_channel_groups(const char *v, size_t *out) {
  nto_err e = {0};
  *out = 0;
  if (!v || !strcmp(v, "off"))
    return 0;
  if (nto_parse_size(v, out, &e) != 0 || *out < 1024) {
    cli_error("--channel-groups: expected off or a size of at least 1K "
              "(suffixes K, M, G), got '%s'",
              v);
    return -1;
  }
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
  /* Under an address-space limit every thread allocates from the main
   * arena: a thread's own arena reserves 64 MiB (glibc's HEAP_MAX_SIZE),
   * measured 128 MiB for the two I/O threads of a window-1 run. Training
   * steps allocate nothing, so the shared arena costs no time there. */
  if (as_limit() != 0)
    mallopt(M_ARENA_MAX, 1);
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

int cli_opt_match(const char *a, const char *name) {
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0)
    return 0;
  return a[n] == '\0' ? 1 : a[n] == '=' ? 2 : 0;
}

const char *cli_opt_value(int argc, char **argv, int *i, const char *name,
                          int m) {
  return m == 2 ? argv[*i] + strlen(name) + 1 : cli_value(argc, argv, i);
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

/* The process's mapped address space (VmSize) in bytes, or 0 if unknown. */
static uint64_t vm_size(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return 0;
  char line[128];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
      break;
  fclose(f);
  return (uint64_t)kb * 1024;
}

/* The largest GEMM buffer of OpenBLAS's targets (BUFFER_SIZE 32 << 22,
 * x86-64 and the large ARM cores) with its guard pages: the bound used
 * until the buffer could be measured. */
#define BLAS_BUFFER_BOUND ((uint64_t)129 << 20)

/*
 * Address space a run maps after this check besides GEMM buffers and its
 * tensor region: batch statistics, the report, a checkpoint's or a save's
 * buffers (one tensor at a time), malloc's slack. Measured (VmPeak at the
 * end less VmSize at the check, one compute thread, ResNet-18 and
 * MobileNetV2 all resident, with --checkpoint, --save, --trace): under 2
 * MiB all resident; offloading adds the region's remapping (below).
 */
#define AS_MARGIN ((uint64_t)16 << 20)

int cli_address_space(run *r, int rc, nto_err *err) {
  uint64_t lim = as_limit();
  char l[32], a[32], b[32], c[32];
  if (lim == 0)
    return rc;
  nto_format_bytes(lim, l, sizeof l);
  if (rc == NTO_ENOMEM) /* an allocation the limit refused: say so */
    return nto_err_prefix(err, rc,
                          "the address-space limit (ulimit -v) is %s: ", l);
  uint64_t vm = vm_size();
  if (rc != 0 || r->m == NULL || vm == 0)
    return rc;
  /* The executor's GEMM buffer, taken now while it can be measured (a
   * GEMM where it does not fit would never return). */
  static uint64_t measured; /* 0: not yet */
  int warmed = 0;
  uint64_t buf = measured ? measured : BLAS_BUFFER_BOUND;
  if (!measured && lim > vm && lim - vm >= BLAS_BUFFER_BOUND) {
    float x[16 * 16] = {0}, y[16 * 16];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 16, 16, 16, 1.0f, x,
                16, x, 16, 0.0f, y, 16);
    uint64_t after = vm_size();
    if (after > vm) {
      buf = measured = after - vm;
      vm = after;
      warmed = 1;
    }
  } else if (measured) {
    warmed = 1;
  }
  /* Offloading, the tuner remaps the tensor region between iterations
   * (a new frontier or window), the new mapping made before the old one
   * goes: room for one more region of the largest size it may take, the
   * budget's or, for --window auto without one, everything resident
   * (tuner.h). Measured: ResNet-18 b4 window 4, region 26.6 MiB, VmPeak
   * 28.7 MiB above VmSize at the check. */
  uint64_t window = 0, grow = 0;
  nto_offload_stats st;
  if (nto_model_offload_stats(r->m, &st) == 0) {
    uint64_t cap = st.region;
    if (r->budget && !strcmp(r->window_mode, "auto"))
      cap = r->budget;
    else if (r->budget)
      cap = r->budget > cap ? r->budget : cap;
    else if (!strcmp(r->window_mode, "auto"))
      cap = nto_model_mem_plan(r->m).total;
    grow = cap > st.region ? cap - st.region : 0;
    window = grow + cap;
  }
  int t = nto_parallel_threads(), fit = t;
  uint64_t base = vm + window + AS_MARGIN;
  while (fit >= 1 && base + (uint64_t)(fit - warmed) * buf > lim)
    fit--;
  if (fit == t)
    return 0;
  nto_format_bytes(buf, c, sizeof c);
  if (fit >= 1) {
    nto_err e = {0};
    if (nto_parallel_set_threads(fit, &e) == 0) {
      printf("note: address-space limit (ulimit -v) %s: %d compute thread%s "
             "instead of %d (OpenBLAS maps a GEMM buffer of %s for each)\n",
             l, fit, fit == 1 ? "" : "s", t, c);
      r->o.threads = fit;
      return 0;
    }
  }
  char w[32], gemm[80] = "", room[120] = "";
  uint64_t need = base + (uint64_t)(1 - warmed) * buf;
  nto_format_bytes(need, a, sizeof a);
  nto_format_bytes(vm, b, sizeof b);
  if (warmed)
    snprintf(gemm, sizeof gemm, ", OpenBLAS's GEMM buffer of %s", c);
  if (window)
    snprintf(room, sizeof room,
             ", %s for the tensor region to %sbe remapped between iterations",
             nto_format_bytes(window, w, sizeof w), grow ? "grow and " : "");
  return nto_err_set(
      err, NTO_ECONFIG,
      "the address-space limit (ulimit -v) %s is below the %s this run "
      "needs: %s mapped now (code, libraries, tensors%s)%s%s%s, %" PRIu64
      " MiB to spare; raise the limit, or lower the tensors' memory "
      "(--window 1, --memory-budget)",
      l, a, b, gemm, warmed ? "" : ", OpenBLAS's GEMM buffer of ",
      warmed ? "" : c, room, AS_MARGIN >> 20);
}

void cli_config_warnings(const nto_config *c) {
  for (int i = 0; i < c->n_warnings; i++)
    fprintf(stderr, "warning: %s\n", c->warnings[i]);
}

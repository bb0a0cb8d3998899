/*
 * cli.h - shared pieces of the nntrainer-offload command line: exit codes,
 * option value parsing, and loading a model for a subcommand.
 * Only app/ prints and exits. Main thread only.
 */
#ifndef NTO_CLI_H
#define NTO_CLI_H

#include "config.h"
#include "model.h"

#include <stdint.h>
#include <stdio.h>

enum { CLI_OK = 0, CLI_RUNTIME = 1, CLI_USAGE = 2 };

/* Parse an option's integer value in [min, max]; prints a usage error
 * naming the option and returns -1 on failure. */
int cli_int(const char *opt, const char *v, long min, long max, long *out);

/* --recompute auto|cheap|segments|segments:N|off (NULL: auto) -> *out
 * (tensors.h nto_recompute) and *segments_max (may be NULL): N for
 * segments:N (only the N segment convolutions first in tensors.h's order:
 * the most activation bytes per replayed operation), else 0. Returns 0,
 * or -1 after printing an error naming the option and the value. */
int cli_recompute(const char *v, nto_recompute *out, int *segments_max);

/* --updates after|spread (NULL: after) -> *out (steps.h). Returns 0, or
 * -1 after printing an error naming the option and the value. */
int cli_update_placement(const char *v, nto_update_placement *out);

/* --optimizer-state fp32|bf16|int8 (NULL: keep the INI's [Optimizer]
 * state_format) -> o->state_format. Returns 0, or -1 after printing an
 * error naming the option and the value. */
int cli_optimizer_state(const char *v, nto_opt_conf *o);

/* " (bf16)" or " (int8)" after the optimizer state's bytes, "" for fp32.
 * A static string. */
const char *cli_state_note(const nto_opt_conf *o);

/* The recompute mode the n bytes at p name ("auto", "off", "segments:3"),
 * or -1; prints nothing (bench checks its labels' +MODE). */
int cli_recompute_word(const char *p, size_t n);

/* --channel-groups off|SIZE (NULL: off) -> *out: 0, or SIZE in bytes
 * (model.h group_bytes; K, M, G suffixes, at least 1 KiB). Returns 0, or -1
 * after a usage error. */
int cli_channel_groups(const char *v, size_t *out);

/* A memory budget v (K/M/G, bare: bytes) -> *out bytes. A bare number
 * below 1 MiB is refused with "did you mean vM?". Returns 0, or -1 after
 * printing an error naming what (the option or INI key) and v. */
int cli_budget(const char *what, const char *v, size_t *out);

/* --io uring|psync (also io_uring) -> *out; -1 after printing an error
 * naming the option and the value. */
int cli_io(const char *v, nto_io_kind *out);

/* s as a JSON string (quotes, backslashes and control characters
 * escaped) to f. */
void cli_json_string(FILE *f, const char *s);

/* Start the compute threads (parallel.h) for --threads T, at most
 * NTO_PARALLEL_MAX; a failure is a warning on stderr (fewer threads:
 * slower, the same results). */
void cli_compute_threads(long threads);

/* The value after option argv[*i] (advancing *i), or NULL if none. */
const char *cli_value(int argc, char **argv, int *i);

/* Whether argument a is option name (e.g. "--data"): 0 no, 1 "--data",
 * 2 "--data=VALUE" (the value is what follows the '='). */
int cli_opt_match(const char *a, const char *name);

/* The value of option name at argv[*i], which cli_opt_match found as m:
 * after its '=' (m == 2), else the next argument (advancing *i); NULL when
 * there is none. */
const char *cli_opt_value(int argc, char **argv, int *i, const char *name,
                          int m);

/* Prints "blas: OpenBLAS, FAMILY kernels" with the OPENBLAS_CORETYPE that
 * chose them, and a note when they leave the CPU's AVX-512 unused (about
 * half the GEMM speed; nntrainer-offload/blas.h). Stdout. */
void cli_print_blas(void);

struct run;

/*
 * Under an address-space limit (RLIMIT_AS, `ulimit -v`; nothing without
 * one), after the model and the data of r are set up and before the first
 * GEMM: takes the executor's OpenBLAS GEMM buffer (measuring its size) and
 * checks that what is mapped now (VmSize), the buffers of the other
 * compute threads, the growth of --window auto up to its cap and a margin
 * fit the limit; if not, runs on fewer compute threads (a note on stdout;
 * r->o.threads updated), else refuses. rc: the status so far, returned as
 * it is (an NTO_ENOMEM message gains the limit). Returns rc, 0, or
 * NTO_ECONFIG "the address-space limit (ulimit -v) X is below the Y this
 * run needs: ...". Main thread.
 */
int cli_address_space(struct run *r, int rc, nto_err *err);

/* The config's warnings (nntrainer's older spellings read, keys accepted
 * but not applied: config.h warnings), one "warning: ..." line each on
 * stderr. */
void cli_config_warnings(const nto_config *c);

/* Prints "nntrainer-offload: <msg>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Exit status for a core error code: config/shape errors -> 2, else 1. */
int cli_status(int code);

int cmd_train(int argc, char **argv);
int cmd_summary(int argc, char **argv);
/* `evaluate MODEL.ini --weights FILE [options]` (app/evaluate.c). */
int cmd_evaluate(int argc, char **argv);
/* `predict MODEL.ini --weights FILE IMAGE...` (app/predict.c). */
int cmd_predict(int argc, char **argv);

/* `bench MODEL.ini [options]`: runs `train` once per --windows
 * configuration, each in a child process of this binary, and prints their
 * iteration time, memory and swap traffic side by side (optionally CSV,
 * JSON, SVG plot; with --profile inside a board's CPU quota and swap
 * throttle, app/profile.h). argv[0] is "bench". Returns CLI_OK (also when
 * --profile cannot be applied here), CLI_RUNTIME (a configuration failed
 * or the weights differ), CLI_USAGE, 77 (--profile skipped with --strict)
 * or 128 + N (stopped by signal N under --profile). */
int cmd_bench(int argc, char **argv);

#endif

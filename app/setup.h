/*
 * setup.h - what `train` and `evaluate` share: the data sources, the
 * memory settings (window, budget, swap) and the offload line printed
 * before the first pass. Main thread only.
 */
#ifndef NTO_APP_SETUP_H
#define NTO_APP_SETUP_H

#include "run.h"

#include <stddef.h>

/* What a budget or limit on the process keeps, per compute thread, for
 * what train holds beyond its tensors and the process's RSS once the
 * model's plans are built (the OpenBLAS packing buffer of each thread
 * that calls BLAS, the data pipeline, the I/O rings and threads): what
 * SETUP_EST_* expect, with a margin of about 1 MiB at 2 threads for what
 * varies (docs/design.md). */
#define SETUP_BLAS_THREAD_BYTES ((size_t)2 << 20)

/* What summary's estimated peak RSS expects of the same, measured in
 * train's /proc/PID/smaps against summary's at the estimate (ResNet-18
 * b10 window 2, MobileNetV2 224 b10 window 1, 2 threads): OpenBLAS's
 * buffer pool 1.2-1.4 MiB (0.6-0.7 per thread), the heap, code pages and
 * stacks train touches beyond summary 1.3 MiB, the peak above the steady
 * RSS 0.4-1.2 MiB: per process SETUP_EST_FIXED_BYTES, per compute thread
 * SETUP_EST_THREAD_BYTES. */
#define SETUP_EST_FIXED_BYTES ((size_t)3 << 19)  /* 1.5 MiB */
#define SETUP_EST_THREAD_BYTES ((size_t)3 << 18) /* 0.75 MiB */

#define SETUP_DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
#define SETUP_MAX_CLASS 4095 /* the largest label --classes takes */

/*
 * Open the training and test sets per the options (--data, --train-samples,
 * --seed, --classes) and the config ([train_set] / [test_set] /
 * [valid_set] raw files), for input shape `in` and k classes. train may be
 * NULL (evaluate: the test set only). *test is NULL when the source has no
 * test split. With --classes, both keep only the listed classes, as
 * labels 0..k-1 (nto_dataset_keep_classes). On error, what was opened
 * stays in *train / *test for the caller to close. Returns 0, the
 * dataset's error (names the file), or NTO_ECONFIG for --classes (a bad
 * list, one whose length is not k, raw data, no sample of the classes).
 */
int setup_open_data(const train_opts *o, const nto_config *c, nto_shape in,
                    int k, nto_dataset **train, nto_dataset **test,
                    nto_err *err);

/* The channel groups setting: --channel-groups as given (arg), else the
 * INI's [Model] channel_groups, else NULL (off); for cli_channel_groups. */
const char *setup_channel_groups(const char *arg, const nto_config *c);

/* One option of a command: where its value goes in train_opts. */
typedef struct setup_opt {
  const char *name; /* "--weights" */
  size_t off;       /* offsetof(train_opts, field) */
  char kind;        /* 's': const char *; 'i': long in [min, max];
                       'f': an int flag, set to 1 */
  long min, max;
} setup_opt;

/* An entry of a setup_opt table. */
#define SETUP_OPT(name, field, kind, min, max)                                 \
  { name, offsetof(train_opts, field), kind, min, max }

/*
 * The flash endurance assumed without --flash-endurance, in TBW: terabytes
 * written, 10^12 bytes, as vendors rate flash. What a typical 32 GB eMMC's
 * rating comes to by the estimate vendors publish (JEDEC's TBW: capacity x
 * P/E cycles / write amplification, e.g. Insignis, "NAND write endurance",
 * insignis-tech.com/technology/storage/nand-write-endurance) with 3000 P/E
 * cycles (MLC NAND: around 3000, forum.hilscher.com/Thread-Memory-card-
 * endurance; TLC 3000-5000, micrometer.xyz/cdn/node/110) and a write
 * amplification of 2 (the value DAVE Embedded Systems assume,
 * wiki.dave.eu MISC-TN-017): 32e9 x 3000 / 2 bytes = 48 TBW.
 */
#define SETUP_FLASH_TBW 48.0
#define SETUP_FLASH_TBW_TEXT "48" /* the same, for usage texts */

/* --flash-endurance v (the option's name: what) in TBW into *tbw: a
 * number above 0, optionally followed by TBW or TB ("48", "150TBW").
 * Returns 0, or -1 after printing a usage error naming what and v. */
int setup_flash_endurance(const char *what, const char *v, double *tbw);

/* frac, a share of the flash endurance, as a percentage with the digits
 * a small share needs ("2.2%", "0.0031%", "<0.0001%") into buf; returns
 * buf. */
const char *setup_share(double frac, char *buf, size_t len);

/* *allow |= the environment's NTO_ALLOW_TMPFS_SWAP (1: as
 * --allow-tmpfs-swap, for test harnesses; 0 or unset: nothing). Returns 0,
 * or -1 after printing an error for another value. */
int setup_ram_swap_env(int *allow);

/* The swap directory a command uses and where it came from. */
typedef struct setup_swap {
  const char *dir; /* borrowed: the option's, the config's or $TMPDIR's
                      value, or a literal ("/tmp", "/var/tmp") */
  char what[NTO_CONF_STR + 80];  /* where it came from, for messages */
  char note[NTO_CONF_STR + 256]; /* the default skipped a RAM-backed
                                    $TMPDIR or /tmp: which, and why; "" */
} setup_swap;

/*
 * The swap directory: opt (--swap-dir), else swap_path (the INI's
 * memory_swap_path, already joined to the INI's directory; "" or NULL:
 * none; model: the INI file, for messages), else the default: $TMPDIR
 * when set and not empty, else /tmp, except that one on tmpfs or ramfs
 * is skipped for /var/tmp (a writable directory on another filesystem),
 * with s->note saying so. A directory on tmpfs or ramfs keeps its pages
 * in RAM: a swap file there saves no memory, so it is refused unless
 * allow_ram (--allow-tmpfs-swap; also keeps a RAM-backed default). A
 * directory statfs cannot read is not refused here: opening the swap
 * file names its problem. s->dir is set also on error. Returns 0, or
 * NTO_ECONFIG (a usage error) naming the directory, where it came from,
 * the filesystem, why, and --allow-tmpfs-swap. Main thread only.
 */
int setup_swap_dir(const char *opt, const char *swap_path, const char *model,
                   int allow_ram, setup_swap *s, nto_err *err);

/* The options evaluate and predict share (the weights, the data as train
 * reads it, the memory settings, the batch, threads and seed): entries
 * of their setup_opt tables. */
#define SETUP_INFERENCE_OPTS                                                   \
  SETUP_OPT("--weights", weights, 's', 0, 0),                                  \
      SETUP_OPT("--data", data, 's', 0, 0),                                    \
      SETUP_OPT("--classes", classes, 's', 0, 0),                              \
      SETUP_OPT("--valid-split", valid_split, 's', 0, 0),                      \
      SETUP_OPT("--normalize", normalize, 's', 0, 0),                          \
      SETUP_OPT("--skip-bad-images", skip_bad_images, 'f', 0, 0),              \
      SETUP_OPT("--window", window, 's', 0, 0),                                \
      SETUP_OPT("--memory-budget", budget, 's', 0, 0),                         \
      SETUP_OPT("--swap-dir", swap_dir, 's', 0, 0),                            \
      SETUP_OPT("--allow-tmpfs-swap", allow_ram_swap, 'f', 0, 0),              \
      SETUP_OPT("--io", io, 's', 0, 0),                                        \
      SETUP_OPT("--no-direct", no_direct, 'f', 0, 0),                          \
      SETUP_OPT("--channel-groups", groups, 's', 0, 0),                        \
      SETUP_OPT("--batch-size", batch, 'i', 1, 1L << 20),                      \
      SETUP_OPT("--threads", threads, 'i', 1, 256),                            \
      SETUP_OPT("--seed", seed, 'i', 0, 1L << 40)

/* Release what a run holds that setup made: the data sets, the model,
 * the compute threads, the config, the batch buffers. */
void setup_free(run *r);

/*
 * Parse argv[1..argc) of command cmd (argv[0]) by opts[0..n) into *o,
 * whose defaults the caller set (o->tbw set to SETUP_FLASH_TBW unless
 * --flash-endurance gives it; NTO_ALLOW_TMPFS_SWAP read): "--help" prints
 * usage;
 * the first word that is not an option is the model; later ones go to
 * args[0..*n_args) (pointers into argv; args NULL: refused). Returns 0, 1
 * after --help, or -1 after printing a usage error (an unknown option, a
 * missing or bad value, no model).
 */
int setup_parse(int argc, char **argv, const char *usage, const setup_opt *opts,
                size_t n, train_opts *o, const char **args, int *n_args);

/* "5,6,7,8,9", "5-9" or a mix ("0,2-4") into out[0..*n) (at most max
 * entries; labels 0 to SETUP_MAX_CLASS). Returns 0, or NTO_ECONFIG with a
 * message naming the list. */
int setup_parse_classes(const char *list, int *out, int max, int *n,
                        nto_err *err);

/*
 * The memory settings into *mo and r->window_mode / r->budget: options
 * first (--window, --memory-budget, --swap-dir, --io, --no-direct,
 * --recompute), then the INI's memory_swap* / fsu* and memory_budget
 * keys. When the run may offload, the swap directory is setup_swap_dir's
 * (o->allow_ram_swap). Returns 0, or -1 after
 * printing a usage error naming the option or the INI key (or the swap
 * directory on tmpfs or ramfs).
 */
int setup_memory_opts(run *r, nto_model_opts *mo);

/* "planned memory: S (all resident)", or the offload line: window, I/O
 * backend, swap file, region and workspace, then the note of a default
 * swap directory that skipped $TMPDIR or /tmp (setup_swap_dir). Stdout. */
void setup_print_offload(const run *r);

/*
 * evaluate and predict: the config r->o.model, a forward-only model
 * (nto_model_opts.inference) with the memory settings, every weight from
 * r->o.weights (a tensor missing or of another shape is a usage error),
 * r->batch / k / sample / tty, and one batch's buffers r->x, r->y. The
 * batch is --batch-size, else the INI's, at most max_batch when that is >
 * 0 (predict on 2 images: a batch of 2). Prints its errors. Returns
 * CLI_OK, CLI_USAGE or CLI_RUNTIME; the caller frees what r holds either
 * way.
 */
int setup_inference(run *r, int max_batch);

/* "model ...: L layers, P parameters, batch B, T threads", the weights
 * line and the BLAS line. Stdout. */
void setup_print_inference(const run *r);

#endif

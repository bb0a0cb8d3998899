/*
 * setup.h - what `train` and `evaluate` share: the data sources, the
 * memory settings (window, budget, swap) and the offload line printed
 * before the first pass. Main thread only.
 */
#ifndef NTO_APP_SETUP_H
#define NTO_APP_SETUP_H

#include "run.h"

#include <stddef.h>

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
      SETUP_OPT("--io", io, 's', 0, 0),                                        \
      SETUP_OPT("--no-direct", no_direct, 'f', 0, 0),                          \
      SETUP_OPT("--batch-size", batch, 'i', 1, 1L << 20),                      \
      SETUP_OPT("--threads", threads, 'i', 1, 256),                            \
      SETUP_OPT("--seed", seed, 'i', 0, 1L << 40)

/* Release what a run holds that setup made: the data sets, the model,
 * the compute threads, the config, the batch buffers. */
void setup_free(run *r);

/*
 * Parse argv[1..argc) of command cmd (argv[0]) by opts[0..n) into *o,
 * whose defaults the caller set: "--help" prints usage; the first word
 * that is not an option is the model; later ones go to args[0..*n_args)
 * (pointers into argv; args NULL: refused). Returns 0, 1 after --help, or
 * -1 after printing a usage error (an unknown option, a missing or bad
 * value, no model).
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
 * keys. Returns 0, or -1 after printing a usage error naming the option or
 * the INI key.
 */
int setup_memory_opts(run *r, nto_model_opts *mo);

/* "planned memory: S (all resident)", or the offload line: window, I/O
 * backend, swap file, region and workspace. Stdout. */
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

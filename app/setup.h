/*
 * setup.h - what `train` and `evaluate` share: the data sources, the
 * memory settings (window, budget, swap) and the offload line printed
 * before the first pass. Main thread only.
 */
#ifndef NTO_APP_SETUP_H
#define NTO_APP_SETUP_H

#include "run.h"

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

#endif

/*
 * config.h - nntrainer-style INI model configuration, loaded with iniparser.
 *
 * Sections: [Model], [Optimizer], [LearningRateScheduler], [train_set],
 * [valid_set], [test_set] are parsed here into typed settings; every other
 * section is a layer, kept as an ordered list of key/value pairs for the
 * graph builder (graph.h) to apply through the layer registry.
 * Section names, keys and enum values are case-insensitive; values may be
 * quoted; inline '#' and ';' comments are stripped (iniparser rules).
 *
 * Every error names the file, the section and the key and says what was
 * expected, e.g.
 *   "res/x.ini: [Optimizer] key 'beta1': expected a number in [0, 1),
 *    got 'abc'"
 * Single-threaded: iniparser reports syntax errors through a process-wide
 * callback, so load one config at a time (the CLI's main thread).
 *
 * nntrainer's older spellings that nntrainer still reads are read with the
 * same meaning and precedence, and each one adds a line to
 * nto_config.warnings (the core never prints; the app shows them):
 * [Model] optimizer, learning_rate, decay_rate, decay_steps, beta1, beta2
 * and epsilon (the optimizer before [Optimizer] existed), the [DataSet]
 * section (before [train_set] ...), the layer types of nntrainer's
 * first INI format (InputLayer, FullyConnectedLayer, ...), and its 2020
 * layer keys weight_decay = l2norm|none and weight_decay_lambda (today's
 * weight_regularizer and weight_regularizer_constant; the layers read
 * either spelling, props.h nto_parse_regularizer_key). A section
 * with `backbone = FILE.ini` stands for the layer sections of that INI,
 * inserted as nntrainer's INI interpreter inserts them (names prefixed
 * with the section's, trainable = false unless the section says
 * otherwise; docs/ini-reference.md); a last section whose type is a loss
 * (mse, cross, cross_softmax, cross_sigmoid: nntrainer's loss layer) is
 * read as the model's loss; [Model] Type = Regression is ignored with a
 * warning, as nntrainer ignores the key. Relative paths
 * (save_path, save_best_path, memory_swap_path, data paths) are relative
 * to the INI file's directory, as nntrainer resolves them.
 */
#ifndef NTO_CONFIG_H
#define NTO_CONFIG_H

#include "error.h"

#include <stddef.h>

#define NTO_CONF_STR 512

typedef enum { NTO_LOSS_CROSS, NTO_LOSS_MSE } nto_loss_kind;
typedef enum { NTO_OPT_SGD, NTO_OPT_ADAM, NTO_OPT_ADAMW } nto_opt_kind;
/* How optimizer state (momentum, Adam's m and v) is stored, in RAM and in
 * swap (optimizer.h): fp32 (exact), bf16, or block-wise int8. */
typedef enum {
  NTO_OPT_STATE_FP32,
  NTO_OPT_STATE_BF16,
  NTO_OPT_STATE_INT8
} nto_opt_state_format;
typedef enum {
  NTO_LR_CONSTANT,
  NTO_LR_EXPONENTIAL,
  NTO_LR_STEP,
  NTO_LR_COSINE
} nto_lr_kind;

/* One key = value of a layer section. key is lowercase, value trimmed. */
typedef struct nto_kv {
  char key[64];
  char value[NTO_CONF_STR];
} nto_kv;

/* A layer section, in file order (a backbone's sections where its
 * [section] with `backbone = FILE.ini` stood). */
typedef struct nto_section {
  char name[64]; /* lowercase: iniparser lowercases section names; a
                    backbone's layer: the backbone section's name, then its
                    own (nntrainer's prefix, no separator) */
  nto_kv *kv;
  int n_kv;
  int file;   /* where it is written: 0 the INI itself (nto_config.path),
                 k > 0 the backbone file nto_config.files[k - 1] */
  int prefix; /* characters of name that the outermost backbone section
                 added (0: none); name + prefix is the layer's name in
                 the backbone file (nested backbones' prefixes kept) */
} nto_section;

typedef struct nto_model_conf {
  int epochs;                   /* default 1 */
  nto_loss_kind loss;           /* "cross" (default) or "mse" */
  int batch_size;               /* default 1 */
  char save_path[NTO_CONF_STR]; /* "" if absent; relative: joined to the
                                   INI's directory */
  /* Swap settings (nntrainer memory_swap* / fsu* keys; used by offload). */
  int memory_swap;              /* 0/1, default 0 */
  char swap_lookahead[32];      /* "" if absent; an int or "auto" */
  char swap_path[NTO_CONF_STR]; /* "" if absent; relative: joined to the
                                   INI's directory */
  char memory_budget[32];       /* "" if absent; e.g. "64M" */
  char channel_groups[32];      /* "" if absent; "off" or a size, e.g.
                                   "20M" (train --channel-groups) */
  int frozen_bn_batch; /* frozen_bn_statistics = batch (1) or running (0,
                          default): what frozen batch normalization
                          normalizes with in training (layer.h) */
  /* Applied by the train command. */
  int continue_train; /* continue_train, bool, default 0: nntrainer's
                         "continue from the saved weights and optimizer
                         state" */
  char save_best_path[NTO_CONF_STR]; /* "" if absent; nntrainer saves the
                                        weights of the best validation
                                        epoch there; relative: joined to
                                        the INI's directory */
} nto_model_conf;

typedef struct nto_opt_conf {
  nto_opt_kind kind;    /* default adam */
  double learning_rate; /* default 1e-3 (if no scheduler gives one) */
  double momentum;      /* sgd, default 0 */
  double beta1, beta2;  /* adam(w), default 0.9, 0.999 */
  double epsilon;       /* adam(w), default 1e-7 (nntrainer's default) */
  double weight_decay;  /* default 0 (sgd: L2 added to grad; adamw:
                           decoupled, Loshchilov & Hutter 2019) */
  int lr_given;         /* learning_rate was written in [Optimizer] */
  nto_opt_state_format state_format; /* [Optimizer] state_format, default
                                        fp32 (train --optimizer-state) */
} nto_opt_conf;

#define NTO_LR_MAX_STEPS 16
typedef struct nto_lr_conf {
  nto_lr_kind kind; /* default constant */
  int given;        /* a schedule applies: the section exists, or nntrainer's
                       legacy decay_rate/decay_steps in [Optimizer] */
  /* constant/exponential: learning_rate; step: learning_rate is a list of
     n_steps+1 rates changing at the given iterations. */
  double learning_rate[NTO_LR_MAX_STEPS + 1];
  long iteration[NTO_LR_MAX_STEPS];
  int n_steps;
  double decay_rate; /* exponential: lr * decay_rate^(it / decay_steps) */
  long decay_steps;  /* exponential, cosine */
  double max_learning_rate, min_learning_rate; /* cosine */
} nto_lr_conf;

typedef enum {
  NTO_DATA_NONE,
  NTO_DATA_FILE, /* nntrainer raw file */
} nto_data_kind;

typedef struct nto_data_conf {
  nto_data_kind kind;
  char path[NTO_CONF_STR];
  int buffer_size; /* shuffle buffer in samples, 0 = default */
} nto_data_conf;

typedef struct nto_config {
  char path[NTO_CONF_STR]; /* the file, for messages */
  nto_model_conf model;
  nto_opt_conf opt;
  nto_lr_conf lr;
  nto_data_conf train_set, valid_set, test_set;
  nto_section *layers; /* every other section, file order */
  int n_layers;
  int layers_cap; /* allocated entries of layers */
  char **files;   /* backbone INI files read (paths as resolved) */
  int n_files;
  /* One line per deprecated spelling read or setting not applied, in file
   * order, without a trailing newline, naming the file, section and key,
   * e.g. "m.ini: [model] key 'learning_rate': deprecated, read as
   * [Optimizer] learning_rate (nntrainer's old format)". Owned by the
   * config (nto_config_free). */
  char **warnings;
  int n_warnings;
} nto_config;

/*
 * Load and validate the model-level sections of an INI file; layer sections
 * are copied as key/value lists (validated later by graph building), a
 * layer type of nntrainer's first format rewritten to its current name.
 * Warnings (deprecated spellings) are in c->warnings for the caller to
 * show. Returns 0, NTO_EIO (cannot read, names the file), NTO_ENOMEM or
 * NTO_ECONFIG (names file, section, key). On error *c is left freed (safe
 * to nto_config_free).
 */
int nto_config_load(nto_config *c, const char *path, nto_err *err);

/* Release what nto_config_load allocated. Safe on a zeroed config. */
void nto_config_free(nto_config *c);

/* Value of key (lowercase) in section s, or NULL. */
const char *nto_section_get(const nto_section *s, const char *key);

/* The file section s was written in (c->path or a backbone's), for
 * messages. The section named name, or NULL; nto_section_file_of(c, name)
 * is its file, c->path if there is none. */
const char *nto_section_file(const nto_config *c, const nto_section *s);
const char *nto_section_file_of(const nto_config *c, const char *name);

/* Parse a byte size "64M", "1.5G", "4096", "512K" (powers of 1024).
 * Returns 0 or NTO_ECONFIG. */
int nto_parse_size(const char *v, size_t *out, nto_err *err);

#endif /* NTO_CONFIG_H */

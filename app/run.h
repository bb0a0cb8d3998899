/*
 * run.h - one `train` run: its options and the state the training loop
 * (train.c) keeps, which the end-of-run report (report.c) reads. Main
 * thread only.
 */
#ifndef NTO_APP_RUN_H
#define NTO_APP_RUN_H

#include "config.h"
#include "dataset.h"
#include "init_weights.h"
#include "model.h"
#include "trace.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* train's and evaluate's options (docs/cli.md); 0 / NULL: not given. */
typedef struct train_opts {
  const char *model, *data, *save;
  long epochs, iterations, batch, train_samples, eval_samples, shuffle;
  long seed, threads, log_every;
  const char *window;       /* "N", "auto", "all" or NULL (the INI decides) */
  const char *budget;       /* --memory-budget, NULL: the INI's */
  const char *swap_dir;     /* NULL: the INI's, else the default */
  const char *io;           /* NULL: auto */
  int no_direct;            /* --no-direct */
  int allow_ram_swap;       /* --allow-tmpfs-swap, or NTO_ALLOW_TMPFS_SWAP=1 */
  const char *endurance;    /* --flash-endurance as given, NULL: not given */
  double tbw;               /* its value in TBW, else SETUP_FLASH_TBW */
  const char *recompute;    /* --recompute auto|off, NULL: auto */
  const char *opt_state;    /* --optimizer-state, NULL: the INI's */
  const char *updates;      /* --updates after|spread, NULL: after */
  const char *groups;       /* --channel-groups off|SIZE, NULL: off */
  const char *freeze_until; /* --freeze-until LAYER, NULL: none */
  const char *frozen_bn;    /* --frozen-bn running|batch, NULL: the INI's */
  const char *report_json;  /* NULL: off */
  const char *trace;        /* --trace, NULL: off */
  long warmup;              /* iterations left out of the report */
  const char *checkpoint;   /* --checkpoint, NULL: off */
  long checkpoint_every;    /* 0: once per epoch */
  const char *resume;       /* --resume, NULL: a new run */
  const char *init_weights; /* --init-weights, NULL: initialized */
  const char *weights;      /* evaluate --weights (required) */
  const char *classes;      /* --classes LIST, NULL: every class */
  const char *valid_split;  /* --valid-split F (image folders), NULL: none */
  const char *normalize;    /* --normalize (image folders), NULL: none */
  int skip_bad_images;      /* --skip-bad-images */
  long top;                 /* predict --top */
  long eval_every;          /* --eval-every K, 0: after each epoch only */
  const char *log_csv;      /* --log-csv FILE, NULL: off */
  int window_trace;         /* --window-trace: the report lists it */
} train_opts;

/* What one training iteration measured (the --log-csv row, the progress
 * line's window sums): read from the counters the loop already keeps. */
typedef struct iter_sample {
  double ms;              /* wall time, the tuner's turn included */
  double stall_ms;        /* the executor waiting for its tensors */
  uint64_t read, written; /* swap bytes */
  int window;             /* offload window N in force, 0: all resident */
  double lr;              /* the learning rate the update used */
} iter_sample;

typedef struct run {
  train_opts o;
  nto_config c;
  nto_model *m;
  nto_dataset *train, *test;
  trace *tr;        /* --trace, or NULL */
  init_result init; /* --init-weights: what was loaded */
  float *x, *y;     /* one batch: N x c*h*w inputs, N x K targets */
  int batch, k;
  size_t sample;
  int tty;
  int offload;             /* the model offloads */
  const char *window_mode; /* "fixed", "auto", "budget" or "all" */
  size_t budget;           /* bytes, 0: none */
  size_t group_bytes;      /* --channel-groups, 0: off */
  char budget_src[256];    /* where the budget came from (errors) */
  char limit_src[256];     /* without a budget: the memory limit, named */
  /* the loop */
  double *step_s; /* per iteration: its wall time, the tuner's turn too */
  long n_steps, planned;
  long it0;       /* iterations done before this process (--resume) */
  long epoch, ie; /* the loop's epoch and iterations in it */
  /* The progress window: the iterations since the last multiple of
   * --log-every (or the epoch's start); the progress line shows their
   * averages, and they are reset when the window is complete. */
  double loss_sum;            /* batch mean losses summed */
  long correct, seen;         /* samples */
  double win_s, win_stall_ms; /* this process's iterations of the window */
  double last_loss, last_acc; /* the last complete window's averages */
  double last_draw;           /* when a terminal's line was last drawn */
  iter_sample last_it;        /* the last iteration */
  FILE *csv;                  /* --log-csv, or NULL */
  double test_loss, test_acc;
  long test_n;
  long test_it;      /* the iteration of the last evaluation */
  size_t test_size;  /* the test set's samples */
  size_t eval_limit; /* test samples an evaluation uses, 0: all */
  int eval_default;  /* eval_limit is the default for a run shorter than
                        an epoch (min(test set, EVAL_SHORT_RUN)) */
  double before_loss, before_acc; /* --init-weights: before training */
  long before_n;                  /* 0: not evaluated */
  double best_acc;       /* save_best_path: the best epoch-end accuracy so far
                            (%), -1: none yet */
  const char *continued; /* continue_train: the weights file the run
                            started from (also in o.init_weights), or
                            NULL */
  int stopped;           /* a signal stopped the loop */
  /* checkpoints */
  long ckpt_it; /* iteration of the last checkpoint in the file, -1: none */
  int n_ckpt;   /* written */
  double ckpt_s;
  /* offloading, over the measured iterations (after the warm-up) */
  uint64_t io_read, io_written;
  double stall_ms, device_ms, busy_ms[2]; /* busy: onloader, offloader */
  long relocated; /* buffers placed at their second offset */
  /* --recompute auto's choice of segments (train.c choose_recompute) */
  int seg_chosen; /* segments recomputed */
  nto_segments_estimate seg;
  double seg_write_bps, seg_read_bps; /* the probe's, bytes/s */
  double seg_flops; /* the compute rate measured (flop/s), 0: not */
  double *step_ms;  /* per training step: compute ms summed over them */
  double *step_tmp; /* scratch: the last pass's step times */
  long step_passes; /* passes summed into step_ms */
} run;

#endif

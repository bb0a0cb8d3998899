/* train.c - `nntrainer-offload train`: the training loop with progress,
 * per-epoch evaluation, end-of-run report and weight saving. */
#include "blas.h"
#include "checkpoint.h"
#include "cli.h"
#include "dataset.h"
#include "floor.h"
#include "memstat.h"
#include "parallel.h"
#include "weights.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

static const char usage[] =
    "usage: nntrainer-offload train MODEL.ini [options]\n"
    "\n"
    "Trains the model and prints loss, accuracy, iteration time and peak\n"
    "memory. Evaluates on the test set at the end of each epoch.\n"
    "\n"
    "  --data DIR|synthetic  IDX directory (default: the INI's [train_set],\n"
    "                        else " DEFAULT_DATA ");\n"
    "                        'synthetic': generated data (fixed seed)\n"
    "  --epochs E            epochs (default: the INI's Epochs)\n"
    "  --iterations K        stop after K iterations in total\n"
    "  --batch-size B        batch size (default: the INI's batch_size)\n"
    "  --train-samples N     use only the first N training samples\n"
    "                        (synthetic: how many to generate, default 2048)\n"
    "  --eval-samples N      evaluate on the first N test samples (0: skip)\n"
    "  --shuffle-buffer N    shuffle buffer in samples (default 512, 0: off)\n"
    "  --save FILE           save weights to FILE (nntrainer .bin) and\n"
    "                        FILE.safetensors (default: the INI's Save_Path)\n"
    "  --seed S              seed of initialization, shuffling, dropout\n"
    "                        (default 1)\n"
    "  --threads T           compute threads for every kernel, GEMMs\n"
    "                        included (OpenBLAS runs at one thread); the\n"
    "                        same results at any count (default: online\n"
    "                        CPUs)\n"
    "  --log-every K         in non-terminal output, a line every K\n"
    "                        iterations (default: about 20 per epoch)\n"
    "  --warmup K            leave the first K iterations out of the\n"
    "                        report's times and traffic (default 0)\n"
    "  --report-json FILE    also write the report as JSON to FILE\n"
    "  --floor-bandwidth R,W swap device bandwidth, read and write in MiB/s\n"
    "                        (e.g. what fio or bench measured): the report\n"
    "                        adds the fastest iteration the window's\n"
    "                        region allows (docs/cli.md, region floor)\n"
    "\n"
    "Checkpoints (SIGINT/SIGTERM: finish the iteration, write a checkpoint\n"
    "when --checkpoint is given, exit 130/143):\n"
    "  --checkpoint FILE     write the training state (weights, optimizer\n"
    "                        state, iteration, RNGs, data position) to FILE\n"
    "                        atomically, at the end and on a signal\n"
    "  --checkpoint-every K  also every K iterations (default: every epoch)\n"
    "  --resume FILE         continue from a checkpoint; --iterations and\n"
    "                        --epochs count from the start of the run, so\n"
    "                        the result equals an uninterrupted run's\n"
    "\n"
    "Offloading (default: the INI's memory_swap* / fsu* keys, else all\n"
    "resident):\n"
    "  --window N|auto|all   keep the tensors of N steps in RAM, the rest in\n"
    "                        a swap file; 'auto': adapt N after every\n"
    "                        iteration to hide the reads; 'all': everything\n"
    "                        resident\n"
    "  --memory-budget SIZE  bound on resident tensors + workspace (K/M/G\n"
    "                        suffixes); without --window: the largest\n"
    "                        window that fits (all resident if it fits)\n"
    "  --swap-dir DIR        directory of the swap file (default: the INI's\n"
    "                        memory_swap_path, else $TMPDIR or /tmp)\n"
    "  --io uring|psync      I/O backend (default: io_uring, psync where\n"
    "                        io_uring is refused)\n"
    "  --no-direct           swap through the page cache (no O_DIRECT)\n"
    "  --prefetch steps|time|room\n"
    "                        when reads start: 'steps': step s+N's at the\n"
    "                        start of step s; 'time': from the step times\n"
    "                        and read bandwidth measured in iterations 1\n"
    "                        and 3, early enough to be done before each\n"
    "                        step runs (more tensors resident; within\n"
    "                        --memory-budget if given; the default with a\n"
    "                        budget or --window auto); 'room': as 'time'\n"
    "                        where the window's own memory has room, so\n"
    "                        the tensor region stays that of 'steps', and\n"
    "                        only while the device has idle time for the\n"
    "                        swap traffic it adds (the default for a fixed\n"
    "                        window without a budget)\n"
    "  --chunk-grads auto|on|off\n"
    "                        where the gradient of a weight above the\n"
    "                        update chunk (1 MiB) is computed: chunk by\n"
    "                        chunk next to its update (less memory) or\n"
    "                        whole; 'auto' (default): by chunk where that\n"
    "                        costs no time (a convolution whose batch's\n"
    "                        column matrix is no larger than its weight);\n"
    "                        'on': wherever possible (slower); results\n"
    "                        differ by rounding between the modes\n"
    "  --keep-resident on|off\n"
    "                        'on' (default): a tensor that leaves the\n"
    "                        window stays in RAM until its next use where\n"
    "                        the window's memory has room for it (fewer\n"
    "                        bytes moved, same peak); 'off': evicted at\n"
    "                        once\n"
    "  --recompute auto|on|activations|off\n"
    "                        what backward computes again instead of\n"
    "                        keeping (or swapping) it from the forward:\n"
    "                        an activation that follows batch\n"
    "                        normalization, from the normalization's\n"
    "                        input ('activations'); also the output of a\n"
    "                        cheap convolution before a normalization\n"
    "                        (a 1x1 expansion), from the convolution's\n"
    "                        input ('on'); 'auto' (default): activations,\n"
    "                        and convolutions when offloading unless\n"
    "                        --memory-budget then refuses the run;\n"
    "                        results are bit-identical in every mode\n"
    "  --log-states FILE     log every step state transition to FILE\n"
    "                        ('-': stderr)\n"
    "  --trace FILE.json     Chrome trace-event file (Perfetto,\n"
    "                        chrome://tracing): executor steps, onloader\n"
    "                        reads, offloader writes, step state changes\n";

typedef struct opts {
  const char *model, *data, *save;
  long epochs, iterations, batch, train_samples, eval_samples, shuffle;
  long seed, threads, log_every;
  const char *window;      /* "N", "all" or NULL (the INI decides) */
  const char *swap_dir;    /* NULL: the INI's, else the default */
  const char *io;          /* NULL: auto */
  const char *prefetch;    /* NULL: steps */
  const char *log_states;  /* NULL: off */
  const char *report_json; /* NULL: off */
  const char *budget;      /* --memory-budget, NULL: the INI's */
  const char *trace;       /* --trace, NULL: off */
  long warmup;             /* iterations left out of the report */
  int no_direct;
  const char *chunk_grads; /* --chunk-grads auto|on|off, NULL: auto */
  const char *keep;        /* --keep-resident on|off, NULL: on */
  const char *recompute;   /* --recompute auto|on|activations|off, NULL:
                              auto */
  const char *checkpoint;  /* --checkpoint, NULL: off */
  long checkpoint_every;   /* 0: once per epoch */
  const char *resume;      /* --resume, NULL: a new run */
  double floor_bw[2];      /* --floor-bandwidth read, write (MiB/s), 0: off */
} opts;

/* The signal that asks the run to stop (SIGINT, SIGTERM), 0: none. Set by
 * the handler; the loop checks it between iterations. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

/* SA_RESETHAND: a second signal of the same kind kills at once (the swap
 * file is unnamed; a checkpoint being written stays in FILE.tmp). The
 * offload engine's I/O threads block all signals. */
static void install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* --floor-bandwidth "READ,WRITE" (MiB/s, each > 0) into bw[0..2). Returns
 * 0, or -1 after a usage error naming the option and the value. */
static int parse_bandwidths(const char *v, double bw[2]) {
  char *end = NULL;
  if (v) {
    errno = 0;
    bw[0] = strtod(v, &end);
    if (*end == ',')
      bw[1] = strtod(end + 1, &end);
  }
  if (!v || errno || *end || end == v || !(bw[0] > 0) || !(bw[1] > 0) ||
      !isfinite(bw[0]) || !isfinite(bw[1])) {
    cli_error("--floor-bandwidth: expected READ,WRITE in MiB/s (e.g. "
              "2000,3000), got '%s'",
              v ? v : "");
    bw[0] = bw[1] = 0;
    return -1;
  }
  return 0;
}

static int parse_opts(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->eval_samples = -1;
  o->shuffle = 512;
  o->seed = 1;
  o->threads = sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    long *target = NULL, min = 1, max = 1L << 40;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 1;
    } else if (!strcmp(a, "--no-direct")) {
      o->no_direct = 1;
      continue;
    } else if (!strcmp(a, "--data") || !strcmp(a, "--save") ||
               !strcmp(a, "--window") || !strcmp(a, "--swap-dir") ||
               !strcmp(a, "--io") || !strcmp(a, "--log-states") ||
               !strcmp(a, "--report-json") || !strcmp(a, "--memory-budget") ||
               !strcmp(a, "--trace") || !strcmp(a, "--checkpoint") ||
               !strcmp(a, "--resume") || !strcmp(a, "--prefetch") ||
               !strcmp(a, "--chunk-grads") || !strcmp(a, "--keep-resident") ||
               !strcmp(a, "--recompute")) {
      const char **dst = !strcmp(a, "--data")            ? &o->data
                         : !strcmp(a, "--save")          ? &o->save
                         : !strcmp(a, "--window")        ? &o->window
                         : !strcmp(a, "--swap-dir")      ? &o->swap_dir
                         : !strcmp(a, "--io")            ? &o->io
                         : !strcmp(a, "--log-states")    ? &o->log_states
                         : !strcmp(a, "--memory-budget") ? &o->budget
                         : !strcmp(a, "--trace")         ? &o->trace
                         : !strcmp(a, "--checkpoint")    ? &o->checkpoint
                         : !strcmp(a, "--resume")        ? &o->resume
                         : !strcmp(a, "--prefetch")      ? &o->prefetch
                         : !strcmp(a, "--chunk-grads")   ? &o->chunk_grads
                         : !strcmp(a, "--keep-resident") ? &o->keep
                         : !strcmp(a, "--recompute")     ? &o->recompute
                                                         : &o->report_json;
      if (!(*dst = cli_value(argc, argv, &i))) {
        cli_error("option %s needs a value", a);
        return -1;
      }
      continue;
    } else if (!strcmp(a, "--floor-bandwidth")) {
      if (parse_bandwidths(cli_value(argc, argv, &i), o->floor_bw) != 0)
        return -1;
      continue;
    } else if (!strcmp(a, "--epochs")) {
      target = &o->epochs;
    } else if (!strcmp(a, "--iterations")) {
      target = &o->iterations;
    } else if (!strcmp(a, "--batch-size")) {
      target = &o->batch, max = 1 << 20;
    } else if (!strcmp(a, "--train-samples")) {
      target = &o->train_samples;
    } else if (!strcmp(a, "--eval-samples")) {
      target = &o->eval_samples, min = 0;
    } else if (!strcmp(a, "--shuffle-buffer")) {
      target = &o->shuffle, min = 0, max = 1 << 24;
    } else if (!strcmp(a, "--seed")) {
      target = &o->seed, min = 0;
    } else if (!strcmp(a, "--threads")) {
      target = &o->threads, max = 256;
    } else if (!strcmp(a, "--log-every")) {
      target = &o->log_every;
    } else if (!strcmp(a, "--warmup")) {
      target = &o->warmup, min = 0;
    } else if (!strcmp(a, "--checkpoint-every")) {
      target = &o->checkpoint_every;
    } else if (a[0] == '-') {
      cli_error("train: unknown option '%s' (try train --help)", a);
      return -1;
    } else if (!o->model) {
      o->model = a;
      continue;
    } else {
      cli_error("train: unexpected argument '%s'", a);
      return -1;
    }
    if (cli_int(a, cli_value(argc, argv, &i), min, max, target) != 0)
      return -1;
  }
  if (!o->model) {
    fputs(usage, stderr);
    return -1;
  }
  if (o->checkpoint_every && !o->checkpoint) {
    cli_error("--checkpoint-every needs --checkpoint FILE");
    return -1;
  }
  return 0;
}

/* Open the training and test sets per the options and the config. */
static int open_data(const opts *o, const nto_config *c, nto_shape in, int k,
                     nto_dataset **train, nto_dataset **test, nto_err *err) {
  *train = *test = NULL;
  int rc;
  if (o->data && !strcmp(o->data, "synthetic")) {
    size_t n = o->train_samples ? (size_t)o->train_samples : 2048;
    rc = nto_dataset_open_synthetic(train, n, in, k, (uint64_t)o->seed, err);
    if (rc == 0)
      rc = nto_dataset_open_synthetic(test, n / 4 ? n / 4 : 1, in, k,
                                      (uint64_t)o->seed + 7919, err);
    return rc;
  }
  if (!o->data && c->train_set.kind == NTO_DATA_FILE) {
    rc = nto_dataset_open_raw(train, c->train_set.path, in, k, err);
    const nto_data_conf *t =
        c->test_set.kind == NTO_DATA_FILE ? &c->test_set : &c->valid_set;
    if (rc == 0 && t->kind == NTO_DATA_FILE)
      rc = nto_dataset_open_raw(test, t->path, in, k, err);
    return rc;
  }
  const char *dir = o->data ? o->data : DEFAULT_DATA;
  rc = nto_dataset_open_idx_dir(train, dir, "train", in, k, err);
  if (rc == 0)
    rc = nto_dataset_open_idx_dir(test, dir, "t10k", in, k, err);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Percentile q in [0,1] of n values (sorts a copy). */
static double percentile(const double *v, size_t n, double q) {
  if (n == 0)
    return 0;
  double *s = malloc(n * sizeof *s);
  if (!s)
    return 0;
  memcpy(s, v, n * sizeof *s);
  qsort(s, n, sizeof *s, cmp_double);
  double r = s[(size_t)floor(q * (double)(n - 1) + 0.5)];
  free(s);
  return r;
}

static void fmt_eta(double s, char *buf, size_t len) {
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else
    snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
}

typedef struct run {
  opts o;
  nto_config c;
  nto_model *m;
  nto_dataset *train, *test;
  float *x, *y;
  int batch, k;
  size_t sample;
  double *step_s; /* per iteration step time */
  long n_steps, planned;
  double loss_sum;
  long correct, seen; /* since the last progress line */
  double last_loss, last_acc;
  double test_loss, test_acc;
  long test_n;
  int tty;
  int offload;                  /* the model offloads */
  FILE *state_log;              /* --log-states, or NULL */
  FILE *trace;                  /* --trace, or NULL */
  pthread_mutex_t trace_mu;     /* trace events come from three threads */
  int trace_events;             /* written so far */
  double trace_t0;              /* ms, CLOCK_MONOTONIC: ts 0 of the trace */
  const char *window_mode;      /* "fixed", "auto", "budget" or "all" */
  const char *prefetch;         /* "steps", "time" or "room" */
  size_t budget;                /* bytes, 0: none */
  char budget_src[256];         /* where the budget came from (errors) */
  long it0;                     /* iterations done before this process
                                   (--resume), 0 for a new run */
  long epoch, ie;               /* the loop's epoch and iterations in it
                                   (checkpoints) */
  long ckpt_it;                 /* iteration of the last checkpoint in
                                   --checkpoint's file, -1: none */
  int n_ckpt;                   /* checkpoints written */
  double ckpt_s;                /* time spent writing them */
  int stopped;                  /* a signal stopped the loop */
  uint64_t io_read, io_written; /* during training steps only */
  double stall_ms;              /* during training steps only */
  long relocated;               /* the same: buffers at a second offset */
  double busy_ms[2];            /* onloader, offloader busy time: the same */
  double device_ms;             /* time with a request at the device: the
                                   same */
  double *step_ms;              /* per training step: compute ms summed over
                                   the measured iterations (offload only) */
  double *step_tmp;             /* scratch: the last pass's step times */
  long step_passes;             /* passes summed into step_ms */
} run;

static void progress(run *r, long epoch, long it, long it_in_epoch,
                     long per_epoch, double elapsed, int final) {
  double acc = r->seen ? 100.0 * r->correct / r->seen : 0;
  double loss = r->seen ? r->loss_sum / ((double)r->seen / r->batch) : 0;
  double ips = elapsed > 0 ? (it - r->it0) / elapsed : 0;
  char eta[32], rss[32];
  fmt_eta(ips > 0 ? (r->planned - it) / ips : 0, eta, sizeof eta);
  cli_bytes(nto_peak_rss_bytes(), rss, sizeof rss);
  printf("%sepoch %ld iter %ld/%ld (%ld/%ld) loss %.4f acc %.1f%% %.2f it/s "
         "ETA %s peak RSS %s%s",
         r->tty ? "\r" : "", epoch, it, r->planned, it_in_epoch, per_epoch,
         loss, acc, ips, eta, rss, r->tty ? "\033[K" : "\n");
  if (r->tty && final)
    putchar('\n');
  fflush(stdout);
  r->last_loss = loss;
  r->last_acc = acc;
  r->loss_sum = 0;
  r->correct = r->seen = 0;
}

static int evaluate(run *r, long epoch, nto_err *err) {
  if (!r->test || r->o.eval_samples == 0)
    return 0;
  nto_dataset_limit(r->test,
                    r->o.eval_samples > 0 ? (size_t)r->o.eval_samples : 0);
  int rc = nto_dataset_rewind(r->test, err);
  double loss = 0;
  long correct = 0, n = 0;
  for (;;) {
    int got = 0;
    nto_step_stats st;
    if (stop_signal) { /* the checkpoint is from before the evaluation */
      r->stopped = 1;
      return rc;
    }
    if (rc == 0)
      rc = nto_dataset_next(r->test, r->x, r->y, r->batch, &got, err);
    if (rc != 0 || got == 0)
      break;
    rc = nto_model_eval_step(r->m, r->x, r->y, got, &st, err);
    loss += st.loss * got;
    correct += st.correct;
    n += got;
  }
  if (rc != 0 || n == 0)
    return rc;
  r->test_loss = loss / n;
  r->test_acc = 100.0 * correct / n;
  r->test_n = n;
  printf("epoch %ld: test loss %.4f accuracy %.2f%% (%ld samples)\n", epoch,
         r->test_loss, r->test_acc, n);
  fflush(stdout);
  return 0;
}

/* A double as the 64 bits a checkpoint value holds, and back. */
static uint64_t dbits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}

static double bitsd(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

/* The model's training state as io/checkpoint.h describes it into *s;
 * its tensors are the model's list *ts (nto_model_state_tensors; the
 * caller frees it with nto_model_weights_free, also after an error).
 * Returns 0 or that list's error. */
static int model_ckpt_state(nto_model *m, nto_ckpt_state *s,
                            nto_named_tensor **ts, nto_err *err) {
  nto_model_train_state t;
  nto_model_get_train_state(m, &t);
  *s = (nto_ckpt_state){.optimizer = nto_model_optimizer_name(m),
                        .update_chunk = nto_model_update_chunk(m),
                        .batch = nto_model_batch(m),
                        .iteration = t.iteration,
                        .rng = {t.rng[0], t.rng[1]}};
  *ts = NULL;
  int rc = nto_model_state_tensors(m, ts, &s->n_tensors, err);
  s->tensors = *ts;
  return rc;
}

/* Write --checkpoint (unless it already holds this iteration): the model
 * and data state (io/checkpoint.h) plus the loop's position and the
 * progress window's sums, so that a resumed run reports the same. */
static int write_checkpoint(run *r, nto_err *err) {
  if (!r->o.checkpoint || r->ckpt_it == r->n_steps)
    return 0;
  nto_ckpt_value v[8];
  int n = 0;
  nto_ckpt_set(&v[n++], "loop.epoch", (uint64_t)r->epoch);
  nto_ckpt_set(&v[n++], "loop.iter_in_epoch", (uint64_t)r->ie);
  nto_ckpt_set(&v[n++], "loop.loss_sum", dbits(r->loss_sum));
  nto_ckpt_set(&v[n++], "loop.correct", (uint64_t)r->correct);
  nto_ckpt_set(&v[n++], "loop.seen", (uint64_t)r->seen);
  nto_ckpt_set(&v[n++], "loop.last_loss", dbits(r->last_loss));
  nto_ckpt_set(&v[n++], "loop.last_acc", dbits(r->last_acc));
  double t = now_s();
  nto_ckpt_state st;
  nto_named_tensor *ts;
  int rc = model_ckpt_state(r->m, &st, &ts, err);
  if (rc == 0)
    rc = nto_checkpoint_save(r->o.checkpoint, r->o.model, &st, r->train, v, n,
                             err);
  nto_model_weights_free(ts, st.n_tensors);
  if (rc != 0)
    return rc;
  t = now_s() - t;
  r->ckpt_s += t;
  r->n_ckpt++;
  r->ckpt_it = r->n_steps;
  if (!r->tty) {
    printf("checkpoint: iteration %ld written to %s (%.2f s)\n", r->n_steps,
           r->o.checkpoint, t);
    fflush(stdout);
  }
  return 0;
}

/* --resume: restore the model, the data position and the loop's state.
 * Returns 0 or the checkpoint's error (NTO_ECONFIG: another model). */
static int resume(run *r, nto_err *err) {
  nto_ckpt_value v[32];
  int n = 0;
  nto_ckpt_state st;
  nto_named_tensor *ts;
  int rc = model_ckpt_state(r->m, &st, &ts, err);
  if (rc == 0)
    rc = nto_checkpoint_load(r->o.resume, &st, r->train, v, 32, &n, err);
  nto_model_weights_free(ts, st.n_tensors);
  if (rc != 0)
    return rc;
  nto_model_train_state t = {st.iteration, {st.rng[0], st.rng[1]}};
  nto_model_set_train_state(r->m, &t);
  static const char *const need[] = {"loop.epoch", "loop.iter_in_epoch"};
  for (int i = 0; i < 2; i++)
    if (nto_ckpt_get(v, n, need[i], UINT64_MAX) == UINT64_MAX)
      return nto_err_set(err, NTO_EDATA,
                         "checkpoint %s has no value %s: it was not written "
                         "by train",
                         r->o.resume, need[i]);
  r->it0 = r->n_steps = nto_model_iteration(r->m);
  r->epoch = (long)nto_ckpt_get(v, n, "loop.epoch", 0);
  r->ie = (long)nto_ckpt_get(v, n, "loop.iter_in_epoch", 0);
  r->loss_sum = bitsd(nto_ckpt_get(v, n, "loop.loss_sum", 0));
  r->correct = (long)nto_ckpt_get(v, n, "loop.correct", 0);
  r->seen = (long)nto_ckpt_get(v, n, "loop.seen", 0);
  r->last_loss = bitsd(nto_ckpt_get(v, n, "loop.last_loss", 0));
  r->last_acc = bitsd(nto_ckpt_get(v, n, "loop.last_acc", 0));
  /* The file at --checkpoint already holds this state when it is the one
   * resumed from. */
  r->ckpt_it =
      r->o.checkpoint && !strcmp(r->o.checkpoint, r->o.resume) ? r->it0 : -1;
  return 0;
}

/*
 * The training loop: epochs of full batches (the last partial batch of an
 * epoch is dropped), an evaluation after each epoch, --checkpoint every K
 * iterations (counted from the start of the run, also across --resume).
 * A stop signal ends the loop between iterations (or during an
 * evaluation) with r->stopped set; the caller writes the checkpoint.
 * Resumed, the loop starts at the checkpoint's epoch and iteration, with
 * the dataset already positioned by nto_checkpoint_load.
 */
static int train_loop(run *r, nto_err *err) {
  long epochs = r->o.epochs ? r->o.epochs : r->c.model.epochs;
  long per_epoch = (long)(nto_dataset_size(r->train) / (size_t)r->batch);
  if (per_epoch == 0)
    return nto_err_set(err, NTO_EDATA,
                       "%zu training samples are fewer than one batch of %d",
                       nto_dataset_size(r->train), r->batch);
  r->planned = epochs * per_epoch;
  if (r->o.iterations && r->o.iterations < r->planned)
    r->planned = r->o.iterations;
  r->step_s =
      calloc((size_t)(r->planned > 0 ? r->planned : 1), sizeof *r->step_s);
  if (!r->step_s)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (r->offload) {
    size_t S = (size_t)nto_model_pass_steps(r->m, NTO_PASS_TRAIN);
    r->step_ms = calloc(S, sizeof *r->step_ms);
    r->step_tmp = calloc(S, sizeof *r->step_tmp);
    if (!r->step_ms || !r->step_tmp)
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  long log_every = r->o.log_every ? r->o.log_every
                                  : (per_epoch / 20 > 0 ? per_epoch / 20 : 1);
  long every = r->o.checkpoint_every ? r->o.checkpoint_every : per_epoch;
  if (r->it0 >= r->planned)
    printf("nothing left to train: the checkpoint is at iteration %ld of "
           "%ld\n",
           r->it0, r->planned);
  double t0 = now_s();
  long it = r->it0;
  long e0 = r->it0 > 0 && r->epoch >= 1 ? r->epoch : 1;
  for (long e = e0; e <= epochs && it < r->planned && !r->stopped; e++) {
    int rc = 0;
    long ie = 0;
    if (e == e0 && r->it0 > 0)
      ie = r->ie; /* positioned by the checkpoint */
    else
      rc = nto_dataset_rewind(r->train, err);
    while (rc == 0 && it < r->planned) {
      if (stop_signal) {
        r->stopped = 1;
        break;
      }
      int got = 0;
      rc = nto_dataset_next(r->train, r->x, r->y, r->batch, &got, err);
      if (rc != 0 || got < r->batch)
        break; /* the last partial batch of an epoch is dropped */
      nto_step_stats st;
      nto_offload_stats before, after;
      nto_model_offload_stats(r->m, &before);
      double s0 = now_s();
      rc = nto_model_train_step(r->m, r->x, r->y, &st, err);
      r->step_s[it] = now_s() - s0;
      nto_model_offload_stats(r->m, &after);
      if (it >= r->it0 + r->o.warmup) {
        r->io_read += after.read_bytes - before.read_bytes;
        r->io_written += after.written_bytes - before.written_bytes;
        r->stall_ms += after.stall_ms - before.stall_ms;
        r->relocated += after.relocated - before.relocated;
        r->busy_ms[0] += after.read_busy_ms - before.read_busy_ms;
        r->busy_ms[1] += after.write_busy_ms - before.write_busy_ms;
        r->device_ms += after.device_busy_ms - before.device_busy_ms;
        if (rc == 0 && r->step_ms &&
            nto_model_step_times(r->m, r->step_tmp) == 0) {
          for (int s = 0; s < nto_model_pass_steps(r->m, NTO_PASS_TRAIN); s++)
            r->step_ms[s] += r->step_tmp[s];
          r->step_passes++;
        }
      }
      if (rc != 0)
        break;
      it++, ie++;
      r->n_steps = it;
      r->epoch = e;
      r->ie = ie;
      r->loss_sum += st.loss;
      r->correct += st.correct;
      r->seen += st.samples;
      int last = it == r->planned || ie == per_epoch;
      if (r->tty || it % log_every == 0 || last)
        progress(r, e, it, ie, per_epoch, now_s() - t0, last);
      if (r->o.checkpoint && it % every == 0)
        rc = write_checkpoint(r, err);
    }
    if (rc != 0)
      return rc;
    if (r->stopped)
      break;
    rc = evaluate(r, e, err);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* What will be resident, before training starts. */
static void print_plan(run *r) {
  char a[32], b[32], c[32];
  nto_mem_plan p = nto_model_mem_plan(r->m);
  nto_offload_stats st;
  if (nto_model_offload_stats(r->m, &st) != 0) {
    printf("planned memory: %s (all resident)\n",
           cli_bytes(p.total, a, sizeof a));
    return;
  }
  printf("offload: window %d steps, %s, swap file %s in %s%s; resident "
         "tensors in a region of %s + workspace %s\n",
         st.window, st.io, cli_bytes(st.swap_bytes, a, sizeof a), st.swap_dir,
         st.direct ? " (O_DIRECT)" : " (page cache)",
         cli_bytes(st.region, b, sizeof b),
         cli_bytes(p.workspace, c, sizeof c));
  if (st.note[0])
    printf("offload: %s\n", st.note);
  if (nto_model_convs_kept(r->m))
    printf("recompute: convolutions' outputs kept, not recomputed: "
           "recomputed, they would not fit the memory budget "
           "(as --recompute activations)\n");
}

/* The report's figures, over the iterations after the warm-up. */
typedef struct metrics {
  long from, n; /* measured iterations [from, from + n) */
  double median_ms, p90_ms;
  double stall_ms, read_mib, written_mib; /* per measured iteration */
  double read_busy_ms, write_busy_ms;     /* the same */
  double device_busy_ms;                  /* the same */
  double relocated;                       /* the same: buffers placed at
                                             their second offset */
  int offload;                            /* 0: all resident, st unset */
  nto_offload_stats st;
  nto_mem_plan plan;
  size_t peak_rss;
  /* --floor-bandwidth: the region floor (floor.h) of the final window's
   * region from the measured iterations' mean step times, reads and
   * writes sharing the device [0] or on separate channels [1] */
  int has_floor;
  nto_region_floor floor[2];
} metrics;

/* The region floors of the measured iterations (metrics.floor), when
 * --floor-bandwidth was given and the model offloads; a failure (out of
 * memory) leaves has_floor 0 and is reported as a warning. */
static void measure_floor(run *r, metrics *mx) {
  if (!r->o.floor_bw[0] || !mx->offload || !r->step_ms || !r->step_passes)
    return; /* no measured pass (a warm-up of every iteration) */
  const nto_plan *p = nto_model_plan(r->m, NTO_PASS_TRAIN);
  for (int s = 0; s < p->n_steps; s++)
    r->step_tmp[s] = r->step_ms[s] / (double)r->step_passes;
  double rbw = r->o.floor_bw[0] * 1048576.0 / 1e3; /* bytes per ms */
  double wbw = r->o.floor_bw[1] * 1048576.0 / 1e3;
  nto_err err = {0};
  int rc = 0;
  for (int c = 0; c < 2 && rc == 0; c++)
    rc = nto_region_floor_compute(p, r->step_tmp, mx->st.region, rbw, wbw,
                                  c ? NTO_IO_SEPARATE : NTO_IO_SHARED,
                                  &mx->floor[c], &err);
  if (rc != 0)
    cli_error("warning: no region floor: %s", err.msg);
  mx->has_floor = rc == 0;
}

static void measure(run *r, metrics *mx) {
  memset(mx, 0, sizeof *mx);
  /* Too few iterations for the warm-up: measure them all (and say so).
   * Resumed: only this process's iterations (from it0) were timed. */
  mx->from = r->it0 + r->o.warmup < r->n_steps ? r->it0 + r->o.warmup : r->it0;
  mx->n = r->n_steps - mx->from;
  double n = mx->n > 0 ? (double)mx->n : 1;
  mx->median_ms = percentile(r->step_s + mx->from, (size_t)mx->n, 0.5) * 1e3;
  mx->p90_ms = percentile(r->step_s + mx->from, (size_t)mx->n, 0.9) * 1e3;
  mx->stall_ms = r->stall_ms / n;
  mx->relocated = (double)r->relocated / n;
  mx->read_busy_ms = r->busy_ms[0] / n;
  mx->write_busy_ms = r->busy_ms[1] / n;
  mx->device_busy_ms = r->device_ms / n;
  mx->read_mib = r->io_read / n / 1048576.0;
  mx->written_mib = r->io_written / n / 1048576.0;
  mx->offload = nto_model_offload_stats(r->m, &mx->st) == 0;
  mx->plan = nto_model_mem_plan(r->m);
  mx->peak_rss = nto_peak_rss_bytes();
  measure_floor(r, mx);
}

/* --floor-bandwidth: the region floor and the median against it. */
static void report_floor(run *r, const metrics *mx) {
  if (!mx->has_floor)
    return;
  const nto_region_floor *f = &mx->floor[0];
  char a[32], n0[64], n1[64];
  printf("region floor      %.1f ms per iteration: the fastest a region of "
         "%s allows at %.0f MiB/s read, %.0f MiB/s write (%.1f ms with "
         "separate read and write channels); compute %.1f ms; median / "
         "floor %.2f\n",
         f->floor_ms, cli_bytes(mx->st.region, a, sizeof a), r->o.floor_bw[0],
         r->o.floor_bw[1], mx->floor[1].floor_ms, f->compute_ms,
         mx->median_ms / (f->floor_ms + 1e-9));
  if (f->first >= 0)
    printf("                  most I/O-bound: steps %s .. %s, +%.1f ms over "
           "their compute (%.1f MiB read, %.1f MiB written that the region "
           "cannot hold)\n",
           nto_model_step_name(r->m, NTO_PASS_TRAIN, f->first, n0, sizeof n0),
           nto_model_step_name(r->m, NTO_PASS_TRAIN, f->last, n1, sizeof n1),
           f->excess_ms, f->read_bytes / 1048576.0,
           f->written_bytes / 1048576.0);
}

/* Offload lines of the end-of-run report. */
static void report_offload(run *r, const metrics *mx) {
  char a[32], b[32], c[32], d[32];
  const nto_offload_stats *st = &mx->st;
  if (!mx->offload) {
    printf("window            all (every tensor resident)\n");
    return;
  }
  printf("window            %d steps%s (%s%s, swap %s%s, checksums %s)\n",
         st->window,
         !strcmp(r->window_mode, "auto")     ? ", adaptive (auto)"
         : !strcmp(r->window_mode, "budget") ? ", the largest within the "
                                               "memory budget"
                                             : "",
         st->io, st->fixed ? " with registered buffers" : "", st->swap_dir,
         st->direct ? ", O_DIRECT" : ", page cache",
         st->checksum ? "on (NTO_SWAP_CHECKSUM=1)" : "off");
  if (st->fixed_note[0])
    printf("                  buffers not registered: %s\n", st->fixed_note);
  printf("resident tensors  peak %s in a region of %s (planned peak %s) + "
         "workspace %s\n",
         cli_bytes(st->peak_resident, a, sizeof a),
         cli_bytes(st->region_max, d, sizeof d),
         cli_bytes(st->planned_peak, b, sizeof b),
         cli_bytes(mx->plan.workspace, c, sizeof c));
  if (st->region_max != st->region)
    printf("                  (the largest window's region; the final "
           "window's region is %s, its planned peak above)\n",
           cli_bytes(st->region, a, sizeof a));
  if (st->ahead > 0)
    printf("prefetch          by %s: reads start up to %d steps beyond "
           "the window (measured step times and read bandwidth)\n",
           r->prefetch, st->ahead);
  else if (!strcmp(r->prefetch, "room") && nto_model_room_declined(r->m))
    printf("prefetch          by room: no read ahead of the window (the "
           "device had no idle time for the swap traffic it adds)\n");
  else if (strcmp(r->prefetch, "steps") != 0)
    printf("prefetch          by %s: no read ahead of the window (no room "
           "for it, or no step times measured yet)\n",
           r->prefetch);
  else
    printf("prefetch          by steps: step s+N's reads start at step s\n");
  printf("stall             %.1f ms per iteration (%.1f%% of the median "
         "iteration), executor waiting for I/O (reads, or pages a write "
         "still holds)\n",
         mx->stall_ms, 100.0 * mx->stall_ms / (mx->median_ms + 1e-9));
  if (mx->relocated > 0)
    printf("                  %.1f buffers per iteration placed at their "
           "second offset: their planned pages were still being written\n",
           mx->relocated);
  printf("I/O threads       busy %.1f ms reading, %.1f ms writing per "
         "iteration; a request at the device %.1f ms\n",
         mx->read_busy_ms, mx->write_busy_ms, mx->device_busy_ms);
  printf("swap traffic      %.1f MiB read, %.1f MiB written per iteration "
         "(planned %.1f / %.1f)\n",
         mx->read_mib, mx->written_mib, st->planned_read / 1048576.0,
         st->planned_written / 1048576.0);
  report_floor(r, mx);
}

/* --window auto: N, stall and I/O busy time per iteration. Long runs
 * show the first 30 iterations, then only those where N changed. */
static void report_window_trace(run *r) {
  int n = 0;
  const nto_window_sample *v = nto_model_window_trace(r->m, &n);
  if (n == 0)
    return;
  printf("window trace      iteration: N, iteration ms, then over the part "
         "after the priming reads: stall ms (%%), busier I/O thread (%%)\n");
  int skipped = 0;
  for (int i = 0; i < n; i++) {
    if (i >= 30 && v[i].window == v[i - 1].window) {
      skipped++;
      continue;
    }
    double part = v[i].measured_ms > 0 ? v[i].measured_ms : 1;
    printf("                  %d: N=%d, %.1f ms, stall %.1f ms of %.1f "
           "(%.1f%%), I/O %.0f%%%s\n",
           i + 1, v[i].window, v[i].iteration_ms, v[i].stall_ms,
           v[i].measured_ms, 100 * v[i].stall_ms / part,
           100 * v[i].io_busy_ms /
               (v[i].iteration_ms > 0 ? v[i].iteration_ms : 1),
           v[i].judged ? ""
           : v[i].before_read_ahead
               ? " (before the read-ahead by time: not judged)"
               : " (priming: not judged)");
  }
  if (skipped)
    printf("                  (%d more iterations with N unchanged)\n",
           skipped);
}

static void report(run *r, const metrics *mx, double total_s) {
  const nto_mem_plan *p = &mx->plan;
  char a[32], b[32], c[32], d[32], e[32], f[32];
  printf("\n== report: %s ==\n", r->o.model);
  printf("iterations        %ld (batch %d, %ld samples) in %.1f s\n",
         r->n_steps, r->batch, r->n_steps * r->batch, total_s);
  if (r->it0 > 0)
    printf("resumed           from %s at iteration %ld: %ld iterations in "
           "this run\n",
           r->o.resume, r->it0, r->n_steps - r->it0);
  if (mx->from > r->it0)
    printf("measured          iterations %ld-%ld (after a warm-up of %ld)\n",
           mx->from + 1, r->n_steps, mx->from - r->it0);
  else if (r->o.warmup > 0)
    printf("measured          all %ld iterations (too few for a warm-up of "
           "%ld)\n",
           r->n_steps - r->it0, r->o.warmup);
  printf("train             loss %.4f accuracy %.1f%% (last progress "
         "window)\n",
         r->last_loss, r->last_acc);
  if (r->test_n)
    printf("test              loss %.4f accuracy %.2f%% (%ld samples)\n",
           r->test_loss, r->test_acc, r->test_n);
  printf("iteration time    median %.1f ms, p90 %.1f ms (%.2f it/s)\n",
         mx->median_ms, mx->p90_ms,
         mx->median_ms > 0 ? 1e3 / mx->median_ms : 0);
  printf("peak RSS          %s (kernel VmHWM)\n",
         cli_bytes(mx->peak_rss, a, sizeof a));
  printf("planned tensors   %s all resident = weights %s + optimizer %s + "
         "activations/gradients %s + workspace %s\n",
         cli_bytes(p->total, b, sizeof b), cli_bytes(p->weights, c, sizeof c),
         cli_bytes(p->opt_state, d, sizeof d), cli_bytes(p->arena, e, sizeof e),
         cli_bytes(p->workspace, f, sizeof f));
  if (r->budget)
    printf("memory budget     %s for resident tensors + workspace\n",
           cli_bytes(r->budget, a, sizeof a));
  if (r->o.checkpoint)
    printf("checkpoint        %s: %d written (%.2f s in all), the last at "
           "iteration %ld\n",
           r->o.checkpoint, r->n_ckpt, r->ckpt_s, r->ckpt_it);
  report_offload(r, mx);
  report_window_trace(r);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *s) {
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

/* --report-json: the report's figures, bytes and ms, for `bench` and
 * scripts (schema in docs/cli.md). Returns 0, or NTO_EIO naming the file. */
static int report_json(run *r, const metrics *mx, double total_s,
                       nto_err *err) {
  FILE *f = fopen(r->o.report_json, "w");
  if (!f)
    return nto_err_set(err, NTO_EIO, "--report-json: cannot open %s: %s",
                       r->o.report_json, strerror(errno));
  const nto_offload_stats *st = &mx->st;
  size_t resident =
      mx->offload ? st->peak_resident : mx->plan.total - mx->plan.workspace;
  fprintf(f, "{\n  \"model\": ");
  json_string(f, r->o.model);
  fprintf(f, ",\n  \"batch\": %d,\n  \"iterations\": %ld,\n", r->batch,
          r->n_steps);
  fprintf(f, "  \"warmup\": %ld,\n  \"measured_iterations\": %ld,\n", mx->from,
          mx->n);
  fprintf(f, "  \"total_s\": %.3f,\n", total_s);
  if (mx->offload)
    fprintf(f, "  \"window\": %d,\n", st->window);
  else
    fprintf(f, "  \"window\": \"all\",\n");
  fprintf(f, "  \"window_mode\": \"%s\",\n", r->window_mode);
  fprintf(f, "  \"blas_kernels\": ");
  json_string(f, nto_blas_core());
  fprintf(f, ",\n");
  fprintf(f, "  \"prefetch\": \"%s\",\n", mx->offload ? r->prefetch : "none");
  fprintf(f, "  \"prefetch_ahead_steps\": %d,\n", mx->offload ? st->ahead : 0);
  fprintf(f, "  \"recompute\": \"%s\",\n",
          r->o.recompute ? r->o.recompute : "auto");
  fprintf(f, "  \"recomputed_convolutions\": %d,\n",
          nto_model_recomputed_convs(r->m));
  fprintf(f, "  \"prefetch_room_declined\": %s,\n",
          mx->offload && nto_model_room_declined(r->m) ? "true" : "false");
  fprintf(f, "  \"memory_budget_bytes\": %zu,\n", r->budget);
  fprintf(f, "  \"io\": ");
  json_string(f, mx->offload ? st->io : "none");
  fprintf(f, ",\n  \"direct\": %s,\n",
          mx->offload && st->direct ? "true" : "false");
  fprintf(f, "  \"registered_buffers\": %s,\n",
          mx->offload && st->fixed ? "true" : "false");
  fprintf(f, "  \"peak_rss_bytes\": %zu,\n", mx->peak_rss);
  fprintf(f, "  \"resident_peak_bytes\": %zu,\n", resident);
  fprintf(f, "  \"region_bytes\": %zu,\n",
          mx->offload ? st->region_max : resident);
  fprintf(f, "  \"workspace_bytes\": %zu,\n", mx->plan.workspace);
  fprintf(f, "  \"all_resident_bytes\": %zu,\n", mx->plan.total);
  fprintf(f, "  \"iteration_ms_median\": %.3f,\n", mx->median_ms);
  fprintf(f, "  \"iteration_ms_p90\": %.3f,\n", mx->p90_ms);
  fprintf(f, "  \"stall_ms_per_iteration\": %.3f,\n", mx->stall_ms);
  fprintf(f, "  \"relocated_per_iteration\": %.3f,\n", mx->relocated);
  fprintf(f, "  \"read_busy_ms_per_iteration\": %.3f,\n", mx->read_busy_ms);
  fprintf(f, "  \"write_busy_ms_per_iteration\": %.3f,\n", mx->write_busy_ms);
  fprintf(f, "  \"device_busy_ms_per_iteration\": %.3f,\n", mx->device_busy_ms);
  fprintf(f, "  \"read_mib_per_iteration\": %.3f,\n", mx->read_mib);
  fprintf(f, "  \"written_mib_per_iteration\": %.3f,\n", mx->written_mib);
  fprintf(f, "  \"planned_read_mib_per_iteration\": %.3f,\n",
          mx->offload ? st->planned_read / 1048576.0 : 0.0);
  fprintf(f, "  \"planned_written_mib_per_iteration\": %.3f,\n",
          mx->offload ? st->planned_written / 1048576.0 : 0.0);
  if (mx->has_floor) {
    fprintf(f, "  \"floor_bandwidth_mib_s\": [%.3f, %.3f],\n", r->o.floor_bw[0],
            r->o.floor_bw[1]);
    fprintf(f, "  \"step_compute_ms\": %.3f,\n", mx->floor[0].compute_ms);
    fprintf(f, "  \"region_floor_ms\": %.3f,\n", mx->floor[0].floor_ms);
    fprintf(f, "  \"region_floor_separate_ms\": %.3f,\n",
            mx->floor[1].floor_ms);
  }
  fprintf(f, "  \"resumed_at_iteration\": %ld,\n", r->it0);
  fprintf(f, "  \"iteration_ms\": [");
  for (long i = r->it0; i < r->n_steps; i++)
    fprintf(f, "%s%.3f", i > r->it0 ? ", " : "", r->step_s[i] * 1e3);
  fprintf(f, "],\n  \"window_trace\": [");
  int nw = 0;
  const nto_window_sample *v = nto_model_window_trace(r->m, &nw);
  for (int i = 0; i < nw; i++)
    fprintf(f,
            "%s\n    {\"iteration\": %d, \"window\": %d, "
            "\"iteration_ms\": %.3f, \"measured_ms\": %.3f, "
            "\"stall_ms\": %.3f, \"io_busy_ms\": %.3f, "
            "\"device_ms\": %.3f, \"judged\": %s, "
            "\"before_read_ahead\": %s}",
            i ? "," : "", i + 1, v[i].window, v[i].iteration_ms,
            v[i].measured_ms, v[i].stall_ms, v[i].io_busy_ms, v[i].device_ms,
            v[i].judged ? "true" : "false",
            v[i].before_read_ahead ? "true" : "false");
  fprintf(f, "%s]\n}\n", nw ? "\n  " : "");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return nto_err_set(err, NTO_EIO, "--report-json: cannot write %s",
                       r->o.report_json);
  return 0;
}

static int save(run *r, nto_err *err) {
  const char *path = r->o.save ? r->o.save : r->c.model.save_path;
  if (!path || !path[0])
    return 0;
  nto_named_tensor *ts = NULL;
  int n = 0;
  int rc = nto_model_weights(r->m, &ts, &n, err);
  char st[NTO_CONF_STR + 32];
  size_t len = strlen(path);
  if (len > 4 && !strcmp(path + len - 4, ".bin"))
    snprintf(st, sizeof st, "%.*s.safetensors", (int)(len - 4), path);
  else
    snprintf(st, sizeof st, "%s.safetensors", path);
  char iters[32];
  snprintf(iters, sizeof iters, "%ld", nto_model_iteration(r->m));
  const char *meta[] = {"format",
                        "nntrainer-offload",
                        "model",
                        r->o.model,
                        "iteration",
                        iters,
                        "fully_connected_weight_layout",
                        "in,unit",
                        NULL};
  if (rc == 0)
    rc = nto_weights_save_bin(path, ts, n, err);
  if (rc == 0)
    rc = nto_safetensors_save(st, ts, n, meta, err);
  if (rc == 0)
    printf("saved weights     %s (nntrainer layout) and %s\n", path, st);
  nto_model_weights_free(ts, n);
  return rc;
}

/* ---- --trace: Chrome trace-event JSON ----
 * One object per event in "traceEvents"; ts and dur in microseconds from
 * the start of the run. Tracks (tid): 1 executor (steps, and the waits
 * for their reads), 2 onloader (reads), 3 offloader (writes), 4 step
 * state changes (instant events). Events come from the three threads:
 * trace_mu orders them in the file (Perfetto does not need them sorted). */

enum { TID_EXEC = 1, TID_ONLOAD, TID_OFFLOAD, TID_STATES };

/* Start an event object (lock held). */
static void trace_open(run *r) {
  fputs(r->trace_events++ ? ",\n" : "\n", r->trace);
}

static void trace_span(run *r, int tid, const char *name, const char *cat,
                       double t0_ms, double t1_ms, const char *args) {
  pthread_mutex_lock(&r->trace_mu);
  trace_open(r);
  fprintf(r->trace, "{\"name\":");
  json_string(r->trace, name);
  fprintf(r->trace,
          ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.1f,"
          "\"dur\":%.1f%s%s}",
          cat, tid, (t0_ms - r->trace_t0) * 1e3, (t1_ms - t0_ms) * 1e3,
          args ? ",\"args\":" : "", args ? args : "");
  pthread_mutex_unlock(&r->trace_mu);
}

static void trace_step(void *user, int pass, int s, double t_begin,
                       double t_ready, double t_end) {
  run *r = user;
  char name[NTO_NAME_MAX + 24], wait[NTO_NAME_MAX + 32];
  nto_model_step_name(r->m, pass, s, name, sizeof name);
  if (t_ready - t_begin >= 0.02) { /* the executor really waited */
    snprintf(wait, sizeof wait, "wait %s", name);
    trace_span(r, TID_EXEC, wait, "stall", t_begin, t_ready, NULL);
  }
  trace_span(r, TID_EXEC, name, pass == NTO_PASS_TRAIN ? "train" : "eval",
             t_ready, t_end, NULL);
}

static void trace_io(void *user, nto_trace_kind kind, int id, double t0,
                     double t1) {
  run *r = user;
  const nto_tensor *t = nto_model_tensor(r->m, id);
  char args[64];
  snprintf(args, sizeof args, "{\"bytes\":%zu}", t->bytes);
  trace_span(r, kind == NTO_TRACE_READ ? TID_ONLOAD : TID_OFFLOAD, t->name,
             kind == NTO_TRACE_READ ? "read" : "write", t0, t1, args);
}

static double mono_ms(void) { return now_s() * 1e3; }

/* Open the trace and name its tracks. */
static int trace_start(run *r) {
  r->trace = fopen(r->o.trace, "w");
  if (!r->trace) {
    cli_error("--trace: cannot open %s: %s", r->o.trace, strerror(errno));
    return -1;
  }
  pthread_mutex_init(&r->trace_mu, NULL);
  r->trace_t0 = mono_ms();
  static const char *const names[] = {"executor", "onloader", "offloader",
                                      "step states"};
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", r->trace);
  for (int i = 0; i < 4; i++) {
    trace_open(r);
    fprintf(r->trace,
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
            "\"args\":{\"name\":\"%s\"}}",
            i + 1, names[i]);
  }
  return 0;
}

/* Close the event list; NTO_EIO if the file could not be written. */
static int trace_finish(run *r, nto_err *err) {
  if (!r->trace)
    return 0;
  fputs("\n]}\n", r->trace);
  int bad = ferror(r->trace);
  bad |= fclose(r->trace) != 0;
  r->trace = NULL;
  pthread_mutex_destroy(&r->trace_mu);
  return bad ? nto_err_set(err, NTO_EIO, "--trace: cannot write %s", r->o.trace)
             : 0;
}

/* --log-states and the trace's state track: every step state transition
 * (engine lock held: short). */
static void log_state(void *user, int pass, int step, nto_step_state from,
                      nto_step_state to) {
  run *r = user;
  char name[NTO_NAME_MAX + 16];
  nto_model_step_name(r->m, pass, step, name, sizeof name);
  if (r->state_log)
    fprintf(r->state_log, "%s %s: %s -> %s\n",
            pass == NTO_PASS_TRAIN ? "train" : "eval", name,
            nto_step_state_name(from), nto_step_state_name(to));
  if (r->trace) {
    double t = mono_ms();
    pthread_mutex_lock(&r->trace_mu);
    trace_open(r);
    fprintf(r->trace,
            "{\"name\":\"%s -> %s\",\"cat\":\"state\",\"ph\":\"i\","
            "\"s\":\"t\",\"pid\":1,\"tid\":%d,\"ts\":%.1f,"
            "\"args\":{\"step\":",
            nto_step_state_name(from), nto_step_state_name(to), TID_STATES,
            (t - r->trace_t0) * 1e3);
    json_string(r->trace, name);
    fputs("}}", r->trace);
    pthread_mutex_unlock(&r->trace_mu);
  }
}

/* The window: --window, else the INI's memory_swap_lookahead (when
 * memory_swap is on); "auto", "all" or a number; NULL if neither. */
static const char *window_setting(const run *r, const char **what) {
  const nto_model_conf *mc = &r->c.model;
  *what = "--window";
  if (r->o.window)
    return r->o.window;
  if (!mc->memory_swap)
    return NULL;
  *what = "memory_swap_lookahead";
  return mc->swap_lookahead[0] ? mc->swap_lookahead : "2";
}

/* The memory budget: --memory-budget, else the INI's memory_budget. */
static int budget_setting(run *r, size_t *bytes) {
  const char *b = r->o.budget ? r->o.budget : r->c.model.memory_budget;
  *bytes = 0;
  if (!b || !b[0])
    return 0;
  nto_err e = {0};
  if (nto_parse_size(b, bytes, &e) != 0 || *bytes == 0) {
    cli_error("%s: expected a size > 0 with an optional K, M or G suffix, "
              "got '%s'",
              r->o.budget ? "--memory-budget" : "[Model] memory_budget", b);
    return -1;
  }
  return 0;
}

/* The offload settings: options first, then the INI's memory_swap* / fsu*
 * and memory_budget keys. Returns 0, or -1 after printing a usage error. */
static int offload_opts(run *r, nto_model_opts *mo) {
  const opts *o = &r->o;
  const nto_model_conf *mc = &r->c.model;
  nto_offload_opts *oo = &mo->offload;
  memset(oo, 0, sizeof *oo);
  const char *what, *w = window_setting(r, &what);
  if (budget_setting(r, &r->budget) != 0)
    return -1;
  mo->memory_budget = r->budget;
  if (r->budget && r->o.budget) {
    mo->budget_source = "--memory-budget";
  } else if (r->budget) {
    snprintf(r->budget_src, sizeof r->budget_src,
             "%.200s: [Model] memory_budget", r->o.model);
    mo->budget_source = r->budget_src;
  }
  mo->window_mode = NTO_WINDOW_FIXED;
  r->window_mode = "all";
  if (!w && r->budget) {
    mo->window_mode = NTO_WINDOW_BUDGET;
    r->window_mode = "budget";
  } else if (w && !strcmp(w, "auto")) {
    mo->window_mode = NTO_WINDOW_AUTO;
    r->window_mode = "auto";
  } else if (w && strcmp(w, "all") != 0) {
    long n;
    if (cli_int(what, w, 1, 1L << 20, &n) != 0)
      return -1;
    oo->window = (int)n;
    r->window_mode = "fixed";
  }
  oo->swap_dir = o->swap_dir        ? o->swap_dir
                 : mc->swap_path[0] ? mc->swap_path
                                    : NULL;
  oo->no_direct = o->no_direct;
  if (cli_chunk_grads(o->chunk_grads, &mo->chunk_grads) != 0 ||
      cli_keep_resident(o->keep, &oo->no_keep) != 0 ||
      cli_recompute(o->recompute, &mo->recompute) != 0)
    return -1;
  /* With a budget the user has said how much memory training may take:
   * the read-ahead by time uses what the window leaves of it. The
   * adaptive window trades memory for stall itself, and with reads by
   * time it stalls less in as much memory or less. A fixed window without
   * a budget keeps the region N gives and reads ahead within it (room),
   * where that pays (model.h nto_model_room_pays). Measured:
   * docs/benchmarks.md, "Read-ahead by time, the default under a memory
   * budget", "Read-ahead by time for the adaptive window without a
   * budget" and "Read-ahead within a fixed window's region by default". */
  r->prefetch = o->prefetch                                       ? o->prefetch
                : r->budget || mo->window_mode == NTO_WINDOW_AUTO ? "time"
                                                                  : "room";
  if (!strcmp(r->prefetch, "time")) {
    mo->prefetch = NTO_PREFETCH_TIME;
  } else if (!strcmp(r->prefetch, "room")) {
    mo->prefetch = NTO_PREFETCH_ROOM;
  } else if (!strcmp(r->prefetch, "steps")) {
    mo->prefetch = NTO_PREFETCH_STEPS;
  } else {
    cli_error("--prefetch: expected steps, time or room, got '%s'",
              o->prefetch);
    return -1;
  }
  oo->io = NTO_IO_AUTO;
  if (o->io) {
    int k = nto_io_kind_parse(o->io);
    if (k < 0) {
      cli_error("--io: expected uring or psync, got '%s'", o->io);
      return -1;
    }
    oo->io = (nto_io_kind)k;
  }
  if (o->log_states) {
    r->state_log =
        !strcmp(o->log_states, "-") ? stderr : fopen(o->log_states, "w");
    if (!r->state_log) {
      cli_error("--log-states: cannot open %s: %s", o->log_states,
                strerror(errno));
      return -1;
    }
  }
  if (o->trace && trace_start(r) != 0)
    return -1;
  if (r->state_log || r->trace) {
    oo->log_state = log_state;
    oo->log_user = r;
  }
  if (r->trace) {
    oo->trace = trace_io;
    oo->trace_user = r;
    mo->step_trace = trace_step;
    mo->step_trace_user = r;
  }
  return 0;
}

/* Free everything. The model goes first: freeing it drains the window,
 * whose last writes and state changes still go to the trace and the state
 * log. Returns 0, or NTO_EIO when the trace file could not be written. */
static int cleanup(run *r, nto_err *err) {
  nto_dataset_close(r->train);
  nto_dataset_close(r->test);
  nto_model_free(r->m);
  nto_parallel_free();
  nto_config_free(&r->c);
  nto_free_aligned(r->x);
  nto_free_aligned(r->y);
  free(r->step_s);
  free(r->step_ms);
  free(r->step_tmp);
  if (r->state_log && r->state_log != stderr)
    fclose(r->state_log);
  return trace_finish(r, err); /* also after a failed run: valid JSON */
}

int cmd_train(int argc, char **argv) {
  run r;
  memset(&r, 0, sizeof r);
  int prc = parse_opts(argc, argv, &r.o);
  if (prc != 0)
    return prc > 0 ? CLI_OK : CLI_USAGE;
  nto_err err = {0};
  double t0 = now_s();
  install_signals();
  /* every GEMM runs single-threaded in a range of the compute threads
   * (parallel.h nto_parallel_for_blas): OpenBLAS needs no threads */
  openblas_set_num_threads(1);
  cli_compute_threads(r.o.threads);
  int rc = nto_config_load(&r.c, r.o.model, &err);
  nto_model_opts mo = {.batch = (int)r.o.batch, .seed = (uint64_t)r.o.seed};
  int status = CLI_USAGE; /* an unreadable or invalid model file */
  if (rc == 0 && offload_opts(&r, &mo) != 0) {
    cleanup(&r, &err);
    return CLI_USAGE;
  }
  if (rc == 0) {
    rc = nto_model_create(&r.m, &r.c, &mo, &err);
    status = cli_status(rc);
  }
  if (rc != 0) {
    cli_error("%s", err.msg);
    cleanup(&r, &err);
    return status;
  }
  {
    nto_offload_stats st;
    r.offload = nto_model_offload_stats(r.m, &st) == 0;
    if (!r.offload && !strcmp(r.window_mode, "budget"))
      r.window_mode = "all"; /* everything fits the budget */
  }
  r.batch = nto_model_batch(r.m);
  r.k = nto_model_output_size(r.m);
  nto_shape in = nto_model_input_shape(r.m);
  r.sample = nto_shape_sample(in);
  r.tty = isatty(STDOUT_FILENO);
  rc = open_data(&r.o, &r.c, in, r.k, &r.train, &r.test, &err);
  if (rc == 0) {
    if (r.o.train_samples && !(r.o.data && !strcmp(r.o.data, "synthetic")))
      nto_dataset_limit(r.train, (size_t)r.o.train_samples);
    nto_dataset_shuffle(r.train, (size_t)r.o.shuffle, (uint64_t)r.o.seed);
    r.x = nto_alloc_aligned(r.sample * r.batch * sizeof(float));
    r.y = nto_alloc_aligned((size_t)r.k * r.batch * sizeof(float));
    if (!r.x || !r.y)
      rc = nto_err_set(&err, NTO_ENOMEM, "out of memory");
  }
  if (rc == 0 && r.o.resume) {
    rc = resume(&r, &err);
    if (rc != 0) { /* another model: usage error; corrupt file: runtime */
      cli_error("%s", err.msg);
      cleanup(&r, &err);
      return cli_status(rc);
    }
  }
  if (rc == 0) {
    printf("model %s: %d layers, %zu parameters, batch %d, %ld "
           "threads\n",
           r.o.model, nto_model_graph(r.m)->n_layers,
           nto_model_param_count(r.m), r.batch, r.o.threads);
    cli_print_blas();
    printf("data: %s\n", nto_dataset_describe(r.train));
    if (r.test)
      printf("test: %s\n", nto_dataset_describe(r.test));
    print_plan(&r);
    if (r.o.resume)
      printf("resumed from %s at iteration %ld (epoch %ld, iteration %ld of "
             "that epoch)\n",
             r.o.resume, r.it0, r.epoch, r.ie);
    fflush(stdout);
    rc = train_loop(&r, &err);
  }
  if (rc == 0 && r.stopped) {
    /* SIGINT/SIGTERM: checkpoint, free the model (its swap file goes with
     * it), exit 128 + the signal. */
    int sig = stop_signal;
    rc = write_checkpoint(&r, &err);
    const char *sn = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (rc == 0 && r.o.checkpoint && r.ckpt_it == r.n_steps && r.n_steps > 0)
      cli_error("interrupted by %s after iteration %ld; checkpoint %s holds "
                "it (continue with --resume %s)",
                sn, r.n_steps, r.o.checkpoint, r.o.checkpoint);
    else if (rc == 0 && r.n_steps > r.it0)
      cli_error("interrupted by %s after iteration %ld (no --checkpoint: "
                "iterations %ld-%ld are lost)",
                sn, r.n_steps, r.it0 + 1, r.n_steps);
    else if (rc == 0)
      cli_error("interrupted by %s before the first iteration of this run", sn);
    else
      cli_error("%s", err.msg);
    nto_err cerr = {0};
    cleanup(&r, &cerr);
    return rc == 0 ? 128 + sig : cli_status(rc);
  }
  if (rc == 0)
    rc = write_checkpoint(&r, &err); /* the final state */
  if (rc == 0) {
    /* Save before the report so that its peak RSS covers saving too. */
    double total_s = now_s() - t0;
    rc = save(&r, &err);
    metrics mx;
    if (rc == 0) {
      measure(&r, &mx);
      report(&r, &mx, total_s);
    }
    if (rc == 0 && r.o.report_json)
      rc = report_json(&r, &mx, total_s, &err);
  }
  if (rc != 0)
    cli_error("%s", err.msg);
  nto_err cerr = {0};
  if (cleanup(&r, &cerr) != 0 && rc == 0) {
    cli_error("%s", cerr.msg);
    rc = cerr.code;
  }
  return rc == 0 ? CLI_OK : cli_status(rc);
}

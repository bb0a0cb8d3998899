/* train.c - `nntrainer-offload train`: the training loop with progress,
 * the tuner's turn between iterations, per-epoch evaluation, checkpoints
 * and weight saving; the end-of-run report is report.c's, the trace
 * trace.c's. */
#include "blas.h"
#include "checkpoint.h"
#include "cli.h"
#include "lr_scheduler.h"
#include "memstat.h"
#include "outputs.h"
#include "parallel.h"
#include "probe.h"
#include "report.h"
#include "run.h"
#include "setup.h"

#include <cblas.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* Tuner changes printed as they happen; later ones are in the report's
 * window trace. */
#define TUNE_LINES 10

static const char usage[] =
    "usage: nntrainer-offload train MODEL.ini [options]\n"
    "\n"
    "Trains the model, evaluates on the test set after each epoch (and at\n"
    "the end of a run --iterations stops within an epoch), and reports\n"
    "loss, accuracy, iteration time, peak memory and swap traffic.\n"
    "Options take their value as --name VALUE or --name=VALUE.\n"
    "\n"
    "Data and schedule:\n"
    "  --data DIR|synthetic  IDX directory (default: the INI's [train_set],\n"
    "                        else " SETUP_DEFAULT_DATA "),\n"
    "                        an image folder (DIR/train/CLASS/*.png|jpg|bmp\n"
    "                        and DIR/test/CLASS/..., or DIR/CLASS/... with\n"
    "                        --valid-split), or 'synthetic' (fixed seed)\n"
    "  --valid-split F       image folder without train/ and test/: the\n"
    "                        fraction of each class held out for testing\n"
    "  --normalize M/S       images: per-channel mean/std after scaling to\n"
    "                        [0, 1] (e.g. 0.5/0.25, or imagenet)\n"
    "  --skip-bad-images     skip unreadable image files (counted)\n"
    "  --classes LIST        only these labels (e.g. 5-9 or 0,2,4), as\n"
    "                        0..k-1: k must be the model's output size\n"
    "  --epochs E            epochs (default: the INI's Epochs)\n"
    "  --iterations K        stop after K iterations in all\n"
    "  --batch-size B        batch size (default: the INI's batch_size)\n"
    "  --train-samples N     the first N training samples (synthetic: how\n"
    "                        many to generate, default 2048)\n"
    "  --eval-samples N      evaluate on the first N test samples (0: none;\n"
    "                        default: all, or min(test set, 2000) when the\n"
    "                        run ends before its first epoch does)\n"
    "  --eval-every K        also evaluate every K iterations\n"
    "  --shuffle-buffer N    shuffle buffer in samples (default 512, 0: off)\n"
    "  --seed S              initialization, shuffling, dropout (default 1)\n"
    "  --threads T           compute threads (default: online CPUs); the\n"
    "                        same results at any count\n"
    "  --init-weights FILE   start from these weights: safetensors by name\n"
    "                        and shape (the rest keep their initialization),\n"
    "                        or nntrainer .bin (whole)\n"
    "  --freeze-until LAYER  train only the layers after LAYER (as INI\n"
    "                        trainable = false up to LAYER)\n"
    "  --frozen-bn running|batch  frozen batch normalization normalizes\n"
    "                        with its running statistics (default), or the\n"
    "                        batch's, updating the running ones\n"
    "\n"
    "Memory (default: the INI's memory_swap* / fsu* keys, else all resident):\n"
    "  --window N|auto|all   keep the tensors of N steps in RAM, the rest in\n"
    "                        a swap file; auto: adapt N to hide the reads\n"
    "                        (with a budget: for the shortest iteration);\n"
    "                        all: everything resident\n"
    "  --memory-budget SIZE  bound on the whole process's peak RSS (K/M/G);\n"
    "                        alone: the largest window that fits\n"
    "  --swap-dir DIR        swap file directory (default: the INI's\n"
    "                        memory_swap_path, else $TMPDIR or /tmp, or\n"
    "                        /var/tmp where that is tmpfs or ramfs)\n"
    "  --allow-tmpfs-swap    accept a swap directory on tmpfs or ramfs\n"
    "                        (refused: its pages are RAM; for tests)\n"
    "  --io uring|psync      I/O backend (default: io_uring where allowed)\n"
    "  --no-direct           swap through the page cache (for a file system\n"
    "                        that refuses O_DIRECT)\n"
    "  --recompute auto|cheap|segments|segments:N|off  auto (default):\n"
    "                        backward computes cheap outputs again instead\n"
    "                        of keeping them, and whole segments (a block's\n"
    "                        convolutions from its input) where the swap\n"
    "                        device is slow against the CPU (measured at\n"
    "                        start) or the memory budget needs it; cheap:\n"
    "                        never segments; segments: always; segments:N:\n"
    "                        only the N segment convolutions with the most\n"
    "                        activation bytes per replayed operation (less\n"
    "                        compute, more bytes written; summary shows\n"
    "                        the memory); off: keeps all. The same results\n"
    "  --updates after|spread  optimizer updates of large weights (in\n"
    "                        chunks) right after their backward step\n"
    "                        (default), or spread over the rest of the\n"
    "                        backward pass; the same results\n"
    "  --channel-groups off|SIZE  compute each run of layers that keeps\n"
    "                        channels apart (a 1x1 expansion, batch\n"
    "                        normalization, ReLU6, a depthwise\n"
    "                        convolution) in groups of channels whose\n"
    "                        outputs hold at most about SIZE, so that a\n"
    "                        window holds less than one such layer; the\n"
    "                        same results at every window, within\n"
    "                        rounding of off (default: the INI's\n"
    "                        channel_groups, else off)\n"
    "  --optimizer-state fp32|bf16|int8  how momentum and Adam's moments\n"
    "                        are stored, in RAM and swap: fp32 (default,\n"
    "                        exact), bf16 or block-wise int8 (half or a\n"
    "                        quarter of the bytes; approximate)\n"
    "\n"
    "Output:\n"
    "  --save FILE           weights as nntrainer .bin and FILE.safetensors\n"
    "                        (default: the INI's Save_Path)\n"
    "  --report-json FILE    the report as JSON too\n"
    "  --flash-endurance TBW the swap device's rated endurance, for the\n"
    "                        report's flash wear (default " SETUP_FLASH_TBW_TEXT
    ": a typical\n"
    "                        32 GB eMMC's; TBW: 10^12 bytes written)\n"
    "  --trace FILE.json     Chrome trace: steps, reads, writes, states\n"
    "  --log-every K         the progress window: loss and accuracy are\n"
    "                        averaged over K iterations (default: about 20\n"
    "                        per epoch); non-terminal output: a line each\n"
    "  --log-csv FILE        a CSV row per iteration: loss, accuracy,\n"
    "                        learning rate, time, stall, window, swap\n"
    "                        traffic, RSS (flushed each row)\n"
    "  --window-trace        the report lists the adaptive window's trace\n"
    "  --warmup K            leave the first K iterations out of the report\n"
    "\n"
    "Checkpoints (SIGINT/SIGTERM/SIGHUP: finish the iteration, then exit;\n"
    "a second signal aborts):\n"
    "  --checkpoint FILE     the training state, atomically, after every\n"
    "                        epoch, at the end and on a signal\n"
    "  --checkpoint-every K  also every K iterations\n"
    "  --resume FILE         continue from a checkpoint, bit for bit\n"
    "\n"
    "When reads start, what stays resident between uses and where large\n"
    "weight gradients are computed are the tuner's choices; train prints\n"
    "them (docs/cli.md).\n";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* train's options (setup.h setup_parse). */
static const setup_opt train_opts_table[] = {
    SETUP_OPT("--data", data, 's', 0, 0),
    SETUP_OPT("--classes", classes, 's', 0, 0),
    SETUP_OPT("--valid-split", valid_split, 's', 0, 0),
    SETUP_OPT("--normalize", normalize, 's', 0, 0),
    SETUP_OPT("--skip-bad-images", skip_bad_images, 'f', 0, 0),
    SETUP_OPT("--save", save, 's', 0, 0),
    SETUP_OPT("--window", window, 's', 0, 0),
    SETUP_OPT("--memory-budget", budget, 's', 0, 0),
    SETUP_OPT("--swap-dir", swap_dir, 's', 0, 0),
    SETUP_OPT("--allow-tmpfs-swap", allow_ram_swap, 'f', 0, 0),
    SETUP_OPT("--io", io, 's', 0, 0),
    SETUP_OPT("--no-direct", no_direct, 'f', 0, 0),
    SETUP_OPT("--recompute", recompute, 's', 0, 0),
    SETUP_OPT("--optimizer-state", opt_state, 's', 0, 0),
    SETUP_OPT("--updates", updates, 's', 0, 0),
    SETUP_OPT("--channel-groups", groups, 's', 0, 0),
    SETUP_OPT("--freeze-until", freeze_until, 's', 0, 0),
    SETUP_OPT("--frozen-bn", frozen_bn, 's', 0, 0),
    SETUP_OPT("--init-weights", init_weights, 's', 0, 0),
    SETUP_OPT("--report-json", report_json, 's', 0, 0),
    SETUP_OPT("--flash-endurance", endurance, 's', 0, 0),
    SETUP_OPT("--trace", trace, 's', 0, 0),
    SETUP_OPT("--checkpoint", checkpoint, 's', 0, 0),
    SETUP_OPT("--resume", resume, 's', 0, 0),
    SETUP_OPT("--epochs", epochs, 'i', 1, 1L << 40),
    SETUP_OPT("--iterations", iterations, 'i', 1, 1L << 40),
    SETUP_OPT("--batch-size", batch, 'i', 1, 1L << 20),
    SETUP_OPT("--train-samples", train_samples, 'i', 1, 1L << 40),
    SETUP_OPT("--eval-samples", eval_samples, 'i', 0, 1L << 40),
    SETUP_OPT("--shuffle-buffer", shuffle, 'i', 0, 1L << 24),
    SETUP_OPT("--seed", seed, 'i', 0, 1L << 40),
    SETUP_OPT("--threads", threads, 'i', 1, 256),
    SETUP_OPT("--log-every", log_every, 'i', 1, 1L << 40),
    SETUP_OPT("--warmup", warmup, 'i', 0, 1L << 40),
    SETUP_OPT("--checkpoint-every", checkpoint_every, 'i', 1, 1L << 40),
    SETUP_OPT("--eval-every", eval_every, 'i', 1, 1L << 40),
    SETUP_OPT("--log-csv", log_csv, 's', 0, 0),
    SETUP_OPT("--window-trace", window_trace, 'f', 0, 0),
};

/* Returns 0, 1 after --help, or -1 after a usage error. */
static int parse_opts(int argc, char **argv, train_opts *o) {
  memset(o, 0, sizeof *o);
  o->eval_samples = -1;
  o->shuffle = 512;
  o->seed = 1;
  o->threads = sysconf(_SC_NPROCESSORS_ONLN);
  int rc = setup_parse(argc, argv, usage, train_opts_table,
                       sizeof train_opts_table / sizeof *train_opts_table, o,
                       NULL, NULL);
  if (rc != 0)
    return rc;
  if (o->checkpoint_every && !o->checkpoint) {
    cli_error("--checkpoint-every needs --checkpoint FILE");
    return -1;
  }
  if (o->eval_every && o->eval_samples == 0) {
    cli_error("--eval-every %ld: --eval-samples 0 turns evaluation off; give "
              "one of them",
              o->eval_every);
    return -1;
  }
  if (o->frozen_bn && strcmp(o->frozen_bn, "running") &&
      strcmp(o->frozen_bn, "batch")) {
    cli_error("--frozen-bn: expected running or batch, got '%s'", o->frozen_bn);
    return -1;
  }
  if (o->init_weights && o->resume) {
    cli_error("--init-weights and --resume: a checkpoint restores every "
              "weight; give one of them");
    return -1;
  }
  return 0;
}

static void fmt_eta(double s, char *buf, size_t len) {
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else
    snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
}

/* Seconds between two drawings of a line a terminal redraws in place:
 * a 115200-baud serial console takes about 11 KiB/s, and a small net's
 * hundreds of iterations per second would flood it. */
#define REDRAW_S 0.1

/* The width lines that are redrawn in place must keep to: the terminal's
 * (TIOCGWINSZ, asked at each drawing: ssh and serial consoles resize),
 * else $COLUMNS, else 80, a serial console's. */
static int line_columns(int tty) {
  struct winsize ws;
  if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  const char *c = getenv("COLUMNS");
  long n = 0;
  if (c && nto_parse_int(c, 1, 10000, &n, NULL) == 0)
    return (int)n;
  return 80;
}

/* A field of the progress line; prio 0 matters most. */
typedef struct pfield {
  char s[80];
  int prio;
} pfield;

#define PRIO_MAX 10   /* priorities 0..9 */
#define FIELDS_MAX 16 /* fields of a line */

/*
 * f[0..n) joined by spaces in their order, keeping the most important
 * fields (by prio, each that still fits) within max characters: a line as
 * wide as the terminal wraps on some, and \r then redraws only its last
 * row. prio 0 is always kept, cut at max if need be.
 */
static void fit_fields(const pfield *f, int n, int max, char *out, size_t len) {
  int keep[FIELDS_MAX] = {0}, used = 0, kept = 0;
  for (int p = 0; p < PRIO_MAX; p++)
    for (int i = 0; i < n && i < FIELDS_MAX; i++) {
      int w = (int)strlen(f[i].s) + (kept ? 1 : 0);
      if (f[i].prio == p && (p == 0 || used + w <= max)) {
        keep[i] = 1;
        used += w;
        kept++;
      }
    }
  size_t o = 0;
  out[0] = '\0';
  for (int i = 0; i < n && i < FIELDS_MAX; i++)
    if (keep[i] && o < len)
      o += (size_t)snprintf(out + o, len - o, "%s%s", o ? " " : "", f[i].s);
  if (max > 0 && (size_t)max < len)
    out[max] = '\0';
}

/* The averages of the progress window so far: loss, accuracy (%), and
 * its iterations; the last complete window's when it is empty (just
 * resumed). */
static long window_avg(const run *r, double *loss, double *acc) {
  long n = r->seen / r->batch; /* full batches only */
  *loss = n ? r->loss_sum / n : r->last_loss;
  *acc = r->seen ? 100.0 * r->correct / r->seen : r->last_acc;
  return n;
}

/*
 * The progress line: epoch and iteration, loss and accuracy averaged over
 * the progress window so far, ETA; then, as the width allows, the stall's
 * share of the window's time and the window N (offloading), the progress
 * window's length, it/s, peak RSS and the iteration within the epoch. A
 * terminal's line is redrawn in place (final: ended with a newline);
 * other output gets a line each time.
 */
static void progress(run *r, long epoch, long it, long it_in_epoch,
                     long per_epoch, double elapsed, int final) {
  double loss, acc, ips = elapsed > 0 ? (it - r->it0) / elapsed : 0;
  long n = window_avg(r, &loss, &acc);
  char eta[32], rss[32], line[512];
  fmt_eta(ips > 0 ? (r->planned - it) / ips : 0, eta, sizeof eta);
  nto_format_bytes(nto_peak_rss_bytes(), rss, sizeof rss);
  pfield f[FIELDS_MAX];
  int k = 0;
#define FIELD(p, ...)                                                          \
  (f[k].prio = (p), snprintf(f[k++].s, sizeof f[0].s, __VA_ARGS__))
  FIELD(0, "epoch %ld iter %ld/%ld", epoch, it, r->planned);
  FIELD(9, "(%ld/%ld)", it_in_epoch, per_epoch);
  FIELD(1, "loss %.4f", loss);
  FIELD(2, "acc %.1f%%", acc);
  FIELD(6, "(avg %ld it)", n);
  FIELD(7, "%.2f it/s", ips);
  FIELD(3, "ETA %s", eta);
  if (r->offload) {
    FIELD(5, "window %d", r->last_it.window);
    FIELD(4, "stall %.1f%%",
          r->win_s > 0 ? r->win_stall_ms / (r->win_s * 10) : 0.0);
  }
  FIELD(8, "peak RSS %s", rss);
#undef FIELD
  fit_fields(f, k, line_columns(r->tty) - 1, line, sizeof line);
  printf("%s%s%s", r->tty ? "\r" : "", line, r->tty ? "\033[K" : "\n");
  if (r->tty && final)
    putchar('\n');
  fflush(stdout);
  r->last_draw = now_s();
}

/* The progress window is complete: its averages become the report's
 * train loss and accuracy, and the next window starts empty. */
static void window_done(run *r) {
  window_avg(r, &r->last_loss, &r->last_acc);
  r->loss_sum = 0;
  r->correct = r->seen = 0;
  r->win_s = r->win_stall_ms = 0;
}

/* What an evaluation is for. */
enum { EVAL_BEFORE, EVAL_EPOCH, EVAL_EVERY, EVAL_END };

/* The test set through the model: the loss summed over samples, the
 * samples right and evaluated into *loss, *correct, *n. On a terminal, a
 * line counts the samples in place. A stop signal ends it early with
 * r->stopped set. */
static int eval_pass(run *r, double *loss, long *correct, long *n,
                     nto_err *err) {
  nto_dataset_limit(r->test, r->eval_limit);
  size_t total = nto_dataset_size(r->test);
  int rc = nto_dataset_rewind(r->test, err);
  char line[128];
  *loss = 0;
  *correct = *n = 0;
  for (;;) {
    int got = 0;
    nto_step_stats st;
    if (outputs_stop_signal()) { /* the checkpoint is from before the
                                    evaluation */
      r->stopped = 1;
      break;
    }
    if (rc == 0)
      rc = nto_dataset_next(r->test, r->x, r->y, r->batch, &got, err);
    if (rc != 0 || got == 0)
      break;
    rc = nto_model_eval_step(r->m, r->x, r->y, got, &st, err);
    *loss += st.loss * got;
    *correct += st.correct;
    *n += got;
    if (r->tty && now_s() - r->last_draw >= REDRAW_S) {
      snprintf(line, sizeof line, "evaluating: %ld/%zu test samples", *n,
               total);
      int max = line_columns(1) - 1;
      if (max > 0 && (size_t)max < sizeof line)
        line[max] = '\0';
      printf("\r%s\033[K", line);
      fflush(stdout);
      r->last_draw = now_s();
    }
  }
  if (r->tty)
    printf("\r\033[K");
  return rc;
}

/* "(N samples)", and when the default for a run shorter than an epoch
 * cut the test set, that it did. */
static void eval_samples_text(const run *r, long n, char *buf, size_t len) {
  if (r->eval_default && (size_t)n < r->test_size)
    snprintf(buf, len,
             "(%ld of %zu samples: the default for a run shorter than an "
             "epoch; --eval-samples N sets it)",
             n, r->test_size);
  else
    snprintf(buf, len, "(%ld samples)", n);
}

/* An evaluation of the test set (kind: EVAL_*) and its line: before the
 * first iteration (--init-weights), at the end of epoch e, every
 * --eval-every iterations, or at the end of a run that --iterations
 * stopped within an epoch. */
static int evaluate(run *r, int kind, long e, nto_err *err) {
  if (!r->test || r->o.eval_samples == 0)
    return 0;
  double loss;
  long correct, n;
  int rc = eval_pass(r, &loss, &correct, &n, err);
  if (rc != 0 || n == 0 || r->stopped)
    return rc;
  char what[96], samples[160];
  eval_samples_text(r, n, samples, sizeof samples);
  if (kind == EVAL_BEFORE) { /* --init-weights: where fine-tuning starts */
    r->before_loss = loss / n;
    r->before_acc = 100.0 * correct / n;
    r->before_n = n;
    printf("before training: test loss %.4f accuracy %.2f%% %s\n",
           r->before_loss, r->before_acc, samples);
    fflush(stdout);
    return 0;
  }
  r->test_loss = loss / n;
  r->test_acc = 100.0 * correct / n;
  r->test_n = n;
  r->test_it = r->n_steps;
  if (kind == EVAL_EPOCH)
    snprintf(what, sizeof what, "epoch %ld", e);
  else if (kind == EVAL_EVERY)
    snprintf(what, sizeof what, "iteration %ld (epoch %ld)", r->n_steps, e);
  else
    snprintf(what, sizeof what,
             "iteration %ld (epoch %ld not finished: --iterations)", r->n_steps,
             e);
  printf("%s: test loss %.4f accuracy %.2f%% %s\n", what, r->test_loss,
         r->test_acc, samples);
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
  nto_ckpt_value v[9];
  int n = 0;
  nto_ckpt_set(&v[n++], "train.channel_groups", (uint64_t)r->group_bytes);
  nto_ckpt_set(&v[n++], "loop.epoch", (uint64_t)r->epoch);
  nto_ckpt_set(&v[n++], "loop.iter_in_epoch", (uint64_t)r->ie);
  nto_ckpt_set(&v[n++], "loop.loss_sum", dbits(r->loss_sum));
  nto_ckpt_set(&v[n++], "loop.correct", (uint64_t)r->correct);
  nto_ckpt_set(&v[n++], "loop.seen", (uint64_t)r->seen);
  nto_ckpt_set(&v[n++], "loop.last_loss", dbits(r->last_loss));
  nto_ckpt_set(&v[n++], "loop.last_acc", dbits(r->last_acc));
  nto_ckpt_set(&v[n++], "loop.best_acc", dbits(r->best_acc));
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

/* The most iterations and epochs a run counts (the options' bound). */
#define MAX_COUNT (1L << 40)

/* The integer value name of a checkpoint in [0, max] into *out, else
 * NTO_EDATA naming it. */
static int ckpt_count(const run *r, const char *name, uint64_t v, long max,
                      long *out, nto_err *err) {
  if (v > (uint64_t)max)
    return nto_err_set(err, NTO_EDATA,
                       "checkpoint %s: value %s = %" PRIu64 " is out of "
                       "range (at most %ld): the file is damaged or was not "
                       "written by train",
                       r->o.resume, name, v, max);
  *out = (long)v;
  return 0;
}

/* A checkpoint's double value name in [lo, hi] into *out, else NTO_EDATA
 * naming it. */
static int ckpt_real(const run *r, const char *name, uint64_t v, double lo,
                     double hi, double *out, nto_err *err) {
  double d = bitsd(v);
  if (!(d >= lo && d <= hi)) /* NaN too */
    return nto_err_set(err, NTO_EDATA,
                       "checkpoint %s: value %s = %g is out of range (%g to "
                       "%g): the file is damaged or was not written by train",
                       r->o.resume, name, d, lo, hi);
  *out = d;
  return 0;
}

/* The loop's state from checkpoint values v[0..n) written at iteration
 * it. The file's checksums hold, but its values are still bounded before
 * use: counts and pointers are computed from them. Returns 0 or
 * NTO_EDATA naming the value out of range. */
static int loop_values(run *r, long it, const nto_ckpt_value *v, int n,
                       nto_err *err) {
  long iterations = 0;
  int rc = ckpt_count(r, "model.iteration", (uint64_t)it, MAX_COUNT,
                      &iterations, err);
  if (rc == 0)
    rc = ckpt_count(r, "loop.epoch", nto_ckpt_get(v, n, "loop.epoch", 0),
                    MAX_COUNT, &r->epoch, err);
  if (rc == 0)
    rc = ckpt_count(r, "loop.iter_in_epoch",
                    nto_ckpt_get(v, n, "loop.iter_in_epoch", 0), iterations,
                    &r->ie, err);
  if (rc == 0) /* samples since the last progress line */
    rc = ckpt_count(r, "loop.seen", nto_ckpt_get(v, n, "loop.seen", 0),
                    iterations * r->batch, &r->seen, err);
  if (rc == 0)
    rc = ckpt_count(r, "loop.correct", nto_ckpt_get(v, n, "loop.correct", 0),
                    r->seen, &r->correct, err);
  if (rc == 0)
    rc = ckpt_real(r, "loop.loss_sum", nto_ckpt_get(v, n, "loop.loss_sum", 0),
                   -DBL_MAX, DBL_MAX, &r->loss_sum, err);
  if (rc == 0)
    rc = ckpt_real(r, "loop.last_loss", nto_ckpt_get(v, n, "loop.last_loss", 0),
                   -DBL_MAX, DBL_MAX, &r->last_loss, err);
  if (rc == 0)
    rc = ckpt_real(r, "loop.last_acc", nto_ckpt_get(v, n, "loop.last_acc", 0),
                   0, 100, &r->last_acc, err);
  if (rc == 0) /* checkpoints before save_best_path: none yet */
    rc = ckpt_real(r, "loop.best_acc",
                   nto_ckpt_get(v, n, "loop.best_acc", dbits(-1)), -1, 100,
                   &r->best_acc, err);
  return rc;
}

/* "off", or a --channel-groups size as "20M" / "1536K" / bytes. */
static const char *groups_text(uint64_t b, char *buf, size_t len) {
  if (!b)
    snprintf(buf, len, "off");
  else if (b % (1u << 20) == 0)
    snprintf(buf, len, "%" PRIu64 "M", b >> 20);
  else if (b % 1024 == 0)
    snprintf(buf, len, "%" PRIu64 "K", b >> 10);
  else
    snprintf(buf, len, "%" PRIu64, b);
  return buf;
}

/* --resume: restore the model, the data position and the loop's state.
 * Returns 0 or the checkpoint's error (NTO_ECONFIG: another model, or
 * other channel groups). */
static int resume(run *r, nto_err *err) {
  char a[32], b[32];
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
  uint64_t groups = nto_ckpt_get(v, n, "train.channel_groups", 0);
  if (groups != r->group_bytes) /* other steps: other rounding */
    return nto_err_set(err, NTO_ECONFIG,
                       "checkpoint %s was written with --channel-groups %s, "
                       "this run has %s: the runs would round differently; "
                       "resume with the checkpoint's",
                       r->o.resume, groups_text(groups, a, sizeof a),
                       groups_text(r->group_bytes, b, sizeof b));
  if ((rc = loop_values(r, st.iteration, v, n, err)) != 0)
    return rc;
  r->it0 = r->n_steps = nto_model_iteration(r->m);
  /* The file at --checkpoint already holds this state when it is the one
   * resumed from. */
  r->ckpt_it =
      r->o.checkpoint && !strcmp(r->o.checkpoint, r->o.resume) ? r->it0 : -1;
  return 0;
}

/* What the tuner changed after iteration it, on a line of its own (the
 * first TUNE_LINES changes; the report has them all for auto). */
static void report_tune(run *r, long it, const nto_tune_report *t) {
  static int lines;
  if (t->window_from == t->window_to && !t->frontier && !t->room_declined)
    return;
  if (lines++ >= TUNE_LINES)
    return;
  char what[160] = "";
  if (t->window_from != t->window_to)
    snprintf(what, sizeof what, "window %d -> %d", t->window_from,
             t->window_to);
  else
    snprintf(what, sizeof what, "window %d", t->window_to);
  if (t->frontier)
    printf("%stuner: after iteration %ld: %s, reads start up to %d steps "
           "ahead (measured step times and read bandwidth)%s\n",
           r->tty ? "\r\033[K" : "", it, what, t->ahead,
           lines == TUNE_LINES ? "; further changes in the report" : "");
  else
    printf("%stuner: after iteration %ld: %s, reads by steps%s%s\n",
           r->tty ? "\r\033[K" : "", it, what,
           t->room_declined ? " (no idle device time for read-ahead)" : "",
           lines == TUNE_LINES ? "; further changes in the report" : "");
  fflush(stdout);
}

/* Iteration `it`: a training step on the batch in r->x, r->y, then the
 * tuner's turn (both timed); what it measured into r->last_it and the
 * progress window's sums; the offload counters of a measured iteration
 * are added to the run's. */
static int iteration(run *r, long it, nto_step_stats *st, nto_err *err) {
  nto_offload_stats before, after;
  nto_tune_report tr = {0};
  nto_model_offload_stats(r->m, &before);
  double s0 = now_s();
  int rc = nto_model_train_step(r->m, r->x, r->y, st, err);
  if (rc == 0) /* between iterations */
    rc = nto_model_tune(r->m, &tr, err);
  r->step_s[it] = now_s() - s0;
  nto_model_offload_stats(r->m, &after);
  if (rc == 0)
    report_tune(r, it + 1, &tr);
  r->last_it = (iter_sample){
      .ms = r->step_s[it] * 1e3,
      .stall_ms = after.stall_ms - before.stall_ms,
      .read = after.read_bytes - before.read_bytes,
      .written = after.written_bytes - before.written_bytes,
      .window = before.window, /* the tuner's change is for the next */
      .lr = nto_lr_at(&r->c.lr, &r->c.opt, nto_model_iteration(r->m) - 1)};
  r->win_s += r->step_s[it];
  r->win_stall_ms += r->last_it.stall_ms;
  if (it < r->it0 + r->o.warmup)
    return rc;
  r->io_read += after.read_bytes - before.read_bytes;
  r->io_written += after.written_bytes - before.written_bytes;
  r->stall_ms += after.stall_ms - before.stall_ms;
  r->relocated += after.relocated - before.relocated;
  r->busy_ms[0] += after.read_busy_ms - before.read_busy_ms;
  r->busy_ms[1] += after.write_busy_ms - before.write_busy_ms;
  r->device_ms += after.device_busy_ms - before.device_busy_ms;
  if (rc == 0 && r->step_ms && nto_model_step_times(r->m, r->step_tmp) == 0) {
    for (int s = 0; s < nto_model_pass_steps(r->m, NTO_PASS_TRAIN); s++)
      r->step_ms[s] += r->step_tmp[s];
    r->step_passes++;
  }
  return rc;
}

/* Test samples a run shorter than an epoch evaluates on by default: on a
 * board, evaluating Fashion-MNIST's 10000 would take longer than a short
 * run's training. */
#define EVAL_SHORT_RUN 2000

/* The run's epochs, iterations per epoch (full batches) and planned
 * iterations (--iterations, else every epoch). */
static void run_length(const run *r, long *epochs, long *per_epoch,
                       long *planned) {
  *epochs = r->o.epochs ? r->o.epochs : r->c.model.epochs;
  *per_epoch = (long)(nto_dataset_size(r->train) / (size_t)r->batch);
  *planned = *epochs * *per_epoch;
  if (r->o.iterations && r->o.iterations < *planned)
    *planned = r->o.iterations;
}

/* The test samples every evaluation of the run uses (r->eval_limit):
 * --eval-samples, else all; for a run that ends before its first epoch
 * does, min(test set, EVAL_SHORT_RUN), the same for its evaluations
 * before and during training so that they compare. */
static void eval_setup(run *r) {
  long epochs, per_epoch, planned;
  if (!r->test) {
    if (r->o.eval_every)
      printf("note: --eval-every: there is no test set to evaluate on\n");
    if (r->c.model.save_best_path[0])
      printf("note: save_best_path: there is no test or validation set to "
             "evaluate on: nothing is saved to %s\n",
             r->c.model.save_best_path);
    return;
  }
  nto_dataset_limit(r->test, 0);
  r->test_size = nto_dataset_size(r->test);
  run_length(r, &epochs, &per_epoch, &planned);
  if (r->o.eval_samples > 0) {
    r->eval_limit = (size_t)r->o.eval_samples;
  } else if (r->o.eval_samples < 0 && planned < per_epoch) {
    r->eval_default = 1;
    r->eval_limit =
        r->test_size < EVAL_SHORT_RUN ? r->test_size : EVAL_SHORT_RUN;
  }
}

/* --log-csv's columns (docs/cli.md). */
static const char csv_header[] =
    "iteration,epoch,loss,accuracy,learning_rate,ms,stall_ms,window,"
    "read_mib,written_mib,rss_mib\n";

/* --log-csv: appended to when resuming (a header only into an empty
 * file), so that one file logs the whole run; else replaced. Returns 0 or
 * NTO_EIO naming the file. */
static int csv_open(run *r, nto_err *err) {
  if (!r->o.log_csv)
    return 0;
  r->csv = fopen(r->o.log_csv, r->o.resume ? "a" : "w");
  if (!r->csv)
    return nto_err_set(err, NTO_EIO, "--log-csv: cannot open %s: %s",
                       r->o.log_csv, strerror(errno));
  /* a FIFO or device has no position: it gets the header */
  if (fseek(r->csv, 0, SEEK_END) != 0 || ftell(r->csv) <= 0)
    fputs(csv_header, r->csv);
  if (fflush(r->csv) != 0)
    return nto_err_set(err, NTO_EIO, "--log-csv: cannot write %s: %s",
                       r->o.log_csv, strerror(errno));
  return 0;
}

/* The row of iteration it (1-based) of epoch e, whose batch gave st,
 * flushed at once: a killed run keeps its rows. A write that fails ends
 * the log with a warning, not the run: a full disk should not cost the
 * training done so far. */
static void csv_row(run *r, long it, long e, const nto_step_stats *st) {
  const iter_sample *s = &r->last_it;
  char window[16] = "all";
  if (!r->csv)
    return;
  if (r->offload)
    snprintf(window, sizeof window, "%d", s->window);
  fprintf(r->csv, "%ld,%ld,%.6f,%.6f,%.6g,%.3f,%.3f,%s,%.3f,%.3f,%.1f\n", it, e,
          st->loss, st->samples ? (double)st->correct / st->samples : 0.0,
          s->lr, s->ms, s->stall_ms, window, s->read / 1048576.0,
          s->written / 1048576.0, nto_current_rss_bytes() / 1048576.0);
  if (fflush(r->csv) != 0 || ferror(r->csv)) {
    fprintf(stderr,
            "%swarning: --log-csv: cannot write %s: %s; the log stops "
            "here, the training goes on\n",
            r->tty ? "\r\033[K" : "", r->o.log_csv, strerror(errno));
    fclose(r->csv);
    r->csv = NULL;
  }
}

/* The buffers of the loop; the planned iteration count. */
static int loop_setup(run *r, long per_epoch, nto_err *err) {
  if (per_epoch == 0)
    return nto_err_set(err, NTO_EDATA,
                       "%zu training samples are fewer than one batch of %d",
                       nto_dataset_size(r->train), r->batch);
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
  if (r->it0 >= r->planned)
    printf("nothing left to train: the checkpoint is at iteration %ld of "
           "%ld\n",
           r->it0, r->planned);
  return 0;
}

/* The loop's fixed figures. */
typedef struct loop_conf {
  long epochs, per_epoch;
  long log_every; /* the progress window's length */
  long every;     /* --checkpoint every K iterations */
  double t0;      /* the loop's start */
} loop_conf;

/* After iteration it (iteration ie of epoch e, its batch's stats st): the
 * progress window's sums, the CSV row, the progress line (every iteration
 * a terminal allows, else once per window), the checkpoint and an
 * --eval-every evaluation. Returns 0 or their error. */
static int after_iteration(run *r, const loop_conf *lc, long e, long ie,
                           const nto_step_stats *st, nto_err *err) {
  long it = r->n_steps;
  r->loss_sum += st->loss;
  r->correct += st->correct;
  r->seen += st->samples;
  csv_row(r, it, e, st);
  int last = it == r->planned || ie == lc->per_epoch;
  int closes = it % lc->log_every == 0 || last; /* the progress window */
  /* the end of the epoch or the run evaluates anyway */
  int eval = r->o.eval_every && it % r->o.eval_every == 0 && !last;
  if (closes || (r->tty && (eval || now_s() - r->last_draw >= REDRAW_S)))
    progress(r, e, it, ie, lc->per_epoch, now_s() - lc->t0, last || eval);
  if (closes)
    window_done(r);
  int rc = 0;
  if (r->o.checkpoint && it % lc->every == 0)
    rc = write_checkpoint(r, err);
  if (rc == 0 && eval)
    rc = evaluate(r, EVAL_EVERY, e, err);
  return rc;
}

/* save_best_path: after the evaluation that ended epoch e, the weights
 * when its accuracy is the best of the run so far (nntrainer saves the
 * best validation epoch's there). Returns 0 or the save's error. */
static int save_best(run *r, long e, nto_err *err) {
  const char *path = r->c.model.save_best_path;
  if (!path[0] || !r->test || r->test_it != r->n_steps ||
      r->test_acc <= r->best_acc)
    return 0;
  printf("save_best_path: epoch %ld has the best accuracy so far (%.2f%%)\n",
         e, r->test_acc);
  int rc = outputs_save_best(r, err);
  if (rc != 0)
    return nto_err_prefix(err, rc, "save_best_path: ");
  r->best_acc = r->test_acc;
  fflush(stdout);
  return 0;
}

/*
 * The training loop: epochs of full batches (the last partial batch of an
 * epoch is dropped), an evaluation after each epoch, every --eval-every
 * iterations and at the end of a run --iterations stops within an epoch,
 * --checkpoint every K iterations (counted from the start of the run,
 * also across --resume). A stop signal ends the loop between iterations
 * (or during an evaluation) with r->stopped set; the caller writes the
 * checkpoint. Resumed, the loop starts at the checkpoint's epoch and
 * iteration, with the dataset already positioned by nto_checkpoint_load.
 */
static int train_loop(run *r, nto_err *err) {
  loop_conf lc;
  run_length(r, &lc.epochs, &lc.per_epoch, &r->planned);
  int rc = loop_setup(r, lc.per_epoch, err);
  lc.log_every = r->o.log_every          ? r->o.log_every
                 : lc.per_epoch / 20 > 0 ? lc.per_epoch / 20
                                         : 1;
  lc.every = r->o.checkpoint_every ? r->o.checkpoint_every : lc.per_epoch;
  lc.t0 = now_s();
  long it = r->it0, e0 = r->it0 > 0 && r->epoch >= 1 ? r->epoch : 1;
  for (long e = e0; rc == 0 && e <= lc.epochs && it < r->planned && !r->stopped;
       e++) {
    long ie = 0;
    if (e == e0 && r->it0 > 0)
      ie = r->ie; /* positioned by the checkpoint */
    else
      rc = nto_dataset_rewind(r->train, err);
    while (rc == 0 && it < r->planned && !r->stopped) {
      int got = 0;
      if (outputs_stop_signal()) {
        r->stopped = 1;
        break;
      }
      nto_step_stats st;
      rc = nto_dataset_next(r->train, r->x, r->y, r->batch, &got, err);
      if (rc != 0 || got < r->batch)
        break; /* the last partial batch of an epoch is dropped */
      if ((rc = iteration(r, it, &st, err)) != 0)
        break;
      r->n_steps = ++it;
      r->epoch = e;
      r->ie = ++ie;
      rc = after_iteration(r, &lc, e, ie, &st, err);
    }
    int kind = it == r->planned && ie < lc.per_epoch ? EVAL_END : EVAL_EPOCH;
    if (rc == 0 && !r->stopped)
      rc = evaluate(r, kind, e, err);
    if (rc == 0 && !r->stopped && kind == EVAL_EPOCH)
      rc = save_best(r, e, err);
  }
  return rc;
}

/* The compute rates choose_recompute measures at: a short one (the CPU's
 * peak, an upper bound on the rate), and one over several periods of a
 * CPU quota (nto_gemm_rate). */
#define RATE_PEAK_S 0.02
#define RATE_QUOTA_S 0.3

/* --recompute auto when the run offloads: segment recomputation (tensors.h
 * nto_recompute segments) where it is estimated faster
 * (nto_model_segments_estimate), from the swap directory's bandwidth
 * (io/probe.h, NTO_SWAP_PROBE_MIN_BYTES each way) and the compute rate:
 * first the CPU's peak, which rules segments out on most machines (the
 * compute-bound iteration at that rate already), then, only if it does
 * not, the rate over RATE_QUOTA_S, which a board's CPU quota lowers. A
 * probe that fails leaves auto as it is, with a note. Results are the same
 * bits either way; the choice is train's line "recompute: segments". */
static void choose_recompute(run *r, nto_model_opts *mo) {
  const nto_offload_opts *oo = &mo->offload;
  if (mo->recompute != NTO_RECOMPUTE_AUTO || mo->inference ||
      (mo->window_mode == NTO_WINDOW_FIXED && oo->window == 0) || !oo->swap_dir)
    return;
  nto_segments_estimate *e = &r->seg;
  nto_err err = {0};
  if (nto_model_segments_estimate(&r->c, mo, e, &err) != 0 ||
      !nto_segments_may_pay(e))
    return; /* nothing to gain at any speed (an error here is
               nto_model_create's too: said there) */
  nto_swap_probe_result p;
  if (nto_swap_probe(oo->swap_dir, oo->io, !oo->no_direct,
                     NTO_SWAP_PROBE_MIN_BYTES, &p, &err) != 0) {
    printf("recompute: auto (the swap bandwidth was not measured: %s)\n",
           err.msg);
    return;
  }
  r->seg_write_bps = p.write_mib_s * 1048576.0;
  r->seg_read_bps = p.read_mib_s * 1048576.0;
  double min_flops =
      nto_segments_min_flops(e, r->seg_write_bps, r->seg_read_bps);
  if (min_flops < 0)
    return;
  /* the GEMMs touch the compute threads' BLAS buffers, which the budget
   * holds room for beyond the RSS measured when the plans are built
   * (process_extra): room that is now in the RSS */
  size_t rss = nto_current_rss_bytes();
  if (nto_gemm_rate(RATE_PEAK_S) > min_flops)
    r->seg_flops = nto_gemm_rate(RATE_QUOTA_S);
  size_t grown = nto_current_rss_bytes() - rss;
  if (rss && grown < (size_t)1 << 30)
    mo->process_extra -= grown < mo->process_extra ? grown : mo->process_extra;
  if (r->seg_flops > min_flops) {
    mo->recompute = NTO_RECOMPUTE_SEGMENTS;
    r->seg_chosen = 1;
  }
}

/* Did the run ask for recompute auto (the default)? */
static int mo_auto(const run *r) {
  return !r->o.recompute || !strcmp(r->o.recompute, "auto");
}

/* The estimated iteration (ms) of choose_recompute's plan k (0: auto, 1:
 * segments) at its measured rate. */
static double seg_ms(const run *r, int k) {
  double compute = 1e3 * r->seg.flop[k] / r->seg_flops;
  double io = nto_segments_io_ms(&r->seg, k, r->seg_write_bps, r->seg_read_bps);
  return compute > io ? compute : io;
}

/* What will be resident, before training starts; the tuner's read-ahead. */
static void print_plan(run *r) {
  char a[32];
  nto_offload_stats st;
  setup_print_offload(r);
  if (nto_model_offload_stats(r->m, &st) != 0)
    return;
  nto_prefetch pf = nto_tuner_prefetch(nto_model_tuner(r->m));
  printf("offload: reads by %s (the tuner's choice%s)\n", nto_prefetch_name(pf),
         pf == NTO_PREFETCH_TIME
             ? ": from the step times and read bandwidth of the first "
               "iterations"
         : pf == NTO_PREFETCH_ROOM
             ? ": ahead within the window's own region where the device "
               "has idle time"
             : "");
  if (pf == NTO_PREFETCH_TIME && r->budget)
    printf("offload: within the memory budget of %s\n",
           nto_format_bytes(r->budget, a, sizeof a));
  if (st.note[0])
    printf("offload: %s\n", st.note);
  if (nto_model_convs_kept(r->m))
    printf("recompute: convolutions' outputs kept, not recomputed: "
           "recomputed, they would not fit the memory budget\n");
  if (!r->seg_chosen && mo_auto(r) &&
      nto_model_recompute(r->m) == NTO_RECOMPUTE_SEGMENTS)
    printf("recompute: segments (auto: the memory budget refused the model "
           "with the convolutions' outputs kept)\n");
  if (r->seg_chosen)
    printf("recompute: segments (auto: swap %.1f / %.1f MB/s written / "
           "read against %.1f GFLOP/s of compute: an iteration estimated "
           "at %.0f ms, %.0f ms without)\n",
           r->seg_write_bps / 1e6, r->seg_read_bps / 1e6, r->seg_flops / 1e9,
           seg_ms(r, 1), seg_ms(r, 0));
}

/* The memory settings (setup.h) and the trace's hooks. Returns 0, or -1
 * after printing a usage error. */
static int model_opts(run *r, nto_model_opts *mo) {
  nto_err err = {0};
  if (setup_memory_opts(r, mo) != 0 ||
      cli_optimizer_state(r->o.opt_state, &r->c.opt) != 0)
    return -1;
  if (r->o.trace && trace_open(&r->tr, r->o.trace, &err) != 0) {
    cli_error("%s", err.msg);
    return -1;
  }
  if (r->tr)
    trace_hooks(r->tr, &r->m, mo);
  return 0;
}

/* Free everything. The model goes first: freeing it drains the window,
 * whose last writes and state changes still go to the trace. Returns 0,
 * or NTO_EIO when the trace file could not be written. */
static int cleanup(run *r, nto_err *err) {
  setup_free(r);
  free(r->step_s);
  free(r->step_ms);
  free(r->step_tmp);
  if (r->csv)
    fclose(r->csv); /* every row was flushed and checked */
  outputs_release();
  return trace_close(r->tr, err); /* also after a failed run: valid JSON */
}

/* The data (and the batch buffers) for the model; --resume. */
static int open_run(run *r, nto_err *err) {
  nto_offload_stats st;
  r->offload = nto_model_offload_stats(r->m, &st) == 0;
  if (!r->offload && !strcmp(r->window_mode, "budget"))
    r->window_mode = "all"; /* everything fits the budget */
  r->batch = nto_model_batch(r->m);
  r->k = nto_model_output_size(r->m);
  nto_shape in = nto_model_input_shape(r->m);
  r->sample = nto_shape_sample(in);
  r->tty = isatty(STDOUT_FILENO);
  int rc = setup_open_data(&r->o, &r->c, in, r->k, &r->train, &r->test, err);
  if (rc == 0) {
    if (r->o.train_samples && !(r->o.data && !strcmp(r->o.data, "synthetic")))
      nto_dataset_limit(r->train, (size_t)r->o.train_samples);
    nto_dataset_shuffle(r->train, (size_t)r->o.shuffle, (uint64_t)r->o.seed);
    r->x = nto_alloc_aligned(r->sample * r->batch * sizeof(float));
    r->y = nto_alloc_aligned((size_t)r->k * r->batch * sizeof(float));
    if (!r->x || !r->y)
      rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  }
  return rc == 0 && r->o.resume ? resume(r, err) : rc;
}

/* Frozen layers: how many of those with weights, their parameters, and
 * the layers whose backward runs. */
static void print_frozen(const run *r) {
  const nto_graph *g = nto_model_graph(r->m);
  int frozen = 0, bwd = 0, batch_stats = 0;
  size_t params = 0;
  for (int i = 0; i < g->n_layers; i++) {
    const nto_layer *l = &g->layers[i];
    bwd += nto_model_backward(r->m, i);
    batch_stats |= l->frozen_batch_stats;
    if (l->trainable || l->n_w == 0)
      continue;
    frozen++;
    params += nto_layer_param_count(l);
  }
  if (frozen)
    printf("frozen: %d layers with weights (%zu parameters, batch "
           "normalization on %s); backward runs for %d of %d layers\n",
           frozen, params,
           batch_stats ? "the batch's statistics, running ones updated"
                       : "its running statistics",
           bwd, g->n_layers);
}

/* What is trained, on what, with which memory plan. */
static void print_setup(run *r) {
  printf("model %s: %d layers, %zu trainable parameters, batch %d, %ld "
         "threads\n",
         r->o.model, nto_model_graph(r->m)->n_layers,
         nto_model_param_count(r->m), r->batch, r->o.threads);
  print_frozen(r);
  if (r->o.init_weights)
    init_weights_print(&r->init, r->o.init_weights);
  cli_print_blas();
  printf("data: %s\n", nto_dataset_describe(r->train));
  if (r->test)
    printf("test: %s\n", nto_dataset_describe(r->test));
  int grouped, chains = nto_model_chains(r->m, &grouped);
  char a[32];
  if (chains)
    printf("channel groups: %d run%s of layers (%d layers) computed by "
           "groups of channels of at most about %s each\n",
           chains, chains == 1 ? "" : "s", grouped,
           nto_format_bytes(r->group_bytes, a, sizeof a));
  print_plan(r);
  if (r->o.resume)
    printf("resumed from %s at iteration %ld (epoch %ld, iteration %ld of "
           "that epoch)\n",
           r->o.resume, r->it0, r->epoch, r->ie);
  fflush(stdout);
}

/* A signal stopped the loop: the checkpoint, or without --checkpoint the
 * weights (--save, Save_Path), and what was kept; exit status 128 + the
 * signal. */
static int stopped(run *r, nto_err *err) {
  int sig = outputs_stop_signal();
  const char *sn = outputs_signal_name(sig), *path = outputs_save_path(r);
  int rc = write_checkpoint(r, err), saved = 0;
  if (rc == 0 && !r->o.checkpoint && path && r->n_steps > r->it0)
    saved = (rc = outputs_save(r, err)) == 0;
  if (rc == 0 && r->o.checkpoint && r->ckpt_it == r->n_steps && r->n_steps > 0)
    cli_error("interrupted by %s after iteration %ld; checkpoint %s holds "
              "it (continue with --resume %s)",
              sn, r->n_steps, r->o.checkpoint, r->o.checkpoint);
  else if (saved)
    cli_error("interrupted by %s after iteration %ld; no --checkpoint: the "
              "weights are saved to %s, without the optimizer state (go on "
              "from them with --init-weights, not --resume)",
              sn, r->n_steps, path);
  else if (rc == 0 && r->n_steps > r->it0)
    cli_error("interrupted by %s after iteration %ld (no --checkpoint: "
              "iterations %ld-%ld are lost)",
              sn, r->n_steps, r->it0 + 1, r->n_steps);
  else if (rc == 0)
    cli_error("interrupted by %s before the first iteration of this run", sn);
  else
    cli_error("%s", err->msg);
  return rc == 0 ? 128 + sig : cli_status(rc);
}

/* After the loop: the final checkpoint, the weights, the report. */
static int finish(run *r, double t0, nto_err *err) {
  int rc = write_checkpoint(r, err);
  /* Save before the report so that its peak RSS covers saving too. */
  double total_s = now_s() - t0;
  if (rc == 0)
    rc = outputs_save(r, err);
  metrics mx;
  if (rc == 0) {
    report_measure(r, &mx);
    report_print(r, &mx, total_s);
  }
  if (rc == 0 && r->o.report_json)
    rc = report_json(r, &mx, total_s, err);
  return rc;
}

/* [Model] continue_train = true: the run starts from the weights at the
 * save path (--save, else save_path) when that file exists, through
 * --init-weights (not its optimizer state: that is --resume's). An
 * explicit --init-weights or --resume wins; each case says so. */
static void continue_train(run *r) {
  const char *path = outputs_save_path(r);
  if (!r->c.model.continue_train)
    return;
  if (r->o.resume || r->o.init_weights) {
    printf("note: continue_train: %s given: starting from it\n",
           r->o.resume ? "--resume" : "--init-weights");
  } else if (!path) {
    printf("note: continue_train: no save_path or --save: starting from "
           "initialized weights\n");
  } else if (access(path, F_OK) != 0) {
    printf("note: continue_train: %s does not exist yet: starting from "
           "initialized weights (the end of this run saves it)\n",
           path);
  } else {
    printf("continue_train: starting from the weights at %s (not its "
           "optimizer state: continue that with --checkpoint/--resume)\n",
           path);
    r->o.init_weights = r->continued = path;
  }
}

int cmd_train(int argc, char **argv) {
  static run r; /* main thread only */
  memset(&r, 0, sizeof r);
  int prc = parse_opts(argc, argv, &r.o);
  if (prc != 0)
    return prc > 0 ? CLI_OK : CLI_USAGE;
  nto_err err = {0}, cerr = {0};
  double t0 = now_s();
  outputs_install_signals();
  /* every GEMM runs single-threaded in a range of the compute threads
   * (parallel.h nto_parallel_for_blas): OpenBLAS needs no threads */
  openblas_set_num_threads(1);
  cli_compute_threads(r.o.threads);
  int rc = nto_config_load(&r.c, r.o.model, &err);
  if (rc == 0)
    cli_config_warnings(&r.c);
  nto_model_opts mo = {.batch = (int)r.o.batch,
                       .seed = (uint64_t)r.o.seed,
                       .freeze_until = r.o.freeze_until};
  if (r.o.frozen_bn)
    mo.frozen_bn = !strcmp(r.o.frozen_bn, "batch") ? NTO_FROZEN_BN_BATCH
                                                   : NTO_FROZEN_BN_RUNNING;
  if (rc != 0 || outputs_check(&r) != 0 ||
      model_opts(&r, &mo) != 0) { /* an unreadable or invalid model file,
                                     an output or an option */
    if (rc != 0)
      cli_error("%s", err.msg);
    cleanup(&r, &cerr);
    return CLI_USAGE;
  }
  choose_recompute(&r, &mo);
  rc = nto_model_create(&r.m, &r.c, &mo, &err);
  r.best_acc = -1;
  if (rc == 0)
    continue_train(&r);
  if (rc == 0 && r.o.init_weights &&
      (rc = init_weights_load(r.m, r.o.init_weights, &r.init, &err)) != 0 &&
      rc != NTO_ENOMEM) { /* a file that is missing, unreadable or does not
                             fit the model: usage error */
    cli_error("%s: %s",
              r.continued ? "continue_train (the weights at save_path)"
                          : "--init-weights",
              err.msg);
    cleanup(&r, &cerr);
    return CLI_USAGE;
  }
  if (rc == 0)
    rc = open_run(&r, &err);
  rc = cli_address_space(&r, rc, &err); /* ulimit -v: threads or refusal */
  if (rc != 0) { /* the budget, the data or --resume (another model: usage
                    error; a corrupt file: runtime) */
    cli_error("%s", err.msg);
    cleanup(&r, &cerr);
    return cli_status(rc);
  }
  print_setup(&r);
  eval_setup(&r);
  rc = csv_open(&r, &err);
  if (rc == 0 && r.o.init_weights) /* the accuracy fine-tuning starts from */
    rc = evaluate(&r, EVAL_BEFORE, 0, &err);
  if (rc == 0 && !r.stopped)
    rc = train_loop(&r, &err);
  int status = CLI_OK;
  if (rc == 0 && r.stopped)
    status = stopped(&r, &err);
  else if (rc == 0)
    rc = finish(&r, t0, &err);
  if (rc != 0 && !r.stopped)
    cli_error("%s", err.msg);
  if (cleanup(&r, &cerr) != 0 && rc == 0 && status == CLI_OK) {
    cli_error("%s", cerr.msg);
    rc = cerr.code;
  }
  return status != CLI_OK ? status : rc == 0 ? CLI_OK : cli_status(rc);
}

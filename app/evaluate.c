/*
 * evaluate.c - `nntrainer-offload evaluate`: loss, accuracy, per-class
 * accuracy and the confusion matrix of saved weights on a test set. A
 * forward-only model (nto_model_opts.inference: no gradient, optimizer
 * state or backward step) with the same offloading as train, so a memory
 * budget fits the forward pass alone.
 */
#include "cli.h"
#include "memstat.h"
#include "outputs.h"
#include "parallel.h"
#include "run.h"
#include "setup.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Classes up to which stdout shows per-class accuracy and the confusion
 * matrix (--report-json has them always). */
#define SHOW_CLASSES 20

static const char usage[] =
    "usage: nntrainer-offload evaluate MODEL.ini --weights FILE [options]\n"
    "\n"
    "Runs the model forward (batch normalization on its running statistics,\n"
    "no dropout) over the test set and prints loss, accuracy, per-class\n"
    "accuracy and the confusion matrix.\n"
    "\n"
    "  --weights FILE        the weights: safetensors (every tensor by name\n"
    "                        and shape) or nntrainer .bin; required\n"
    "  --data DIR|synthetic  IDX directory, its t10k split (default: the\n"
    "                        INI's [test_set], else " SETUP_DEFAULT_DATA "),\n"
    "                        or an image folder's test split (as for train)\n"
    "  --valid-split F, --normalize M/S, --skip-bad-images   as for train\n"
    "  --classes LIST        only these labels, as 0..k-1 (as for train)\n"
    "  --eval-samples N      the first N test samples (default: all)\n"
    "  --batch-size B        batch size (default: the INI's batch_size)\n"
    "  --threads T           compute threads (default: online CPUs)\n"
    "  --window N|auto|all   as for train (auto: starts at window 1 and\n"
    "                        does not adapt)\n"
    "  --memory-budget SIZE  bound on resident tensors + workspace of the\n"
    "                        forward pass; alone: the largest window that\n"
    "                        fits\n"
    "  --swap-dir DIR, --allow-tmpfs-swap, --io uring|psync, --no-direct,\n"
    "  --channel-groups off|SIZE   as for train\n"
    "  --report-json FILE    the figures as JSON too\n"
    "  --seed S              synthetic data's seed (default 1)\n";

/* What the evaluation counted. */
typedef struct tally {
  int k;
  long n;
  double loss_sum; /* sum over samples of their loss */
  long *confusion; /* k x k: [true class][predicted class] */
  int *label;      /* (k): the data's label of class c (--classes), or c */
  const nto_dataset *ds; /* the test set: class names, if it has them */
} tally;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* evaluate's options (the memory ones as train's). */
static const setup_opt eval_opts[] = {
    SETUP_INFERENCE_OPTS,
    SETUP_OPT("--report-json", report_json, 's', 0, 0),
    SETUP_OPT("--eval-samples", eval_samples, 'i', 1, 1L << 40),
};

/* Returns 0, 1 after --help, or -1 after a usage error. */
static int parse_opts(int argc, char **argv, train_opts *o) {
  memset(o, 0, sizeof *o);
  o->seed = 1;
  o->threads = sysconf(_SC_NPROCESSORS_ONLN);
  int rc = setup_parse(argc, argv, usage, eval_opts,
                       sizeof eval_opts / sizeof *eval_opts, o, NULL, NULL);
  if (rc == 0 && !o->weights) {
    cli_error("evaluate: --weights FILE is required (the weights train "
              "saved: --save or the INI's Save_Path)");
    return -1;
  }
  return rc;
}

/* The test set, its batch buffers and the tally. */
static int open_eval(run *r, tally *t, nto_err *err) {
  nto_shape in = nto_model_input_shape(r->m);
  int rc = setup_open_data(&r->o, &r->c, in, r->k, NULL, &r->test, err);
  if (rc == 0 && !r->test)
    rc = nto_err_set(err, NTO_ECONFIG,
                     "%s: no test set (a [test_set] or [valid_set] section, "
                     "or --data)",
                     r->o.model);
  if (rc != 0)
    return rc;
  if (r->o.eval_samples)
    nto_dataset_limit(r->test, (size_t)r->o.eval_samples);
  t->k = r->k;
  t->ds = r->test;
  t->confusion = calloc((size_t)r->k * r->k, sizeof *t->confusion);
  t->label = malloc((size_t)r->k * sizeof *t->label);
  if (!t->confusion || !t->label)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  int n = r->k;
  for (int c = 0; c < r->k; c++)
    t->label[c] = c;
  return r->o.classes
             ? setup_parse_classes(r->o.classes, t->label, r->k, &n, err)
             : 0;
}

/* One forward pass per batch (the last one padded) into the tally. */
static int eval_loop(run *r, tally *t, nto_err *err) {
  int rc = nto_dataset_rewind(r->test, err);
  size_t total = nto_dataset_size(r->test);
  while (rc == 0) {
    int got = 0;
    nto_step_stats st;
    rc = nto_dataset_next(r->test, r->x, r->y, r->batch, &got, err);
    if (rc != 0 || got == 0)
      break;
    if ((rc = nto_model_eval_step(r->m, r->x, r->y, got, &st, err)) != 0)
      break;
    const float *out = nto_model_output(r->m);
    for (int b = 0; b < got; b++) {
      int truth = nto_argmax(r->y + (size_t)b * r->k, r->k);
      int pred = nto_argmax(out + (size_t)b * r->k, r->k);
      t->confusion[(size_t)truth * r->k + pred]++;
    }
    t->loss_sum += st.loss * got;
    t->n += got;
    if (r->tty) {
      printf("\revaluated %ld/%zu samples\033[K", t->n, total);
      fflush(stdout);
    }
  }
  if (r->tty)
    printf("\r\033[K");
  if (rc == 0 && t->n == 0)
    rc = nto_err_set(err, NTO_EDATA, "the test set has no samples");
  return rc;
}

/* Samples of class c, and those predicted right. */
static long class_n(const tally *t, int c) {
  long n = 0;
  for (int j = 0; j < t->k; j++)
    n += t->confusion[(size_t)c * t->k + j];
  return n;
}

static long correct(const tally *t) {
  long n = 0;
  for (int c = 0; c < t->k; c++)
    n += t->confusion[(size_t)c * t->k + c];
  return n;
}

static void print_tally(const tally *t, double secs) {
  char rss[32];
  nto_format_bytes(nto_peak_rss_bytes(), rss, sizeof rss);
  printf("evaluated %ld samples in %.1f s (%.0f samples/s), peak RSS %s\n",
         t->n, secs, secs > 0 ? t->n / secs : 0.0, rss);
  printf("loss %.4f accuracy %.2f%% (%ld of %ld)\n", t->loss_sum / t->n,
         100.0 * correct(t) / t->n, correct(t), t->n);
  if (t->k > SHOW_CLASSES) {
    printf("per-class accuracy and the confusion matrix of %d classes: "
           "--report-json\n",
           t->k);
    return;
  }
  printf("class  samples  accuracy\n");
  for (int c = 0; c < t->k; c++) {
    long n = class_n(t, c);
    const char *name = nto_dataset_class_name(t->ds, c);
    if (n)
      printf("%5d  %7ld  %7.2f%%", t->label[c], n,
             100.0 * t->confusion[(size_t)c * t->k + c] / n);
    else
      printf("%5d  %7d  %8s", t->label[c], 0, "-");
    printf("%s%s\n", name ? "  " : "", name ? name : "");
  }
  printf("confusion matrix (rows: true class, columns: predicted class)\n");
  printf("     ");
  for (int j = 0; j < t->k; j++)
    printf(" %6d", t->label[j]);
  printf("\n");
  for (int c = 0; c < t->k; c++) {
    printf("%5d", t->label[c]);
    for (int j = 0; j < t->k; j++)
      printf(" %6ld", t->confusion[(size_t)c * t->k + j]);
    printf("\n");
  }
}

static int write_json(const run *r, const tally *t, double secs, nto_err *err) {
  FILE *f = fopen(r->o.report_json, "w");
  if (!f)
    return nto_err_set(err, NTO_EIO, "--report-json: cannot open %s: %s",
                       r->o.report_json, strerror(errno));
  nto_offload_stats st;
  int off = nto_model_offload_stats(r->m, &st) == 0;
  fprintf(f, "{\n  \"command\": \"evaluate\",\n  \"model\": ");
  cli_json_string(f, r->o.model);
  fprintf(f, ",\n  \"weights\": ");
  cli_json_string(f, r->o.weights);
  fprintf(f, ",\n  \"data\": ");
  cli_json_string(f, nto_dataset_describe(r->test));
  fprintf(f, ",\n  \"batch\": %d,\n  \"window\": %d,\n", r->batch,
          off ? st.window : 0);
  fprintf(f, "  \"samples\": %ld,\n  \"loss\": %.6f,\n", t->n,
          t->loss_sum / t->n);
  fprintf(f, "  \"accuracy\": %.6f,\n", (double)correct(t) / t->n);
  fprintf(f, "  \"total_s\": %.3f,\n  \"peak_rss_bytes\": %zu,\n", secs,
          nto_peak_rss_bytes());
  fprintf(f, "  \"classes\": [");
  for (int c = 0; c < t->k; c++)
    fprintf(f, "%s%d", c ? ", " : "", t->label[c]);
  if (nto_dataset_class_name(t->ds, 0)) {
    fprintf(f, "],\n  \"class_names\": [");
    for (int c = 0; c < t->k; c++) {
      fprintf(f, "%s", c ? ", " : "");
      cli_json_string(f, nto_dataset_class_name(t->ds, c));
    }
  }
  fprintf(f, "],\n  \"class_samples\": [");
  for (int c = 0; c < t->k; c++)
    fprintf(f, "%s%ld", c ? ", " : "", class_n(t, c));
  fprintf(f, "],\n  \"confusion\": [");
  for (int c = 0; c < t->k; c++) {
    fprintf(f, "%s\n    [", c ? "," : "");
    for (int j = 0; j < t->k; j++)
      fprintf(f, "%s%ld", j ? ", " : "", t->confusion[(size_t)c * t->k + j]);
    fprintf(f, "]");
  }
  fprintf(f, "\n  ]\n}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return nto_err_set(err, NTO_EIO, "--report-json: cannot write %s",
                       r->o.report_json);
  return 0;
}

static void print_setup(const run *r) {
  setup_print_inference(r);
  printf("test: %s\n", nto_dataset_describe(r->test));
  setup_print_offload(r);
  fflush(stdout);
}

static int cleanup(run *r, tally *t) {
  setup_free(r);
  free(t->confusion);
  free(t->label);
  return 0;
}

int cmd_evaluate(int argc, char **argv) {
  static run r; /* main thread only */
  memset(&r, 0, sizeof r);
  tally t = {0};
  int prc = parse_opts(argc, argv, &r.o);
  if (prc != 0)
    return prc > 0 ? CLI_OK : CLI_USAGE;
  if (outputs_check_report(&r, "--report-json", NULL, 0) != 0)
    return CLI_USAGE;
  nto_err err = {0};
  int rc = 0, status = setup_inference(&r, 0);
  if (status != CLI_OK) {
    cleanup(&r, &t);
    return status;
  }
  if (rc == 0)
    rc = open_eval(&r, &t, &err);
  if (rc != 0) {
    cli_error("%s", err.msg);
    cleanup(&r, &t);
    return cli_status(rc);
  }
  print_setup(&r);
  double t0 = now_s();
  if (rc == 0)
    rc = eval_loop(&r, &t, &err);
  double secs = now_s() - t0;
  if (rc == 0)
    print_tally(&t, secs);
  if (rc == 0 && r.o.report_json)
    rc = write_json(&r, &t, secs, &err);
  if (rc != 0)
    cli_error("%s", err.msg);
  cleanup(&r, &t);
  return rc == 0 ? CLI_OK : cli_status(rc);
}

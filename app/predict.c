/*
 * predict.c - `nntrainer-offload predict`: the top classes of image files
 * (or of the first samples of a test set) with their probabilities, on a
 * forward-only model (setup.h setup_inference) with train's offloading.
 */
#include "cli.h"
#include "image.h"
#include "outputs.h"
#include "parallel.h"
#include "run.h"
#include "setup.h"
#include "weights.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: nntrainer-offload predict MODEL.ini --weights FILE IMAGE...\n"
    "       nntrainer-offload predict MODEL.ini --weights FILE --data DIR\n"
    "                                 [--samples N]\n"
    "\n"
    "Prints the most probable classes of each input with their\n"
    "probabilities (the output layer's softmax or sigmoid; a plain output\n"
    "is taken as logits of a softmax), by class name where the weights\n"
    "carry names (train saves an image folder's class folders).\n"
    "\n"
    "  IMAGE                 PNG, JPEG, BMP, GIF, TGA or PNM: decoded to the\n"
    "                        model's channels (grey replicated), resized to\n"
    "                        its input (bilinear), scaled to [0, 1]\n"
    "  --weights FILE        safetensors or nntrainer .bin; required\n"
    "  --normalize M/S       per-channel mean/std after scaling (as train)\n"
    "  --data DIR|synthetic  instead of images: the test split of a data\n"
    "                        source as train reads it (with --classes,\n"
    "                        --valid-split, ...); its labels are shown\n"
    "  --samples N           with --data: the first N samples (default 10)\n"
    "  --top K               classes per input (default 3)\n"
    "  --json FILE           every input's probabilities of all classes:\n"
    "                        {\"inputs\": [{\"input\": NAME, "
    "\"probabilities\":\n"
    "                        [p0, p1, ...]}, ...]}\n"
    "  --batch-size B        inputs per forward pass (default: the INI's,\n"
    "                        at most the number of images)\n"
    "  --threads T, --window N|auto|all, --memory-budget SIZE,\n"
    "  --swap-dir DIR, --allow-tmpfs-swap, --io uring|psync, --no-direct,\n"
    "  --channel-groups off|SIZE   as for evaluate\n";

static const setup_opt predict_opts[] = {
    SETUP_INFERENCE_OPTS,
    SETUP_OPT("--json", report_json, 's', 0, 0),
    SETUP_OPT("--samples", eval_samples, 'i', 1, 1L << 40),
    SETUP_OPT("--top", top, 'i', 1, 1L << 20),
};

/* A predict run: its inputs and the class names. */
typedef struct predict {
  const char **files; /* image files, or NULL with --data */
  int n_files;
  char **names;    /* (k) class names, or NULL: labels */
  char *names_buf; /* what names point into */
  int *label;      /* (k): the data's label of output c (--classes), or c */
  nto_image_norm norm;
  FILE *json; /* --json, or NULL */
  int rows;   /* rows written to json */
} predict;

static int parse_opts(int argc, char **argv, train_opts *o, predict *p) {
  memset(o, 0, sizeof *o);
  o->seed = 1;
  o->threads = sysconf(_SC_NPROCESSORS_ONLN);
  o->eval_samples = 10;
  o->top = 3;
  p->files = calloc((size_t)argc, sizeof *p->files);
  if (!p->files) {
    cli_error("out of memory");
    return -1;
  }
  int rc = setup_parse(argc, argv, usage, predict_opts,
                       sizeof predict_opts / sizeof *predict_opts, o, p->files,
                       &p->n_files);
  if (rc != 0)
    return rc;
  if (!o->weights) {
    cli_error("predict: --weights FILE is required (the weights train "
              "saved: --save or the INI's Save_Path)");
    return -1;
  }
  if (!o->data == !p->n_files) {
    cli_error(p->n_files ? "predict: give image files or --data, not both"
                         : "predict: give image files, or --data DIR");
    return -1;
  }
  return 0;
}

/* Class names: the weights' "class_names" (one per line) when they are
 * k, else the data's; labels: the weights' or the options' --classes. */
static int class_names(run *r, predict *p, nto_err *err) {
  p->label = malloc((size_t)r->k * sizeof *p->label);
  if (!p->label)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (int c = 0; c < r->k; c++)
    p->label[c] = c;
  char *list = NULL;
  int n = r->k, rc = 0;
  if (r->o.classes)
    rc = setup_parse_classes(r->o.classes, p->label, r->k, &n, err);
  else if ((rc = nto_weights_metadata(r->o.weights, "classes", &list, err)) ==
               0 &&
           list && setup_parse_classes(list, p->label, r->k, &n, err) != 0)
    for (int c = 0; c < r->k; c++) /* not of this model: plain labels */
      p->label[c] = c;
  free(list);
  if (rc == 0)
    rc = nto_weights_metadata(r->o.weights, "class_names", &p->names_buf, err);
  if (rc != 0 || !p->names_buf)
    return rc;
  p->names = calloc((size_t)r->k, sizeof *p->names);
  if (!p->names)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  int c = 0;
  for (char *s = p->names_buf; c < r->k && s; c++) {
    p->names[c] = s;
    if ((s = strchr(s, '\n')))
      *s++ = '\0';
  }
  if (c != r->k || strchr(p->names[r->k - 1], '\n')) { /* another model's */
    free(p->names);
    p->names = NULL;
  }
  return 0;
}

/* "sandal" or "7", for output class c. */
static const char *class_str(const run *r, const predict *p, int c, char *buf,
                             size_t len) {
  const char *n = p->names  ? p->names[c]
                  : r->test ? nto_dataset_class_name(r->test, c)
                            : NULL;
  if (n)
    return n;
  snprintf(buf, len, "%d", p->label[c]);
  return buf;
}

/* Row b of the output as probabilities into prob (k). */
static void probabilities(const run *r, int b, double *prob) {
  const nto_graph *g = nto_model_graph(r->m);
  const float *o = nto_model_output(r->m) + (size_t)b * r->k;
  double mx = o[0], sum = 0;
  if (g->layers[g->n_layers - 1].out_kind != NTO_OUT_PLAIN) {
    for (int c = 0; c < r->k; c++)
      prob[c] = o[c];
    return;
  }
  for (int c = 1; c < r->k; c++)
    mx = o[c] > mx ? o[c] : mx;
  for (int c = 0; c < r->k; c++)
    sum += prob[c] = exp((double)o[c] - mx);
  for (int c = 0; c < r->k; c++)
    prob[c] /= sum;
}

/* "NAME: first 87.20%, second 10.11%, ..." for row b of the output; its
 * probabilities to --json. */
static void print_row(const run *r, predict *p, int b, const char *what,
                      double *prob) {
  char buf[32];
  int top = (int)(r->o.top < r->k ? r->o.top : r->k);
  probabilities(r, b, prob);
  if (p->json) {
    fprintf(p->json, "%s\n    {\"input\": ", p->rows++ ? "," : "");
    cli_json_string(p->json, what);
    fprintf(p->json, ", \"probabilities\": [");
    for (int c = 0; c < r->k; c++)
      fprintf(p->json, "%s%.9g", c ? ", " : "", prob[c]);
    fprintf(p->json, "]}");
  }
  printf("%s:", what);
  for (int t = 0; t < top; t++) {
    int best = -1;
    for (int c = 0; c < r->k; c++)
      if (prob[c] >= 0 && (best < 0 || prob[c] > prob[best]))
        best = c;
    printf("%s %s %.2f%%", t ? "," : "", class_str(r, p, best, buf, sizeof buf),
           100.0 * prob[best]);
    prob[best] = -1; /* taken */
  }
  printf("\n");
}

/* The image files, a batch at a time. */
static int predict_files(run *r, predict *p, double *prob, nto_err *err) {
  nto_shape in = nto_model_input_shape(r->m);
  nto_step_stats st;
  int rc = 0;
  for (int f0 = 0; rc == 0 && f0 < p->n_files; f0 += r->batch) {
    int n = p->n_files - f0 < r->batch ? p->n_files - f0 : r->batch;
    memset(r->x, 0, r->sample * r->batch * sizeof *r->x);
    memset(r->y, 0, (size_t)r->k * r->batch * sizeof *r->y);
    for (int b = 0; rc == 0 && b < n; b++)
      rc = nto_image_load(p->files[f0 + b], in, &p->norm, r->x + b * r->sample,
                          err);
    if (rc == 0)
      rc = nto_model_eval_step(r->m, r->x, r->y, n, &st, err);
    for (int b = 0; rc == 0 && b < n; b++)
      print_row(r, p, b, p->files[f0 + b], prob);
  }
  return rc;
}

/* The first --samples samples of the test split, with their labels. */
static int predict_data(run *r, predict *p, double *prob, nto_err *err) {
  nto_step_stats st;
  long i = 0;
  int rc = nto_dataset_rewind(r->test, err);
  while (rc == 0) {
    int got = 0;
    rc = nto_dataset_next(r->test, r->x, r->y, r->batch, &got, err);
    if (rc != 0 || got == 0)
      break;
    rc = nto_model_eval_step(r->m, r->x, r->y, got, &st, err);
    for (int b = 0; rc == 0 && b < got; b++, i++) {
      char what[96], buf[32];
      int truth = nto_argmax(r->y + (size_t)b * r->k, r->k);
      snprintf(what, sizeof what, "sample %ld (%.40s)", i,
               class_str(r, p, truth, buf, sizeof buf));
      print_row(r, p, b, what, prob);
    }
  }
  return rc;
}

int cmd_predict(int argc, char **argv) {
  static run r; /* main thread only */
  predict p = {0};
  memset(&r, 0, sizeof r);
  int status = parse_opts(argc, argv, &r.o, &p);
  status = status > 0   ? -1
           : status < 0 ? CLI_USAGE
           : outputs_check_report(&r, "--json", p.files, p.n_files) != 0
               ? CLI_USAGE
               : setup_inference(&r, p.n_files);
  nto_err err = {0};
  double *prob = status == CLI_OK ? malloc((size_t)r.k * sizeof *prob) : NULL;
  int rc = status != CLI_OK ? 0
           : prob           ? 0
                            : nto_err_set(&err, NTO_ENOMEM, "out of memory");
  nto_shape in = status == CLI_OK ? nto_model_input_shape(r.m) : (nto_shape){0};
  if (status == CLI_OK && rc == 0 && r.o.normalize)
    rc = nto_image_norm_parse(r.o.normalize, in.c, &p.norm, &err);
  if (status == CLI_OK && rc == 0 && r.o.data) {
    rc = setup_open_data(&r.o, &r.c, in, r.k, NULL, &r.test, &err);
    if (rc == 0 && !r.test)
      rc = nto_err_set(&err, NTO_ECONFIG, "%s: no test split", r.o.data);
    if (rc == 0)
      nto_dataset_limit(r.test, (size_t)r.o.eval_samples);
  }
  if (status == CLI_OK && rc == 0)
    rc = class_names(&r, &p, &err);
  if (status == CLI_OK && rc == 0) {
    char how[256];
    setup_print_inference(&r);
    nto_image_describe(in, &p.norm, how, sizeof how);
    printf("input: %s\n", r.test ? nto_dataset_describe(r.test) : how);
    setup_print_offload(&r);
    if (r.o.report_json && !(p.json = fopen(r.o.report_json, "w")))
      rc = nto_err_set(&err, NTO_EIO, "--json: cannot open %s: %s",
                       r.o.report_json, strerror(errno));
    if (p.json)
      fprintf(p.json, "{\"inputs\": [");
    if (rc == 0)
      rc = r.test ? predict_data(&r, &p, prob, &err)
                  : predict_files(&r, &p, prob, &err);
    if (p.json) {
      fprintf(p.json, "\n]}\n");
      int bad = ferror(p.json);
      if ((fclose(p.json) != 0 || bad) && rc == 0)
        rc = nto_err_set(&err, NTO_EIO, "--json: cannot write %s",
                         r.o.report_json);
    }
  }
  if (rc != 0) {
    cli_error("%s", err.msg);
    status = cli_status(rc);
  }
  free(prob);
  setup_free(&r);
  free(p.files);
  free(p.names);
  free(p.names_buf);
  free(p.label);
  return status < 0 ? CLI_OK : status; /* -1: --help */
}

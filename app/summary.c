/* summary.c - `nntrainer-offload summary`: per-layer table and totals. */
#include "cli.h"
#include "memstat.h"
#include "parallel.h"
#include "setup.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: nntrainer-offload summary MODEL.ini [--batch-size B] [--threads "
    "T]\n"
    "                                 [--recompute "
    "auto|cheap|segments|segments:N|off]\n"
    "                                 [--freeze-until LAYER]\n"
    "                                 [--data DIR|synthetic] [--epochs E]\n"
    "                                 [--iterations K] [--flash-endurance "
    "TBW]\n"
    "                                 [--optimizer-state fp32|bf16|int8]\n"
    "                                 [--memory-budget SIZE]\n"
    "                                 [--channel-groups off|SIZE]\n"
    "\n"
    "Options take their value as --name VALUE or --name=VALUE.\n"
    "\n"
    "Prints, per layer: type, output shape (c:h:w), parameters, whether\n"
    "it trains (yes, frozen, - without weights) and the bytes it keeps\n"
    "from forward to backward (its saved tensors, plus its inputs or\n"
    "output when its backward reads them and does not recompute them;\n"
    "0 below the first trainable layer), then totals and the planned\n"
    "memory of training with everything resident, and, for offloading\n"
    "with windows 1, 2, 4 and 8, the planned memory of resident tensors,\n"
    "the estimated peak RSS of `train` and the swap traffic per\n"
    "iteration; then the flash wear those windows plan: the swap file's\n"
    "writes per epoch of the training set and for the run, and their\n"
    "share of the device's rated endurance.\n"
    "\n"
    "  --batch-size B   batch size (default: the INI's batch_size)\n"
    "  --freeze-until LAYER\n"
    "                   as for train: the layers up to LAYER frozen\n"
    "  --threads T      compute threads train will use, for the estimated\n"
    "                   peak RSS (default: online CPUs)\n"
    "  --recompute auto|cheap|segments|segments:N|off\n"
    "                   as for train (default auto: the table and the\n"
    "                   all-resident memory with activations recomputed,\n"
    "                   the offloading lines with cheap convolutions'\n"
    "                   outputs too; segments where a memory budget needs\n"
    "                   them; the swap device is not measured here)\n"
    "  --data DIR|synthetic, --train-samples N, --classes LIST,\n"
    "  --valid-split F  the training set, as for train: its size makes an\n"
    "                   epoch's iterations (default: the INI's [train_set],\n"
    "                   else " SETUP_DEFAULT_DATA ")\n"
    "  --epochs E, --iterations K\n"
    "                   the run, as for train (default: the INI's Epochs)\n"
    "  --flash-endurance TBW\n"
    "                   the swap device's rated endurance "
    "(default " SETUP_FLASH_TBW_TEXT ": a\n"
    "                   typical 32 GB eMMC's; TBW: 10^12 bytes written)\n"
    "  --optimizer-state fp32|bf16|int8\n"
    "                   as for train: how optimizer state is stored\n"
    "  --memory-budget SIZE\n"
    "                   also what train plans within this budget on the\n"
    "                   whole process: the window it picks, its estimated\n"
    "                   peak RSS and swap traffic, or the refusal\n"
    "  --channel-groups off|SIZE\n"
    "                   as for train: runs of layers that keep channels\n"
    "                   apart computed by groups of channels of at most\n"
    "                   about SIZE (default off)\n";

/* summary's options. */
typedef struct summary_opts {
  const char *path, *freeze, *endurance;
  const char *opt_state; /* --optimizer-state, NULL: the INI's */
  const char *budget_arg; /* --memory-budget as given, NULL: none */
  size_t budget;          /* its bytes */
  const char *groups_arg; /* --channel-groups as given, NULL: the INI's */
  size_t group_bytes;     /* its bytes (or the INI's), 0: off */
  long batch, threads, epochs, iterations;
  nto_recompute recompute;
  int segments_max; /* --recompute segments:N: N, else 0 */
  double tbw;   /* --flash-endurance, else SETUP_FLASH_TBW */
  train_opts d; /* the training set: --data, --train-samples, --classes,
                   --valid-split (setup_open_data) */
} summary_opts;

/* The windows summary plans offloading with. */
static const int windows[] = {1, 2, 4, 8};
#define N_WINDOWS 4

/* Bytes layer i keeps from its forward step to its backward step (an
 * output or input that backward recomputes is not kept). */
static size_t saved_bytes(const nto_model *m, int i) {
  const nto_graph *g = nto_model_graph(m);
  const nto_layer *l = &g->layers[i];
  size_t b = 0;
  if (!nto_model_backward(m, i)) /* below the first trainable layer */
    return 0;
  for (int k = 0; k < l->n_saved; k++)
    b += nto_shape_bytes(l->saved[k].shape);
  if (l->bwd_needs_output && !nto_model_recomputed(m, i))
    b += nto_shape_bytes(l->out_shape);
  if (l->bwd_needs_input)
    for (int k = 0; k < l->n_in; k++)
      if (!nto_model_recomputed(m, l->in[k]))
        b += nto_shape_bytes(g->layers[l->in[k]].out_shape);
  return b;
}

/* The chains of channel groups (--channel-groups): "FIRST .. LAST in G
 * groups" each. */
static void print_chains(const nto_model *m, size_t group_bytes) {
  const nto_graph *g = nto_model_graph(m);
  int layers, n = nto_model_chains(m, &layers);
  char a[32];
  if (!n)
    return;
  printf("channel groups (at most about %s each): %d run%s of layers, %d "
         "layers\n",
         nto_format_bytes(group_bytes, a, sizeof a), n, n == 1 ? "" : "s",
         layers);
  for (int i = 0; i < g->n_layers; i++) {
    int role, G = nto_model_groups(m, i, &role), e = i;
    if (role != 'P')
      continue;
    while (nto_model_groups(m, e, &role) > 1 && role != 'E')
      e++;
    printf("  %s .. %s in %d groups\n", g->layers[i].name, g->layers[e].name,
           G);
  }
}

static void print_table(const nto_model *m) {
  const nto_graph *g = nto_model_graph(m);
  char shape[64], bytes[32];
  printf("%-36s %-20s %-14s %12s %-6s %12s\n", "layer", "type", "output",
         "params", "train", "saved/bwd");
  for (int i = 0; i < g->n_layers; i++) {
    const nto_layer *l = &g->layers[i];
    size_t params = nto_layer_param_count(l);
    printf("%-36.36s %-20s %-14s %12zu %-6s %12s\n", l->name, l->ops->type,
           nto_shape_str(l->out_shape, 0, shape, sizeof shape), params,
           !params        ? "-"
           : l->trainable ? "yes"
                          : "frozen",
           nto_format_bytes(saved_bytes(m, i), bytes, sizeof bytes));
  }
}

/* Estimated peak RSS of `train` of model m holding `tensors` bytes of
 * tensors and workspace: this process's own RSS now (code, libraries, the
 * model's plans, as train has them too), what train holds beyond that
 * (SETUP_EST_FIXED_BYTES, SETUP_EST_THREAD_BYTES per thread: setup.h) and
 * train's batch buffers: what a budget on the process counts (model.c
 * process_budget), which keeps a margin above this (SETUP_BLAS_THREAD_BYTES
 * per thread instead). */
static size_t estimate_rss(const nto_model *m, size_t tensors, long threads) {
  return tensors + nto_current_rss_bytes() + SETUP_EST_FIXED_BYTES +
         (size_t)threads * SETUP_EST_THREAD_BYTES +
         nto_model_batch_io_bytes(m);
}

/* What offloading with windows 1, 2, 4 and 8 plans with model m: the
 * tensor region (the larger of the training and inference schedules) +
 * workspace, the estimated peak RSS, and the swap traffic of a training
 * iteration (schedule.h); then the same estimate with everything resident,
 * from `all` (the resident plan's, nto_model_mem_plan: m's, or with
 * nto_recompute auto another model's, freed before m was built so that
 * this process's RSS holds one model's plans, as train's does). */
static void print_windows(const nto_model *m, nto_mem_plan all, long threads,
                          double written[N_WINDOWS]) {
  size_t ws = nto_model_mem_plan(m).workspace;
  char a[32], b[32], c[32];
  printf("\noffloading (train --window N), with %ld threads: resident "
         "tensors + workspace %s, estimated peak RSS, swap traffic per "
         "iteration\n",
         threads, nto_format_bytes(ws, b, sizeof b));
  for (int i = 0; i < N_WINDOWS; i++) {
    nto_window_plan wp;
    nto_err err = {0};
    written[i] = -1;
    if (nto_tuner_window_plan(nto_model_tuner(m), windows[i], &wp, &err) != 0) {
      printf("  window %d: %s\n", windows[i], err.msg);
      continue;
    }
    written[i] = (double)wp.written_bytes;
    printf("  window %d: %s of tensors; estimated peak RSS %s; %.1f MiB "
           "read, %.1f MiB written\n",
           windows[i], nto_format_bytes(wp.need - ws, a, sizeof a),
           nto_format_bytes(estimate_rss(m, wp.need, threads), c, sizeof c),
           wp.read_bytes / 1048576.0, wp.written_bytes / 1048576.0);
  }
  printf("  all resident: %s of tensors; estimated peak RSS %s\n",
         nto_format_bytes(all.total - all.workspace, a, sizeof a),
         nto_format_bytes(estimate_rss(m, all.total, threads), c, sizeof c));
}

/* --memory-budget: what train would plan within it, o being the model
 * options summary planned with: the window the budget on the whole
 * process gives (the largest that fits; model.c process_budget, with
 * train's per-thread allowance), its tensors, estimated peak RSS and swap
 * traffic; or all resident; or the refusal. Call with no other model
 * alive, as train has one. */
static void print_budget(const summary_opts *so, const nto_config *c,
                         nto_model_opts o) {
  char a[32], b[32];
  nto_model *m = NULL;
  nto_err err = {0};
  o.window_mode = NTO_WINDOW_BUDGET;
  o.memory_budget = so->budget;
  o.budget_source = "--memory-budget";
  o.process_extra = (size_t)so->threads * SETUP_BLAS_THREAD_BYTES;
  printf("\nwithin --memory-budget %s (the whole process, train "
         "--memory-budget alone):\n",
         nto_format_bytes(so->budget, a, sizeof a));
  if (nto_model_create(&m, c, &o, &err) != 0) {
    printf("  refused: %s\n", err.msg);
    return;
  }
  int n = nto_tuner_window(nto_model_tuner(m));
  nto_window_plan wp = {0};
  if (n == 0) {
    nto_mem_plan p = nto_model_mem_plan(m);
    printf("  all resident: %s of tensors; estimated peak RSS %s\n",
           nto_format_bytes(p.total - p.workspace, a, sizeof a),
           nto_format_bytes(estimate_rss(m, p.total, so->threads), b,
                            sizeof b));
  } else if (nto_tuner_window_plan(nto_model_tuner(m), n, &wp, &err) == 0) {
    size_t ws = nto_model_mem_plan(m).workspace;
    printf("  window %d: %s of tensors; estimated peak RSS %s; %.1f MiB "
           "read, %.1f MiB written per iteration\n",
           n, nto_format_bytes(wp.need - ws, a, sizeof a),
           nto_format_bytes(estimate_rss(m, wp.need, so->threads), b,
                            sizeof b),
           wp.read_bytes / 1048576.0, wp.written_bytes / 1048576.0);
  } else {
    printf("  window %d: %s\n", n, err.msg);
  }
  nto_model_free(m);
}

/* The string option a names ("--name" or "--name=VALUE": *name and *m,
 * cli_opt_match's), or NULL if a is not one. */
static const char **string_opt(summary_opts *o, const char *a,
                               const char **name, int *m) {
  static const char *const names[] = {
      "--freeze-until",    "--data",            "--classes",
      "--valid-split",     "--flash-endurance", "--optimizer-state",
      "--memory-budget",   "--channel-groups",  NULL};
  const char **dst[] = {&o->freeze,        &o->d.data,    &o->d.classes,
                        &o->d.valid_split, &o->endurance, &o->opt_state,
                        &o->budget_arg,    &o->groups_arg};
  for (int i = 0; names[i]; i++)
    if ((*m = cli_opt_match(a, names[i])) != 0) {
      *name = names[i];
      return dst[i];
    }
  return NULL;
}

/* The integer option a names, its bounds, or NULL. */
static long *int_opt(summary_opts *o, const char *a, const char **name, int *m,
                     long *max) {
  static const char *const names[] = {"--batch-size",    "--threads",
                                      "--train-samples", "--epochs",
                                      "--iterations",    NULL};
  static const long maxes[] = {1 << 20, 256, 1L << 40, 1L << 40, 1L << 40};
  long *dst[] = {&o->batch, &o->threads, &o->d.train_samples, &o->epochs,
                 &o->iterations};
  for (int i = 0; names[i]; i++)
    if ((*m = cli_opt_match(a, names[i])) != 0) {
      *name = names[i];
      *max = maxes[i];
      return dst[i];
    }
  return NULL;
}

/* summary's options into *o (defaults set here); "--name VALUE" or
 * "--name=VALUE". Returns 0, 1 after --help, or -1 after a usage error
 * naming the option. */
static int parse_opts(int argc, char **argv, summary_opts *o) {
  memset(o, 0, sizeof *o);
  o->threads = sysconf(_SC_NPROCESSORS_ONLN);
  o->recompute = NTO_RECOMPUTE_AUTO;
  o->tbw = SETUP_FLASH_TBW;
  o->d.seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *name = a, **dst;
    long *target, max = 0;
    int m;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 1;
    } else if ((dst = string_opt(o, a, &name, &m)) != NULL) {
      if (!(*dst = cli_opt_value(argc, argv, &i, name, m))) {
        cli_error("option %s needs a value", name);
        return -1;
      }
    } else if ((target = int_opt(o, a, &name, &m, &max)) != NULL) {
      if (cli_int(name, cli_opt_value(argc, argv, &i, name, m), 1, max,
                  target) != 0)
        return -1;
    } else if ((m = cli_opt_match(a, "--recompute")) != 0) {
      const char *v = cli_opt_value(argc, argv, &i, "--recompute", m);
      if (!v) {
        cli_error("option --recompute needs a value");
        return -1;
      }
      if (cli_recompute(v, &o->recompute, &o->segments_max) != 0)
        return -1;
    } else if (a[0] == '-') {
      cli_error("summary: unknown option '%s'", a);
      return -1;
    } else if (!o->path) {
      o->path = a;
    } else {
      cli_error("summary: unexpected argument '%s'", a);
      return -1;
    }
  }
  o->d.model = o->path;
  if (o->budget_arg &&
      cli_budget("--memory-budget", o->budget_arg, &o->budget) != 0)
    return -1;
  return o->endurance
             ? setup_flash_endurance("--flash-endurance", o->endurance, &o->tbw)
             : 0;
}

/* Iterations in an epoch of the training set the options and the config
 * c name, for model m (full batches, as train counts them); its samples
 * into *samples. 0 with why filled when it cannot be opened (or holds
 * fewer samples than a batch). */
static long epoch_iterations(const summary_opts *o, const nto_config *c,
                             const nto_model *m, size_t *samples, char *why,
                             size_t len) {
  nto_dataset *train = NULL, *test = NULL;
  nto_err err = {0};
  size_t batch = (size_t)nto_model_batch(m);
  long n = 0;
  *samples = 0;
  if (setup_open_data(&o->d, c, nto_model_input_shape(m),
                      nto_model_output_size(m), &train, &test, &err) != 0) {
    snprintf(why, len, "%s", err.msg);
  } else {
    if (o->d.train_samples && !(o->d.data && !strcmp(o->d.data, "synthetic")))
      nto_dataset_limit(train, (size_t)o->d.train_samples);
    *samples = nto_dataset_size(train);
    n = (long)(*samples / batch);
    if (n == 0)
      snprintf(why, len, "%zu training samples are fewer than one batch of %zu",
               *samples, batch);
  }
  nto_dataset_close(train);
  nto_dataset_close(test);
  return n;
}

/* The flash wear the windows plan (written[i]: window i's swap writes
 * per iteration, bytes; < 0: no plan): per epoch of the training set
 * (per_epoch iterations of samples; 0: why) and for the run (--epochs,
 * else the INI's Epochs, at most --iterations), against the endurance. */
static void print_wear(const summary_opts *o, const nto_config *c,
                       const double written[N_WINDOWS], int batch,
                       long per_epoch, size_t samples, const char *why) {
  char a[32], b[32], c1[32], c2[32], run_what[96];
  double endurance = o->tbw * 1e12;
  long epochs = o->epochs ? o->epochs : c->model.epochs;
  long planned = epochs * per_epoch;
  if (o->iterations && o->iterations < planned) {
    planned = o->iterations;
    snprintf(run_what, sizeof run_what, "%ld iterations (--iterations)",
             planned);
  } else {
    snprintf(run_what, sizeof run_what, "%ld epoch%s, %ld iterations", epochs,
             epochs == 1 ? "" : "s", planned);
  }
  printf("\nflash wear (train --window N): the swap file's planned writes, "
         "against %g TBW (10^12 bytes): %s\n",
         o->tbw,
         o->endurance ? "--flash-endurance"
                      : "a typical 32 GB eMMC's rating, the default "
                        "(--flash-endurance TBW)");
  if (per_epoch == 0) {
    printf("  per epoch and for the run: no training set (%s); --data "
           "DIR|synthetic names one\n",
           why);
    return;
  }
  printf("  an epoch: %ld iterations (%zu training samples, batch %d, full "
         "batches); the run: %s\n",
         per_epoch, samples, batch, run_what);
  for (int i = 0; i < N_WINDOWS; i++) {
    if (written[i] < 0)
      continue;
    double epoch = written[i] * (double)per_epoch;
    double total = written[i] * (double)planned;
    printf("  window %d: %.1f MiB per iteration, %s per epoch (%s), %s "
           "for the run = %s of %g TBW\n",
           windows[i], written[i] / 1048576.0,
           nto_format_bytes((uint64_t)epoch, a, sizeof a),
           setup_share(epoch / endurance, c1, sizeof c1),
           nto_format_bytes((uint64_t)total, b, sizeof b),
           setup_share(total / endurance, c2, sizeof c2), o->tbw);
  }
}

int cmd_summary(int argc, char **argv) {
  summary_opts so;
  int prc = parse_opts(argc, argv, &so);
  if (prc != 0)
    return prc > 0 ? CLI_OK : CLI_USAGE;
  if (!so.path) {
    fputs(usage, stderr);
    return CLI_USAGE;
  }
  nto_config c;
  nto_err err = {0};
  nto_model *m = NULL;
  int rc = nto_config_load(&c, so.path, &err);
  if (rc == 0)
    cli_config_warnings(&c);
  if (rc == 0 && (cli_optimizer_state(so.opt_state, &c.opt) != 0 ||
                  cli_channel_groups(setup_channel_groups(so.groups_arg, &c),
                                     &so.group_bytes) != 0)) {
    nto_config_free(&c);
    return CLI_USAGE;
  }
  nto_model_opts o = {.batch = (int)so.batch,
                      .plan_only = 1,
                      .recompute = so.recompute,
                      .segments_max = so.segments_max,
                      .group_bytes = so.group_bytes,
                      .freeze_until = so.freeze};
  int status = CLI_USAGE; /* an unreadable or invalid model file */
  /* the workspace has a slot per compute thread where kernels need one
   * (parallel.h): plan with train's thread count */
  if (rc == 0)
    cli_compute_threads(so.threads);
  if (rc == 0) {
    rc = nto_model_create(&m, &c, &o, &err);
    status = cli_status(rc);
  }
  if (rc != 0) {
    cli_error("%s", err.msg);
    nto_config_free(&c);
    nto_parallel_free();
    return status;
  }
  printf("model %s, batch %d\n\n", so.path, nto_model_batch(m));
  print_table(m);
  nto_mem_plan p = nto_model_mem_plan(m);
  char a[32], b[32], d[32], e[32], f[32], why[NTO_ERR_MSG_MAX] = "";
  printf("\ntotal: %d layers, %zu trainable parameters\n",
         nto_model_graph(m)->n_layers, nto_model_param_count(m));
  print_chains(m, so.group_bytes);
  printf("planned memory (all resident): %s = weights %s + optimizer state "
         "%s%s + activations/gradients %s + workspace %s\n",
         nto_format_bytes(p.total, a, sizeof a),
         nto_format_bytes(p.weights, b, sizeof b),
         nto_format_bytes(p.opt_state, d, sizeof d), cli_state_note(&c.opt),
         nto_format_bytes(p.arena, e, sizeof e),
         nto_format_bytes(p.workspace, f, sizeof f));
  if (so.recompute == NTO_RECOMPUTE_AUTO ||
      so.recompute == NTO_RECOMPUTE_CHEAP) {
    /* offloaded, auto also recomputes convolutions: a plan of its own */
    nto_model_free(m);
    m = NULL;
    o.window_mode = NTO_WINDOW_AUTO;
    rc = nto_model_create(&m, &c, &o, &err);
  }
  double written[N_WINDOWS];
  if (rc == 0) {
    size_t samples;
    print_windows(m, p, so.threads, written);
    /* the data after the RSS estimates, which this process's RSS makes */
    long per_epoch = epoch_iterations(&so, &c, m, &samples, why, sizeof why);
    print_wear(&so, &c, written, nto_model_batch(m), per_epoch, samples, why);
    if (so.budget) {
      nto_model_free(m);
      m = NULL;
      print_budget(&so, &c, o);
    }
  } else {
    cli_error("%s", err.msg);
  }
  nto_model_free(m);
  nto_parallel_free();
  nto_config_free(&c);
  return rc == 0 ? CLI_OK : cli_status(rc);
}

/* summary.c - `nntrainer-offload summary`: per-layer table and totals. */
#include "cli.h"
#include "memstat.h"
#include "parallel.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: nntrainer-offload summary MODEL.ini [--batch-size B] [--threads "
    "T]\n"
    "                                 [--recompute auto|off]\n"
    "                                 [--freeze-until LAYER]\n"
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
    "iteration.\n"
    "\n"
    "  --batch-size B   batch size (default: the INI's batch_size)\n"
    "  --freeze-until LAYER\n"
    "                   as for train: the layers up to LAYER frozen\n"
    "  --threads T      compute threads train will use, for the estimated\n"
    "                   peak RSS (default: online CPUs)\n"
    "  --recompute auto|off\n"
    "                   as for train (default auto: the table and the\n"
    "                   all-resident memory with activations recomputed,\n"
    "                   the offloading lines with cheap convolutions'\n"
    "                   outputs too)\n";

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

/* What train holds beyond summary's own RSS, per compute thread: the
 * OpenBLAS packing buffer of each thread that calls BLAS, the data
 * pipeline, the I/O rings and threads. Calibrated against `train`'s peak
 * RSS with ResNet-18 and MobileNetV2 (docs/design.md). */
#define BLAS_THREAD_BYTES ((size_t)2 << 20)

/* Estimated peak RSS of `train` holding `tensors` bytes of tensors and
 * workspace: this process's own RSS now (code, libraries, the model's
 * plans, as train has them too) plus BLAS_THREAD_BYTES per thread. */
static size_t estimate_rss(size_t tensors, long threads) {
  return tensors + nto_current_rss_bytes() +
         (size_t)threads * BLAS_THREAD_BYTES;
}

/* What offloading with windows 1, 2, 4 and 8 plans with model m: the
 * tensor region (the larger of the training and inference schedules) +
 * workspace, the estimated peak RSS, and the swap traffic of a training
 * iteration (schedule.h); then the same estimate with everything resident,
 * from `all` (the resident plan's, nto_model_mem_plan: m's, or with
 * nto_recompute auto another model's, freed before m was built so that
 * this process's RSS holds one model's plans, as train's does). */
static void print_windows(const nto_model *m, nto_mem_plan all, long threads) {
  const int windows[] = {1, 2, 4, 8};
  size_t ws = nto_model_mem_plan(m).workspace;
  char a[32], b[32], c[32];
  printf("\noffloading (train --window N), with %ld threads: resident "
         "tensors + workspace %s, estimated peak RSS, swap traffic per "
         "iteration\n",
         threads, nto_format_bytes(ws, b, sizeof b));
  for (int i = 0; i < 4; i++) {
    nto_window_plan wp;
    nto_err err = {0};
    if (nto_tuner_window_plan(nto_model_tuner(m), windows[i], &wp, &err) != 0) {
      printf("  window %d: %s\n", windows[i], err.msg);
      continue;
    }
    printf("  window %d: %s of tensors; estimated peak RSS %s; %.1f MiB "
           "read, %.1f MiB written\n",
           windows[i], nto_format_bytes(wp.need - ws, a, sizeof a),
           nto_format_bytes(estimate_rss(wp.need, threads), c, sizeof c),
           wp.read_bytes / 1048576.0, wp.written_bytes / 1048576.0);
  }
  printf("  all resident: %s of tensors; estimated peak RSS %s\n",
         nto_format_bytes(all.total - all.workspace, a, sizeof a),
         nto_format_bytes(estimate_rss(all.total, threads), c, sizeof c));
}

/* summary's options into *batch, *threads, *recompute, *freeze and the
 * model *path; "--name VALUE" or "--name=VALUE". Returns 0, 1 after
 * --help, or -1 after a usage error naming the option. */
static int parse_opts(int argc, char **argv, const char **path, long *batch,
                      long *threads, nto_recompute *recompute,
                      const char **freeze) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int m;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 1;
    } else if ((m = cli_opt_match(a, "--batch-size")) != 0) {
      if (cli_int("--batch-size",
                  cli_opt_value(argc, argv, &i, "--batch-size", m), 1, 1 << 20,
                  batch) != 0)
        return -1;
    } else if ((m = cli_opt_match(a, "--freeze-until")) != 0) {
      if (!(*freeze = cli_opt_value(argc, argv, &i, "--freeze-until", m))) {
        cli_error("option --freeze-until needs a value");
        return -1;
      }
    } else if ((m = cli_opt_match(a, "--recompute")) != 0) {
      const char *v = cli_opt_value(argc, argv, &i, "--recompute", m);
      if (!v) {
        cli_error("option --recompute needs a value");
        return -1;
      }
      if (cli_recompute(v, recompute) != 0)
        return -1;
    } else if ((m = cli_opt_match(a, "--threads")) != 0) {
      if (cli_int("--threads", cli_opt_value(argc, argv, &i, "--threads", m), 1,
                  256, threads) != 0)
        return -1;
    } else if (a[0] == '-') {
      cli_error("summary: unknown option '%s'", a);
      return -1;
    } else if (!*path) {
      *path = a;
    } else {
      cli_error("summary: unexpected argument '%s'", a);
      return -1;
    }
  }
  return 0;
}

int cmd_summary(int argc, char **argv) {
  const char *path = NULL;
  long batch = 0, threads = sysconf(_SC_NPROCESSORS_ONLN);
  nto_recompute recompute = NTO_RECOMPUTE_AUTO;
  const char *freeze = NULL;
  int prc =
      parse_opts(argc, argv, &path, &batch, &threads, &recompute, &freeze);
  if (prc != 0)
    return prc > 0 ? CLI_OK : CLI_USAGE;
  if (!path) {
    fputs(usage, stderr);
    return CLI_USAGE;
  }
  nto_config c;
  nto_err err = {0};
  nto_model *m = NULL;
  int rc = nto_config_load(&c, path, &err);
  if (rc == 0)
    cli_config_warnings(&c);
  nto_model_opts o = {.batch = (int)batch,
                      .plan_only = 1,
                      .recompute = recompute,
                      .freeze_until = freeze};
  int status = CLI_USAGE; /* an unreadable or invalid model file */
  /* the workspace has a slot per compute thread where kernels need one
   * (parallel.h): plan with train's thread count */
  if (rc == 0)
    cli_compute_threads(threads);
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
  printf("model %s, batch %d\n\n", path, nto_model_batch(m));
  print_table(m);
  nto_mem_plan p = nto_model_mem_plan(m);
  char a[32], b[32], d[32], e[32], f[32];
  printf("\ntotal: %d layers, %zu trainable parameters\n",
         nto_model_graph(m)->n_layers, nto_model_param_count(m));
  printf("planned memory (all resident): %s = weights %s + optimizer state "
         "%s + activations/gradients %s + workspace %s\n",
         nto_format_bytes(p.total, a, sizeof a),
         nto_format_bytes(p.weights, b, sizeof b),
         nto_format_bytes(p.opt_state, d, sizeof d),
         nto_format_bytes(p.arena, e, sizeof e),
         nto_format_bytes(p.workspace, f, sizeof f));
  if (recompute == NTO_RECOMPUTE_AUTO) {
    /* offloaded, auto also recomputes convolutions: a plan of its own */
    nto_model_free(m);
    m = NULL;
    o.window_mode = NTO_WINDOW_AUTO;
    rc = nto_model_create(&m, &c, &o, &err);
  }
  if (rc == 0)
    print_windows(m, p, threads);
  else
    cli_error("%s", err.msg);
  nto_model_free(m);
  nto_parallel_free();
  nto_config_free(&c);
  return rc == 0 ? CLI_OK : cli_status(rc);
}

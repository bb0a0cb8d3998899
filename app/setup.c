/* setup.c - what train and evaluate share (setup.h). */
#include "setup.h"

#include "cli.h"

#include <stdlib.h>
#include <string.h>

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
static int budget_setting(run *r, nto_model_opts *mo) {
  const char *b = r->o.budget ? r->o.budget : r->c.model.memory_budget;
  r->budget = 0;
  if (!b || !b[0])
    return 0;
  nto_err e = {0};
  if (nto_parse_size(b, &r->budget, &e) != 0 || r->budget == 0) {
    cli_error("%s: expected a size > 0 with an optional K, M or G suffix, "
              "got '%s'",
              r->o.budget ? "--memory-budget" : "[Model] memory_budget", b);
    return -1;
  }
  mo->memory_budget = r->budget;
  if (r->o.budget) {
    mo->budget_source = "--memory-budget";
  } else {
    snprintf(r->budget_src, sizeof r->budget_src,
             "%.200s: [Model] memory_budget", r->o.model);
    mo->budget_source = r->budget_src;
  }
  return 0;
}

int setup_memory_opts(run *r, nto_model_opts *mo) {
  const train_opts *o = &r->o;
  const nto_model_conf *mc = &r->c.model;
  nto_offload_opts *oo = &mo->offload;
  const char *what, *w = window_setting(r, &what);
  if (budget_setting(r, mo) != 0 || cli_recompute(o->recompute, &mo->recompute))
    return -1;
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
  oo->io = NTO_IO_AUTO;
  if (o->io && cli_io(o->io, &oo->io) != 0)
    return -1;
  return 0;
}

/* One split of the source the options and the config name (train: 1,
 * test: 0), its labels src_k wide; *ds NULL when there is no such split
 * (raw files without a [test_set] or [valid_set]). */
static int open_split(const train_opts *o, const nto_config *c, nto_shape in,
                      int src_k, int train, nto_dataset **ds, nto_err *err) {
  *ds = NULL;
  if (o->data && !strcmp(o->data, "synthetic")) {
    size_t n = o->train_samples ? (size_t)o->train_samples : 2048;
    return train ? nto_dataset_open_synthetic(ds, n, in, src_k,
                                              (uint64_t)o->seed, err)
                 : nto_dataset_open_synthetic(ds, n / 4 ? n / 4 : 1, in, src_k,
                                              (uint64_t)o->seed + 7919, err);
  }
  if (!o->data && c->train_set.kind == NTO_DATA_FILE) {
    const nto_data_conf *t = train ? &c->train_set
                             : c->test_set.kind == NTO_DATA_FILE
                                 ? &c->test_set
                                 : &c->valid_set;
    return t->kind == NTO_DATA_FILE
               ? nto_dataset_open_raw(ds, t->path, in, src_k, err)
               : 0;
  }
  const char *dir = o->data ? o->data : SETUP_DEFAULT_DATA;
  return nto_dataset_open_idx_dir(ds, dir, train ? "train" : "t10k", in, src_k,
                                  err);
}

int setup_parse_classes(const char *list, int *out, int max, int *n,
                        nto_err *err) {
  *n = 0;
  for (const char *p = list;;) {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p || a < 0 || a > SETUP_MAX_CLASS)
      return nto_err_set(err, NTO_ECONFIG,
                         "--classes %s: expected labels from 0 to %d, "
                         "separated by commas, or ranges A-B",
                         list, SETUP_MAX_CLASS);
    if (*end == '-') {
      p = end + 1;
      b = strtol(p, &end, 10);
      if (end == p || b < a || b > SETUP_MAX_CLASS)
        return nto_err_set(err, NTO_ECONFIG,
                           "--classes %s: a range A-B needs A <= B <= %d", list,
                           SETUP_MAX_CLASS);
    }
    for (long c = a; c <= b; c++) {
      if (*n >= max)
        return nto_err_set(err, NTO_ECONFIG,
                           "--classes %s: more than %d classes", list, max);
      out[(*n)++] = (int)c;
    }
    if (*end == '\0')
      return 0;
    if (*end != ',')
      return nto_err_set(err, NTO_ECONFIG, "--classes %s: unexpected '%c'",
                         list, *end);
    p = end + 1;
  }
}

/* --classes: the list, the source's label width for it (IDX: a label
 * byte; synthetic: the largest class listed + 1), checked against the
 * model's k. */
static int classes_setup(const train_opts *o, const nto_config *c, int k,
                         int *list, int *n, int *src_k, nto_err *err) {
  int rc = setup_parse_classes(o->classes, list, SETUP_MAX_CLASS + 1, n, err);
  if (rc != 0)
    return rc;
  if (*n != k)
    return nto_err_set(err, NTO_ECONFIG,
                       "--classes %s lists %d classes, but the output layer "
                       "of %s has %d values: set its unit to %d",
                       o->classes, *n, o->model, k, *n);
  int max = 0;
  for (int j = 0; j < *n; j++)
    max = list[j] > max ? list[j] : max;
  if (o->data && !strcmp(o->data, "synthetic"))
    *src_k = max + 1;
  else if (!o->data && c->train_set.kind == NTO_DATA_FILE)
    return nto_err_set(err, NTO_ECONFIG,
                       "--classes: %s names nntrainer raw data files, whose "
                       "label width is the model's output size; --classes "
                       "needs IDX data or synthetic data",
                       o->model);
  else
    *src_k = 256; /* IDX labels are bytes */
  return 0;
}

/* Keep the listed classes of ds (NULL: nothing to do). */
static int keep_classes(const train_opts *o, nto_dataset *ds, const int *list,
                        int n, nto_err *err) {
  if (!ds)
    return 0;
  int rc = nto_dataset_keep_classes(ds, list, n, err);
  if (rc != NTO_EINVAL && rc != NTO_EDATA)
    return rc; /* 0, or a read error */
  err->code = NTO_ECONFIG; /* the list does not fit the data: usage */
  return nto_err_prefix(err, NTO_ECONFIG, "--classes %s: ", o->classes);
}

int setup_open_data(const train_opts *o, const nto_config *c, nto_shape in,
                    int k, nto_dataset **train, nto_dataset **test,
                    nto_err *err) {
  static int list[SETUP_MAX_CLASS + 1]; /* main thread only */
  int n = 0, src_k = k, rc = 0;
  *test = NULL;
  if (train)
    *train = NULL;
  if (o->classes)
    rc = classes_setup(o, c, k, list, &n, &src_k, err);
  if (rc == 0 && train)
    rc = open_split(o, c, in, src_k, 1, train, err);
  if (rc == 0)
    rc = open_split(o, c, in, src_k, 0, test, err);
  if (rc == 0 && n && train)
    rc = keep_classes(o, *train, list, n, err);
  if (rc == 0 && n)
    rc = keep_classes(o, *test, list, n, err);
  return rc;
}

void setup_print_offload(const run *r) {
  char a[32], b[32], c[32];
  nto_mem_plan p = nto_model_mem_plan(r->m);
  nto_offload_stats st;
  if (nto_model_offload_stats(r->m, &st) != 0) {
    printf("planned memory: %s (all resident)\n",
           nto_format_bytes(p.total, a, sizeof a));
    return;
  }
  printf("offload: window %d steps, %s, swap file %s in %s%s; resident "
         "tensors in a region of %s + workspace %s\n",
         st.window, st.io, nto_format_bytes(st.swap_bytes, a, sizeof a),
         st.swap_dir, st.direct ? " (O_DIRECT)" : " (page cache)",
         nto_format_bytes(st.region, b, sizeof b),
         nto_format_bytes(p.workspace, c, sizeof c));
}

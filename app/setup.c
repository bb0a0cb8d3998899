/* setup.c - what train and evaluate share (setup.h). */
#include "setup.h"

#include "cli.h"
#include "init_weights.h"
#include "memstat.h"
#include "optimizer.h"
#include "parallel.h"
#include "swap.h"

#include <cblas.h>

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* setup_swap_dir's note for the run that setup_memory_opts set up, printed
 * with the offload line; "" if none. Main thread only. */
static char swap_note[sizeof((setup_swap *)0)->note];

int setup_flash_endurance(const char *what, const char *v, double *tbw) {
  char *end;
  double x = strtod(v, &end);
  if (end != v && (!strcasecmp(end, "TBW") || !strcasecmp(end, "TB")))
    end += strlen(end);
  if (end == v || *end || !(x > 0) || x > 1e6) { /* NaN too */
    cli_error("%s %s: expected the device's rated endurance in TBW "
              "(terabytes written, 10^12 bytes, as its datasheet gives "
              "it), a number above 0 such as 48 or 150TBW",
              what, v);
    return -1;
  }
  *tbw = x;
  return 0;
}

const char *setup_share(double frac, char *buf, size_t len) {
  double p = 100 * frac;
  if (p >= 10)
    snprintf(buf, len, "%.0f%%", p);
  else if (p >= 1)
    snprintf(buf, len, "%.1f%%", p);
  else if (p >= 0.01)
    snprintf(buf, len, "%.2f%%", p);
  else if (p >= 0.0001)
    snprintf(buf, len, "%.4f%%", p);
  else
    snprintf(buf, len, "%s%%", p > 0 ? "<0.0001" : "0");
  return buf;
}

int setup_ram_swap_env(int *allow) {
  const char *v = getenv("NTO_ALLOW_TMPFS_SWAP");
  if (!v || !v[0] || !strcmp(v, "0"))
    return 0;
  if (strcmp(v, "1") != 0) {
    cli_error("NTO_ALLOW_TMPFS_SWAP: expected 0 or 1 (1: as "
              "--allow-tmpfs-swap), got '%s'",
              v);
    return -1;
  }
  *allow = 1;
  return 0;
}

/* NTO_ECONFIG: s->dir (from s->what) is on fs, refused. */
static int ram_refused(const setup_swap *s, const char *fs, nto_err *err) {
  return nto_err_set(err, NTO_ECONFIG,
                     "%s is on %s: its pages are RAM: swapping there saves "
                     "no memory; give a directory on flash or disk, or "
                     "--allow-tmpfs-swap to swap there anyway (for tests)",
                     s->what, fs);
}

/* Whether dir can take the swap file instead of a RAM-backed default: a
 * directory we may write in, not on tmpfs or ramfs. If not, why into
 * why. */
static int disk_dir(const char *dir, char *why, size_t len) {
  struct stat st;
  const char *fs;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    snprintf(why, len, "%s is not a directory", dir);
  else if (access(dir, W_OK | X_OK) != 0)
    snprintf(why, len, "%s is not writable", dir);
  else if (nto_swap_dir_in_ram(dir, &fs, NULL) == 1)
    snprintf(why, len, "%s is on %s too", dir, fs);
  else
    return 1;
  return 0;
}

/* The default swap directory (setup_swap_dir): $TMPDIR or /tmp, or
 * /var/tmp instead of a RAM-backed one. */
static int default_swap_dir(int allow_ram, setup_swap *s, nto_err *err) {
  static const char alt[] = "/var/tmp";
  const char *t = getenv("TMPDIR"), *fs;
  int env = t && t[0];
  char why[128];
  s->dir = env ? t : "/tmp";
  if (env)
    snprintf(s->what, sizeof s->what, "$TMPDIR (%.400s)", t);
  else
    snprintf(s->what, sizeof s->what, "/tmp");
  if (allow_ram || nto_swap_dir_in_ram(s->dir, &fs, NULL) != 1)
    return 0;
  if (!disk_dir(alt, why, sizeof why))
    return nto_err_set(err, NTO_ECONFIG,
                       "no default swap directory on flash or disk: %s is "
                       "on %s: its pages are RAM: swapping there saves no "
                       "memory; and %s; give --swap-dir DIR, or "
                       "--allow-tmpfs-swap to swap in RAM anyway (for tests)",
                       s->what, fs, why);
  snprintf(s->note, sizeof s->note,
           "swap directory %s, not %s: that is on %s, whose pages are RAM "
           "(swapping there saves no memory); --swap-dir DIR chooses",
           alt, s->what, fs);
  s->dir = alt;
  snprintf(s->what, sizeof s->what, "%s", alt);
  return 0;
}

int setup_swap_dir(const char *opt, const char *swap_path, const char *model,
                   int allow_ram, setup_swap *s, nto_err *err) {
  const char *fs;
  memset(s, 0, sizeof *s);
  if (opt) {
    s->dir = opt;
    snprintf(s->what, sizeof s->what, "--swap-dir %.400s", opt);
  } else if (swap_path && swap_path[0]) {
    s->dir = swap_path;
    snprintf(s->what, sizeof s->what, "%.200s: [Model] memory_swap_path %s",
             model ? model : "the INI file", swap_path);
  } else {
    return default_swap_dir(allow_ram, s, err);
  }
  if (!allow_ram && nto_swap_dir_in_ram(s->dir, &fs, NULL) == 1)
    return ram_refused(s, fs, err);
  return 0;
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

/* Without a budget: the memory the process may use (memstat.h
 * nto_memory_limit) bounds the whole process (model.h memory_limit,
 * process_extra), named in r->limit_src. */
static void limit_setting(run *r, nto_model_opts *mo) {
  size_t lim;
  nto_limit_kind k = nto_memory_limit(NULL, NULL, &lim);
  if (k == NTO_LIMIT_NONE)
    return;
  char a[32];
  mo->memory_limit = lim;
  snprintf(r->limit_src, sizeof r->limit_src, "%s of %s (no --memory-budget)",
           k == NTO_LIMIT_AVAILABLE ? "the memory available (MemAvailable)"
                                    : "the cgroup memory limit",
           nto_format_bytes(lim, a, sizeof a));
  mo->limit_source = r->limit_src;
}

/* The memory budget: --memory-budget, else the INI's memory_budget; else
 * the limit the process lives under (limit_setting). */
static int budget_setting(run *r, nto_model_opts *mo) {
  const char *b = r->o.budget ? r->o.budget : r->c.model.memory_budget;
  r->budget = 0;
  if (!b || !b[0]) {
    limit_setting(r, mo);
    return 0;
  }
  if (cli_budget(r->o.budget ? "--memory-budget" : "[Model] memory_budget", b,
                 &r->budget) != 0)
    return -1;
  if (r->o.budget) {
    mo->budget_source = "--memory-budget";
  } else {
    snprintf(r->budget_src, sizeof r->budget_src,
             "%.200s: [Model] memory_budget", r->o.model);
    mo->budget_source = r->budget_src;
  }
  mo->memory_budget = r->budget; /* on the whole process: process_extra */
  return 0;
}

const char *setup_channel_groups(const char *arg, const nto_config *c) {
  return arg ? arg : c->model.channel_groups[0] ? c->model.channel_groups : NULL;
}

int setup_memory_opts(run *r, nto_model_opts *mo) {
  const train_opts *o = &r->o;
  const nto_model_conf *mc = &r->c.model;
  nto_offload_opts *oo = &mo->offload;
  const char *what, *w = window_setting(r, &what);
  if (budget_setting(r, mo) != 0 ||
      cli_recompute(o->recompute, &mo->recompute, &mo->segments_max) ||
      cli_update_placement(o->updates, &mo->update_placement) ||
      cli_channel_groups(setup_channel_groups(o->groups, &r->c),
                         &mo->group_bytes))
    return -1;
  r->group_bytes = mo->group_bytes;
  /* budgets and limits bound the whole process: beyond its RSS when the
   * plans are built, it holds the BLAS buffers of each compute thread */
  mo->process_extra = (size_t)nto_parallel_threads() * SETUP_BLAS_THREAD_BYTES;
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
    if (nto_parse_int(w, 1, 1L << 20, &n, NULL) != 0) {
      cli_error("%s%s: expected a number of steps N from 1 to %ld, auto "
                "(adapt N) or all (everything resident), got '%s'",
                r->o.window ? "option " : "", what, 1L << 20, w);
      return -1;
    }
    oo->window = (int)n;
    r->window_mode = "fixed";
  }
  oo->swap_dir = o->swap_dir        ? o->swap_dir
                 : mc->swap_path[0] ? mc->swap_path
                                    : NULL;
  swap_note[0] = '\0';
  if (mo->window_mode != NTO_WINDOW_FIXED || oo->window > 0) { /* may swap */
    setup_swap sw;
    nto_err err = {0};
    if (setup_swap_dir(o->swap_dir, mc->swap_path, o->model, o->allow_ram_swap,
                       &sw, &err) != 0) {
      cli_error("%s", err.msg);
      return -1;
    }
    oo->swap_dir = sw.dir;
    snprintf(swap_note, sizeof swap_note, "%s", sw.note);
  } else if (mo->memory_limit) { /* swaps only if the limit binds */
    static setup_swap sw;
    if (setup_swap_dir(o->swap_dir, mc->swap_path, o->model, o->allow_ram_swap,
                       &sw, NULL) == 0) {
      oo->swap_dir = sw.dir;
      snprintf(swap_note, sizeof swap_note, "%s", sw.note);
    }
  }
  oo->no_direct = o->no_direct;
  oo->io = NTO_IO_AUTO;
  if (o->io && cli_io(o->io, &oo->io) != 0)
    return -1;
  return 0;
}

/* The kind of data the options and the config name. */
typedef enum { DATA_IDX, DATA_RAW, DATA_SYNTHETIC, DATA_IMAGES } data_kind;

static data_kind kind_of(const train_opts *o, const nto_config *c) {
  if (o->data && !strcmp(o->data, "synthetic"))
    return DATA_SYNTHETIC;
  if (!o->data)
    return c->train_set.kind == NTO_DATA_FILE ? DATA_RAW : DATA_IDX;
  char p[4096];
  struct stat st;
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", o->data);
  if (stat(p, &st) == 0)
    return DATA_IDX;
  p[strlen(p) - 3] = '\0'; /* without .gz */
  return stat(p, &st) == 0 ? DATA_IDX : DATA_IMAGES;
}

/* The image folder options for a split. */
static int image_opts(const train_opts *o, nto_shape in, int train,
                      nto_image_dir_opts *io, nto_err *err) {
  memset(io, 0, sizeof *io);
  io->split = train ? "train" : "test";
  io->skip_bad = o->skip_bad_images;
  if (o->valid_split) {
    char *end;
    io->valid_split = strtod(o->valid_split, &end);
    if (end == o->valid_split || *end || !(io->valid_split > 0) ||
        io->valid_split >= 1)
      return nto_err_set(err, NTO_ECONFIG,
                         "--valid-split %s: expected a fraction between 0 "
                         "and 1 (e.g. 0.2)",
                         o->valid_split);
  }
  return o->normalize ? nto_image_norm_parse(o->normalize, in.c, &io->norm, err)
                      : 0;
}

/* One split of the source the options and the config name (train: 1,
 * test: 0), its labels src_k wide; *ds NULL when there is no such split
 * (raw files without a [test_set] or [valid_set]). */
static int open_split(const train_opts *o, const nto_config *c, nto_shape in,
                      int src_k, int train, nto_dataset **ds, nto_err *err) {
  *ds = NULL;
  if (kind_of(o, c) == DATA_IMAGES) {
    nto_image_dir_opts io;
    int rc = image_opts(o, in, train, &io, err);
    return rc ? rc
              : nto_dataset_open_image_dir(ds, o->data, &io, in, src_k, err);
  }
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
  switch (kind_of(o, c)) {
  case DATA_SYNTHETIC:
    *src_k = max + 1;
    return 0;
  case DATA_RAW:
    return nto_err_set(err, NTO_ECONFIG,
                       "--classes: %s names nntrainer raw data files, whose "
                       "label width is the model's output size; --classes "
                       "needs IDX, image folder or synthetic data",
                       o->model);
  case DATA_IMAGES:
    *src_k = 0; /* as many as the class folders */
    return 0;
  case DATA_IDX:
    break;
  }
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
    return rc;             /* 0, or a read error */
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
  if (r->c.opt.state_format != NTO_OPT_STATE_FP32)
    printf("optimizer state: %s (approximate; weights of fewer than %d "
           "elements keep fp32): %s\n",
           r->c.opt.state_format == NTO_OPT_STATE_INT8
               ? "int8, block-wise dynamic quantization"
               : "bf16",
           NTO_OPT_Q_MIN_NUMEL, nto_format_bytes(p.opt_state, a, sizeof a));
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
  const char *lim = NULL;
  if (nto_tuner_limited(nto_model_tuner(r->m), &lim))
    printf("offload: everything resident would not fit %s: window %d\n", lim,
           st.window);
  if (swap_note[0])
    printf("offload: %s\n", swap_note);
}

/* The entry of opts that argument a names, as "--name" or "--name=VALUE"
 * (*m: cli_opt_match's 1 or 2), or NULL. */
static const setup_opt *find_opt(const setup_opt *opts, size_t n, const char *a,
                                 int *m) {
  for (size_t i = 0; i < n; i++)
    if ((*m = cli_opt_match(a, opts[i].name)) != 0)
      return &opts[i];
  return NULL;
}

/* Option d at argv[*i] (found as m) into its field of *o. Returns 0, or
 * -1 after a usage error naming the option. */
static int set_opt(int argc, char **argv, int *i, const setup_opt *d, int m,
                   train_opts *o) {
  char *field = (char *)o + d->off;
  if (d->kind == 'f') {
    if (m == 2) {
      cli_error("option %s takes no value, got '%s'", d->name, argv[*i]);
      return -1;
    }
    *(int *)field = 1;
    return 0;
  }
  const char *v = cli_opt_value(argc, argv, i, d->name, m);
  if (d->kind == 'i')
    return cli_int(d->name, v, d->min, d->max, (long *)field);
  if (!v) {
    cli_error("option %s needs a value", d->name);
    return -1;
  }
  *(const char **)field = v;
  return 0;
}

int setup_parse(int argc, char **argv, const char *usage, const setup_opt *opts,
                size_t n, train_opts *o, const char **args, int *n_args) {
  const char *cmd = argv[0];
  o->tbw = SETUP_FLASH_TBW;
  if (n_args)
    *n_args = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int m = 0;
    const setup_opt *d = find_opt(opts, n, a, &m);
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 1;
    } else if (d) {
      if (set_opt(argc, argv, &i, d, m, o) != 0)
        return -1;
    } else if (a[0] == '-' && a[1]) {
      cli_error("%s: unknown option '%s' (try %s --help)", cmd, a, cmd);
      return -1;
    } else if (!o->model) {
      o->model = a;
    } else if (args) {
      args[(*n_args)++] = a;
    } else {
      cli_error("%s: unexpected argument '%s'", cmd, a);
      return -1;
    }
  }
  if (!o->model) {
    fputs(usage, stderr);
    return -1;
  }
  if (o->endurance &&
      setup_flash_endurance("--flash-endurance", o->endurance, &o->tbw) != 0)
    return -1;
  return setup_ram_swap_env(&o->allow_ram_swap);
}

/* Every weight of the model from o->weights; a tensor the file lacks or
 * has in another shape is an error (there is no initialization to keep). */
static int load_all_weights(run *r, nto_err *err) {
  int rc = init_weights_load(r->m, r->o.weights, &r->init, err);
  if (rc == 0 && r->init.tensors < r->init.of)
    rc = nto_err_set(err, NTO_ECONFIG,
                     "%s: %d of the model's %d weight tensors are missing or "
                     "differ in shape: %s",
                     r->o.weights, r->init.of - r->init.tensors, r->init.of,
                     r->init.kept);
  return rc;
}

int setup_inference(run *r, int max_batch) {
  nto_err err = {0};
  openblas_set_num_threads(1); /* as train: GEMMs in our compute threads */
  cli_compute_threads(r->o.threads);
  int rc = nto_config_load(&r->c, r->o.model, &err);
  if (rc == 0)
    cli_config_warnings(&r->c);
  nto_model_opts mo = {.batch = (int)r->o.batch,
                       .seed = (uint64_t)r->o.seed,
                       .inference = 1,
                       .prefetch = NTO_PREFETCH_STEPS};
  if (rc != 0 || setup_memory_opts(r, &mo) != 0) {
    if (rc != 0)
      cli_error("%s", err.msg);
    return CLI_USAGE;
  }
  if (!mo.batch && max_batch > 0 && max_batch < r->c.model.batch_size)
    mo.batch = max_batch; /* no buffers for inputs that do not exist */
  rc = nto_model_create(&r->m, &r->c, &mo, &err);
  if (rc == 0 && (rc = load_all_weights(r, &err)) != 0 && rc != NTO_ENOMEM) {
    cli_error("--weights: %s", err.msg);
    return CLI_USAGE;
  }
  rc = cli_address_space(r, rc, &err); /* ulimit -v: threads or refusal */
  if (rc != 0) {
    cli_error("%s", err.msg);
    return cli_status(rc);
  }
  r->batch = nto_model_batch(r->m);
  r->k = nto_model_output_size(r->m);
  r->sample = nto_shape_sample(nto_model_input_shape(r->m));
  r->tty = isatty(STDOUT_FILENO);
  r->x = nto_alloc_aligned(r->sample * r->batch * sizeof(float));
  r->y = nto_alloc_aligned((size_t)r->k * r->batch * sizeof(float));
  if (!r->x || !r->y) {
    cli_error("out of memory");
    return CLI_RUNTIME;
  }
  return CLI_OK;
}

void setup_print_inference(const run *r) {
  const nto_graph *g = nto_model_graph(r->m);
  size_t params = 0;
  for (int i = 0; i < g->n_layers; i++)
    params += nto_layer_param_count(&g->layers[i]);
  printf("model %s: %d layers, %zu parameters, batch %d, %ld threads\n",
         r->o.model, g->n_layers, params, r->batch, r->o.threads);
  printf("weights: %zu parameters (%d tensors) from %s (%s)\n", r->init.params,
         r->init.tensors, r->o.weights, r->init.format);
  cli_print_blas();
}

void setup_free(run *r) {
  nto_dataset_close(r->train);
  nto_dataset_close(r->test);
  nto_model_free(r->m);
  nto_parallel_free();
  nto_config_free(&r->c);
  nto_free_aligned(r->x);
  nto_free_aligned(r->y);
  r->train = r->test = NULL;
  r->m = NULL;
  r->x = r->y = NULL;
}

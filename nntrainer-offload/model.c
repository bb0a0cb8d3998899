/* model.c - the facade that wires plan, mechanism and policy. See model.h. */
#include "model.h"
#include "arena.h"
#include "lr_scheduler.h"
#include "memstat.h"
#include "optimizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

struct nto_model {
  const nto_config *conf;
  nto_opt_conf opt;
  nto_lr_conf lr;
  nto_graph g;
  nto_tensors tt;     /* the tensor table */
  nto_steps st;       /* the step order and both plans */
  nto_tuner *tuner;   /* the residency policy */
  nto_residency *res; /* the arena or the engine's; NULL: plan only */
  nto_offload *off;   /* the engine, NULL: all resident */
  nto_exec ex;        /* what a pass runs on */
  float *ws;          /* the workspace (im2col) */
  size_t ws_bytes;
  size_t arena_bytes; /* the all-resident plan's arena */
  float *output;      /* copy of the last layer's output (N x K) */
  float *input_grad;  /* when compute_input_grad */
  long iteration;     /* optimizer updates done */
  nto_rng rng;
  int convs_kept;          /* recompute auto kept the convolutions' outputs */
  nto_recompute recompute; /* the setting the model was built with */
  nto_pass_sample sample;  /* the last training pass, for the tuner */
  int sampled;             /* sample holds a pass the tuner has not seen */
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The loss form, and that the graph has one input layer and a layer
 * after it. */
static int setup_loss(nto_model *m, nto_tensors_opts *to, nto_err *err) {
  int last = m->g.n_layers - 1, inputs = 0;
  nto_layer *out = &m->g.layers[last];
  m->ex.form =
      nto_loss_form_for(m->conf->model.loss, out->out_kind, &to->fused);
  to->logits_layer = to->fused ? out->in[0] : last;
  for (int i = 0; i <= last; i++)
    inputs += nto_is_input(&m->g.layers[i]);
  if (inputs != 1 || !nto_is_input(&m->g.layers[0]))
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: exactly one input layer is supported, found %d",
                       m->conf->path, inputs);
  if (last == 0)
    return nto_err_set(err, NTO_ECONFIG,
                       "%s: the model has no layer after its input",
                       m->conf->path);
  return 0;
}

/* The tuner's options from the model's. */
static nto_tuner_opts tuner_opts(const nto_model_opts *o) {
  return (nto_tuner_opts){.window_mode = o->window_mode,
                          .window = o->offload.window,
                          .memory_budget = o->memory_budget,
                          .budget_source = o->budget_source,
                          .memory_limit = o->memory_limit,
                          .limit_source = o->limit_source,

                          .prefetch = o->prefetch,
                          .no_keep = o->offload.no_keep,
                          .plan_only = o->plan_only};
}

/* A budget or limit on the whole process (o->process_extra set): what
 * the tensors and workspace get, the process's RSS now (code, libraries,
 * the plans just built), process_extra and the caller's batch buffers
 * (nto_model_batch_io_bytes) taken off, as to->overhead.
 * NTO_ECONFIG with *refused when the budget leaves nothing. */
static int process_budget(const nto_model *m, const nto_model_opts *o,
                          nto_tuner_opts *to, int *refused, nto_err *err) {
  if (!o->process_extra || (!to->memory_budget && !to->memory_limit))
    return 0;
  size_t base =
      nto_current_rss_bytes() + o->process_extra + nto_model_batch_io_bytes(m);
  to->overhead = base;
  if (to->memory_limit)
    to->memory_limit = to->memory_limit > base ? to->memory_limit - base : 1;
  if (!to->memory_budget)
    return 0;
  if (to->memory_budget > base) {
    to->memory_budget -= base;
    return 0;
  }
  char a[32], b[32];
  *refused = 1;
  return nto_err_set(err, NTO_ECONFIG,
                     "%s %s is below this process's own memory before any "
                     "tensor, %s (code and libraries, the plans, compute "
                     "threads' BLAS buffers, batch buffers)",
                     o->budget_source ? o->budget_source : "memory budget",
                     nto_format_bytes(to->memory_budget, a, sizeof a),
                     nto_format_bytes(base, b, sizeof b));
}

/* Graph, tensor table and steps. */
static int build_plan(nto_model *m, const nto_model_opts *o, nto_err *err) {
  int batch = o->batch > 0 ? o->batch : m->conf->model.batch_size;
  nto_tensors_opts to = {.update_chunk = o->update_chunk,
                         .chunk_grads = o->chunk_grads,
                         .opt_states = nto_opt_state_count(&m->opt),
                         .state_format = m->opt.state_format,
                         .recompute_act = o->recompute != NTO_RECOMPUTE_OFF,
                         .compute_input_grad = o->compute_input_grad};
  nto_tuner_opts tu = tuner_opts(o);
  to.recompute_conv = nto_tuner_recompute_convs(&tu, o->recompute);
  to.recompute_segments = o->recompute == NTO_RECOMPUTE_SEGMENTS;
  to.segments_max = o->segments_max;
  to.group_bytes = o->group_bytes;
  int rc = nto_graph_build(&m->g, m->conf, batch, err);
  if (rc == 0 && o->freeze_until)
    rc = nto_graph_freeze(&m->g, m->conf, o->freeze_until, err);
  if (rc == 0 && o->inference)
    rc = nto_graph_freeze(&m->g, m->conf, m->g.layers[m->g.n_layers - 1].name,
                          err);
  int bn_batch = o->frozen_bn == NTO_FROZEN_BN_CONFIG
                     ? m->conf->model.frozen_bn_batch
                     : o->frozen_bn == NTO_FROZEN_BN_BATCH;
  if (rc == 0 && bn_batch && !o->inference)
    rc = nto_graph_frozen_bn_batch(&m->g, m->conf, err);
  if (rc == 0)
    rc = setup_loss(m, &to, err);
  if (rc == 0)
    rc = nto_tensors_build(&m->tt, &m->g, &to, err);
  if (rc == 0)
    rc = nto_steps_build(&m->st, &m->tt, o->update_placement, err);
  if (rc == 0)
    rc = nto_arena_bytes(&m->st.plan[NTO_PASS_TRAIN], &m->tt, &m->arena_bytes,
                         err);
  for (int i = 0; rc == 0 && i < m->g.n_layers; i++)
    for (int g = 0; g < nto_tensors_groups(&m->tt, i); g++) {
      const nto_group_layer *x = nto_tensors_glayer(&m->tt, i, g);
      size_t ws = x ? x->l.ws_bytes : m->g.layers[i].ws_bytes;
      if (ws > m->ws_bytes)
        m->ws_bytes = ws;
    }
  return rc;
}

/* Offloading: the engine owns every tensor buffer; weights are
 * initialized one at a time through a bounce buffer and stored in the
 * swap file (optimizer state starts as zeros without I/O). */
static int start_engine(nto_model *m, const nto_model_opts *o, nto_err *err) {
  const nto_plan *plans[2] = {&m->st.plan[0], &m->st.plan[1]};
  nto_offload_opts oo = o->offload;
  nto_tuner_engine_opts(m->tuner, &oo);
  int rc = nto_offload_create(&m->off, m->tt.t, m->tt.n, plans, &oo, err);
  if (rc != 0)
    return rc;
  m->res = nto_offload_residency(m->off);
  nto_tuner_attach(m->tuner, m->off);
  for (int i = 0; rc == 0 && i < m->g.n_layers; i++) {
    nto_layer *l = &m->g.layers[i];
    for (int j = 0; rc == 0 && j < l->n_w; j++) {
      nto_tensor *t = &m->tt.t[l->w[j].tensor];
      float *buf = nto_alloc_aligned(t->bytes);
      if (!buf)
        return nto_err_set(err, NTO_ENOMEM, "out of memory");
      nto_init_fill(buf, nto_tensor_numel(t), l->w[j].init, l->w[j].fan_in,
                    l->w[j].fan_out, &m->rng);
      rc = m->res->ops->store(m->res, l->w[j].tensor, buf, err);
      nto_free_aligned(buf);
    }
  }
  return rc;
}

/* All resident: the arena, and the weights initialized in place. */
static int start_arena(nto_model *m, nto_err *err) {
  int rc = nto_arena_create(&m->res, &m->st.plan[NTO_PASS_TRAIN], &m->tt, err);
  for (int i = 0; rc == 0 && i < m->g.n_layers; i++) {
    nto_layer *l = &m->g.layers[i];
    for (int j = 0; j < l->n_w; j++) {
      nto_tensor *t = &m->tt.t[l->w[j].tensor];
      nto_init_fill(t->data, nto_tensor_numel(t), l->w[j].init, l->w[j].fan_in,
                    l->w[j].fan_out, &m->rng);
    }
  }
  return rc;
}

/* Buffers of a runnable model: workspace, output copy, input gradient,
 * the tensors (arena or engine), the executor's view. */
static int start(nto_model *m, const nto_model_opts *o, nto_err *err) {
  const nto_layer *last = &m->g.layers[m->g.n_layers - 1];
  if ((m->ws_bytes && !(m->ws = nto_alloc_aligned(m->ws_bytes))) ||
      !(m->output = nto_alloc_aligned(nto_shape_bytes(last->out_shape))) ||
      (o->compute_input_grad &&
       !(m->input_grad =
             nto_alloc_aligned(nto_shape_bytes(m->g.layers[0].out_shape)))))
    return nto_err_set(err, NTO_ENOMEM,
                       "cannot allocate the workspace (%zu bytes) or the "
                       "output buffers",
                       m->ws_bytes);
  int rc = nto_tuner_window(m->tuner) > 0 ? start_engine(m, o, err)
                                          : start_arena(m, err);
  m->ex = (nto_exec){.tt = &m->tt,
                     .st = &m->st,
                     .res = m->res,
                     .opt = &m->opt,
                     .form = m->ex.form,
                     .ws = m->ws,
                     .rng = &m->rng,
                     .output = m->output,
                     .input_grad = m->input_grad,
                     .trace = o->step_trace,
                     .trace_user = o->step_trace_user};
  return rc;
}

/* How far create_as goes: the runnable model; or the plan and the tuner's
 * window only (nothing allocated for training, no swap file), whether it
 * fits (the model freed) or the model kept for queries (as plan_only, but
 * with the windows resolved). */
typedef enum { BUILD_RUNNABLE, BUILD_FIT, BUILD_PLAN } build_kind;

/* nto_model_create without the retry, as far as `kind`; *refused: the
 * budget refused it, *convs: the convolutions whose outputs it
 * recomputed. */
static int create_as(nto_model **out, const nto_config *c,
                     const nto_model_opts *o, build_kind kind, int *refused,
                     int *convs, nto_err *err) {
  *out = NULL;
  *refused = *convs = 0;
  nto_model *m = calloc(1, sizeof *m);
  if (!m)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  m->conf = c;
  m->opt = c->opt;
  m->lr = c->lr;
  nto_rng_seed(&m->rng, o->seed);
  int rc = build_plan(m, o, err);
  if (rc == 0) {
    nto_mem_plan p = nto_model_mem_plan(m);
    nto_tuner_model tm = {
        {&m->st.plan[0], &m->st.plan[1]}, p.workspace, p.total, m->g.batch};
    nto_tuner_opts to = tuner_opts(o);
    *convs = nto_tensors_recomputed_convs(&m->tt);
    rc = process_budget(m, o, &to, refused, err);
    if (rc == 0)
      rc = nto_tuner_create(&m->tuner, &tm, &to, refused, err);
  }
  if (rc == 0 && !o->plan_only && kind == BUILD_RUNNABLE)
    rc = start(m, o, err);
  if (rc != 0 || kind == BUILD_FIT) {
    nto_model_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

/* Multiply-adds of layer l's forward where it is a convolution (its
 * replay's per output element, layer.h replay_macs), else 0. */
static double conv_macs(const nto_layer *l) {
  return l->replay_macs > 0
             ? (double)l->replay_macs * (double)nto_shape_numel(l->out_shape)
             : 0.0;
}

/* nto_segments_estimate flop: a training iteration of m. */
static double train_flop(const nto_model *m) {
  double f = 0;
  for (int i = 0; i < m->g.n_layers; i++)
    f += 6.0 * conv_macs(&m->g.layers[i]);
  for (int s = 0; s < m->st.n; s++) {
    const nto_step *d = &m->st.v[s];
    const nto_group_layer *x = nto_tensors_glayer(&m->tt, d->layer, d->group);
    if (d->kind == 'R' && m->tt.re_conv[d->layer])
      f += 2.0 * conv_macs(x ? &x->l : &m->g.layers[d->layer]);
  }
  return f;
}

int nto_model_segments_estimate(const nto_config *c, const nto_model_opts *opts,
                                nto_segments_estimate *e, nto_err *err) {
  memset(e, 0, sizeof *e);
  for (int k = 0; k < 2; k++) {
    nto_model_opts o = *opts;
    o.plan_only = 0; /* the windows resolved as for training */
    o.recompute = k ? NTO_RECOMPUTE_SEGMENTS : NTO_RECOMPUTE_AUTO;
    nto_model *m = NULL;
    nto_err e2 = {0};
    int refused = 0, convs = 0;
    int rc = create_as(&m, c, &o, BUILD_PLAN, &refused, &convs, k ? &e2 : err);
    if (rc != 0)
      return k ? 0 : rc;
    nto_window_plan wp = {0};
    int n = nto_tuner_window_bound(m->tuner);
    e->flop[k] = train_flop(m);
    rc = n > 0 ? nto_tuner_window_plan(m->tuner, n, &wp, k ? &e2 : err) : 0;
    nto_model_free(m);
    if (rc != 0)
      return k ? 0 : rc;
    e->window[k] = n;
    e->read_bytes[k] = wp.read_bytes;
    e->written_bytes[k] = wp.written_bytes;
    if (n == 0)
      break;
  }
#ifdef __GLIBC__
  /* the plans' heap pages, freed below blocks still in use, would stay
   * with the process and count as its own memory under a budget
   * (ResNet-18 b32: 0.9 MiB) */
  malloc_trim(0);
#endif
  return 0;
}

double nto_segments_io_ms(const nto_segments_estimate *e, int k,
                          double write_bps, double read_bps) {
  return 1e3 * ((double)e->read_bytes[k] / read_bps +
                (double)e->written_bytes[k] / write_bps);
}

int nto_segments_may_pay(const nto_segments_estimate *e) {
  return e->window[0] > 0 && e->window[1] > 0 && e->flop[1] > e->flop[0] &&
         (e->read_bytes[1] < e->read_bytes[0] ||
          e->written_bytes[1] < e->written_bytes[0]);
}

double nto_segments_min_flops(const nto_segments_estimate *e, double write_bps,
                              double read_bps) {
  if (!nto_segments_may_pay(e) || write_bps <= 0 || read_bps <= 0)
    return -1;
  double io =
      (1.0 - NTO_SEGMENTS_GAIN) * nto_segments_io_ms(e, 0, write_bps, read_bps);
  if (nto_segments_io_ms(e, 1, write_bps, read_bps) > io)
    return -1;
  return e->flop[1] / (io / 1e3);
}

/* What window 1 of the model of c with opts and recompute r needs
 * (nto_tuner_need: tensor region and workspace), SIZE_MAX if unknown. */
static size_t window1_need(const nto_config *c, const nto_model_opts *opts,
                           nto_recompute r) {
  nto_model_opts o = *opts;
  o.plan_only = 1;
  o.memory_budget = o.memory_limit = 0;
  o.recompute = r;
  nto_model *m = NULL;
  nto_err e = {0};
  int refused = 0, convs = 0;
  size_t need = SIZE_MAX;
  if (create_as(&m, c, &o, BUILD_PLAN, &refused, &convs, &e) == 0 &&
      nto_tuner_need(m->tuner, 1, NULL, &need, &e) != 0)
    need = SIZE_MAX;
  nto_model_free(m);
  return need;
}

/* create_as with recompute auto's fallbacks when the budget refuses the
 * model: again with the convolutions' outputs kept (a twin is content the
 * window must hold or write, which can raise window 1's region:
 * MobileNetV2 224 b10 149.3 instead of 137.9 MiB), then with segments
 * (whose twins replace more kept outputs than they add: 103.4 MiB), all of
 * them: the fewest the budget takes (tensors.h segments_max) compute less
 * but leave less room for keeping, and wrote 32% more per iteration for 2%
 * less time (results.md, "Recomputed segments"). On failure the message
 * of the attempt whose window 1 needs the least (not looked for with
 * BUILD_FIT). *used: the recompute setting that built the model; *refused
 * as create_as's. */
static int create_fit(nto_model **out, const nto_config *c,
                      const nto_model_opts *opts, build_kind kind,
                      nto_recompute *used, int *refused, nto_err *err) {
  int convs = 0;
  *used = opts->recompute;
  int rc = create_as(out, c, opts, kind, refused, &convs, err);
  if (!(rc == NTO_ECONFIG && *refused && opts->recompute == NTO_RECOMPUTE_AUTO))
    return rc;
  nto_model_opts o = *opts;
  nto_recompute said = NTO_RECOMPUTE_AUTO; /* whose message err holds */
  if (convs > 0) {
    o.recompute = NTO_RECOMPUTE_ACTIVATIONS;
    rc = create_as(out, c, &o, kind, refused, &convs, err);
    if (rc == 0 || !(rc == NTO_ECONFIG && *refused)) {
      *used = o.recompute;
      return rc;
    }
    said = o.recompute; /* its minimum is the lower */
  }
  nto_err e = {0};
  o.recompute = NTO_RECOMPUTE_SEGMENTS;
  rc = create_as(out, c, &o, kind, refused, &convs, &e);
  if (rc == 0 || !(rc == NTO_ECONFIG && *refused)) {
    *used = o.recompute;
    if (rc != 0)
      *err = e;
    return rc;
  }
  if (kind != BUILD_FIT && window1_need(c, opts, NTO_RECOMPUTE_SEGMENTS) <
                               window1_need(c, opts, said))
    *err = e;
  return rc;
}

/* Does the model fit the budget at batch b (recompute as nto_model_create
 * would retry it)? */
static int fits_at(const nto_config *c, const nto_model_opts *opts, int b) {
  nto_model_opts o = *opts;
  nto_model *m = NULL;
  nto_err e = {0};
  nto_recompute used;
  int refused = 0;
  o.batch = b;
  return create_fit(&m, c, &o, BUILD_FIT, &used, &refused, &e) == 0;
}

/* A budget refused the model at its batch: the largest smaller batch that
 * fits (bisection over fit-only plans: log2(batch) of them), said after
 * err's message. */
static void suggest_batch(const nto_config *c, const nto_model_opts *opts,
                          nto_err *err) {
  int batch = opts->batch > 0 ? opts->batch : c->model.batch_size;
  if (batch <= 1 || !(opts->memory_budget || opts->memory_limit))
    return;
  char msg[sizeof err->msg];
  snprintf(msg, sizeof msg, "%s", err->msg);
  int code = err->code, lo = 0, hi = batch; /* lo fits (0: none), hi not */
  if (fits_at(c, opts, 1)) {
    lo = 1;
    while (hi - lo > 1) {
      int mid = lo + (hi - lo) / 2;
      if (fits_at(c, opts, mid))
        lo = mid;
      else
        hi = mid;
    }
  }
  if (lo > 0)
    nto_err_set(err, code, "%s; the largest batch size that fits it is %d", msg,
                lo);
  else
    nto_err_set(err, code, "%s; no batch size fits it", msg);
}

int nto_model_create(nto_model **out, const nto_config *c,
                     const nto_model_opts *opts, nto_err *err) {
  int refused = 0;
  nto_recompute used;
  int rc = create_fit(out, c, opts, BUILD_RUNNABLE, &used, &refused, err);
  if (rc == 0) {
    (*out)->recompute = used;
    (*out)->convs_kept = used == NTO_RECOMPUTE_ACTIVATIONS &&
                         opts->recompute == NTO_RECOMPUTE_AUTO;
  }
  if (rc == NTO_ECONFIG && refused && (!opts->plan_only || opts->memory_budget))
    suggest_batch(c, opts, err);
  return rc;
}

void nto_model_free(nto_model *m) {
  if (!m)
    return;
  if (m->res) /* the engine's releases the buffers it owns */
    m->res->ops->free(m->res);
  nto_tuner_free(m->tuner);
  nto_steps_free(&m->st);
  nto_tensors_free(&m->tt);
  nto_free_aligned(m->output);
  nto_free_aligned(m->ws);
  nto_free_aligned(m->input_grad);
  nto_graph_free(&m->g);
  free(m);
}

int nto_model_train_step(nto_model *m, const float *x, const float *y,
                         nto_step_stats *st, nto_err *err) {
  double lr = nto_lr_at(&m->lr, &m->opt, m->iteration);
  nto_pass_sample s = {0};
  if (m->off)
    nto_offload_get_stats(m->off, &s.before);
  double t0 = now_ms();
  int rc = nto_exec_pass(&m->ex, NTO_PASS_TRAIN, x, y, m->g.batch, lr,
                         m->iteration + 1, st, err);
  if (rc != 0)
    return rc;
  m->iteration++;
  if (m->off) {
    nto_offload_get_stats(m->off, &s.after);
    s.wall_ms = now_ms() - t0;
    m->sample = s;
    m->sampled = 1;
  }
  return 0;
}

int nto_model_tune(nto_model *m, nto_tune_report *r, nto_err *err) {
  nto_tune_report none;
  if (!r)
    r = &none;
  memset(r, 0, sizeof *r);
  if (!m->sampled)
    return 0;
  m->sampled = 0;
  return nto_tuner_after_pass(m->tuner, &m->sample, r, err);
}

int nto_model_eval_step(nto_model *m, const float *x, const float *y, int valid,
                        nto_step_stats *st, nto_err *err) {
  if (valid < 1 || valid > m->g.batch)
    return nto_err_set(err, NTO_EINVAL, "eval: %d valid samples of %d", valid,
                       m->g.batch);
  return nto_exec_pass(&m->ex, NTO_PASS_EVAL, x, y, valid, 0.0,
                       m->iteration + 1, st, err);
}

const float *nto_model_output(const nto_model *m) { return m->output; }

const float *nto_model_input_grad(const nto_model *m) { return m->input_grad; }

void nto_model_set_grad_hook(nto_model *m, nto_grad_hook hook, void *user) {
  m->ex.hook = hook;
  m->ex.hook_user = user;
}

const nto_graph *nto_model_graph(const nto_model *m) { return &m->g; }
int nto_model_batch(const nto_model *m) { return m->g.batch; }
long nto_model_iteration(const nto_model *m) { return m->iteration; }
nto_tuner *nto_model_tuner(const nto_model *m) { return m->tuner; }

size_t nto_model_batch_io_bytes(const nto_model *m) {
  nto_shape in = nto_model_input_shape(m);
  return (size_t)m->g.batch *
         (nto_shape_sample(in) + (size_t)nto_model_output_size(m)) *
         sizeof(float);
}

nto_shape nto_model_input_shape(const nto_model *m) {
  nto_shape s = m->g.layers[0].out_shape;
  s.n = 1;
  return s;
}

int nto_model_output_size(const nto_model *m) {
  return (int)nto_shape_sample(m->g.layers[m->g.n_layers - 1].out_shape);
}

nto_mem_plan nto_model_mem_plan(const nto_model *m) {
  nto_mem_plan p = {0};
  for (int i = 0; i < m->tt.n; i++) {
    if (m->tt.t[i].role == NTO_ROLE_WEIGHT)
      p.weights += m->tt.t[i].bytes;
    else if (m->tt.t[i].role == NTO_ROLE_OPT_STATE)
      p.opt_state += m->tt.t[i].bytes;
  }
  p.arena = m->arena_bytes;
  p.workspace = nto_round_page(m->ws_bytes);
  p.total = p.weights + p.opt_state + p.arena + p.workspace;
  return p;
}

size_t nto_model_param_count(const nto_model *m) {
  size_t n = 0;
  for (int i = 0; i < m->g.n_layers; i++)
    if (m->g.layers[i].trainable)
      n += nto_layer_param_count(&m->g.layers[i]);
  return n;
}

/* Make state q of chunk k of weight j of layer i exist (all resident
 * only) and zero it. */
static int reset_state(nto_model *m, int i, int j, int k, int q, int n_state,
                       nto_err *err) {
  int *t = &m->tt.state_t[i][j][2 * k + q];
  if (*t < 0 && q < n_state) {
    if (m->off)
      return nto_err_set(err, NTO_EUNSUPPORTED,
                         "the offload engine cannot add optimizer state "
                         "after creation");
    *t = nto_tensors_add_state(&m->tt, i, j, k, q);
    if (*t < 0)
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
    int rc = nto_arena_add(m->res, *t, err);
    if (rc != 0)
      return rc;
  }
  return *t >= 0 ? m->res->ops->zero(m->res, *t, err) : 0;
}

int nto_model_set_optimizer(nto_model *m, const nto_opt_conf *o,
                            const nto_lr_conf *lr, nto_err *err) {
  int n_state = nto_opt_state_count(o);
  if (o->state_format != m->opt.state_format)
    return nto_err_set(err, NTO_EUNSUPPORTED,
                       "the optimizer state format (%s) is fixed when the "
                       "model is created (%s)",
                       nto_opt_state_name(o->state_format),
                       nto_opt_state_name(m->opt.state_format));
  for (int i = 0; i < m->g.n_layers; i++)
    for (int j = 0; j < m->g.layers[i].n_w; j++)
      for (int k = 0;
           nto_tensors_updated(&m->tt, i, j) && k < m->tt.n_chunk[i][j]; k++)
        for (int q = 0; q < 2; q++) {
          int rc = reset_state(m, i, j, k, q, n_state, err);
          if (rc != 0)
            return rc;
        }
  m->opt = *o;
  m->lr = *lr;
  m->iteration = 0;
  return 0;
}

/* nto_named_tensor callbacks of a model not all resident: ctx is the
 * model, index the tensor. */
static int fetch_tensor(void *ctx, int index, float *dst, nto_err *err) {
  nto_residency *r = ((nto_model *)ctx)->res;
  return r->ops->fetch(r, index, dst, err);
}

static int store_tensor(void *ctx, int index, const float *src, nto_err *err) {
  nto_residency *r = ((nto_model *)ctx)->res;
  return r->ops->store(r, index, src, err);
}

/* Named tensor *nt named `name` (copied) with dims d[0..nd) for tensor t:
 * its data in place when all resident, else through the residency. */
static int named(nto_model *m, nto_named_tensor *nt, const char *name,
                 const int *d, int nd, int t, nto_err *err) {
  size_t len = strlen(name) + 1;
  char *copy = malloc(len);
  if (!copy)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  memcpy(copy, name, len);
  *nt = (nto_named_tensor){.name = copy, .ndim = nd};
  memcpy(nt->dims, d, (size_t)nd * sizeof *d);
  if (m->res->always_resident) {
    nt->data = m->tt.t[t].data;
  } else {
    nt->fetch = fetch_tensor;
    nt->store = store_tensor;
    nt->ctx = m;
    nt->index = t;
  }
  return 0;
}

/* Characters of layer name that a backbone section put before the name
 * the layer has in the backbone's INI (config.h nto_section.prefix): of
 * the section named name, or whose name and a '/' begin it (a layer the
 * graph adds for a section); 0 if none. */
static int backbone_prefix(const nto_config *c, const char *name) {
  if (c->n_files == 0)
    return 0;
  for (int i = 0; i < c->n_layers; i++) {
    const nto_section *s = &c->layers[i];
    size_t n = strlen(s->name);
    if (s->prefix > 0 && !strncmp(name, s->name, n) &&
        (name[n] == '\0' || name[n] == '/'))
      return s->prefix;
  }
  return 0;
}

/* Weight j of layer l as a named tensor "<layer>.<weight>" with its export
 * rank's dims; alt_name without a backbone's prefix. */
static int named_weight(nto_model *m, nto_named_tensor *nt, const nto_layer *l,
                        int j, nto_err *err) {
  char name[2 * NTO_NAME_MAX];
  snprintf(name, sizeof name, "%s.%s", l->name, l->w[j].name);
  nto_shape s = l->w[j].shape;
  int d4[4] = {s.n, s.c, s.h, s.w}, d[4];
  int nd = l->w[j].ndim >= 1 && l->w[j].ndim <= 4 ? l->w[j].ndim : 4;
  for (int k = 0; k < nd; k++)
    d[k] = d4[4 - nd + k];
  if (nd == 1) /* vectors stored as (1, F, 1, 1) or (1, 1, 1, F) */
    d[0] = (int)nto_shape_numel(s);
  int rc = named(m, nt, name, d, nd, l->w[j].tensor, err);
  nt->param = l->w[j].trainable;
  int prefix = rc == 0 ? backbone_prefix(m->conf, l->name) : 0;
  if (prefix > 0 && !(nt->alt_name = strdup(name + prefix)))
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  return rc;
}

int nto_model_weights(nto_model *m, nto_named_tensor **out, int *n,
                      nto_err *err) {
  int count = 0, c = 0, rc = 0;
  for (int i = 0; i < m->g.n_layers; i++)
    count += m->g.layers[i].n_w;
  nto_named_tensor *ts = calloc((size_t)(count ? count : 1), sizeof *ts);
  if (!ts)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (int i = 0; rc == 0 && i < m->g.n_layers; i++)
    for (int j = 0; rc == 0 && j < m->g.layers[i].n_w; j++, c++)
      rc = named_weight(m, &ts[c], &m->g.layers[i], j, err);
  if (rc != 0) {
    nto_model_weights_free(ts, c);
    return rc;
  }
  *out = ts;
  *n = count;
  return 0;
}

int nto_model_weights_bin(nto_model *m, nto_named_tensor **out, int *n,
                          nto_err *err) {
  int L = m->g.n_layers, *order = malloc((size_t)L * sizeof *order);
  int *first = malloc((size_t)(L + 1) * sizeof *first); /* in *out */
  nto_named_tensor *ts = NULL;
  int rc = order && first ? nto_model_weights(m, &ts, n, err)
                          : nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc == 0)
    rc = nto_graph_nntrainer_order(&m->g, order, err);
  nto_named_tensor *by =
      rc == 0 ? malloc((size_t)(*n ? *n : 1) * sizeof *by) : NULL;
  if (rc == 0 && !by)
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc == 0) {
    first[0] = 0;
    for (int i = 0; i < L; i++)
      first[i + 1] = first[i] + m->g.layers[i].n_w;
    int c = 0;
    for (int k = 0; k < L; k++)
      for (int j = first[order[k]]; j < first[order[k] + 1]; j++)
        by[c++] = ts[j];
    free(ts); /* the names moved to by */
    ts = by;
  } else if (ts) {
    nto_model_weights_free(ts, *n);
    ts = NULL;
  }
  free(order);
  free(first);
  *out = ts;
  return rc;
}

void nto_model_weights_free(nto_named_tensor *ts, int n) {
  if (!ts)
    return;
  for (int i = 0; i < n; i++) {
    free((char *)ts[i].name);
    free((char *)ts[i].alt_name);
  }
  free(ts);
}

int nto_model_state_tensors(nto_model *m, nto_named_tensor **out, int *n,
                            nto_err *err) {
  int count = 0, c = 0, rc = 0;
  for (int t = 0; t < m->tt.n; t++)
    count += nto_tensor_persistent(&m->tt.t[t]);
  nto_named_tensor *ts = calloc((size_t)(count ? count : 1), sizeof *ts);
  if (!ts)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (int t = 0; rc == 0 && t < m->tt.n; t++) {
    const nto_tensor *d = &m->tt.t[t];
    int dims[4] = {d->shape.n, d->shape.c, d->shape.h, d->shape.w};
    if (nto_tensor_persistent(d))
      rc = named(m, &ts[c++], d->name, dims, 4, t, err);
  }
  if (rc != 0) {
    nto_model_weights_free(ts, c);
    return rc;
  }
  *out = ts;
  *n = count;
  return 0;
}

void nto_model_get_train_state(const nto_model *m, nto_model_train_state *s) {
  s->iteration = m->iteration;
  s->rng[0] = m->rng.s[0];
  s->rng[1] = m->rng.s[1];
}

void nto_model_set_train_state(nto_model *m, const nto_model_train_state *s) {
  m->iteration = s->iteration;
  m->rng.s[0] = s->rng[0];
  m->rng.s[1] = s->rng[1];
}

const char *nto_model_optimizer_name(const nto_model *m) {
  static const char *const names[3][3] = {{"sgd", "sgd/bf16", "sgd/int8"},
                                          {"adam", "adam/bf16", "adam/int8"},
                                          {"adamw", "adamw/bf16",
                                           "adamw/int8"}};
  unsigned k = (unsigned)m->opt.kind, f = (unsigned)m->opt.state_format;
  return k < 3 && f < 3 ? names[k][f] : "unknown";
}

size_t nto_model_update_chunk(const nto_model *m) {
  return m->tt.chunk_elems * sizeof(float);
}

int nto_model_step_times(nto_model *m, double *ms) {
  if (!m->off)
    return NTO_EINVAL;
  nto_offload_step_times(m->off, ms);
  return 0;
}

int nto_model_offload_stats(nto_model *m, nto_offload_stats *st) {
  if (!m->off) {
    memset(st, 0, sizeof *st);
    return NTO_EINVAL;
  }
  nto_offload_get_stats(m->off, st);
  return 0;
}

int nto_model_pass_steps(const nto_model *m, int pass) {
  return nto_steps_count(&m->st, pass);
}

const nto_steps *nto_model_steps(const nto_model *m) { return &m->st; }

const char *nto_model_step_name(const nto_model *m, int pass, int s, char *buf,
                                size_t len) {
  return nto_steps_name(&m->st, &m->tt, pass, s, buf, len);
}

const nto_plan *nto_model_plan(const nto_model *m, int pass) {
  return &m->st.plan[pass];
}

int nto_model_recomputed(const nto_model *m, int i) {
  return nto_tensors_recomputed(&m->tt, i);
}

int nto_model_backward(const nto_model *m, int i) { return m->tt.bwd[i]; }

int nto_model_recomputed_convs(const nto_model *m) {
  return nto_tensors_recomputed_convs(&m->tt);
}

int nto_model_segment_convs(const nto_model *m, int *candidates) {
  return nto_tensors_segment_convs(&m->tt, candidates);
}

int nto_model_chains(const nto_model *m, int *layers) {
  return nto_tensors_chains(&m->tt, layers);
}

int nto_model_groups(const nto_model *m, int i, int *role) {
  if (role)
    *role = nto_tensors_chain(&m->tt, i);
  return nto_tensors_groups(&m->tt, i);
}

int nto_model_convs_kept(const nto_model *m) { return m->convs_kept; }

nto_recompute nto_model_recompute(const nto_model *m) { return m->recompute; }

const nto_tensor *nto_model_tensor(const nto_model *m, int t) {
  return &m->tt.t[t];
}

int nto_model_tensor_count(const nto_model *m) { return m->tt.n; }

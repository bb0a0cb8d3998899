/* tuner.c - the residency policy. See tuner.h. */
#include "tuner.h"
#include "lookahead.h"
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

struct nto_tuner {
  nto_tuner_model tm;
  nto_tuner_opts o;          /* prefetch resolved (never AUTO) */
  int window;                /* decided at creation, 0: all resident */
  int limited;               /* the memory limit acts as the budget */
  nto_offload *off;          /* NULL: all resident */
  int auto_window;           /* NTO_WINDOW_AUTO */
  nto_autowin ctl;           /* its controller */
  nto_window_sample *wtrace; /* its record, one per iteration */
  int n_wtrace, cap_wtrace;
  int room_declined; /* room's last frontier did not pay */
  int plain_n;       /* window of plain_read/written, 0: none yet */
  uint64_t plain_read, plain_written; /* the plain window's engine bytes */
  double *step_ms; /* per training step: measured compute, NULL: none */
  /* nto_tuner_need's regions + 1 per window n (1..n_region, 0: not
   * built yet): [0] the training pass's plain schedule (no frontier), [1] the
   * inference pass's (which takes no frontier). The plans do not change
   * after creation, so these are built once. */
  size_t *region[2];
  int n_region;
  long passes; /* training passes seen */
  /* the last training pass: wall time, device busy time, bytes moved */
  double pass_ms, pass_device_ms;
  uint64_t pass_bytes;
};

int nto_tuner_recompute_convs(const nto_tuner_opts *o, nto_recompute r) {
  int offloaded = o->window_mode != NTO_WINDOW_FIXED || o->window > 0;
  return r == NTO_RECOMPUTE_ON || r == NTO_RECOMPUTE_SEGMENTS ||
         ((r == NTO_RECOMPUTE_AUTO || r == NTO_RECOMPUTE_CHEAP) && offloaded);
}

/* ---- sizing ---- */

/* The request of a schedule of window n with frontier upto: the engine's
 * keeping when `engine`, else the plain placement (the same region). */
static nto_schedule_req request(const nto_tuner *t, int n, const int *upto,
                                int engine) {
  return (nto_schedule_req){n, upto, engine && !t->o.no_keep, 0};
}

/* The cached region of pass k's schedule for window n (see struct
 * nto_tuner), or NULL where n is beyond the cache or it cannot be
 * allocated (the caller then builds it each time). */
static size_t *region_slot(const nto_tuner *ct, int k, int n) {
  nto_tuner *t = (nto_tuner *)ct; /* a cache: the tuner's plans and
                                     answers do not change */
  int S = t->tm.plans[0]->n_steps;
  if (n > S)
    return NULL;
  if (!t->region[0] && !t->region[1]) {
    t->region[0] = calloc((size_t)S + 1, sizeof *t->region[0]);
    t->region[1] = calloc((size_t)S + 1, sizeof *t->region[1]);
    t->n_region = S;
  }
  return t->region[k] ? &t->region[k][n] : NULL;
}

int nto_tuner_need(const nto_tuner *t, int n, const int *upto, size_t *bytes,
                   nto_err *err) {
  size_t region = 0;
  n = n < 1 ? 1 : n;
  *bytes = 0;
  for (int k = 0; k < 2; k++) {
    const int *up = k ? NULL : upto;
    size_t *slot = up ? NULL : region_slot(t, k, n);
    if (!slot || *slot == 0) {
      nto_schedule sc;
      nto_schedule_req rq = request(t, n, up, 0);
      int rc = nto_schedule_make(&sc, t->tm.plans[k], &rq, err);
      if (rc != 0)
        return rc;
      if (slot)
        *slot = sc.region + 1;
      if (sc.region > region)
        region = sc.region;
      nto_schedule_free(&sc);
    } else if (*slot - 1 > region) {
      region = *slot - 1;
    }
  }
  *bytes = region + t->tm.workspace;
  return 0;
}

/* Bytes read and written per pass by the engine's schedule of window n
 * with frontier upto (NULL: s + n), its keeping included. */
static int engine_bytes(const nto_tuner *t, int n, const int *upto,
                        uint64_t *read, uint64_t *written, nto_err *err) {
  nto_schedule sc;
  nto_schedule_req rq = request(t, n, upto, 1);
  int rc = nto_schedule_make(&sc, t->tm.plans[0], &rq, err);
  if (rc != 0)
    return rc;
  *read = sc.read_bytes;
  *written = sc.written_bytes;
  nto_schedule_free(&sc);
  return 0;
}

int nto_tuner_window_plan(const nto_tuner *t, int n, nto_window_plan *wp,
                          nto_err *err) {
  memset(wp, 0, sizeof *wp);
  int rc = nto_tuner_need(t, n, NULL, &wp->need, err);
  return rc == 0 ? engine_bytes(t, n, NULL, &wp->read_bytes, &wp->written_bytes,
                                err)
                 : rc;
}

/* The largest window (>= 1) whose need fits budget, or 0; *min_need:
 * what window 1 needs. Regions grow with N but not strictly (placement),
 * so the scan goes on past a miss and stops after 8 misses in a row or at
 * the longest window (the training pass's steps - 1). */
static int largest_fit(const nto_tuner *t, size_t budget, int *best,
                       size_t *min_need, nto_err *err) {
  size_t need;
  int S = t->tm.plans[0]->n_steps, misses = 0;
  *best = 0;
  for (int n = 1; n <= (S > 2 ? S - 1 : 1) && misses < 8; n++) {
    int rc = nto_tuner_need(t, n, NULL, &need, err);
    if (rc != 0)
      return rc;
    if (n == 1)
      *min_need = need;
    if (need <= budget) {
      *best = n;
      misses = 0;
    } else {
      misses++;
    }
  }
  return 0;
}

/* The budget as given (with the process's overhead) into b, and what
 * a need of tensors + workspace is made of into what: "its tensor
 * region plus the im2col workspace of W[ plus the process's own O]". */
static void budget_words(const nto_tuner *t, char *b, size_t blen, char *what,
                         size_t wlen) {
  char w[32], o[32];
  nto_format_bytes(t->o.memory_budget + t->o.overhead, b, blen);
  nto_format_bytes(t->tm.workspace, w, sizeof w);
  nto_format_bytes(t->o.overhead, o, sizeof o);
  snprintf(what, wlen, "its tensor region plus the im2col workspace of %s%s%s",
           w, t->o.overhead ? " plus the process's own " : "",
           t->o.overhead ? o : "");
}

/* A fixed window above the budget: refused, naming the largest that
 * fits. */
static int check_fixed(nto_tuner *t, int fit, int *refused, nto_err *err) {
  size_t need = 0;
  int rc = nto_tuner_need(t, t->window, NULL, &need, err);
  *refused = rc == 0 && need > t->o.memory_budget;
  if (rc != 0 || !*refused)
    return rc;
  char b[32], n[32], what[160];
  budget_words(t, b, sizeof b, what, sizeof what);
  return nto_err_set(err, NTO_ECONFIG,
                     "%s %s: window %d needs %s (%s); the largest window "
                     "within the budget is %d",
                     t->o.budget_source, b, t->window,
                     nto_format_bytes(need + t->o.overhead, n, sizeof n), what,
                     fit);
}

/* Decide the window from the options (mode, window, budget): t->window 0
 * means all resident; *max the adaptive window's upper bound. NTO_ECONFIG
 * with *refused when the budget cannot be met, naming what would fit. */
static int resolve_window(nto_tuner *t, int *max, int *refused, nto_err *err) {
  size_t budget = t->o.memory_budget, total = t->tm.all_resident;
  size_t min_need = 0;
  int S = t->tm.plans[0]->n_steps, fit = 0, rc = 0;
  char b[32], need[32];
  t->window = t->o.window_mode == NTO_WINDOW_AUTO ? 1 : t->o.window;
  *max = S > 2 ? S - 1 : 1;
  if (!budget && t->o.memory_limit && total > t->o.memory_limit) {
    /* everything resident would exceed what the process may use: the
     * limit is the budget, and "all resident" the largest window in it */
    budget = t->o.memory_budget = t->o.memory_limit;
    t->o.budget_source =
        t->o.limit_source ? t->o.limit_source : "the memory limit";
    if (t->o.window_mode == NTO_WINDOW_FIXED && t->window == 0)
      t->o.window_mode = NTO_WINDOW_BUDGET;
    t->limited = 1;
  }
  if (!budget && t->o.window_mode == NTO_WINDOW_AUTO) {
    /* no budget: windows that need as much as everything resident are
     * pointless (resident would not stall at all) */
    rc = largest_fit(t, total - 1, &fit, &min_need, err);
    *max = fit > 0 ? fit : 1;
    return rc;
  }
  if (!budget)
    return 0;
  char what[160];
  budget_words(t, b, sizeof b, what, sizeof what);
  if (t->o.window_mode == NTO_WINDOW_FIXED && t->window == 0) {
    return total <= budget
               ? 0
               : nto_err_set(err, NTO_ECONFIG,
                             "%s %s: training with everything resident "
                             "needs %s; give a window or no window",
                             t->o.budget_source, b,
                             nto_format_bytes(total + t->o.overhead, need,
                                              sizeof need));
  }
  if (t->o.window_mode == NTO_WINDOW_BUDGET && total <= budget) {
    t->window = 0;
    return 0;
  }
  rc = largest_fit(t, budget, &fit, &min_need, err);
  if (rc != 0)
    return rc;
  *refused = fit == 0;
  if (fit == 0)
    return nto_err_set(
        err, NTO_ECONFIG,
        "%s %s is below the minimum this model needs at "
        "batch %d: %s (window 1: %s)",
        t->o.budget_source, b, t->tm.batch,
        nto_format_bytes(min_need + t->o.overhead, need, sizeof need), what);
  if (t->o.window_mode == NTO_WINDOW_FIXED)
    return check_fixed(t, fit, refused, err);
  if (t->o.window_mode == NTO_WINDOW_BUDGET)
    t->window = fit;
  *max = fit;
  return 0;
}

int nto_tuner_limited(const nto_tuner *t, const char **source) {
  if (t->limited && source)
    *source = t->o.budget_source;
  return t->limited;
}

int nto_tuner_create(nto_tuner **out, const nto_tuner_model *tm,
                     const nto_tuner_opts *o, int *refused, nto_err *err) {
  *out = NULL;
  *refused = 0;
  nto_tuner *t = calloc(1, sizeof *t);
  if (!t)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  t->tm = *tm;
  t->o = *o;
  if (!t->o.budget_source)
    t->o.budget_source = "memory budget";
  if (t->o.prefetch == NTO_PREFETCH_AUTO)
    t->o.prefetch = o->memory_budget || o->window_mode == NTO_WINDOW_AUTO
                        ? NTO_PREFETCH_TIME
                        : NTO_PREFETCH_ROOM;
  int max = 1, rc = o->plan_only && !o->memory_budget
                        ? 0
                        : resolve_window(t, &max, refused, err);
  if (rc != 0) {
    nto_tuner_free(t);
    return rc;
  }
  t->auto_window = t->window > 0 && o->window_mode == NTO_WINDOW_AUTO;
  if (t->auto_window) {
    nto_autowin_init(&t->ctl, 1, max);
    t->ctl.by_time = t->o.prefetch == NTO_PREFETCH_TIME;
    /* a budget the user gave, not the limit the process lives under
     * (that one is a bound, not memory to fill) */
    if (t->ctl.by_time && t->o.memory_budget && !t->limited) {
      nto_autowin_budgeted(&t->ctl); /* starts at the largest window */
      t->window = t->ctl.n;
    }
  }
  *out = t;
  return 0;
}

void nto_tuner_free(nto_tuner *t) {
  if (!t)
    return;
  free(t->wtrace);
  free(t->step_ms);
  free(t->region[0]);
  free(t->region[1]);
  free(t);
}

int nto_tuner_window(const nto_tuner *t) { return t->window; }

int nto_tuner_window_bound(const nto_tuner *t) {
  return t->auto_window ? t->ctl.max : t->window;
}

void nto_tuner_engine_opts(const nto_tuner *t, nto_offload_opts *oo) {
  oo->window = t->window;
  oo->no_keep = t->o.no_keep;
}

void nto_tuner_attach(nto_tuner *t, nto_offload *engine) { t->off = engine; }

nto_prefetch nto_tuner_prefetch(const nto_tuner *t) { return t->o.prefetch; }

const char *nto_prefetch_name(nto_prefetch p) {
  static const char *const name[] = {"auto", "steps", "time", "room"};
  return p >= NTO_PREFETCH_AUTO && p <= NTO_PREFETCH_ROOM ? name[p] : "?";
}

int nto_tuner_room_declined(const nto_tuner *t) { return t->room_declined; }

const nto_window_sample *nto_tuner_window_trace(const nto_tuner *t, int *n) {
  *n = t->n_wtrace;
  return t->wtrace;
}

int nto_tuner_set_frontier(nto_tuner *t, int n, const int *upto, nto_err *err) {
  if (!t->off || n < 1)
    return nto_err_set(err, NTO_EINVAL,
                       t->off ? "window %d: expected >= 1"
                              : "window %d: the model does not offload",
                       n);
  size_t need = 0, budget = t->o.memory_budget;
  int rc = budget ? nto_tuner_need(t, n, upto, &need, err) : 0;
  if (rc == 0 && budget && need > budget)
    return nto_err_set(err, NTO_ECONFIG,
                       "window %d needs %zu bytes, above the memory budget "
                       "of %zu",
                       n, need + t->o.overhead, budget + t->o.overhead);
  return rc == 0 ? nto_offload_set_frontier(t->off, n, upto, err) : rc;
}

/* ---- the read frontier and its fit ---- */

/* Read time of step j in a frontier (nto_tuner_frontier): the bytes that
 * bring it in (the plain window's schedule) at the given bandwidth, times
 * PREFETCH_MARGIN, + PREFETCH_LATENCY_MS per step with reads. */
#define PREFETCH_MARGIN 1.25
#define PREFETCH_LATENCY_MS 0.2
/* Tries of fit_frontier, each with the lookahead's target lowered by what
 * the built schedule exceeded the limit by. */
#define FIT_TRIES 4
/* Schedule builds fit_by_batches may spend (ResNet-18: ~5 ms each). */
#define FIT_BATCH_BUILDS 48

/* The search of a fit: the plain schedule, the desired frontier, the
 * steps' gains, and the state of fit_by_batches. */
typedef struct fit_search {
  const nto_tuner *t;
  int n;
  const nto_schedule *sc;
  const int *desired;
  const double *gain; /* per step: its gain */
  size_t target, limit;
  double *g;  /* per step: the gains of the steps kept and being tried */
  int *upto;  /* scratch frontier */
  int *best;  /* the frontier of the last set that fitted */
  int moved;  /* its steps moved, 0: none yet */
  int builds; /* schedules built so far */
} fit_search;

/* One fit of the desired frontier within target with gains g
 * (nto_lookahead_fit) into q->upto, and the need of the schedule built
 * from it into *need. *got: the steps moved. */
static int fit_once(const fit_search *q, const double *g, size_t target,
                    int *got, size_t *need, nto_err *err) {
  const nto_schedule *sc = q->sc;
  *got = nto_lookahead_fit(sc->n_steps, q->n, q->desired, sc->live,
                           sc->enter_read, g, target, q->upto);
  if (*got < 0)
    return nto_err_set(err, *got, "out of memory");
  return nto_tuner_need(q->t, q->n, q->upto, need, err);
}

/* Try the steps kept so far plus order[a..b): keep them all when the
 * placed schedule fits within the limit; else, if more than one, each
 * half in turn. Stops trying after FIT_BATCH_BUILDS builds. */
static int fit_batch(fit_search *q, const int *order, int a, int b,
                     nto_err *err) {
  if (a >= b || q->builds >= FIT_BATCH_BUILDS)
    return 0;
  int S = q->sc->n_steps, got = 0;
  size_t need = 0;
  for (int i = a; i < b; i++)
    q->g[order[i]] = q->gain[order[i]];
  q->builds++;
  int rc = fit_once(q, q->g, q->target, &got, &need, err);
  if (rc != 0)
    return rc;
  if (need <= q->limit && got > 0) {
    q->moved = got;
    memcpy(q->best, q->upto, (size_t)S * sizeof *q->best);
    return 0;
  }
  for (int i = a; i < b; i++)
    q->g[order[i]] = 0;
  if (b - a == 1)
    return 0;
  int mid = a + (b - a) / 2;
  rc = fit_batch(q, order, a, mid, err);
  return rc == 0 ? fit_batch(q, order, mid, b, err) : rc;
}

/* qsort_r: step indices by decreasing gain (ctx), then index. */
static int by_step_gain(const void *a, const void *b, void *ctx) {
  const double *gain = ctx;
  int i = *(const int *)a, j = *(const int *)b;
  if (gain[i] != gain[j])
    return gain[i] < gain[j] ? 1 : -1;
  return (i > j) - (i < j);
}

/* The fit when every target tried failed: only some steps move (the others
 * keep their plain entry), chosen like the gaps schedule.c keeps: the
 * steps with a gain in decreasing order of gain, the first half tried with
 * those kept so far, kept whole when the placed schedule fits, else split;
 * then the second half. Placement makes the need depend on which steps
 * move, not only on how many, so a step with a smaller gain may fit where
 * a larger one did not. Writes q->upto and *moved (0: none fits). */
static int fit_by_batches(fit_search *q, int *moved, nto_err *err) {
  int S = q->sc->n_steps, h = 0;
  int *order = malloc((size_t)S * sizeof *order);
  q->g = calloc((size_t)S, sizeof *q->g);
  q->best = malloc((size_t)S * sizeof *q->best);
  int rc = order && q->g && q->best
               ? 0
               : nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (int j = 0; rc == 0 && j < S; j++)
    if (q->gain[j] > 0)
      order[h++] = j;
  if (rc == 0) {
    qsort_r(order, (size_t)h, sizeof *order, by_step_gain, (void *)q->gain);
    /* all h at once failed already: start with the halves */
    rc = fit_batch(q, order, 0, h / 2, err);
  }
  if (rc == 0)
    rc = fit_batch(q, order, h / 2, h, err);
  *moved = rc == 0 ? q->moved : 0;
  if (*moved > 0)
    memcpy(q->upto, q->best, (size_t)S * sizeof *q->upto);
  free(order);
  free(q->g);
  free(q->best);
  return rc;
}

/* Fit upto (the desired frontier; overwritten) so that the need stays
 * within limit: nto_lookahead_fit on the plain schedule sc's profile,
 * then the schedule built with the result is checked, and the fit retried
 * with a lower target where placement made it larger; when no target
 * fits, with fewer steps moved (fit_by_batches). The gain of step j: the
 * stall the plain window leaves before it (its read time beyond the
 * compute of the n steps it is read behind). *moved: the steps that enter
 * earlier than the plain window's (0: none fitted; upto is then not to be
 * used). Each try builds one schedule (ResNet-18: ~5 ms). */
static int fit_frontier(const nto_tuner *t, int n, const nto_schedule *sc,
                        const double *step_ms, const double *read_ms,
                        size_t limit, int *upto, int *moved, nto_err *err) {
  int S = sc->n_steps;
  size_t ws = t->tm.workspace, need = 0;
  double *gain = malloc((size_t)S * sizeof *gain);
  int *desired = malloc((size_t)S * sizeof *desired);
  int rc = gain && desired ? 0 : nto_err_set(err, NTO_ENOMEM, "out of memory");
  *moved = 0;
  for (int j = 0; rc == 0 && j < S; j++) {
    double behind = 0;
    for (int k = 1; k <= n; k++)
      behind += step_ms[(j - k + S) % S];
    gain[j] = read_ms[j] > behind ? read_ms[j] - behind : 0;
  }
  if (rc == 0)
    memcpy(desired, upto, (size_t)S * sizeof *upto);
  size_t full = limit > ws ? limit - ws : 0, target = full;
  fit_search q = {t, n, sc, desired, gain, full, limit, NULL, upto, NULL, 0, 0};
  for (int k = 0; rc == 0 && k < FIT_TRIES && target > 0; k++) {
    int got = 0;
    rc = fit_once(&q, gain, target, &got, &need, err);
    if (rc == 0 && need <= limit) {
      *moved = got;
      break;
    }
    target = rc == 0 && need - limit < target ? target - (need - limit) : 0;
  }
  if (rc == 0 && *moved == 0 && full > 0)
    rc = fit_by_batches(&q, moved, err);
  free(gain);
  free(desired);
  return rc;
}

int nto_tuner_frontier(const nto_tuner *t, int n, const double *step_ms,
                       double bytes_per_ms, int room, size_t limit, int *upto,
                       int *moved, nto_err *err) {
  const nto_plan *p = t->tm.plans[0];
  int S = p->n_steps;
  *moved = 0;
  if (S < 2 || n < 1 || !(bytes_per_ms > 0))
    return nto_err_set(err, NTO_EINVAL,
                       "frontier of window %d over %d steps at %g bytes/ms: "
                       "expected a window >= 1, 2 steps or more and a "
                       "bandwidth > 0",
                       n, S, bytes_per_ms);
  if (n > S - 1)
    n = S - 1; /* as the engine clamps its window */
  double *read_ms = malloc((size_t)S * sizeof *read_ms);
  nto_schedule sc;
  nto_schedule_req rq = request(t, n, NULL, 0);
  int rc = read_ms ? nto_schedule_make(&sc, p, &rq, err)
                   : nto_err_set(err, NTO_ENOMEM, "out of memory");
  if (rc != 0) {
    free(read_ms);
    return rc;
  }
  for (int j = 0; j < S; j++)
    read_ms[j] = sc.enter_read[j] ? (double)sc.enter_read[j] / bytes_per_ms *
                                            PREFETCH_MARGIN +
                                        PREFETCH_LATENCY_MS
                                  : 0;
  int most = nto_lookahead_frontier(S, n, step_ms, read_ms, -1, upto);
  rc = most < 0 ? nto_err_set(err, most, "out of memory") : 0;
  /* the limit: the budget, and for room the plain window's own need */
  size_t plain = 0, need = 0;
  if (rc == 0 && most > 0 && room) {
    rc = nto_tuner_need(t, n, NULL, &plain, err);
    limit = limit && limit < plain ? limit : plain;
  }
  if (rc == 0 && most > 0 && limit)
    rc = nto_tuner_need(t, n, upto, &need, err);
  if (rc == 0 && most > 0 && limit && need > limit)
    rc = fit_frontier(t, n, &sc, step_ms, read_ms, limit, upto, &most, err);
  nto_schedule_free(&sc);
  free(read_ms);
  *moved = rc == 0 && most > 0 ? most : 0;
  return rc;
}

/* ---- whether room's read-ahead pays ---- */

/* The rule of nto_tuner_room_pays for room's schedule moving r1 + w1
 * bytes per pass against the plain window's r0 + w0. */
static int pays_with(uint64_t r1, uint64_t w1, uint64_t r0, uint64_t w0,
                     double pass_ms, double device_ms, uint64_t pass_bytes) {
  if (r1 + w1 <= r0 + w0)
    return 1;
  if (!(pass_ms > 0) || !(device_ms > 0) || pass_bytes == 0)
    return 0; /* no rate measured: not known to fit */
  double busy = device_ms * (double)(r1 + w1) / (double)pass_bytes;
  return busy <= NTO_ROOM_DEVICE_SHARE * pass_ms;
}

int nto_tuner_room_pays(const nto_tuner *t, int n, const int *upto,
                        double pass_ms, double device_ms, uint64_t pass_bytes,
                        int *pays, nto_err *err) {
  uint64_t r0 = 0, w0 = 0, r1 = 0, w1 = 0;
  *pays = 1;
  int rc = engine_bytes(t, n, NULL, &r0, &w0, err);
  if (rc == 0)
    rc = engine_bytes(t, n, upto, &r1, &w1, err);
  if (rc == 0)
    *pays = pays_with(r1, w1, r0, w0, pass_ms, device_ms, pass_bytes);
  return rc;
}

/* With room's frontier in force for window n: does it pay, with the
 * engine's own schedule's bytes (so that its keeping is not computed
 * twice) and the last pass's device time? If not, the plain window
 * instead. The plain window's bytes are computed once per window. */
static int check_room(nto_tuner *t, int n, nto_err *err) {
  nto_offload_stats st;
  nto_offload_get_stats(t->off, &st);
  if (t->plain_n != n) {
    int rc = engine_bytes(t, n, NULL, &t->plain_read, &t->plain_written, err);
    if (rc != 0)
      return rc;
    t->plain_n = n;
  }
  t->room_declined = !pays_with(st.planned_read, st.planned_written,
                                t->plain_read, t->plain_written, t->pass_ms,
                                t->pass_device_ms, t->pass_bytes);
  return t->room_declined ? nto_offload_set_frontier(t->off, n, NULL, err) : 0;
}

/* ---- between passes ---- */

/* The frontier of window n from the step times and read bandwidth (bytes
 * per busy ms of the onloader) measured so far; *ok = 0 when there is
 * nothing to weigh (no times, no reads) or nothing moves. */
static int make_frontier(const nto_tuner *t, int n, int *upto, int *ok,
                         nto_err *err) {
  *ok = 0;
  nto_offload_stats st;
  nto_offload_get_stats(t->off, &st);
  if (!t->step_ms || st.read_bytes == 0 || st.read_busy_ms <= 0)
    return 0;
  int moved = 0;
  double rbw = (double)st.read_bytes / st.read_busy_ms;
  int rc = nto_tuner_frontier(t, n, t->step_ms, rbw,
                              t->o.prefetch == NTO_PREFETCH_ROOM,
                              t->o.memory_budget, upto, &moved, err);
  *ok = rc == 0 && moved > 0;
  return rc;
}

/* After a training pass at window cur: measure step times for the
 * frontier (passes 1 and 3; the first pays for first touches), and put
 * the window next with its frontier in force. */
static int tune_window(nto_tuner *t, int cur, int next, nto_tune_report *r,
                       nto_err *err) {
  int S = t->tm.plans[0]->n_steps, remeasured = 0;
  if (t->o.prefetch != NTO_PREFETCH_STEPS &&
      (t->passes == 1 || t->passes == 3)) {
    if (!t->step_ms && !(t->step_ms = malloc((size_t)S * sizeof *t->step_ms)))
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
    nto_offload_step_times(t->off, t->step_ms);
    remeasured = 1;
  }
  if (!remeasured && next == cur)
    return 0;
  /* Under a budget the region fills it: the schedules built below (the
   * frontier's fits, then the engine's) would add their working memory,
   * freed again after each build, on top of it (ResNet-18 b32: 0.3-0.8
   * MiB, MobileNetV2 32x32 b16: about 1 MiB above the budget). Drained
   * first, with its pages given back, the region leaves them its room;
   * the next pass primes the window again, as after any change of window
   * or frontier. */
  int rc = t->o.memory_budget ? nto_offload_release(t->off, err) : 0;
  if (rc != 0)
    return rc;
  int *upto = malloc((size_t)S * sizeof *upto), ok = 0;
  if (!upto)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  rc = t->step_ms ? make_frontier(t, next, upto, &ok, err) : 0;
  if (rc == 0)
    rc = nto_offload_set_frontier(t->off, next, ok ? upto : NULL, err);
  if (rc == 0)
    t->room_declined = 0;
  if (rc == 0 && ok && t->o.prefetch == NTO_PREFETCH_ROOM)
    rc = check_room(t, next, err);
  r->frontier = rc == 0 && ok && !t->room_declined;
  free(upto);
#ifdef __GLIBC__
  /* glibc returns only the top of its heap by itself: the heap pages the
   * builds freed below a block still in use (the engine's new schedules)
   * stayed with the process (ResNet-18 b32: 0.25 MiB a turn, MobileNetV2
   * 32x32 b16: 0.5-0.6 MiB) */
  if (t->o.memory_budget)
    malloc_trim(0);
#endif
  return rc;
}

/* Record the adaptive window's sample of pass s and the window the
 * controller wants next into *next. */
static int adapt_window(nto_tuner *t, const nto_pass_sample *s, int *next,
                        nto_err *err) {
  const nto_offload_stats *b = &s->before, *a = &s->after;
  double rb = a->read_busy_ms - b->read_busy_ms;
  double wb = a->write_busy_ms - b->write_busy_ms;
  double it = s->wall_ms, prime = a->prime_ms - b->prime_ms;
  /* the first pass of time/room ran with the plain read-ahead: its stall
   * says nothing about the window with read-ahead by time */
  int before_read_ahead = t->o.prefetch != NTO_PREFETCH_STEPS && t->passes == 1;
  /* by time, an iteration that primed is not judged (autowin.h) */
  int primed_by_time = t->ctl.by_time && prime > 0;
  nto_window_sample ws = {
      .window = a->window,
      .iteration_ms = it,
      .measured_ms = it - prime,
      .stall_ms =
          (a->stall_ms - b->stall_ms) - (a->prime_stall_ms - b->prime_stall_ms),
      .io_busy_ms = rb > wb ? rb : wb,
      .device_ms = a->device_busy_ms - b->device_busy_ms,
      .judged =
          it - prime >= 0.25 * it && !before_read_ahead && !primed_by_time,
      .before_read_ahead = before_read_ahead,
  };
  if (t->n_wtrace == t->cap_wtrace) {
    int cap = t->cap_wtrace ? 2 * t->cap_wtrace : 64;
    nto_window_sample *v = realloc(t->wtrace, (size_t)cap * sizeof *v);
    if (!v)
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
    t->wtrace = v;
    t->cap_wtrace = cap;
  }
  t->wtrace[t->n_wtrace++] = ws;
  *next = ws.window;
  if (!ws.judged)
    return 0;
  nto_autowin_sample as = {ws.window, ws.measured_ms, ws.stall_ms,
                           ws.io_busy_ms * ws.measured_ms / it,
                           prime > 0 ? 0 : it};
  *next = nto_autowin_next(&t->ctl, &as);
  return 0;
}

int nto_tuner_after_pass(nto_tuner *t, const nto_pass_sample *s,
                         nto_tune_report *r, nto_err *err) {
  memset(r, 0, sizeof *r);
  if (!t->off)
    return 0;
  const nto_offload_stats *b = &s->before, *a = &s->after;
  t->passes++;
  t->pass_ms = s->wall_ms;
  t->pass_device_ms = a->device_busy_ms - b->device_busy_ms;
  t->pass_bytes =
      (a->read_bytes - b->read_bytes) + (a->written_bytes - b->written_bytes);
  int next = a->window, rc = 0;
  r->window_from = r->window_to = a->window;
  if (!t->auto_window && t->o.prefetch == NTO_PREFETCH_STEPS)
    return 0;
  if (t->auto_window)
    rc = adapt_window(t, s, &next, err);
  if (rc == 0)
    rc = tune_window(t, a->window, next, r, err);
  nto_offload_stats now;
  nto_offload_get_stats(t->off, &now);
  r->window_to = now.window;
  r->ahead = now.ahead;
  r->room_declined = t->room_declined;
  return rc;
}

/* schedule.c - the static schedule of the offload engine. See schedule.h.
 *
 * The window is run over a priming and four passes (0..3). Pass 1 is the
 * steady state that is recorded (pass 2 must repeat it exactly); passes 2
 * and 3 close the intervals that pass 1 opens across the wrap.
 */
#include "schedule.h"

#include "place.h"
#include "timeindex.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PASSES 4

/* One decision of the modelled run. */
typedef struct rec {
  int pass, step, phase; /* phase 0: start of step, 2: end of step */
  nto_act a;
  unsigned char keep; /* WRITE: reclaimed before completing */
  int iv;             /* LOAD/ALLOC: interval index, -1 if not pass 1 */
} rec;

/* A residency interval in the cyclic time of one pass [0, 3S). */
typedef struct interval {
  int t;
  long seg[2][2]; /* up to two [first, last] segments */
  int n_seg;
  long start, end; /* modelled time, end -1 while open */
  size_t offset;
  size_t alt; /* second offset (nto_sched_act), SIZE_MAX: none */
} interval;

typedef struct model {
  const nto_plan *p;
  nto_window w;
  int S;
  rec *r;
  int n_r, cap_r;
  interval *iv;
  int n_iv, cap_iv;
  int *open_iv;               /* per tensor: pass-1 interval open, or -1 */
  unsigned char *open_before; /* per tensor: opened before pass 1, open */
  int *pend;                  /* writes completing at the next step */
  int n_pend;
  int *pend_rec; /* per tensor: its pending WRITE record, or -1 */
  nto_act *acts;
  const int *upto;      /* the frontier (valid) */
  uint64_t *enter_read; /* per step: bytes read when it enters (pass 1) */
  int oom;
} model;

static int push_rec(model *m, rec r) {
  if (m->n_r == m->cap_r) {
    int cap = m->cap_r ? 2 * m->cap_r : 1024;
    rec *n = realloc(m->r, (size_t)cap * sizeof *n);
    if (!n) {
      m->oom = 1;
      return -1;
    }
    m->r = n;
    m->cap_r = cap;
  }
  m->r[m->n_r] = r;
  return m->n_r++;
}

/* Tensor t gets a buffer at time g. */
static int open_interval(model *m, int t, long g) {
  if (g < 3L * m->S) {
    m->open_before[t] = 1;
    return -1;
  }
  if (m->n_iv == m->cap_iv) {
    int cap = m->cap_iv ? 2 * m->cap_iv : 256;
    interval *n = realloc(m->iv, (size_t)cap * sizeof *n);
    if (!n) {
      m->oom = 1;
      return -1;
    }
    m->iv = n;
    m->cap_iv = cap;
  }
  m->iv[m->n_iv] = (interval){.t = t, .start = g, .end = -1, .alt = SIZE_MAX};
  m->open_iv[t] = m->n_iv;
  return m->n_iv++;
}

/* Tensor t's buffer is released at time g. */
static void close_interval(model *m, int t, long g) {
  if (m->open_iv[t] >= 0)
    m->iv[m->open_iv[t]].end = g;
  else
    m->open_before[t] = 0;
  m->open_iv[t] = -1;
}

/* Apply and record the actions of one instant: phase 0 (start of step
 * `step`, bringing in step `target` of pass `tpass`) or 2 (its end). An
 * ALLOC has no content to read ahead: it is deferred to the start of the
 * step that needs it, so its buffer is not held during the lookahead. */
static void record(model *m, int pass, int step, int phase, int n, int tpass,
                   int target) {
  long g = (long)(pass * m->S + step) * 3 + phase;
  for (int i = 0; i < n; i++) {
    nto_act a = m->acts[i];
    rec r = {pass, step, phase, a, 0, -1};
    switch (a.kind) {
    case NTO_ACT_ALLOC:
      r.pass = tpass, r.step = target;
      nto_window_loaded(&m->w, a.t, a.kind);
      r.iv = open_interval(m, a.t, (long)(tpass * m->S + target) * 3);
      break;
    case NTO_ACT_LOAD:
      nto_window_loaded(&m->w, a.t, a.kind);
      r.iv = open_interval(m, a.t, g); /* the priming has g < 0 */
      if (pass == 1)
        m->enter_read[target] += m->p->bytes[a.t];
      break;
    case NTO_ACT_RECLAIM:
      if (m->pend_rec[a.t] >= 0)
        m->r[m->pend_rec[a.t]].keep = 1;
      break;
    case NTO_ACT_WRITE:
      m->pend[m->n_pend++] = a.t;
      break;
    case NTO_ACT_DROP:
    case NTO_ACT_FREE:
      close_interval(m, a.t, g);
      break;
    }
    int k = r.pass >= 0 ? push_rec(m, r) : -1;
    if (a.kind == NTO_ACT_WRITE)
      m->pend_rec[a.t] = k;
  }
}

/* The previous step's writes complete at time 3s+1. */
static void complete_writes(model *m, int pass, int step) {
  long g = (long)(pass * m->S + step) * 3 + 1;
  for (int i = 0; i < m->n_pend; i++) {
    int t = m->pend[i];
    if (!nto_window_written(&m->w, t))
      close_interval(m, t, g);
    m->pend_rec[t] = -1;
  }
  m->n_pend = 0;
}

static void run_model(model *m) {
  int S = m->S, lead = m->upto[S - 1] - S + 1;
  for (int s = 0; s < lead; s++)
    record(m, -1, s, 0, nto_window_enter(&m->w, s, m->acts), 0, s);
  long next = lead; /* the next step to enter, counted from pass 0 */
  for (int pass = 0; pass < PASSES && !m->oom; pass++) {
    for (int s = 0; s < S; s++) {
      for (; next <= (long)pass * S + m->upto[s]; next++) {
        int x = (int)(next % S), tpass = (int)(next / S);
        record(m, pass, s, 0, nto_window_enter(&m->w, x, m->acts), tpass, x);
      }
      complete_writes(m, pass, s);
      record(m, pass, s, 2, nto_window_leave(&m->w, s, m->acts), pass, s);
    }
  }
}

/* Pass 2 must repeat pass 1 action for action (each in record order;
 * the deferred ALLOCs of a pass are recorded during the one before). */
static int periodic(const model *m) {
  for (int i = 0, j = 0;; i++, j++) {
    while (i < m->n_r && m->r[i].pass != 1)
      i++;
    while (j < m->n_r && m->r[j].pass != 2)
      j++;
    if (i == m->n_r || j == m->n_r)
      return i == m->n_r && j == m->n_r;
    const rec *a = &m->r[i], *b = &m->r[j];
    if (a->step != b->step || a->phase != b->phase || a->a.kind != b->a.kind ||
        a->a.t != b->a.t)
      return 0;
  }
}

/* Segments of every pass-1 interval in cyclic time, plus one full-cycle
 * interval per tensor that is never released. Returns 0 or -1. */
static int to_cycle(model *m) {
  long T = 3L * m->S;
  for (int k = 0; k < m->n_iv; k++) {
    interval *v = &m->iv[k];
    if (v->start >= 2 * T)
      continue; /* a later copy */
    long a = v->start - T, e = v->end - T;
    if (v->end < 0 || e - a >= T)
      return -1;
    if (e < T) {
      v->seg[0][0] = a, v->seg[0][1] = e, v->n_seg = 1;
    } else {
      v->seg[0][0] = a, v->seg[0][1] = T - 1;
      v->seg[1][0] = 0, v->seg[1][1] = e - T, v->n_seg = 2;
    }
  }
  for (int t = 0; t < m->p->n_tensors; t++) {
    if (!m->open_before[t])
      continue;
    if (open_interval(m, t, 3L * m->S) < 0)
      return -1;
    interval *v = &m->iv[m->n_iv - 1];
    v->start = -1; /* permanent */
    v->end = T;
    v->seg[0][0] = 0, v->seg[0][1] = T - 1, v->n_seg = 1;
  }
  return 0;
}

static int used(const interval *v) { return v->n_seg > 0; }

/* Do a and b share an instant? */
static int time_overlap(const interval *a, const interval *b) {
  for (int i = 0; i < a->n_seg; i++)
    for (int j = 0; j < b->n_seg; j++)
      if (a->seg[i][0] <= b->seg[j][1] && b->seg[j][0] <= a->seg[i][1])
        return 1;
  return 0;
}

/* The used intervals placed in one region (place.h nto_place, in interval
 * order) and their offsets set. With fit > 0, the first placement order
 * whose region is within fit is kept without trying the others (a trial
 * of keep only asks whether some order fits). Returns the region's size,
 * or (size_t)-1 when out of memory. */
static size_t place(model *m, size_t fit) {
  nto_place_item *v = malloc((size_t)(m->n_iv + 1) * sizeof *v);
  int *at = malloc((size_t)(m->n_iv + 1) * sizeof *at);
  size_t region = (size_t)-1;
  if (v && at) {
    int n = 0;
    for (int k = 0; k < m->n_iv; k++) {
      const interval *iv = &m->iv[k];
      if (!used(iv))
        continue;
      at[n] = k;
      v[n] = (nto_place_item){.bytes = m->p->bytes[iv->t], .n_seg = iv->n_seg};
      memcpy(v[n++].seg, iv->seg, sizeof iv->seg);
    }
    region = nto_place(v, n, 3L * m->S, fit);
    for (int i = 0; region != (size_t)-1 && i < n; i++)
      m->iv[at[i]].offset = v[i].offset;
  }
  free(v);
  free(at);
  return region;
}

/* ---- spreading the placement ---- */

/* Instants from a forward to b in the cycle of T. */
static long ahead(long a, long b, long T) {
  long d = (b - a) % T;
  return d < 0 ? d + T : d;
}

static long first_instant(const interval *v) { return v->seg[0][0]; }
static long last_instant(const interval *v) { return v->seg[v->n_seg - 1][1]; }

/* Instants between u and v (disjoint in time), the shorter way round. */
static long time_gap(const interval *u, const interval *v, long T) {
  long a = ahead(last_instant(u), first_instant(v), T);
  long b = ahead(last_instant(v), first_instant(u), T);
  return a < b ? a : b;
}

static int bytes_overlap(size_t o1, size_t l1, size_t o2, size_t l2) {
  return o1 < o2 + l2 && o2 < o1 + l1;
}

/* Gaps shorter than this many instants (8 steps) count; beyond, pages
 * are as good as free. */
#define SPREAD_HORIZON 24

/* A byte range [off, end) of the region. */
typedef struct range {
  size_t off, end;
} range;

static int by_off(const void *x, const void *y) {
  const range *a = x, *b = y;
  return (a->off > b->off) - (a->off < b->off);
}

/* r[0..n) by off: insertion sort for the usual few (qsort's set-up cost
 * was a tenth of a deep net's start-up, over a hundred thousand calls),
 * qsort beyond. The order among equal offsets does not matter to
 * range_free. */
static void sort_ranges(range *r, int n) {
  if (n > 32) {
    qsort(r, (size_t)n, sizeof *r, by_off);
    return;
  }
  for (int i = 1; i < n; i++) {
    range v = r[i];
    int j = i;
    for (; j > 0 && r[j - 1].off > v.off; j--)
      r[j] = r[j - 1];
    r[j] = v;
  }
}

/* Is [o, o + len) free of the ranges r[0..n) (sorted by off; pm[i]: the
 * largest end of r[0..i])? The ranges that start below o + len are a
 * prefix; none of them may end after o. O(log n). */
static int range_free(const range *r, const size_t *pm, int n, size_t o,
                      size_t len) {
  int lo = 0, hi = n; /* the first range starting at or after o + len */
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (r[mid].off < o + len)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo == 0 || pm[lo - 1] <= o;
}

/* Scratch of best_offset, sized for every interval, and the time index
 * that finds an interval's neighbours. */
typedef struct spread_buf {
  int *near, *busy;
  size_t *cand, *pm;
  range *br;
  /* the intervals by time (timeindex.h): one-segment ones in their
   * buckets, two-segment and long ones in the list every query reads */
  nto_time_index x;
  int *cand_iv; /* a query's candidates */
} spread_buf;

static void spread_buf_free(spread_buf *b) {
  free(b->near);
  free(b->busy);
  free(b->cand);
  free(b->br);
  free(b->pm);
  nto_time_index_free(&b->x);
  free(b->cand_iv);
}

/* Every spreadable interval into the time index. Returns 0 or
 * NTO_ENOMEM. */
static int nbr_build(const model *m, spread_buf *b) {
  int n = m->n_iv;
  b->cand_iv = malloc(((size_t)n + 1) * sizeof *b->cand_iv);
  if (!b->cand_iv || nto_time_index_init(&b->x, n, 3L * m->S) != 0)
    return NTO_ENOMEM;
  for (int j = 0; j < n; j++) {
    const interval *u = &m->iv[j];
    if (!used(u) || m->p->bytes[u->t] == 0)
      continue;
    int lng = u->n_seg != 1 ||
              nto_time_index_span(&b->x, u->seg, 1) > NTO_TIME_INDEX_LONG;
    if (nto_time_index_add(&b->x, j, u->seg, 1, lng) != 0)
      return NTO_ENOMEM;
  }
  return 0;
}

static int by_index(const void *x, const void *y) {
  int a = *(const int *)x, c = *(const int *)y;
  return (a > c) - (a < c);
}

/* The intervals (other than k, used, with bytes) that overlap interval k
 * in time into b->busy[0..*nb) and those within SPREAD_HORIZON instants of
 * it into b->near[0..*nn), each in index order. One-segment intervals are
 * found through the buckets of k's instants widened by the horizon on
 * both sides (around the cycle): an interval ending less than the horizon
 * before k starts, or starting less than it after k ends, touches them;
 * the others are in lng. A two-segment k reads every interval. */
static void neighbours(const model *m, spread_buf *b, int k, int *nb, int *nn) {
  long T = 3L * m->S;
  const interval *v = &m->iv[k];
  int nc = 0;
  if (v->n_seg != 1 || T <= 2 * SPREAD_HORIZON + 2) {
    for (int j = 0; j < m->n_iv; j++)
      b->cand_iv[nc++] = j;
  } else {
    long x = v->seg[0][0] - SPREAD_HORIZON, y = v->seg[0][1] + SPREAD_HORIZON;
    long parts[3][2];
    int np = 0;
    if (y - x + 1 >= T) {
      parts[np][0] = 0, parts[np++][1] = T - 1;
    } else {
      if (x < 0)
        parts[np][0] = x + T, parts[np++][1] = T - 1, x = 0;
      if (y >= T)
        parts[np][0] = 0, parts[np++][1] = y - T, y = T - 1;
      parts[np][0] = x, parts[np++][1] = y;
    }
    nc = nto_time_index_near(&b->x, (const long(*)[2])parts, np, b->cand_iv);
    qsort(b->cand_iv, (size_t)nc, sizeof *b->cand_iv, by_index);
  }
  *nb = *nn = 0;
  for (int i = 0; i < nc; i++) {
    int j = b->cand_iv[i];
    const interval *u = &m->iv[j];
    if (j == k || !used(u) || m->p->bytes[u->t] == 0)
      continue;
    if (time_overlap(u, v))
      b->busy[(*nb)++] = j;
    else if (time_gap(u, v, T) < SPREAD_HORIZON)
      b->near[(*nn)++] = j;
  }
}

static int spread_buf_init(spread_buf *b, int n) {
  memset(b, 0, sizeof *b);
  b->near = malloc(((size_t)n + 1) * sizeof *b->near);
  b->busy = malloc(((size_t)n + 1) * sizeof *b->busy);
  b->cand = malloc((2 * (size_t)n + 3) * sizeof *b->cand);
  b->br = malloc(((size_t)n + 1) * sizeof *b->br);
  b->pm = malloc(((size_t)n + 1) * sizeof *b->pm);
  if (b->near && b->busy && b->cand && b->br && b->pm)
    return 0;
  return NTO_ENOMEM;
}

/* The offset within the region for interval k whose pages are free
 * longest around it (see spread_placement): candidates are its own
 * offset, the region's ends and the edges of the intervals overlapping
 * it in time, each valid when free of those. With `other`, candidates
 * overlapping k's own offset are skipped and SIZE_MAX means none. */
static size_t best_offset(const model *m, int k, size_t region, int other,
                          spread_buf *b, long *score_out) {
  long T = 3L * m->S;
  const interval *v = &m->iv[k];
  size_t len = m->p->bytes[v->t];
  int nb = 0, nn = 0, nc = 0;
  neighbours(m, b, k, &nb, &nn);
  b->cand[nc++] = v->offset;
  b->cand[nc++] = 0;
  if (region >= len)
    b->cand[nc++] = region - len;
  for (int i = 0; i < nb; i++) {
    const interval *u = &m->iv[b->busy[i]];
    b->cand[nc++] = u->offset + m->p->bytes[u->t];
    if (u->offset >= len)
      b->cand[nc++] = u->offset - len;
    b->br[i] = (range){u->offset, u->offset + m->p->bytes[u->t]};
  }
  sort_ranges(b->br, nb);
  for (int i = 0; i < nb; i++)
    b->pm[i] =
        i > 0 && b->pm[i - 1] > b->br[i].end ? b->pm[i - 1] : b->br[i].end;
  size_t best_off = other ? SIZE_MAX : v->offset;
  long best = -1;
  for (int c = 0; c < nc; c++) {
    size_t o = b->cand[c];
    if (o + len > region || !range_free(b->br, b->pm, nb, o, len) ||
        (other && bytes_overlap(o, len, v->offset, len)))
      continue;
    long score = SPREAD_HORIZON;
    for (int i = 0; i < nn; i++) {
      const interval *u = &m->iv[b->near[i]];
      if (bytes_overlap(o, len, u->offset, m->p->bytes[u->t])) {
        long g = time_gap(u, v, T);
        if (g < score)
          score = g;
      }
    }
    if (score > best) { /* the first candidate is the current offset */
      best = score;
      best_off = o;
    }
  }
  *score_out = best;
  return best_off;
}

/* Spreadable: an interval of its own (not permanent) with bytes. */
static int movable(const model *m, const interval *v) {
  return used(v) && v->start >= 0 && m->p->bytes[v->t] > 0;
}

/*
 * Move each interval, within the region, to the offset whose pages were
 * released longest before it starts and are taken again longest after it
 * ends (the largest smallest gap, up to SPREAD_HORIZON instants, to the
 * intervals sharing its bytes at other times). The greedy placement puts
 * a buffer at the lowest free offset, often in the pages a write released
 * one instant before in the model, while on the device that write is
 * still running and the step that needs the buffer waits for it. Offsets
 * only: the region, the actions and every byte moved stay; the placement
 * stays valid (each move checks every interval overlapping in time). The
 * permanent intervals stay. Each interval's neighbours in time (those it
 * overlaps, and those within the horizon) come from an index of time
 * buckets (neighbours()), not a scan of all intervals, which made
 * planning a 2000-layer net quadratic; then per interval its
 * candidates times the nearby intervals (a candidate's clash with the
 * intervals overlapping in time is a binary search in their byte ranges;
 * with a scan of them per candidate, MobileNetV2 224 b10 window 32's
 * final schedule took 1.2 s instead of 0.68).
 *
 * Then the second offset (alt) of each interval whose pages another one
 * left or takes within the horizon (where a write may still hold them:
 * the others have none), chosen the same way among the offsets that do
 * not overlap its own and are free of every interval overlapping it in
 * time, once every interval has its final offset.
 */
static int spread_placement(model *m, size_t region) {
  spread_buf b = {0};
  unsigned char *crowded = calloc((size_t)m->n_iv + 1, 1);
  if (!crowded || spread_buf_init(&b, m->n_iv) != 0 || nbr_build(m, &b) != 0) {
    free(crowded);
    spread_buf_free(&b);
    return NTO_ENOMEM;
  }
  long score;
  for (int k = 0; k < m->n_iv; k++)
    if (movable(m, &m->iv[k])) {
      m->iv[k].offset = best_offset(m, k, region, 0, &b, &score);
      crowded[k] = score < SPREAD_HORIZON;
    }
  for (int k = 0; k < m->n_iv; k++)
    if (crowded[k] && movable(m, &m->iv[k]))
      m->iv[k].alt = best_offset(m, k, region, 1, &b, &score);
  spread_buf_free(&b);
  free(crowded);
  return 0;
}

/* Does interval v hold its tensor when a pass starts? */
static int open_at_wrap(const model *m, const interval *v) {
  long T = 3L * m->S;
  return used(v) && (v->start < 0 || v->end - T >= T);
}

/* The interval holding tensor t when a pass starts. */
static const interval *at_wrap(const model *m, int t) {
  for (int k = 0; k < m->n_iv; k++)
    if (m->iv[k].t == t && open_at_wrap(m, &m->iv[k]))
      return &m->iv[k];
  return NULL;
}

/* Copy pass 1's actions into the per-step lists (bucketed by step: the
 * deferred ALLOCs were recorded early), count the traffic. */
static int fill(nto_schedule *sc, model *m) {
  int S = m->S, n_t = m->p->n_tensors;
  sc->begin_first = calloc((size_t)S + 1, sizeof(int));
  sc->end_first = calloc((size_t)S + 1, sizeof(int));
  sc->prime = calloc((size_t)n_t + 1, sizeof *sc->prime);
  sc->written = calloc((size_t)n_t + 1, 1);
  if (!sc->begin_first || !sc->end_first || !sc->prime || !sc->written)
    return NTO_ENOMEM;
  for (int i = 0; i < m->n_r; i++) {
    const rec *r = &m->r[i];
    if (r->a.kind == NTO_ACT_WRITE)
      sc->written[r->a.t] = 1;
    if (r->pass == 1 && r->a.kind != NTO_ACT_RECLAIM)
      (r->phase == 0 ? sc->begin_first : sc->end_first)[r->step + 1]++;
  }
  for (int s = 0; s < S; s++) {
    sc->begin_first[s + 1] += sc->begin_first[s];
    sc->end_first[s + 1] += sc->end_first[s];
  }
  sc->begin = calloc((size_t)sc->begin_first[S] + 1, sizeof *sc->begin);
  sc->end = calloc((size_t)sc->end_first[S] + 1, sizeof *sc->end);
  int *nb = calloc((size_t)S + 1, sizeof(int));
  int *ne = calloc((size_t)S + 1, sizeof(int));
  if (!sc->begin || !sc->end || !nb || !ne) {
    free(nb);
    free(ne);
    return NTO_ENOMEM;
  }
  for (int i = 0; i < m->n_r; i++) {
    const rec *r = &m->r[i];
    if (r->pass != 1 || r->a.kind == NTO_ACT_RECLAIM)
      continue;
    nto_sched_act a = {r->a.t, (unsigned char)r->a.kind, r->keep, 0, SIZE_MAX};
    size_t bytes = m->p->bytes[a.t];
    if (r->phase == 0) {
      a.offset = m->iv[r->iv].offset;
      a.alt = m->iv[r->iv].alt;
      sc->begin[sc->begin_first[r->step] + nb[r->step]++] = a;
      sc->read_bytes += a.kind == NTO_ACT_LOAD ? bytes : 0;
    } else {
      sc->end[sc->end_first[r->step] + ne[r->step]++] = a;
      sc->written_bytes += a.kind == NTO_ACT_WRITE ? bytes : 0;
    }
  }
  free(nb);
  free(ne);
  return 0;
}

/* Resident bytes at the busiest instant of the cycle; those at every
 * instant g into live[g] (g < 3S; live has 3S + 1 entries). Each
 * segment adds its bytes at its first instant and takes them back after
 * its last (a difference array, then prefix sums): O(intervals + 3S). */
static size_t busiest(const model *m, size_t *live) {
  long T = 3L * m->S;
  memset(live, 0, ((size_t)T + 1) * sizeof *live);
  for (int k = 0; k < m->n_iv; k++) {
    const interval *v = &m->iv[k];
    for (int q = 0; q < v->n_seg; q++) {
      long a = v->seg[q][0] > 0 ? v->seg[q][0] : 0;
      long b = v->seg[q][1] < T - 1 ? v->seg[q][1] : T - 1;
      if (a > b)
        continue;
      live[a] += m->p->bytes[v->t]; /* unsigned: the sums come out exact */
      live[b + 1] -= m->p->bytes[v->t];
    }
  }
  size_t best = 0, sum = 0;
  for (long g = 0; g < T; g++) {
    sum += live[g];
    live[g] = sum;
    if (sum > best)
      best = sum;
  }
  live[T] = 0;
  return best;
}

/* The buffers the steady state holds when a pass starts, at their
 * offsets: those of steps 0 .. n_lead-1, and every persistent tensor whose
 * buffer is carried across the wrap to its first use. That is mostly a
 * write reclaimed across the wrap: a weight written at the end of a pass
 * (spread updates place its last U step there) whose forward step enters
 * at the start of step 0, before that write completes in the model, keeps
 * its buffer, so step 0's actions do not read it; without it here the
 * first pass after a drain would run that step without the weight, and the
 * engine would wait for it forever. */
static int fill_prime(nto_schedule *sc, model *m) {
  unsigned char *seen = calloc((size_t)m->p->n_tensors + 1, 1);
  if (!seen)
    return NTO_ENOMEM;
  const nto_plan *p = m->p;
  for (int s = 0; s < sc->n_lead; s++) {
    for (int k = p->step_first[s]; k < p->step_first[s + 1]; k++) {
      int t = p->step_t[k];
      if (seen[t])
        continue;
      seen[t] = 1;
      const interval *v = at_wrap(m, t);
      if (!v && !p->persistent[t])
        continue; /* allocated at the start of its step (deferred) */
      if (!v) {
        free(seen);
        return NTO_EINVAL;
      }
      /* a pass starts with no transient content */
      int kind = p->persistent[t] ? NTO_ACT_LOAD : NTO_ACT_ALLOC;
      sc->prime[sc->n_prime++] =
          (nto_sched_act){t, (unsigned char)kind, 0, v->offset, SIZE_MAX};
    }
  }
  for (int k = 0; k < m->n_iv; k++) {
    /* held from the pass's start through its first use, not only until
     * its write completes (after a drain there is no such write) */
    const interval *v = &m->iv[k];
    int first = nto_plan_first_use(p, v->t);
    if (!seen[v->t] && p->persistent[v->t] && open_at_wrap(m, v) &&
        first >= 0 && 3L * first <= v->seg[v->n_seg - 1][1]) {
      seen[v->t] = 1;
      sc->prime[sc->n_prime++] =
          (nto_sched_act){v->t, NTO_ACT_LOAD, 0, v->offset, SIZE_MAX};
    }
  }
  free(seen);
  return 0;
}

static void model_free(model *m) {
  nto_window_free(&m->w);
  free(m->r);
  free(m->iv);
  free(m->open_iv);
  free(m->open_before);
  free(m->pend);
  free(m->pend_rec);
  free(m->acts);
}

/* A valid frontier for window n (see nto_schedule_req) into out. */
static void make_frontier(int S, int n, const int *upto, int *out) {
  for (int s = 0; s < S; s++) {
    int u = upto && upto[s] > s + n ? upto[s] : s + n;
    u = u > s + S - 1 ? s + S - 1 : u;
    out[s] = s > 0 && out[s - 1] > u ? out[s - 1] : u;
  }
  /* across the wrap: step s of the next pass is at least where step S-1
   * of this one got (stays <= s + S - 1: out[S-1] - S <= S - 2) */
  for (int s = 0; s < S && out[s] < out[S - 1] - S; s++)
    out[s] = out[S - 1] - S;
}

/* The plain schedule, the placement spread when `spread`; fit: as for
 * place (0: the smallest region of every order). */
static int build(nto_schedule *sc, const nto_plan *p, int n, const int *upto,
                 int spread, size_t fit, nto_err *err) {
  memset(sc, 0, sizeof *sc);
  model m = {.p = p, .S = p->n_steps};
  size_t nt = (size_t)p->n_tensors + 1;
  sc->upto = malloc(((size_t)m.S + 1) * sizeof *sc->upto);
  sc->enter_read = calloc((size_t)m.S + 1, sizeof *sc->enter_read);
  sc->live = malloc((3 * (size_t)m.S + 1) * sizeof *sc->live);
  unsigned char *init = malloc(nt);
  m.open_iv = malloc(nt * sizeof(int));
  m.pend_rec = malloc(nt * sizeof(int));
  m.open_before = calloc(nt, 1);
  m.pend = malloc(nt * sizeof(int));
  m.acts = malloc(nt * sizeof(nto_act));
  int rc = init && m.open_iv && m.pend_rec && m.open_before && m.pend &&
                   m.acts && sc->upto && sc->enter_read && sc->live
               ? 0
               : NTO_ENOMEM;
  if (rc == 0) {
    for (int t = 0; t < p->n_tensors; t++) {
      init[t] = p->persistent[t] ? NTO_WS_SWAPPED : NTO_WS_NONE;
      m.open_iv[t] = m.pend_rec[t] = -1;
    }
    rc = nto_window_init(&m.w, p, n, init, NULL, err);
  }
  free(init);
  if (rc == 0) {
    sc->n_steps = m.S;
    sc->window = m.w.n;
    make_frontier(m.S, m.w.n, upto, sc->upto);
    sc->n_lead = sc->upto[m.S - 1] - m.S + 1;
    m.upto = sc->upto;
    m.enter_read = sc->enter_read;
    run_model(&m);
    rc = m.oom ? NTO_ENOMEM : 0;
  }
  if (rc == 0 && (!periodic(&m) || to_cycle(&m) != 0))
    rc = nto_err_set(err, NTO_EINVAL,
                     "schedule: the modelled passes are "
                     "not periodic (window %d)",
                     m.w.n);
  if (rc == 0) {
    sc->peak = busiest(&m, sc->live);
    sc->region = place(&m, fit);
    if (sc->region == (size_t)-1)
      rc = NTO_ENOMEM;
    else if (spread)
      rc = spread_placement(&m, sc->region);
  }
  if (rc == 0)
    rc = fill(sc, &m);
  if (rc == 0)
    rc = fill_prime(sc, &m);
  if (rc == NTO_ENOMEM)
    nto_err_set(err, rc, "out of memory");
  else if (rc == NTO_EINVAL && err && !err->code)
    nto_err_set(err, rc,
                "schedule: a tensor of the first steps has no "
                "buffer when a pass starts");
  model_free(&m);
  if (rc != 0)
    nto_schedule_free(sc);
  return rc;
}

void nto_schedule_free(nto_schedule *sc) {
  free(sc->begin_first);
  free(sc->end_first);
  free(sc->begin);
  free(sc->end);
  free(sc->prime);
  free(sc->written);
  free(sc->upto);
  free(sc->enter_read);
  free(sc->live);
  memset(sc, 0, sizeof *sc);
}

/* ---- keeping tensors resident through gaps (nto_schedule_req keep) ---- */

/* Tensor t between its uses a and b (b >= S: in the next pass). */
typedef struct gap {
  int t, a, b;
} gap;

static int gap_order(const void *x, const void *y, void *ctx) {
  const nto_plan *p = ctx;
  const gap *u = x, *v = y;
  if (u->b - u->a != v->b - v->a)
    return u->b - u->a < v->b - v->a ? -1 : 1;
  if (p->bytes[u->t] != p->bytes[v->t])
    return p->bytes[u->t] > p->bytes[v->t] ? -1 : 1;
  return u->t != v->t ? (u->t < v->t ? -1 : 1) : (u->a > v->a) - (u->a < v->a);
}

/* upto of step s counted from the pass of step 0 (s may be >= S). */
static long upto_at(const nto_schedule *sc, long s) {
  return sc->upto[s % sc->n_steps] + (s / sc->n_steps) * sc->n_steps;
}

/* The gaps of p under the frontier of sc, in trial order, into *out. */
static int list_gaps(const nto_plan *p, const nto_schedule *sc, gap **out,
                     int *n_out) {
  int S = p->n_steps, n = 0;
  gap *g = malloc(((size_t)p->use_first[p->n_tensors] + 1) * sizeof *g);
  if (!g)
    return NTO_ENOMEM;
  for (int t = 0; t < p->n_tensors; t++) {
    int k0 = p->use_first[t], k1 = p->use_first[t + 1];
    for (int k = k0; k < k1; k++) {
      int a = p->use_step[k];
      int last = k + 1 == k1;
      if (last && !p->persistent[t])
        break; /* transient content does not cross a pass */
      int b = last ? p->use_step[k0] + S : p->use_step[k + 1];
      if (b - a > 1 && upto_at(sc, a) < b && nto_plan_needed_after(p, t, a))
        g[n++] = (gap){t, a, b};
    }
  }
  qsort_r(g, (size_t)n, sizeof *g, gap_order, (void *)p);
  *out = g;
  *n_out = n;
  return 0;
}

/* The instants at which t is out of the region (modelled) in gap g:
 * from the end of the write after a (3(a+1)+2) until the step that reads
 * t back enters (the first step e with b within its frontier) into
 * [*x0, *x1) of the unrolled cycle. */
static void out_instants(const nto_schedule *sc, const gap *g, long *x0,
                         long *x1) {
  long e = g->a + 1;
  while (e < g->b && upto_at(sc, e) < g->b)
    e++;
  *x0 = 3L * (g->a + 1) + 2;
  *x1 = 3L * e;
}

/* Do `bytes` more fit within `region` at the instants [x0, x1) of the
 * unrolled cycle, given the resident bytes live[0..T)? */
static int may_fit(const size_t *live, long T, long x0, long x1, size_t bytes,
                   size_t region) {
  for (long x = x0; x < x1; x++)
    if (live[x % T] + bytes > region)
      return 0;
  return 1;
}

/* The schedule of p with the holds h[0..n); *better: its region is
 * within `region` and it moves fewer bytes than *sc, in which case it
 * replaces *sc. A trial that cannot be built (e.g. not periodic) is not
 * better; only running out of memory is an error. */
static int try_holds(nto_schedule *sc, const nto_plan *p, int n_win,
                     const int *upto, const nto_plan_hold *h, int n,
                     size_t region, int *better, nto_err *err) {
  nto_plan held;
  nto_schedule trial;
  nto_err terr = {0};
  *better = 0;
  int rc = nto_plan_add_holds(&held, p, h, n, &terr);
  if (rc == 0)
    rc = build(&trial, &held, n_win, upto, 0, region, &terr);
  nto_plan_free(&held);
  if (rc == NTO_ENOMEM)
    return nto_err_set(err, rc, "%s", terr.msg);
  if (rc != 0)
    return 0;
  *better = trial.region <= region && trial.read_bytes + trial.written_bytes <
                                          sc->read_bytes + sc->written_bytes;
  if (*better) {
    nto_schedule_free(sc);
    *sc = trial;
  } else {
    nto_schedule_free(&trial);
  }
  return 0;
}

/* Keep the holds h[n_h .. n_h + k) (appended to the n_h kept ones) that
 * can be kept: all at once (unless `refused`: that very set was just
 * refused), else each half in turn. Returns the holds kept now at
 * h[n_h ..], their count in *kept. */
static int keep_batch(nto_schedule *sc, const nto_plan *p, int n_win,
                      const int *upto, nto_plan_hold *h, int n_h, int k,
                      int refused, size_t region, int *kept, nto_err *err) {
  int better = 0, rc = 0;
  *kept = 0;
  if (k == 0)
    return 0;
  if (!refused)
    rc = try_holds(sc, p, n_win, upto, h, n_h + k, region, &better, err);
  if (rc != 0 || better || k == 1) {
    *kept = better ? k : 0;
    return rc;
  }
  int half = k / 2, k1 = 0, k2 = 0;
  rc = keep_batch(sc, p, n_win, upto, h, n_h, half, 0, region, &k1, err);
  if (rc != 0)
    return rc;
  /* the first half keeps its k1 at h[n_h ..] and leaves the second half
   * alone; close the gap. With the whole first half kept, the second
   * half makes the set just refused: split it at once. */
  memmove(h + n_h + k1, h + n_h + half, (size_t)(k - half) * sizeof *h);
  rc = keep_batch(sc, p, n_win, upto, h, n_h + k1, k - half, k1 == half, region,
                  &k2, err);
  *kept = k1 + k2;
  return rc;
}

/* Gaps tried per schedule build: a batch that fits (the usual case) costs
 * one build; one that does not is split in halves. KEEP_BATCH gaps, or
 * beyond KEEP_DEEP gaps (only deep nets: ResNet-18 has about 650,
 * MobileNetV2 224 about 1350) 1/KEEP_BUILDS of them, so that the builds,
 * each as long as the net, stay about KEEP_BUILDS (a 2000-layer chain:
 * about 6000 gaps, and its keeping a fifth of `train`'s start-up). */
#define KEEP_BATCH 32
#define KEEP_DEEP 2048
#define KEEP_BUILDS 32

/* The kept schedule with holds h[0..n_h) built again with the smallest
 * region of every placement order (a trial stopped at the first order
 * that fitted) and its placement spread when `spread` (the same actions
 * and bytes). */
static int respread(nto_schedule *sc, const nto_plan *p, int n, const int *upto,
                    const nto_plan_hold *h, int n_h, int spread, nto_err *err) {
  nto_plan held;
  nto_schedule out;
  int rc = nto_plan_add_holds(&held, p, h, n_h, err);
  if (rc == 0) {
    rc = build(&out, &held, n, upto, spread, 0, err);
    nto_plan_free(&held);
  }
  if (rc == 0) {
    out.n_kept = sc->n_kept;
    nto_schedule_free(sc);
    *sc = out;
  }
  return rc;
}

/* The kept schedule, the final placement spread when `spread`. */
static int keep(nto_schedule *sc, const nto_plan *p, int n, const int *upto,
                int spread, nto_err *err) {
  int rc = build(sc, p, n, upto, 0, 0, err);
  if (rc != 0)
    return rc;
  long T = 3L * p->n_steps;
  gap *g = NULL;
  int n_g = 0, n_h = 0;
  nto_plan_hold *h = NULL;
  size_t *live = malloc(((size_t)T + 1) * sizeof *live);
  rc = live ? list_gaps(p, sc, &g, &n_g) : NTO_ENOMEM;
  if (rc == 0 && !(h = malloc(((size_t)n_g + 1) * sizeof *h)))
    rc = NTO_ENOMEM;
  size_t region = sc->region, fit = sc->peak;
  int batch = n_g > KEEP_DEEP ? n_g / KEEP_BUILDS : KEEP_BATCH;
  if (rc == 0)
    memcpy(live, sc->live, (size_t)T * sizeof *live);
  for (int i = 0, k = 0; i <= n_g && rc == 0; i++) {
    long x0 = 0, x1 = 0;
    if (i < n_g)
      out_instants(sc, &g[i], &x0, &x1);
    if (i < n_g && may_fit(live, T, x0, x1, p->bytes[g[i].t], fit)) {
      for (long x = x0; x < x1; x++) /* modelled: t stays */
        live[x % T] += p->bytes[g[i].t];
      h[n_h + k++] = (nto_plan_hold){g[i].t, g[i].a + 1, g[i].b - 1};
    }
    if (k > 0 && (k == batch || i == n_g)) {
      int kept = 0;
      rc = keep_batch(sc, p, n, upto, h, n_h, k, 0, region, &kept, err);
      n_h += kept;
      k = 0;
      if (rc == 0) /* back to the schedule's own bytes */
        memcpy(live, sc->live, (size_t)T * sizeof *live);
    }
  }
  sc->n_kept = n_h;
  if (rc == 0 && (spread || n_h > 0)) /* n_h > 0: *sc is a trial */
    rc = respread(sc, p, n, upto, h, n_h, spread, err);
  if (rc == 0) /* its own placement may be smaller: the bound stays */
    sc->region = region;
  free(g);
  free(h);
  free(live);
  if (rc == NTO_ENOMEM)
    nto_err_set(err, rc, "out of memory");
  if (rc != 0)
    nto_schedule_free(sc);
  return rc;
}

int nto_schedule_make(nto_schedule *sc, const nto_plan *p,
                      const nto_schedule_req *rq, nto_err *err) {
  return rq->keep ? keep(sc, p, rq->window, rq->upto, rq->spread, err)
                  : build(sc, p, rq->window, rq->upto, rq->spread, 0, err);
}

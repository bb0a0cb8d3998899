/* floor.c - the region-bounded floor of a pass. See floor.h. */
#include "floor.h"

#include <math.h>
#include <stdlib.h>

/* Per-tensor marks of the phase starting at step s (stamps avoid clearing
 * them for every s). */
typedef struct phase_marks {
  int *seen;       /* == s: the phase has used t (reads and writes) */
  int *written;    /* == s: the phase has written t */
  size_t *counted; /* bytes of t in dirty (when written[t] == s) */
} phase_marks;

/* The I/O time a phase cannot avoid (ms), from the bytes it must read and
 * write beyond what a region of `region` bytes can hold. */
static double phase_io(double need, double dirty, size_t region, double rbw,
                       double wbw, floor_channels ch, double *rd, double *wr) {
  *rd = need > (double)region ? need - (double)region : 0;
  *wr = dirty > (double)region ? dirty - (double)region : 0;
  double r = *rd / rbw, w = *wr / wbw;
  return ch == FLOOR_SHARED ? r + w : (r > w ? r : w);
}

/* Add step e to the phase starting at s: update need (bytes read before
 * written) and dirty (bytes written and needed after e). */
static void extend(const nto_plan *p, int s, int e, phase_marks *mk,
                   double *need, double *dirty) {
  for (int k = p->step_first[e]; k < p->step_first[e + 1]; k++) {
    int t = p->step_t[k], mode = p->step_mode[k];
    if ((mode & NTO_USE_RW) && mk->seen[t] != s) {
      mk->seen[t] = s;
      if (mode & NTO_USE_READ)
        *need += (double)p->bytes[t];
    }
    if ((mode & NTO_USE_WRITE) && mk->written[t] != s) {
      mk->written[t] = s;
      mk->counted[t] = 0;
    }
    if (mk->written[t] == s) { /* needed after e? (changes only here) */
      size_t now = nto_plan_needed_after(p, t, e) ? p->bytes[t] : 0;
      *dirty += (double)now - (double)mk->counted[t];
      mk->counted[t] = now;
    }
  }
}

int floor_compute(const nto_plan *p, const double *step_ms, size_t region,
                  double read_bytes_per_ms, double write_bytes_per_ms,
                  floor_channels channels, region_floor *out, nto_err *err) {
  int S = p->n_steps, T = p->n_tensors;
  if (S < 1 || !(read_bytes_per_ms > 0) || !(write_bytes_per_ms > 0) ||
      !isfinite(read_bytes_per_ms) || !isfinite(write_bytes_per_ms))
    return nto_err_set(err, NTO_EINVAL,
                       "region floor: %d steps at %g / %g bytes/ms: needs a "
                       "step and positive bandwidths",
                       S, read_bytes_per_ms, write_bytes_per_ms);
  for (int s = 0; s < S; s++)
    if (!(step_ms[s] >= 0) || !isfinite(step_ms[s]))
      return nto_err_set(err, NTO_EINVAL, "region floor: step %d takes %g ms",
                         s, step_ms[s]);
  size_t nt = (size_t)(T > 0 ? T : 1), ns = (size_t)S + 1;
  phase_marks mk = {malloc(nt * sizeof(int)), malloc(nt * sizeof(int)),
                    calloc(nt, sizeof(size_t))};
  double *best = calloc(ns, sizeof *best), *excess = calloc(ns, sizeof *excess);
  double *rd = calloc(ns, sizeof *rd), *wr = calloc(ns, sizeof *wr);
  int *from = calloc(ns, sizeof *from);
  int rc =
      mk.seen && mk.written && mk.counted && best && excess && rd && wr && from
          ? 0
          : nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (int t = 0; rc == 0 && t < T; t++)
    mk.seen[t] = mk.written[t] = -1;
  for (int e = 1; rc == 0 && e <= S; e++)
    best[e] = -1;
  /* best[e]: the largest bound of steps 0..e-1 over partitions into
   * phases; from[e], excess[e], rd[e], wr[e]: its last phase's first
   * step, bound beyond its compute, and bytes. */
  for (int s = 0; rc == 0 && s < S; s++) {
    double need = 0, dirty = 0, compute = 0;
    for (int e = s; e < S; e++) {
      extend(p, s, e, &mk, &need, &dirty);
      compute += step_ms[e];
      double r, w;
      double io = phase_io(need, dirty, region, read_bytes_per_ms,
                           write_bytes_per_ms, channels, &r, &w);
      double bound = io > compute ? io : compute;
      if (best[s] + bound > best[e + 1]) {
        best[e + 1] = best[s] + bound;
        from[e + 1] = s;
        excess[e + 1] = bound - compute;
        rd[e + 1] = r;
        wr[e + 1] = w;
      }
    }
  }
  if (rc == 0) {
    *out = (region_floor){best[S], 0, -1, -1, 0, 0, 0};
    for (int s = 0; s < S; s++)
      out->compute_ms += step_ms[s];
    for (int e = S; e > 0; e = from[e])
      if (excess[e] > out->excess_ms) {
        out->first = from[e];
        out->last = e - 1;
        out->excess_ms = excess[e];
        out->read_bytes = rd[e];
        out->written_bytes = wr[e];
      }
  }
  free(mk.seen);
  free(mk.written);
  free(mk.counted);
  free(best);
  free(excess);
  free(rd);
  free(wr);
  free(from);
  return rc;
}

/* report.c - the end-of-run report of `train`. See report.h. */
#include "report.h"
#include "blas.h"
#include "cli.h"
#include "fileio.h"
#include "memstat.h"
#include "optimizer.h"
#include "outputs.h"
#include "setup.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Percentile q in [0,1] of n values (sorts a copy). */
static double percentile(const double *v, size_t n, double q) {
  if (n == 0)
    return 0;
  double *s = malloc(n * sizeof *s);
  if (!s)
    return 0;
  memcpy(s, v, n * sizeof *s);
  qsort(s, n, sizeof *s, cmp_double);
  double r = s[(size_t)floor(q * (double)(n - 1) + 0.5)];
  free(s);
  return r;
}

/* The size of file path in bytes, 0 if it cannot be read. */
static uint64_t file_bytes(const char *path) {
  struct stat st;
  return path && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The bytes of the weights saved to path and its safetensors twin (.bin
 * replaced, else added: outputs.c's rule). */
static uint64_t weights_bytes(const char *path) {
  char st[NTO_PATH_BYTES];
  size_t n = strlen(path);
  if (n > 4 && !strcmp(path + n - 4, ".bin"))
    snprintf(st, sizeof st, "%.*s.safetensors", (int)(n - 4), path);
  else
    snprintf(st, sizeof st, "%s.safetensors", path);
  return file_bytes(path) + file_bytes(st);
}

/* The flash wear figures of mx (report.h). */
static void measure_wear(const run *r, metrics *mx) {
  const char *save = outputs_save_path(r);
  mx->per_epoch = r->train && r->batch > 0
                      ? (long)(nto_dataset_size(r->train) / (size_t)r->batch)
                      : 0;
  mx->written_iteration = mx->n > 0 ? (double)r->io_written / mx->n : 0;
  mx->written_epoch = mx->written_iteration * (double)mx->per_epoch;
  mx->swap_written = mx->offload ? mx->st.written_bytes : 0;
  mx->ckpt_written =
      r->o.checkpoint ? (uint64_t)r->n_ckpt * file_bytes(r->o.checkpoint) : 0;
  mx->weights_written = save ? weights_bytes(save) : 0;
  mx->run_written = mx->swap_written + mx->ckpt_written + mx->weights_written;
  mx->endurance = r->o.tbw * 1e12;
  mx->endurance_default = r->o.endurance == NULL;
}

void report_measure(const run *r, metrics *mx) {
  memset(mx, 0, sizeof *mx);
  /* Too few iterations for the warm-up: measure them all (and say so).
   * Resumed: only this process's iterations (from it0) were timed. */
  mx->from = r->it0 + r->o.warmup < r->n_steps ? r->it0 + r->o.warmup : r->it0;
  mx->n = r->n_steps - mx->from;
  double n = mx->n > 0 ? (double)mx->n : 1;
  /* Nothing timed (a run resumed at or past its end): step_s has no entry
   * at from, not even one past its last. */
  const double *t = mx->n > 0 ? r->step_s + mx->from : r->step_s;
  size_t nt = mx->n > 0 ? (size_t)mx->n : 0;
  mx->median_ms = percentile(t, nt, 0.5) * 1e3;
  mx->p90_ms = percentile(t, nt, 0.9) * 1e3;
  mx->stall_ms = r->stall_ms / n;
  mx->relocated = (double)r->relocated / n;
  mx->read_busy_ms = r->busy_ms[0] / n;
  mx->write_busy_ms = r->busy_ms[1] / n;
  mx->device_busy_ms = r->device_ms / n;
  mx->read_mib = r->io_read / n / 1048576.0;
  mx->written_mib = r->io_written / n / 1048576.0;
  mx->offload = nto_model_offload_stats(r->m, &mx->st) == 0;
  mx->plan = nto_model_mem_plan(r->m);
  mx->peak_rss = nto_peak_rss_bytes();
  measure_wear(r, mx);
}

/* The read-ahead line: what the tuner put in force. */
static void report_prefetch(const run *r, const metrics *mx) {
  const nto_tuner *t = nto_model_tuner(r->m);
  const char *p = nto_prefetch_name(nto_tuner_prefetch(t));
  if (mx->st.ahead > 0)
    printf("prefetch          by %s: reads start up to %d steps beyond "
           "the window (measured step times and read bandwidth)\n",
           p, mx->st.ahead);
  else if (nto_tuner_prefetch(t) == NTO_PREFETCH_ROOM &&
           nto_tuner_room_declined(t))
    printf("prefetch          by room: no read ahead of the window (the "
           "device had no idle time for the swap traffic it adds)\n");
  else if (nto_tuner_prefetch(t) != NTO_PREFETCH_STEPS)
    printf("prefetch          by %s: no read ahead of the window (no room "
           "for it, or no step times measured yet)\n",
           p);
  else
    printf("prefetch          by steps: step s+N's reads start at step s\n");
}

/* Offload lines of the end-of-run report. */
static void report_offload(const run *r, const metrics *mx) {
  char a[32], b[32], c[32], d[32];
  const nto_offload_stats *st = &mx->st;
  if (!mx->offload) {
    printf("window            all (every tensor resident)\n");
    return;
  }
  printf("window            %d steps%s (%s%s, swap %s%s, checksums %s)\n",
         st->window,
         !strcmp(r->window_mode, "auto")     ? ", adaptive (auto)"
         : !strcmp(r->window_mode, "budget") ? ", the largest within the "
                                               "memory budget"
                                             : "",
         st->io, st->fixed ? " with registered buffers" : "", st->swap_dir,
         st->direct ? ", O_DIRECT" : ", page cache",
         st->checksum ? "on (NTO_SWAP_CHECKSUM=1)" : "off");
  if (st->fixed_note[0])
    printf("                  buffers not registered: %s\n", st->fixed_note);
  printf("resident tensors  peak %s in a region of %s (planned peak %s) + "
         "workspace %s\n",
         nto_format_bytes(st->peak_resident, a, sizeof a),
         nto_format_bytes(st->region_max, d, sizeof d),
         nto_format_bytes(st->planned_peak, b, sizeof b),
         nto_format_bytes(mx->plan.workspace, c, sizeof c));
  if (st->region_max != st->region)
    printf("                  (the largest window's region; the final "
           "window's region is %s, its planned peak above)\n",
           nto_format_bytes(st->region, a, sizeof a));
  report_prefetch(r, mx);
  printf("stall             %.1f ms per iteration (%.1f%% of the median "
         "iteration), executor waiting for I/O (reads, or pages a write "
         "still holds)\n",
         mx->stall_ms, 100.0 * mx->stall_ms / (mx->median_ms + 1e-9));
  if (mx->relocated > 0)
    printf("                  %.1f buffers per iteration placed at their "
           "second offset: their planned pages were still being written\n",
           mx->relocated);
  printf("I/O threads       busy %.1f ms reading, %.1f ms writing per "
         "iteration; a request at the device %.1f ms\n",
         mx->read_busy_ms, mx->write_busy_ms, mx->device_busy_ms);
}

/* --window auto: N, stall and I/O busy time per iteration. Long runs
 * show the first 30 iterations, then only those where N changed. Without
 * --window-trace, one line: how N moved, and the option that lists it
 * (the list fills screens of a serial console). */
static void report_window_trace(const run *r) {
  int n = 0;
  const nto_window_sample *v =
      nto_tuner_window_trace(nto_model_tuner(r->m), &n);
  if (n == 0)
    return;
  if (!r->o.window_trace) {
    int changes = 0;
    for (int i = 1; i < n; i++)
      changes += v[i].window != v[i - 1].window;
    printf("window trace      N %d -> %d in %d change%s over %d iterations; "
           "--window-trace lists them\n",
           v[0].window, v[n - 1].window, changes, changes == 1 ? "" : "s", n);
    return;
  }
  printf("window trace      iteration: N, iteration ms, then over the part "
         "after the priming reads: stall ms (%%), busier I/O thread (%%)\n");
  int skipped = 0;
  for (int i = 0; i < n; i++) {
    if (i >= 30 && v[i].window == v[i - 1].window) {
      skipped++;
      continue;
    }
    double part = v[i].measured_ms > 0 ? v[i].measured_ms : 1;
    printf("                  %d: N=%d, %.1f ms, stall %.1f ms of %.1f "
           "(%.1f%%), I/O %.0f%%%s\n",
           i + 1, v[i].window, v[i].iteration_ms, v[i].stall_ms,
           v[i].measured_ms, 100 * v[i].stall_ms / part,
           100 * v[i].io_busy_ms /
               (v[i].iteration_ms > 0 ? v[i].iteration_ms : 1),
           v[i].judged ? ""
           : v[i].before_read_ahead
               ? " (before the read-ahead by time: not judged)"
               : " (priming: not judged)");
  }
  if (skipped)
    printf("                  (%d more iterations with N unchanged)\n",
           skipped);
}

/* The run's iterations and what was measured. */
static void report_run(const run *r, const metrics *mx, double total_s) {
  printf("iterations        %ld (batch %d, %ld samples) in %.1f s\n",
         r->n_steps, r->batch, r->n_steps * r->batch, total_s);
  if (r->it0 > 0)
    printf("resumed           from %s at iteration %ld: %ld iterations in "
           "this run\n",
           r->o.resume, r->it0, r->n_steps - r->it0);
  if (r->o.init_weights)
    printf("initial weights   %zu parameters (%d of %d tensors) from %s\n",
           r->init.params, r->init.tensors, r->init.of, r->o.init_weights);
  if (mx->from > r->it0)
    printf("measured          iterations %ld-%ld (after a warm-up of %ld)\n",
           mx->from + 1, r->n_steps, mx->from - r->it0);
  else if (r->o.warmup > 0)
    printf("measured          all %ld iterations (too few for a warm-up of "
           "%ld)\n",
           r->n_steps - r->it0, r->o.warmup);
}

/* (offloading) The flash wear: the swap file's writes per epoch, what this
 * run wrote (swap, checkpoints, weights), and their share of the device's
 * rated endurance. Before the results, which end the report. */
static void report_wear(const metrics *mx) {
  char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
  if (!mx->offload)
    return;
  printf("flash wear        %s per epoch (%ld iterations), %s by this run "
         "= %s of %g TBW; an epoch %s",
         nto_format_bytes((uint64_t)mx->written_epoch, a, sizeof a),
         mx->per_epoch, nto_format_bytes(mx->run_written, b, sizeof b),
         setup_share((double)mx->run_written / mx->endurance, c, sizeof c),
         mx->endurance / 1e12,
         setup_share(mx->written_epoch / mx->endurance, d, sizeof d));
  if (mx->written_epoch > 0)
    printf(", %.0f epochs to the rating", mx->endurance / mx->written_epoch);
  printf("\n                  this run: swap file %s",
         nto_format_bytes(mx->swap_written, e, sizeof e));
  if (mx->ckpt_written)
    printf(" + checkpoints %s",
           nto_format_bytes(mx->ckpt_written, f, sizeof f));
  if (mx->weights_written)
    printf(" + weights %s", nto_format_bytes(mx->weights_written, g, sizeof g));
  printf("; %g TBW (10^12 bytes): %s\n", mx->endurance / 1e12,
         mx->endurance_default ? "a typical 32 GB eMMC's rating, the default "
                                 "(--flash-endurance TBW)"
                               : "--flash-endurance");
}

/* What a user looks for at the end, last so that a console shows it
 * without scrolling: loss and accuracy, peak RSS, time, swap traffic. */
static void report_results(const run *r, const metrics *mx) {
  char a[32];
  printf("train             loss %.4f accuracy %.1f%% (last progress "
         "window)\n",
         r->last_loss, r->last_acc);
  if (r->before_n)
    printf("before training   loss %.4f accuracy %.2f%% (%ld test samples)\n",
           r->before_loss, r->before_acc, r->before_n);
  if (r->test_n)
    printf("test              loss %.4f accuracy %.2f%% (%ld samples)\n",
           r->test_loss, r->test_acc, r->test_n);
  printf("peak RSS          %s (kernel VmHWM)\n",
         nto_format_bytes(mx->peak_rss, a, sizeof a));
  printf("iteration time    median %.1f ms, p90 %.1f ms (%.2f it/s)\n",
         mx->median_ms, mx->p90_ms,
         mx->median_ms > 0 ? 1e3 / mx->median_ms : 0);
  if (mx->offload)
    printf("swap traffic      %.1f MiB read, %.1f MiB written per iteration "
           "(planned %.1f / %.1f)\n",
           mx->read_mib, mx->written_mib, mx->st.planned_read / 1048576.0,
           mx->st.planned_written / 1048576.0);
}

/* The run's what and how: what ran, the memory plan and the offloading;
 * the window trace; then the results. */
void report_print(const run *r, const metrics *mx, double total_s) {
  const nto_mem_plan *p = &mx->plan;
  char a[32], b[32], c[32], d[32], e[32], f[32];
  printf("\n== report: %s ==\n", r->o.model);
  report_run(r, mx, total_s);
  printf("planned tensors   %s all resident = weights %s + optimizer %s%s + "
         "activations/gradients %s + workspace %s\n",
         nto_format_bytes(p->total, b, sizeof b),
         nto_format_bytes(p->weights, c, sizeof c),
         nto_format_bytes(p->opt_state, d, sizeof d), cli_state_note(&r->c.opt),
         nto_format_bytes(p->arena, e, sizeof e),
         nto_format_bytes(p->workspace, f, sizeof f));
  if (r->budget)
    printf("memory budget     %s for the whole process (its peak RSS)\n",
           nto_format_bytes(r->budget, a, sizeof a));
  if (r->o.checkpoint)
    printf("checkpoint        %s: %d written (%.2f s in all), the last at "
           "iteration %ld\n",
           r->o.checkpoint, r->n_ckpt, r->ckpt_s, r->ckpt_it);
  report_offload(r, mx);
  report_window_trace(r);
  report_wear(mx);
  report_results(r, mx);
}

/* The JSON report's configuration: model, window, read-ahead, recompute,
 * I/O. */
static void json_config(FILE *f, const run *r, const metrics *mx) {
  const nto_offload_stats *st = &mx->st;
  const nto_tuner *t = nto_model_tuner(r->m);
  fprintf(f, "{\n  \"model\": ");
  cli_json_string(f, r->o.model);
  fprintf(f, ",\n  \"batch\": %d,\n  \"iterations\": %ld,\n", r->batch,
          r->n_steps);
  fprintf(f, "  \"warmup\": %ld,\n  \"measured_iterations\": %ld,\n", mx->from,
          mx->n);
  if (mx->offload)
    fprintf(f, "  \"window\": %d,\n", st->window);
  else
    fprintf(f, "  \"window\": \"all\",\n");
  fprintf(f, "  \"window_mode\": \"%s\",\n", r->window_mode);
  fprintf(f, "  \"blas_kernels\": ");
  cli_json_string(f, nto_blas_core());
  fprintf(f, ",\n  \"prefetch\": \"%s\",\n",
          mx->offload ? nto_prefetch_name(nto_tuner_prefetch(t)) : "none");
  fprintf(f, "  \"prefetch_ahead_steps\": %d,\n", mx->offload ? st->ahead : 0);
  fprintf(f, "  \"prefetch_room_declined\": %s,\n",
          mx->offload && nto_tuner_room_declined(t) ? "true" : "false");
  fprintf(f, "  \"recompute\": \"%s\",\n",
          r->o.recompute ? r->o.recompute : "auto");
  fprintf(f, "  \"recompute_segments\": %s,\n",
          nto_model_recompute(r->m) == NTO_RECOMPUTE_SEGMENTS ? "true"
                                                              : "false");
  fprintf(f, "  \"recomputed_convolutions\": %d,\n",
          nto_model_recomputed_convs(r->m));
  int grouped, chains = nto_model_chains(r->m, &grouped);
  fprintf(f, "  \"channel_group_chains\": %d,\n", chains);
  fprintf(f, "  \"channel_group_layers\": %d,\n", grouped);
  int seg_all, seg = nto_model_segment_convs(r->m, &seg_all);
  fprintf(f, "  \"segment_convolutions\": %d,\n", seg);
  fprintf(f, "  \"segment_candidates\": %d,\n", seg_all);
  fprintf(f, "  \"convolutions_kept\": %s,\n",
          nto_model_convs_kept(r->m) ? "true" : "false");
  fprintf(f, "  \"memory_budget_bytes\": %zu,\n", r->budget);
  fprintf(f, "  \"optimizer_state\": \"%s\",\n",
          nto_opt_state_name(r->c.opt.state_format));
  fprintf(f, "  \"io\": ");
  cli_json_string(f, mx->offload ? st->io : "none");
  fprintf(f, ",\n  \"direct\": %s,\n",
          mx->offload && st->direct ? "true" : "false");
  fprintf(f, "  \"registered_buffers\": %s,\n",
          mx->offload && st->fixed ? "true" : "false");
}

/* The JSON report's per-iteration and per-step arrays. */
static void json_arrays(FILE *f, const run *r) {
  fprintf(f, "  \"iteration_ms\": [");
  for (long i = r->it0; i < r->n_steps; i++)
    fprintf(f, "%s%.3f", i > r->it0 ? ", " : "", r->step_s[i] * 1e3);
  fprintf(f, "],\n  \"step_ms\": [");
  int S = nto_model_pass_steps(r->m, NTO_PASS_TRAIN);
  for (int s = 0; r->step_passes > 0 && s < S; s++)
    fprintf(f, "%s%.4f", s ? ", " : "", r->step_ms[s] / r->step_passes);
  fprintf(f, "],\n  \"window_trace\": [");
  int nw = 0;
  const nto_window_sample *v =
      nto_tuner_window_trace(nto_model_tuner(r->m), &nw);
  for (int i = 0; i < nw; i++)
    fprintf(f,
            "%s\n    {\"iteration\": %d, \"window\": %d, "
            "\"iteration_ms\": %.3f, \"measured_ms\": %.3f, "
            "\"stall_ms\": %.3f, \"io_busy_ms\": %.3f, "
            "\"device_ms\": %.3f, \"judged\": %s, "
            "\"before_read_ahead\": %s}",
            i ? "," : "", i + 1, v[i].window, v[i].iteration_ms,
            v[i].measured_ms, v[i].stall_ms, v[i].io_busy_ms, v[i].device_ms,
            v[i].judged ? "true" : "false",
            v[i].before_read_ahead ? "true" : "false");
  fprintf(f, "%s]\n}\n", nw ? "\n  " : "");
}

int report_json(const run *r, const metrics *mx, double total_s, nto_err *err) {
  FILE *f = fopen(r->o.report_json, "w");
  if (!f)
    return nto_err_set(err, NTO_EIO, "--report-json: cannot open %s: %s",
                       r->o.report_json, strerror(errno));
  const nto_offload_stats *st = &mx->st;
  size_t resident =
      mx->offload ? st->peak_resident : mx->plan.total - mx->plan.workspace;
  json_config(f, r, mx);
  fprintf(f, "  \"total_s\": %.3f,\n", total_s);
  fprintf(f, "  \"peak_rss_bytes\": %zu,\n", mx->peak_rss);
  fprintf(f, "  \"resident_peak_bytes\": %zu,\n", resident);
  fprintf(f, "  \"region_bytes\": %zu,\n",
          mx->offload ? st->region_max : resident);
  fprintf(f, "  \"final_region_bytes\": %zu,\n",
          mx->offload ? st->region : resident);
  fprintf(f, "  \"workspace_bytes\": %zu,\n", mx->plan.workspace);
  fprintf(f, "  \"all_resident_bytes\": %zu,\n", mx->plan.total);
  fprintf(f, "  \"iteration_ms_median\": %.3f,\n", mx->median_ms);
  fprintf(f, "  \"iteration_ms_p90\": %.3f,\n", mx->p90_ms);
  fprintf(f, "  \"stall_ms_per_iteration\": %.3f,\n", mx->stall_ms);
  fprintf(f, "  \"relocated_per_iteration\": %.3f,\n", mx->relocated);
  fprintf(f, "  \"read_busy_ms_per_iteration\": %.3f,\n", mx->read_busy_ms);
  fprintf(f, "  \"write_busy_ms_per_iteration\": %.3f,\n", mx->write_busy_ms);
  fprintf(f, "  \"device_busy_ms_per_iteration\": %.3f,\n", mx->device_busy_ms);
  fprintf(f, "  \"read_mib_per_iteration\": %.3f,\n", mx->read_mib);
  fprintf(f, "  \"written_mib_per_iteration\": %.3f,\n", mx->written_mib);
  fprintf(f, "  \"planned_read_mib_per_iteration\": %.3f,\n",
          mx->offload ? st->planned_read / 1048576.0 : 0.0);
  fprintf(f, "  \"planned_written_mib_per_iteration\": %.3f,\n",
          mx->offload ? st->planned_written / 1048576.0 : 0.0);
  fprintf(f, "  \"iterations_per_epoch\": %ld,\n", mx->per_epoch);
  fprintf(f, "  \"written_bytes_per_iteration\": %.3f,\n",
          mx->written_iteration);
  fprintf(f, "  \"written_bytes_per_epoch\": %.3f,\n", mx->written_epoch);
  fprintf(f, "  \"swap_written_bytes\": %llu,\n",
          (unsigned long long)mx->swap_written);
  fprintf(f, "  \"checkpoint_written_bytes\": %llu,\n",
          (unsigned long long)mx->ckpt_written);
  fprintf(f, "  \"weights_written_bytes\": %llu,\n",
          (unsigned long long)mx->weights_written);
  fprintf(f, "  \"run_written_bytes\": %llu,\n",
          (unsigned long long)mx->run_written);
  fprintf(f, "  \"flash_endurance_tbw\": %.9g,\n", mx->endurance / 1e12);
  fprintf(f, "  \"flash_endurance_default\": %s,\n",
          mx->endurance_default ? "true" : "false");
  fprintf(f, "  \"run_endurance_fraction\": %.9g,\n",
          (double)mx->run_written / mx->endurance);
  fprintf(f, "  \"epoch_endurance_fraction\": %.9g,\n",
          mx->written_epoch / mx->endurance);
  fprintf(f, "  \"resumed_at_iteration\": %ld,\n", r->it0);
  fprintf(f, "  \"init_weights_loaded_parameters\": %zu,\n", r->init.params);
  fprintf(f, "  \"train_loss\": %.6f,\n", r->last_loss);
  fprintf(f, "  \"train_accuracy\": %.6f,\n", r->last_acc / 100.0);
  fprintf(f, "  \"test_iteration\": %ld,\n", r->test_it);
  fprintf(f, "  \"test_samples\": %ld,\n", r->test_n);
  fprintf(f, "  \"test_loss\": %.6f,\n", r->test_loss);
  fprintf(f, "  \"test_accuracy\": %.6f,\n", r->test_acc / 100.0);
  fprintf(f, "  \"test_samples_before\": %ld,\n", r->before_n);
  fprintf(f, "  \"test_accuracy_before\": %.6f,\n", r->before_acc / 100.0);
  json_arrays(f, r);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return nto_err_set(err, NTO_EIO, "--report-json: cannot write %s",
                       r->o.report_json);
  return 0;
}

/*
 * report.h - the end of a `train` run: its figures over the measured
 * iterations (after --warmup), the report on stdout, and --report-json.
 * Main thread only.
 */
#ifndef NTO_APP_REPORT_H
#define NTO_APP_REPORT_H

#include "run.h"

/* The report's figures, over the measured iterations. */
typedef struct metrics {
  long from, n; /* measured iterations [from, from + n) */
  double median_ms, p90_ms;
  double stall_ms, read_mib, written_mib; /* per measured iteration */
  double read_busy_ms, write_busy_ms;     /* the same */
  double device_busy_ms;                  /* the same */
  double relocated;                       /* the same: buffers placed at
                                             their second offset */
  int offload;                            /* 0: all resident, st unset */
  nto_offload_stats st;
  nto_mem_plan plan;
  size_t peak_rss; /* bytes, the kernel's VmHWM */
  /* Flash wear: bytes written. Per iteration and per epoch: the swap
   * file's; this run: also the checkpoints and the weights saved. */
  long per_epoch;           /* iterations in an epoch (full batches) */
  double written_iteration; /* swap, per measured iteration */
  double written_epoch;     /* written_iteration x per_epoch */
  uint64_t swap_written;    /* swap, by this process: every iteration
                               (warm-up too), the first stores of the
                               weights, evaluations */
  uint64_t ckpt_written;    /* checkpoints written x the file's size */
  uint64_t weights_written; /* the .bin and .safetensors saved */
  uint64_t run_written;     /* the three summed */
  double endurance;         /* bytes: TBW x 10^12 (--flash-endurance) */
  int endurance_default;    /* no --flash-endurance: SETUP_FLASH_TBW */
} metrics;

/* The figures of run r (after its loop, the final checkpoint and the
 * save: the wear counts their files' sizes). */
void report_measure(const run *r, metrics *mx);

/* The report on stdout; total_s: the run's wall time. */
void report_print(const run *r, const metrics *mx, double total_s);

/* --report-json: the report's figures in bytes and ms, for `bench` and
 * scripts (schema in docs/cli.md). Returns 0, or NTO_EIO naming the
 * file. */
int report_json(const run *r, const metrics *mx, double total_s, nto_err *err);

#endif

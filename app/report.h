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
} metrics;

/* The figures of run r (after its loop). */
void report_measure(const run *r, metrics *mx);

/* The report on stdout; total_s: the run's wall time. */
void report_print(const run *r, const metrics *mx, double total_s);

/* --report-json: the report's figures in bytes and ms, for `bench` and
 * scripts (schema in docs/cli.md). Returns 0, or NTO_EIO naming the
 * file. */
int report_json(const run *r, const metrics *mx, double total_s, nto_err *err);

#endif

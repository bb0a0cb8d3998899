/*
 * outputs.h - the files a `train` run writes: every output checked before
 * any work (writable, no device or FIFO a save would replace, no input or
 * other output), the checkpoint locked for the run, stale temp files of
 * ended runs removed; the weights saved where --save or Save_Path says,
 * or rescued next to the checkpoint or into the swap directory; and the
 * stop signals (SIGINT, SIGTERM, SIGHUP: stop after the iteration; a
 * second one aborts, removing the temp files of saves and the lock).
 * Main thread only, except the signal handler.
 */
#ifndef NTO_APP_OUTPUTS_H
#define NTO_APP_OUTPUTS_H

#include "run.h"

/* Installs the stop signals' handler (and ignores SIGXFSZ: a write past
 * ulimit -f then fails with EFBIG, reported like other I/O errors). */
void outputs_install_signals(void);

/* The stop signal received (SIGINT, SIGTERM, SIGHUP), 0: none. */
int outputs_stop_signal(void);

/* "SIGINT", "SIGTERM" or "SIGHUP". */
const char *outputs_signal_name(int sig);

/* Before any work, after the config is loaded: the checks above, the
 * lock, the stale temp files. Returns 0, or -1 after printing why (a
 * usage error). */
int outputs_check(run *r);

/* Where the weights go: --save, else the INI's Save_Path; NULL: not
 * saved. */
const char *outputs_save_path(const run *r);

/* The weights to outputs_save_path (nntrainer .bin in nntrainer's layer
 * order, and the safetensors twin with the class names), nothing when
 * there is none; when that fails, rescued, and err says where. Returns 0
 * or the save's error. */
int outputs_save(run *r, nto_err *err);

/* The weights to the INI's save_best_path (as outputs_save, without its
 * rescue), nothing when there is none. Returns 0 or the save's error. */
int outputs_save_best(run *r, nto_err *err);

/* evaluate and predict: their JSON output (r->o.report_json, option what,
 * e.g. "--json"), checked before any work as train checks its outputs:
 * writable in place, and not the model file, --weights or one of
 * inputs[0..n_inputs). Returns 0 (also when there is none), or -1 after
 * printing why (a usage error). */
int outputs_check_report(const run *r, const char *what,
                         const char *const *inputs, int n_inputs);

/* At the end of the run: the lock released, nothing left for a signal
 * to remove. */
void outputs_release(void);

#endif

/*
 * outputs.c - the files a train run writes (outputs.h): checked before any
 * work, the weights saved (rescued elsewhere when that fails), the
 * checkpoint's lock, and the stop signals, whose second one removes what
 * a save may have half-written.
 */
#include "outputs.h"

#include "cli.h"
#include "fileio.h"
#include "setup.h"
#include "weights.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The signal that asks the run to stop (SIGINT, SIGTERM, SIGHUP), 0:
 * none. Set by the handler; the loop checks it between iterations. */
static volatile sig_atomic_t stop_signal;

int outputs_stop_signal(void) { return stop_signal; }

/* What a second stop signal removes before it exits: the temp files the
 * run's saves write ("<file>.tmp.<pid>", only ever ours), and the
 * checkpoint's lock file below. Filled by check_outputs before training. */
#define ABORT_PATHS                                                            \
  5 /* the weights, save_best_path, their safetensors,                         \
        the checkpoint */
static char abort_path[ABORT_PATHS][NTO_PATH_BYTES];
static volatile sig_atomic_t n_abort_paths;
static volatile sig_atomic_t out_tty; /* stdout is a terminal */

/* The checkpoint's lock (nto_file_lock), held for the run; -1: none. */
static char lock_path[NTO_PATH_BYTES];
static volatile sig_atomic_t lock_fd = -1;

const char *outputs_signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* Async-signal-safe: write(2) only. */
static void say(const char *s) {
  if (write(STDERR_FILENO, s, strlen(s)) < 0)
    return; /* a terminal that hung up: nothing to tell */
}

/* The first stop signal asks the loop to stop after the iteration; a
 * second one (Ctrl-C again) aborts at once, removing the temp file a save
 * may be writing so that nothing half-written is left; the last complete
 * checkpoint stays as it was. The swap file has no name. */
static void on_stop_signal(int sig) {
  if (stop_signal) {
    for (int i = 0; i < n_abort_paths; i++)
      unlink(abort_path[i]);
    if (lock_fd >= 0) /* held: removing it is ours to do */
      unlink(lock_path);
    say("nntrainer-offload: ");
    say(outputs_signal_name(sig));
    say(" again: aborted\n");
    _exit(128 + sig);
  }
  stop_signal = sig;
  say(out_tty ? "\nnntrainer-offload: " : "nntrainer-offload: ");
  if (sig == SIGINT) {
    say("stopping after this iteration (Ctrl-C again to abort)\n");
  } else {
    say(outputs_signal_name(sig));
    say(": stopping after this iteration (a second signal aborts)\n");
  }
}

/* SIGHUP (an ssh session that ends) stops like SIGTERM. SIGXFSZ (beyond
 * ulimit -f) is ignored so that the write fails with EFBIG and is
 * reported like any other write error instead of killing the run.
 * SIGPIPE is ignored: when stdout is a pipe whose reader went away (`|
 * tee log` in an ssh session that ended), printing fails with EPIPE and
 * the run goes on to its checkpoint and saves instead of dying. Each
 * handler blocks the other stop signals, so a second one waits for the
 * first to finish. The offload engine's I/O threads block all signals. */
void outputs_install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGHUP);
  sa.sa_flags = SA_RESTART;
  out_tty = isatty(STDOUT_FILENO);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGXFSZ, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
}

/* The training data's class names, one per line, in label order
 * (malloc'ed), or NULL when it has none (IDX, raw, synthetic) or they
 * would not read back as lines. */
static char *class_names(const run *r) {
  size_t len = 1;
  for (int c = 0; c < r->k; c++) {
    const char *n = nto_dataset_class_name(r->train, c);
    if (!n || strchr(n, '\n'))
      return NULL;
    len += strlen(n) + 1;
  }
  char *s = malloc(len), *p = s;
  for (int c = 0; s && c < r->k; c++)
    p += sprintf(p, "%s%s", c ? "\n" : "", nto_dataset_class_name(r->train, c));
  return s;
}

/* Where the weights go: --save, else the INI's Save_Path; NULL: not
 * saved. */
const char *outputs_save_path(const run *r) {
  const char *path = r->o.save ? r->o.save : r->c.model.save_path;
  return path && path[0] ? path : NULL;
}

/* Does a weights path name a safetensors file (by its extension)? */
static int is_st(const char *path) {
  size_t n = strlen(path);
  return n > 12 && !strcmp(path + n - 12, ".safetensors");
}

/* The twin of a weights path, in the other format: for X.safetensors the
 * nntrainer .bin X.bin; else the safetensors file, .bin replaced, else
 * added. */
static void st_path(const char *path, char *st, size_t len) {
  size_t n = strlen(path);
  if (is_st(path))
    snprintf(st, len, "%.*s.bin", (int)(n - 12), path);
  else if (n > 4 && !strcmp(path + n - 4, ".bin"))
    snprintf(st, len, "%.*s.safetensors", (int)(n - 4), path);
  else
    snprintf(st, len, "%s.safetensors", path);
}

/* The weights to path and its twin (st_path): nntrainer .bin and
 * safetensors, whichever path names. */
static int save_to(run *r, const char *path, nto_err *err) {
  nto_named_tensor *ts = NULL;
  int n = 0;
  int rc = nto_model_weights(r->m, &ts, &n, err);
  char twin[NTO_PATH_BYTES];
  st_path(path, twin, sizeof twin);
  const char *st = is_st(path) ? path : twin, *bin = is_st(path) ? twin : path;
  char iters[32];
  snprintf(iters, sizeof iters, "%ld", nto_model_iteration(r->m));
  char *names = class_names(r);
  const char *meta[] = {"format",
                        "nntrainer-offload",
                        "model",
                        r->o.model,
                        "iteration",
                        iters,
                        "fully_connected_weight_layout",
                        "in,unit",
                        names ? "class_names" : NULL,
                        names,
                        r->o.classes ? "classes" : NULL,
                        r->o.classes,
                        NULL};
  if (!names) /* the optional pairs, packed */
    memmove(&meta[8], &meta[10], 3 * sizeof *meta);
  nto_named_tensor *tb = NULL; /* the same in nntrainer's layer order */
  int nb = 0;
  if (rc == 0)
    rc = nto_model_weights_bin(r->m, &tb, &nb, err);
  if (rc == 0)
    rc = nto_weights_save_bin(bin, tb, nb, err);
  nto_model_weights_free(tb, nb);
  if (rc == 0)
    rc = nto_safetensors_save(st, ts, n, meta, err);
  if (rc == 0)
    printf("saved weights     %s (nntrainer layout) and %s\n", bin, st);
  nto_model_weights_free(ts, n);
  free(names);
  return rc;
}

/* The save to path failed (err) although path was checked at the start
 * (the directory went away, the disk filled up): the trained weights
 * still go somewhere, "NAME-rescued-PID.bin" next to the checkpoint or
 * else in the swap directory, and err's message says where. */
static void rescue(run *r, const char *path, nto_err *err) {
  char dirs[2][NTO_PATH_BYTES], alt[NTO_PATH_BYTES];
  int nd = 0;
  if (r->o.checkpoint &&
      nto_file_resolve(r->o.checkpoint, dirs[nd], sizeof dirs[nd], NULL) == 0) {
    char *slash = strrchr(dirs[nd], '/');
    if (!slash)
      snprintf(dirs[nd], sizeof dirs[nd], ".");
    else if (slash == dirs[nd])
      slash[1] = '\0'; /* "/ck": the root */
    else
      *slash = '\0';
    nd++;
  }
  setup_swap sw; /* the run's swap directory; set also when refused */
  setup_swap_dir(r->o.swap_dir, r->c.model.swap_path, r->o.model,
                 r->o.allow_ram_swap, &sw, NULL);
  snprintf(dirs[nd++], sizeof dirs[0], "%s", sw.dir);
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  size_t len = strlen(base);
  if (len > 4 && !strcmp(base + len - 4, ".bin"))
    len -= 4;
  char msg[NTO_ERR_MSG_MAX];
  snprintf(msg, sizeof msg, "%s", err->msg);
  for (int i = 0; i < nd; i++) {
    nto_err e2 = {0};
    int n = snprintf(alt, sizeof alt, "%s/%.*s-rescued-%ld.bin", dirs[i],
                     (int)len, base, (long)getpid());
    if (n > 0 && (size_t)n < sizeof alt && save_to(r, alt, &e2) == 0) {
      nto_err_set(err, err->code, "%s; the weights are saved to %s instead",
                  msg, alt);
      return;
    }
  }
  nto_err_set(err, err->code, "%s; saving them into %s%s%s failed too", msg,
              dirs[0], nd > 1 ? " and " : "", nd > 1 ? dirs[1] : "");
}

/* The weights where --save or Save_Path says (nothing when neither is
 * given); when that fails, rescue(). Returns 0 or the save's error. */
int outputs_save(run *r, nto_err *err) {
  const char *path = outputs_save_path(r);
  if (!path)
    return 0;
  int rc = save_to(r, path, err);
  if (rc != 0 && rc != NTO_ENOMEM)
    rescue(r, path, err);
  return rc;
}

/* The weights of the best epoch so far to the INI's save_best_path (and
 * its twin), as outputs_save writes them, without the rescue: the run
 * goes on, and the last save still comes. Returns 0 or the save's
 * error. */
int outputs_save_best(run *r, nto_err *err) {
  const char *path = r->c.model.save_best_path;
  return path[0] ? save_to(r, path, err) : 0;
}

/* The most files a run writes: --save and its twin, save_best_path and
 * its twin, --checkpoint, --report-json, --trace, --log-csv. */
#define OUTPUTS 8

/* A file the run writes or reads, as the checks of check_outputs see
 * it. */
typedef struct file_use {
  const char *what; /* the option, for messages: "--save" */
  const char *path;
  int kind; /* nto_file_write_kind; -1: only compared (--trace, inputs) */
  nto_file_id id;
} file_use;

static file_use use_of(const char *what, const char *path, int kind) {
  return (file_use){.what = what, .path = path, .kind = kind};
}

/* Room for the names file_uses makes: the safetensors twin's path, and
 * what the weights' two outputs are called. */
typedef struct use_names {
  char st[NTO_PATH_BYTES];
  char save_what[NTO_CONF_STR + 64];
  char st_what[NTO_CONF_STR + 96];
  char best_st[NTO_PATH_BYTES];
  char best_what[NTO_CONF_STR + 64];
  char best_st_what[NTO_CONF_STR + 96];
} use_names;

/* A weights output (what, path) and its twin (st_path into twin, of
 * NTO_PATH_BYTES; named in twin_what[len]) appended to out[] after no
 * entries; the new count. */
static int weights_uses(file_use *out, int no, const char *path,
                        const char *what, char *twin_what, size_t len,
                        char *twin) {
  snprintf(twin_what, len, "%s (its %s twin)", what,
           is_st(path) ? "nntrainer .bin" : "safetensors");
  st_path(path, twin, NTO_PATH_BYTES);
  out[no++] = use_of(what, path, NTO_WRITE_RENAME);
  out[no++] = use_of(twin_what, twin, NTO_WRITE_RENAME);
  return no;
}

/* The outputs of the run into out[] (at most OUTPUTS), its inputs into in[]
 * (at most 3); their counts. */
static void file_uses(const run *r, file_use *out, int *n_out, file_use *in,
                      int *n_in, use_names *nm) {
  int no = 0, ni = 0;
  const char *save = outputs_save_path(r);
  if (save) {
    if (r->o.save)
      snprintf(nm->save_what, sizeof nm->save_what, "--save");
    else
      snprintf(nm->save_what, sizeof nm->save_what,
               "%s: [model] key 'save_path'", r->o.model);
    no = weights_uses(out, no, save, nm->save_what, nm->st_what,
                      sizeof nm->st_what, nm->st);
  }
  const char *best = r->c.model.save_best_path;
  if (best[0]) {
    snprintf(nm->best_what, sizeof nm->best_what,
             "%s: [model] key 'save_best_path'", r->o.model);
    no = weights_uses(out, no, best, nm->best_what, nm->best_st_what,
                      sizeof nm->best_st_what, nm->best_st);
  }
  if (r->o.checkpoint)
    out[no++] = use_of("--checkpoint", r->o.checkpoint, NTO_WRITE_RENAME);
  if (r->o.report_json)
    out[no++] = use_of("--report-json", r->o.report_json, NTO_WRITE_IN_PLACE);
  if (r->o.trace)
    out[no++] = use_of("--trace", r->o.trace, -1);
  if (r->o.log_csv) /* written row by row: in place, as a FIFO may be */
    out[no++] = use_of("--log-csv", r->o.log_csv, NTO_WRITE_IN_PLACE);
  in[ni++] = use_of("the model file", r->o.model, -1);
  if (r->o.resume)
    in[ni++] = use_of("--resume", r->o.resume, -1);
  if (r->o.init_weights)
    in[ni++] = use_of("--init-weights", r->o.init_weights, -1);
  for (int i = 0; i < no; i++)
    nto_file_identify(out[i].path, &out[i].id);
  for (int i = 0; i < ni; i++)
    nto_file_identify(in[i].path, &in[i].id);
  *n_out = no;
  *n_in = ni;
}

/* No output is an input or another output (--checkpoint may be the
 * --resume file: the run continues it). Returns 0, or -1 after printing
 * which two. */
static int distinct_files(const file_use *out, int no, const file_use *in,
                          int ni) {
  for (int i = 0; i < no; i++) {
    for (int j = 0; j < ni; j++)
      if (nto_file_same(&out[i].id, &in[j].id) &&
          !(!strcmp(out[i].what, "--checkpoint") &&
            !strcmp(in[j].what, "--resume"))) {
        cli_error("%s %s is %s %s: it would be overwritten; write the "
                  "output elsewhere",
                  out[i].what, out[i].path, in[j].what, in[j].path);
        return -1;
      }
    for (int j = i + 1; j < no; j++)
      if (nto_file_same(&out[i].id, &out[j].id)) {
        cli_error("%s %s and %s %s are the same file: give each output a "
                  "path of its own",
                  out[i].what, out[i].path, out[j].what, out[j].path);
        return -1;
      }
  }
  return 0;
}

/* The name a save of path writes first (nto_file_save) into the list a
 * second signal removes. */
static void abort_on(const char *path) {
  char file[NTO_PATH_BYTES], suffix[32];
  if (n_abort_paths >= ABORT_PATHS ||
      nto_file_resolve(path, file, sizeof file, NULL) != 0)
    return;
  int n = snprintf(abort_path[n_abort_paths], NTO_PATH_BYTES, "%s%s", file,
                   nto_file_tmp_suffix(suffix, sizeof suffix));
  if (n > 0 && n < NTO_PATH_BYTES)
    n_abort_paths++; /* after the name is complete: the handler reads it */
}

/*
 * Before any work: every output can be written (a run is not lost at its
 * end to a missing directory or a read-only file system), is no device,
 * FIFO or socket that a save would replace, and is not an input or
 * another output; --checkpoint is locked for the run (one checkpoint,
 * one writer) and temp files that crashed runs left next to the outputs
 * are removed. Returns 0, or -1 after printing why (a usage error).
 */
int outputs_check(run *r) {
  /* main thread only; static: 8 identities of 4 KiB paths would take most
   * of a 64 KiB stack (ulimit -s 64) */
  static file_use out[OUTPUTS], in[3];
  static use_names nm;
  int no, ni, fd = -1;
  nto_err err = {0};
  file_uses(r, out, &no, in, &ni, &nm);
  for (int i = 0; i < no; i++)
    if (out[i].kind >= 0 &&
        nto_file_check_output(out[i].path, out[i].kind, &err) != 0) {
      cli_error("%s: %s", out[i].what, err.msg);
      return -1;
    }
  if (distinct_files(out, no, in, ni) != 0)
    return -1;
  int rc = r->o.checkpoint ? nto_file_lock(r->o.checkpoint, &fd, lock_path,
                                           sizeof lock_path, &err)
                           : 0;
  if (rc == NTO_EUNSUPPORTED) { /* the checkpoint still works */
    printf("note: --checkpoint: %s: a second run on it is not refused\n",
           err.msg);
  } else if (rc != 0) {
    cli_error("--checkpoint: %s: one checkpoint file takes one run at a time",
              err.msg);
    return -1;
  }
  lock_fd = fd;
  for (int i = 0; i < no; i++) {
    if (out[i].kind != NTO_WRITE_RENAME)
      continue;
    /* FILE.tmp: the temp name of earlier versions' checkpoints */
    int legacy = !strcmp(out[i].what, "--checkpoint");
    int k = nto_file_remove_stale(out[i].path, legacy);
    if (k > 0)
      printf("note: removed %d stale temp file%s next to %s (left by runs "
             "that ended without cleaning up)\n",
             k, k > 1 ? "s" : "", out[i].path);
    abort_on(out[i].path);
  }
  return 0;
}

int outputs_check_report(const run *r, const char *what,
                         const char *const *inputs, int n_inputs) {
  const char *path = r->o.report_json;
  nto_err err = {0};
  if (!path)
    return 0;
  if (nto_file_check_output(path, NTO_WRITE_IN_PLACE, &err) != 0) {
    cli_error("%s: %s", what, err.msg);
    return -1;
  }
  static nto_file_id out, in; /* 4 KiB paths: off the stack */
  nto_file_identify(path, &out);
  for (int i = -2; i < n_inputs; i++) {
    const char *p = i == -2 ? r->o.model : i == -1 ? r->o.weights : inputs[i];
    if (!p)
      continue;
    nto_file_identify(p, &in);
    if (nto_file_same(&out, &in)) {
      cli_error("%s %s is %s %s: it would be overwritten; write the output "
                "elsewhere",
                what, path,
                i == -2   ? "the model file"
                : i == -1 ? "--weights"
                          : "an input",
                p);
      return -1;
    }
  }
  return 0;
}

void outputs_release(void) {
  int fd = lock_fd;
  lock_fd = -1; /* first: a signal from now on leaves the lock file alone */
  n_abort_paths = 0;
  nto_file_unlock(fd, lock_path);
}

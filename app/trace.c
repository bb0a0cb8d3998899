/* trace.c - `train --trace`. See trace.h.
 *
 * One object per event in "traceEvents"; ts and dur in microseconds from
 * the start of the run. Tracks (tid): 1 executor (steps, and the waits for
 * their reads), 2 onloader (reads), 3 offloader (writes), 4 step state
 * changes (instant events). Perfetto does not need them sorted. */
#include "trace.h"
#include "cli.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TID_EXEC = 1, TID_ONLOAD, TID_OFFLOAD, TID_STATES };

struct trace {
  FILE *f;
  const char *path;
  pthread_mutex_t mu;  /* events come from three threads */
  int events;          /* written so far */
  double t0;           /* ms, CLOCK_MONOTONIC: ts 0 of the trace */
  nto_model *const *m; /* names of steps and tensors */
};

static double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Start an event object (lock held). */
static void event(trace *t) { fputs(t->events++ ? ",\n" : "\n", t->f); }

static void span(trace *t, int tid, const char *name, const char *cat,
                 double t0_ms, double t1_ms, const char *args) {
  pthread_mutex_lock(&t->mu);
  event(t);
  fprintf(t->f, "{\"name\":");
  cli_json_string(t->f, name);
  fprintf(t->f,
          ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.1f,"
          "\"dur\":%.1f%s%s}",
          cat, tid, (t0_ms - t->t0) * 1e3, (t1_ms - t0_ms) * 1e3,
          args ? ",\"args\":" : "", args ? args : "");
  pthread_mutex_unlock(&t->mu);
}

static void on_step(void *user, int pass, int s, double t_begin, double t_ready,
                    double t_end) {
  trace *t = user;
  char name[NTO_NAME_MAX + 24], wait[NTO_NAME_MAX + 32];
  nto_model_step_name(*t->m, pass, s, name, sizeof name);
  if (t_ready - t_begin >= 0.02) { /* the executor really waited */
    snprintf(wait, sizeof wait, "wait %s", name);
    span(t, TID_EXEC, wait, "stall", t_begin, t_ready, NULL);
  }
  span(t, TID_EXEC, name, pass == NTO_PASS_TRAIN ? "train" : "eval", t_ready,
       t_end, NULL);
}

static void on_io(void *user, nto_trace_kind kind, int id, double t0,
                  double t1) {
  trace *t = user;
  const nto_tensor *d = nto_model_tensor(*t->m, id);
  char args[64];
  snprintf(args, sizeof args, "{\"bytes\":%zu}", d->bytes);
  span(t, kind == NTO_TRACE_READ ? TID_ONLOAD : TID_OFFLOAD, d->name,
       kind == NTO_TRACE_READ ? "read" : "write", t0, t1, args);
}

/* A step state change (engine lock held: short). */
static void on_state(void *user, int pass, int step, nto_step_state from,
                     nto_step_state to) {
  trace *t = user;
  char name[NTO_NAME_MAX + 16];
  nto_model_step_name(*t->m, pass, step, name, sizeof name);
  double now = mono_ms();
  pthread_mutex_lock(&t->mu);
  event(t);
  fprintf(t->f,
          "{\"name\":\"%s -> %s\",\"cat\":\"state\",\"ph\":\"i\","
          "\"s\":\"t\",\"pid\":1,\"tid\":%d,\"ts\":%.1f,"
          "\"args\":{\"pass\":\"%s\",\"step\":",
          nto_step_state_name(from), nto_step_state_name(to), TID_STATES,
          (now - t->t0) * 1e3, pass == NTO_PASS_TRAIN ? "train" : "eval");
  cli_json_string(t->f, name);
  fputs("}}", t->f);
  pthread_mutex_unlock(&t->mu);
}

int trace_open(trace **out, const char *path, nto_err *err) {
  *out = NULL;
  trace *t = calloc(1, sizeof *t);
  if (!t)
    return nto_err_set(err, NTO_ENOMEM, "out of memory");
  t->f = fopen(path, "w");
  if (!t->f) {
    free(t);
    return nto_err_set(err, NTO_EIO, "--trace: cannot open %s: %s", path,
                       strerror(errno));
  }
  t->path = path;
  pthread_mutex_init(&t->mu, NULL);
  t->t0 = mono_ms();
  static const char *const names[] = {"executor", "onloader", "offloader",
                                      "step states"};
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", t->f);
  for (int i = 0; i < 4; i++) {
    event(t);
    fprintf(t->f,
            "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,"
            "\"args\":{\"name\":\"%s\"}}",
            i + 1, names[i]);
  }
  *out = t;
  return 0;
}

void trace_hooks(trace *t, nto_model *const *m, nto_model_opts *mo) {
  t->m = m;
  mo->offload.log_state = on_state;
  mo->offload.log_user = t;
  mo->offload.trace = on_io;
  mo->offload.trace_user = t;
  mo->step_trace = on_step;
  mo->step_trace_user = t;
}

int trace_close(trace *t, nto_err *err) {
  if (!t)
    return 0;
  fputs("\n]}\n", t->f);
  int bad = ferror(t->f);
  bad |= fclose(t->f) != 0;
  pthread_mutex_destroy(&t->mu);
  const char *path = t->path;
  free(t);
  return bad ? nto_err_set(err, NTO_EIO, "--trace: cannot write %s", path) : 0;
}

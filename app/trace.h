/*
 * trace.h - `train --trace FILE.json`: a Chrome trace-event file
 * (Perfetto, chrome://tracing) of the executor's steps and its waits for
 * reads, the onloader's reads, the offloader's writes and every step state
 * change (offload.h), each on a track of its own.
 *
 * Events come from three threads (the executor and the two I/O threads):
 * the trace's own mutex orders them in the file. Open, hook and close on
 * the main thread; the hooks run on whichever thread reports.
 */
#ifndef NTO_APP_TRACE_H
#define NTO_APP_TRACE_H

#include "model.h"

typedef struct trace trace;

/* Create path and write the header. Returns 0, or NTO_EIO naming the
 * option and the file; *out is NULL then. */
int trace_open(trace **out, const char *path, nto_err *err);

/* Point the model options' hooks (steps, reads and writes, state
 * changes) at t. Step and tensor names come from *m once the model
 * exists (the hooks only run after nto_model_create). */
void trace_hooks(trace *t, nto_model *const *m, nto_model_opts *mo);

/* Close the event list and the file (t may be NULL): after the model is
 * freed, whose last writes still go to the trace. Returns 0, or NTO_EIO
 * when the file could not be written. */
int trace_close(trace *t, nto_err *err);

#endif

/*
 * error.h - status codes and error messages of nntrainer-offload.
 *
 * Every core function returns 0 on success or a negative nto_status, and,
 * when given a non-NULL nto_err, fills it with a one-line human message.
 * The core never prints and never exits; app/ decides what to do.
 */
#ifndef NTO_ERROR_H
#define NTO_ERROR_H

#include <stddef.h>

/* X-macro table: name, value, default text. */
#define NTO_STATUS_TABLE(X)                                                   \
  X(NTO_OK, 0, "ok")                                                          \
  X(NTO_ENOMEM, -1, "out of memory")                                          \
  X(NTO_EINVAL, -2, "invalid argument")                                       \
  X(NTO_ECONFIG, -3, "invalid model configuration")                          \
  X(NTO_ENOKEY, -4, "unknown key")                                            \
  X(NTO_EIO, -5, "input/output error")                                        \
  X(NTO_EDATA, -6, "invalid data file")                                       \
  X(NTO_ESHAPE, -7, "shape mismatch")                                         \
  X(NTO_EUNSUPPORTED, -8, "unsupported")                                      \
  X(NTO_ENUMERIC, -9, "numerical error")

typedef enum {
#define NTO_X_ENUM(name, value, text) name = value,
  NTO_STATUS_TABLE(NTO_X_ENUM)
#undef NTO_X_ENUM
} nto_status;

#define NTO_ERR_MSG_MAX 512

/* Error report filled by failing functions. msg is NUL-terminated. */
typedef struct nto_err {
  int code;                 /* the nto_status returned */
  char msg[NTO_ERR_MSG_MAX]; /* one line, no trailing newline */
} nto_err;

/* Default text of a status code; never NULL. Any thread. */
const char *nto_strerror(int code);

/*
 * Record an error: sets err->code = code and formats msg (printf style).
 * err may be NULL (then nothing is recorded). Returns code, so callers can
 * write `return nto_err_set(err, NTO_ECONFIG, "...")`. Any thread.
 */
int nto_err_set(nto_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Prefix an already recorded message: msg becomes "<prefix><old msg>".
 * Used by outer layers to add file/section context. Returns err->code
 * (or code if err is NULL). Any thread.
 */
int nto_err_prefix(nto_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clear an error report (code 0, empty message). err may be NULL. */
void nto_err_clear(nto_err *err);

#endif /* NTO_ERROR_H */

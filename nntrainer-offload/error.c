/* error.c - status codes and error messages. See error.h. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *nto_strerror(int code) {
  switch (code) {
#define NTO_X_CASE(name, value, text)                                         \
  case value:                                                                 \
    return text;
    NTO_STATUS_TABLE(NTO_X_CASE)
#undef NTO_X_CASE
  default:
    return "unknown error";
  }
}

int nto_err_set(nto_err *err, int code, const char *fmt, ...) {
  if (err == NULL)
    return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return code;
}

int nto_err_prefix(nto_err *err, int code, const char *fmt, ...) {
  if (err == NULL)
    return code;
  char prefix[NTO_ERR_MSG_MAX];
  char old[NTO_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  if (err->code == 0)
    err->code = code;
  size_t n = strlen(prefix);
  if (n >= sizeof err->msg)
    n = sizeof err->msg - 1;
  memcpy(err->msg, prefix, n);
  size_t room = sizeof err->msg - 1 - n;
  size_t m = strlen(old);
  if (m > room)
    m = room;
  memcpy(err->msg + n, old, m);
  err->msg[n + m] = '\0';
  return err->code;
}

void nto_err_clear(nto_err *err) {
  if (err == NULL)
    return;
  err->code = 0;
  err->msg[0] = '\0';
}

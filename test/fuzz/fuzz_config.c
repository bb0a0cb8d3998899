/*
 * fuzz_config.c - libFuzzer target for the INI loader and the graph builder.
 *
 * Each input is an INI file: it is written to an anonymous memory file
 * (memfd, nothing touches the disk), loaded with nto_config_load through
 * /proc/self/fd/N and, when that succeeds, built into a graph at batch 2
 * (plan only: shapes, weights and workspace are sized, nothing is
 * allocated for them). Everything is freed, so LeakSanitizer can check.
 * Every error message must be one NUL-terminated line (error.h).
 *
 * Built and run by tools/fuzz.sh (clang -fsanitize=fuzzer,address,undefined).
 */
#include "config.h"
#include "graph.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* A message is one line (error.h) that fits its buffer. */
static void check_msg(const nto_err *err) {
  if (memchr(err->msg, '\0', sizeof err->msg) == NULL ||
      strchr(err->msg, '\n') != NULL)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz.ini", MFD_CLOEXEC);
  if (fd < 0) {
    perror("memfd_create");
    abort();
  }
  if (write_all(fd, data, size) != 0) {
    perror("write");
    abort();
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

  nto_config c;
  nto_err err;
  int rc = nto_config_load(&c, path, &err);
  check_msg(&err);
  if (rc == 0) {
    nto_graph g;
    if (nto_graph_build(&g, &c, 2, &err) == 0) {
      /* The output is last with no consumer; every layer has a type and a
         unique name that finds it. */
      if (g.n_layers < 1 || g.n_consumers[g.n_layers - 1] != 0)
        abort();
      for (int i = 0; i < g.n_layers; i++)
        if (g.layers[i].ops == NULL ||
            nto_graph_find(&g, g.layers[i].name) != i)
          abort();
      nto_graph_free(&g);
    } else {
      check_msg(&err);
    }
    nto_config_free(&c);
  }
  close(fd);
  return 0;
}

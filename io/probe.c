/*
 * probe.c - the swap directory's bandwidth, measured through our own I/O
 * layer. See probe.h.
 *
 * DESIGN
 * One probe owns a swap file, a queue and an arena of `depth` blocks
 * (NTO_SWAP_PROBE_DEPTH, fewer for a small probe: a quarter of its blocks,
 * so that train's 16 MiB probe maps 4 MiB), each request writing or
 * reading its own block. A pass submits
 * the first DEPTH requests, then, for each one reaped, submits the next
 * block with the same request, until the file is covered; after a
 * request's error it only reaps what is in flight. The requests live in
 * the probe (not in a pass) so that they outlive a broken queue until
 * nto_io_destroy has waited for them.
 */
#include "probe.h"

#include "swap.h"
#include "tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

typedef struct probe {
  const char *dir;
  nto_swap *swap;
  nto_io *io;
  char *arena;    /* depth blocks */
  unsigned depth; /* requests in flight, <= NTO_SWAP_PROBE_DEPTH */
  nto_io_req req[NTO_SWAP_PROBE_DEPTH];
} probe;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Bytes to measure with: want (at least NTO_SWAP_PROBE_MIN_BYTES), or half
 * the free space when that is less (rounded down to whole requests). */
static int probe_bytes(const char *dir, uint64_t want, uint64_t *out,
                       nto_err *err) {
  struct statvfs s;
  if (statvfs(dir, &s) != 0)
    return nto_err_set(err, NTO_EIO, "swap dir %s: %s", dir, strerror(errno));
  uint64_t total =
      want < NTO_SWAP_PROBE_MIN_BYTES ? NTO_SWAP_PROBE_MIN_BYTES : want;
  total = total / NTO_SWAP_PROBE_BLOCK * NTO_SWAP_PROBE_BLOCK;
  uint64_t half = (uint64_t)s.f_bavail * s.f_frsize / 2;
  if (s.f_blocks > 0 && half < total)
    total = half / NTO_SWAP_PROBE_BLOCK * NTO_SWAP_PROBE_BLOCK;
  if (total < NTO_SWAP_PROBE_MIN_BYTES) { /* below 33 MiB free: MiB or KiB */
    double kib = (double)(half * 2) / 1024.0;
    return nto_err_set(err, NTO_EIO,
                       "swap dir %s: only %.1f %s free, too little to "
                       "measure its bandwidth",
                       dir, kib >= 1024.0 ? kib / 1024.0 : kib,
                       kib >= 1024.0 ? "MiB" : "KiB");
  }
  *out = total;
  return 0;
}

/* Submit request r for the block at offset off. */
static int submit_block(nto_io *io, nto_io_req *r, nto_io_op op, void *buf,
                        uint64_t off) {
  memset(r, 0, sizeof *r);
  r->op = op;
  r->buf = buf;
  r->len = NTO_SWAP_PROBE_BLOCK;
  r->offset = (int64_t)off;
  return nto_io_submit(io, r);
}

/* One sequential pass over total bytes with p->depth requests in
 * flight; *secs: its time. On a request's error, what is in flight is
 * still reaped before returning. */
static int io_pass(probe *p, nto_io_op op, uint64_t total, double *secs,
                   nto_err *err) {
  uint64_t next = 0;
  unsigned inflight = 0;
  int rc = 0;
  double t0 = now_s();
  for (unsigned i = 0; i < p->depth && next < total;
       i++, next += NTO_SWAP_PROBE_BLOCK) {
    if (submit_block(p->io, &p->req[i], op, p->arena + i * NTO_SWAP_PROBE_BLOCK,
                     next) != 0)
      return nto_err_set(err, NTO_ENOMEM, "out of memory");
    inflight++;
  }
  while (inflight > 0) {
    nto_io_req *done[NTO_SWAP_PROBE_DEPTH];
    int n = nto_io_reap(p->io, done, (int)p->depth, 1);
    if (n < 0)
      return nto_err_set(err, NTO_EIO, "I/O queue failed: %s", strerror(-n));
    for (int i = 0; i < n; i++) {
      nto_io_req *r = done[i];
      inflight--;
      if (rc == 0 && r->result != 0)
        rc = nto_err_set(err, NTO_EIO, "%s at offset %lld: %s",
                         op == NTO_IO_READ ? "read" : "write",
                         (long long)r->offset, strerror(-r->result));
      if (rc != 0 || next >= total)
        continue;
      if (submit_block(p->io, r, op, r->buf, next) != 0)
        rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
      else
        inflight++, next += NTO_SWAP_PROBE_BLOCK;
    }
  }
  *secs = now_s() - t0;
  return rc;
}

/* Open the swap file: O_DIRECT if asked and not refused (then buffered,
 * and out->direct says so). */
static int probe_swap(probe *p, int direct, nto_swap_probe_result *out,
                      nto_err *err) {
  nto_swap_opts so = {.dir = p->dir, .bytes = out->bytes, .direct = direct};
  int rc = nto_swap_open(&p->swap, &so, err);
  if (rc == NTO_EUNSUPPORTED && so.direct) {
    so.direct = 0;
    rc = nto_swap_open(&p->swap, &so, err);
  }
  if (rc == 0)
    out->direct = nto_swap_is_direct(p->swap);
  return rc;
}

/* Write then read the whole file; MiB/s into out. Buffered: the write is
 * timed up to fdatasync, and the cache is dropped before reading. */
static int probe_passes(probe *p, nto_swap_probe_result *out, nto_err *err) {
  int fd = nto_swap_fd(p->swap);
  double w = 0, r = 0, mib = (double)out->bytes / 1048576.0;
  double t0 = now_s();
  int rc = io_pass(p, NTO_IO_WRITE, out->bytes, &w, err);
  if (rc == 0 && !out->direct) {
    if (fdatasync(fd) != 0)
      return nto_err_set(err, NTO_EIO, "swap dir %s: fdatasync: %s", p->dir,
                         strerror(errno));
    w = now_s() - t0;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  if (rc == 0)
    rc = io_pass(p, NTO_IO_READ, out->bytes, &r, err);
  if (rc == 0) {
    out->write_mib_s = mib / (w > 1e-9 ? w : 1e-9);
    out->read_mib_s = mib / (r > 1e-9 ? r : 1e-9);
  }
  return rc;
}

int nto_swap_probe(const char *dir, nto_io_kind kind, int direct,
                   uint64_t bytes, nto_swap_probe_result *out, nto_err *err) {
  probe p = {.dir = dir, .depth = NTO_SWAP_PROBE_DEPTH};
  size_t arena = 0;
  memset(out, 0, sizeof *out);
  out->depth = NTO_SWAP_PROBE_DEPTH;
  out->block = NTO_SWAP_PROBE_BLOCK;
  if (!dir ||
      (kind != NTO_IO_AUTO && kind != NTO_IO_URING && kind != NTO_IO_PSYNC))
    return nto_err_set(err, NTO_EINVAL,
                       "swap probe: invalid arguments (kind %d)", (int)kind);
  int rc =
      probe_bytes(dir, bytes ? bytes : NTO_SWAP_PROBE_BYTES, &out->bytes, err);
  if (rc == 0) {
    uint64_t quarter = out->bytes / NTO_SWAP_PROBE_BLOCK / 4;
    if (quarter < p.depth)
      p.depth = quarter > 0 ? (unsigned)quarter : 1;
    out->depth = p.depth;
    arena = (size_t)p.depth * NTO_SWAP_PROBE_BLOCK;
  }
  if (rc == 0)
    rc = probe_swap(&p, direct, out, err);
  if (rc == 0)
    rc = nto_io_create(&p.io, kind, nto_swap_fd(p.swap), p.depth, err);
  /* one arena, registered like the runs' tensor region (where allowed) */
  if (rc == 0 && !(p.arena = nto_map_buffers(arena)))
    rc = nto_err_set(err, NTO_ENOMEM, "out of memory");
  for (unsigned i = 0; rc == 0 && i < p.depth; i++)
    memset(p.arena + (size_t)i * NTO_SWAP_PROBE_BLOCK, 0x5a + (int)i,
           NTO_SWAP_PROBE_BLOCK);
  if (rc == 0) {
    nto_err e = {0};
    out->fixed = nto_io_register_buffer(p.io, p.arena, arena, &e) == 0 &&
                 nto_io_kind_of(p.io) == NTO_IO_URING;
    out->io = nto_io_kind_name(nto_io_kind_of(p.io));
    rc = probe_passes(&p, out, err);
  }
  nto_io_destroy(p.io);
  nto_swap_close(p.swap);
  nto_unmap_buffers(p.arena, arena);
  return rc;
}

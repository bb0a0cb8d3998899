/*
 * test_iobackend.c - the request queue over io_uring and psync, each on a
 * buffered and an O_DIRECT swap file: random blocks written and read back
 * with more requests than the depth (checked with plain pread too), fault
 * injection (the nth request of an op fails with its errno, across queues;
 * the nth request, or every one, is split and continued; the nth read
 * arrives with a byte flipped; NTO_FAULT specifications), reads past end
 * of file, and destroying a queue with requests pending. io_uring cases
 * are skipped where the kernel refuses io_uring, O_DIRECT cases where the
 * temporary directory does not support it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tmpdir.h"

#include "iobackend.h"
#include "rng.h"
#include "swap.h"
#include "tensor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEPTH 8
#define NBLK 64      /* blocks of the round trip */
#define SLOT_PAGES 8 /* each block lives in its own slot */
#define FILE_PAGES (NBLK * SLOT_PAGES)
#define FILE_BYTES ((uint64_t)FILE_PAGES * NTO_PAGE)

typedef struct {
  nto_io_kind kind;
  int direct;
  const char *name;
} param;

static const param params[] = {
    {NTO_IO_URING, 0, "io_uring/buffered"},
    {NTO_IO_URING, 1, "io_uring/direct"},
    {NTO_IO_PSYNC, 0, "psync/buffered"},
    {NTO_IO_PSYNC, 1, "psync/direct"},
};
#define NPARAM (sizeof params / sizeof params[0])

typedef struct {
  const param *p;
  char dir[256];
  nto_swap *swap;
  nto_io *io;
  char skip[NTO_ERR_MSG_MAX + 64]; /* reason to skip, "" to run */
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof *fx);
  fx->p = *state;
  if (tmpdir_make(fx->dir, sizeof fx->dir, "iobackend") != 0) {
    free(fx);
    return -1;
  }
  *state = fx;
  nto_io_fault_set(NULL);
  nto_swap_opts o = {fx->dir, FILE_BYTES, fx->p->direct};
  nto_err err = {0};
  int rc = nto_swap_open(&fx->swap, &o, &err);
  if (rc == NTO_EUNSUPPORTED && fx->p->direct) {
    snprintf(fx->skip, sizeof fx->skip, "%s", err.msg);
    return 0;
  }
  if (rc != 0) {
    print_error("swap: %s\n", err.msg);
    return -1;
  }
  rc = nto_io_create(&fx->io, fx->p->kind, nto_swap_fd(fx->swap), DEPTH, &err);
  if (rc == NTO_EUNSUPPORTED && fx->p->kind == NTO_IO_URING) {
    snprintf(fx->skip, sizeof fx->skip, "%s", err.msg);
    return 0;
  }
  if (rc != 0) {
    print_error("io: %s\n", err.msg);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  nto_io_fault_set(NULL);
  nto_io_destroy(fx->io);
  nto_swap_close(fx->swap);
  tmpdir_remove(fx->dir);
  free(fx);
  return 0;
}

/* The fixture, or skip the test with its reason. */
static fixture *begin(void **state) {
  fixture *fx = *state;
  if (fx->skip[0]) {
    print_message("skipped (%s): %s\n", fx->p->name, fx->skip);
    skip();
  }
  assert_int_equal(nto_io_kind_of(fx->io), fx->p->kind);
  return fx;
}

/* ------------------------------------------------------------- helpers */

/* A request with its own page-aligned buffer of pages pages. */
typedef struct {
  nto_io_req r;
  unsigned char *buf;
} block;

static void block_init(block *b, nto_io_op op, size_t pages, int64_t offset,
                       int index) {
  memset(b, 0, sizeof *b);
  b->buf = (unsigned char *)nto_alloc_aligned(pages ? pages * NTO_PAGE : 1);
  assert_non_null(b->buf);
  b->r.op = op;
  b->r.buf = b->buf;
  b->r.len = pages * NTO_PAGE;
  b->r.offset = offset;
  b->r.user = (void *)(intptr_t)index;
  b->r.result = 12345; /* submit must reset it */
  b->r.done = 777;
}

static void block_free(block *b) { nto_free_aligned((float *)b->buf); }

static void fill_random(unsigned char *p, size_t n, nto_rng *rng) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(nto_rng_next(rng) >> 56);
}

/*
 * Submit b[0..n) on io, flush, and reap them all, at most max per call.
 * Checks every request comes back exactly once with its cookie and that
 * pending counts down.
 */
static void run_all(nto_io *io, block *b, int n, int max) {
  unsigned before = nto_io_pending(io);
  for (int i = 0; i < n; i++) {
    assert_int_equal(nto_io_submit(io, &b[i].r), 0);
    assert_int_equal(b[i].r.result, 0);
    assert_int_equal(b[i].r.done, 0);
  }
  assert_int_equal(nto_io_pending(io), before + (unsigned)n);
  assert_int_equal(nto_io_flush(io), 0);
  char *seen = calloc((size_t)n, 1);
  nto_io_req *done[NBLK];
  int got = 0;
  while (got < n) {
    int k = nto_io_reap(io, done, max, 1);
    if (k < 0)
      fail_msg("reap: %s", strerror(-k));
    assert_true(k >= 1 && k <= max);
    for (int j = 0; j < k; j++) {
      intptr_t i = (intptr_t)done[j]->user;
      assert_true(i >= 0 && i < n);
      assert_ptr_equal(done[j], &b[i].r);
      assert_int_equal(seen[i], 0);
      seen[i] = 1;
    }
    got += k;
    assert_int_equal(nto_io_pending(io), before + (unsigned)(n - got));
  }
  free(seen);
}

static void assert_ok(const block *b, int i) {
  if (b->r.result != 0)
    fail_msg("request %d: %s", i, strerror(-b->r.result));
  assert_int_equal(b->r.done, b->r.len);
}

/* Read len bytes at offset with plain pread into an aligned buffer. */
static unsigned char *pread_block(int fd, size_t len, int64_t offset) {
  unsigned char *p = (unsigned char *)nto_alloc_aligned(len);
  assert_non_null(p);
  assert_int_equal(pread(fd, p, len, (off_t)offset), (ssize_t)len);
  return p;
}

/* Write n blocks of pages pages at slot i * SLOT_PAGES, random content. */
static void write_blocks(fixture *fx, block *w, int n, size_t pages,
                         uint64_t seed) {
  nto_rng rng;
  nto_rng_seed(&rng, seed);
  for (int i = 0; i < n; i++) {
    block_init(&w[i], NTO_IO_WRITE, pages, (int64_t)i * SLOT_PAGES * NTO_PAGE,
               i);
    fill_random(w[i].buf, w[i].r.len, &rng);
  }
  run_all(fx->io, w, n, DEPTH);
}

/* Read blocks like w[0..n) into r[0..n) (buffers set to 0xee first). */
static void read_blocks(fixture *fx, const block *w, block *r, int n) {
  for (int i = 0; i < n; i++) {
    block_init(&r[i], NTO_IO_READ, w[i].r.len / NTO_PAGE, w[i].r.offset, i);
    memset(r[i].buf, 0xee, r[i].r.len);
  }
  run_all(fx->io, r, n, DEPTH);
}

/* --------------------------------------------------------------- tests */

static void test_round_trip(void **state) {
  fixture *fx = begin(state);
  int fd = nto_swap_fd(fx->swap);
  nto_rng rng;
  nto_rng_seed(&rng, 42);
  int perm[NBLK];
  for (int i = 0; i < NBLK; i++)
    perm[i] = i;
  for (int i = NBLK - 1; i > 0; i--) {
    int j = (int)nto_rng_below(&rng, (uint32_t)i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  block w[NBLK], r[NBLK];
  for (int i = 0; i < NBLK; i++) {
    size_t pages = 1 + nto_rng_below(&rng, SLOT_PAGES);
    size_t skip = nto_rng_below(&rng, (uint32_t)(SLOT_PAGES - pages + 1));
    int64_t off = ((int64_t)perm[i] * SLOT_PAGES + (int64_t)skip) * NTO_PAGE;
    block_init(&w[i], NTO_IO_WRITE, pages, off, i);
    fill_random(w[i].buf, w[i].r.len, &rng);
  }
  run_all(fx->io, w, NBLK, 5); /* fewer per reap than the depth */
  for (int i = 0; i < NBLK; i++)
    assert_ok(&w[i], i);
  /* The bytes are in the file, where they belong. */
  for (int i = 0; i < NBLK; i++) {
    unsigned char *p = pread_block(fd, w[i].r.len, w[i].r.offset);
    assert_memory_equal(p, w[i].buf, w[i].r.len);
    nto_free_aligned((float *)p);
  }
  /* Read back in reverse order through the queue. */
  for (int i = 0; i < NBLK; i++) {
    const block *src = &w[NBLK - 1 - i];
    block_init(&r[i], NTO_IO_READ, src->r.len / NTO_PAGE, src->r.offset, i);
    memset(r[i].buf, 0xee, r[i].r.len);
  }
  run_all(fx->io, r, NBLK, NBLK);
  for (int i = 0; i < NBLK; i++) {
    assert_ok(&r[i], i);
    assert_memory_equal(r[i].buf, w[NBLK - 1 - i].buf, r[i].r.len);
  }
  for (int i = 0; i < NBLK; i++) {
    block_free(&w[i]);
    block_free(&r[i]);
  }
  assert_int_equal(nto_io_pending(fx->io), 0);
}

static void test_empty_and_nowait(void **state) {
  fixture *fx = begin(state);
  nto_io_req *done[4];
  /* Nothing pending: no blocking, nothing reaped. */
  assert_int_equal(nto_io_reap(fx->io, done, 4, 1), 0);
  assert_int_equal(nto_io_reap(fx->io, done, 4, 0), 0);
  assert_int_equal(nto_io_flush(fx->io), 0);
  /* A zero-length request completes with 0. */
  block z;
  block_init(&z, NTO_IO_READ, 0, 0, 0);
  run_all(fx->io, &z, 1, 1);
  assert_int_equal(z.r.result, 0);
  assert_int_equal(z.r.done, 0);
  block_free(&z);
  /* Polling without waiting eventually gets the request. */
  block b;
  block_init(&b, NTO_IO_READ, 1, 0, 0);
  assert_int_equal(nto_io_submit(fx->io, &b.r), 0);
  assert_int_equal(nto_io_reap(fx->io, done, 0, 1), 0); /* max 0 */
  int k = 0;
  for (int spin = 0; k == 0 && spin < 1000000; spin++)
    k = nto_io_reap(fx->io, done, 4, 0);
  assert_int_equal(k, 1);
  assert_ptr_equal(done[0], &b.r);
  assert_ok(&b, 0);
  block_free(&b);
}

static void test_fault_fail(void **state) {
  fixture *fx = begin(state);
  int fd = nto_swap_fd(fx->swap);
  enum { N = 12 };
  block w[N], r[N];
  nto_io_fault f = {.op = NTO_IO_WRITE, .fail_nth = 5, .errno_neg = -ENOSPC};
  nto_io_fault_set(&f);
  write_blocks(fx, w, N, 2, 7);
  for (int i = 0; i < N; i++) {
    if (i == 4) {
      assert_int_equal(w[i].r.result, -ENOSPC);
      /* Failed without I/O: the preallocated zeros are still there. */
      unsigned char *p = pread_block(fd, w[i].r.len, w[i].r.offset);
      for (size_t j = 0; j < w[i].r.len; j++)
        assert_int_equal(p[j], 0);
      nto_free_aligned((float *)p);
    } else {
      assert_ok(&w[i], i);
    }
  }
  /* Counting restarts with each set, and only requests of the op count. */
  f = (nto_io_fault){.op = NTO_IO_READ, .fail_nth = 3, .errno_neg = -EIO};
  nto_io_fault_set(&f);
  block x; /* a write: not counted */
  block_init(&x, NTO_IO_WRITE, 2, w[4].r.offset, 0);
  memcpy(x.buf, w[4].buf, x.r.len);
  run_all(fx->io, &x, 1, 1);
  assert_ok(&x, 0);
  block_free(&x);
  read_blocks(fx, w, r, N);
  for (int i = 0; i < N; i++) {
    if (i == 2) {
      assert_int_equal(r[i].r.result, -EIO);
      continue;
    }
    assert_ok(&r[i], i);
    assert_memory_equal(r[i].buf, w[i].buf, r[i].r.len);
  }
  for (int i = 0; i < N; i++)
    block_free(&r[i]);
  /* Cleared: everything succeeds. */
  nto_io_fault_set(NULL);
  read_blocks(fx, w, r, N);
  for (int i = 0; i < N; i++) {
    assert_ok(&r[i], i);
    assert_memory_equal(r[i].buf, w[i].buf, r[i].r.len);
    block_free(&r[i]);
    block_free(&w[i]);
  }
}

static void test_fault_across_queues(void **state) {
  fixture *fx = begin(state);
  nto_io *io2;
  nto_err err = {0};
  assert_int_equal(
      nto_io_create(&io2, fx->p->kind, nto_swap_fd(fx->swap), 2, &err), 0);
  enum { N = 6 };
  block w[N];
  for (int i = 0; i < N; i++)
    block_init(&w[i], NTO_IO_WRITE, 1, (int64_t)i * NTO_PAGE, i);
  nto_io_fault f = {.op = NTO_IO_WRITE, .fail_nth = 3, .errno_neg = -EDQUOT};
  nto_io_fault_set(&f);
  /* Alternate queues: the third submission is the second on fx->io. */
  for (int i = 0; i < N; i++)
    assert_int_equal(nto_io_submit(i % 2 ? io2 : fx->io, &w[i].r), 0);
  nto_io_req *done[N];
  int got = 0;
  while (got < N) {
    int k = 0;
    if (nto_io_pending(fx->io))
      k += nto_io_reap(fx->io, done + got, N - got, 1);
    if (nto_io_pending(io2))
      k += nto_io_reap(io2, done + got + k, N - got - k, 1);
    assert_true(k > 0);
    got += k;
  }
  for (int i = 0; i < N; i++) {
    if (i == 2)
      assert_int_equal(w[i].r.result, -EDQUOT);
    else
      assert_ok(&w[i], i);
    block_free(&w[i]);
  }
  nto_io_destroy(io2);
}

static void test_fault_short(void **state) {
  fixture *fx = begin(state);
  int fd = nto_swap_fd(fx->swap);
  enum { N = 6 };
  static const size_t pages[N] = {4, 3, 1, 8, 2, 5};
  block w[N], r[N];
  nto_rng rng;
  nto_rng_seed(&rng, 99);
  for (int nth = 1; nth <= N; nth++) {
    for (int i = 0; i < N; i++) {
      block_init(&w[i], NTO_IO_WRITE, pages[i],
                 (int64_t)i * SLOT_PAGES * NTO_PAGE, i);
      fill_random(w[i].buf, w[i].r.len, &rng);
    }
    nto_io_fault f = {.op = NTO_IO_WRITE, .short_nth = nth};
    nto_io_fault_set(&f);
    run_all(fx->io, w, N, DEPTH);
    for (int i = 0; i < N; i++) {
      assert_ok(&w[i], i);
      unsigned char *p = pread_block(fd, w[i].r.len, w[i].r.offset);
      assert_memory_equal(p, w[i].buf, w[i].r.len);
      nto_free_aligned((float *)p);
    }
    f = (nto_io_fault){.op = NTO_IO_READ, .short_nth = nth};
    nto_io_fault_set(&f);
    read_blocks(fx, w, r, N);
    for (int i = 0; i < N; i++) {
      assert_ok(&r[i], i);
      assert_memory_equal(r[i].buf, w[i].buf, r[i].r.len);
      block_free(&r[i]);
      block_free(&w[i]);
    }
  }
}

/* Byte flip: the nth read completes without error but with the byte at
 * flip_at inverted (clamped to the last byte); nothing else changes, the
 * file keeps the right bytes, and a flip asked for writes is ignored. */
static void test_fault_flip(void **state) {
  fixture *fx = begin(state);
  enum { N = 6 };
  block w[N], r[N];
  write_blocks(fx, w, N, 2, 11);
  nto_io_fault f = {.op = NTO_IO_READ, .flip_nth = 4, .flip_at = 5000};
  nto_io_fault_set(&f);
  read_blocks(fx, w, r, N);
  assert_int_equal(nto_io_fault_fired(), 1);
  for (int i = 0; i < N; i++) {
    assert_ok(&r[i], i);
    if (i == 3) {
      assert_int_equal(r[i].buf[5000], w[i].buf[5000] ^ 0xff);
      r[i].buf[5000] ^= 0xff;
    }
    assert_memory_equal(r[i].buf, w[i].buf, r[i].r.len);
    block_free(&r[i]);
  }
  /* Beyond the end: the last byte. Combined with a short first attempt. */
  f = (nto_io_fault){
      .op = NTO_IO_READ, .flip_nth = 1, .short_nth = 1, .flip_at = 1 << 30};
  nto_io_fault_set(&f);
  read_blocks(fx, w, r, 1);
  assert_ok(&r[0], 0);
  size_t last = r[0].r.len - 1;
  assert_int_equal(r[0].buf[last], w[0].buf[last] ^ 0xff);
  assert_memory_equal(r[0].buf, w[0].buf, last);
  block_free(&r[0]);
  /* Writes are never flipped. */
  f = (nto_io_fault){.op = NTO_IO_WRITE, .flip_nth = 1};
  nto_io_fault_set(&f);
  block x;
  block_init(&x, NTO_IO_WRITE, 2, w[0].r.offset, 0);
  memcpy(x.buf, w[0].buf, x.r.len);
  run_all(fx->io, &x, 1, 1);
  assert_ok(&x, 0);
  assert_memory_equal(x.buf, w[0].buf, x.r.len);
  assert_int_equal(nto_io_fault_fired(), 0);
  block_free(&x);
  nto_io_fault_set(NULL);
  read_blocks(fx, w, r, N);
  for (int i = 0; i < N; i++) {
    assert_ok(&r[i], i);
    assert_memory_equal(r[i].buf, w[i].buf, r[i].r.len);
    block_free(&r[i]);
    block_free(&w[i]);
  }
}

/* short_nth < 0: every request is split (if it can be), and still
 * transfers all its bytes. */
static void test_fault_short_all(void **state) {
  fixture *fx = begin(state);
  enum { N = 5 };
  block w[N], r[N];
  nto_io_fault f = {.op = NTO_IO_WRITE, .short_nth = -1};
  nto_io_fault_set(&f);
  write_blocks(fx, w, N, 3, 13);
  assert_int_equal(nto_io_fault_fired(), N);
  f.op = NTO_IO_READ;
  nto_io_fault_set(&f);
  read_blocks(fx, w, r, N);
  assert_int_equal(nto_io_fault_fired(), N);
  for (int i = 0; i < N; i++) {
    assert_ok(&w[i], i);
    assert_ok(&r[i], i);
    assert_memory_equal(r[i].buf, w[i].buf, r[i].r.len);
    block_free(&r[i]);
    block_free(&w[i]);
  }
}

static void test_read_past_eof(void **state) {
  fixture *fx = begin(state);
  enum { N = 5 };
  block r[N];
  block_init(&r[0], NTO_IO_READ, 1, 0, 0); /* fine */
  block_init(&r[1], NTO_IO_READ, 2, (int64_t)FILE_BYTES - NTO_PAGE, 1);
  block_init(&r[2], NTO_IO_READ, 1, (int64_t)FILE_BYTES, 2);
  block_init(&r[3], NTO_IO_READ, 3, (int64_t)FILE_BYTES + 10 * NTO_PAGE, 3);
  block_init(&r[4], NTO_IO_READ, 1, (int64_t)FILE_BYTES - NTO_PAGE, 4);
  run_all(fx->io, r, N, DEPTH);
  assert_ok(&r[0], 0);
  assert_int_equal(r[1].r.result, -EIO);
  assert_int_equal(r[2].r.result, -EIO);
  assert_int_equal(r[3].r.result, -EIO);
  assert_ok(&r[4], 4);
  for (int i = 0; i < N; i++)
    block_free(&r[i]);
}

static void test_destroy_pending(void **state) {
  fixture *fx = begin(state);
  int fd = nto_swap_fd(fx->swap);
  enum { N = 3 * DEPTH };
  block w[N];
  nto_rng rng;
  nto_rng_seed(&rng, 5);
  for (int i = 0; i < N; i++) {
    block_init(&w[i], NTO_IO_WRITE, 2, (int64_t)i * SLOT_PAGES * NTO_PAGE, i);
    fill_random(w[i].buf, w[i].r.len, &rng);
    assert_int_equal(nto_io_submit(fx->io, &w[i].r), 0);
  }
  assert_int_equal(nto_io_flush(fx->io), 0);
  assert_int_equal(nto_io_pending(fx->io), N);
  nto_io_destroy(fx->io); /* waits: every write has landed afterwards */
  fx->io = NULL;
  for (int i = 0; i < N; i++) {
    assert_ok(&w[i], i);
    unsigned char *p = pread_block(fd, w[i].r.len, w[i].r.offset);
    assert_memory_equal(p, w[i].buf, w[i].r.len);
    nto_free_aligned((float *)p);
    block_free(&w[i]);
  }
}

/* Not parametrized: names, parsing, argument checks, AUTO. */
static void test_api(void **state) {
  (void)state;
  assert_string_equal(nto_io_kind_name(NTO_IO_URING), "io_uring");
  assert_string_equal(nto_io_kind_name(NTO_IO_PSYNC), "psync");
  assert_string_equal(nto_io_kind_name(NTO_IO_AUTO), "auto");
  assert_int_equal(nto_io_kind_parse("uring"), NTO_IO_URING);
  assert_int_equal(nto_io_kind_parse("io_uring"), NTO_IO_URING);
  assert_int_equal(nto_io_kind_parse("psync"), NTO_IO_PSYNC);
  assert_int_equal(nto_io_kind_parse("auto"), NTO_IO_AUTO);
  assert_int_equal(nto_io_kind_parse("aio"), -1);
  assert_int_equal(nto_io_kind_parse(""), -1);
  assert_int_equal(nto_io_kind_parse(NULL), -1);
  nto_io *io = NULL;
  nto_err err = {0};
  int fd = open("/dev/null", O_RDWR);
  assert_true(fd >= 0);
  assert_int_equal(nto_io_create(&io, NTO_IO_PSYNC, fd, 0, &err), NTO_EINVAL);
  assert_int_equal(nto_io_create(&io, NTO_IO_PSYNC, -1, 4, &err), NTO_EINVAL);
  assert_int_equal(nto_io_create(&io, NTO_IO_URING, fd, 100000, &err),
                   NTO_EINVAL);
  assert_int_equal(nto_io_create(&io, (nto_io_kind)7, fd, 4, &err), NTO_EINVAL);
  assert_null(io);
  assert_int_equal(nto_io_create(&io, NTO_IO_AUTO, fd, 4, &err), 0);
  nto_io_kind got = nto_io_kind_of(io);
  assert_true(got == NTO_IO_URING || got == NTO_IO_PSYNC);
  nto_io_destroy(io);
  nto_io_destroy(NULL);
  int rc = nto_io_create(&io, NTO_IO_URING, fd, 4, &err);
  if (rc == NTO_EUNSUPPORTED) {
    if (strncmp(err.msg, "io_uring unavailable: ", 22) != 0)
      fail_msg("message: %s", err.msg);
    assert_int_equal(got, NTO_IO_PSYNC);
  } else {
    assert_int_equal(rc, 0);
    assert_int_equal(got, NTO_IO_URING);
    nto_io_destroy(io);
  }
  close(fd);
  print_message("auto picks %s\n", nto_io_kind_name(got));

  /* NTO_FAULT specifications. */
  nto_io_fault f;
  assert_int_equal(nto_io_fault_parse("read:5:eio", &f, &err), 0);
  assert_int_equal(f.op, NTO_IO_READ);
  assert_int_equal(f.fail_nth, 5);
  assert_int_equal(f.errno_neg, -EIO);
  assert_int_equal(nto_io_fault_parse("write:12:enospc", &f, &err), 0);
  assert_int_equal(f.op, NTO_IO_WRITE);
  assert_int_equal(f.fail_nth, 12);
  assert_int_equal(f.errno_neg, -ENOSPC);
  assert_int_equal(nto_io_fault_parse("write:3:short", &f, &err), 0);
  assert_int_equal(f.short_nth, 3);
  assert_int_equal(f.fail_nth, 0);
  assert_int_equal(nto_io_fault_parse("read:1:flip", &f, &err), 0);
  assert_int_equal(f.flip_nth, 1);
  assert_int_equal(f.flip_at, 0);
  const char *bad[] = {
      "",         "read",         "read:5",       "read:0:eio", "read:-1:eio",
      "rd:5:eio", "read:5:eio:x", "write:5:flip", "read:x:eio", "read:5:oops",
      NULL};
  for (int i = 0; i <= 10; i++) {
    if (nto_io_fault_parse(bad[i], &f, &err) != NTO_EINVAL)
      fail_msg("accepted '%s'", bad[i] ? bad[i] : "(null)");
    if (!strstr(err.msg, "expected OP:N:KIND"))
      fail_msg("message: %s", err.msg);
  }
}

/* A registered buffer (nto_io_register_buffer): blocks written from it and
 * read back into it (READ_FIXED / WRITE_FIXED with io_uring), one of them
 * split by a short transfer (the rest continues inside the buffer), next
 * to a block outside it (sent unregistered); the same after the
 * registration is dropped. The buffers straddle the end of a huge page
 * (nto_map_buffers, as the tensor region): half of them in the 2 MiB
 * page, half in the 4 KiB pages after it. psync: registering is a
 * no-op. */
static void test_registered(void **state) {
  fixture *fx = begin(state);
  enum { N = 8 };
  size_t len = (size_t)N * SLOT_PAGES * NTO_PAGE;
  size_t map_len = NTO_HUGE_PAGE + len;
  unsigned char *arena_map = nto_map_buffers(map_len);
  unsigned char *back_map = nto_map_buffers(map_len);
  assert_non_null(arena_map);
  assert_non_null(back_map);
  unsigned char *arena = arena_map + NTO_HUGE_PAGE - len / 2;
  unsigned char *back = back_map + NTO_HUGE_PAGE - len / 2;
  nto_rng rng;
  nto_rng_seed(&rng, 7);
  nto_err err = {0};
  for (int round = 0; round < 2; round++) {
    if (nto_io_register_buffer(fx->io, round ? NULL : arena, round ? 0 : len,
                               &err) != 0)
      skip(); /* refused (RLIMIT_MEMLOCK): nothing to test here */
    fill_random(arena, len, &rng);
    nto_io_fault f = {.op = NTO_IO_WRITE, .short_nth = 3};
    nto_io_fault_set(&f);
    block w[N + 1], r[N + 1];
    for (int i = 0; i <= N; i++) {
      int64_t off = (int64_t)i * SLOT_PAGES * NTO_PAGE;
      block_init(&w[i], NTO_IO_WRITE, SLOT_PAGES, off, i);
      if (i < N) { /* inside the registered buffer */
        nto_free_aligned((float *)w[i].buf);
        w[i].buf = NULL;
        w[i].r.buf = arena + (size_t)i * SLOT_PAGES * NTO_PAGE;
      } else {
        fill_random(w[i].buf, w[i].r.len, &rng);
      }
    }
    run_all(fx->io, w, N + 1, DEPTH);
    assert_int_equal(nto_io_fault_fired(), 1);
    nto_io_fault_set(NULL);
    memset(back, 0xee, len);
    for (int i = 0; i <= N; i++) {
      assert_ok(&w[i], i);
      block_init(&r[i], NTO_IO_READ, SLOT_PAGES, w[i].r.offset, i);
      if (i < N) {
        nto_free_aligned((float *)r[i].buf);
        r[i].buf = NULL;
        r[i].r.buf = back + (size_t)i * SLOT_PAGES * NTO_PAGE;
      }
    }
    if (round == 0)
      assert_int_equal(nto_io_register_buffer(fx->io, back, len, &err),
                       0); /* reads */
    run_all(fx->io, r, N + 1, DEPTH);
    for (int i = 0; i <= N; i++)
      assert_ok(&r[i], i);
    assert_memory_equal(back, arena, len);
    assert_memory_equal(r[N].buf, w[N].buf, w[N].r.len);
    block_free(&w[N]);
    block_free(&r[N]);
  }
  nto_unmap_buffers(arena_map, map_len);
  nto_unmap_buffers(back_map, map_len);
}

/* 1 if the system's setting lets transparent huge pages back a madvised
 * mapping. */
static int thp_madvise_allowed(void) {
  char mode[128] = "";
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!f)
    return 0;
  if (!fgets(mode, sizeof mode, f))
    mode[0] = 0;
  fclose(f);
  return strstr(mode, "[always]") || strstr(mode, "[madvise]");
}

/* The THPeligible field of the mapping that contains p in
 * /proc/self/smaps: 1 or 0, -1 if the kernel does not report it. */
static int thp_eligible(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  char line[512];
  int inside = 0, v = -1;
  uintptr_t a = (uintptr_t)p;
  if (!f)
    return -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) /* a mapping's header */
      inside = a >= lo && a < hi;
    else if (inside && sscanf(line, "THPeligible: %d", &v) == 1)
      break;
  }
  fclose(f);
  return v;
}

/* 1 if madvise(MADV_HUGEPAGE) makes a mapping eligible for transparent
 * huge pages here, seen on a reference mapping advised by the test itself
 * (two huge pages: it holds an aligned 2 MiB range wherever it lands);
 * else 0, with the reason printed. 0 where THP is off or the kernel does
 * not report THPeligible, and under qemu-user: its madvise returns 0
 * without passing the advice to the kernel (any advice, even an invalid
 * one), so no mapping of the emulated process can become eligible, and
 * nto_map_buffers' advice cannot be checked there. */
static int thp_madvise_works(void) {
  size_t len = 2 * NTO_HUGE_PAGE;
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  assert_true(p != MAP_FAILED);
  int rc = madvise(p, len, MADV_HUGEPAGE), e = thp_eligible(p);
  munmap(p, len);
  if (rc == 0 && e == 1)
    return 1;
  if (!thp_madvise_allowed() || rc != 0 || e < 0)
    print_message("huge pages not checked: transparent huge pages are off "
                  "for madvised mappings, or not reported\n");
  else
    print_message("huge pages not checked: a mapping advised MADV_HUGEPAGE "
                  "is not eligible (an emulator that ignores madvise, such "
                  "as qemu-user)\n");
  return 0;
}

/* nto_map_buffers: page-aligned, zero-filled, writable to its last byte;
 * from 2 MiB on, aligned to 2 MiB, the over-mapped slack after it
 * unmapped, and eligible for transparent huge pages wherever advising a
 * mapping makes it so (thp_madvise_works). */
static void test_map_buffers(void **state) {
  (void)state;
  const size_t sizes[] = {0, 1, 3 * NTO_PAGE + 5, NTO_HUGE_PAGE,
                          9 * ((size_t)1 << 20) + 3 * NTO_PAGE + 7};
  int thp = thp_madvise_works();
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i], len = n ? nto_round_page(n) : NTO_PAGE;
    unsigned char *p = nto_map_buffers(n);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % NTO_PAGE, 0);
    assert_int_equal(p[0], 0);
    assert_int_equal(p[len - 1], 0);
    memset(p, 0xab, len);
    assert_int_equal(p[len - 1], 0xab);
    if (n >= NTO_HUGE_PAGE) {
      unsigned char vec;
      assert_int_equal((uintptr_t)p % NTO_HUGE_PAGE, 0);
      /* the page after the mapping lies in the trimmed slack */
      assert_int_equal(mincore(p + len, NTO_PAGE, &vec), -1);
      assert_int_equal(errno, ENOMEM);
      if (thp)
        assert_int_equal(thp_eligible(p), 1);
    }
    nto_unmap_buffers(p, n);
  }
  nto_unmap_buffers(NULL, 0); /* no-op */
}

typedef void (*test_fn)(void **);

int main(void) {
  static const struct {
    const char *name;
    test_fn fn;
  } fns[] = {
      {"round_trip", test_round_trip},
      {"empty_and_nowait", test_empty_and_nowait},
      {"fault_fail", test_fault_fail},
      {"fault_across_queues", test_fault_across_queues},
      {"fault_short", test_fault_short},
      {"fault_flip", test_fault_flip},
      {"fault_short_all", test_fault_short_all},
      {"read_past_eof", test_read_past_eof},
      {"destroy_pending", test_destroy_pending},
      {"registered", test_registered},
  };
  enum { NFN = sizeof fns / sizeof fns[0] };
  static char names[NFN * NPARAM][80];
  struct CMUnitTest tests[NFN * NPARAM + 2];
  size_t t = 0;
  for (size_t i = 0; i < NFN; i++)
    for (size_t j = 0; j < NPARAM; j++, t++) {
      snprintf(names[t], sizeof names[t], "%s/%s", fns[i].name, params[j].name);
      tests[t] = (struct CMUnitTest){names[t], fns[i].fn, setup, teardown,
                                     (void *)&params[j]};
    }
  tests[t++] = (struct CMUnitTest)cmocka_unit_test(test_api);
  tests[t] = (struct CMUnitTest)cmocka_unit_test(test_map_buffers);
  return cmocka_run_group_tests(tests, NULL, NULL);
}

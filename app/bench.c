/*
 * bench.c - `nntrainer-offload bench`: iteration time, memory and swap
 * traffic of several offload windows side by side.
 *
 * What: for each configuration of --windows (a number of steps, "auto" or
 * "all"), one child process of this same binary (/proc/self/exe) runs
 *   train MODEL --window CFG --iterations W+K --warmup W --eval-samples 0
 *         --data synthetic --report-json TMP/CFG.json --save TMP/CFG.bin
 * (plus --batch-size, --freeze-until, --swap-dir, --io, --memory-budget,
 * --recompute, --optimizer-state, --updates, --channel-groups, --no-direct,
 * --allow-tmpfs-swap and --flash-endurance when given), one configuration
 * after the other, so that each has its own peak RSS (the kernel's VmHWM is
 * per process). With
 * --rounds R the list runs R times, configurations interleaved (round 1: every
 * configuration, then round 2, ...), so that a slow spell of a shared machine
 * hits every configuration alike; each figure is the median over the rounds
 * (peak RSS and resident peak: the largest), and the ratio the median of the
 * per-round ratios, each against the same round's `all` run. Before the runs,
 * the swap directory (setup_swap_dir: the runs choose it alike, and one on
 * tmpfs or ramfs is refused) has its sequential write then read bandwidth
 * measured once
 * through our own I/O layer (nto_swap_probe, io/probe.h: a swap file and a
 * queue with the runs' backend; O_DIRECT unless refused; depth 16, 1 MiB
 * requests, up to 256 MiB).
 *
 * How: each child's --report-json file is read with the strict JSON reader of
 * io/json.h (known keys of that flat format: numbers, strings, booleans, arrays
 * of numbers; unknown keys, including arrays of objects, are skipped). Per
 * configuration: the report's figures; a floor, the larger of the compute time
 * (the `all` run's median, else the run's median minus its stall) and the swap
 * traffic at the measured bandwidth; median / floor; and whether the saved
 * weights of every round are byte-identical to the first round's `all` run's
 * (else to the first configuration's). Output: a table on stdout, optionally
 * CSV, JSON and an SVG plot of peak RSS against median iteration time (drawn by
 * gnuplot).
 *
 * With --profile NAME (app/profile.h), bench moves itself into a cgroup v1
 * CPU quota and a blkio throttle on the swap directory's disk before the
 * bandwidth probe, so that the probe and every run (its children inherit
 * the cgroups) see a board's CPU share and storage; it moves back and
 * removes them after the runs, also on an error and on SIGINT, SIGTERM or
 * SIGHUP (the run in progress is killed, nothing is reported). Where the
 * cgroups cannot be made it prints "skipped: --profile NAME: why" and
 * exits 0 (77 with --strict).
 *
 * Child stdout and stderr go to TMP/CFG.out and TMP/CFG.err in a mkdtemp
 * directory under $TMPDIR or /tmp, removed at the end, also after SIGINT,
 * SIGTERM or SIGHUP (the run in progress is killed; exit 128 + N, no
 * results). Errors are returned up to cmd_bench, which alone decides the
 * exit status. Main thread only (and the stop signals' handler).
 */
#include "cli.h"
#include "fileio.h"
#include "floor.h"
#include "iobackend.h"
#include "json.h"
#include "probe.h"
#include "profile.h"
#include "setup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONFIGS 32
#define MAX_ROUNDS 16
#define PATH_LEN (PATH_MAX + 64) /* the temporary directory + a file name */
#define LABEL_MAX 32             /* "all", "N+off@SIZE", ... */
#define STDERR_TAIL 8            /* lines of a failed child's stderr shown */
#define REPORT_MAX (64u << 20)   /* larger --report-json files: refused */
#define WINDOW_MAX (1L << 20)    /* the largest N train takes (setup.c) */
#define REPORT_DEPTH 33          /* its object, 32 levels of values in it */
#define BENCH_SKIPPED 77         /* --profile could not apply, --strict */
#define NEAR_ALL 1.10 /* the smallest peak RSS within this x all's median */

static const char usage[] =
    "usage: nntrainer-offload bench MODEL.ini [options]\n"
    "\n"
    "Trains MODEL.ini once per window configuration, each in its own\n"
    "process, and compares iteration time, peak memory and swap traffic;\n"
    "checks that the saved weights are identical to the 'all' run's.\n"
    "Options take their value as --name VALUE or --name=VALUE.\n"
    "\n"
    "  --windows LIST        comma list of N (steps), auto and all\n"
    "                        (default 1,2,4,auto,all); a suffix @SIZE\n"
    "                        (N@64M, auto@96M) gives that run its own\n"
    "                        --memory-budget; +MODE before it (4+off,\n"
    "                        all+off, 1+off@54M, 1+segments:3) its own\n"
    "                        --recompute;\n"
    "                        budget@SIZE: train --memory-budget SIZE\n"
    "                        alone (the window it fits)\n"
    "  --iterations K        measured iterations per run (default 5)\n"
    "  --warmup W            iterations run first and not measured\n"
    "                        (default 1)\n"
    "  --rounds R            run the list R times, configurations\n"
    "                        interleaved; medians over rounds (peak RSS\n"
    "                        and resident peak: largest; default 1, at\n"
    "                        most 16)\n"
    "  --batch-size B        batch size (default: the INI's batch_size)\n"
    "  --freeze-until LAYER  passed to train (fine-tuning the layers after\n"
    "                        LAYER)\n"
    "  --data DIR|synthetic  training data (default synthetic)\n"
    "  --csv FILE            also write the results as CSV\n"
    "  --json FILE           also write the results as JSON\n"
    "  --plot FILE.svg       peak RSS against iteration time (gnuplot)\n"
    "  --swap-dir DIR        swap directory (default: the INI's\n"
    "                        memory_swap_path, else $TMPDIR or /tmp, or\n"
    "                        /var/tmp where that is tmpfs or ramfs)\n"
    "  --allow-tmpfs-swap    accept a swap directory on tmpfs or ramfs\n"
    "                        (passed to train; for tests)\n"
    "  --io uring|psync      I/O backend (default: io_uring where allowed)\n"
    "  --memory-budget SIZE  passed to train (runs without @SIZE)\n"
    "  --recompute MODE      auto, cheap, segments, segments:N or off:\n"
    "                        passed to train\n"
    "                        (runs without +MODE)\n"
    "  --optimizer-state V   passed to train as --optimizer-state V\n"
    "  --updates after|spread  passed to train\n"
    "  --channel-groups off|SIZE  passed to train (every run, all resident\n"
    "                        too: the same results only with the same\n"
    "                        setting)\n"
    "  --no-direct           swap through the page cache (passed to train)\n"
    "  --flash-endurance TBW the swap device's rated endurance, for the\n"
    "                        flash wear per epoch "
    "(default " SETUP_FLASH_TBW_TEXT ": a typical\n"
    "                        32 GB eMMC's; TBW: 10^12 bytes written)\n"
    "  --profile NAME        run the probe and every configuration in a\n"
    "                        cgroup v1 CPU quota and swap disk throttle\n"
    "                        emulating a board: pi5-nvme, emmc, sdcard\n"
    "                        (--profile list: their numbers); needs root\n"
    "  --strict              with --profile: exit 77, not 0, when the\n"
    "                        profile cannot be applied here\n"
    "\n"
    "exit status: 0 every configuration ran and the weights agree (or\n"
    "--profile skipped: cannot be applied here); 1 a configuration failed\n"
    "or the weights differ; 2 usage error; 77 --profile skipped with\n"
    "--strict; 128+N stopped by signal N\n";

typedef struct bench_opts {
  const char *model, *windows, *data, *csv, *json, *plot;
  const char *swap_dir, *io, *budget, *recompute; /* NULL: not given */
  const char *freeze_until;                       /* NULL: not given */
  const char *endurance;                          /* NULL: not given */
  const char *optimizer_state;                    /* NULL: not given */
  const char *updates;                            /* NULL: not given */
  const char *groups;                             /* NULL: not given */
  size_t group_bytes;                             /* its bytes, 0: off */
  const char *profile_name;                       /* NULL: not given */
  const board_profile *profile;                   /* of profile_name */
  long iterations, warmup, batch;                 /* batch 0: the INI's */
  long rounds;
  int no_direct;
  int strict;         /* --strict: a profile skipped exits BENCH_SKIPPED */
  int allow_ram_swap; /* --allow-tmpfs-swap or NTO_ALLOW_TMPFS_SWAP=1 */
  double tbw;         /* --flash-endurance, else SETUP_FLASH_TBW */
  char labels[MAX_CONFIGS][LABEL_MAX];
  int n;
} bench_opts;

/* What bench reads from one child's --report-json file. */
typedef struct report {
  char model[256], io[32];
  char window[LABEL_MAX]; /* "all" or the number of steps */
  char recompute[24];     /* train --recompute: auto, segments:3, ... */
  int direct;
  double batch, iterations, warmup, measured;
  double peak_rss, resident_peak; /* bytes */
  double median_ms, p90_ms, stall_ms, read_mib, written_mib;
  double per_epoch;     /* iterations in an epoch of the run's data */
  double written_epoch; /* bytes: written per iteration x per_epoch */
  long n_iteration_ms;
  /* what the region floor needs (offloading runs): the final region, the
   * mean compute of every training step, and what fixes the run's plan */
  double region;   /* bytes */
  double *step_ms; /* n_step_ms, malloc'd; NULL all resident */
  long n_step_ms;
  double recomputed_convs; /* convolutions whose outputs were recomputed */
  double segment_convs;    /* segment convolutions recomputed (fewer than
                              all with --recompute segments:N) */
  int convs_kept;          /* recompute auto kept them (the budget) */
  int segments;            /* segment recomputation (given or auto's) */
  double region_floor_ms;  /* floor.h, computed by bench; 0: none */
} report;

typedef struct config {
  const char *label;
  int ok;                        /* every round ran, and its report was read */
  char failure[NTO_ERR_MSG_MAX]; /* why not, when !ok */
  report runs[MAX_ROUNDS];       /* per round */
  double ratios[MAX_ROUNDS];     /* per round: median / that round's floor */
  report r;                      /* over the rounds (see the top) */
  double floor_ms, ratio;
  /* against the region floor (floor.h), 0: none */
  double region_ratios[MAX_ROUNDS];
  double region_ratio;
  const char *identical; /* "yes", "no" or "-" */
} config;

typedef struct bandwidth {
  nto_swap_probe_result p; /* measure_bandwidth's */
  char dir[PATH_MAX];
} bandwidth;

/* A plan-only model of the bench's INI for a run's recompute setting
 * (region floors). */
typedef struct floor_plan {
  nto_recompute recompute;
  int segments_max; /* model.h: 0 all */
  nto_model *m;     /* NULL: not built yet */
} floor_plan;

/* Floor plans one bench builds at most: a recompute setting each, and
 * segments with each count segments:N gave. */
#define FLOOR_PLANS 8

typedef struct bench {
  bench_opts o;
  nto_config conf;     /* the model's INI, loaded once */
  floor_plan plans[FLOOR_PLANS];
  int n_plans;
  char cmdline[4096];
  char tmp[PATH_MAX]; /* "" until created */
  bandwidth bw;
  config cfg[MAX_CONFIGS];
  int ref;            /* configuration whose weights are the reference */
  int all;            /* index of `all`, or -1 */
  long batch;         /* the runs' batch size */
  profile_cgroups pc; /* --profile: its cgroups (pc.p NULL: none) */
} bench;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- options ------------------------------------------------------------ */

/* WINDOW[+RECOMPUTE][@SIZE], WINDOW: N, auto, all (no @SIZE) or budget
 * (only with @SIZE: the window train fits to that budget). The size is
 * checked by train (only its first digit here, so that a typo is not
 * taken for a window). */
static int valid_label(const char *s) {
  size_t end = strcspn(s, "@"), len = strcspn(s, "+@");
  if (s[end] == '@' && (s[end + 1] < '0' || s[end + 1] > '9'))
    return 0;
  if (s[len] == '+' && cli_recompute_word(s + len + 1, end - len - 1) < 0)
    return 0;
  if (len == 4 && !strncmp(s, "auto", 4))
    return 1;
  if (len == 3 && !strncmp(s, "all", 3))
    return !s[end]; /* no budget */
  if (len == 6 && !strncmp(s, "budget", 6))
    return s[end] == '@'; /* train --memory-budget SIZE without --window */
  if (len == 0)
    return 0;
  for (size_t i = 0; i < len; i++)
    if (s[i] < '0' || s[i] > '9')
      return 0;
  return 1;
}

/* What train would refuse in entry tok of list, refused before any run
 * (a run of minutes may come before it): N from 1 to train's bound, the
 * @SIZE a budget (cli_budget). Returns 0, or -1 after a usage error naming
 * --windows. */
static int check_label(const char *tok, const char *list) {
  size_t len = strcspn(tok, "+@"), bytes;
  char n[LABEL_MAX], what[LABEL_MAX + 64];
  long w;
  memcpy(n, tok, len);
  n[len] = '\0';
  if (n[0] >= '0' && n[0] <= '9' &&
      nto_parse_int(n, 1, WINDOW_MAX, &w, NULL) != 0) {
    cli_error("option --windows: window %s in '%s': N is a number of steps "
              "from 1 to %ld (or auto, or all)",
              n, list, WINDOW_MAX);
    return -1;
  }
  const char *at = strchr(tok, '@');
  snprintf(what, sizeof what, "option --windows: '%s' in '%s': the size", tok,
           list);
  return at ? cli_budget(what, at + 1, &bytes) : 0;
}

/* Split --windows into o->labels, each checked (valid_label, check_label).
 * Returns 0, or -1 after a usage error naming --windows. */
static int parse_windows(bench_opts *o) {
  const char *p = o->windows;
  o->n = 0;
  for (;;) {
    size_t len = strcspn(p, ",");
    char tok[LABEL_MAX];
    if (len == 0 || len >= LABEL_MAX) {
      cli_error("option --windows: expected a comma list of N, auto or all, "
                "got %s in '%s'",
                len ? "a too long entry" : "an empty entry", o->windows);
      return -1;
    }
    memcpy(tok, p, len);
    tok[len] = '\0';
    if (!valid_label(tok)) {
      cli_error("option --windows: expected N, auto, all or budget@SIZE "
                "(then an optional +auto, +cheap, +segments, +segments:N or "
                "+off; N and "
                "auto then an optional @SIZE), got '%s' in '%s'",
                tok, o->windows);
      return -1;
    }
    if (check_label(tok, o->windows) != 0)
      return -1;
    for (int i = 0; i < o->n; i++)
      if (!strcmp(o->labels[i], tok)) {
        cli_error("option --windows: '%s' is given twice in '%s'", tok,
                  o->windows);
        return -1;
      }
    if (o->n == MAX_CONFIGS) {
      cli_error("option --windows: more than %d entries", MAX_CONFIGS);
      return -1;
    }
    memcpy(o->labels[o->n++], tok, len + 1);
    if (!p[len])
      return 0;
    p += len + 1;
  }
}

/* The string option a names ("--name" or "--name=VALUE": *name and *m,
 * cli_opt_match's), or NULL if a is not one. */
/* The flag option a names (an option without a value), its name into
 * *name, or NULL. */
static int *flag_opt(bench_opts *o, const char *a, const char **name) {
  static const char *const names[] = {"--no-direct", "--allow-tmpfs-swap",
                                      "--strict", NULL};
  int *dst[] = {&o->no_direct, &o->allow_ram_swap, &o->strict};
  for (int i = 0; names[i]; i++)
    if (cli_opt_match(a, names[i])) {
      *name = names[i];
      return dst[i];
    }
  return NULL;
}

static const char **string_opt(bench_opts *o, const char *a, const char **name,
                               int *m) {
  static const char *const names[] = {"--windows",
                                      "--data",
                                      "--csv",
                                      "--json",
                                      "--plot",
                                      "--swap-dir",
                                      "--io",
                                      "--memory-budget",
                                      "--recompute",
                                      "--freeze-until",
                                      "--flash-endurance",
                                      "--optimizer-state",
                                      "--profile",
                                      "--updates",
                                      "--channel-groups",
                                      NULL};
  const char **dst[] = {&o->windows,      &o->data,      &o->csv,
                        &o->json,         &o->plot,      &o->swap_dir,
                        &o->io,           &o->budget,    &o->recompute,
                        &o->freeze_until, &o->endurance, &o->optimizer_state,
                        &o->profile_name, &o->updates,   &o->groups};
  for (int i = 0; names[i]; i++)
    if ((*m = cli_opt_match(a, names[i])) != 0) {
      *name = names[i];
      return dst[i];
    }
  return NULL;
}

/* --profile: list prints the profiles (then 1, as after --help); a name
 * not in the table and --no-direct beside it are usage errors (-1). */
static int parse_profile(bench_opts *o) {
  if (!o->profile_name)
    return 0;
  if (!strcmp(o->profile_name, "list")) {
    profile_list(stdout);
    return 1;
  }
  if (!(o->profile = profile_find(o->profile_name))) {
    cli_error("option --profile: unknown profile '%s': expected one of %s "
              "(or list)",
              o->profile_name, profile_names());
    return -1;
  }
  if (o->no_direct) {
    cli_error("option --no-direct cannot be used with --profile: cgroup v1 "
              "blkio throttling does not reliably apply to buffered "
              "writeback (kernel flusher threads write it back outside the "
              "cgroup), so a buffered swap file would not see the profile's "
              "bandwidth");
    return -1;
  }
  return 0;
}

/* Returns 0, 1 after --help or --profile list, -1 after a usage error. */
static int parse_opts(int argc, char **argv, bench_opts *o) {
  memset(o, 0, sizeof *o);
  o->windows = "1,2,4,auto,all";
  o->data = "synthetic";
  o->iterations = 5;
  o->warmup = 1;
  o->rounds = 1;
  o->tbw = SETUP_FLASH_TBW;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *name = a;
    int m = 0;
    const char **dst = string_opt(o, a, &name, &m);
    int *flag = flag_opt(o, a, &name);
    long *target = NULL, min = 1, max = 1L << 30;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return 1;
    } else if (flag) {
      if (strcmp(a, name) != 0) {
        cli_error("option %s takes no value, got '%s'", name, a);
        return -1;
      }
      *flag = 1;
      continue;
    } else if (dst) {
      if (!(*dst = cli_opt_value(argc, argv, &i, name, m))) {
        cli_error("option %s needs a value", name);
        return -1;
      }
      continue;
    } else if ((m = cli_opt_match(a, name = "--iterations")) != 0) {
      target = &o->iterations;
    } else if ((m = cli_opt_match(a, name = "--warmup")) != 0) {
      target = &o->warmup, min = 0;
    } else if ((m = cli_opt_match(a, name = "--rounds")) != 0) {
      target = &o->rounds, max = MAX_ROUNDS;
    } else if ((m = cli_opt_match(a, name = "--batch-size")) != 0) {
      target = &o->batch, max = 1 << 20;
    } else if (a[0] == '-') {
      cli_error("bench: unknown option '%s' (try bench --help)", a);
      return -1;
    } else if (!o->model) {
      o->model = a;
      continue;
    } else {
      cli_error("bench: unexpected argument '%s'", a);
      return -1;
    }
    if (cli_int(name, cli_opt_value(argc, argv, &i, name, m), min, max,
                target) != 0)
      return -1;
  }
  int prc = parse_profile(o);
  if (prc != 0)
    return prc;
  if (!o->model) {
    cli_error("bench: missing MODEL.ini (try bench --help)");
    return -1;
  }
  nto_io_kind io;
  size_t budget;
  if (o->io && cli_io(o->io, &io) != 0)
    return -1;
  if (o->budget && cli_budget("--memory-budget", o->budget, &budget) != 0)
    return -1;
  if (o->recompute &&
      cli_recompute_word(o->recompute, strlen(o->recompute)) < 0) {
    cli_error("option --recompute: expected auto, cheap, segments, "
              "segments:N or off, got '%s'",
              o->recompute);
    return -1;
  }
  if (cli_channel_groups(o->groups, &o->group_bytes) != 0)
    return -1;
  if (o->endurance &&
      setup_flash_endurance("--flash-endurance", o->endurance, &o->tbw) != 0)
    return -1;
  if (setup_ram_swap_env(&o->allow_ram_swap) != 0)
    return -1;
  return parse_windows(o);
}

/* The command line as typed, arguments shell-quoted where needed. */
static void quote_cmdline(int argc, char **argv, char *out, size_t len) {
  static const char plain[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrs"
                              "tuvwxyz0123456789_./=,:+-";
  size_t n = (size_t)snprintf(out, len, "nntrainer-offload");
  for (int i = 0; i < argc && n < len; i++) {
    const char *a = argv[i];
    if (*a && strspn(a, plain) == strlen(a)) {
      n += (size_t)snprintf(out + n, len - n, " %s", a);
      continue;
    }
    n += (size_t)snprintf(out + n, len - n, " '");
    for (; *a && n < len; a++)
      n += (size_t)snprintf(out + n, len - n, "%s",
                            *a == '\'' ? "'\\''" : (char[2]){*a, 0});
    if (n < len)
      n += (size_t)snprintf(out + n, len - n, "'");
  }
}

/* ---- the temporary directory ------------------------------------------- */

static int make_tmpdir(char *out, size_t len, nto_err *err) {
  const char *t = getenv("TMPDIR");
  snprintf(out, len, "%s/nto-bench.XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(out)) {
    int e = errno;
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s", out);
    out[0] = '\0';
    return nto_err_set(err, NTO_EIO, "cannot create %s: %s", tmpl, strerror(e));
  }
  return 0;
}

/* Remove the directory and the files bench put in it (no subdirectories). */
static void remove_tmpdir(const char *dir) {
  if (!dir[0])
    return;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char path[PATH_MAX + 256];
    while ((e = readdir(d)) != NULL) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
        continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* ---- swap directory bandwidth ------------------------------------------ */

/* Measure the swap directory's sequential write and read bandwidth with
 * the runs' backend (io/probe.h). */
static int measure_bandwidth(const bench_opts *o, bandwidth *bw, nto_err *err) {
  nto_io_kind kind = NTO_IO_AUTO;
  if (o->io && cli_io(o->io, &kind) != 0) /* checked by parse_opts */
    return nto_err_set(err, NTO_EINVAL, "--io %s", o->io);
  return nto_swap_probe(bw->dir, kind, !o->no_direct, 0, &bw->p, err);
}

/* ---- stop signals ------------------------------------------------------- */

/* The stop signal received (SIGINT, SIGTERM, SIGHUP), 0: none; the child
 * being waited for, 0: none; the cgroups to leave on an abort; bench's
 * own pid (a child between fork and exec runs the handler too). */
static volatile sig_atomic_t stop_signal, child_pid, bench_pid;
static const profile_cgroups *stop_pc;

/* Async-signal-safe: write(2) only. */
static void say(const char *s) {
  if (write(STDERR_FILENO, s, strlen(s)) < 0)
    return; /* nothing to tell it with */
}

/* The first stop signal kills the run in progress (SIGKILL: bench stops
 * anyway, and the run's files are in bench's temporary directory) and
 * asks cmd_bench to clean up and stop after it (or after the bandwidth
 * probe); a second one aborts at once: the child killed and reaped, this
 * process out of the profile's cgroups and those removed (the temporary
 * directory is left). */
static void on_stop_signal(int sig) {
  int e = errno;
  if (getpid() != (pid_t)bench_pid)
    _exit(128 + sig); /* a child before its exec */
  pid_t c = (pid_t)child_pid;
  if (c > 0)
    kill(c, SIGKILL);
  if (stop_signal) {
    if (c > 0)
      waitpid(c, NULL, 0);
    if (stop_pc)
      profile_abort(stop_pc);
    say("bench: stop signal again: aborted\n");
    _exit(128 + sig);
  }
  stop_signal = sig;
  say("bench: stop signal: the run in progress is killed, bench stops "
      "(again to abort at once)\n");
  errno = e;
}

/* Install (on; pc: the cgroups to leave on an abort, or NULL) or remove
 * (!on) the stop signals' handler. */
static void stop_signals(int on, const profile_cgroups *pc) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on ? on_stop_signal : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; i++)
    sigaddset(&sa.sa_mask, sigs[i]);
  sa.sa_flags = SA_RESTART;
  bench_pid = (sig_atomic_t)getpid();
  stop_pc = pc;
  for (int i = 0; i < 3; i++)
    sigaction(sigs[i], &sa, NULL);
}

/* ---- one configuration in a child process ------------------------------ */

/* Child side: redirect output and exec exe; never returns. Only
 * async-signal-safe calls (the parent may have BLAS threads). */
static void child_exec(const char *exe, char **args, const char *out,
                       const char *errf) {
  static const char msg[] = "bench: cannot execute the program\n";
  int in = open("/dev/null", O_RDONLY);
  int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int fe = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (in < 0 || fo < 0 || fe < 0 || dup2(in, 0) < 0 || dup2(fo, 1) < 0 ||
      dup2(fe, 2) < 0)
    _exit(127);
  execv(exe, args);
  if (write(2, msg, sizeof msg - 1) < 0)
    _exit(127);
  _exit(127);
}

/* Run exe with args, stdout into out, stderr into errf, stdin from
 * /dev/null; *status: its wait status. Returns 0 or NTO_EIO (fork). */
static int spawn_wait(const char *exe, char **args, const char *out,
                      const char *errf, int *status, nto_err *err) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return nto_err_set(err, NTO_EIO, "fork: %s", strerror(errno));
  if (pid == 0)
    child_exec(exe, args, out, errf);
  child_pid = (sig_atomic_t)pid;
  while (waitpid(pid, status, 0) < 0)
    if (errno != EINTR) {
      child_pid = 0;
      return nto_err_set(err, NTO_EIO, "waitpid: %s", strerror(errno));
    }
  child_pid = 0;
  return 0;
}

/* "TMP/LABEL.ext" */
static void tmp_path(const bench *b, const char *label, const char *ext,
                     char *out, size_t len) {
  snprintf(out, len, "%s/%s.%s", b->tmp, label, ext);
}

/* The files of configuration label in round k (0-based): label.kK.ext. */
static void run_path(const bench *b, const char *label, int k, const char *ext,
                     char *out, size_t len) {
  char name[LABEL_MAX + 16];
  snprintf(name, sizeof name, "%s.k%d", label, k);
  tmp_path(b, name, ext, out, len);
}

/* Run the train child of configuration c in round k; c->failure on
 * failure. */
static int run_child(const bench *b, config *c, int k) {
  const bench_opts *o = &b->o;
  char iters[32], warm[32], batch[32], json[PATH_LEN];
  char save[PATH_LEN], out[PATH_LEN], errf[PATH_LEN];
  snprintf(iters, sizeof iters, "%ld", o->warmup + o->iterations);
  snprintf(warm, sizeof warm, "%ld", o->warmup);
  snprintf(batch, sizeof batch, "%ld", o->batch);
  run_path(b, c->label, k, "json", json, sizeof json);
  run_path(b, c->label, k, "bin", save, sizeof save);
  run_path(b, c->label, k, "out", out, sizeof out);
  run_path(b, c->label, k, "err", errf, sizeof errf);
  /* "N+off@SIZE": --window N --recompute off --memory-budget SIZE
   * (likewise +auto; each part optional) */
  char window[LABEL_MAX];
  snprintf(window, sizeof window, "%s", c->label);
  char *budget = strchr(window, '@');
  if (budget)
    *budget++ = '\0';
  char *recompute = strchr(window, '+');
  if (recompute)
    *recompute++ = '\0';
  char *args[48]; /* 37 at most, the NULL included */
  int n = 0;
#define ARG(s) (args[n++] = (char *)(s))
  ARG("nntrainer-offload"), ARG("train"), ARG(o->model);
  if (strcmp(window, "budget") != 0)
    ARG("--window"), ARG(window);
  ARG("--iterations"), ARG(iters);
  ARG("--warmup"), ARG(warm), ARG("--eval-samples"), ARG("0");
  ARG("--data"), ARG(o->data), ARG("--report-json"), ARG(json);
  ARG("--save"), ARG(save);
  if (o->batch)
    ARG("--batch-size"), ARG(batch);
  if (o->swap_dir)
    ARG("--swap-dir"), ARG(o->swap_dir);
  if (o->io)
    ARG("--io"), ARG(o->io);
  if (budget || o->budget)
    ARG("--memory-budget"), ARG(budget ? budget : o->budget);
  if (recompute || o->recompute)
    ARG("--recompute"), ARG(recompute ? recompute : o->recompute);
  if (o->freeze_until)
    ARG("--freeze-until"), ARG(o->freeze_until);
  if (o->no_direct)
    ARG("--no-direct");
  if (o->allow_ram_swap)
    ARG("--allow-tmpfs-swap");
  if (o->endurance)
    ARG("--flash-endurance"), ARG(o->endurance);
  if (o->optimizer_state)
    ARG("--optimizer-state"), ARG(o->optimizer_state);
  if (o->updates)
    ARG("--updates"), ARG(o->updates);
  if (o->groups)
    ARG("--channel-groups"), ARG(o->groups);
  args[n] = NULL;
#undef ARG
  nto_err err = {0};
  int st = 0;
  if (spawn_wait("/proc/self/exe", args, out, errf, &st, &err) != 0) {
    snprintf(c->failure, sizeof c->failure, "%s", err.msg);
    return -1;
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    return 0;
  if (WIFEXITED(st))
    snprintf(c->failure, sizeof c->failure, "train exited with status %d",
             WEXITSTATUS(st));
  else
    snprintf(c->failure, sizeof c->failure, "train killed by signal %d",
             WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return -1;
}

/* Print the last STDERR_TAIL lines of file (else of alt when file is
 * empty) to stderr, indented. */
static void print_tail(const char *file, const char *alt) {
  char lines[STDERR_TAIL][256], line[256];
  int n = 0;
  FILE *f = fopen(file, "r");
  if (f) {
    while (fgets(line, sizeof line, f))
      memcpy(lines[n++ % STDERR_TAIL], line, sizeof line);
    fclose(f);
  }
  if (n == 0 && alt) {
    print_tail(alt, NULL);
    return;
  }
  for (int i = n > STDERR_TAIL ? n - STDERR_TAIL : 0; i < n; i++) {
    const char *l = lines[i % STDERR_TAIL];
    fprintf(stderr, "  | %s%s", l, strchr(l, '\n') ? "" : "\n");
  }
}

/* ---- the --report-json reader ------------------------------------------ */

/* What a known key holds: a number, a string, a boolean, the window (a
 * number or a string), an array of numbers (its length is kept), an array
 * of numbers kept (a malloc'd double array; its length goes to the long
 * that follows it in the report: F_ARRAY's len is that long's offset from
 * dst). */
typedef enum { F_NUM, F_STR, F_BOOL, F_WINDOW, F_NUMS, F_ARRAY } field_kind;

typedef struct field {
  const char *key;
  field_kind kind;
  void *dst;  /* double*, char*, int*, char*, long* or double** */
  size_t len; /* F_STR, F_WINDOW: buffer size; F_ARRAY: see above */
  int seen;
} field;

/* An array of numbers; *count: its length. */
static int jr_numbers(nto_json *j, long *count) {
  int more, rc = nto_json_array(j);
  *count = 0;
  while (rc == 0 && (rc = nto_json_next(j, &more)) == 0 && more)
    if ((rc = nto_json_number(j, NULL)) == 0)
      ++*count;
  return rc;
}

/* An array of numbers into a malloc'd *out of *count. */
static int jr_array(nto_json *j, double **out, long *count) {
  int more, rc = nto_json_array(j);
  long cap = 0;
  *count = 0;
  while (rc == 0 && (rc = nto_json_next(j, &more)) == 0 && more) {
    if (*count == cap) {
      cap = cap ? 2 * cap : 256;
      double *v = realloc(*out, (size_t)cap * sizeof *v);
      if (!v)
        return nto_json_fail(j, "out of memory");
      *out = v;
    }
    rc = nto_json_number(j, &(*out)[*count]);
    *count += rc == 0;
  }
  return rc;
}

/* The value of known key f, of the kind it must have. */
static int jr_field(nto_json *j, field *f) {
  double x;
  int rc;
  switch (f->kind) {
  case F_NUM:
    return nto_json_number(j, f->dst);
  case F_ARRAY:
    return jr_array(j, f->dst, (long *)((char *)f->dst + f->len));
  case F_BOOL:
    return nto_json_bool(j, f->dst);
  case F_NUMS:
    return jr_numbers(j, f->dst);
  case F_WINDOW:
    if (nto_json_peek(j) == NTO_JSON_STRING)
      break;
    rc = nto_json_number(j, &x);
    if (rc == 0)
      snprintf(f->dst, f->len, "%.0f", x);
    return rc;
  case F_STR:
    break;
  }
  return nto_json_string_buf(j, f->dst, f->len);
}

/* The top-level object of file: known keys into fields, others skipped.
 * *key: the known key whose value failed to read (for the message), else
 * left NULL. */
static int jr_object(nto_json *j, field *fields, const char **key,
                     const char *file, nto_err *err) {
  int more, rc = nto_json_object(j, 0);
  char *k;
  while (rc == 0 && (rc = nto_json_key(j, &k, &more)) == 0 && more) {
    field *f = fields;
    while (f->key && strcmp(f->key, k) != 0)
      f++;
    if (f->key && f->seen)
      rc = nto_err_set(err, NTO_EDATA, "%s: key '%s' given twice", file, k);
    else if (f->key && (rc = jr_field(j, f)) != 0)
      *key = f->key;
    else if (!f->key)
      rc = nto_json_skip(j);
    if (f->key)
      f->seen = 1;
    free(k);
  }
  return rc;
}

/* Read a train --report-json file into r. Every key bench uses must be
 * present; the error names the file and the key. */
static int read_report(const char *path, report *r, nto_err *err) {
  field fields[] = {
      {"model", F_STR, r->model, sizeof r->model, 0},
      {"batch", F_NUM, &r->batch, 0, 0},
      {"iterations", F_NUM, &r->iterations, 0, 0},
      {"warmup", F_NUM, &r->warmup, 0, 0},
      {"measured_iterations", F_NUM, &r->measured, 0, 0},
      {"window", F_WINDOW, r->window, sizeof r->window, 0},
      {"io", F_STR, r->io, sizeof r->io, 0},
      {"recompute", F_STR, r->recompute, sizeof r->recompute, 0},
      {"direct", F_BOOL, &r->direct, 0, 0},
      {"peak_rss_bytes", F_NUM, &r->peak_rss, 0, 0},
      {"resident_peak_bytes", F_NUM, &r->resident_peak, 0, 0},
      {"iteration_ms_median", F_NUM, &r->median_ms, 0, 0},
      {"iteration_ms_p90", F_NUM, &r->p90_ms, 0, 0},
      {"stall_ms_per_iteration", F_NUM, &r->stall_ms, 0, 0},
      {"read_mib_per_iteration", F_NUM, &r->read_mib, 0, 0},
      {"written_mib_per_iteration", F_NUM, &r->written_mib, 0, 0},
      {"iteration_ms", F_NUMS, &r->n_iteration_ms, 0, 0},
      {"final_region_bytes", F_NUM, &r->region, 0, 0},
      {"step_ms", F_ARRAY, &r->step_ms,
       offsetof(report, n_step_ms) - offsetof(report, step_ms), 0},
      {"recomputed_convolutions", F_NUM, &r->recomputed_convs, 0, 0},
      {"segment_convolutions", F_NUM, &r->segment_convs, 0, 0},
      {"convolutions_kept", F_BOOL, &r->convs_kept, 0, 0},
      {"recompute_segments", F_BOOL, &r->segments, 0, 0},
      {"iterations_per_epoch", F_NUM, &r->per_epoch, 0, 0},
      {"written_bytes_per_epoch", F_NUM, &r->written_epoch, 0, 0},
      {NULL, F_NUM, NULL, 0, 0}};
  char *buf = NULL;
  size_t len = 0;
  memset(r, 0, sizeof *r);
  int rc = nto_file_read_all(path, REPORT_MAX, &buf, &len, err);
  if (rc != 0)
    return rc;
  nto_json j;
  const char *key = NULL;
  uint64_t at = 0;
  nto_json_init(&j, buf, len, 0, REPORT_DEPTH, err);
  rc = jr_object(&j, fields, &key, path, err);
  if (rc == 0 && !nto_json_eof(&j))
    rc = nto_json_fail(&j, "text after the object");
  const char *what = nto_json_error(&j, &at);
  if (rc == NTO_EDATA && what && key)
    nto_err_set(err, rc, "%s: key '%s': %s (byte %llu)", path, key, what,
                (unsigned long long)at);
  else if (rc == NTO_EDATA && what)
    nto_err_set(err, rc, "%s: byte %llu: %s", path, (unsigned long long)at,
                what);
  nto_json_free(&j);
  free(buf);
  for (field *f = fields; rc == 0 && f->key; f++)
    if (!f->seen)
      rc = nto_err_set(err, NTO_EDATA, "%s: key '%s' missing", path, f->key);
  if (rc != 0) {
    free(r->step_ms);
    r->step_ms = NULL;
  }
  return rc;
}

/* ---- comparing, deriving ----------------------------------------------- */

/* *same = 1 if files a and b have the same bytes. */
static int same_bytes(const char *a, const char *b, int *same, nto_err *err) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int rc = 0;
  *same = 0;
  if (!fa || !fb)
    rc = nto_err_set(err, NTO_EIO, "cannot open %s: %s", fa ? b : a,
                     strerror(errno));
  while (rc == 0) {
    char x[65536], y[65536];
    size_t n = fread(x, 1, sizeof x, fa), m = fread(y, 1, sizeof y, fb);
    if (ferror(fa) || ferror(fb))
      rc = nto_err_set(err, NTO_EIO, "cannot read %s or %s", a, b);
    else if (n != m || memcmp(x, y, n) != 0)
      break;
    else if (n == 0) {
      *same = 1;
      break;
    }
  }
  if (fa)
    fclose(fa);
  if (fb)
    fclose(fb);
  return rc;
}

/* Compare round k's saved weights of every configuration with the
 * reference's of round 0, then delete round k's files but those (at most
 * one round of weight files on disk; the .safetensors copy that train
 * writes next to each .bin is never compared and goes at once). identical:
 * "yes" while every round matched, "no" once one did not, "-" when the run or
 * the reference failed (or was never compared). */
static void compare_round(bench *b, int k) {
  const config *ref = &b->cfg[b->ref];
  char rp[PATH_LEN], cp[PATH_LEN];
  run_path(b, ref->label, 0, "bin", rp, sizeof rp);
  for (int i = 0; i < b->o.n; i++) {
    config *c = &b->cfg[i];
    int same = 0;
    nto_err err = {0};
    run_path(b, c->label, k, "bin", cp, sizeof cp);
    if (!c->ok || !ref->ok) /* failures are final: never "yes" again */
      c->identical = "-";
    else if (strcmp(c->identical, "no") != 0) {
      if (same_bytes(rp, cp, &same, &err) != 0)
        cli_error("bench: %s", err.msg);
      c->identical = same ? "yes" : "no";
    }
    if (i != b->ref || k > 0)
      unlink(cp);
    run_path(b, c->label, k, "safetensors", cp, sizeof cp);
    unlink(cp);
  }
}

/* The number of configurations whose weights differ (or could not be
 * compared) after compare_round. */
static int count_differ(const bench *b) {
  int bad = 0;
  for (int i = 0; i < b->o.n; i++)
    bad += b->cfg[i].ok && b->cfg[b->ref].ok &&
           strcmp(b->cfg[i].identical, "yes") != 0;
  return bad;
}

/* Median of v[0..n) (n >= 1; v is reordered). */
static double median(double *v, int n) {
  for (int i = 1; i < n; i++) /* insertion sort: n <= MAX_ROUNDS */
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The figure at byte offset off of the n runs' reports: their median, or
 * their largest (largest != 0). */
static double over_runs(const report *runs, int n, size_t off, int largest) {
  double v[MAX_ROUNDS];
  for (int k = 0; k < n; k++)
    memcpy(&v[k], (const char *)&runs[k] + off, sizeof v[k]);
  double m = median(v, n); /* sorts v */
  return largest ? v[n - 1] : m;
}

/* c->r from its runs: round 0's report with the figures over the rounds. */
static void summarize_runs(config *c, int n) {
  const report *u = c->runs;
  c->r = u[0];
#define OVER(f, largest)                                                       \
  (c->r.f = over_runs(u, n, offsetof(report, f), largest))
  OVER(peak_rss, 1);
  OVER(resident_peak, 1);
  OVER(median_ms, 0);
  OVER(p90_ms, 0);
  OVER(stall_ms, 0);
  OVER(read_mib, 0);
  OVER(written_mib, 0);
  OVER(written_epoch, 0);
  OVER(region_floor_ms, 0);
#undef OVER
}

/* Per round: floor = max(compute, read / read bw + written / write bw), in
 * ms, compute = that round's `all` median (else the run's median minus its
 * stall); ratio = median / floor. Then the figures over the rounds. */
static void derive_floors(bench *b) {
  int R = (int)b->o.rounds;
  const config *all = b->all >= 0 && b->cfg[b->all].ok ? &b->cfg[b->all] : NULL;
  for (int i = 0; i < b->o.n; i++) {
    config *c = &b->cfg[i];
    if (!c->ok)
      continue;
    double floors[MAX_ROUNDS];
    for (int k = 0; k < R; k++) {
      const report *r = &c->runs[k];
      double compute =
          all ? all->runs[k].median_ms : r->median_ms - r->stall_ms;
      double io = 1e3 * (r->read_mib / b->bw.p.read_mib_s +
                         r->written_mib / b->bw.p.write_mib_s);
      floors[k] = compute > io ? compute : io;
      c->ratios[k] = floors[k] > 0 ? r->median_ms / floors[k] : 0;
      c->region_ratios[k] =
          r->region_floor_ms > 0 ? r->median_ms / r->region_floor_ms : 0;
    }
    summarize_runs(c, R);
    c->floor_ms = median(floors, R);
    double ratios[MAX_ROUNDS];
    memcpy(ratios, c->ratios, sizeof ratios);
    c->ratio = median(ratios, R);
    memcpy(ratios, c->region_ratios, sizeof ratios);
    c->region_ratio = c->r.region_floor_ms > 0 ? median(ratios, R) : 0;
  }
}

/* ---- output ------------------------------------------------------------- */

#define MIB(x) ((x) / 1048576.0)

static int label_width(const bench *b) {
  int w = 6;
  for (int i = 0; i < b->o.n; i++)
    if ((int)strlen(b->cfg[i].label) > w)
      w = (int)strlen(b->cfg[i].label);
  return w;
}

static void print_header(const bench *b) {
  const bandwidth *bw = &b->bw;
  printf("bench %s: batch %ld, %ld iterations measured after %ld warm-up, "
         "data %s\n",
         b->o.model, b->batch, b->o.iterations, b->o.warmup, b->o.data);
  if (b->o.rounds > 1)
    printf("%ld rounds, configurations interleaved: medians over the rounds "
           "(peak RSS, resident: largest); ratio: median of the rounds' "
           "ratios\n",
           b->o.rounds);
  printf("swap %s: write %.0f MiB/s, read %.0f MiB/s (%s, %s%s, depth %u, "
         "%zu MiB requests, %llu MiB)\n",
         bw->dir, bw->p.write_mib_s, bw->p.read_mib_s,
         bw->p.direct     ? "O_DIRECT"
         : b->o.no_direct ? "buffered (--no-direct)"
                          : "buffered: O_DIRECT refused by the filesystem",
         bw->p.io, bw->p.fixed ? " with registered buffers" : "", bw->p.depth,
         bw->p.block >> 20, (unsigned long long)(bw->p.bytes >> 20));
  if (b->o.profile)
    profile_print(&b->pc, stdout);
  cli_print_blas();
  printf("command: %s\n\n", b->cmdline);
}

/* The configuration with the smallest peak RSS among those whose median
 * iteration time is within NEAR_ALL x the `all` run's (`all` itself
 * included; the faster one on a tie), or -1 when `all` is absent or
 * failed. */
static int smallest_within(const bench *b) {
  if (b->all < 0 || !b->cfg[b->all].ok)
    return -1;
  double limit = NEAR_ALL * b->cfg[b->all].r.median_ms;
  int best = b->all;
  for (int i = 0; i < b->o.n; i++) {
    const report *r = &b->cfg[i].r, *s = &b->cfg[best].r;
    if (b->cfg[i].ok && r->median_ms <= limit &&
        (r->peak_rss < s->peak_rss ||
         (r->peak_rss == s->peak_rss && r->median_ms < s->median_ms)))
      best = i;
  }
  return best;
}

/* The line under the table naming smallest_within's configuration (with
 * `all` in the list, or under a profile: then why there is none). */
static void print_smallest(const bench *b) {
  int k = smallest_within(b);
  if (b->all < 0 && !b->o.profile)
    return;
  printf("\nsmallest peak RSS within %.2fx of all resident: ", NEAR_ALL);
  if (k >= 0)
    printf("%s (%.1f MiB, ratio %.2f)\n", b->cfg[k].label,
           MIB(b->cfg[k].r.peak_rss),
           b->cfg[k].r.median_ms / b->cfg[b->all].r.median_ms);
  else
    printf("- (%s)\n",
           b->all < 0 ? "needs all in --windows" : "the all run failed");
}

/* The line under the table naming the runs where train's --recompute auto
 * chose segments (train.c choose_recompute: a slow swap device against the
 * CPU, or the budget), none if none did. */
static void print_segments(const bench *b) {
  int first = 1;
  for (int i = 0; i < b->o.n; i++) {
    const config *k = &b->cfg[i];
    if (!k->ok || !k->r.segments || !strncmp(k->r.recompute, "segments", 8))
      continue;
    printf("%s %s", first ? "\nrecompute: segments, auto's choice, in" : ",",
           k->label);
    first = 0;
  }
  if (!first)
    printf(" (train's line says why)\n");
}

/* The line under the table: each run's swap writes per epoch of its data
 * (the written MiB/it column x the iterations of an epoch) and their share
 * of the flash endurance. */
static void print_wear(const bench *b) {
  char a[32], c[32];
  int first = 1;
  for (int i = 0; i < b->o.n; i++) {
    const config *k = &b->cfg[i];
    if (!k->ok)
      continue;
    if (first)
      printf("\nflash wear per epoch (%.0f iterations of the data):",
             k->r.per_epoch);
    printf("%s %s: %s (%s)", first ? "" : ",", k->label,
           k->r.written_epoch > 0
               ? nto_format_bytes((uint64_t)k->r.written_epoch, a, sizeof a)
               : "0",
           setup_share(k->r.written_epoch / (b->o.tbw * 1e12), c, sizeof c));
    first = 0;
  }
  if (!first)
    printf(" of %g TBW (10^12 bytes): %s\n", b->o.tbw,
           b->o.endurance ? "--flash-endurance"
                          : "a typical 32 GB eMMC's rating, the default "
                            "(--flash-endurance TBW)");
}

static void print_table(const bench *b) {
  int w = label_width(b);
  printf("%-*s %6s %9s %9s %9s %9s %8s %8s %8s %9s %6s %9s %6s %s\n", w,
         "config", "window", "peak RSS", "resident", "median", "p90", "stall",
         "read", "written", "floor", "ratio", "region", "ratio", "weights");
  printf("%-*s %6s %9s %9s %9s %9s %8s %8s %8s %9s %6s %9s %6s %s\n", w, "", "",
         "MiB", "MiB", "ms", "ms", "ms/it", "MiB/it", "MiB/it", "ms", "",
         "floor ms", "", "identical");
  for (int i = 0; i < b->o.n; i++) {
    const config *c = &b->cfg[i];
    const report *r = &c->r;
    if (!c->ok) {
      printf("%-*s failed: %s\n", w, c->label, c->failure);
      continue;
    }
    char rf[16] = "-", rr[16] = "-";
    if (r->region_floor_ms > 0) {
      snprintf(rf, sizeof rf, "%.1f", r->region_floor_ms);
      snprintf(rr, sizeof rr, "%.2f", c->region_ratio);
    }
    printf("%-*s %6s %9.1f %9.1f %9.1f %9.1f %8.1f %8.1f %8.1f %9.1f %6.2f "
           "%9s %6s %s\n",
           w, c->label, r->window, MIB(r->peak_rss), MIB(r->resident_peak),
           r->median_ms, r->p90_ms, r->stall_ms, r->read_mib, r->written_mib,
           c->floor_ms, c->ratio, rf, rr, c->identical);
  }
  if (b->o.rounds > 1) {
    printf("\nratio per round:\n");
    for (int i = 0; i < b->o.n; i++) {
      if (!b->cfg[i].ok)
        continue;
      printf("%-*s", w, b->cfg[i].label);
      for (int k = 0; k < b->o.rounds; k++)
        printf(" %6.2f", b->cfg[i].ratios[k]);
      if (b->cfg[i].region_ratio > 0) {
        printf("   to the region floor:");
        for (int k = 0; k < b->o.rounds; k++)
          printf(" %6.2f", b->cfg[i].region_ratios[k]);
      }
      printf("\n");
    }
  }
  print_smallest(b);
  print_segments(b);
  print_wear(b);
  if (b->o.profile) {
    printf("\n");
    profile_print_stats(&b->pc, stdout);
  }
  printf("\nfloor = max(compute, read/read bandwidth + written/write "
         "bandwidth); compute = %s\n",
         b->all >= 0 && b->cfg[b->all].ok
             ? "the all run's median"
             : "each run's median minus its stall");
  printf("region floor = the fastest the run's tensor region allows at "
         "these bandwidths, from its own step times (docs/design.md); ratio "
         "= median / region floor\n");
  printf("weights compared with the %s run's (%s)\n", b->cfg[b->ref].label,
         "nntrainer .bin, byte for byte");
}

static const char csv_header[] =
    "config,status,window,peak_rss_mib,resident_peak_mib,iteration_ms_median,"
    "iteration_ms_p90,stall_ms_per_iteration,read_mib_per_iteration,"
    "written_mib_per_iteration,floor_ms,ratio,region_floor_ms,region_ratio,"
    "iterations_per_epoch,written_mib_per_epoch,epoch_endurance_fraction,"
    "weights_identical\n";

static int close_out(FILE *f, const char *path, const char *opt, nto_err *err) {
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return nto_err_set(err, NTO_EIO, "%s: cannot write %s", opt, path);
  return 0;
}

static int write_csv(const bench *b, const char *path, nto_err *err) {
  FILE *f = fopen(path, "w");
  if (!f)
    return nto_err_set(err, NTO_EIO, "--csv: cannot open %s: %s", path,
                       strerror(errno));
  fputs(csv_header, f);
  for (int i = 0; i < b->o.n; i++) {
    const config *c = &b->cfg[i];
    const report *r = &c->r;
    if (!c->ok) {
      fprintf(f, "%s,failed,,,,,,,,,,,,,,,,-\n", c->label);
      continue;
    }
    fprintf(f, "%s,ok,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,",
            c->label, r->window, MIB(r->peak_rss), MIB(r->resident_peak),
            r->median_ms, r->p90_ms, r->stall_ms, r->read_mib, r->written_mib,
            c->floor_ms, c->ratio);
    if (r->region_floor_ms > 0)
      fprintf(f, "%.3f,%.4f,", r->region_floor_ms, c->region_ratio);
    else
      fprintf(f, ",,");
    fprintf(f, "%.0f,%.3f,%.9g,%s\n", r->per_epoch, MIB(r->written_epoch),
            r->written_epoch / (b->o.tbw * 1e12), c->identical);
  }
  return close_out(f, path, "--csv", err);
}

static void json_config(FILE *f, const config *c, int rounds, double tbw) {
  const report *r = &c->r;
  fprintf(f, "    {\"config\": ");
  cli_json_string(f, c->label);
  if (!c->ok) {
    fprintf(f, ", \"status\": \"failed\", \"window\": null, "
               "\"recompute\": null, \"recompute_segments\": null, "
               "\"segment_convolutions\": null, "
               "\"peak_rss_mib\": null, \"resident_peak_mib\": null, "
               "\"iteration_ms_median\": null, \"iteration_ms_p90\": null, "
               "\"stall_ms_per_iteration\": null, "
               "\"read_mib_per_iteration\": null, "
               "\"written_mib_per_iteration\": null, "
               "\"iterations_per_epoch\": null, "
               "\"written_mib_per_epoch\": null, "
               "\"epoch_endurance_fraction\": null, \"floor_ms\": null, "
               "\"ratio\": null, \"ratios\": null, "
               "\"region_floor_ms\": null, \"region_ratio\": null, "
               "\"weights_identical\": \"-\"}");
    return;
  }
  fprintf(f, ", \"status\": \"ok\", \"window\": ");
  if (!strcmp(r->window, "all"))
    fprintf(f, "\"all\"");
  else
    fprintf(f, "%s", r->window);
  fprintf(f, ", \"recompute\": ");
  cli_json_string(f, r->recompute);
  fprintf(f, ", \"recompute_segments\": %s", r->segments ? "true" : "false");
  fprintf(f, ", \"segment_convolutions\": %.0f", r->segment_convs);
  fprintf(f,
          ", \"peak_rss_mib\": %.3f, \"resident_peak_mib\": %.3f, "
          "\"iteration_ms_median\": %.3f, \"iteration_ms_p90\": %.3f, "
          "\"stall_ms_per_iteration\": %.3f, "
          "\"read_mib_per_iteration\": %.3f, "
          "\"written_mib_per_iteration\": %.3f, "
          "\"iterations_per_epoch\": %.0f, "
          "\"written_mib_per_epoch\": %.3f, "
          "\"epoch_endurance_fraction\": %.9g, \"floor_ms\": %.3f, "
          "\"ratio\": %.4f, \"ratios\": [",
          MIB(r->peak_rss), MIB(r->resident_peak), r->median_ms, r->p90_ms,
          r->stall_ms, r->read_mib, r->written_mib, r->per_epoch,
          MIB(r->written_epoch), r->written_epoch / (tbw * 1e12), c->floor_ms,
          c->ratio);
  for (int k = 0; k < rounds; k++)
    fprintf(f, "%s%.4f", k ? ", " : "", c->ratios[k]);
  if (r->region_floor_ms > 0)
    fprintf(f, "], \"region_floor_ms\": %.3f, \"region_ratio\": %.4f",
            r->region_floor_ms, c->region_ratio);
  else
    fprintf(f, "], \"region_floor_ms\": null, \"region_ratio\": null");
  fprintf(f, ", \"weights_identical\": \"%s\"}", c->identical);
}

static int write_json(const bench *b, const char *path, nto_err *err) {
  const bandwidth *bw = &b->bw;
  FILE *f = fopen(path, "w");
  if (!f)
    return nto_err_set(err, NTO_EIO, "--json: cannot open %s: %s", path,
                       strerror(errno));
  fprintf(f, "{\n  \"model\": ");
  cli_json_string(f, b->o.model);
  fprintf(f,
          ",\n  \"batch\": %ld,\n  \"iterations\": %ld,\n"
          "  \"warmup\": %ld,\n  \"rounds\": %ld,\n"
          "  \"flash_endurance_tbw\": %.9g,\n",
          b->batch, b->o.iterations, b->o.warmup, b->o.rounds, b->o.tbw);
  fprintf(f,
          "  \"bandwidth\": {\"read_mib_s\": %.1f, \"write_mib_s\": %.1f, "
          "\"block_bytes\": %zu, \"depth\": %u, \"direct\": %s, "
          "\"io\": ",
          bw->p.read_mib_s, bw->p.write_mib_s, bw->p.block, bw->p.depth,
          bw->p.direct ? "true" : "false");
  cli_json_string(f, bw->p.io);
  fprintf(f, ", \"total_bytes\": %llu, \"swap_dir\": ",
          (unsigned long long)bw->p.bytes);
  cli_json_string(f, bw->dir);
  fprintf(f, "},\n  \"profile\": ");
  if (b->o.profile)
    profile_json(&b->pc, f);
  else
    fprintf(f, "null");
  int k = smallest_within(b);
  fprintf(f, ",\n  \"smallest_within_1_10\": ");
  if (k >= 0)
    cli_json_string(f, b->cfg[k].label);
  else
    fprintf(f, "null");
  fprintf(f, ",\n  \"configs\": [\n");
  for (int i = 0; i < b->o.n; i++) {
    json_config(f, &b->cfg[i], (int)b->o.rounds, b->o.tbw);
    fprintf(f, "%s\n", i + 1 < b->o.n ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  return close_out(f, path, "--json", err);
}

/* An executable named name in $PATH into out; 0 if found. */
static int find_in_path(const char *name, char *out, size_t len) {
  const char *path = getenv("PATH");
  if (!path || !*path)
    path = "/usr/bin:/bin";
  while (*path) {
    size_t n = strcspn(path, ":");
    snprintf(out, len, "%.*s/%s", (int)n, n ? path : ".", name);
    if (access(out, X_OK) == 0)
      return 0;
    path += n + (path[n] == ':');
  }
  return -1;
}

/* A gnuplot single-quoted string ('' stands for one quote). */
static void gp_string(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'')
      fputc('\'', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

/* The data file (rss, median, label per run) and gnuplot script. */
static int write_plot_files(const bench *b, const char *dat, const char *gp,
                            const char *svg, nto_err *err) {
  FILE *f = fopen(dat, "w");
  if (!f)
    return nto_err_set(err, NTO_EIO, "cannot open %s: %s", dat,
                       strerror(errno));
  for (int i = 0; i < b->o.n; i++)
    if (b->cfg[i].ok)
      fprintf(f, "%.3f %.3f \"%s\"\n", MIB(b->cfg[i].r.peak_rss),
              b->cfg[i].r.median_ms, b->cfg[i].label);
  if (close_out(f, dat, "--plot", err) != 0)
    return err->code;
  if (!(f = fopen(gp, "w")))
    return nto_err_set(err, NTO_EIO, "cannot open %s: %s", gp, strerror(errno));
  char title[512];
  snprintf(title, sizeof title, "%s, batch %ld: one point per window",
           b->o.model, b->batch);
  fprintf(f, "set terminal svg size 720,480 dynamic noenhanced\nset output ");
  gp_string(f, svg);
  fprintf(f, "\nset title ");
  gp_string(f, title);
  fprintf(f, "\nset xlabel 'peak RSS (MiB)'\n"
             "set ylabel 'median iteration time (ms)'\n"
             "set key off\nset grid\nset offsets graph 0.1, graph 0.1, "
             "graph 0.1, graph 0.1\nplot ");
  gp_string(f, dat);
  fprintf(f, " using 1:2 with points pointtype 7 pointsize 1, ");
  gp_string(f, dat);
  fprintf(f, " using 1:2:3 with labels offset 1,1 left\n");
  return close_out(f, gp, "--plot", err);
}

/* --plot: run gnuplot, or say why there is no plot. */
static int write_plot(const bench *b, const char *svg, nto_err *err) {
  char exe[PATH_MAX], dat[PATH_LEN], gp[PATH_LEN];
  char out[PATH_LEN], errf[PATH_LEN];
  int ran = 0;
  for (int i = 0; i < b->o.n; i++)
    ran += b->cfg[i].ok;
  if (find_in_path("gnuplot", exe, sizeof exe) != 0) {
    printf("no plot: gnuplot not found; install Debian's gnuplot-nox\n");
    return 0;
  }
  if (!ran) {
    printf("no plot: no configuration ran\n");
    return 0;
  }
  tmp_path(b, "plot", "dat", dat, sizeof dat);
  tmp_path(b, "plot", "gp", gp, sizeof gp);
  tmp_path(b, "plot", "out", out, sizeof out);
  tmp_path(b, "plot", "err", errf, sizeof errf);
  int st = 0;
  int rc = write_plot_files(b, dat, gp, svg, err);
  char *args[] = {exe, gp, NULL};
  if (rc == 0)
    rc = spawn_wait(exe, args, out, errf, &st, err);
  if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    print_tail(errf, out);
    rc = nto_err_set(err, NTO_EIO, "--plot: gnuplot failed on %s", svg);
  }
  return rc;
}

/* ---- the whole run ------------------------------------------------------ */

/* The plan-only model of a run's recompute setting (built once per
 * setting; NULL after printing why not): the report's segments (given, or
 * auto's choice), the convolutions kept under a budget, else the cheap
 * plan (offloaded runs recompute cheap convolutions). */
static nto_model *floor_model(bench *b, const report *r) {
  nto_recompute rc = !strcmp(r->recompute, "off") ? NTO_RECOMPUTE_OFF
                     : r->segments                ? NTO_RECOMPUTE_SEGMENTS
                     : r->convs_kept              ? NTO_RECOMPUTE_ACTIVATIONS
                                                  : NTO_RECOMPUTE_CHEAP;
  int seg_max = rc == NTO_RECOMPUTE_SEGMENTS ? (int)r->segment_convs : 0;
  for (int i = 0; i < b->n_plans; i++)
    if (b->plans[i].recompute == rc && b->plans[i].segments_max == seg_max)
      return b->plans[i].m;
  if (b->n_plans == FLOOR_PLANS) {
    cli_error("bench: no region floor: more than %d plans", FLOOR_PLANS);
    return NULL;
  }
  floor_plan *fp = &b->plans[b->n_plans++];
  nto_model_opts o = {.batch = (int)r->batch,
                      .plan_only = 1,
                      .window_mode = NTO_WINDOW_AUTO,
                      .recompute = rc,
                      .segments_max = seg_max,
                      .group_bytes = b->o.group_bytes,
                      .freeze_until = b->o.freeze_until};
  nto_err err = {0};
  fp->recompute = rc;
  fp->segments_max = seg_max;
  if (nto_model_create(&fp->m, &b->conf, &o, &err) != 0)
    cli_error("bench: no region floor: %s", err.msg);
  return fp->m;
}

/* r's region floor (floor.h, reads and writes sharing the device at the
 * measured bandwidths) from its plan, its region and its step times; none
 * when the run was all resident, measured no iteration, or its plan is
 * not the one rebuilt here (a note says so). Frees r->step_ms. */
static void run_floor(bench *b, report *r) {
  nto_model *m = r->n_step_ms > 0 ? floor_model(b, r) : NULL;
  const nto_plan *p = m ? nto_model_plan(m, NTO_PASS_TRAIN) : NULL;
  region_floor f;
  nto_err err = {0};
  if (p && (p->n_steps != r->n_step_ms ||
            nto_model_recomputed_convs(m) != (int)r->recomputed_convs))
    cli_error("bench: no region floor for window %s: its plan has %ld "
              "steps, bench's %d",
              r->window, r->n_step_ms, p->n_steps);
  else if (p && floor_compute(p, r->step_ms, (size_t)r->region,
                              b->bw.p.read_mib_s * 1048576.0 / 1e3,
                              b->bw.p.write_mib_s * 1048576.0 / 1e3,
                              FLOOR_SHARED, &f, &err) != 0)
    cli_error("bench: no region floor: %s", err.msg);
  else if (p)
    r->region_floor_ms = f.floor_ms;
  free(r->step_ms);
  r->step_ms = NULL;
}

/* Run configuration c in round k into c->runs[k]; c->ok = 0 (and its
 * output shown) on failure. */
static void run_one(bench *b, config *c, int k) {
  char json[PATH_LEN], out[PATH_LEN], errf[PATH_LEN];
  nto_err err = {0};
  double t0 = now_s();
  int R = (int)b->o.rounds;
  if (R > 1)
    fprintf(stderr, "bench: round %d/%d: window %s ...", k + 1, R, c->label);
  else
    fprintf(stderr, "bench: [%d/%d] window %s ...", (int)(c - b->cfg) + 1,
            b->o.n, c->label);
  int rc = run_child(b, c, k);
  run_path(b, c->label, k, "json", json, sizeof json);
  if (rc == 0 && read_report(json, &c->runs[k], &err) != 0) {
    snprintf(c->failure, sizeof c->failure, "%s", err.msg);
    rc = -1;
  }
  if (rc == 0)
    run_floor(b, &c->runs[k]);
  c->ok = rc == 0;
  fprintf(stderr, " %s (%.2f s)\n",
          c->ok         ? "ok"
          : stop_signal ? "stopped"
                        : "FAILED",
          now_s() - t0);
  if (stop_signal)
    return;
  if (c->ok && c->runs[k].measured != (double)b->o.iterations)
    fprintf(stderr,
            "bench: note: window %s measured %.0f iterations, not "
            "%ld (too few batches in one epoch of the data?)\n",
            c->label, c->runs[k].measured, b->o.iterations);
  if (c->ok)
    return;
  run_path(b, c->label, k, "out", out, sizeof out);
  run_path(b, c->label, k, "err", errf, sizeof errf);
  cli_error("bench: configuration '%s' failed: %s; the end of its output:",
            c->label, c->failure);
  print_tail(errf, out);
}

/* Run every configuration, --rounds times, interleaved (a configuration
 * that failed is not run again); compares each round's weights. Returns
 * the number of configurations that failed. */
static int run_all(bench *b) {
  for (int i = 0; i < b->o.n; i++) {
    b->cfg[i].ok = 1;
    b->cfg[i].identical = "-";
  }
  for (int k = 0; k < b->o.rounds && !stop_signal; k++) {
    for (int i = 0; i < b->o.n && !stop_signal; i++)
      if (b->cfg[i].ok)
        run_one(b, &b->cfg[i], k);
    if (!stop_signal)
      compare_round(b, k);
  }
  int failed = 0;
  for (int i = 0; i < b->o.n; i++)
    failed += !b->cfg[i].ok;
  return failed;
}

/* Model file check, the swap directory and the batch size the runs use.
 * Returns 0, or -1 after printing the config error (or the swap directory
 * refused: on tmpfs or ramfs). */
static int read_model(bench *b) {
  nto_config *c = &b->conf;
  nto_err err = {0};
  if (nto_config_load(c, b->o.model, &err) != 0) {
    cli_error("%s", err.msg);
    return -1;
  }
  cli_config_warnings(c);
  /* the runs read the INI's channel_groups themselves; the floor plans too */
  if (cli_channel_groups(setup_channel_groups(b->o.groups, c),
                         &b->o.group_bytes) != 0)
    return -1;
  setup_swap sw; /* the runs choose it alike (they inherit $TMPDIR) */
  if (setup_swap_dir(b->o.swap_dir, c->model.swap_path, b->o.model,
                     b->o.allow_ram_swap, &sw, &err) != 0) {
    cli_error("bench: %s", err.msg);
    return -1;
  }
  if (sw.note[0])
    fprintf(stderr, "bench: note: %s\n", sw.note);
  snprintf(b->bw.dir, sizeof b->bw.dir, "%s", sw.dir);
  b->batch = b->o.batch ? b->o.batch : c->model.batch_size;
  return 0;
}

/* The bench's INI and the plan-only models of the region floors. */
static void free_model(bench *b) {
  for (int i = 0; i < b->n_plans; i++)
    nto_model_free(b->plans[i].m);
  nto_config_free(&b->conf);
}

/* Tables and files after the runs; returns 0 or -1 (a file failed). */
static int write_results(bench *b) {
  nto_err err = {0};
  int rc = 0;
  for (int i = 0; i < b->o.n; i++)
    if (b->cfg[i].ok) {
      b->batch = (long)b->cfg[i].r.batch;
      break;
    }
  print_header(b);
  print_table(b);
  if (b->o.csv && write_csv(b, b->o.csv, &err) != 0)
    cli_error("%s", err.msg), rc = -1;
  if (b->o.json && write_json(b, b->o.json, &err) != 0)
    cli_error("%s", err.msg), rc = -1;
  if (b->o.plot && write_plot(b, b->o.plot, &err) != 0)
    cli_error("%s", err.msg), rc = -1;
  fflush(stdout);
  return rc;
}

/* The stop signals' handler installed (a signal then leaves no run, file
 * or cgroup behind), and with --profile bench into the profile's cgroups
 * (profile.h). Returns 0, or 1 after "skipped: --profile NAME: why" on
 * stdout: nothing was made. */
static int enter_profile(bench *b) {
  nto_err err = {0};
  const profile_cgroups *pc = &b->pc;
  stop_signals(1, b->o.profile ? &b->pc : NULL);
  if (!b->o.profile)
    return 0;
  if (profile_enter(&b->pc, b->o.profile, b->bw.dir, &err) != 0) {
    stop_signals(0, NULL);
    printf("skipped: --profile %s: %s\n", b->o.profile->name, err.msg);
    fflush(stdout);
    return 1;
  }
  fprintf(stderr,
          "bench: profile %s: cpu.cfs_quota_us %ld per period %ld in %s; "
          "swap read %llu B/s, write %llu B/s on %u:%u in %s\n",
          pc->p->name, pc->quota_back, pc->period_back, pc->cpu_dir,
          (unsigned long long)pc->read_back, (unsigned long long)pc->write_back,
          pc->major, pc->minor, pc->blkio_dir);
  return 0;
}

/* The stop signals back to their default and, with --profile, bench out
 * of the profile's cgroups, their counters read first. Returns 0, or -1
 * after printing which cgroup is left. */
static int leave_profile(bench *b) {
  nto_err err = {0};
  if (!b->o.profile) {
    stop_signals(0, NULL);
    return 0;
  }
  profile_stats(&b->pc);
  int rc = profile_leave(&b->pc, &err);
  stop_signals(0, NULL);
  if (rc != 0)
    cli_error("bench: --profile %s: %s", b->o.profile->name, err.msg);
  return rc != 0 ? -1 : 0;
}

/* After a stop signal: the runs' files and the model freed, bench out of
 * the profile's cgroups. Returns the exit status 128 + N. */
static int stopped(bench *b) {
  int sig = stop_signal;
  leave_profile(b);
  remove_tmpdir(b->tmp);
  free_model(b);
  cli_error("bench: stopped by %s: no results", sig == SIGINT   ? "SIGINT"
                                                : sig == SIGHUP ? "SIGHUP"
                                                                : "SIGTERM");
  return 128 + sig;
}

int cmd_bench(int argc, char **argv) {
  static bench b; /* large; main thread only */
  memset(&b, 0, sizeof b);
  int prc = parse_opts(argc, argv, &b.o);
  if (prc != 0)
    return prc > 0 ? CLI_OK : CLI_USAGE;
  if (read_model(&b) != 0) {
    free_model(&b);
    return CLI_USAGE;
  }
  quote_cmdline(argc, argv, b.cmdline, sizeof b.cmdline);
  b.all = -1;
  for (int i = 0; i < b.o.n; i++) {
    b.cfg[i].label = b.o.labels[i];
    if (!strcmp(b.o.labels[i], "all"))
      b.all = i;
  }
  b.ref = b.all >= 0 ? b.all : 0;
  if (enter_profile(&b) != 0) {
    free_model(&b);
    return b.o.strict ? BENCH_SKIPPED : CLI_OK;
  }
  if (stop_signal)
    return stopped(&b);
  nto_err err = {0};
  fprintf(stderr, "bench: measuring the bandwidth of %s ...\n", b.bw.dir);
  if (measure_bandwidth(&b.o, &b.bw, &err) != 0 ||
      make_tmpdir(b.tmp, sizeof b.tmp, &err) != 0) {
    if (stop_signal)
      return stopped(&b);
    cli_error("bench: %s", err.msg);
    leave_profile(&b);
    remove_tmpdir(b.tmp);
    free_model(&b);
    return CLI_RUNTIME;
  }
  if (b.o.profile && !b.bw.p.direct)
    fprintf(stderr, "bench: note: the swap directory refused O_DIRECT: "
                    "buffered writeback is not reliably throttled, so the "
                    "profile's swap bandwidth may not hold\n");
  int failed = stop_signal ? 0 : run_all(&b);
  if (stop_signal)
    return stopped(&b);
  int left = leave_profile(&b);
  int differ = count_differ(&b);
  derive_floors(&b);
  int files = write_results(&b) != 0 || left != 0;
  remove_tmpdir(b.tmp);
  free_model(&b);
  if (failed)
    cli_error("bench: %d of %d configurations failed", failed, b.o.n);
  if (differ)
    cli_error("bench: the weights of %d configuration(s) differ from the %s "
              "run's",
              differ, b.cfg[b.ref].label);
  return failed || differ || files ? CLI_RUNTIME : CLI_OK;
}

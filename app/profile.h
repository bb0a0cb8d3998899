/*
 * profile.h - `bench --profile NAME`: a class of board emulated on this
 * machine with cgroup v1, a CPU quota (cpu controller) and a bandwidth
 * throttle on the swap directory's disk (blkio controller).
 *
 * A profile gives the board's CPU as a fraction of this machine's (online
 * CPUs x fraction x cpu.cfs_period_us is the quota per period) and its
 * swap storage's sequential read and write bandwidth (bytes per second,
 * decimal as flash is rated). docs/boards.md has the sources of the
 * numbers and what such an emulation leaves out (caches, memory bandwidth,
 * flash latency).
 *
 * profile_enter makes /sys/fs/cgroup/cpu/nto-profile-PID and
 * /sys/fs/cgroup/blkio/nto-profile-PID, writes the limits, reads them back
 * and moves the calling process (all its threads) into both; every child
 * forked after that inherits them. profile_leave moves it back to the
 * cgroups it came from and removes both; profile_abort does the same from
 * a signal handler. Main thread only, except profile_abort.
 */
#ifndef NTO_APP_PROFILE_H
#define NTO_APP_PROFILE_H

#include "error.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

/* One class of board. */
typedef struct board_profile {
  const char *name;    /* "sdcard" */
  double cpu_fraction; /* of this machine's online CPUs, (0, 1] */
  uint64_t read_bps;   /* swap read, bytes per second (10^6 = MB/s) */
  uint64_t write_bps;  /* swap write, bytes per second */
  const char *what;    /* one line: the board and its storage */
} board_profile;

/* The profile named name, or NULL. */
const board_profile *profile_find(const char *name);

/* The profiles' names as "a, b, c" (static), for usage errors. */
const char *profile_names(void);

/* `--profile list`: one line per profile (name, CPU share, read and write
 * MB/s, what) to f. */
void profile_list(FILE *f);

#define PROFILE_PERIOD_US 100000L /* cpu.cfs_period_us written */

/* The cgroups of one bench run under a profile. */
typedef struct profile_cgroups {
  const board_profile *p;
  char cpu_dir[PATH_MAX], blkio_dir[PATH_MAX]; /* their paths */
  int cpu_made, blkio_made; /* the directories exist (made, not removed) */
  char cpu_home[PATH_MAX], blkio_home[PATH_MAX]; /* the cgroups left (their
                                                    cgroup.procs files) */
  int joined;                                    /* this process is in both */
  long cpus;                    /* online CPUs of this machine */
  long period_us, quota_us;     /* written to cpu.cfs_period_us, _quota_us */
  long period_back, quota_back; /* as the kernel reads them back */
  unsigned major, minor;        /* the throttled disk */
  char disk[64];                /* its name (DEVNAME), "" unknown */
  char device_note[PATH_MAX + 128]; /* how the disk was found */
  uint64_t read_back, write_back;   /* blkio.throttle.*_bps_device read back */
  /* profile_stats: what the cgroups counted while bench was in them */
  long nr_periods, nr_throttled;      /* cpu.stat; -1: not read */
  double throttled_s;                 /* cpu.stat throttled_time, seconds */
  uint64_t read_bytes, written_bytes; /* blkio.throttle.io_service_bytes
                                         of the disk */
} profile_cgroups;

/*
 * Apply profile p around this process for swap directory dir: the block
 * device under dir (its st_dev; an anonymous one, e.g. btrfs's, through
 * the mount's source in /proc/self/mountinfo; a partition replaced by its
 * whole disk, since cgroup v1 throttles whole disks only), the two cgroups
 * made and written (cpu.cfs_period_us, cpu.cfs_quota_us;
 * blkio.throttle.read_bps_device and write_bps_device as "MAJ:MIN BYTES"),
 * every value read back and compared, then this process moved into both.
 * Returns 0 (joined: call profile_leave), or NTO_EUNSUPPORTED with err
 * saying why the profile cannot be applied here (not root, no writable
 * cgroup v1 cpu or blkio controller, cgroup v2 only, no block device under
 * dir such as tmpfs, a value the kernel refused or reads back otherwise);
 * then nothing is left behind. Main thread.
 */
int profile_enter(profile_cgroups *pc, const board_profile *p, const char *dir,
                  nto_err *err);

/* What the cgroups counted so far into pc (cpu.stat's nr_periods,
 * nr_throttled, throttled_time; the disk's bytes read and written in
 * blkio.throttle.io_service_bytes); call before profile_leave. */
void profile_stats(profile_cgroups *pc);

/* Move this process back to the cgroups it came from and remove the two
 * made (a short retry while the kernel lets go of exited children).
 * Nothing when they were not made. Returns 0, or NTO_EIO naming the
 * cgroup left behind. Main thread. */
int profile_leave(profile_cgroups *pc, nto_err *err);

/* profile_leave without the messages and the retry, for a signal handler
 * (open, write, close, rmdir only) of a process whose children are gone. */
void profile_abort(const profile_cgroups *pc);

/* The header lines of a run under the profile: the board, the CPU quota
 * and the throttle as written and as read back, the disk, the cgroups. */
void profile_print(const profile_cgroups *pc, FILE *f);

/* One line: what profile_stats read (periods throttled, bytes through the
 * throttle). */
void profile_print_stats(const profile_cgroups *pc, FILE *f);

/* The profile as a JSON object (bench --json's "profile"). */
void profile_json(const profile_cgroups *pc, FILE *f);

#endif

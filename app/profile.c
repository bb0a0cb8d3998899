/*
 * profile.c - board profiles for `bench --profile`: cgroup v1 CPU quota
 * and blkio throttle around the bench process. See profile.h.
 */
#include "profile.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define CGROUP_ROOT "/sys/fs/cgroup"
#define CGROUP_V1_MAGIC 0x27e0ebL   /* statfs f_type of a cgroup v1 hierarchy */
#define CGROUP_V2_MAGIC 0x63677270L /* of cgroup2 */
#define QUOTA_MIN_US 1000L          /* the kernel's smallest cfs quota */
#define RMDIR_TRIES 20              /* x 100 ms while children are let go */

/* The numbers; docs/boards.md has where they come from. The CPU
 * fraction is of this machine's online CPUs, the bandwidths sequential,
 * in bytes per second (MB/s x 10^6). */
static const board_profile profiles[] = {
    {"pi5-nvme", 1.0 / 3, 450000000u, 350000000u,
     "Raspberry Pi 5 (4x Cortex-A76, 2.4 GHz), NVMe SSD on a PCIe 2.0 x1 HAT"},
    {"emmc", 1.0 / 6, 250000000u, 100000000u,
     "a Cortex-A55/A72-class board with an eMMC 5.1 module"},
    {"sdcard", 1.0 / 10, 45000000u, 25000000u,
     "a Cortex-A53/A72-class board on an A1/A2 microSD card"},
};
#define N_PROFILES ((int)(sizeof profiles / sizeof profiles[0]))

const board_profile *profile_find(const char *name) {
  for (int i = 0; i < N_PROFILES; i++)
    if (!strcmp(profiles[i].name, name))
      return &profiles[i];
  return NULL;
}

const char *profile_names(void) {
  static char names[128];
  if (!names[0])
    for (int i = 0; i < N_PROFILES; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
               i ? ", " : "", profiles[i].name);
  return names;
}

void profile_list(FILE *f) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  fprintf(f, "%-9s %-17s %10s %10s  %s\n", "profile", "CPU", "read", "write",
          "board");
  for (int i = 0; i < N_PROFILES; i++) {
    const board_profile *p = &profiles[i];
    char cpu[32];
    snprintf(cpu, sizeof cpu, "1/%.0f (%.2f of %ld)", 1 / p->cpu_fraction,
             p->cpu_fraction * (double)cpus, cpus);
    fprintf(f, "%-9s %-17s %5.0f MB/s %5.0f MB/s  %s\n", p->name, cpu,
            (double)p->read_bps / 1e6, (double)p->write_bps / 1e6, p->what);
  }
  fprintf(f, "CPU: the share of this machine's online CPUs the quota "
             "allows (cpu.cfs_quota_us per cpu.cfs_period_us); read and "
             "write: the swap disk's throttle (MB/s: 10^6 bytes/s); "
             "docs/boards.md\n");
}

/* ---- small file helpers -------------------------------------------------- */

/* s into the existing file path (a cgroup control file). Returns 0 or
 * errno. */
static int write_str(const char *path, const char *s) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  ssize_t n = write(fd, s, strlen(s));
  int e = n < 0 ? errno : n != (ssize_t)strlen(s) ? EIO : 0;
  if (close(fd) != 0 && !e)
    e = errno;
  return e;
}

/* The start of file path into buf (NUL-terminated). Returns 0 or errno. */
static int read_str(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  size_t got = 0;
  ssize_t n = 0;
  while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
    got += (size_t)n;
  int e = n < 0 ? errno : 0;
  close(fd);
  buf[got] = '\0';
  return e;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* ---- the controllers ----------------------------------------------------- */

/* Controller c ("cpu", "blkio") mounted as cgroup v1 at CGROUP_ROOT/c,
 * writable, with file (a control file the profile writes). */
static int check_controller(const char *c, const char *file, nto_err *err) {
  char base[PATH_MAX], path[PATH_MAX + 64];
  struct statfs s;
  snprintf(base, sizeof base, CGROUP_ROOT "/%s", c);
  if (statfs(base, &s) != 0 || (long)s.f_type != CGROUP_V1_MAGIC) {
    struct statfs r;
    if (statfs(CGROUP_ROOT, &r) == 0 && (long)r.f_type == CGROUP_V2_MAGIC)
      return nto_err_set(err, NTO_EUNSUPPORTED,
                         "cgroup v2 only (" CGROUP_ROOT
                         " is cgroup2); --profile needs the cgroup v1 %s "
                         "controller at %s",
                         c, base);
    return nto_err_set(err, NTO_EUNSUPPORTED,
                       "no cgroup v1 %s controller mounted at %s", c, base);
  }
  snprintf(path, sizeof path, "%s/%s", base, file);
  if (!exists(path))
    return nto_err_set(err, NTO_EUNSUPPORTED, "no %s (a kernel without %s)",
                       path,
                       !strcmp(c, "cpu") ? "CONFIG_CFS_BANDWIDTH"
                                         : "CONFIG_BLK_DEV_THROTTLING");
  if (access(base, W_OK) != 0 || access(path, W_OK) != 0)
    return nto_err_set(err, NTO_EUNSUPPORTED, "%s is not writable: %s", base,
                       strerror(errno));
  return 0;
}

/* Whether the comma list of controllers l (of /proc/self/cgroup) holds
 * c. */
static int has_controller(const char *l, size_t n, const char *c) {
  size_t k = strlen(c);
  for (const char *p = l; p < l + n;) {
    size_t len = strcspn(p, ",:");
    if (len == k && !strncmp(p, c, k))
      return 1;
    p += len + 1;
  }
  return 0;
}

/* The cgroup.procs file of this process's cgroup of controller c (from
 * /proc/self/cgroup) into out; the hierarchy's root when not found. */
static void home_of(const char *c, char *out, size_t len) {
  char buf[4096];
  const char *path = "/";
  char *save = NULL;
  if (read_str("/proc/self/cgroup", buf, sizeof buf) == 0)
    for (char *l = strtok_r(buf, "\n", &save); l;
         l = strtok_r(NULL, "\n", &save)) {
      char *a = strchr(l, ':'), *b = a ? strchr(a + 1, ':') : NULL;
      if (b && has_controller(a + 1, (size_t)(b - a - 1), c)) {
        path = b + 1;
        break;
      }
    }
  snprintf(out, len, CGROUP_ROOT "/%s%s%scgroup.procs", c, path,
           path[strlen(path) - 1] == '/' ? "" : "/");
}

/* ---- the disk under the swap directory ----------------------------------- */

/* The mount of dir in /proc/self/mountinfo: the one whose device number is
 * dev, else the longest mount point that is a prefix of dir's real path;
 * its filesystem type and source into fstype and src. Returns 0 if found. */
static int mount_of(const char *dir, dev_t dev, char *fstype, size_t tlen,
                    char *src, size_t slen) {
  FILE *f = fopen("/proc/self/mountinfo", "r");
  char line[4096], real[PATH_MAX];
  size_t best = 0;
  int found = 0;
  if (!f)
    return -1;
  if (!realpath(dir, real))
    snprintf(real, sizeof real, "%s", dir);
  while (fgets(line, sizeof line, f)) {
    unsigned ma, mi;
    char mnt[PATH_MAX], type[64], from[PATH_MAX];
    const char *dash = strstr(line, " - ");
    if (!dash || sscanf(line, "%*s %*s %u:%u %*s %4095s", &ma, &mi, mnt) != 3 ||
        sscanf(dash + 3, "%63s %4095s", type, from) != 2)
      continue;
    size_t n = strlen(mnt);
    int same = makedev(ma, mi) == dev;
    int prefix = !strncmp(real, mnt, n) &&
                 (real[n] == '/' || real[n] == '\0' || !strcmp(mnt, "/"));
    if (same || (prefix && n >= best)) {
      snprintf(fstype, tlen, "%s", type);
      snprintf(src, slen, "%s", from);
      best = n;
      if (same) {
        found = 2;
        break;
      }
      found = 1;
    }
  }
  fclose(f);
  return found ? 0 : -1;
}

/* The DEVNAME of block device ma:mi into out ("" if unknown). */
static void dev_name(unsigned ma, unsigned mi, char *out, size_t len) {
  char path[96], buf[1024];
  snprintf(path, sizeof path, "/sys/dev/block/%u:%u/uevent", ma, mi);
  out[0] = '\0';
  if (read_str(path, buf, sizeof buf) != 0)
    return;
  const char *d = strstr(buf, "DEVNAME=");
  if (d)
    snprintf(out, len, "%.*s", (int)strcspn(d + 8, "\n"), d + 8);
}

/* The whole disk holding directory dir into pc (major, minor, disk,
 * device_note). */
static int find_disk(profile_cgroups *pc, const char *dir, nto_err *err) {
  struct stat st;
  char path[96], fstype[64] = "?", src[PATH_MAX] = "?";
  if (stat(dir, &st) != 0)
    return nto_err_set(err, NTO_EUNSUPPORTED, "swap dir %s: %s", dir,
                       strerror(errno));
  unsigned ma = major(st.st_dev), mi = minor(st.st_dev);
  snprintf(path, sizeof path, "/sys/dev/block/%u:%u", ma, mi);
  int have_mount =
      mount_of(dir, st.st_dev, fstype, sizeof fstype, src, sizeof src) == 0;
  if (ma == 0 || !exists(path)) {
    /* an anonymous device number (btrfs, overlay, tmpfs, network
     * filesystems): the mount's source, when that is a block device */
    struct stat bs;
    if (!have_mount || stat(src, &bs) != 0 || !S_ISBLK(bs.st_mode))
      return nto_err_set(err, NTO_EUNSUPPORTED,
                         "no block device under swap dir %s (%s filesystem, "
                         "device %u:%u, mount source '%s'): nothing to "
                         "throttle; use --swap-dir on a disk",
                         dir, fstype, ma, mi, src);
    ma = major(bs.st_rdev), mi = minor(bs.st_rdev);
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u", ma, mi);
    if (!exists(path))
      return nto_err_set(err, NTO_EUNSUPPORTED,
                         "swap dir %s: device %u:%u (%s) is not in "
                         "/sys/dev/block",
                         dir, ma, mi, src);
  }
  char part[128], name[64], buf[64];
  dev_name(ma, mi, name, sizeof name);
  snprintf(part, sizeof part, "%s/partition", path);
  pc->major = ma, pc->minor = mi;
  if (exists(part)) {
    /* cgroup v1 refuses a partition's MAJ:MIN: throttle its disk */
    unsigned dma, dmi;
    snprintf(part, sizeof part, "%s/../dev", path);
    if (read_str(part, buf, sizeof buf) != 0 ||
        sscanf(buf, "%u:%u", &dma, &dmi) != 2)
      return nto_err_set(err, NTO_EUNSUPPORTED,
                         "cannot find the disk of partition %u:%u (%s)", ma, mi,
                         name);
    pc->major = dma, pc->minor = dmi;
    dev_name(dma, dmi, pc->disk, sizeof pc->disk);
    snprintf(pc->device_note, sizeof pc->device_note,
             "%u:%u (%s), the disk of partition %u:%u (%s) holding %s "
             "(cgroup v1 throttles whole disks; only the profile's I/O is "
             "slowed)",
             dma, dmi, pc->disk[0] ? pc->disk : "?", ma, mi,
             name[0] ? name : "?", dir);
  } else {
    snprintf(pc->disk, sizeof pc->disk, "%s", name);
    snprintf(pc->device_note, sizeof pc->device_note, "%u:%u (%s, holding %s)",
             ma, mi, name[0] ? name : "?", dir);
  }
  return 0;
}

/* ---- entering and leaving ------------------------------------------------ */

/* Write s to file of cgroup dir cg; NTO_EUNSUPPORTED naming both when the
 * kernel refuses. */
static int cg_write(const char *cg, const char *file, const char *s,
                    nto_err *err) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/%s", cg, file);
  int e = write_str(path, s);
  if (e)
    return nto_err_set(err, NTO_EUNSUPPORTED,
                       "the kernel refused '%.*s' in %s: %s",
                       (int)strcspn(s, "\n"), s, path, strerror(e));
  return 0;
}

/* A number in file of cgroup dir cg, -1 if it does not read. */
static long cg_long(const char *cg, const char *file) {
  char path[PATH_MAX + 64], buf[64];
  snprintf(path, sizeof path, "%s/%s", cg, file);
  return read_str(path, buf, sizeof buf) == 0 ? strtol(buf, NULL, 10) : -1;
}

/* The bytes per second of the disk in a blkio.throttle.*_bps_device file,
 * 0 if it is not listed. */
static uint64_t cg_bps(const profile_cgroups *pc, const char *file) {
  char path[PATH_MAX + 64], buf[4096], *save = NULL;
  snprintf(path, sizeof path, "%s/%s", pc->blkio_dir, file);
  if (read_str(path, buf, sizeof buf) != 0)
    return 0;
  for (char *l = strtok_r(buf, "\n", &save); l;
       l = strtok_r(NULL, "\n", &save)) {
    unsigned ma, mi;
    unsigned long long v;
    if (sscanf(l, "%u:%u %llu", &ma, &mi, &v) == 3 && ma == pc->major &&
        mi == pc->minor)
      return v;
  }
  return 0;
}

/* Make cgroup dir (CGROUP_ROOT/c/nto-profile-PID) into out; *made = 1. */
static int cg_make(const char *c, char *out, size_t len, int *made,
                   nto_err *err) {
  snprintf(out, len, CGROUP_ROOT "/%s/nto-profile-%ld", c, (long)getpid());
  if (mkdir(out, 0755) != 0)
    return nto_err_set(err, NTO_EUNSUPPORTED, "cannot create cgroup %s: %s",
                       out, strerror(errno));
  *made = 1;
  return 0;
}

/* The CPU quota: made, written, read back. */
static int enter_cpu(profile_cgroups *pc, nto_err *err) {
  char v[32];
  int rc = cg_make("cpu", pc->cpu_dir, sizeof pc->cpu_dir, &pc->cpu_made, err);
  pc->period_us = PROFILE_PERIOD_US;
  pc->quota_us =
      lround((double)pc->cpus * pc->p->cpu_fraction * (double)pc->period_us);
  if (pc->quota_us < QUOTA_MIN_US)
    pc->quota_us = QUOTA_MIN_US;
  snprintf(v, sizeof v, "%ld\n", pc->period_us);
  if (rc == 0)
    rc = cg_write(pc->cpu_dir, "cpu.cfs_period_us", v, err);
  snprintf(v, sizeof v, "%ld\n", pc->quota_us);
  if (rc == 0)
    rc = cg_write(pc->cpu_dir, "cpu.cfs_quota_us", v, err);
  if (rc != 0)
    return rc;
  pc->period_back = cg_long(pc->cpu_dir, "cpu.cfs_period_us");
  pc->quota_back = cg_long(pc->cpu_dir, "cpu.cfs_quota_us");
  if (pc->period_back != pc->period_us || pc->quota_back != pc->quota_us)
    return nto_err_set(err, NTO_EUNSUPPORTED,
                       "%s: wrote cpu.cfs_quota_us %ld per cpu.cfs_period_us "
                       "%ld, the kernel reads back %ld per %ld",
                       pc->cpu_dir, pc->quota_us, pc->period_us, pc->quota_back,
                       pc->period_back);
  return 0;
}

/* The swap disk's throttle: made, written, read back. */
static int enter_blkio(profile_cgroups *pc, nto_err *err) {
  char v[64];
  int rc = cg_make("blkio", pc->blkio_dir, sizeof pc->blkio_dir,
                   &pc->blkio_made, err);
  snprintf(v, sizeof v, "%u:%u %llu\n", pc->major, pc->minor,
           (unsigned long long)pc->p->read_bps);
  if (rc == 0)
    rc = cg_write(pc->blkio_dir, "blkio.throttle.read_bps_device", v, err);
  snprintf(v, sizeof v, "%u:%u %llu\n", pc->major, pc->minor,
           (unsigned long long)pc->p->write_bps);
  if (rc == 0)
    rc = cg_write(pc->blkio_dir, "blkio.throttle.write_bps_device", v, err);
  if (rc != 0)
    return nto_err_prefix(err, rc, "device %s: ", pc->device_note);
  pc->read_back = cg_bps(pc, "blkio.throttle.read_bps_device");
  pc->write_back = cg_bps(pc, "blkio.throttle.write_bps_device");
  if (pc->read_back != pc->p->read_bps || pc->write_back != pc->p->write_bps)
    return nto_err_set(err, NTO_EUNSUPPORTED,
                       "%s: wrote read %llu and write %llu B/s for %u:%u, "
                       "the kernel reads back %llu and %llu",
                       pc->blkio_dir, (unsigned long long)pc->p->read_bps,
                       (unsigned long long)pc->p->write_bps, pc->major,
                       pc->minor, (unsigned long long)pc->read_back,
                       (unsigned long long)pc->write_back);
  return 0;
}

int profile_enter(profile_cgroups *pc, const board_profile *p, const char *dir,
                  nto_err *err) {
  char pid[32];
  memset(pc, 0, sizeof *pc);
  pc->p = p;
  pc->nr_periods = pc->nr_throttled = -1;
  pc->cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (geteuid() != 0)
    return nto_err_set(err, NTO_EUNSUPPORTED,
                       "not root (making cgroups needs root)");
  int rc = check_controller("cpu", "cpu.cfs_quota_us", err);
  if (rc == 0)
    rc = check_controller("blkio", "blkio.throttle.read_bps_device", err);
  if (rc == 0)
    rc = find_disk(pc, dir, err);
  if (rc != 0)
    return rc;
  home_of("cpu", pc->cpu_home, sizeof pc->cpu_home);
  home_of("blkio", pc->blkio_home, sizeof pc->blkio_home);
  rc = enter_cpu(pc, err);
  if (rc == 0)
    rc = enter_blkio(pc, err);
  snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  /* the blkio group first: once in the cpu group, the rest runs slowly */
  if (rc == 0)
    rc = cg_write(pc->blkio_dir, "cgroup.procs", pid, err);
  pc->joined = rc == 0; /* profile_leave moves it back from both */
  if (rc == 0)
    rc = cg_write(pc->cpu_dir, "cgroup.procs", pid, err);
  if (rc != 0)
    profile_leave(pc, NULL);
  return rc;
}

void profile_stats(profile_cgroups *pc) {
  char path[PATH_MAX + 64], buf[4096];
  snprintf(path, sizeof path, "%s/cpu.stat", pc->cpu_dir);
  if (pc->cpu_made && read_str(path, buf, sizeof buf) == 0) {
    const char *a = strstr(buf, "nr_periods "),
               *b = strstr(buf, "nr_throttled ");
    const char *t = strstr(buf, "throttled_time ");
    pc->nr_periods = a ? strtol(a + 11, NULL, 10) : -1;
    pc->nr_throttled = b ? strtol(b + 13, NULL, 10) : -1;
    pc->throttled_s = t ? strtod(t + 15, NULL) * 1e-9 : 0;
  }
  snprintf(path, sizeof path, "%s/blkio.throttle.io_service_bytes",
           pc->blkio_dir);
  char *save = NULL;
  if (!pc->blkio_made || read_str(path, buf, sizeof buf) != 0)
    return;
  for (char *l = strtok_r(buf, "\n", &save); l;
       l = strtok_r(NULL, "\n", &save)) {
    unsigned ma, mi;
    char op[16];
    unsigned long long v;
    if (sscanf(l, "%u:%u %15s %llu", &ma, &mi, op, &v) != 4 ||
        ma != pc->major || mi != pc->minor)
      continue;
    if (!strcmp(op, "Read"))
      pc->read_bytes = v;
    else if (!strcmp(op, "Write"))
      pc->written_bytes = v;
  }
}

/* Move this process back to the cgroup.procs file home; the hierarchy's
 * root (CGROUP_ROOT/c) when that fails (the cgroup left is gone). */
static int go_home(const char *home, const char *c, const char *pid) {
  char root[64];
  if (write_str(home, pid) == 0)
    return 0;
  snprintf(root, sizeof root, CGROUP_ROOT "/%s/cgroup.procs", c);
  return write_str(root, pid);
}

int profile_leave(profile_cgroups *pc, nto_err *err) {
  char pid[32];
  int rc = 0;
  snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (pc->joined) {
    int a = go_home(pc->cpu_home, "cpu", pid);
    int b = go_home(pc->blkio_home, "blkio", pid);
    if (a || b)
      rc = nto_err_set(err, NTO_EIO,
                       "cannot move back out of the %s cgroup: "
                       "%s",
                       a ? "cpu" : "blkio", strerror(a ? a : b));
    pc->joined = 0;
  }
  const char *dirs[] = {pc->cpu_dir, pc->blkio_dir};
  int *made[] = {&pc->cpu_made, &pc->blkio_made};
  for (int i = 0; i < 2; i++) {
    for (int k = 0; *made[i] && rmdir(dirs[i]) != 0; k++) {
      if (errno != EBUSY || k + 1 >= RMDIR_TRIES) {
        if (rc == 0)
          rc = nto_err_set(err, NTO_EIO, "cannot remove cgroup %s: %s", dirs[i],
                           strerror(errno));
        break;
      }
      nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    *made[i] = 0;
  }
  return rc;
}

/* Async-signal-safe: the pid in decimal with a newline into buf. */
static void pid_text(char *buf) {
  char t[24];
  int n = 0;
  long v = (long)getpid();
  do
    t[n++] = (char)('0' + v % 10);
  while ((v /= 10) > 0);
  for (int i = 0; i < n; i++)
    buf[i] = t[n - 1 - i];
  buf[n] = '\n';
  buf[n + 1] = '\0';
}

void profile_abort(const profile_cgroups *pc) {
  char pid[32];
  pid_text(pid);
  if (pc->joined) {
    if (write_str(pc->cpu_home, pid) != 0)
      write_str(CGROUP_ROOT "/cpu/cgroup.procs", pid);
    if (write_str(pc->blkio_home, pid) != 0)
      write_str(CGROUP_ROOT "/blkio/cgroup.procs", pid);
  }
  if (pc->cpu_made)
    rmdir(pc->cpu_dir);
  if (pc->blkio_made)
    rmdir(pc->blkio_dir);
}

/* ---- output -------------------------------------------------------------- */

void profile_print(const profile_cgroups *pc, FILE *f) {
  const board_profile *p = pc->p;
  fprintf(f, "profile %s: %s\n", p->name, p->what);
  fprintf(f,
          "  cpu:  1/%.0f of %ld online CPUs = %.2f CPU: cpu.cfs_quota_us "
          "%ld per cpu.cfs_period_us %ld (read back: %ld per %ld) in %s\n",
          1 / p->cpu_fraction, pc->cpus,
          (double)pc->quota_us / (double)pc->period_us, pc->quota_us,
          pc->period_us, pc->quota_back, pc->period_back, pc->cpu_dir);
  fprintf(f,
          "  swap: read %.0f MB/s, write %.0f MB/s: "
          "blkio.throttle.read_bps_device %llu, write_bps_device %llu "
          "(read back: %llu, %llu) on %s in %s\n",
          (double)p->read_bps / 1e6, (double)p->write_bps / 1e6,
          (unsigned long long)p->read_bps, (unsigned long long)p->write_bps,
          (unsigned long long)pc->read_back, (unsigned long long)pc->write_back,
          pc->device_note, pc->blkio_dir);
}

void profile_print_stats(const profile_cgroups *pc, FILE *f) {
  fprintf(f, "profile %s, inside the cgroups (the bandwidth probe included): ",
          pc->p->name);
  if (pc->nr_periods >= 0)
    fprintf(f, "cpu.stat %ld periods, %ld throttled (%.1f s)", pc->nr_periods,
            pc->nr_throttled, pc->throttled_s);
  else
    fprintf(f, "no cpu.stat");
  fprintf(f, "; disk %u:%u: read %.1f MiB, written %.1f MiB\n", pc->major,
          pc->minor, (double)pc->read_bytes / 1048576.0,
          (double)pc->written_bytes / 1048576.0);
}

void profile_json(const profile_cgroups *pc, FILE *f) {
  const board_profile *p = pc->p;
  fprintf(f,
          "{\"name\": \"%s\", \"cpu_fraction\": %.6g, \"online_cpus\": %ld, "
          "\"cfs_period_us\": %ld, \"cfs_quota_us\": %ld, "
          "\"read_bytes_per_s\": %llu, \"write_bytes_per_s\": %llu, "
          "\"device\": \"%u:%u\", \"nr_periods\": %ld, \"nr_throttled\": %ld, "
          "\"throttled_s\": %.3f, \"read_bytes\": %llu, "
          "\"written_bytes\": %llu}",
          p->name, p->cpu_fraction, pc->cpus, pc->period_back, pc->quota_back,
          (unsigned long long)pc->read_back, (unsigned long long)pc->write_back,
          pc->major, pc->minor, pc->nr_periods, pc->nr_throttled,
          pc->throttled_s, (unsigned long long)pc->read_bytes,
          (unsigned long long)pc->written_bytes);
}

/*
 * memstat.h - process memory as the kernel counts it (Linux /proc).
 * Peak RSS is VmHWM of /proc/self/status (per process: bench measures
 * each configuration in a process of its own).
 * Any thread.
 */
#ifndef NTO_MEMSTAT_H
#define NTO_MEMSTAT_H

#include <stddef.h>

/* Peak resident set size in bytes (VmHWM), or 0 if unavailable. */
size_t nto_peak_rss_bytes(void);
/* Current resident set size in bytes (VmRSS), or 0 if unavailable. */
size_t nto_current_rss_bytes(void);

/* Where nto_memory_limit found the limit. */
typedef enum {
  NTO_LIMIT_NONE,
  NTO_LIMIT_CGROUP_V2, /* memory.max of the cgroup or an ancestor */
  NTO_LIMIT_CGROUP_V1, /* memory.limit_in_bytes of the memory cgroup or an
                          ancestor */
  NTO_LIMIT_AVAILABLE, /* MemAvailable of /proc/meminfo */
} nto_limit_kind;

/*
 * The memory this process may use, in bytes: the smallest limit of its
 * cgroup and the cgroup's ancestors (v2 memory.max, v1
 * memory.limit_in_bytes; "max" and v1's huge "unlimited" values are no
 * limit), else MemAvailable (memory the kernel can give without
 * swapping, a snapshot). The root is the mount point under
 * /sys/fs/cgroup (`root` overrides it: tests; NULL for the system's) and
 * proc the /proc directory ("/proc" when NULL). Returns the kind found;
 * *bytes 0 with NTO_LIMIT_NONE. Any thread.
 */
nto_limit_kind nto_memory_limit(const char *root, const char *proc,
                                size_t *bytes);

#endif /* NTO_MEMSTAT_H */

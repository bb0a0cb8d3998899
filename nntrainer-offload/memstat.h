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

#endif /* NTO_MEMSTAT_H */

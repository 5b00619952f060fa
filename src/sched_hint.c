/*
 * sched_hint.c - the worker asks the scheduler for a short time slice.
 *
 * Since Linux 6.12 the fair scheduler (EEVDF) lets a SCHED_OTHER thread ask
 * for its own slice: sched_setattr(2) with sched_runtime, in nanoseconds
 * (clamped by the kernel to 0.1 .. 100 ms), no privilege needed. A thread's
 * virtual deadline is its eligible time plus its slice, so a short slice
 * gives the worker an early deadline: when it wakes for a tick it preempts a
 * busy thread instead of queueing behind it for up to a whole default slice
 * (~1.4 ms here, more on bigger machines). Its CPU share is unchanged (that
 * is the nice value's business); only when it gets the CPU changes. The
 * worker runs a tick's work in short bursts, so it rarely exhausts even a
 * short slice.
 *
 * Best effort: older kernels accept and ignore sched_runtime for SCHED_OTHER
 * (before 6.12) or lack sched_setattr (ENOSYS); any failure is logged at
 * HWT_LOG_DEBUG and the worker runs as it is. A worker that the user's
 * thread_attr made SCHED_BATCH, SCHED_IDLE or real-time is left alone, and
 * its nice value is kept (read back first, written unchanged). A thread that
 * a task creates on the worker inherits the slice (the kernel's rule).
 *
 * Runs on the worker thread only, once, before the worker reports started.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#ifdef SYS_sched_setattr

/* The kernel's struct sched_attr (SCHED_ATTR_SIZE_VER1). Defined here: glibc
 * before 2.41 has no wrapper, and <linux/sched/types.h> clashes with the
 * definition that newer glibc puts in <sched.h>. */
struct hwt__sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime; /* SCHED_OTHER: the requested slice, ns (6.12+) */
    uint64_t sched_deadline;
    uint64_t sched_period;
    uint32_t sched_util_min;
    uint32_t sched_util_max;
};

#define HWT_SCHED_FLAG_RESET_ON_FORK 0x01

void hwt__worker_sched_hint(hwt_timer *timer)
{
    struct hwt__sched_attr attr;
    memset(&attr, 0, sizeof attr);
    if (syscall(SYS_sched_getattr, 0, &attr, (unsigned)sizeof attr, 0U) != 0) {
        hwt__log(timer, HWT_LOG_DEBUG, "worker keeps the default time slice: sched_getattr: %s",
                 strerror(errno));
        return;
    }
    if (attr.sched_policy != SCHED_OTHER) {
        hwt__log(timer, HWT_LOG_DEBUG,
                 "worker keeps the default time slice: its policy (%u) is not SCHED_OTHER",
                 (unsigned)attr.sched_policy);
        return;
    }
    attr.size = sizeof attr;
    attr.sched_runtime = HWT_WORKER_SLICE_NS; /* sched_nice: as read, so unchanged */
    attr.sched_deadline = 0;
    attr.sched_period = 0;
    attr.sched_flags &= HWT_SCHED_FLAG_RESET_ON_FORK; /* kept as it was; nothing else asked */
    if (syscall(SYS_sched_setattr, 0, &attr, 0U) != 0)
        hwt__log(timer, HWT_LOG_DEBUG, "worker keeps the default time slice: sched_setattr: %s",
                 strerror(errno));
}

#else

void hwt__worker_sched_hint(hwt_timer *timer)
{
    (void)timer;
}

#endif

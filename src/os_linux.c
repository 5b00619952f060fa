/*
 * os_linux.c - os.h for Linux: futex waits, the worker thread's name,
 * timer slack and turns on a CPU, MADV_POPULATE_WRITE. Every
 * Linux-specific call of the library is here.
 *
 * Kernel versions (docs/platforms.md): the futex calls need 2.6.25
 * (FUTEX_WAIT_BITSET, whose absolute timeout is on CLOCK_MONOTONIC); the rest
 * is optional and degrades as each function says: PR_SET_TIMERSLACK 2.6.28,
 * MADV_POPULATE_WRITE 5.14, sched_setattr 3.14 (its sched_runtime for
 * SCHED_OTHER: 6.12).
 * An older kernel answers those with an error, which we ignore.
 */
#define _GNU_SOURCE
#include "os.h"

#include <linux/futex.h>
#include <linux/sched.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A header older than the kernels that have it: the value is the ABI. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static struct timespec to_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    return ts;
}

/* ------------------------------------------------- waiting on a word */

void hwt__os_wait_until(_Atomic uint32_t *word, uint32_t expected, int64_t until_ns)
{
    uint32_t *addr = (uint32_t *)word;
    if (until_ns == INT64_MAX) {
        syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
        return;
    }
    /* FUTEX_WAIT_BITSET takes an absolute time, on CLOCK_MONOTONIC unless
     * FUTEX_CLOCK_REALTIME is given: no drift from computing a relative one. */
    struct timespec abs = to_timespec(until_ns);
    syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, expected, &abs, NULL,
            FUTEX_BITSET_MATCH_ANY);
}

void hwt__os_wait_for(_Atomic uint32_t *word, uint32_t expected, int64_t rel_ns)
{
    struct timespec rel = to_timespec(rel_ns);
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, &rel, NULL, 0);
}

void hwt__os_wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* ------------------------------------------------ the worker thread */

void hwt__os_name_thread(const char *name)
{
    pthread_setname_np(pthread_self(), name);
}

/* struct sched_attr as the kernel takes it (its first version, 48 bytes):
 * glibc 2.36 has no wrapper, and later ones declare the struct themselves. */
struct kernel_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
};

/* The turn asked for: Linux's smallest (0.1 ms). Its default, 0.75 ms times
 * 1 + log2 of the CPUs (up to 8), is what a woken worker would otherwise
 * wait behind a busy thread. */
#define WORKER_SLICE_NS UINT64_C(100000)

/* Since Linux 6.12 a SCHED_OTHER thread may ask for shorter turns on a CPU
 * (sched_attr.sched_runtime, no privilege needed), and a woken thread with
 * a shorter turn than the running one preempts it. Earlier kernels ignore
 * the request; one refused (a seccomp filter, ENOSYS) changes nothing. A
 * thread_attr that chose another policy is left as it is, and the nice
 * value is kept. */
#ifdef SYS_sched_setattr
static bool read_sched_attr(struct kernel_sched_attr *attr)
{
    memset(attr, 0, sizeof *attr);
    return syscall(SYS_sched_getattr, 0, attr, (unsigned)sizeof *attr, 0) == 0;
}
#endif

static bool ask_short_turns(void)
{
#ifdef SYS_sched_setattr
    struct kernel_sched_attr attr;
    if (!read_sched_attr(&attr) || attr.sched_policy != SCHED_OTHER)
        return false;
    attr.size = sizeof attr;
    attr.sched_flags &= SCHED_FLAG_RESET_ON_FORK;
    attr.sched_runtime = WORKER_SLICE_NS;
    attr.sched_deadline = 0;
    attr.sched_period = 0;
    if (syscall(SYS_sched_setattr, 0, &attr, 0) != 0)
        return false;
    /* Kept by the kernel, or ignored (before 6.12)? */
    return read_sched_attr(&attr) && attr.sched_runtime == WORKER_SLICE_NS;
#else
    return false;
#endif
}

bool hwt__os_precise_sleeps(void)
{
#ifdef PR_SET_TIMERSLACK
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* 0 would mean "the default" */
#endif
    return ask_short_turns();
}

/* --------------------------------------------------------- memory */

void hwt__os_prefer_large_pages(void *p, size_t size)
{
    /* With transparent_hugepage "never": EINVAL, and small pages. With
     * "always" the kernel would do it anyway. */
    madvise(p, size, MADV_HUGEPAGE);
}

void hwt__os_populate(void *p, size_t size)
{
    /* Before 5.14: EINVAL, and pages fault on first touch. */
    madvise(p, size, MADV_POPULATE_WRITE);
}

/*
 * os_linux.c - os.h for Linux: futex waits, the worker thread's name and
 * timer slack, MADV_POPULATE_WRITE. Every Linux-specific call of
 * the library is here.
 *
 * Kernel versions (docs/platforms.md): the futex calls need 2.6.25
 * (FUTEX_WAIT_BITSET, whose absolute timeout is on CLOCK_MONOTONIC); the rest
 * is optional and degrades as each function says: PR_SET_TIMERSLACK 2.6.28,
 * MADV_POPULATE_WRITE 5.14.
 * An older kernel answers those with an error, which we ignore.
 */
#define _GNU_SOURCE
#include "os.h"

#include <linux/futex.h>
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

void hwt__os_precise_sleeps(void)
{
#ifdef PR_SET_TIMERSLACK
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* 0 would mean "the default" */
#endif
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

/*
 * clock.c - monotonic time and the worker's sleep modes.
 *
 * The worker waits on a futex word so that a producer (an earlier deadline),
 * a canceller or hwt_stop can wake it: the waker changes the word, then calls
 * hwt__wake. PRECISE sleeps to an absolute CLOCK_MONOTONIC deadline
 * (FUTEX_WAIT_BITSET); MILLIS and WINDOWS sleep relative whole milliseconds
 * with Netty's rounding, exactly as Thread.sleep would be called there.
 */
#define _GNU_SOURCE
#include "clock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int64_t hwt__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t hwt__unit_ns(hwt_unit unit)
{
    switch (unit) {
    case HWT_NANOSECONDS: return 1;
    case HWT_MICROSECONDS: return HWT_NS_PER_US;
    case HWT_MILLISECONDS: return HWT_NS_PER_MS;
    case HWT_SECONDS: return INT64_C(1000000000);
    case HWT_MINUTES: return INT64_C(60000000000);
    case HWT_HOURS: return INT64_C(3600000000000);
    case HWT_DAYS: return INT64_C(86400000000000);
    }
    return 0;
}

int64_t hwt__min_tick_ns(hwt_sleep_mode mode)
{
    return mode == HWT_SLEEP_PRECISE ? HWT_NS_PER_US : HWT_NS_PER_MS;
}

int64_t hwt__sleep_ms(hwt_sleep_mode mode, int64_t remaining_ns)
{
    int64_t ms = remaining_ns / HWT_NS_PER_MS + (remaining_ns % HWT_NS_PER_MS != 0);
    if (mode == HWT_SLEEP_WINDOWS) {
        ms = ms / 10 * 10;
        if (ms == 0)
            ms = 1;
    }
    return ms;
}

static struct timespec to_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    return ts;
}

bool hwt__sleep(hwt_sleep_mode mode, _Atomic uint32_t *word, uint32_t expected, int64_t until_ns)
{
    uint32_t *addr = (uint32_t *)word;
    if (until_ns == INT64_MAX) {
        syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
        return true;
    }
    int64_t remaining = until_ns - hwt__now_ns();
    if (remaining <= 0)
        return false;
    if (mode == HWT_SLEEP_PRECISE) {
        struct timespec abs = to_timespec(until_ns);
        syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, expected, &abs, NULL,
                FUTEX_BITSET_MATCH_ANY);
    } else {
        struct timespec rel =
            to_timespec(hwt__sat_mul(hwt__sleep_ms(mode, remaining), HWT_NS_PER_MS));
        syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, &rel, NULL, 0);
    }
    return true;
}

void hwt__wake(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

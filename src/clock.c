/*
 * clock.c - monotonic time and the worker's sleep modes.
 *
 * The worker waits on a word (a futex on Linux, os.h) so that a producer (an
 * earlier deadline), a canceller or hwt_stop can wake it: the waker changes
 * the word, then calls hwt__wake. PRECISE sleeps to an absolute
 * CLOCK_MONOTONIC deadline; MILLIS and WINDOWS sleep relative whole
 * milliseconds with Netty's rounding, exactly as Thread.sleep would be
 * called there.
 */
#include "clock.h"

#include <time.h>

#include "os.h"

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

bool hwt__sleep(hwt_sleep_mode mode, _Atomic uint32_t *word, uint32_t expected, int64_t until_ns)
{
    if (until_ns == INT64_MAX) {
        hwt__os_wait_until(word, expected, INT64_MAX);
        return true;
    }
    int64_t remaining = until_ns - hwt__now_ns();
    if (remaining <= 0)
        return false;
    if (mode == HWT_SLEEP_PRECISE)
        hwt__os_wait_until(word, expected, until_ns);
    else
        hwt__os_wait_for(word, expected,
                         hwt__sat_mul(hwt__sleep_ms(mode, remaining), HWT_NS_PER_MS));
    return true;
}

void hwt__wake(_Atomic uint32_t *word)
{
    hwt__os_wake(word);
}

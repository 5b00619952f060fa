/*
 * clock.h - monotonic time, saturating nanosecond arithmetic, and the worker's
 * three sleep modes (an interruptible wait on a word: os.h).
 * No shared state: hwt__sleep is called by the worker, hwt__wake by anyone.
 */
#ifndef HWT_CLOCK_H
#define HWT_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hwtimer.h"

#define HWT_NS_PER_US INT64_C(1000)
#define HWT_NS_PER_MS INT64_C(1000000)

/* CLOCK_MONOTONIC as clock_gettime reads it, in nanoseconds: the one clock
 * of the library, for deadlines and for deciding what is due alike, so that
 * no estimate can put a deadline before the time it is compared with. */
int64_t hwt__now_ns(void);


/* a + b, clamped to [INT64_MIN, INT64_MAX] (no signed overflow). */
static inline int64_t hwt__sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* a * b, clamped to [INT64_MIN, INT64_MAX]. */
static inline int64_t hwt__sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
    return r;
}

/* Nanoseconds per unit; 0 for an invalid unit. */
int64_t hwt__unit_ns(hwt_unit unit);

/* The smallest tick a sleep mode supports (1 us precise, 1 ms otherwise). */
int64_t hwt__min_tick_ns(hwt_sleep_mode mode);

/*
 * Sleeps once, in `mode`, until the absolute monotonic time `until_ns`
 * (INT64_MAX: no timeout) or until *word no longer equals `expected` (see
 * hwt__wake). May return early (spurious wake-up, signal, rounding of the
 * millisecond modes): the caller re-checks. Returns true if it went to sleep.
 */
bool hwt__sleep(hwt_sleep_mode mode, _Atomic uint32_t *word, uint32_t expected, int64_t until_ns);

/* Wakes a thread sleeping in hwt__sleep on `word` (after the caller changed it). */
void hwt__wake(_Atomic uint32_t *word);

/* Netty's sleep length in milliseconds for a wait of `remaining_ns` (> 0):
 * rounded up; in WINDOWS mode then down to a multiple of 10, and 1 if 0. */
int64_t hwt__sleep_ms(hwt_sleep_mode mode, int64_t remaining_ns);

#endif

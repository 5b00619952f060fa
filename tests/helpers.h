/*
 * helpers.h - shared by the cmocka suites: deadlines, watchdog, small timers.
 *
 * Tests wait on conditions with a deadline (hwtt_wait_until), never on bare
 * sleeps. Every suite arms hwtt_watchdog() in main() so a hang fails loudly
 * even without CTest's TIMEOUT.
 */
#ifndef HWT_TEST_HELPERS_H
#define HWT_TEST_HELPERS_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/types.h>
#include <cmocka.h>

#include "hwtimer.h"

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t hwtt_now_ns(void);

/* Sleeps about ms milliseconds (only to let time pass, never to decide a result). */
void hwtt_sleep_ms(int64_t ms);

/* Kills the process with a message after `seconds` (SIGALRM) times
 * hwtt_slowdown(), at most HWTT_WATCHDOG_MAX_S: `seconds` is what the suite
 * may take in a plain build. Call in main(); a forked child that could hang
 * may call it again for a limit of its own (async-signal-safe there: the
 * first call cached the factor before any fork). */
void hwtt_watchdog(unsigned seconds);

/* Below CTest's TIMEOUT for every suite (tests/CMakeLists.txt), so that a
 * hang ends with the watchdog's message, not CTest's kill. */
#define HWTT_WATCHDOG_MAX_S 880

/* Polls cond (a C expression) every 200 us until it is true or timeout_ms
 * passed; evaluates to the final value of cond. */
#define hwtt_wait_until(cond, timeout_ms)                                                          \
    ({                                                                                             \
        int64_t hwtt_deadline_ = hwtt_now_ns() + (int64_t)(timeout_ms)*1000000;                    \
        bool hwtt_ok_;                                                                             \
        while (!(hwtt_ok_ = (cond)) && hwtt_now_ns() < hwtt_deadline_)                             \
            hwtt_sleep_us(200);                                                                    \
        hwtt_ok_;                                                                                  \
    })

void hwtt_sleep_us(int64_t us);

/* Creates a timer with the given tick and wheel size (other options default);
 * fails the test if creation fails. */
hwt_timer *hwtt_timer(uint64_t tick, hwt_unit unit, uint32_t ticks_per_wheel);

/* Creates a timer from options; fails the test if creation fails. */
hwt_timer *hwtt_timer_opts(const hwt_options *options);

/* A log callback that counts messages per level into a hwtt_log (log_ctx). */
typedef struct hwtt_log {
    atomic_int count[4];
    char last[256];
} hwtt_log;
void hwtt_log_cb(void *ctx, hwt_log_level level, const char *message);

/* A task that increments the atomic_int that arg points to. */
void hwtt_count_task(hwt_timeout *timeout, void *arg);

/* ---- time-bound scaling and timer cleanup (added for the timing suites) ---- */

/* Multiplier for upper time bounds (never for lower bounds): HWT_TEST_SLOWDOWN
 * (an integer >= 1) if set; otherwise 20 under valgrind, 10 under TSan, 5 under
 * an emulator, 4 under ASan, 1 otherwise. */
int64_t hwtt_slowdown(void);

/* Whether the test runs under valgrind. */
bool hwtt_under_valgrind(void);

/* Whether the test runs under an emulator (qemu-user for a cross build): the
 * build's CTest entries set HWT_TEST_EMULATOR to it (tests/CMakeLists.txt). */
bool hwtt_under_emulator(void);

/* ms * hwtt_slowdown(): a generous upper-bound allowance in milliseconds. */
int64_t hwtt_slack_ms(int64_t ms);

/* Runs fn(arg) in a forked child, which exits with fn's result, and waits
 * up to timeout_ms for it (then kills it): its exit status, 128 + the
 * signal that ended it, or HWTT_CHILD_HUNG. The child reports through its
 * status: cmocka's asserts belong to the test's own process. */
#define HWTT_CHILD_HUNG (-1)
int hwtt_run_in_child(int (*fn)(void *), void *arg, int64_t timeout_ms);

/* Remembers `timer` (returned as is) so that hwtt_teardown_timers() destroys it
 * if the test fails before destroying it itself. Test thread only. */
hwt_timer *hwtt_track(hwt_timer *timer);

/* hwt_timer_destroy(timer) and forget it. Test thread only. */
void hwtt_destroy(hwt_timer *timer);

/* A cmocka teardown: destroys every timer still tracked. Returns 0. */
int hwtt_teardown_timers(void **state);

/* ---- shared by several suites ---- */

/* Number of threads of this process whose name (comm) is exactly `name`;
 * -1 if /proc cannot be read. */
int hwtt_threads_named(const char *name);
/* Reads the line of /proc/self/task/<tid>/<file> that starts with `key`
 * (the first line if key is NULL), without the key and the newline, into
 * buf. 0 on success. */
int hwtt_read_task_file(pid_t tid, const char *file, const char *key, char *buf, size_t n);

/* The id of this process's one thread named `name`, or -1 (none, or more). */
pid_t hwtt_thread_named(const char *name);

/* Applies the optional environment filters of a suite run by hand:
 * HWTT_FILTER='test_stop*' runs only matching tests, HWTT_SKIP skips them.
 * Call in main() before cmocka_run_group_tests. */
void hwtt_apply_filters(void);

/* Counts what happened to a timeout whose arg is this record. */
typedef struct hwtt_rec {
    atomic_int ran, cb;
} hwtt_rec;
void hwtt_rec_run(hwt_timeout *timeout, void *arg);       /* ran++ */
void hwtt_rec_cancelled(hwt_timeout *timeout, void *arg); /* cb++ */
extern const hwt_task hwtt_rec_task;                      /* both */

#endif

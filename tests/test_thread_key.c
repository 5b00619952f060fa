/*
 * test_thread_key.c - a thread key the library needs and cannot have: with
 * every pthread key of the process taken, a schedule fails with HWT_ESYS,
 * logs why, and changes nothing; once a key is free again the next schedule
 * works (the library retries: the failure is not remembered).
 *
 * The failure is logged, and the log callback may call the library: stop
 * the timer from a producer's failed schedule, or schedule on the timer
 * from its starting worker (which logs too: it binds a cache of its own).
 *
 * Each test runs in a forked child (the test process keeps its keys) that
 * is the first in its process to schedule a timeout: the library makes its
 * key on first need, and the test process never schedules.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* In the child: cmocka's asserts belong to the parent. Exits with the
 * failing line. */
#define CHILD_CHECK(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "child: %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
            _exit(__LINE__ % 250 + 1);                                                             \
        }                                                                                          \
    } while (0)

enum { MAX_KEYS = 1 << 16 };

static int child(void *unused)
{
    (void)unused;
    hwtt_log log = {0};
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *timer = NULL;
    CHILD_CHECK(hwt_timer_create(&timer, &o) == 0);

    static pthread_key_t keys[MAX_KEYS];
    size_t n = 0;
    while (n < MAX_KEYS && pthread_key_create(&keys[n], NULL) == 0)
        n++;
    CHILD_CHECK(n > 0 && n < MAX_KEYS);

    hwt_timeout *t = NULL;
    CHILD_CHECK(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, &t) == HWT_ESYS);
    CHILD_CHECK(t == NULL);
    CHILD_CHECK(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL) == HWT_ESYS);
    CHILD_CHECK(hwt_pending_timeouts(timer) == 0);
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    CHILD_CHECK(st.scheduled == 0 && st.rejected == 0 && st.cancelled == 0);
    CHILD_CHECK(atomic_load(&log.count[HWT_LOG_ERROR]) > 0);

    CHILD_CHECK(pthread_key_delete(keys[--n]) == 0);
    CHILD_CHECK(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, &t) == 0);
    CHILD_CHECK(t != NULL);
    CHILD_CHECK(hwt_pending_timeouts(timer) == 1);
    hwt_timer_stats(timer, &st);
    CHILD_CHECK(st.scheduled == 1);
    CHILD_CHECK(hwt_timeout_cancel(t));
    hwt_timeout_release(t);

    while (n > 0)
        pthread_key_delete(keys[--n]);
    hwt_timer_destroy(timer);
    return 0;
}

/* Runs fn in a child, which must exit 0 within the deadline. */
static void in_child(int (*fn)(void *))
{
    assert_int_equal(hwtt_run_in_child(fn, NULL, hwtt_slack_ms(20000)), 0);
}

static void test_no_thread_key_is_esys_and_changes_nothing(void **state)
{
    (void)state;
    in_child(child);
}

static size_t take_every_key(void)
{
    static pthread_key_t keys[MAX_KEYS];
    size_t n = 0;
    while (n < MAX_KEYS && pthread_key_create(&keys[n], NULL) == 0)
        n++;
    return n;
}

static hwt_timer *logging_timer;
static pthread_t producer;
static atomic_int callback_rc = 1;

/* In the child: logging_timer with `log`, this thread its producer, and
 * every key of the process taken. */
static void logging_timer_without_keys(void (*log)(void *, hwt_log_level, const char *))
{
    producer = pthread_self();
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.log = log;
    CHILD_CHECK(hwt_timer_create(&logging_timer, &o) == 0);
    CHILD_CHECK(take_every_key() > 0);
}

/* Stops the timer on the producer's error log ("fatal: shut it down"). */
static void stop_on_error(void *ctx, hwt_log_level level, const char *message)
{
    (void)ctx;
    (void)message;
    if (level == HWT_LOG_ERROR && pthread_equal(pthread_self(), producer) &&
        atomic_load(&callback_rc) == 1)
        atomic_store(&callback_rc, hwt_stop(logging_timer, NULL, NULL));
}

static int stop_from_the_log_of_a_failed_schedule(void *unused)
{
    (void)unused;
    logging_timer_without_keys(stop_on_error);
    CHILD_CHECK(hwt_new_timeout(logging_timer, noop, NULL, 1, HWT_HOURS, NULL) == HWT_ESYS);
    CHILD_CHECK(atomic_load(&callback_rc) == 0); /* the stop returned, from the callback */
    hwt_timer_destroy(logging_timer);
    return 0;
}

/* The stop waits for every schedule that counted itself started: a failed
 * one logs only once it counts as failed. */
static void test_the_log_of_a_failed_schedule_may_stop_the_timer(void **state)
{
    (void)state;
    in_child(stop_from_the_log_of_a_failed_schedule);
}

/* Schedules on the timer when its worker logs. */
static void schedule_on_worker_log(void *ctx, hwt_log_level level, const char *message)
{
    (void)ctx;
    (void)level;
    (void)message;
    static atomic_bool called; /* once: the schedule fails and logs in turn */
    if (!pthread_equal(pthread_self(), producer) && !atomic_exchange(&called, true))
        atomic_store(&callback_rc,
                     hwt_new_timeout(logging_timer, noop, NULL, 1, HWT_HOURS, NULL));
}

static int schedule_from_the_starting_worker_log(void *unused)
{
    (void)unused;
    logging_timer_without_keys(schedule_on_worker_log);
    CHILD_CHECK(hwt_timer_start(logging_timer) == 0);
    /* The worker logged, and its schedule returned: HWT_ESYS on its
     * thread too (no key), but it returned. */
    CHILD_CHECK(hwtt_wait_until(atomic_load(&callback_rc) != 1, 5000));
    CHILD_CHECK(atomic_load(&callback_rc) == HWT_ESYS);
    hwt_timer_destroy(logging_timer);
    return 0;
}

/* The worker logs its own failure once the starters may go on: a schedule
 * from the callback waits for the start, which the worker itself ends. */
static void test_the_starting_worker_log_may_schedule(void **state)
{
    (void)state;
    in_child(schedule_from_the_starting_worker_log);
}

int main(void)
{
    hwtt_watchdog(120);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_thread_key_is_esys_and_changes_nothing),
        cmocka_unit_test(test_the_log_of_a_failed_schedule_may_stop_the_timer),
        cmocka_unit_test(test_the_starting_worker_log_may_schedule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

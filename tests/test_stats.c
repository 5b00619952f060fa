/*
 * test_stats.c - hwt_timer_stats() and hwt_pending_timeouts() (SPEC.md
 * sections 1 and 3, and section 4's "idle costs nothing"):
 *   scheduled / expired / cancelled / rejected match what the test did
 *   (cancelled includes stop's hand-backs and drops); pending equals
 *   hwt_pending_timeouts(); ticks grows while started, also when idle; wakeups
 *   stays small when nothing is due; late_max_ns measures lateness; NULL
 *   arguments do nothing.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define US INT64_C(1000)
#define MS INT64_C(1000000)

/* ------------------------------------------------------------ helpers */

static atomic_int g_runs;
static atomic_int g_cancels;

static void count_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_fetch_add(&g_runs, 1);
}

static void count_cancel(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_fetch_add(&g_cancels, 1);
}

static const hwt_task counting_task = {.run = count_run, .cancelled = count_cancel};

static int setup(void **state)
{
    (void)state;
    atomic_store(&g_runs, 0);
    atomic_store(&g_cancels, 0);
    return 0;
}

static hwt_stats stats_of(const hwt_timer *timer)
{
    hwt_stats s;
    memset(&s, 0xA5, sizeof s);
    hwt_timer_stats(timer, &s);
    return s;
}

static hwt_timer *mk(int64_t tick, hwt_unit unit, uint32_t wheel, int64_t max_pending)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = (uint64_t)tick;
    o.tick_unit = unit;
    o.ticks_per_wheel = wheel;
    o.max_pending_timeouts = max_pending;
    return hwtt_track(hwtt_timer_opts(&o));
}

static void print_stats(const char *what, const hwt_stats *s)
{
    print_message(
        "%s: pending %lld scheduled %llu expired %llu cancelled %llu rejected %llu ticks %llu "
        "wakeups %llu late_max %llu ns\n",
        what, (long long)s->pending, (unsigned long long)s->scheduled,
        (unsigned long long)s->expired, (unsigned long long)s->cancelled,
        (unsigned long long)s->rejected, (unsigned long long)s->ticks,
        (unsigned long long)s->wakeups, (unsigned long long)s->late_max_ns);
}

/* Waits (generously) until the counters reach the expected values, then
 * asserts they are exactly those (an overshoot fails too). */
static void expect_counters(const hwt_timer *timer, int64_t pending, uint64_t scheduled,
                            uint64_t expired, uint64_t cancelled, uint64_t rejected)
{
    hwt_stats s;
    hwtt_wait_until((s = stats_of(timer), s.pending == pending && s.scheduled == scheduled &&
                                              s.expired == expired && s.cancelled == cancelled &&
                                              s.rejected == rejected),
                    500 + hwtt_slack_ms(1000));
    s = stats_of(timer);
    if (s.pending != pending || s.scheduled != scheduled || s.expired != expired ||
        s.cancelled != cancelled || s.rejected != rejected) {
        print_stats("got", &s);
        fail_msg("expected pending %lld scheduled %llu expired %llu cancelled %llu rejected %llu",
                 (long long)pending, (unsigned long long)scheduled, (unsigned long long)expired,
                 (unsigned long long)cancelled, (unsigned long long)rejected);
    }
    assert_int_equal(hwt_pending_timeouts(timer), pending);
}

/* ------------------------------------------------------------ tests */

static void test_fresh_timer_is_all_zero(void **state)
{
    (void)state;
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 64, -1);
    hwt_stats s = stats_of(timer);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.scheduled, 0);
    assert_int_equal(s.expired, 0);
    assert_int_equal(s.cancelled, 0);
    assert_int_equal(s.rejected, 0);
    assert_int_equal(s.ticks, 0);
    assert_int_equal(s.wakeups, 0);
    assert_int_equal(s.late_max_ns, 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    /* Stopping a never-started timer changes none of them. */
    hwt_timeout **list = NULL;
    size_t n = 1;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 0);
    s = stats_of(timer);
    assert_int_equal(s.scheduled + s.expired + s.cancelled + s.rejected, 0);
    assert_int_equal(s.pending, 0);
    hwtt_destroy(timer);
}

static void test_counters_match_what_was_done(void **state)
{
    (void)state;
    hwt_timer *timer = mk(10, HWT_MILLISECONDS, 64, 5);
    hwt_timeout *l[5];
    for (int i = 0; i < 5; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &counting_task, NULL, 10, HWT_SECONDS, &l[i]),
                         0);
    expect_counters(timer, 5, 5, 0, 0, 0);

    /* Two rejections, through both entry points. */
    assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 1, HWT_MILLISECONDS, NULL),
                     HWT_EREJECTED);
    assert_int_equal(hwt_new_timeout_task(timer, &counting_task, NULL, 1, HWT_MILLISECONDS, NULL),
                     HWT_EREJECTED);
    expect_counters(timer, 5, 5, 0, 0, 2);

    /* Invalid calls count nothing. */
    assert_int_equal(hwt_new_timeout(timer, NULL, NULL, 1, HWT_MILLISECONDS, NULL), HWT_EINVAL);
    assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 1, (hwt_unit)99, NULL), HWT_EINVAL);

    /* Two cancels (one right after scheduling); a repeated cancel counts nothing. */
    assert_true(hwt_timeout_cancel(l[3]));
    assert_true(hwt_timeout_cancel(l[4]));
    assert_false(hwt_timeout_cancel(l[4]));
    expect_counters(timer, 3, 5, 0, 2, 2);
    assert_true(hwtt_wait_until(atomic_load(&g_cancels) == 2, 100 + hwtt_slack_ms(1000)));

    /* Two that run. */
    assert_int_equal(hwt_new_timeout_task(timer, &counting_task, NULL, 20, HWT_MILLISECONDS, NULL),
                     0);
    assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&g_runs) == 2, 20 + hwtt_slack_ms(1000)));
    expect_counters(timer, 3, 7, 2, 2, 2);

    /* Stop hands back three: cancelled counts them. */
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 3);
    hwt_timeouts_release(list, n);
    expect_counters(timer, 0, 7, 2, 5, 2);
    assert_int_equal(atomic_load(&g_cancels), 2);

    /* After the stop: HWT_ESTOPPED counts as neither scheduled nor rejected,
     * and a cancel of a handed-back timeout fails. */
    assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 1, HWT_MILLISECONDS, NULL),
                     HWT_ESTOPPED);
    assert_false(hwt_timeout_cancel(l[0]));
    expect_counters(timer, 0, 7, 2, 5, 2);
    hwt_stats s = stats_of(timer);
    assert_int_equal(s.scheduled, s.expired + s.cancelled + (uint64_t)s.pending);
    for (int i = 0; i < 5; i++)
        hwt_timeout_release(l[i]);
    hwtt_destroy(timer);
}

/* hwt_stop(t, NULL, NULL) drops: cancelled counts the drops. */
static void test_cancelled_counts_stop_drops(void **state)
{
    (void)state;
    hwt_timer *timer = mk(10, HWT_MILLISECONDS, 64, -1);
    for (int i = 0; i < 4; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &counting_task, NULL, 1, HWT_HOURS, NULL), 0);
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 1, HWT_HOURS, &h), 0);
    assert_true(hwt_timeout_cancel(h));
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    assert_int_equal(atomic_load(&g_cancels), 4);
    expect_counters(timer, 0, 5, 0, 5, 0);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

/* Timeouts scheduled from tasks count, and expired counts executor hand-overs. */
static void resched_once(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    if (atomic_fetch_add(&g_runs, 1) < 3)
        hwt_new_timeout(hwt_timeout_timer(timeout), resched_once, NULL, 2, HWT_MILLISECONDS, NULL);
}

static atomic_int g_exec_calls;

static void inline_executor(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    atomic_fetch_add(&g_exec_calls, 1);
    hwt_timeout_run(timeout);
}

static void test_counts_from_tasks_and_executor(void **state)
{
    (void)state;
    atomic_store(&g_exec_calls, 0);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.executor = inline_executor;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    assert_int_equal(hwt_new_timeout(timer, resched_once, NULL, 2, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&g_runs) == 4, 100 + hwtt_slack_ms(1000)));
    expect_counters(timer, 0, 4, 4, 0, 0);
    assert_int_equal(atomic_load(&g_exec_calls), 4);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 0);
    expect_counters(timer, 0, 4, 4, 0, 0);
    hwtt_destroy(timer);
}

static void test_pending_equals_hwt_pending_timeouts(void **state)
{
    (void)state;
    hwt_timer *timer = mk(5, HWT_MILLISECONDS, 16, -1);
    hwt_timeout *h[20];
    for (int i = 0; i < 20; i++) {
        assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 1 + i, HWT_MINUTES, &h[i]), 0);
        hwt_stats s = stats_of(timer);
        assert_int_equal(s.pending, i + 1);
        assert_int_equal(s.pending, hwt_pending_timeouts(timer));
    }
    for (int i = 0; i < 20; i += 2) {
        assert_true(hwt_timeout_cancel(h[i]));
        hwt_stats s = stats_of(timer);
        assert_int_equal(s.pending, 20 - (i / 2 + 1));
        assert_int_equal(s.pending, hwt_pending_timeouts(timer));
    }
    /* Some that run: pending goes back to 10. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 3 * i, HWT_MILLISECONDS, NULL), 0);
    /* 15 unless this thread was preempted long enough for some to run. */
    int64_t p = stats_of(timer).pending;
    assert_true(p >= 10 && p <= 15);
    assert_true(hwtt_wait_until(atomic_load(&g_runs) == 5, 100 + hwtt_slack_ms(1000)));
    assert_int_equal(stats_of(timer).pending, 10);
    assert_int_equal(hwt_pending_timeouts(timer), 10);

    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 10);
    hwt_timeouts_release(list, n);
    assert_int_equal(stats_of(timer).pending, 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    for (int i = 0; i < 20; i++)
        hwt_timeout_release(h[i]);
    hwtt_destroy(timer);
}

/* Counters only grow, also while tasks, cancels and schedules race; at the
 * end every scheduled timeout is accounted for. */
static atomic_bool g_churn_stop;

static void churn_task(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_runs, 1);
    if (!atomic_load(&g_churn_stop))
        hwt_new_timeout(hwt_timeout_timer(timeout), churn_task, NULL, 1, HWT_MILLISECONDS, NULL);
}

static void test_counters_only_grow(void **state)
{
    (void)state;
    atomic_store(&g_churn_stop, false);
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 32, -1);
    assert_int_equal(hwt_new_timeout(timer, churn_task, NULL, 1, HWT_MILLISECONDS, NULL), 0);
    hwt_stats prev = stats_of(timer);
    int regressions = 0;
    int64_t end = hwtt_now_ns() + 300 * MS;
    while (hwtt_now_ns() < end) {
        hwt_timeout *h = NULL;
        assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 1, HWT_HOURS, &h), 0);
        assert_true(hwt_timeout_cancel(h));
        hwt_timeout_release(h);
        hwt_stats s = stats_of(timer);
        regressions += s.scheduled < prev.scheduled || s.expired < prev.expired ||
                       s.cancelled < prev.cancelled || s.rejected < prev.rejected ||
                       s.ticks < prev.ticks || s.wakeups < prev.wakeups ||
                       s.late_max_ns < prev.late_max_ns;
        prev = s;
        hwtt_sleep_us(500);
    }
    atomic_store(&g_churn_stop, true);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    hwt_timeouts_release(list, n);
    hwt_stats s = stats_of(timer);
    print_stats("churn", &s);
    hwtt_destroy(timer);
    assert_int_equal(regressions, 0);
    assert_true(n <= 1);
    assert_true(atomic_load(&g_runs) > 0);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.expired, (uint64_t)atomic_load(&g_runs));
    /* Scheduled = ran + cancelled (including the hand-back). */
    assert_int_equal(s.scheduled, s.expired + s.cancelled);
}

/* ------------------------------------------------------- ticks, wakeups */

static void test_ticks_grow_while_idle(void **state)
{
    (void)state;
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 512, -1);
    assert_int_equal(stats_of(timer).ticks, 0);
    int64_t t0 = hwtt_now_ns();
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_stats s;
    bool grew = hwtt_wait_until((s = stats_of(timer), s.ticks >= 100), 100 + hwtt_slack_ms(1000));
    int64_t t1 = hwtt_now_ns();
    print_stats("idle 100 ticks", &s);
    assert_true(grew);
    /* Never more ticks than time allows (one in progress at most). */
    assert_true((int64_t)(s.ticks - 1) * MS <= t1 - t0);
    /* And it keeps growing. */
    uint64_t before = s.ticks;
    assert_true(hwtt_wait_until(stats_of(timer).ticks >= before + 50, 50 + hwtt_slack_ms(1000)));
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 0);
    hwtt_destroy(timer);
}

/* "ticks elapsed since the worker started": once hwt_stop has returned the
 * worker is gone, and no tick elapses for it. */
static void test_ticks_stand_still_after_stop(void **state)
{
    (void)state;
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 512, -1);
    assert_int_equal(hwt_timer_start(timer), 0);
    assert_true(hwtt_wait_until(stats_of(timer).ticks >= 20, 20 + hwtt_slack_ms(1000)));
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    uint64_t at_stop = stats_of(timer).ticks;
    assert_true(at_stop >= 20);
    hwtt_sleep_ms(30); /* 30 tick lengths pass */
    uint64_t later = stats_of(timer).ticks;
    hwtt_destroy(timer);
    assert_int_equal(later, at_stop);
}

/* SPEC 4: an idle worker sleeps until something is due, instead of waking on
 * every tick (Netty wakes 1000 times a second with a 1 ms tick). */
static void idle_wakeups_case(bool with_far_timeout)
{
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 512, -1);
    if (with_far_timeout)
        assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 10, HWT_MINUTES, NULL), 0);
    else
        assert_int_equal(hwt_timer_start(timer), 0);
    hwt_stats s;
    /* About 500 ms of idleness, measured by the timer's own tick count. */
    bool waited = hwtt_wait_until((s = stats_of(timer), s.ticks >= 500), 500 + hwtt_slack_ms(2000));
    print_stats(with_far_timeout ? "idle with a 10 min timeout" : "idle", &s);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    hwt_timeouts_release(list, n);
    hwtt_destroy(timer);
    assert_true(waited);
    assert_int_equal(n, with_far_timeout ? 1 : 0);
    assert_int_equal(atomic_load(&g_runs), 0);
    if (s.wakeups > 5)
        fail_msg("idle worker woke %llu times in %llu ticks of 1 ms (at most 5 expected)",
                 (unsigned long long)s.wakeups, (unsigned long long)s.ticks);
}

static void test_idle_worker_does_not_tick(void **state)
{
    (void)state;
    idle_wakeups_case(false);
}

static void test_idle_worker_with_far_timeout_does_not_tick(void **state)
{
    (void)state;
    idle_wakeups_case(true);
}

/* Work spaced 10 ms apart on a 1 ms tick: the worker does wake (the counter
 * counts), but not on each of the ~100 ticks. */
static void test_wakeups_follow_work(void **state)
{
    (void)state;
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 512, -1);
    for (int i = 1; i <= 10; i++)
        assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 10 * i, HWT_MILLISECONDS, NULL),
                         0);
    assert_true(hwtt_wait_until(atomic_load(&g_runs) == 10, 100 + hwtt_slack_ms(1000)));
    hwt_stats s = stats_of(timer);
    print_stats("10 timeouts 10 ms apart", &s);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    hwtt_destroy(timer);
    assert_int_equal(n, 0);
    assert_true(s.wakeups >= 5);
    if (s.wakeups > 60)
        fail_msg("%llu wakeups for 10 timeouts over %llu ticks", (unsigned long long)s.wakeups,
                 (unsigned long long)s.ticks);
}

/* ------------------------------------------------------------ late_max */

static void test_late_max_after_tasks(void **state)
{
    (void)state;
    hwt_timer *timer = mk(1, HWT_MILLISECONDS, 512, -1);
    assert_int_equal(stats_of(timer).late_max_ns, 0);
    for (int i = 0; i < 20; i++)
        assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 5 + i, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&g_runs) == 20, 25 + hwtt_slack_ms(1000)));
    hwt_stats s = stats_of(timer);
    print_stats("20 timeouts on a 1 ms tick", &s);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    hwtt_destroy(timer);
    assert_int_equal(n, 0);
    assert_true(s.late_max_ns > 0);
    if ((int64_t)s.late_max_ns > 1 * MS + hwtt_slack_ms(300) * MS)
        fail_msg("late_max_ns %llu on a 1 ms tick", (unsigned long long)s.late_max_ns);
}

static void sleepy_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    hwtt_sleep_ms(50); /* makes the next task in the same tick 50 ms late */
    atomic_fetch_add(&g_runs, 1);
}

/* A task that holds the worker for 50 ms makes the next one, due in the same
 * tick, at least ~50 ms late: late_max_ns sees it. */
static void test_late_max_sees_a_blocked_worker(void **state)
{
    (void)state;
    hwt_timer *timer = mk(10, HWT_MILLISECONDS, 64, -1);
    assert_int_equal(hwt_new_timeout(timer, sleepy_task, NULL, 30, HWT_MILLISECONDS, NULL), 0);
    assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 30, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&g_runs) == 2, 80 + hwtt_slack_ms(1000)));
    hwt_stats s = stats_of(timer);
    print_stats("blocked worker", &s);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    hwtt_destroy(timer);
    assert_int_equal(n, 0);
    if ((int64_t)s.late_max_ns < 45 * MS)
        fail_msg("late_max_ns %llu, expected >= 45 ms", (unsigned long long)s.late_max_ns);
    if ((int64_t)s.late_max_ns > 60 * MS + hwtt_slack_ms(300) * MS)
        fail_msg("late_max_ns %llu, expected about 50 ms", (unsigned long long)s.late_max_ns);
}

/* ------------------------------------------------------------ NULL */

static void test_null_arguments(void **state)
{
    (void)state;
    hwt_stats s, pattern;
    memset(&s, 0x5A, sizeof s);
    memset(&pattern, 0x5A, sizeof pattern);
    hwt_timer_stats(NULL, &s);
    assert_memory_equal(&s, &pattern, sizeof s);
    hwt_timer_stats(NULL, NULL);
    assert_int_equal(hwt_pending_timeouts(NULL), HWT_EINVAL);

    hwt_timer *timer = mk(10, HWT_MILLISECONDS, 64, -1);
    hwt_timer_stats(timer, NULL); /* does nothing, does not crash */
    assert_int_equal(hwt_new_timeout(timer, count_run, NULL, 1, HWT_HOURS, NULL), 0);
    hwt_timer_stats(timer, NULL);
    assert_int_equal(stats_of(timer).scheduled, 1);
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 1);
    hwt_timeouts_release(list, n);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------------------- main */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, hwtt_teardown_timers)

int main(void)
{
    hwtt_watchdog(150);
    const struct CMUnitTest tests[] = {
        T(test_fresh_timer_is_all_zero),
        T(test_counters_match_what_was_done),
        T(test_cancelled_counts_stop_drops),
        T(test_counts_from_tasks_and_executor),
        T(test_pending_equals_hwt_pending_timeouts),
        T(test_counters_only_grow),
        T(test_ticks_grow_while_idle),
        T(test_ticks_stand_still_after_stop),
        T(test_idle_worker_does_not_tick),
        T(test_idle_worker_with_far_timeout_does_not_tick),
        T(test_wakeups_follow_work),
        T(test_late_max_after_tasks),
        T(test_late_max_sees_a_blocked_worker),
        T(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

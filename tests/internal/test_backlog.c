/*
 * test_backlog.c - new timeouts due after the worker's planned wake-up wait
 * in the queue (timeout.c, maybe_wake_for; worker.c, run_loop), but not
 * for long: a producer wakes the worker once the timer's backlog_kick of
 * them are queued (derived from max_transfers_per_tick, worker_policy.h),
 * a worker that goes to sleep with some queued wakes within the cancel
 * latency (max(tick, 100 ms)) to move them, and so does one that a budget
 * of them finds planning a longer sleep. The plan's side of both is
 * checked without threads in test_plan.c.
 */
#include <pthread.h>
#include <stdlib.h>

#include "helpers.h"
#include "internal.h"

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static uint64_t transferred(hwt_timer *timer)
{
    return atomic_load(&timer->transferred);
}

/* A timer whose transfer budget is 4096 (backlog_kick 40 960), far below
 * the default's, so that a threshold that did not follow the budget shows. */
static hwt_timer *small_budget_timer(uint64_t tick, hwt_unit unit)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = tick;
    o.tick_unit = unit;
    o.max_transfers_per_tick = 4096;
    return hwtt_track(hwtt_timer_opts(&o));
}

/* A worker asleep until an hour away, on a 10 minute tick (so it would not
 * wake for the cancel latency either within the test): the backlog must
 * wake it. */
static void test_backlog_wakes_the_worker(void **state)
{
    (void)state;
    hwt_timer *timer = small_budget_timer(10, HWT_MINUTES);
    assert_int_equal(hwt_timer_start(timer), 0);
    const uint64_t kick = timer->backlog_kick;
    assert_int_equal(kick, HWT_BACKLOG_BUDGETS * 4096);
    assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
    assert_true(hwtt_wait_until(transferred(timer) == 1, hwtt_slack_ms(2000)));
    const uint64_t n = kick + 2 * HWT_BACKLOG_CHECK_EVERY;
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(hwt_new_timeout(timer, noop, NULL, 2, HWT_HOURS, NULL), 0);
    /* A producer looks at the backlog every HWT_BACKLOG_CHECK_EVERY
     * schedules: n >= twice that + the threshold guarantees a look at a
     * backlog over it. One pass moves up to the budget, more than this. */
    if (!hwtt_wait_until(transferred(timer) >= 1 + n - kick - HWT_BACKLOG_CHECK_EVERY,
                         hwtt_slack_ms(5000)))
        fail_msg("%llu of %llu moved into the wheel", (unsigned long long)transferred(timer),
                 (unsigned long long)(n + 1));
    assert_int_equal(hwt_pending_timeouts(timer), (int64_t)(n + 1));
    hwtt_destroy(timer);
}

/* The same backlog made by many threads, each making fewer schedules than
 * HWT_BACKLOG_CHECK_EVERY: the looks used to be counted per thread, so no
 * thread ever looked and the worker slept on. They are counted per stripe
 * now, every few pushes for a small budget (hwt__backlog_check_mask). */
enum { SPREAD_THREADS = 16, SPREAD_EACH = 1000, SPREAD_BUDGET = 1000 };

static void *schedule_spread_share(void *p)
{
    hwt_timer *timer = p;
    for (int i = 0; i < SPREAD_EACH; i++)
        if (hwt_new_timeout(timer, noop, NULL, 2, HWT_HOURS, NULL) != 0)
            return p;
    return NULL;
}

static void test_a_backlog_spread_over_many_threads_wakes_the_worker(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.tick_unit = HWT_MINUTES;
    o.max_transfers_per_tick = SPREAD_BUDGET;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    assert_true(SPREAD_EACH < HWT_BACKLOG_CHECK_EVERY &&
                SPREAD_THREADS * SPREAD_EACH > timer->backlog_kick);
    assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
    assert_true(hwtt_wait_until(transferred(timer) == 1, hwtt_slack_ms(2000)));
    pthread_t producers[SPREAD_THREADS];
    for (int i = 0; i < SPREAD_THREADS; i++)
        assert_int_equal(pthread_create(&producers[i], NULL, schedule_spread_share, timer), 0);
    for (int i = 0; i < SPREAD_THREADS; i++) {
        void *failed;
        pthread_join(producers[i], &failed);
        assert_null(failed);
    }
    /* Woken, the worker moves a budget at once (the rest at the end of
     * the 10 minute tick). */
    if (!hwtt_wait_until(transferred(timer) >= 1 + SPREAD_BUDGET, hwtt_slack_ms(5000)))
        fail_msg("%llu of %d moved into the wheel: nobody woke the worker",
                 (unsigned long long)transferred(timer), 1 + SPREAD_THREADS * SPREAD_EACH);
    hwtt_destroy(timer);
}

/* A worker that plans to sleep for an hour (one timeout, an hour away, on
 * a 1 ms tick), and a burst of two transfer budgets of far timeouts: fewer
 * than backlog_kick, so no producer wakes it for moving them at once; but
 * a budget of them wakes it to move them within the cancel latency (after
 * the burst), not at its far wake-up. */
static void test_a_budget_queued_moves_within_the_cancel_latency(void **state)
{
    (void)state;
    hwt_timer *timer = small_budget_timer(1, HWT_MILLISECONDS);
    assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
    /* Asleep with its plan published: far past the latency, and past what
     * this test waits for. */
    if (!hwtt_wait_until(transferred(timer) == 1 && !atomic_load(&timer->cancel_watch) &&
                             atomic_load(&timer->wake_before) >
                                 hwt__rel_now(timer) + 600 * INT64_C(1000000000),
                         hwtt_slack_ms(2000)))
        fail_msg("the worker did not plan a long sleep");
    const uint64_t n = 2 * timer->max_transfers + 2 * HWT_BACKLOG_CHECK_EVERY;
    assert_true(n < timer->backlog_kick);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(hwt_new_timeout(timer, noop, NULL, 2, HWT_HOURS, NULL), 0);
    if (!hwtt_wait_until(transferred(timer) == 1 + n, hwtt_slack_ms(2000)))
        fail_msg("%llu of %llu moved into the wheel", (unsigned long long)transferred(timer),
                 (unsigned long long)(n + 1));
    assert_int_equal(hwt__queued_count(timer), 0);
    assert_int_equal(hwt_pending_timeouts(timer), (int64_t)(n + 1));
    hwtt_destroy(timer);
}

#define FROM_TASK 1000

/* Holds the worker for 5 ms, so that the ticks after its own end meanwhile. */
static void hold_worker(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    int64_t until = hwtt_now_ns() + 5 * 1000000;
    while (hwtt_now_ns() < until) {
    }
}

/* Schedules FROM_TASK timeouts two hours away, on the worker: no wake-up. */
static void schedule_far(hwt_timeout *timeout, void *arg)
{
    int *failed = arg;
    for (int i = 0; i < FROM_TASK; i++)
        *failed += hwt_new_timeout(hwt_timeout_timer(timeout), noop, NULL, 2, HWT_HOURS, NULL) != 0;
}

/* Far fewer than the backlog threshold, queued by a task while the worker
 * runs the ticks that ended during an earlier task (after its transfer):
 * it goes to sleep with them queued, its next due tick an hour away, and
 * must come back for them within the cancel latency (100 ms on a 1 ms
 * tick), not in an hour. */
static void test_queued_timeouts_move_within_the_cancel_latency(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    int failed = 0;
    assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
    assert_int_equal(hwt_new_timeout(timer, hold_worker, NULL, 5, HWT_MILLISECONDS, NULL), 0);
    assert_int_equal(hwt_new_timeout(timer, schedule_far, &failed, 6, HWT_MILLISECONDS, NULL), 0);
    if (!hwtt_wait_until(transferred(timer) == 3 + FROM_TASK, hwtt_slack_ms(2000)))
        fail_msg("%llu of %d moved into the wheel", (unsigned long long)transferred(timer),
                 3 + FROM_TASK);
    assert_int_equal(failed, 0);
    assert_int_equal(hwt__queued_count(timer), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 1 + FROM_TASK);
    hwtt_destroy(timer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_backlog_wakes_the_worker, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_backlog_spread_over_many_threads_wakes_the_worker,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_queued_timeouts_move_within_the_cancel_latency,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_budget_queued_moves_within_the_cancel_latency,
                                  hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

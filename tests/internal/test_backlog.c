/*
 * test_backlog.c - a worker asleep until a far deadline is woken to move new
 * timeouts into the wheel once enough have queued (timeout.c,
 * maybe_wake_for): at most half a transfer budget, so that one pass takes
 * them all and the queue does not grow without bound while nothing is due.
 */
#include <stdlib.h>

#include "helpers.h"
#include "internal.h"

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static hwt_timer *timer_with_budget(uint32_t max_transfers)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_MILLISECONDS;
    o.max_transfers_per_tick = max_transfers;
    return hwtt_track(hwtt_timer_opts(&o));
}

static uint64_t transferred(hwt_timer *timer)
{
    return atomic_load(&timer->transferred);
}

static void test_threshold_follows_the_budget(void **state)
{
    (void)state;
    assert_int_equal(timer_with_budget(100000)->backlog_kick, HWT_BACKLOG_KICK);
    assert_int_equal(timer_with_budget(2 * HWT_BACKLOG_KICK)->backlog_kick, HWT_BACKLOG_KICK);
    assert_int_equal(timer_with_budget(64)->backlog_kick, 32);
    assert_int_equal(timer_with_budget(3)->backlog_kick, 1);
    assert_int_equal(timer_with_budget(1)->backlog_kick, 1);
}

/* Far timeouts only: no deadline wakes the worker, the backlog must. */
static void backlog_case(uint32_t max_transfers, uint64_t n)
{
    hwt_timer *timer = timer_with_budget(max_transfers);
    assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
    assert_true(hwtt_wait_until(transferred(timer) == 1, hwtt_slack_ms(2000)));
    /* The worker now sleeps until the hour is up; later deadlines do not wake it. */
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(hwt_new_timeout(timer, noop, NULL, 2, HWT_HOURS, NULL), 0);
    /* A producer looks at the backlog every 1024 schedules: n >= 2048 + the
     * threshold guarantees a look at a backlog over it. */
    if (!hwtt_wait_until(transferred(timer) >= 1 + n - timer->backlog_kick - 1024,
                         hwtt_slack_ms(2000)))
        fail_msg("budget %u: %llu of %llu moved into the wheel", max_transfers,
                 (unsigned long long)transferred(timer), (unsigned long long)(n + 1));
    assert_int_equal(hwt_pending_timeouts(timer), (int64_t)(n + 1));
    hwtt_destroy(timer);
}

static void test_backlog_wakes_the_worker(void **state)
{
    (void)state;
    backlog_case(100000, 2 * HWT_BACKLOG_KICK + 2048);
}

static void test_backlog_wakes_the_worker_small_budget(void **state)
{
    (void)state;
    backlog_case(64, 4096);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_threshold_follows_the_budget, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_backlog_wakes_the_worker, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_backlog_wakes_the_worker_small_budget,
                                  hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

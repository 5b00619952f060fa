/*
 * test_refile.c - the worker's cost of a reschedule that moves a deadline
 * later: the timeout stays in its old slot and is filed again when that
 * slot comes due, once per time, however many calls moved it meanwhile.
 */
#include <pthread.h>

#include "helpers.h"
#include "internal.h"

static void ran(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_store((_Atomic int64_t *)arg, hwtt_now_ns());
}

/* A million reschedules, each 50 ms from its own now: the worker files the
 * timeout again only as its old slot comes due (every ~50 ms while the calls
 * go on), never once per call, and it runs 50 ms after the last. */
static void test_a_million_moves_later_are_filed_again_a_few_times(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    _Atomic int64_t ran_at = 0;
    hwt_timeout *h;
    assert_int_equal(hwt_new_timeout(timer, ran, (void *)&ran_at, 50, HWT_MILLISECONDS, &h), 0);
    int64_t begin = hwtt_now_ns(), last = 0;
    for (int i = 0; i < 1000000; i++) {
        last = hwtt_now_ns();
        assert_true(hwt_timeout_reschedule(h, 50, HWT_MILLISECONDS));
    }
    int64_t spent_ms = (hwtt_now_ns() - begin) / 1000000;
    assert_true(hwtt_wait_until(atomic_load(&ran_at) != 0, hwtt_slack_ms(2000)));
    assert_true(atomic_load(&ran_at) >= last + 50 * INT64_C(1000000));
    uint64_t refiled = atomic_load(&timer->refiled);
    print_message("  1M moves in %lld ms: filed again %llu times\n", (long long)spent_ms,
                  (unsigned long long)refiled);
    /* Once per ~50 ms of calls (plus one for the tick it straddles). */
    assert_true(refiled <= (uint64_t)(spent_ms / 50 + 2));
    assert_true(refiled >= 1);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

static void count_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* A second move earlier, while the first one's entry is still on its moved
 * stack (the worker not woken for it: the first deadline was no earlier
 * than its planned wake-up), must still wake the worker for the second. */
static void test_a_second_move_earlier_wakes_the_worker(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(100, HWT_MILLISECONDS, 512));
    atomic_int ran = 0;
    hwt_timeout *h;
    int64_t scheduled = hwtt_now_ns(); /* the deadline is at least this + 10 s */
    assert_int_equal(hwt_new_timeout(timer, count_run, &ran, 10000, HWT_MILLISECONDS, &h), 0);
    /* In the wheel, the worker asleep until its tick (~10 s away). */
    assert_true(hwtt_wait_until(atomic_load(&timer->transferred) >= 1, hwtt_slack_ms(2000)));
    hwtt_sleep_ms(250);
    /* 2 ms earlier: the same 100 ms tick (but 1 time in 50), no wake-up
     * needed; the timeout waits on a moved stack for the worker's next pass. */
    int64_t two_ms_earlier = scheduled + INT64_C(9998) * 1000000 - hwtt_now_ns();
    assert_true(hwt_timeout_reschedule(h, two_ms_earlier, HWT_NANOSECONDS));
    int64_t t0 = hwtt_now_ns();
    assert_true(hwt_timeout_reschedule(h, 50, HWT_MILLISECONDS));
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(1000)));
    assert_true(hwtt_now_ns() - t0 >= 50 * INT64_C(1000000));
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_a_million_moves_later_are_filed_again_a_few_times,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_second_move_earlier_wakes_the_worker,
                                  hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

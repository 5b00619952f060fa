/*
 * test_stats_races.c - the exactness of the pending count and the stats
 * under concurrency (SPEC.md section 3: "the pending count goes up when a
 * timeout is scheduled and down exactly once ..."; "the timeout that would
 * include/hwtimer.h: hwt_pending_timeouts is "timeouts scheduled and not
 * yet run, cancelled or stopped", hwt_stats "each field is exact when
 * read"). Interleavings are forced by pausing a chosen thread inside the
 * allocation hook (src/alloc.h) of its schedule call; one test is a
 * bounded race (2 s at most, stops at the first wrong read).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "helpers.h"
#include "internal.h"

/* ------------------------------------------------ a pausing alloc hook */

/* Only the thread that set `paused_here` is paused, once, at its first
 * allocation at any site; the hook then makes it fail if `fail_it`. */
static _Thread_local bool paused_here;
static atomic_bool hook_armed, hook_reached, hook_open, fail_it;

static int pausing_hook(hwt__alloc_site site)
{
    (void)site;
    if (!paused_here || !atomic_exchange(&hook_armed, false))
        return 0;
    atomic_store(&hook_reached, true);
    int64_t deadline = hwtt_now_ns() + INT64_C(30) * 1000000000;
    while (!atomic_load(&hook_open) && hwtt_now_ns() < deadline)
        hwtt_sleep_us(100);
    return atomic_load(&fail_it) ? 1 : 0;
}

static void arm_hook(bool fail)
{
    atomic_store(&hook_reached, false);
    atomic_store(&hook_open, false);
    atomic_store(&fail_it, fail);
    atomic_store(&hook_armed, true);
    hwt__set_alloc_fail_hook(pausing_hook);
}

static int setup(void **state)
{
    (void)state;
    atomic_store(&hook_armed, false);
    return 0;
}

static int teardown(void **state)
{
    atomic_store(&hook_open, true);
    hwt__set_alloc_fail_hook(NULL);
    return hwtt_teardown_timers(state);
}

static void noop(hwt_timeout *t, void *arg)
{
    (void)t;
    (void)arg;
}

/* A schedule on its own thread, paused in its first allocation. */
struct paused_call {
    pthread_t thread;
    hwt_timer *timer;
    atomic_bool done;
    int rc;
};

static void *paused_call_main(void *p)
{
    struct paused_call *c = p;
    paused_here = true;
    c->rc = hwt_new_timeout(c->timer, noop, NULL, 1, HWT_HOURS, NULL);
    paused_here = false;
    atomic_store(&c->done, true);
    return NULL;
}

static void begin_paused(struct paused_call *c, hwt_timer *timer)
{
    memset(c, 0, sizeof *c);
    c->timer = timer;
    assert_int_equal(pthread_create(&c->thread, NULL, paused_call_main, c), 0);
    assert_true(hwtt_wait_until(atomic_load(&hook_reached), hwtt_slack_ms(5000)));
}

static void finish_paused(struct paused_call *c)
{
    atomic_store(&hook_open, true);
    assert_true(hwtt_wait_until(atomic_load(&c->done), hwtt_slack_ms(10000)));
    pthread_join(c->thread, NULL);
    hwt__set_alloc_fail_hook(NULL);
}

static hwt_timer *new_timer(int64_t max_pending)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_MILLISECONDS;
    o.max_pending_timeouts = max_pending;
    return hwtt_track(hwtt_timer_opts(&o));
}

/* ------------------------------------------------------------ tests */

/* A schedule call counts in the pending count once it has queued its
 * timeout, not from the moment it starts: a call that fails with
 * HWT_ENOMEM ("nothing was scheduled") never shows as pending while it
 * runs (an unlimited timer counted calls as they started: pending 1 with
 * scheduled 0, though no timeout existed at any moment). */
static void test_a_schedule_that_fails_is_never_pending(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer(-1);
    assert_int_equal(hwt_timer_start(timer), 0);
    arm_hook(true);
    struct paused_call c;
    begin_paused(&c, timer); /* inside its call, at its first allocation */
    int64_t pending_seen = hwt_pending_timeouts(timer);
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    finish_paused(&c);
    assert_int_equal(c.rc, HWT_ENOMEM);
    print_message("while the failing call ran: pending %lld, stats.pending %lld, scheduled %llu\n",
                  (long long)pending_seen, (long long)s.pending, (unsigned long long)s.scheduled);
    assert_int_equal(s.scheduled, 0);
    assert_int_equal(pending_seen, 0);
    assert_int_equal(s.pending, 0);
    hwtt_destroy(timer);
}

/* The same on a limited timer passes (the slot is reserved last): the
 * difference is the unlimited path of read_pending. */
static void test_a_schedule_that_fails_is_never_pending_limited(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer(10);
    assert_int_equal(hwt_timer_start(timer), 0);
    arm_hook(true);
    struct paused_call c;
    begin_paused(&c, timer);
    int64_t pending_seen = hwt_pending_timeouts(timer);
    finish_paused(&c);
    assert_int_equal(c.rc, HWT_ENOMEM);
    assert_int_equal(pending_seen, 0);
    hwtt_destroy(timer);
}

/* One timeout is pending at every moment: a thread schedules a new one,
 * then cancels the old one, over and over (the count goes 1, 2, 1, 2...).
 * A read must never be below every count the timer had while it ran:
 * never 0 (a read that summed each stripe's schedules, then its cancels,
 * was one short when a pair came in between). While schedules keep coming
 * it may count some made during the call (over 2: printed, not failed).
 * Bounded: 2 s at most, stops at the first wrong read. */
static atomic_bool churn_stop;
static atomic_long churn_pairs;

static void *churn_main(void *p)
{
    hwt_timer *timer = p;
    hwt_timeout *old;
    if (hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, &old) != 0)
        return NULL;
    while (!atomic_load(&churn_stop)) {
        hwt_timeout *next;
        if (hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, &next) != 0)
            break;
        hwt_timeout_cancel(old);
        hwt_timeout_release(old);
        old = next;
        atomic_fetch_add_explicit(&churn_pairs, 1, memory_order_relaxed);
    }
    hwt_timeout_release(old);
    return NULL;
}

static void test_pending_never_reads_below_every_count_it_had(void **state)
{
    (void)state;
    hwt_timer *timer = new_timer(-1);
    assert_int_equal(hwt_timer_start(timer), 0);
    atomic_store(&churn_stop, false);
    atomic_store(&churn_pairs, 0);
    pthread_t churn;
    assert_int_equal(pthread_create(&churn, NULL, churn_main, timer), 0);
    assert_true(hwtt_wait_until(atomic_load(&churn_pairs) > 0, hwtt_slack_ms(5000)));
    int64_t end = hwtt_now_ns() + INT64_C(2000) * 1000000;
    long reads = 0, zeros = 0, over = 0;
    while (hwtt_now_ns() < end && zeros == 0) {
        for (int i = 0; i < 1000; i++) {
            int64_t p = hwt_pending_timeouts(timer);
            reads++;
            zeros += p < 1;
            over += p > 2;
        }
    }
    atomic_store(&churn_stop, true);
    pthread_join(churn, NULL);
    print_message("%ld reads, %ld pairs, %ld read below 1, %ld over 2\n", reads,
                  atomic_load(&churn_pairs), zeros, over);
    assert_int_equal(zeros, 0);
    hwtt_destroy(timer);
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_schedule_that_fails_is_never_pending, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_schedule_that_fails_is_never_pending_limited, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pending_never_reads_below_every_count_it_had, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_queue.c - what the worker leaves in the new-timeout queue, and how it
 * hears of what it must not leave there (worker.c, timeout.c):
 *   - it sleeps until its planned tick even with new timeouts queued, when
 *     they are due later (each stripe's queued_min); a new timeout due
 *     earlier wakes it, also one scheduled while it plans, and one its own
 *     task scheduled is seen before it sleeps; a minimum left behind by a
 *     take that raced the producer does not keep it awake;
 *   - a timeout cancelled while still queued, without a cancelled callback,
 *     is not pushed on a cancel stack: the worker drops it as it takes it
 *     from the queue, and a stop does not wait for it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "helpers.h"
#include "internal.h"

static uint64_t transferred(hwt_timer *timer)
{
    return atomic_load(&timer->transferred);
}

static uint64_t wakeups(hwt_timer *timer)
{
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    return st.wakeups;
}

/* Whether the worker, having moved the hour's timeout, planned its sleep:
 * it published a wake-up (wake_before, relative to the timer's start;
 * INT64_MIN while awake) near the hour, when the wheel cascades that
 * timeout. Once it sleeps, a timeout due later stays queued (it may still
 * be rechecking the queues: see test_later_deadline_stays_queued). The move
 * alone is not the state the tests mean: the worker then still ends its
 * pass, and takes what was queued meanwhile (under emulation, one run in
 * three). */
static bool planned_the_hour(hwt_timer *timer)
{
    return transferred(timer) == 1 &&
           atomic_load(&timer->wake_before) >= 30 * 60 * INT64_C(1000000000);
}

/* A started 1 ms timer whose worker sleeps until an hour from now. */
static hwt_timer *sleeping_timer(void)
{
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_HOURS, NULL), 0);
    assert_true(hwtt_wait_until(planned_the_hour(timer), hwtt_slack_ms(2000)));
    return timer;
}

/* The last kick the worker got: a thread that wakes it notes the value it
 * bumped wake_seq to in `kicked`, a new one each time (hwt__kick_worker).
 * Not wake_seq itself: the worker bumps it too, as it plans. */
static uint32_t kicks(hwt_timer *timer)
{
    return atomic_load(&timer->kicked);
}

/* Up to ATTEMPTS fresh timers: a worker seen planning the hour may not be
 * asleep yet. Its recheck may see the test's new timeout (it then plans
 * again, within the cancel latency, and moves it: as designed), or the
 * first schedule's kick, sent before that plan was published, may end the
 * sleep that follows. Either shows as a wake-up after the test looked; the
 * scenario is then tried again. A kick from the later schedule fails it. */
#define ATTEMPTS 5

static void test_later_deadline_stays_queued(void **state)
{
    (void)state;
    hwt_timer *timer = NULL;
    for (int attempt = 0;; attempt++) {
        if (attempt == ATTEMPTS)
            fail_msg("the worker woke after the test looked in each of %d attempts", ATTEMPTS);
        timer = sleeping_timer();
        uint32_t kicked = kicks(timer);
        uint64_t woke = wakeups(timer);
        assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 2, HWT_HOURS, NULL), 0);
        assert_int_equal(kicks(timer), kicked);
        hwtt_sleep_ms(100); /* time for a wrong move to happen */
        if (wakeups(timer) == woke)
            break;
        hwtt_destroy(timer);
    }
    assert_int_equal(transferred(timer), 1);
    assert_int_equal(hwt__queued_count(timer), 1);

    /* An earlier one wakes it; the pass takes the whole queue. */
    atomic_int ran = 0;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &ran, 20, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(2000)));
    assert_int_equal(transferred(timer), 3);
    assert_int_equal(hwt_pending_timeouts(timer), 2);
    hwtt_destroy(timer);
}

/* Each short timeout is scheduled right after the previous one ran, while
 * the worker finishes that pass and plans its sleep (a far backlog keeps
 * queued_min busy): none may wait for the hour. */
#define SHORT_ROUNDS 300

static void test_earlier_deadline_wakes_a_planning_worker(void **state)
{
    (void)state;
    hwt_timer *timer = sleeping_timer();
    unsigned seed = 4242;
    atomic_int ran = 0;
    for (int i = 0; i < SHORT_ROUNDS; i++) {
        for (int k = 0; k < 8; k++)
            assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 2 + k, HWT_HOURS, NULL),
                             0);
        int64_t delay_us = rand_r(&seed) % 2000;
        assert_int_equal(
            hwt_new_timeout(timer, hwtt_count_task, &ran, delay_us, HWT_MICROSECONDS, NULL), 0);
        if (!hwtt_wait_until(atomic_load(&ran) == i + 1, hwtt_slack_ms(1000)))
            fail_msg("round %d: a timeout due in %lld us did not run", i, (long long)delay_us);
    }
    hwtt_destroy(timer);
}

/* A task that schedules the next one: the worker itself queues it, wakes
 * nobody, and must see it before it plans an hour's sleep. */
#define CHAIN_LENGTH 50

struct chain {
    hwt_timer *timer;
    atomic_int ran;
};

static void chain_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct chain *c = arg;
    if (atomic_fetch_add(&c->ran, 1) + 1 < CHAIN_LENGTH)
        hwt_new_timeout(c->timer, chain_task, c, 1, HWT_MILLISECONDS, NULL);
}

static void test_timeout_scheduled_by_a_task_runs(void **state)
{
    (void)state;
    struct chain c = {sleeping_timer(), 0};
    assert_int_equal(hwt_new_timeout(c.timer, chain_task, &c, 1, HWT_MILLISECONDS, NULL), 0);
    if (!hwtt_wait_until(atomic_load(&c.ran) == CHAIN_LENGTH, hwtt_slack_ms(5000)))
        fail_msg("the chain stopped after %d of %d", atomic_load(&c.ran), CHAIN_LENGTH);
    hwtt_destroy(c.timer);
}

static int64_t thread_cpu_ns(pthread_t thread)
{
    clockid_t clock;
    struct timespec ts;
    assert_int_equal(pthread_getcpuclockid(thread, &clock), 0);
    assert_int_equal(clock_gettime(clock, &ts), 0);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A producer lowers its stripe's queued_min after its push; when the worker
 * took the push in between, the minimum outlives the timeout it noted, with
 * the stack empty. The worker must not keep looping for it. */
static void test_stale_queued_min_lets_the_worker_sleep(void **state)
{
    (void)state;
    hwt_timer *timer = sleeping_timer();
    uint64_t woke = wakeups(timer);
    atomic_store(&timer->stripes[HWT_STRIPES - 1].queued_min, 0); /* due long ago */
    /* As a producer's wake-up, until one lands: a worker that read wake_seq
     * after our bump and had not yet slept when we woke it sleeps on, as it
     * should (a producer's own change would be seen by its recheck; this
     * stale minimum is meant not to be). Under TSan about 1 run in 5. */
    int64_t give_up = hwtt_now_ns() + hwtt_slack_ms(2000) * INT64_C(1000000);
    while (wakeups(timer) <= woke && hwtt_now_ns() < give_up) {
        atomic_fetch_add(&timer->wake_seq, 1);
        hwt__wake(&timer->wake_seq);
        hwtt_sleep_ms(1);
    }
    assert_true(wakeups(timer) > woke);
    hwtt_sleep_ms(20); /* the pass that follows the wake-up */
    int64_t cpu = thread_cpu_ns(timer->thread);
    hwtt_sleep_ms(200); /* time for a spinning worker to show */
    int64_t spent_ms = (thread_cpu_ns(timer->thread) - cpu) / 1000000;
    if (spent_ms > 50)
        fail_msg("the worker used %lld ms of CPU in 200 ms with nothing to do",
                 (long long)spent_ms);
    hwtt_destroy(timer);
}

static void test_cancel_while_queued_skips_the_cancel_stack(void **state)
{
    (void)state;
    hwt_timer *timer = sleeping_timer();
    hwt_timeout *h;
    atomic_int ran = 0;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, &ran, 2, HWT_HOURS, &h), 0);
    assert_int_equal(hwt__queued_count(timer), 1);
    assert_true(hwt_timeout_cancel(h));
    assert_true(hwt__stack_is_empty(&hwt__my_stripe(timer)->cancels));
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    /* The worker planned an hour's sleep: the cancel woke it, it dropped
     * the timeout from the queue. */
    assert_true(hwtt_wait_until(transferred(timer) == 2, hwtt_slack_ms(2000)));
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    assert_int_equal(st.cancelled, 1);
    assert_true(hwt_timeout_is_cancelled(h));
    hwt_timeout_release(h);

    hwt_timeout **list;
    size_t count;
    assert_int_equal(hwt_stop(timer, &list, &count), 0);
    assert_int_equal(count, 1); /* the hour */
    hwt_timeouts_release(list, count);
    assert_int_equal(atomic_load(&ran), 0);
    hwtt_destroy(timer);
}

/* A stop right after the cancel of a queued timeout, with and without a
 * cancelled callback: whether the worker dropped it before the stop or the
 * stop finds it in the queue, the callback has run once when hwt_stop
 * returns, and the stop hands back only the hour. */
#define STOP_ROUNDS 100

static void test_stop_after_cancel_while_queued(void **state)
{
    (void)state;
    for (int i = 0; i < STOP_ROUNDS; i++) {
        hwt_timer *timer = sleeping_timer();
        hwtt_rec rec = {0};
        hwt_timeout *h;
        bool with_callback = i % 2 == 0;
        int rc = with_callback ? hwt_new_timeout_task(timer, &hwtt_rec_task, &rec, 2, HWT_HOURS, &h)
                               : hwt_new_timeout(timer, hwtt_rec_run, &rec, 2, HWT_HOURS, &h);
        assert_int_equal(rc, 0);
        assert_true(hwt_timeout_cancel(h));
        hwt_timeout **list;
        size_t count;
        assert_int_equal(hwt_stop(timer, &list, &count), 0);
        assert_int_equal(count, 1);
        assert_int_equal(atomic_load(&rec.cb), with_callback ? 1 : 0);
        assert_int_equal(atomic_load(&rec.ran), 0);
        assert_int_equal(hwt_pending_timeouts(timer), 0);
        hwt_timeouts_release(list, count);
        hwt_timeout_release(h);
        hwtt_destroy(timer);
    }
}

/* SPEC: cancelled timeouts are "reused within one tick or 100 ms, whichever
 * is longer, even when the worker is otherwise idle". One queued behind a
 * long planned sleep (due later than it: no kick), cancelled without a
 * cancelled callback: its canceller wakes the worker, which leaves the
 * queue for its next pass - planned a whole latency after that pass, so
 * the drop came 100 ms plus the wake-up's delay after the cancel. The plan
 * is now half the latency from the pass: seen from this thread, which reads
 * the clock after it sees the plan, it is well within three quarters of it
 * (a whole latency: only if this thread was held up a quarter of it). A
 * 1 us tick, so that no tick rounds the plan down. */
static void nothing(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static bool long_sleep_planned(hwt_timer *timer)
{
    return !atomic_load(&timer->cancel_watch) &&
           atomic_load(&timer->wake_before) > hwt__rel_now(timer) + INT64_C(5) * 1000000000;
}

static void test_a_queued_cancel_is_let_go_within_the_latency(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_MICROSECONDS;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    const int64_t latency = timer->cancel_latency_ns;
    assert_int_equal(latency, 100 * INT64_C(1000000));
    assert_int_equal(hwt_new_timeout(timer, nothing, NULL, 10, HWT_SECONDS, NULL), 0);
    assert_true(hwtt_wait_until(long_sleep_planned(timer), hwtt_slack_ms(2000)));
    hwt_timeout *t;
    assert_int_equal(hwt_new_timeout(timer, nothing, NULL, 1, HWT_HOURS, &t), 0);
    assert_int_equal(atomic_load(&t->refs), 2); /* queued: the handle's and the queue's */
    assert_true(hwt_timeout_cancel(t));
    assert_true(hwtt_wait_until(atomic_load(&timer->cancel_watch), hwtt_slack_ms(2000)));
    int64_t planned = atomic_load(&timer->wake_before);
    int64_t seen_at = hwt__rel_now(timer);
    if (planned != INT64_MAX && atomic_load(&t->refs) == 2 && planned >= seen_at + latency * 3 / 4)
        fail_msg("the pass that left the cancelled timeout queued planned its next %lld ms ahead",
                 (long long)((planned - seen_at) / 1000000));
    assert_true(hwtt_wait_until(atomic_load(&t->refs) == 1, hwtt_slack_ms(5000)));
    hwt_timeout_release(t);
    hwtt_destroy(timer);
}

/* The same for timeouts cancelled after the worker took them from their
 * queue and before it moved them: each was charged to the transfer budget
 * as if moved, so with a budget of 1 a tick, 300 of them taken were let go
 * of one a pass, a pass a tick, the last ~300 ms after its cancel. Counted
 * in the worker's wake-ups, not in time. */
enum { TAKEN = 300 };
static hwt_timeout *t[TAKEN];
static atomic_bool taken_scheduled;
static unsigned hwt__stripe_of_worker;

static void schedule_taken(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    for (int i = 0; i < TAKEN; i++)
        if (hwt_new_timeout(arg, nothing, NULL, 1, HWT_HOURS, &t[i]) != 0)
            return;
    hwt__stripe_of_worker = hwt__stripe_of_thread; /* dealt at the first */
    atomic_store(&taken_scheduled, true);
}

static void test_timeouts_cancelled_after_the_take_are_not_charged(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_MILLISECONDS;
    o.max_transfers_per_tick = 1;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    atomic_store(&taken_scheduled, false);
    /* From a task: the worker takes all of them in its next pass. */
    assert_int_equal(hwt_new_timeout(timer, schedule_taken, timer, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&taken_scheduled) && transferred(timer) >= 2,
                                hwtt_slack_ms(2000)));
    assert_true(hwt__stack_is_empty(&timer->stripes[hwt__stripe_of_worker].queue));
    assert_true(transferred(timer) < TAKEN / 2);
    uint64_t woken = wakeups(timer);
    for (int i = 0; i < TAKEN; i++)
        assert_true(hwt_timeout_cancel(t[i]));
    /* All of them let go of (and the task moved before them). */
    assert_true(hwtt_wait_until(transferred(timer) == TAKEN + 1, hwtt_slack_ms(5000)));
    uint64_t passes = wakeups(timer) - woken;
    /* Those moved into the wheel before their cancel (one at least: the
     * wait above saw two moved) go by the cancel stack instead, which the
     * worker may process a pass later, within the latency: their queue's
     * count says nothing of them. */
    for (int i = 0; i < TAKEN; i++) {
        assert_true(hwtt_wait_until(atomic_load(&t[i]->refs) == 1, hwtt_slack_ms(5000)));
        hwt_timeout_release(t[i]);
    }
    hwtt_destroy(timer);
    /* In the pass after the cancels, or the one after that should a pass
     * have begun during them: not one a tick (a budget) each. */
    if (passes > 10)
        fail_msg("the cancelled timeouts took %llu wake-ups to let go of",
                 (unsigned long long)passes);
}

int main(void)
{
    hwtt_watchdog(300);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_later_deadline_stays_queued, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_earlier_deadline_wakes_a_planning_worker,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_timeout_scheduled_by_a_task_runs, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_stale_queued_min_lets_the_worker_sleep,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_cancel_while_queued_skips_the_cancel_stack,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_stop_after_cancel_while_queued, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_queued_cancel_is_let_go_within_the_latency,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_timeouts_cancelled_after_the_take_are_not_charged,
                                  hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

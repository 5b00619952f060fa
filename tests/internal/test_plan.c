/*
 * test_plan.c - the worker's decisions (worker_policy.h), from made-up
 * snapshots, without threads or clocks: when it sleeps and until when, what
 * it publishes for producers and cancellers, when cancels wait, how far the
 * ticks run ahead of a transfer, how a transfer is sliced, and the
 * thresholds derived from the options. The threaded tests (test_backlog,
 * test_pass_order, test_timing) check that the worker acts on them.
 */
#include <stdint.h>

#include "helpers.h"
#include "worker_policy.h"

#define MS (INT64_C(1000000))
#define US (INT64_C(1000))

/* The default options' policy: a 1 ms tick, a budget of 100 000. */
static struct hwt__policy policy(int64_t tick_ns, uint32_t max_transfers)
{
    struct hwt__policy p = {
        .tick_ns = tick_ns,
        .cancel_latency_ns = hwt__cancel_latency(tick_ns),
        .max_transfers = max_transfers,
        .backlog_kick = hwt__backlog_kick(max_transfers),
    };
    return p;
}

/* A pass that did nothing: 10.5 ms after the start, the wheel at tick 10. */
static struct hwt__sleep_snapshot quiet(int64_t next_event)
{
    struct hwt__sleep_snapshot s = {
        .now = 10 * MS + MS / 2,
        .cur = 10,
        .next_event = next_event,
        .moved = 0,
        .cancels = 0,
        .queued = 0,
        .cancels_wait = -1,
    };
    return s;
}

static const struct hwt__recheck nothing_new = {
    .moved_waiting = false,
    .cancels_waiting = false,
    .earliest_queued = INT64_MAX,
    .queued = 0,
};

static void test_derived_thresholds(void **state)
{
    (void)state;
    /* The backlog kick is ten budgets: 10^6 with the default budget. */
    assert_int_equal(hwt__backlog_kick(100000), 1000000);
    assert_int_equal(hwt__backlog_kick(1), HWT_BACKLOG_BUDGETS);
    assert_true(hwt__backlog_kick(UINT32_MAX) == (uint64_t)HWT_BACKLOG_BUDGETS * UINT32_MAX);
    /* A stripe's pushes look at the backlog every 1024 with the default
     * budget; for small budgets often enough that a budget spread over the
     * 17 stripes is looked at on each (1000 / 17 = 58: every 32); every
     * push for a budget below the stripe count. */
    assert_int_equal(hwt__backlog_check_mask(100000, 17), HWT_BACKLOG_CHECK_EVERY - 1);
    assert_int_equal(hwt__backlog_check_mask(1000, 17), 31);
    assert_int_equal(hwt__backlog_check_mask(16, 17), 0);
    assert_int_equal(hwt__backlog_check_mask(UINT32_MAX, 17), HWT_BACKLOG_CHECK_EVERY - 1);
    /* The cancel latency is max(tick, 100 ms). */
    assert_int_equal(hwt__cancel_latency(1 * MS), 100 * MS);
    assert_int_equal(hwt__cancel_latency(1000 * MS), 1000 * MS);
    /* "Due soon" is 8 ms, at least two ticks. */
    assert_int_equal(hwt__plan_soon_ns(1 * MS), HWT_SOON_NS);
    assert_int_equal(hwt__plan_soon_ns(10 * MS), 20 * MS);
    assert_int_equal(hwt__plan_soon_ns(INT64_MAX / 2 + 1), INT64_MAX);
    /* ... on to the next tick boundary, so that no tick is split. */
    assert_int_equal(hwt__soon_before(300 * US, 1 * MS), 9 * MS);
    assert_int_equal(hwt__soon_before(1 * MS, 1 * MS), 9 * MS);
    assert_int_equal(hwt__soon_before(1 * MS, 3 * MS), 9 * MS);
    assert_int_equal(hwt__soon_before(2 * MS, 3 * MS), 12 * MS);
    assert_int_equal(hwt__soon_before(5 * MS, 10 * MS), 30 * MS);
    assert_int_equal(hwt__soon_before(INT64_MAX - 1, 1 * MS), INT64_MAX);
}

/* Nothing in the wheel, nothing queued: sleep until woken (idle timers
 * make no wake-ups), and every producer wakes us. */
static void test_idle_sleeps_until_woken(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    struct hwt__sleep_snapshot s = quiet(INT64_MAX);
    struct hwt__sleep_plan plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.next == INT64_MAX);
    assert_true(plan.wake_at == INT64_MAX);
    assert_true(plan.wake_before == INT64_MAX);
    assert_false(plan.cancel_watch); /* the first canceller wakes us */
    assert_false(plan.more_queued);
    assert_true(hwt__plan_may_sleep(&p, &plan, &nothing_new));
}

/* The wheel's next event: wake at the end of that tick, and producers wake
 * us for deadlines before its start. cancel_watch says whether that is
 * within the cancel latency. */
static void test_sleeps_until_the_next_event(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    struct hwt__sleep_snapshot s = quiet(50);
    struct hwt__sleep_plan plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.next == 50);
    assert_true(plan.wake_at == 51 * MS);
    assert_true(plan.wake_before == 50 * MS);
    assert_true(plan.cancel_watch);
    assert_true(plan.move_now_before == 50 * MS);
    assert_true(hwt__plan_may_sleep(&p, &plan, &nothing_new));

    s = quiet(500); /* 490 ms away: beyond the latency */
    plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.wake_at == 501 * MS);
    assert_false(plan.cancel_watch);
    /* The exact edge: a wake-up the latency away still counts as soon. */
    s.now = 401 * MS;
    s.cur = 401;
    plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.wake_at - s.now == p.cancel_latency_ns);
    assert_true(plan.cancel_watch);
}

/* Cancels processed this pass (they are flowing) or timeouts left queued
 * (due after the planned wake-up): wake within the cancel latency, so that
 * cancellers need not wake us and the backlog is moved in one batch. */
static void test_wakes_within_the_cancel_latency(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    struct hwt__sleep_snapshot s = quiet(INT64_MAX);
    s.cancels = 3;
    struct hwt__sleep_plan plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.next == (s.now + p.cancel_latency_ns) / p.tick_ns - 1);
    assert_true(plan.wake_at <= s.now + p.cancel_latency_ns);
    assert_true(plan.wake_at > s.now + p.cancel_latency_ns - p.tick_ns);
    assert_true(plan.cancel_watch);

    s = quiet(INT64_MAX);
    s.queued = 1;
    plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.wake_at <= s.now + p.cancel_latency_ns);
    assert_true(plan.cancel_watch);

    /* An earlier event comes first. */
    s.next_event = 20;
    plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.next == 20);

    /* A count of -1 (a timeout moved before its producer counted it) is
     * not a backlog. */
    s = quiet(INT64_MAX);
    s.queued = -1;
    plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.wake_at == INT64_MAX);
}

/* The budget ran out: wake at the end of the current tick for the rest,
 * whatever the wheel holds, and do not stay awake for the queues meanwhile
 * (the rest is moved then, in one go). */
static void test_budget_spent_wakes_at_the_end_of_this_tick(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 1000);
    struct hwt__sleep_snapshot s = quiet(500);
    s.moved = 1000;
    s.queued = 5000;
    struct hwt__sleep_plan plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.more_queued);
    assert_true(plan.next == s.cur);
    assert_true(plan.wake_at == (s.cur + 1) * p.tick_ns);
    assert_true(plan.cancel_watch);
    /* Every queued deadline is "due before the wake-up": */
    assert_true(plan.move_now_before == INT64_MAX);
    /* ... yet they wait for it, and so does a backlog over the kick. */
    struct hwt__recheck r = nothing_new;
    r.earliest_queued = 0;
    r.queued = (int64_t)p.backlog_kick;
    assert_true(hwt__plan_may_sleep(&p, &plan, &r));
    /* A budget not spent (one short of it) leaves them to the latency. */
    s.moved = 999;
    plan = hwt__plan_sleep(&p, &s);
    assert_false(plan.more_queued);
    assert_true(plan.next == (s.now + p.cancel_latency_ns) / p.tick_ns - 1);
}

/* Cancels let wait until the end of tick X: wake then, not later. */
static void test_deferred_cancels_set_the_wake_up(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    struct hwt__sleep_snapshot s = quiet(INT64_MAX);
    s.cancels_wait = 59;
    struct hwt__sleep_plan plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.next == 59);
    assert_true(plan.wake_at == 60 * MS);
    /* An earlier event still comes first. */
    s.next_event = 30;
    plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.next == 30);
}

/* Whether cancels found waiting are processed now or wait. */
static void test_cancels_wait_after_a_long_sleep_only(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    int64_t now = 10 * MS + MS / 2; /* ticks 0..9 have ended */
    /* After a sleep planned within the latency: processed now. */
    assert_int_equal(hwt__plan_cancels_wait(&p, now, true, -1, true), -1);
    /* Nothing waiting: nothing to defer. */
    assert_int_equal(hwt__plan_cancels_wait(&p, now, false, -1, false), -1);
    /* After a long sleep, the first canceller woke us: they wait, at most
     * half the latency from now. */
    int64_t until = hwt__plan_cancels_wait(&p, now, false, -1, true);
    assert_int_equal(until, (now + p.cancel_latency_ns / 2) / p.tick_ns - 1);
    assert_true((until + 1) * p.tick_ns <= now + p.cancel_latency_ns / 2);
    assert_true(until > now / p.tick_ns - 1);
    /* A pass before that tick has ended keeps the wait (whatever it saw)... */
    assert_int_equal(hwt__plan_cancels_wait(&p, (until + 1) * p.tick_ns - 1, true, until, false),
                     until);
    /* ... and the first pass after it processes them. */
    assert_int_equal(hwt__plan_cancels_wait(&p, (until + 1) * p.tick_ns, true, until, true), -1);
    /* A tick as long as the latency leaves no tick to wait until. */
    struct hwt__policy slow = policy(1000 * MS, 100000);
    assert_int_equal(hwt__plan_cancels_wait(&slow, 1200 * MS, false, -1, true), -1);
}

/* New timeouts found queued after a long sleep wait for the next pass only
 * when none is due within the latency and they are fewer than
 * backlog_kick; after a sleep planned within the latency, never. The next
 * pass comes within the latency: the plan caps the sleep while any are
 * queued. */
static void test_a_far_backlog_waits_after_a_long_sleep_only(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    int64_t now = 10 * MS + MS / 2;
    int64_t latency = now + p.cancel_latency_ns;
    /* All due after the latency: they wait. */
    assert_true(hwt__plan_backlog_waits(&p, now, false, 5, latency));
    assert_true(hwt__plan_backlog_waits(&p, now, false, p.backlog_kick - 1, INT64_MAX));
    /* After a sleep planned within the latency: moved now. */
    assert_false(hwt__plan_backlog_waits(&p, now, true, 5, latency));
    /* None queued, or one due sooner: moved now. */
    assert_false(hwt__plan_backlog_waits(&p, now, false, 0, INT64_MAX));
    assert_false(hwt__plan_backlog_waits(&p, now, false, 5, latency - 1));
    assert_false(hwt__plan_backlog_waits(&p, now, false, 5, 0));
    /* backlog_kick of them: moved now, as when a producer wakes us for them. */
    assert_false(hwt__plan_backlog_waits(&p, now, false, p.backlog_kick, INT64_MAX));
    /* Near the end of time the bound saturates rather than wraps. */
    assert_false(hwt__plan_backlog_waits(&p, INT64_MAX - MS, false, 5, INT64_MAX - 1));
    /* The pass that leaves them queued plans to wake for them within the
     * latency, before the earliest of them is due. */
    struct hwt__sleep_snapshot s = quiet(INT64_MAX);
    s.now = now;
    s.queued = 5;
    struct hwt__sleep_plan plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.wake_at <= latency);
    assert_true(plan.cancel_watch);
    /* The pass that left them waiting (woken, maybe by the cancel of one of
     * them) plans half the latency: the wake-up's delay and the pass must
     * not take that cancel's drop past its latency. At least to the end of
     * this tick (a tick of the latency: no earlier tick to wake at). */
    s.backlog_waited = true;
    plan = hwt__plan_sleep(&p, &s);
    assert_true(plan.wake_at <= now + p.cancel_latency_ns / 2);
    assert_true(plan.wake_at > now + p.cancel_latency_ns / 2 - p.tick_ns);
    struct hwt__policy big = policy(200 * MS, 100000);
    s.now = 200 * MS + 150 * MS;
    s.cur = 1;
    plan = hwt__plan_sleep(&big, &s);
    assert_true(plan.wake_at == 400 * MS);
}

/* The ticks processed ahead of a transfer stop at the tick of the earliest
 * deadline still queued (a timeout due in it joins its bucket's tail). */
static void test_ticks_ahead_stop_at_the_earliest_queued(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    assert_int_equal(hwt__plan_last_tick(&p, INT64_MAX, 9), 9);
    assert_int_equal(hwt__plan_last_tick(&p, 5 * MS + MS / 2, 9), 5);
    assert_int_equal(hwt__plan_last_tick(&p, 5 * MS, 9), 5);
    assert_int_equal(hwt__plan_last_tick(&p, 5 * MS - 1, 9), 4);
    assert_int_equal(hwt__plan_last_tick(&p, 50 * MS, 9), 9);
    /* Due in the first tick: only that one may run ahead of the transfer. */
    assert_int_equal(hwt__plan_last_tick(&p, 0, 9), 0);
}

/* A transfer goes in slices of HWT_TRANSFER_SLICE, up to the budget. */
static void test_transfer_slices(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    uint32_t moved = 0, slices = 0;
    while (hwt__plan_slice(&p, moved) > 0) {
        uint32_t slice = hwt__plan_slice(&p, moved);
        assert_true(slice <= HWT_TRANSFER_SLICE);
        moved += slice;
        slices++;
    }
    assert_int_equal(moved, 100000);
    assert_int_equal(slices, (100000 + HWT_TRANSFER_SLICE - 1) / HWT_TRANSFER_SLICE);
    struct hwt__policy small = policy(1 * MS, 100);
    assert_int_equal(hwt__plan_slice(&small, 0), 100);
    assert_int_equal(hwt__plan_slice(&small, 40), 60);
}

/* After publishing the plan, what came in meanwhile may keep us awake. */
static void test_what_keeps_the_worker_awake(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    struct hwt__sleep_snapshot s = quiet(50);
    struct hwt__sleep_plan soon = hwt__plan_sleep(&p, &s);
    s = quiet(INT64_MAX);
    struct hwt__sleep_plan never = hwt__plan_sleep(&p, &s);
    struct hwt__recheck r;

    /* Moved entries are processed every pass: never wait. */
    r = nothing_new;
    r.moved_waiting = true;
    assert_false(hwt__plan_may_sleep(&p, &soon, &r));
    assert_false(hwt__plan_may_sleep(&p, &never, &r));

    /* Cancels wait for a wake-up within the latency, not for a later one. */
    r = nothing_new;
    r.cancels_waiting = true;
    assert_true(hwt__plan_may_sleep(&p, &soon, &r));
    assert_false(hwt__plan_may_sleep(&p, &never, &r));

    /* A queued timeout due before the planned wake-up is moved now; one due
     * at or after it waits. */
    r = nothing_new;
    r.queued = 1;
    r.earliest_queued = soon.wake_before - 1;
    assert_false(hwt__plan_may_sleep(&p, &soon, &r));
    r.earliest_queued = soon.wake_before;
    assert_true(hwt__plan_may_sleep(&p, &soon, &r));

    /* A backlog at the kick threshold does not wait; one below it does. */
    r = nothing_new;
    r.earliest_queued = INT64_MAX - 1;
    r.queued = (int64_t)p.backlog_kick;
    assert_false(hwt__plan_may_sleep(&p, &soon, &r));
    r.queued = (int64_t)p.backlog_kick - 1;
    assert_true(hwt__plan_may_sleep(&p, &soon, &r));
    /* With no wake-up planned, whatever is queued is moved now. */
    r.queued = 1;
    assert_false(hwt__plan_may_sleep(&p, &never, &r));
    /* Nor with one planned past the latency: a kick for them (a cancel of
     * one, a budget of them) may have come already: plan again. */
    s = quiet(1000);
    struct hwt__sleep_plan far = hwt__plan_sleep(&p, &s);
    assert_false(far.cancel_watch);
    r.queued = 0;
    assert_true(hwt__plan_may_sleep(&p, &far, &r));
    r.queued = 1;
    assert_false(hwt__plan_may_sleep(&p, &far, &r));

    /* A tick already due (the next event at cur): anything queued is moved
     * now, so that the tick's expiry does not wait behind it later. */
    s = quiet(10);
    struct hwt__sleep_plan due = hwt__plan_sleep(&p, &s);
    assert_true(due.move_now_before == INT64_MAX);
    r = nothing_new;
    r.queued = 1;
    r.earliest_queued = INT64_MAX - 1;
    assert_false(hwt__plan_may_sleep(&p, &due, &r));
}

/* A burst's pace: when a tick is due by the end of this one and new
 * timeouts keep coming, the worker naps a quarter of a tick (at most
 * 250 us) instead of passing again at once - never past the current tick's
 * end, so what it lets wait is moved before the tick it may be due in is
 * processed. */
static void test_a_burst_naps_within_the_tick(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    p.naps = true;
    struct hwt__sleep_snapshot s = quiet(10); /* 10.5 ms, tick 10 due at 11 ms */
    struct hwt__sleep_plan due = hwt__plan_sleep(&p, &s);
    struct hwt__recheck r = nothing_new;
    r.queued = 1;
    r.earliest_queued = INT64_MAX - 1;
    assert_false(hwt__plan_may_sleep(&p, &due, &r));
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == s.now + 250 * US);

    /* Never past the tick's end; nothing under 10 us. */
    s.now = 10 * MS + 900 * US;
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == 11 * MS);
    s.now = 11 * MS - 9 * US;
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == -1);
    /* Nor past the planned wake-up. */
    s.now = 10 * MS + MS / 2;
    struct hwt__sleep_plan early = due;
    early.wake_at = s.now + 100 * US;
    assert_true(hwt__plan_nap(&p, &s, &early, &r) == s.now + 100 * US);

    /* A tick that ended and is not processed (a queued timeout is due in
     * it): pass again at once. */
    s.cur = 9;
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == -1);
    s.cur = 10;
    /* A queued timeout due in a tick already processed (queued while the
     * pass's tasks ran): it runs in the next pass, at once. */
    r.earliest_queued = 9 * MS + 500 * US;
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == -1);
    r.earliest_queued = 10 * MS; /* due in tick 10, not processed yet: a nap */
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == s.now + 250 * US);
    r.earliest_queued = INT64_MAX - 1;

    /* Nor for a reschedule's entry, cancels the plan does not wake for, or
     * a backlog at the kick threshold. */
    r.moved_waiting = true;
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == -1);
    r.moved_waiting = false;
    struct hwt__sleep_plan unwatched = due;
    unwatched.cancel_watch = false;
    r.cancels_waiting = true;
    assert_true(hwt__plan_nap(&p, &s, &unwatched, &r) == -1);
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == s.now + 250 * US); /* watched: they wait */
    r.cancels_waiting = false;
    r.queued = (int64_t)p.backlog_kick;
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == -1);
    r.queued = 1;

    /* A quarter of a short tick; none where a quarter is under 10 us. */
    struct hwt__policy fine = policy(100 * US, 100000);
    fine.naps = true;
    struct hwt__sleep_snapshot f = quiet(105); /* 10.5 ms: tick 105, due at 10.6 */
    f.cur = 105;
    struct hwt__sleep_plan fine_due = hwt__plan_sleep(&fine, &f);
    assert_true(hwt__plan_nap(&fine, &f, &fine_due, &r) == f.now + 25 * US);
    struct hwt__policy tiny = policy(20 * US, 100000);
    tiny.naps = true;
    struct hwt__sleep_snapshot t = quiet(525); /* 10.5 ms: tick 525 */
    t.cur = 525;
    struct hwt__sleep_plan tiny_due = hwt__plan_sleep(&tiny, &t);
    assert_true(hwt__plan_nap(&tiny, &t, &tiny_due, &r) == -1);

    /* Sleeps in whole milliseconds (MILLIS, WINDOWS): no nap. */
    p.naps = false;
    assert_true(hwt__plan_nap(&p, &s, &due, &r) == -1);
}

/* A one-bucket wheel allows a tick up to INT64_MAX - 1 ns (the wheel's span
 * fits): now + the cancel latency (the tick) would overflow, which C leaves
 * undefined and which, wrapped, planned a wake-up for tick -1, in the past
 * (a spin). Saturated: the end of the current tick, 0. Likewise for the
 * wait of cancels, at a now (since the start) near INT64_MAX. */
static void test_a_huge_tick_plans_no_overflow(void **state)
{
    (void)state;
    struct hwt__policy p = policy(INT64_MAX - 1, 100000);
    assert_int_equal(p.cancel_latency_ns, INT64_MAX - 1);
    struct hwt__sleep_snapshot s = quiet(INT64_MAX);
    s.now = 24 * 3600 * 1000 * MS;
    s.cur = 0;
    s.cancels = 1;
    struct hwt__sleep_plan plan = hwt__plan_sleep(&p, &s);
    assert_int_equal(plan.next, 0); /* INT64_MAX / tick - 1 */
    assert_int_equal(plan.wake_at, INT64_MAX - 1);
    assert_int_equal(hwt__plan_cancels_wait(&p, INT64_MAX - 10, false, -1, true), 0);
}

/* A timeout out of the wheel while a reschedule writes it: looked at again
 * at the end of this tick, and never sooner than 250 us from now (a fine
 * tick would have the worker spin while the reschedule is preempted). */
static void test_a_timeout_being_rescheduled_is_looked_at_once_a_tick(void **state)
{
    (void)state;
    struct hwt__policy p = policy(1 * MS, 100000);
    assert_true(hwt__plan_busy_check(&p, 10 * MS + 100 * US) == 11 * MS);
    assert_true(hwt__plan_busy_check(&p, 10 * MS) == 11 * MS);
    assert_true(hwt__plan_busy_check(&p, 11 * MS - 100 * US) == 11 * MS + 150 * US);
    struct hwt__policy fine = policy(10 * US, 100000);
    assert_true(hwt__plan_busy_check(&fine, 5 * MS) == 5 * MS + 250 * US);
    struct hwt__policy huge = policy(INT64_MAX / 512, 100000);
    assert_true(hwt__plan_busy_check(&huge, INT64_MAX / 512 - 1) == INT64_MAX / 512 - 1 + 250 * US);
    assert_true(hwt__plan_busy_check(&huge, 5 * MS) == INT64_MAX / 512);
    assert_true(hwt__plan_busy_check(&huge, INT64_MAX - 1) == INT64_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derived_thresholds),
        cmocka_unit_test(test_idle_sleeps_until_woken),
        cmocka_unit_test(test_sleeps_until_the_next_event),
        cmocka_unit_test(test_wakes_within_the_cancel_latency),
        cmocka_unit_test(test_budget_spent_wakes_at_the_end_of_this_tick),
        cmocka_unit_test(test_deferred_cancels_set_the_wake_up),
        cmocka_unit_test(test_cancels_wait_after_a_long_sleep_only),
        cmocka_unit_test(test_a_far_backlog_waits_after_a_long_sleep_only),
        cmocka_unit_test(test_ticks_ahead_stop_at_the_earliest_queued),
        cmocka_unit_test(test_transfer_slices),
        cmocka_unit_test(test_what_keeps_the_worker_awake),
        cmocka_unit_test(test_a_burst_naps_within_the_tick),
        cmocka_unit_test(test_a_huge_tick_plans_no_overflow),
        cmocka_unit_test(test_a_timeout_being_rescheduled_is_looked_at_once_a_tick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_reschedule.c - hwt_timeout_reschedule: a pending timeout waits for
 * its new deadline, never runs before it, and still ends exactly one way
 * when a reschedule races its expiry, a cancel, a stop or another
 * reschedule. Timing checks are "not before" (exact) and "within" (scaled
 * by hwtt_slack_ms).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

/* A timeout's record: when it ran, and the earliest time it may run. */
struct rec {
    _Atomic int64_t ran_at; /* 0: not run */
    _Atomic int64_t not_before;
    atomic_int ran, cancelled;
};

static void rec_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct rec *r = arg;
    atomic_store(&r->ran_at, hwtt_now_ns());
    atomic_fetch_add(&r->ran, 1);
}

static void rec_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((struct rec *)arg)->cancelled, 1);
}

static const hwt_task rec_task = {.run = rec_run, .cancelled = rec_cancelled};

static hwt_timer *timer_ms(uint64_t tick_ms)
{
    return hwtt_track(hwtt_timer(tick_ms, HWT_MILLISECONDS, 512));
}

/* ------------------------------------------------------------ bad input */

static void test_bad_input_changes_nothing(void **state)
{
    (void)state;
    assert_false(hwt_timeout_reschedule(NULL, 1, HWT_SECONDS));
    hwt_timer *timer = timer_ms(1);
    struct rec r = {0};
    hwt_timeout *h;
    assert_int_equal(hwt_new_timeout_task(timer, &rec_task, &r, 1, HWT_HOURS, &h), 0);
    assert_false(hwt_timeout_reschedule(h, 1, (hwt_unit)99));
    assert_false(hwt_timeout_reschedule(h, 1, (hwt_unit)-1));
    /* Every unit, the int64 extremes (saturating) and an hour in that unit
     * (never due while the loop runs, however slowly): accepted, pending
     * unchanged. */
    static const int64_t hour_in[] = {
        [HWT_NANOSECONDS] = INT64_C(3600000000000), [HWT_MICROSECONDS] = INT64_C(3600000000),
        [HWT_MILLISECONDS] = 3600000, [HWT_SECONDS] = 3600, [HWT_MINUTES] = 60,
        [HWT_HOURS] = 1, [HWT_DAYS] = 1};
    for (int u = HWT_NANOSECONDS; u <= HWT_DAYS; u++) {
        assert_true(hwt_timeout_reschedule(h, INT64_MAX, (hwt_unit)u));
        assert_true(hwt_timeout_reschedule(h, hour_in[u], (hwt_unit)u));
        assert_true(hwt_timeout_reschedule(h, 3, HWT_HOURS));
    }
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    hwtt_sleep_ms(20);
    assert_int_equal(atomic_load(&r.ran), 0);
    /* INT64_MIN: fires on the next tick. */
    assert_true(hwt_timeout_reschedule(h, INT64_MIN, HWT_DAYS));
    assert_true(hwtt_wait_until(atomic_load(&r.ran) == 1, hwtt_slack_ms(2000)));
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    assert_false(hwt_timeout_reschedule(h, 1, HWT_SECONDS)); /* expired */
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------------ the basics */

static void expect_run_between(struct rec *r, int64_t not_before, int64_t within_ms)
{
    assert_true(hwtt_wait_until(atomic_load(&r->ran) == 1, within_ms));
    assert_true(atomic_load(&r->ran_at) >= not_before);
}

static void test_later_waits_for_the_new_deadline(void **state)
{
    (void)state;
    hwt_timer *timer = timer_ms(1);
    struct rec r = {0};
    hwt_timeout *h;
    assert_int_equal(hwt_new_timeout_task(timer, &rec_task, &r, 30, HWT_MILLISECONDS, &h), 0);
    int64_t before = hwtt_now_ns();
    assert_true(hwt_timeout_reschedule(h, 200, HWT_MILLISECONDS));
    hwtt_sleep_ms(60); /* the old deadline passes */
    assert_int_equal(atomic_load(&r.ran), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    expect_run_between(&r, before + 200 * INT64_C(1000000), hwtt_slack_ms(2000));
    assert_int_equal(atomic_load(&r.cancelled), 0);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

static void test_earlier_runs_at_the_new_deadline(void **state)
{
    (void)state;
    hwt_timer *timer = timer_ms(1);
    struct rec r = {0};
    hwt_timeout *h;
    assert_int_equal(hwt_new_timeout_task(timer, &rec_task, &r, 1, HWT_HOURS, &h), 0);
    hwtt_sleep_ms(20); /* in the wheel, far away */
    int64_t before = hwtt_now_ns();
    assert_true(hwt_timeout_reschedule(h, 30, HWT_MILLISECONDS));
    expect_run_between(&r, before + 30 * INT64_C(1000000), hwtt_slack_ms(500));
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

/* Earlier while still queued (before the worker moved it into the wheel). */
static void test_earlier_while_queued(void **state)
{
    (void)state;
    hwt_timer *timer = timer_ms(1);
    assert_int_equal(hwt_timer_start(timer), 0);
    struct rec r[64];
    hwt_timeout *h[64];
    memset(r, 0, sizeof r);
    int64_t before = hwtt_now_ns();
    for (int i = 0; i < 64; i++) {
        assert_int_equal(hwt_new_timeout_task(timer, &rec_task, &r[i], 1, HWT_HOURS, &h[i]), 0);
        assert_true(hwt_timeout_reschedule(h[i], 10 + i % 8, HWT_MILLISECONDS));
    }
    for (int i = 0; i < 64; i++) {
        expect_run_between(&r[i], before + (10 + i % 8) * INT64_C(1000000), hwtt_slack_ms(500));
        hwt_timeout_release(h[i]);
    }
    hwtt_destroy(timer);
}

/* Moves racing the worker's transfer of the same timeouts: none is lost
 * (the transfer's mark must survive a reschedule's generation bump), none
 * runs early. */
static void test_later_while_the_worker_transfers(void **state)
{
    (void)state;
    hwt_timer *timer = timer_ms(1);
    assert_int_equal(hwt_timer_start(timer), 0);
    enum { N = 20000 };
    static struct rec r[N];
    static hwt_timeout *h[N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < N; i++) {
        assert_int_equal(hwt_new_timeout_task(timer, &rec_task, &r[i], 1, HWT_MILLISECONDS, &h[i]),
                         0);
        int64_t t0 = hwtt_now_ns();
        if (hwt_timeout_reschedule(h[i], 20, HWT_MILLISECONDS))
            atomic_store(&r[i].not_before, t0 + 20 * INT64_C(1000000));
    }
    for (int i = 0; i < N; i++) {
        assert_true(hwtt_wait_until(atomic_load(&r[i].ran) == 1, hwtt_slack_ms(3000)));
        if (atomic_load(&r[i].not_before) != 0)
            assert_true(atomic_load(&r[i].ran_at) >= atomic_load(&r[i].not_before));
        hwt_timeout_release(h[i]);
    }
    hwtt_destroy(timer);
}

static void test_many_moves_then_the_last_wins(void **state)
{
    (void)state;
    hwt_timer *timer = timer_ms(1);
    struct rec r = {0};
    hwt_timeout *h;
    assert_int_equal(hwt_new_timeout_task(timer, &rec_task, &r, 50, HWT_MILLISECONDS, &h), 0);
    for (int i = 0; i < 1000; i++) /* later, earlier, later... */
        assert_true(hwt_timeout_reschedule(h, i % 2 ? 10 : 1000, HWT_MILLISECONDS));
    int64_t before = hwtt_now_ns();
    assert_true(hwt_timeout_reschedule(h, 80, HWT_MILLISECONDS));
    expect_run_between(&r, before + 80 * INT64_C(1000000), hwtt_slack_ms(1000));
    hwtt_sleep_ms(20);
    assert_int_equal(atomic_load(&r.ran), 1);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

static hwt_timeout *own_handle;
static atomic_int own_result = -1;

static void reschedule_self(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    atomic_store(&own_result, hwt_timeout_reschedule(timeout, 1, HWT_SECONDS) ? 1 : 0);
}

static void test_false_from_its_own_task_after_cancel_and_after_stop(void **state)
{
    (void)state;
    hwt_timer *timer = timer_ms(1);
    atomic_store(&own_result, -1);
    assert_int_equal(hwt_new_timeout(timer, reschedule_self, NULL, 1, HWT_MILLISECONDS, &own_handle),
                     0);
    assert_true(hwtt_wait_until(atomic_load(&own_result) != -1, hwtt_slack_ms(2000)));
    assert_int_equal(atomic_load(&own_result), 0); /* one-shot: already expired */
    hwt_timeout_release(own_handle);

    struct rec r = {0};
    hwt_timeout *h;
    assert_int_equal(hwt_new_timeout_task(timer, &rec_task, &r, 1, HWT_HOURS, &h), 0);
    assert_true(hwt_timeout_reschedule(h, 2, HWT_HOURS));
    assert_true(hwt_timeout_cancel(h));
    assert_false(hwt_timeout_reschedule(h, 10, HWT_MILLISECONDS));
    assert_true(hwtt_wait_until(atomic_load(&r.cancelled) == 1, hwtt_slack_ms(2000)));
    hwtt_sleep_ms(30);
    assert_int_equal(atomic_load(&r.ran), 0);
    hwt_timeout_release(h);

    struct rec r2 = {0};
    assert_int_equal(hwt_new_timeout_task(timer, &rec_task, &r2, 1, HWT_HOURS, &h), 0);
    assert_true(hwt_timeout_reschedule(h, 5, HWT_SECONDS));
    hwt_timeout **list;
    size_t n;
    assert_int_equal(hwt_stop(timer, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_ptr_equal(list[0], h);
    assert_false(hwt_timeout_reschedule(h, 1, HWT_MILLISECONDS));
    hwt_timeouts_release(list, n);
    hwt_timeout_release(h);
    assert_int_equal(atomic_load(&r2.ran) + atomic_load(&r2.cancelled), 0);
    hwtt_destroy(timer);
}

/* The pending count and max_pending_timeouts do not change. */
static void test_pending_count_unchanged(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.max_pending_timeouts = 2;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    hwt_timeout *a, *b;
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_HOURS, &a), 0);
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_HOURS, &b), 0);
    for (int i = 0; i < 100; i++) {
        assert_true(hwt_timeout_reschedule(a, 2 + i, HWT_HOURS));
        assert_true(hwt_timeout_reschedule(b, 1, HWT_MINUTES));
    }
    assert_int_equal(hwt_pending_timeouts(timer), 2);
    assert_int_equal(hwt_new_timeout(timer, hwtt_count_task, NULL, 1, HWT_HOURS, NULL),
                     HWT_EREJECTED);
    hwt_timeout_release(a);
    hwt_timeout_release(b);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------------- races */

#define RACE_N 2000

enum { MOVE_LATER, MOVE_ALTERNATE, CANCEL };

struct race {
    hwt_timeout **h;
    struct rec *r;
    int first, step, mode;
    pthread_barrier_t *barrier;
    atomic_bool *stop_flag; /* NULL: one pass */
};

/* Lowers *bound to v. */
static void lower(_Atomic int64_t *bound, int64_t v)
{
    int64_t cur = atomic_load(bound);
    while (v < cur && !atomic_compare_exchange_weak(bound, &cur, v)) {
    }
}

static void *racer(void *p)
{
    struct race *x = p;
    pthread_barrier_wait(x->barrier);
    for (int i = x->first; i < RACE_N; i += x->step) {
        if (x->mode == CANCEL) {
            hwt_timeout_cancel(x->h[i]);
            continue;
        }
        int64_t delay_ms = x->mode == MOVE_LATER || (i / 2) % 2 ? 40 : 3;
        int64_t t0 = hwtt_now_ns();
        /* A true result: the task never runs before t0 + delay (checked
         * after everything ran; it cannot have run before we note it, or
         * it ran early). Concurrent true results: before the earliest. */
        if (hwt_timeout_reschedule(x->h[i], delay_ms, HWT_MILLISECONDS))
            lower(&x->r[i].not_before, t0 + delay_ms * 1000000);
    }
    return NULL;
}

/* Two racers over RACE_N timeouts due within ~2 ms (so expiry races too):
 * never early against the true reschedules, exactly one end each. */
static void race(int mode_a, int mode_b, bool same_timeouts)
{
    hwt_timer *timer = timer_ms(1);
    static hwt_timeout *h[RACE_N];
    static struct rec r[RACE_N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < RACE_N; i++) {
        atomic_store(&r[i].not_before, INT64_MAX);
        assert_int_equal(
            hwt_new_timeout_task(timer, &rec_task, &r[i], i % 3, HWT_MILLISECONDS, &h[i]), 0);
    }
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    struct race a = {h, r, 0, same_timeouts ? 1 : 2, mode_a, &barrier, NULL};
    struct race b = {h, r, same_timeouts ? 0 : 1, same_timeouts ? 1 : 2, mode_b, &barrier, NULL};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, racer, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, racer, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < RACE_N; i++)
        assert_true(hwtt_wait_until(atomic_load(&r[i].ran) + atomic_load(&r[i].cancelled) == 1,
                                    hwtt_slack_ms(3000)));
    hwtt_sleep_ms(10);
    int early = 0;
    for (int i = 0; i < RACE_N; i++) {
        assert_int_equal(atomic_load(&r[i].ran) + atomic_load(&r[i].cancelled), 1);
        /* (INT64_MAX: no reschedule of it returned true.) */
        if (atomic_load(&r[i].ran) && atomic_load(&r[i].ran_at) < atomic_load(&r[i].not_before) &&
            atomic_load(&r[i].not_before) != INT64_MAX)
            early++;
    }
    assert_int_equal(early, 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    for (int i = 0; i < RACE_N; i++)
        hwt_timeout_release(h[i]);
    hwtt_destroy(timer);
}

static void test_race_with_expiry(void **state)
{
    (void)state;
    race(MOVE_LATER, MOVE_ALTERNATE, false);
}

static void test_race_with_cancel(void **state)
{
    (void)state;
    race(MOVE_ALTERNATE, CANCEL, true);
    race(MOVE_LATER, CANCEL, true);
}

static void test_race_with_another_reschedule(void **state)
{
    (void)state;
    race(MOVE_ALTERNATE, MOVE_ALTERNATE, true);
    race(MOVE_LATER, MOVE_ALTERNATE, true);
}

/* Reschedules racing a stop, with and without the list: each timeout is
 * run, handed back, or dropped (its cancelled callback), once; after the
 * stop, reschedule returns false. */
struct mover {
    hwt_timeout **h;
    atomic_bool *go;
};

static void *keep_moving(void *p)
{
    struct mover *m = p;
    for (int round = 0; atomic_load(m->go); round++)
        for (int i = 0; i < RACE_N && atomic_load(m->go); i++)
            hwt_timeout_reschedule(m->h[i], (i + round) % 2 ? 1 : 20, HWT_MILLISECONDS);
    return NULL;
}

static void race_stop(bool with_list)
{
    hwt_timer *timer = hwtt_timer(1, HWT_MILLISECONDS, 512);
    static hwt_timeout *h[RACE_N];
    static struct rec r[RACE_N];
    memset(r, 0, sizeof r);
    for (int i = 0; i < RACE_N; i++)
        assert_int_equal(
            hwt_new_timeout_task(timer, &rec_task, &r[i], 5 + i % 20, HWT_MILLISECONDS, &h[i]), 0);
    atomic_bool go = true;
    struct mover m = {h, &go};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, keep_moving, &m), 0);
    hwtt_sleep_ms(15);
    hwt_timeout **list = NULL;
    size_t n = 0;
    if (with_list)
        assert_int_equal(hwt_stop(timer, &list, &n), 0);
    else
        assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    atomic_store(&go, false);
    pthread_join(t, NULL);
    int ended = 0;
    for (int i = 0; i < RACE_N; i++) {
        int k = atomic_load(&r[i].ran) + atomic_load(&r[i].cancelled);
        assert_true(k <= 1);
        ended += k;
        assert_false(hwt_timeout_reschedule(h[i], 1, HWT_MILLISECONDS));
    }
    for (size_t j = 0; j < n; j++)
        assert_int_equal(atomic_load(&((struct rec *)hwt_timeout_arg(list[j]))->ran) +
                             atomic_load(&((struct rec *)hwt_timeout_arg(list[j]))->cancelled),
                         0);
    assert_int_equal(ended + (int)n, RACE_N);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    hwt_timeouts_release(list, n);
    for (int i = 0; i < RACE_N; i++)
        hwt_timeout_release(h[i]);
    hwt_timer_destroy(timer);
}

static void test_race_with_stop(void **state)
{
    (void)state;
    race_stop(true);
    race_stop(false);
}

int main(void)
{
    hwtt_watchdog(240);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_bad_input_changes_nothing, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_later_waits_for_the_new_deadline, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_earlier_runs_at_the_new_deadline, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_earlier_while_queued, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_later_while_the_worker_transfers, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_many_moves_then_the_last_wins, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_false_from_its_own_task_after_cancel_and_after_stop,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_pending_count_unchanged, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_race_with_expiry, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_race_with_cancel, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_race_with_another_reschedule, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_race_with_stop, hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

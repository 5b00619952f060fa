/*
 * test_cancel.c - hwt_timeout_cancel: its result, the pending count and
 * max_pending_timeouts at the moment it returns, the cancelled callback
 * (once, on the worker, soon even when idle), cancels from tasks, from many
 * threads, in bulk, and near the deadline.
 *
 * SPEC §2 (cancelled callback, ownership), §3 (pending count, cancel latency).
 * Tasks only record into static/atomic state; assertions run on the test
 * thread.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */

typedef struct rec {
    atomic_int ran;
    atomic_int cancelled;
    atomic_int off_worker;        /* callbacks (run or cancelled) not on `worker` */
    _Atomic int64_t cancelled_ns; /* when the cancelled callback ran */
} rec;

static pthread_t worker; /* written before worker_known */
static atomic_bool worker_known;

static void note_thread(rec *r)
{
    if (atomic_load(&worker_known) && !pthread_equal(worker, pthread_self()))
        atomic_fetch_add(&r->off_worker, 1);
}

static void rec_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    rec *r = arg;
    note_thread(r);
    atomic_fetch_add(&r->ran, 1);
}

static void rec_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    rec *r = arg;
    note_thread(r);
    atomic_store(&r->cancelled_ns, hwtt_now_ns());
    atomic_fetch_add(&r->cancelled, 1);
}

static const hwt_task rec_task = {.run = rec_run, .cancelled = rec_cancelled};

static atomic_int probe_done;
static void probe_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    worker = pthread_self();
    atomic_store(&worker_known, true);
    atomic_store(&probe_done, 1);
}

/* Records t's worker thread in `worker` (for the off_worker checks). */
static void learn_worker(hwt_timer *t)
{
    atomic_store(&worker_known, false);
    atomic_store(&probe_done, 0);
    assert_int_equal(hwt_new_timeout(t, probe_task, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&probe_done) == 1, 5000));
    assert_true(atomic_load(&worker_known));
}

static void forget_worker(void)
{
    atomic_store(&worker_known, false);
}

/* Stops t, expecting nothing handed back, and destroys it. */
static void stop_expect_empty(hwt_timer *t)
{
    hwt_timeout **list = NULL;
    size_t n = 99;
    int rc = hwt_stop(t, &list, &n);
    size_t got = n;
    hwt_timeouts_release(rc == 0 ? list : NULL, rc == 0 ? n : 0);
    hwt_timer_destroy(t);
    forget_worker();
    assert_int_equal(rc, 0);
    assert_int_equal(got, 0);
}

/* ------------------------------------------------------------- basics */

static void test_cancel_before_expiry_true_once(void **state)
{
    (void)state;
    static rec r;
    memset(&r, 0, sizeof r);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 64);
    learn_worker(t);
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_HOURS, &h), 0);
    assert_non_null(h);
    assert_false(hwt_timeout_is_cancelled(h));
    assert_true(hwt_timeout_cancel(h));
    assert_false(hwt_timeout_cancel(h));
    assert_true(hwt_timeout_is_cancelled(h));
    assert_false(hwt_timeout_is_expired(h));
    assert_true(hwtt_wait_until(atomic_load(&r.cancelled) == 1, 5000));
    assert_false(hwt_timeout_cancel(h));
    stop_expect_empty(t);
    assert_int_equal(atomic_load(&r.cancelled), 1);
    assert_int_equal(atomic_load(&r.ran), 0);
    assert_int_equal(atomic_load(&r.off_worker), 0);
    assert_true(hwt_timeout_is_cancelled(h));
    assert_false(hwt_timeout_cancel(h));
    hwt_timeout_release(h);
}

static void test_cancel_after_expiry_false(void **state)
{
    (void)state;
    static rec r;
    memset(&r, 0, sizeof r);
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 64);
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_MILLISECONDS, &h), 0);
    assert_true(hwtt_wait_until(atomic_load(&r.ran) == 1, 5000));
    assert_true(hwt_timeout_is_expired(h));
    assert_false(hwt_timeout_cancel(h));
    assert_false(hwt_timeout_is_cancelled(h));
    assert_true(hwt_timeout_is_expired(h));
    assert_int_equal(hwt_pending_timeouts(t), 0);
    stop_expect_empty(t);
    assert_int_equal(atomic_load(&r.ran), 1);
    assert_int_equal(atomic_load(&r.cancelled), 0);
    hwt_timeout_release(h);
}

/* ---------------------------------------------- the cancelled callback */

/* Cancelled callback: once, on the worker, soon, even when the worker has
 * nothing else to do. `tick_ms` is the timer's tick; the SPEC allows one tick
 * or 100 ms, whichever is longer: we allow that plus a generous margin. */
static void cancel_while_idle(uint64_t tick, hwt_unit unit, int64_t allowed_ms)
{
    static rec r;
    memset(&r, 0, sizeof r);
    hwt_timer *t = hwtt_timer(tick, unit, 512);
    learn_worker(t);
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_HOURS, &h), 0);
    hwtt_sleep_ms(30); /* let the worker settle into its idle sleep */
    int64_t t0 = hwtt_now_ns();
    assert_true(hwt_timeout_cancel(h));
    assert_int_equal(hwt_pending_timeouts(t), 0);
    bool called = hwtt_wait_until(atomic_load(&r.cancelled) == 1, allowed_ms + 2000);
    int64_t latency_ms = called ? (atomic_load(&r.cancelled_ns) - t0) / 1000000 : -1;
    stop_expect_empty(t);
    hwt_timeout_release(h);
    if (!called)
        fail_msg("cancelled callback not called within %lld ms", (long long)(allowed_ms + 2000));
    print_message("  tick %llu (unit %d): cancelled callback after %lld ms\n",
                  (unsigned long long)tick, (int)unit, (long long)latency_ms);
    assert_true(latency_ms <= allowed_ms + 2000);
    assert_int_equal(atomic_load(&r.cancelled), 1);
    assert_int_equal(atomic_load(&r.ran), 0);
    assert_int_equal(atomic_load(&r.off_worker), 0);
}

static void test_cancelled_callback_idle_1ms_tick(void **state)
{
    (void)state;
    cancel_while_idle(1, HWT_MILLISECONDS, 100);
}

static void test_cancelled_callback_idle_100us_tick(void **state)
{
    (void)state;
    cancel_while_idle(100, HWT_MICROSECONDS, 100);
}

static void test_cancelled_callback_idle_100ms_tick(void **state)
{
    (void)state;
    cancel_while_idle(100, HWT_MILLISECONDS, 100);
}

static void test_cancelled_callback_idle_500ms_tick(void **state)
{
    (void)state;
    cancel_while_idle(500, HWT_MILLISECONDS, 500);
}

/* A steady stream of cancels (one every 100 us for 200 ms) while the worker
 * has nothing due for an hour: each cancelled callback still comes within
 * max(tick, 100 ms) of its cancel (plus a generous margin), although the
 * worker no longer loops while cancels keep coming in: it processes them at
 * the wake-up it planned within that bound. */
enum { STREAM_N = 2000 };
static _Atomic int64_t stream_cancelled_at[STREAM_N];
static atomic_int stream_called;

static void stream_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_store(&stream_cancelled_at[(uintptr_t)arg], hwtt_now_ns());
    atomic_fetch_add(&stream_called, 1);
}

static void test_cancelled_callbacks_in_time_under_a_stream(void **state)
{
    (void)state;
    static const hwt_task task = {.run = rec_run, .cancelled = stream_cancelled};
    static int64_t cancelled_at[STREAM_N];
    static hwt_timeout *h[STREAM_N];
    atomic_store(&stream_called, 0);
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 512);
    for (uintptr_t i = 0; i < STREAM_N; i++)
        assert_int_equal(hwt_new_timeout_task(t, &task, (void *)i, 1, HWT_HOURS, &h[i]), 0);
    for (int i = 0; i < STREAM_N; i++) {
        cancelled_at[i] = hwtt_now_ns();
        assert_true(hwt_timeout_cancel(h[i]));
        hwtt_sleep_us(100);
    }
    assert_int_equal(hwt_pending_timeouts(t), 0);
    bool all = hwtt_wait_until(atomic_load(&stream_called) == STREAM_N, hwtt_slack_ms(5000));
    int64_t worst_ms = 0;
    int worst = 0;
    for (int i = 0; i < STREAM_N; i++) {
        int64_t at = atomic_load(&stream_cancelled_at[i]);
        int64_t ms = at == 0 ? INT64_MAX : (at - cancelled_at[i]) / 1000000;
        if (ms > worst_ms) {
            worst_ms = ms;
            worst = i;
        }
    }
    stop_expect_empty(t);
    for (int i = 0; i < STREAM_N; i++)
        hwt_timeout_release(h[i]);
    if (!all)
        fail_msg("%d of %d cancelled callbacks called", atomic_load(&stream_called), STREAM_N);
    print_message("  stream of %d cancels: worst callback %lld ms after its cancel (#%d)\n",
                  STREAM_N, (long long)worst_ms, worst);
    assert_true(worst_ms <= 100 + hwtt_slack_ms(400));
}

/* -------------------------------------------- pending and max_pending */

static void test_pending_drops_when_cancel_returns(void **state)
{
    (void)state;
    static rec r;
    memset(&r, 0, sizeof r);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 64);
    hwt_timeout *h[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_HOURS, &h[i]), 0);
    assert_int_equal(hwt_pending_timeouts(t), 3);
    /* probably still in the new-timeout queue */
    assert_true(hwt_timeout_cancel(h[0]));
    assert_int_equal(hwt_pending_timeouts(t), 2);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    assert_int_equal(s.pending, 2);
    hwtt_sleep_ms(30); /* let the worker move the others into the wheel */
    assert_true(hwt_timeout_cancel(h[1]));
    assert_int_equal(hwt_pending_timeouts(t), 1);
    assert_false(hwt_timeout_cancel(h[1]));
    assert_int_equal(hwt_pending_timeouts(t), 1);
    assert_true(hwtt_wait_until(atomic_load(&r.cancelled) == 2, 5000));
    assert_true(hwt_pending_timeouts(t) == 1); /* the worker does not count again */

    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 1);
    assert_ptr_equal(hwt_timeout_arg(list[0]), &r);
    assert_true(hwt_timeout_is_cancelled(list[0]));
    assert_true(hwt_timeout_is_cancelled(h[2]));
    hwt_timeouts_release(list, n);
    hwt_timer_stats(t, &s);
    hwt_timer_destroy(t);
    assert_int_equal(s.cancelled, 3); /* 2 cancels + 1 handed back */
    assert_int_equal(s.pending, 0);
    assert_int_equal(atomic_load(&r.cancelled), 2);
    for (int i = 0; i < 3; i++)
        hwt_timeout_release(h[i]);
}

static void test_max_pending_frees_at_once(void **state)
{
    (void)state;
    static rec r;
    memset(&r, 0, sizeof r);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.max_pending_timeouts = 2;
    hwt_timer *t = hwtt_timer_opts(&o);
    hwt_timeout *a = NULL, *b = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_HOURS, &a), 0);
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_HOURS, &b), 0);
    hwt_timeout *c = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_HOURS, &c), HWT_EREJECTED);
    assert_null(c);
    assert_int_equal(hwt_pending_timeouts(t), 2);
    int rejected_after_cancel = 0, cancel_failed = 0;
    for (int i = 0; i < 200; i++) {
        if (!hwt_timeout_cancel(a))
            cancel_failed++;
        hwt_timeout_release(a);
        a = NULL;
        /* the slot is free the moment cancel returned true */
        if (hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_HOURS, &a) != 0)
            rejected_after_cancel++;
        if (hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_HOURS, NULL) != HWT_EREJECTED)
            rejected_after_cancel += 1000;
        if (a == NULL)
            break;
    }
    hwt_stats s;
    hwt_timer_stats(t, &s);
    bool all_cb = hwtt_wait_until(atomic_load(&r.cancelled) == 200, 5000);
    assert_int_equal(hwt_stop(t, NULL, NULL), 0);
    hwt_timer_destroy(t);
    hwt_timeout_release(a);
    hwt_timeout_release(b);
    assert_int_equal(cancel_failed, 0);
    assert_int_equal(rejected_after_cancel, 0);
    assert_int_equal(s.rejected, 201);
    assert_int_equal(s.pending, 2);
    assert_true(all_cb);
    assert_int_equal(atomic_load(&r.cancelled), 202); /* + the two dropped by stop */
    assert_int_equal(atomic_load(&r.ran), 0);
}

/* ------------------------------------------------ cancel from a task */

static _Atomic(hwt_timeout *) victim;
static atomic_int canceller_result; /* 1 true, 0 false, -1 no victim yet */
static atomic_int self_cancel_result;
static atomic_int canceller_ran;

static void canceller(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    /* the test thread stores the victim's handle right after scheduling it;
     * wait for it in case that thread was descheduled (valgrind, load) */
    hwtt_wait_until(atomic_load(&victim) != NULL, 2000);
    hwt_timeout *v = atomic_load(&victim);
    atomic_store(&canceller_result, v ? (int)hwt_timeout_cancel(v) : -1);
    atomic_store(&self_cancel_result, (int)hwt_timeout_cancel(timeout));
    atomic_fetch_add(&canceller_ran, 1);
}

static void test_cancel_from_task_same_tick(void **state)
{
    (void)state;
    static rec r;
    for (int round = 0; round < 3; round++) {
        memset(&r, 0, sizeof r);
        atomic_store(&victim, NULL);
        atomic_store(&canceller_result, 42);
        atomic_store(&self_cancel_result, 42);
        atomic_store(&canceller_ran, 0);
        hwt_timer *t = hwtt_timer(200, HWT_MILLISECONDS, 64);
        learn_worker(t);
        hwt_timeout *v = NULL;
        /* both due in the same tick; the canceller was moved in first */
        assert_int_equal(hwt_new_timeout(t, canceller, NULL, 20, HWT_MILLISECONDS, NULL), 0);
        assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 20, HWT_MILLISECONDS, &v), 0);
        atomic_store(&victim, v);
        bool ran = hwtt_wait_until(atomic_load(&canceller_ran) == 1, 5000);
        bool cb = hwtt_wait_until(atomic_load(&r.cancelled) == 1, 5000);
        int64_t pending = hwt_pending_timeouts(t);
        stop_expect_empty(t);
        assert_true(ran);
        assert_int_equal(atomic_load(&canceller_result), 1);
        assert_int_equal(atomic_load(&self_cancel_result), 0); /* already expired */
        assert_true(cb);
        assert_int_equal(atomic_load(&r.ran), 0);
        assert_int_equal(atomic_load(&r.cancelled), 1);
        assert_int_equal(atomic_load(&r.off_worker), 0);
        assert_int_equal(pending, 0);
        assert_true(hwt_timeout_is_cancelled(v));
        assert_false(hwt_timeout_is_expired(v));
        hwt_timeout_release(v);
    }
}

/* ----------------------------------------- the cancelled callbacks' order */

/* A thread's cancelled callbacks run in the order it cancelled (worker.c,
 * process_cancels), also when cancels without a callback are mixed in and
 * the worker takes them all at once: here it is held in a task while the
 * test cancels, so one pass finds the whole batch. */
static atomic_bool hold_reached, hold_open;
static void hold_worker(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&hold_reached, true);
    hwtt_wait_until(atomic_load(&hold_open), 10000);
}

static char called_back[8];
static atomic_int called_back_count;
static void note_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    int i = atomic_fetch_add(&called_back_count, 1);
    if (i < (int)sizeof called_back)
        called_back[i] = (char)(uintptr_t)arg;
}

static void never_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static const hwt_task noted_task = {.run = never_run, .cancelled = note_cancelled};

static void test_cancelled_callbacks_in_cancel_order(void **state)
{
    (void)state;
    const char *names = "ABCDEF", *with_callback = "ACDF";
    hwt_timeout *h[6];
    atomic_store(&hold_reached, false);
    atomic_store(&hold_open, false);
    atomic_store(&called_back_count, 0);
    memset(called_back, 0, sizeof called_back);
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 64);
    for (int i = 0; i < 6; i++) {
        void *arg = (void *)(uintptr_t)names[i];
        int rc = strchr(with_callback, names[i])
                     ? hwt_new_timeout_task(t, &noted_task, arg, 10, HWT_SECONDS, &h[i])
                     : hwt_new_timeout(t, never_run, arg, 10, HWT_SECONDS, &h[i]);
        assert_int_equal(rc, 0);
    }
    /* Scheduled after them by the same thread: when it runs, they are all
     * in the wheel. */
    assert_int_equal(hwt_new_timeout(t, hold_worker, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    bool held = hwtt_wait_until(atomic_load(&hold_reached), 5000);
    int cancels = 0;
    for (int i = 0; i < 6; i++)
        cancels += hwt_timeout_cancel(h[i]);
    atomic_store(&hold_open, true);
    bool called = hwtt_wait_until(atomic_load(&called_back_count) == 4, 5000);
    stop_expect_empty(t);
    for (int i = 0; i < 6; i++)
        hwt_timeout_release(h[i]);
    assert_true(held);
    assert_int_equal(cancels, 6);
    assert_true(called);
    assert_int_equal(atomic_load(&called_back_count), 4);
    if (memcmp(called_back, with_callback, 4) != 0)
        fail_msg("cancelled callbacks ran in the order %.4s, not %s", called_back, with_callback);
}

/* A cancel made shortly before a tick ends, while the worker sleeps until
 * that tick: the worker, woken by the cancel, may let it wait to batch it
 * with others, but not past the tick. Per tick the cancel queue comes
 * first, so the cancelled callback runs before the tick's task. The wait
 * is up to half the cancel latency (100 ms): a cancel 30 ms before the
 * tick is inside it. */
static atomic_int order_seq, run_seq, cancelled_seq;

static void order_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&run_seq, atomic_fetch_add(&order_seq, 1) + 1);
}

static void order_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&cancelled_seq, atomic_fetch_add(&order_seq, 1) + 1);
}

static void test_a_cancel_before_a_tick_is_processed_before_its_tasks(void **state)
{
    (void)state;
    static const hwt_task cancelled_one = {.run = never_run, .cancelled = order_cancelled};
    const int64_t due_ms = 400, cancel_at_ms = 370;
    bool conclusive = false;
    for (int attempt = 0; attempt < 3 && !conclusive; attempt++) {
        atomic_store(&order_seq, 0);
        atomic_store(&run_seq, 0);
        atomic_store(&cancelled_seq, 0);
        hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 1024);
        hwt_timeout *c = NULL;
        int64_t t0 = hwtt_now_ns();
        assert_int_equal(hwt_new_timeout_task(t, &cancelled_one, NULL, 10, HWT_SECONDS, &c), 0);
        assert_int_equal(hwt_new_timeout(t, order_run, NULL, due_ms, HWT_MILLISECONDS, NULL), 0);
        while (hwtt_now_ns() - t0 < cancel_at_ms * 1000000)
            hwtt_sleep_us(500);
        assert_true(hwt_timeout_cancel(c));
        /* Only if the cancel came before the task's tick ended does the
         * order say something (a slow machine may miss it: try again). */
        conclusive = hwtt_now_ns() - t0 < due_ms * 1000000 && atomic_load(&run_seq) == 0;
        bool both = hwtt_wait_until(atomic_load(&run_seq) != 0 && atomic_load(&cancelled_seq) != 0,
                                    hwtt_slack_ms(5000));
        hwt_timeout_release(c);
        hwt_timer_destroy(t);
        assert_true(both);
        if (conclusive && atomic_load(&cancelled_seq) > atomic_load(&run_seq))
            fail_msg("the task of the tick ran before the cancelled callback of a cancel made "
                     "before that tick ended");
    }
    assert_true(conclusive);
}

/* The same for a timeout moved earlier, into a tick that ends while a task
 * runs: the worker runs it as soon as it finds it, and a cancel made before
 * that tick ended, which the worker may have let wait, must come first. On
 * a 1 ms tick, a task 200 ms away (the worker sleeps past the cancel
 * latency, so it may let cancels wait) cancels C, moves Y to now and holds
 * the worker until that tick is over. Then C's callback, then Y. */
static hwt_timeout *moved_cancel_c, *moved_cancel_y;
static atomic_bool moved_cancel_done;

static void cancel_c_then_move_y(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    bool cancelled = hwt_timeout_cancel(moved_cancel_c);
    bool moved = hwt_timeout_reschedule(moved_cancel_y, 0, HWT_MILLISECONDS);
    hwtt_sleep_us(5000);
    atomic_store(&moved_cancel_done, cancelled && moved);
}

static void test_a_cancel_before_a_moved_timeouts_tick_is_processed_first(void **state)
{
    (void)state;
    static const hwt_task cancelled_one = {.run = never_run, .cancelled = order_cancelled};
    atomic_store(&order_seq, 0);
    atomic_store(&run_seq, 0);
    atomic_store(&cancelled_seq, 0);
    atomic_store(&moved_cancel_done, false);
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 1024);
    assert_int_equal(hwt_new_timeout_task(t, &cancelled_one, NULL, 1, HWT_HOURS, &moved_cancel_c),
                     0);
    assert_int_equal(hwt_new_timeout(t, order_run, NULL, 1, HWT_HOURS, &moved_cancel_y), 0);
    assert_int_equal(hwt_new_timeout(t, cancel_c_then_move_y, NULL, 200, HWT_MILLISECONDS, NULL),
                     0);
    bool both = hwtt_wait_until(atomic_load(&run_seq) != 0 && atomic_load(&cancelled_seq) != 0,
                                hwtt_slack_ms(5000));
    bool done = atomic_load(&moved_cancel_done);
    hwt_timeout_release(moved_cancel_c);
    hwt_timeout_release(moved_cancel_y);
    hwt_timer_destroy(t);
    assert_true(done);
    assert_true(both);
    if (atomic_load(&cancelled_seq) > atomic_load(&run_seq))
        fail_msg("a timeout moved into a tick already processed ran before the cancelled "
                 "callback of a cancel made before that tick ended");
}

/* ------------------------------------------------------- many cancels */

#define MANY 10000
static rec many_rec[MANY];
static hwt_timeout *many_h[MANY];

static void test_many_cancels(void **state)
{
    (void)state;
    memset(many_rec, 0, sizeof many_rec);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 512);
    learn_worker(t);
    int not_true = 0;
    /* half cancelled right after scheduling (still queued) */
    for (int i = 0; i < MANY / 2; i++) {
        assert_int_equal(hwt_new_timeout_task(t, &rec_task, &many_rec[i], 10 + i % 1000,
                                              HWT_SECONDS, &many_h[i]),
                         0);
        if (!hwt_timeout_cancel(many_h[i]))
            not_true++;
    }
    /* half cancelled after the worker moved them into the wheel */
    for (int i = MANY / 2; i < MANY; i++)
        assert_int_equal(hwt_new_timeout_task(t, &rec_task, &many_rec[i], 10 + i % 1000,
                                              HWT_SECONDS, &many_h[i]),
                         0);
    hwtt_sleep_ms(50);
    for (int i = MANY / 2; i < MANY; i++)
        if (!hwt_timeout_cancel(many_h[i]))
            not_true++;
    int64_t pending = hwt_pending_timeouts(t);
    bool all = hwtt_wait_until(({
                                   int n = 0;
                                   for (int i = 0; i < MANY; i++)
                                       n += atomic_load(&many_rec[i].cancelled);
                                   n == MANY;
                               }),
                               15000);
    stop_expect_empty(t);
    assert_int_equal(not_true, 0);
    assert_int_equal(pending, 0);
    assert_true(all);
    int bad = 0;
    for (int i = 0; i < MANY; i++) {
        if (atomic_load(&many_rec[i].cancelled) != 1 || atomic_load(&many_rec[i].ran) != 0 ||
            atomic_load(&many_rec[i].off_worker) != 0 || !hwt_timeout_is_cancelled(many_h[i]) ||
            hwt_timeout_is_expired(many_h[i]) || hwt_timeout_cancel(many_h[i]))
            bad++;
        hwt_timeout_release(many_h[i]);
    }
    assert_int_equal(bad, 0);
}

/* Several threads race to cancel the same timeouts: one true each. */
#define RACE_N 500
#define RACE_THREADS 4
static hwt_timeout *race_h[RACE_N];
static rec race_rec[RACE_N];
static atomic_int race_true[RACE_N];
static pthread_barrier_t race_bar;

static void *race_canceller(void *arg)
{
    int id = (int)(intptr_t)arg;
    pthread_barrier_wait(&race_bar);
    for (int k = 0; k < RACE_N; k++) {
        int i = (id % 2) ? RACE_N - 1 - k : k;
        if (hwt_timeout_cancel(race_h[i]))
            atomic_fetch_add(&race_true[i], 1);
    }
    return NULL;
}

static void test_concurrent_cancels_one_winner(void **state)
{
    (void)state;
    memset(race_rec, 0, sizeof race_rec);
    for (int i = 0; i < RACE_N; i++)
        atomic_store(&race_true[i], 0);
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 64);
    learn_worker(t);
    for (int i = 0; i < RACE_N; i++)
        assert_int_equal(
            hwt_new_timeout_task(t, &rec_task, &race_rec[i], 1 + i, HWT_SECONDS, &race_h[i]), 0);
    pthread_barrier_init(&race_bar, NULL, RACE_THREADS);
    pthread_t th[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, race_canceller, (void *)(intptr_t)i), 0);
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&race_bar);
    int64_t pending = hwt_pending_timeouts(t);
    bool all = hwtt_wait_until(({
                                   int n = 0;
                                   for (int i = 0; i < RACE_N; i++)
                                       n += atomic_load(&race_rec[i].cancelled);
                                   n == RACE_N;
                               }),
                               10000);
    stop_expect_empty(t);
    assert_int_equal(pending, 0);
    assert_true(all);
    int bad = 0;
    for (int i = 0; i < RACE_N; i++) {
        if (atomic_load(&race_true[i]) != 1 || atomic_load(&race_rec[i].cancelled) != 1 ||
            atomic_load(&race_rec[i].ran) != 0 || atomic_load(&race_rec[i].off_worker) != 0)
            bad++;
        hwt_timeout_release(race_h[i]);
    }
    assert_int_equal(bad, 0);
}

/* ------------------------------------------- cancel near the deadline */

#define NEAR 300
static rec near_rec[NEAR];
static hwt_timeout *near_h[NEAR];
static bool near_cancel[NEAR];

static void test_cancel_near_deadline_never_runs(void **state)
{
    (void)state;
    memset(near_rec, 0, sizeof near_rec);
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 64);
    learn_worker(t);
    unsigned seed = 12345;
    for (int i = 0; i < NEAR; i++) {
        assert_int_equal(
            hwt_new_timeout_task(t, &rec_task, &near_rec[i], 2, HWT_MILLISECONDS, &near_h[i]), 0);
        hwtt_sleep_us(rand_r(&seed) % 4000);
        near_cancel[i] = hwt_timeout_cancel(near_h[i]);
    }
    bool all = hwtt_wait_until(({
                                   int n = 0;
                                   for (int i = 0; i < NEAR; i++)
                                       n += atomic_load(&near_rec[i].ran) +
                                            atomic_load(&near_rec[i].cancelled);
                                   n >= NEAR;
                               }),
                               10000);
    stop_expect_empty(t);
    assert_true(all);
    int n_cancelled = 0, n_ran = 0, bad = 0;
    for (int i = 0; i < NEAR; i++) {
        int ran = atomic_load(&near_rec[i].ran), cb = atomic_load(&near_rec[i].cancelled);
        if (near_cancel[i]) {
            n_cancelled++;
            if (ran != 0 || cb != 1 || !hwt_timeout_is_cancelled(near_h[i]) ||
                hwt_timeout_is_expired(near_h[i]))
                bad++;
        } else {
            n_ran++;
            if (ran != 1 || cb != 0 || hwt_timeout_is_cancelled(near_h[i]) ||
                !hwt_timeout_is_expired(near_h[i]))
                bad++;
        }
        if (atomic_load(&near_rec[i].off_worker) != 0)
            bad++;
        hwt_timeout_release(near_h[i]);
    }
    print_message("  %d cancelled in time, %d ran first\n", n_cancelled, n_ran);
    assert_int_equal(bad, 0);
    assert_int_equal(n_cancelled + n_ran, NEAR);
}

/* A cancel racing the worker as it moves the timeout from the queue into
 * the wheel (it marks the timeout moved with a CAS on the same state word)
 * still wins: a cancel of a pending timeout returns true, always. As in
 * `hwt-bench churn`: each thread cancels the timeout it scheduled a ring's
 * length ago, while the worker moves the backlog into the wheel: the test
 * thread keeps scheduling timeouts due at once, each waking the worker for
 * a pass that takes the queues (it would otherwise come back for them once
 * per cancel latency only). (Before the fix, ~20 per million such cancels
 * returned false.) */
#define MOVE_THREADS 2
#define MOVE_RING 1024
#define MOVE_PER_THREAD 500000

static atomic_int move_ran;     /* tasks of the race that ran: none should */
static atomic_int move_kicks;   /* due-at-once timeouts of the test thread that ran */
static atomic_int move_running; /* racing threads still running */

struct move_arg {
    hwt_timer *timer;
    hwt_timeout *ring[MOVE_RING];
    int lost;     /* cancels of pending timeouts that returned false */
    int failures; /* schedule calls that failed */
};

static void *schedule_and_cancel(void *p)
{
    struct move_arg *a = p;
    for (int i = 0; i < MOVE_PER_THREAD; i++) {
        hwt_timeout **slot = &a->ring[i % MOVE_RING];
        if (*slot != NULL) {
            if (!hwt_timeout_cancel(*slot))
                a->lost++;
            hwt_timeout_release(*slot);
            *slot = NULL;
        }
        if (hwt_new_timeout(a->timer, hwtt_count_task, &move_ran, 1, HWT_HOURS, slot) != 0)
            a->failures++;
    }
    atomic_fetch_sub(&move_running, 1);
    return NULL;
}

static void test_cancel_racing_the_transfer_wins(void **state)
{
    (void)state;
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 512);
    pthread_t th[MOVE_THREADS];
    struct move_arg *args[MOVE_THREADS];
    atomic_store(&move_running, MOVE_THREADS);
    for (int i = 0; i < MOVE_THREADS; i++) {
        args[i] = calloc(1, sizeof *args[i]);
        assert_non_null(args[i]);
        args[i]->timer = t;
        assert_int_equal(pthread_create(&th[i], NULL, schedule_and_cancel, args[i]), 0);
    }
    int kicks = 0, lost = 0, failures = 0;
    while (atomic_load(&move_running) > 0) {
        kicks += hwt_new_timeout(t, hwtt_count_task, &move_kicks, 0, HWT_MILLISECONDS, NULL) == 0;
        hwtt_sleep_ms(1);
    }
    for (int i = 0; i < MOVE_THREADS; i++) {
        pthread_join(th[i], NULL);
        lost += args[i]->lost;
        failures += args[i]->failures;
    }
    assert_true(hwtt_wait_until(atomic_load(&move_kicks) == kicks, hwtt_slack_ms(2000)));
    hwt_stats st;
    hwt_timer_stats(t, &st);
    hwt_timeout **list;
    size_t count;
    int stopped = hwt_stop(t, &list, &count);
    hwt_timeouts_release(list, count);
    for (int i = 0; i < MOVE_THREADS; i++) {
        for (int k = 0; k < MOVE_RING; k++)
            hwt_timeout_release(args[i]->ring[k]);
        free(args[i]);
    }
    hwt_timer_destroy(t);
    assert_int_equal(failures, 0);
    assert_int_equal(lost, 0);
    assert_int_equal(stopped, 0);
    assert_int_equal(count, MOVE_THREADS * MOVE_RING); /* each thread's last ring */
    assert_int_equal(atomic_load(&move_ran), 0);
    assert_int_equal(st.pending, MOVE_THREADS * MOVE_RING);
    assert_int_equal(st.cancelled, MOVE_THREADS * (MOVE_PER_THREAD - MOVE_RING));
    assert_int_equal(st.expired, (uint64_t)kicks);
}

int main(void)
{
    hwtt_watchdog(150);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cancel_before_expiry_true_once),
        cmocka_unit_test(test_cancel_after_expiry_false),
        cmocka_unit_test(test_cancelled_callback_idle_1ms_tick),
        cmocka_unit_test(test_cancelled_callback_idle_100us_tick),
        cmocka_unit_test(test_cancelled_callback_idle_100ms_tick),
        cmocka_unit_test(test_cancelled_callback_idle_500ms_tick),
        cmocka_unit_test(test_cancelled_callbacks_in_time_under_a_stream),
        cmocka_unit_test(test_pending_drops_when_cancel_returns),
        cmocka_unit_test(test_max_pending_frees_at_once),
        cmocka_unit_test(test_cancel_from_task_same_tick),
        cmocka_unit_test(test_cancelled_callbacks_in_cancel_order),
        cmocka_unit_test(test_a_cancel_before_a_tick_is_processed_before_its_tasks),
        cmocka_unit_test(test_a_cancel_before_a_moved_timeouts_tick_is_processed_first),
        cmocka_unit_test(test_many_cancels),
        cmocka_unit_test(test_concurrent_cancels_one_winner),
        cmocka_unit_test(test_cancel_near_deadline_never_runs),
        cmocka_unit_test(test_cancel_racing_the_transfer_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

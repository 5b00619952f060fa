/*
 * test_executor.c - the executor option: the worker hands each expired
 * timeout (with one reference) to the executor, which calls hwt_timeout_run
 * exactly once from any thread. SPEC §2 (executors), §3 (pending count).
 *
 * The executor here pushes timeouts into a queue consumed by a separate
 * thread; a "budget" lets the test hold timeouts in the queue. Tasks only
 * record into atomics; assertions run on the test thread.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------- the queue executor */

#define QCAP 65536

typedef struct exec_q {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hwt_timeout *items[QCAP];
    size_t head, tail; /* head == tail: empty */
    long budget;       /* how many the consumer may still run */
    bool quit;
    pthread_t th;
    atomic_int received;
    atomic_int not_expired_at_handover;
    atomic_int run_calls;
} exec_q;

static exec_q q;

static void q_exec(void *ctx, hwt_timeout *timeout)
{
    exec_q *e = ctx;
    if (!hwt_timeout_is_expired(timeout))
        atomic_fetch_add(&e->not_expired_at_handover, 1);
    pthread_mutex_lock(&e->mu);
    e->items[e->tail % QCAP] = timeout;
    e->tail++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_add(&e->received, 1);
}

static void *q_consumer(void *arg)
{
    exec_q *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->quit && !(e->head != e->tail && e->budget > 0))
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->head == e->tail) { /* quit, and drained */
            pthread_mutex_unlock(&e->mu);
            break;
        }
        hwt_timeout *t = e->items[e->head % QCAP];
        e->head++;
        e->budget--;
        pthread_mutex_unlock(&e->mu);
        hwt_timeout_run(t);
        atomic_fetch_add(&e->run_calls, 1);
    }
    return NULL;
}

static void q_start(long budget)
{
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.cv, NULL);
    q.head = q.tail = 0;
    q.budget = budget;
    q.quit = false;
    atomic_store(&q.received, 0);
    atomic_store(&q.not_expired_at_handover, 0);
    atomic_store(&q.run_calls, 0);
    assert_int_equal(pthread_create(&q.th, NULL, q_consumer, &q), 0);
}

static void q_allow(long more)
{
    pthread_mutex_lock(&q.mu);
    q.budget = more == LONG_MAX ? LONG_MAX : q.budget + more;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
}

/* Lets the consumer run whatever is left, then joins it. */
static void q_finish(void)
{
    pthread_mutex_lock(&q.mu);
    q.quit = true;
    q.budget = LONG_MAX;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    pthread_join(q.th, NULL);
    pthread_cond_destroy(&q.cv);
    pthread_mutex_destroy(&q.mu);
}

static size_t q_len(void)
{
    pthread_mutex_lock(&q.mu);
    size_t n = q.tail - q.head;
    pthread_mutex_unlock(&q.mu);
    return n;
}

/* Takes one item off the queue (NULL if empty), bypassing the consumer. */
static hwt_timeout *q_take(void)
{
    hwt_timeout *t = NULL;
    pthread_mutex_lock(&q.mu);
    if (q.head != q.tail) {
        t = q.items[q.head % QCAP];
        q.head++;
    }
    pthread_mutex_unlock(&q.mu);
    return t;
}

static hwt_timer *exec_timer(uint64_t tick_ms, void (*exec)(void *, hwt_timeout *), void *ctx)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = tick_ms;
    o.executor = exec;
    o.executor_ctx = ctx;
    return hwtt_timer_opts(&o);
}

/* ------------------------------------------------------- the records */

typedef struct rec {
    atomic_int ran;
    atomic_int cancelled;
    pthread_t ran_on; /* written before ran is incremented */
} rec;

static void rec_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    rec *r = arg;
    r->ran_on = pthread_self();
    atomic_fetch_add(&r->ran, 1);
}

static void rec_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((rec *)arg)->cancelled, 1);
}

static const hwt_task rec_task = {.run = rec_run, .cancelled = rec_cancelled};

static int sum_ran(rec *r, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += atomic_load(&r[i].ran);
    return s;
}

/* ------------------------------------------------------------- tests */

#define N1 200
static rec r1[N1];
static hwt_timeout *h1[N1];

static void test_tasks_run_on_executor_thread_once(void **state)
{
    (void)state;
    memset(r1, 0, sizeof r1);
    q_start(LONG_MAX);
    hwt_timer *t = exec_timer(1, q_exec, &q);
    for (int i = 0; i < N1; i++)
        assert_int_equal(
            hwt_new_timeout_task(t, &rec_task, &r1[i], i % 20, HWT_MILLISECONDS, &h1[i]), 0);
    bool all = hwtt_wait_until(sum_ran(r1, N1) == N1, 10000);
    /* a second run, through the caller's own reference, does nothing */
    for (int i = 0; i < N1; i++)
        hwt_timeout_run(h1[i]);
    hwt_timeout **list = NULL;
    size_t n = 99;
    int rc = hwt_stop(t, &list, &n);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    hwt_timer_destroy(t);
    q_finish();
    assert_true(all);
    assert_int_equal(rc, 0);
    assert_int_equal(n, 0);
    hwt_timeouts_release(list, n);
    assert_int_equal(atomic_load(&q.received), N1);
    assert_int_equal(atomic_load(&q.run_calls), N1);
    assert_int_equal(atomic_load(&q.not_expired_at_handover), 0);
    assert_int_equal(s.expired, N1);
    int bad = 0;
    for (int i = 0; i < N1; i++) {
        if (atomic_load(&r1[i].ran) != 1 || atomic_load(&r1[i].cancelled) != 0 ||
            !pthread_equal(r1[i].ran_on, q.th) || !hwt_timeout_is_expired(h1[i]) ||
            hwt_timeout_is_cancelled(h1[i]))
            bad++;
        hwt_timeout_release(h1[i]);
    }
    assert_int_equal(bad, 0);
}

#define N2 10
static rec r2[N2];
static hwt_timeout *h2[N2];

static void test_handed_over_is_expired_not_pending(void **state)
{
    (void)state;
    memset(r2, 0, sizeof r2);
    static rec far;
    memset(&far, 0, sizeof far);
    q_start(0); /* hold everything in the queue */
    hwt_timer *t = exec_timer(1, q_exec, &q);
    hwt_timeout *hf = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &far, 1, HWT_HOURS, &hf), 0);
    for (int i = 0; i < N2; i++)
        assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r2[i], 1, HWT_MILLISECONDS, &h2[i]),
                         0);
    bool received = hwtt_wait_until(atomic_load(&q.received) == N2, 5000);
    int64_t pending = hwt_pending_timeouts(t);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    int not_expired = 0, cancelled = 0, cancel_true = 0;
    for (int i = 0; i < N2; i++) {
        not_expired += !hwt_timeout_is_expired(h2[i]);
        cancelled += hwt_timeout_is_cancelled(h2[i]);
        cancel_true += hwt_timeout_cancel(h2[i]); /* too late: expired */
    }
    int ran_while_held = sum_ran(r2, N2);
    q_allow(LONG_MAX);
    bool all = hwtt_wait_until(sum_ran(r2, N2) == N2, 5000);
    hwt_timeout **list = NULL;
    size_t n = 0;
    int rc = hwt_stop(t, &list, &n);
    hwt_timer_destroy(t);
    q_finish();

    assert_true(received);
    assert_true(pending == 1); /* only the far one */
    assert_int_equal(s.pending, 1);
    assert_int_equal(s.expired, N2);
    assert_int_equal(not_expired, 0);
    assert_int_equal(cancelled, 0);
    assert_int_equal(cancel_true, 0);
    assert_int_equal(ran_while_held, 0);
    assert_true(all);
    assert_int_equal(rc, 0);
    assert_int_equal(n, 1);
    assert_ptr_equal(hwt_timeout_arg(list[0]), &far);
    hwt_timeouts_release(list, n);
    for (int i = 0; i < N2; i++) {
        assert_int_equal(atomic_load(&r2[i].ran), 1);
        assert_int_equal(atomic_load(&r2[i].cancelled), 0);
        hwt_timeout_release(h2[i]);
    }
    assert_int_equal(atomic_load(&far.ran), 0);
    assert_int_equal(atomic_load(&far.cancelled), 0);
    hwt_timeout_release(hf);
}

static void test_run_on_not_handed_over_does_nothing(void **state)
{
    (void)state;
    static rec a, b, c, d;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    memset(&d, 0, sizeof d);

    /* an executor timer: a pending timeout is not runnable yet */
    q_start(LONG_MAX);
    hwt_timer *t = exec_timer(1, q_exec, &q);
    hwt_timeout *ha = NULL, *hb = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &a, 1, HWT_HOURS, &ha), 0);
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &b, 20, HWT_MILLISECONDS, &hb), 0);
    hwt_timeout_run(ha);
    hwt_timeout_run(hb); /* before its deadline: nothing */
    int a_ran_early = atomic_load(&a.ran), b_ran_early = atomic_load(&b.ran);
    bool a_expired = hwt_timeout_is_expired(ha);
    int64_t pending = hwt_pending_timeouts(t);
    bool b_ran = hwtt_wait_until(atomic_load(&b.ran) == 1, 5000);
    bool a_cancel = hwt_timeout_cancel(ha); /* still pending, still cancellable */
    bool a_cb = hwtt_wait_until(atomic_load(&a.cancelled) == 1, 5000);
    hwt_timeout_run(hb); /* after it ran: nothing */
    hwt_timeout_run(ha); /* after it was cancelled: nothing */
    hwt_timer_destroy(t);
    q_finish();
    assert_int_equal(a_ran_early, 0);
    assert_int_equal(b_ran_early, 0);
    assert_false(a_expired);
    assert_int_equal(pending, 2);
    assert_true(b_ran);
    assert_true(a_cancel);
    assert_true(a_cb);
    assert_int_equal(atomic_load(&a.ran), 0);
    assert_int_equal(atomic_load(&a.cancelled), 1);
    assert_int_equal(atomic_load(&b.ran), 1);
    assert_int_equal(atomic_load(&q.received), 1);
    assert_int_equal(atomic_load(&q.run_calls), 1);
    hwt_timeout_release(ha);
    hwt_timeout_release(hb);

    /* a timer without an executor: hwt_timeout_run never runs anything */
    t = hwtt_timer(1, HWT_MILLISECONDS, 64);
    hwt_timeout *hc = NULL, *hd = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &c, 1, HWT_HOURS, &hc), 0);
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &d, 1, HWT_MILLISECONDS, &hd), 0);
    hwt_timeout_run(hc);
    int c_ran_early = atomic_load(&c.ran);
    int64_t c_pending = hwt_pending_timeouts(t);
    bool d_ran = hwtt_wait_until(atomic_load(&d.ran) == 1, 5000);
    hwt_timeout_run(hd);
    hwt_timeout_run(hc);
    hwt_timeout **list = NULL;
    size_t n = 0;
    int rc = hwt_stop(t, &list, &n);
    if (rc == 0)
        for (size_t i = 0; i < n; i++)
            hwt_timeout_run(list[i]); /* handed back: nothing */
    hwt_timer_destroy(t);
    assert_int_equal(c_ran_early, 0);
    assert_int_equal(c_pending == 2 || c_pending, 1);
    assert_true(d_ran);
    assert_int_equal(rc, 0);
    assert_int_equal(n, 1);
    hwt_timeouts_release(list, n);
    hwt_timeout_run(hc); /* after stop and destroy: nothing */
    assert_int_equal(atomic_load(&c.ran), 0);
    assert_int_equal(atomic_load(&c.cancelled), 0);
    assert_int_equal(atomic_load(&d.ran), 1);
    hwt_timeout_release(hc);
    hwt_timeout_release(hd);
}

/* An executor that runs the task inline, on the worker. */
static pthread_t inline_thread;
static atomic_bool inline_thread_known;
static atomic_int inline_calls, inline_other_thread;

/* Runs the task inline, on the worker, inside the executor callback. */
static void inline_exec_once(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    if (!atomic_load(&inline_thread_known)) {
        inline_thread = pthread_self();
        atomic_store(&inline_thread_known, true);
    } else if (!pthread_equal(inline_thread, pthread_self())) {
        atomic_fetch_add(&inline_other_thread, 1);
    }
    atomic_fetch_add(&inline_calls, 1);
    hwt_timeout_run(timeout);
}

#define N3 100
static rec r3[N3];
static atomic_int chained;

static void chaining_task(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    int k = atomic_fetch_add(&chained, 1) + 1;
    if (k < 20)
        hwt_new_timeout(hwt_timeout_timer(timeout), chaining_task, NULL, 0, HWT_MILLISECONDS, NULL);
}

static void test_inline_executor(void **state)
{
    (void)state;
    memset(r3, 0, sizeof r3);
    atomic_store(&inline_thread_known, false);
    atomic_store(&inline_calls, 0);
    atomic_store(&inline_other_thread, 0);
    atomic_store(&chained, 0);
    hwt_timer *t = exec_timer(1, inline_exec_once, NULL);
    for (int i = 0; i < N3; i++)
        assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r3[i], i % 10, HWT_MILLISECONDS, NULL),
                         0);
    assert_int_equal(hwt_new_timeout(t, chaining_task, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    bool all = hwtt_wait_until(sum_ran(r3, N3) == N3 && atomic_load(&chained) == 20, 10000);
    hwt_timeout **list = NULL;
    size_t n = 99;
    int rc = hwt_stop(t, &list, &n);
    hwt_timer_destroy(t);
    assert_true(all);
    assert_int_equal(rc, 0);
    assert_int_equal(n, 0);
    hwt_timeouts_release(list, n);
    assert_int_equal(atomic_load(&inline_calls), N3 + 20);
    assert_int_equal(atomic_load(&inline_other_thread), 0);
    assert_true(atomic_load(&inline_thread_known));
    assert_false(pthread_equal(inline_thread, pthread_self()));
    int bad = 0;
    for (int i = 0; i < N3; i++)
        if (atomic_load(&r3[i].ran) != 1 || !pthread_equal(r3[i].ran_on, inline_thread))
            bad++;
    assert_int_equal(bad, 0);
}

/* Stop, then destroy, while the executor still holds expired timeouts: they
 * still run, once, when hwt_timeout_run is called later. Nobody but the
 * executor holds a reference, so the memory must stay valid on its own. */
#define N4 20
static rec r4[N4];

static void test_executor_holds_across_stop_and_destroy(void **state)
{
    (void)state;
    memset(r4, 0, sizeof r4);
    static rec far;
    memset(&far, 0, sizeof far);
    q_start(0);
    hwt_timer *t = exec_timer(1, q_exec, &q);
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &far, 1, HWT_HOURS, NULL), 0);
    for (int i = 0; i < N4; i++)
        assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r4[i], i % 3, HWT_MILLISECONDS, NULL),
                         0);
    bool received = hwtt_wait_until(atomic_load(&q.received) == N4, 5000);

    hwt_timeout **list = NULL;
    size_t n = 0;
    int rc = hwt_stop(t, &list, &n);
    int64_t pending = hwt_pending_timeouts(t);
    size_t held = q_len();
    q_allow(N4 / 2); /* half of them after stop, before destroy */
    bool half = hwtt_wait_until(sum_ran(r4, N4) == N4 / 2, 5000);
    hwt_timer_destroy(t);
    q_allow(LONG_MAX); /* the rest after destroy */
    bool all = hwtt_wait_until(sum_ran(r4, N4) == N4, 5000);
    q_finish();

    assert_true(received);
    assert_int_equal(rc, 0);
    assert_int_equal(n, 1);
    assert_true(list != NULL && hwt_timeout_arg(list[0]) == &far);
    hwt_timeouts_release(list, n);
    assert_int_equal(pending, 0);
    assert_int_equal(held, N4);
    assert_true(half);
    assert_true(all);
    assert_int_equal(atomic_load(&q.run_calls), N4);
    for (int i = 0; i < N4; i++) {
        assert_int_equal(atomic_load(&r4[i].ran), 1);
        assert_int_equal(atomic_load(&r4[i].cancelled), 0);
        assert_true(pthread_equal(r4[i].ran_on, q.th));
    }
    assert_int_equal(atomic_load(&far.ran), 0);
    assert_int_equal(atomic_load(&far.cancelled), 0);
}

/* An executor may give its hand-over back with hwt_timeout_release instead of
 * running it (header: "an executor hand-over that will not be run"). */
static void test_executor_may_release_instead_of_run(void **state)
{
    (void)state;
    static rec r;
    memset(&r, 0, sizeof r);
    q_start(0);
    hwt_timer *t = exec_timer(1, q_exec, &q);
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 1, HWT_MILLISECONDS, NULL), 0);
    bool received = hwtt_wait_until(atomic_load(&q.received) == 1, 5000);
    hwt_timeout *taken = q_take();
    bool expired = hwt_timeout_is_expired(taken);
    hwt_timer_destroy(t);
    hwt_timeout_release(taken); /* the last reference: frees the timer's memory too */
    q_finish();
    assert_true(received);
    assert_non_null(taken);
    assert_true(expired);
    assert_int_equal(atomic_load(&r.ran), 0);
    assert_int_equal(atomic_load(&r.cancelled), 0);
    assert_int_equal(atomic_load(&q.run_calls), 0);
}

int main(void)
{
    hwtt_watchdog(150);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tasks_run_on_executor_thread_once),
        cmocka_unit_test(test_handed_over_is_expired_not_pending),
        cmocka_unit_test(test_run_on_not_handed_over_does_nothing),
        cmocka_unit_test(test_inline_executor),
        cmocka_unit_test(test_executor_holds_across_stop_and_destroy),
        cmocka_unit_test(test_executor_may_release_instead_of_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

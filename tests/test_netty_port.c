/*
 * test_netty_port.c - every case of Netty's io.netty.util.HashedWheelTimerTest
 * (netty 4.1, common/src/test/java/io/netty/util/HashedWheelTimerTest.java),
 * ported to libhwtimer, with the facts SPEC.md adds to them (the pending count
 * goes down the moment a cancel returns true; stop hands back or drops).
 *
 * Netty's latches become atomics that tasks update on the worker; the test
 * thread waits on them with hwtt_wait_until() and asserts. Lower time bounds
 * are strict, upper ones generous (hwtt_slack_ms scales them on slow builds).
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS INT64_C(1000000)

static pthread_t g_test_thread; /* set in main(), before any worker exists */

/* ------------------------------------------------------------ probes */

/* What a task saw. Tasks write with atomics; the test thread reads. */
typedef struct probe {
    atomic_int runs;
    atomic_int cancels;
    atomic_llong run_ns;
    atomic_bool off_test_thread; /* ran (or was cancelled) on another thread */
    atomic_bool bad;             /* the borrowed handle did not match */
} probe;

#define NPROBES 64
static probe g_p[NPROBES];

static void probes_reset(void)
{
    for (int i = 0; i < NPROBES; i++) {
        atomic_store(&g_p[i].runs, 0);
        atomic_store(&g_p[i].cancels, 0);
        atomic_store(&g_p[i].run_ns, 0);
        atomic_store(&g_p[i].off_test_thread, false);
        atomic_store(&g_p[i].bad, false);
    }
}

static void probe_run(hwt_timeout *timeout, void *arg)
{
    probe *p = arg;
    atomic_store(&p->run_ns, hwtt_now_ns());
    if (hwt_timeout_arg(timeout) != arg || hwt_timeout_task(timeout) != probe_run ||
        !hwt_timeout_is_expired(timeout) || hwt_timeout_is_cancelled(timeout))
        atomic_store(&p->bad, true);
    atomic_store(&p->off_test_thread, !pthread_equal(pthread_self(), g_test_thread));
    atomic_fetch_add(&p->runs, 1);
}

static void probe_cancelled(hwt_timeout *timeout, void *arg)
{
    probe *p = arg;
    if (hwt_timeout_arg(timeout) != arg || !hwt_timeout_is_cancelled(timeout))
        atomic_store(&p->bad, true);
    atomic_store(&p->off_test_thread, !pthread_equal(pthread_self(), g_test_thread));
    atomic_fetch_add(&p->cancels, 1);
}

static int sum_cancels(int n)
{
    int sum = 0;
    for (int i = 0; i < n; i++)
        sum += atomic_load(&g_p[i].cancels);
    return sum;
}

static int sum_runs(int n)
{
    int sum = 0;
    for (int i = 0; i < n; i++)
        sum += atomic_load(&g_p[i].runs);
    return sum;
}

static const hwt_task probe_task = {.run = probe_run, .cancelled = probe_cancelled};

static void noop_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* A gate that blocking tasks wait on (bounded, so a failed test cannot hang a
 * worker forever). Teardown opens it before destroying timers. */
static atomic_bool g_gate;

static int teardown(void **state)
{
    atomic_store(&g_gate, true);
    return hwtt_teardown_timers(state);
}

static int setup(void **state)
{
    (void)state;
    probes_reset();
    atomic_store(&g_gate, false);
    return 0;
}

static hwt_timer *timer_with(uint64_t tick_ms, uint32_t wheel, int64_t max_pending)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = tick_ms;
    o.tick_unit = HWT_MILLISECONDS;
    o.ticks_per_wheel = wheel;
    o.max_pending_timeouts = max_pending;
    return hwtt_track(hwtt_timer_opts(&o));
}

/* Netty's `new HashedWheelTimer()`: 100 ms tick, 512 buckets. */
static hwt_timer *default_timer(void)
{
    return hwtt_track(hwtt_timer_opts(NULL));
}

/* hwt_stop() with a list; asserts success and returns the count. The list is
 * returned through *list (may be NULL when count is 0). */
static size_t stop_list(hwt_timer *timer, hwt_timeout ***list)
{
    size_t n = 12345;
    *list = (hwt_timeout **)(uintptr_t)1;
    assert_int_equal(hwt_stop(timer, list, &n), 0);
    if (n == 0)
        assert_null(*list);
    else
        assert_non_null(*list);
    return n;
}

/* --------------------------------------- testScheduleTimeoutShouldNotRunBeforeDelay */

static void test_schedule_timeout_should_not_run_before_delay(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 10, HWT_SECONDS, &h), 0);
    assert_non_null(h);

    /* Netty waits 3 s on a latch that must not open. */
    assert_false(hwtt_wait_until(atomic_load(&g_p[0].runs) != 0, 1500));
    assert_false(hwt_timeout_is_expired(h));
    assert_false(hwt_timeout_is_cancelled(h));
    assert_int_equal(hwt_pending_timeouts(timer), 1);

    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    assert_int_equal(n, 1);
    assert_ptr_equal(list[0], h);
    hwt_timeouts_release(list, n);
    assert_int_equal(atomic_load(&g_p[0].runs), 0);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

/* --------------------------------------- testScheduleTimeoutShouldRunAfterDelay */

static void test_schedule_timeout_should_run_after_delay(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    hwt_timeout *h = NULL;
    int64_t t0 = hwtt_now_ns();
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 2, HWT_SECONDS, &h), 0);

    /* Netty: the latch opens within 3 s. */
    assert_true(hwtt_wait_until(atomic_load(&g_p[0].runs) == 1, 2000 + hwtt_slack_ms(1000)));
    assert_true(hwt_timeout_is_expired(h));
    assert_false(hwt_timeout_is_cancelled(h));
    assert_false(atomic_load(&g_p[0].bad));
    assert_true(atomic_load(&g_p[0].off_test_thread));
    int64_t waited = atomic_load(&g_p[0].run_ns) - t0;
    if (waited < 2000 * MS)
        fail_msg("ran %lld ns after scheduling, before its 2 s delay", (long long)waited);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    /* An expired timeout cannot be cancelled. */
    assert_false(hwt_timeout_cancel(h));
    assert_false(hwt_timeout_is_cancelled(h));

    hwt_timeout **list;
    assert_int_equal(stop_list(timer, &list), 0);
    assert_int_equal(atomic_load(&g_p[0].runs), 1);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

/* --------------------------------------------------------- testStopTimer */

static void test_stop_timer(void **state)
{
    (void)state;
    /* Processed: three 1 ms timeouts run, the stop hands back nothing. */
    hwt_timer *processed = default_timer();
    for (int i = 0; i < 3; i++)
        assert_int_equal(hwt_new_timeout(processed, probe_run, &g_p[i], 1, HWT_MILLISECONDS, NULL),
                         0);
    assert_true(hwtt_wait_until(sum_runs(3) == 3, 1000 + hwtt_slack_ms(1000)));
    hwt_timeout **list;
    assert_int_equal(stop_list(processed, &list), 0);
    hwtt_destroy(processed);

    /* Unprocessed: five 5 s timeouts are all handed back. */
    hwt_timer *unprocessed = default_timer();
    hwt_timeout *h[5];
    for (int i = 0; i < 5; i++)
        assert_int_equal(
            hwt_new_timeout(unprocessed, probe_run, &g_p[10 + i], 5, HWT_SECONDS, &h[i]), 0);
    hwtt_sleep_ms(250); /* lets the worker move them into the wheel (Netty sleeps 1 s) */
    size_t n = stop_list(unprocessed, &list);
    assert_int_equal(n, 5);
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (int j = 0; j < 5; j++)
            found |= list[i] == h[j];
        assert_true(found);
        assert_true(hwt_timeout_is_cancelled(list[i]));
        assert_false(hwt_timeout_is_expired(list[i]));
    }
    hwt_timeouts_release(list, n);
    assert_int_equal(hwt_pending_timeouts(unprocessed), 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(atomic_load(&g_p[10 + i].runs), 0);
        hwt_timeout_release(h[i]);
    }
    hwtt_destroy(unprocessed);
}

/* ---------------------------- testTimerShouldThrowExceptionAfterShutdownForNewTimeouts */

static void test_new_timeout_after_stop_fails(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    for (int i = 0; i < 3; i++)
        assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[i], 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(sum_runs(3) == 3, 1000 + hwtt_slack_ms(1000)));
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);

    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[5], 1, HWT_MILLISECONDS, &h),
                     HWT_ESTOPPED);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[5], 1, HWT_MILLISECONDS, NULL),
                     HWT_ESTOPPED);
    assert_int_equal(hwt_new_timeout_task(timer, &probe_task, &g_p[5], 0, HWT_MILLISECONDS, NULL),
                     HWT_ESTOPPED);
    assert_int_equal(hwt_timer_start(timer), HWT_ESTOPPED);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    assert_int_equal(s.scheduled, 3);
    assert_int_equal(s.rejected, 0);
    assert_int_equal(s.pending, 0);

    /* A second stop is a no-op with an empty list. */
    hwt_timeout **list;
    assert_int_equal(stop_list(timer, &list), 0);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&g_p[5].runs), 0);
    assert_int_equal(atomic_load(&g_p[5].cancels), 0);
}

/* ----------------------------------------------- testTimerOverflowWheelLength */

static atomic_int g_resched_runs, g_resched_ok, g_resched_stopped, g_resched_err;
static atomic_llong g_resched_last_ns;
static atomic_bool g_resched_early;

static void resched_task(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    int64_t now = hwtt_now_ns();
    if (now - atomic_load(&g_resched_last_ns) < 100 * MS)
        atomic_store(&g_resched_early, true);
    atomic_store(&g_resched_last_ns, hwtt_now_ns());
    int rc = hwt_new_timeout(hwt_timeout_timer(timeout), resched_task, NULL, 100, HWT_MILLISECONDS,
                             NULL);
    if (rc == 0)
        atomic_fetch_add(&g_resched_ok, 1);
    else if (rc == HWT_ESTOPPED)
        atomic_fetch_add(&g_resched_stopped, 1);
    else
        atomic_store(&g_resched_err, rc);
    atomic_fetch_add(&g_resched_runs, 1);
}

static void test_timer_overflow_wheel_length(void **state)
{
    (void)state;
    hwt_timer *timer = timer_with(100, 32, -1);
    atomic_store(&g_resched_runs, 0);
    atomic_store(&g_resched_ok, 0);
    atomic_store(&g_resched_stopped, 0);
    atomic_store(&g_resched_err, 0);
    atomic_store(&g_resched_early, false);
    atomic_store(&g_resched_last_ns, hwtt_now_ns());
    assert_int_equal(hwt_new_timeout(timer, resched_task, NULL, 100, HWT_MILLISECONDS, NULL), 0);

    assert_true(hwtt_wait_until(atomic_load(&g_resched_runs) >= 3, 600 + hwtt_slack_ms(2000)));
    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    /* Stop waited for any running task: the counters are final now. */
    int runs = atomic_load(&g_resched_runs), ok = atomic_load(&g_resched_ok);
    int stopped = atomic_load(&g_resched_stopped);
    assert_int_equal(atomic_load(&g_resched_err), 0);
    assert_false(atomic_load(&g_resched_early));
    assert_int_equal(ok + stopped, runs);
    /* Every successful schedule either ran or was handed back. */
    assert_int_equal((size_t)(1 + ok), (size_t)runs + n);
    /* Netty: the stop hands back the rescheduled one (unless the last task's
     * schedule raced with the stop and got HWT_ESTOPPED). */
    assert_int_equal(n + (size_t)stopped, 1);
    for (size_t i = 0; i < n; i++) {
        assert_true(hwt_timeout_is_cancelled(list[i]));
        assert_ptr_equal(hwt_timeout_task(list[i]), resched_task);
    }
    hwt_timeouts_release(list, n);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------- testExecutionOnTime */

typedef struct slot {
    int64_t start_ns; /* test thread only */
    atomic_llong run_ns;
} slot;

static atomic_int g_slot_runs;

static void slot_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    slot *s = arg;
    atomic_store_explicit(&s->run_ns, hwtt_now_ns(), memory_order_relaxed);
    atomic_fetch_add(&g_slot_runs, 1);
}

static void test_execution_on_time(void **state)
{
    (void)state;
    enum { N = 100000 };
    const int64_t tick_ms = 200, timeout_ms = 125;
    /* Netty: delay >= timeout && delay < 2 * (tick + timeout) = 650 ms. */
    const int64_t max_ms = 2 * (tick_ms + timeout_ms) + hwtt_slack_ms(500);
    hwt_timer *timer = timer_with((uint64_t)tick_ms, 512, -1);
    slot *slots = calloc(N, sizeof *slots);
    assert_non_null(slots);
    atomic_store(&g_slot_runs, 0);

    for (int i = 0; i < N; i++) {
        slots[i].start_ns = hwtt_now_ns();
        int rc = hwt_new_timeout(timer, slot_task, &slots[i], timeout_ms, HWT_MILLISECONDS, NULL);
        if (rc != 0) {
            hwtt_destroy(timer);
            free(slots);
            fail_msg("hwt_new_timeout #%d: %d (%s)", i, rc, hwt_strerror(rc));
        }
    }
    bool all = hwtt_wait_until(atomic_load(&g_slot_runs) == N, 10000 + hwtt_slack_ms(5000));
    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    hwt_timeouts_release(list, n);
    hwtt_destroy(timer);

    int runs = atomic_load(&g_slot_runs);
    int64_t min_ns = INT64_MAX, max_ns = INT64_MIN;
    int early = 0, late = 0, missing = 0;
    for (int i = 0; i < N; i++) {
        int64_t run = atomic_load(&slots[i].run_ns);
        if (run == 0) {
            missing++;
            continue;
        }
        int64_t d = run - slots[i].start_ns;
        min_ns = d < min_ns ? d : min_ns;
        max_ns = d > max_ns ? d : max_ns;
        early += d < timeout_ms * MS;
        late += d > max_ms * MS;
    }
    free(slots);
    print_message("execution on time: %d runs, delay min %.3f ms max %.3f ms (bound %lld ms)\n",
                  runs, (double)min_ns / 1e6, (double)max_ns / 1e6, (long long)max_ms);
    assert_true(all);
    assert_int_equal(runs, N);
    assert_int_equal(n, 0);
    assert_int_equal(missing, 0);
    if (early)
        fail_msg("%d of %d timeouts ran before their %lld ms delay (min %lld ns)", early, N,
                 (long long)timeout_ms, (long long)min_ns);
    if (late)
        fail_msg("%d of %d timeouts ran after %lld ms (max %lld ns)", late, N, (long long)max_ms,
                 (long long)max_ns);
}

/* ------------------------------------------------ testExecutionOnTaskExecutor */

static atomic_int g_exec_calls;
static atomic_bool g_exec_bad;
static hwt_timer *g_exec_timer; /* written before the first schedule */

/* Netty's: runs the command at once, on the calling (worker) thread. */
static void inline_executor(void *ctx, hwt_timeout *timeout)
{
    if (ctx != &g_exec_calls || hwt_timeout_timer(timeout) != g_exec_timer ||
        hwt_timeout_arg(timeout) != &g_p[0] || !hwt_timeout_is_expired(timeout))
        atomic_store(&g_exec_bad, true);
    hwt_timeout_run(timeout);
    atomic_fetch_add(&g_exec_calls, 1);
}

static void test_execution_on_task_executor(void **state)
{
    (void)state;
    atomic_store(&g_exec_calls, 0);
    atomic_store(&g_exec_bad, false);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 100;
    o.ticks_per_wheel = 32;
    o.max_pending_timeouts = 2;
    o.executor = inline_executor;
    o.executor_ctx = &g_exec_calls;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    g_exec_timer = timer;
    hwt_timeout *h = NULL;
    int64_t t0 = hwtt_now_ns();
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 10, HWT_MILLISECONDS, &h), 0);

    assert_true(hwtt_wait_until(atomic_load(&g_exec_calls) == 1, 1000 + hwtt_slack_ms(1000)));
    assert_int_equal(atomic_load(&g_p[0].runs), 1);
    assert_false(atomic_load(&g_exec_bad));
    assert_false(atomic_load(&g_p[0].bad));
    assert_true(atomic_load(&g_p[0].run_ns) - t0 >= 10 * MS);
    assert_true(hwt_timeout_is_expired(h));
    /* Only the executor's hand-over may run it: a second run does nothing. */
    hwt_timeout_run(h);
    assert_int_equal(atomic_load(&g_p[0].runs), 1);

    hwt_timeout **list;
    assert_int_equal(stop_list(timer, &list), 0);
    assert_int_equal(atomic_load(&g_exec_calls), 1);
    assert_int_equal(atomic_load(&g_p[0].runs), 1);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
}

/* The same with an executor that hands each timeout to a new thread. */
static pthread_t g_exec_threads[8];
static atomic_int g_exec_threads_n;

static void *exec_thread(void *arg)
{
    hwt_timeout_run(arg);
    return NULL;
}

static void thread_executor(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    int i = atomic_load(&g_exec_threads_n);
    if (i >= 8 || pthread_create(&g_exec_threads[i], NULL, exec_thread, timeout) != 0) {
        atomic_store(&g_exec_bad, true);
        hwt_timeout_release(timeout); /* will not be run */
        return;
    }
    atomic_store(&g_exec_threads_n, i + 1);
}

static void test_execution_on_thread_executor(void **state)
{
    (void)state;
    atomic_store(&g_exec_threads_n, 0);
    atomic_store(&g_exec_bad, false);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.executor = thread_executor;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    int64_t t0 = hwtt_now_ns();
    for (int i = 0; i < 3; i++)
        assert_int_equal(
            hwt_new_timeout(timer, probe_run, &g_p[i], 10 * (i + 1), HWT_MILLISECONDS, NULL), 0);
    bool done = hwtt_wait_until(sum_runs(3) == 3, 1000 + hwtt_slack_ms(1000));
    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    hwt_timeouts_release(list, n);
    /* The stop waited for the worker: no executor call is in progress now. */
    int nthreads = atomic_load(&g_exec_threads_n);
    for (int i = 0; i < nthreads; i++)
        pthread_join(g_exec_threads[i], NULL);
    hwtt_destroy(timer);
    assert_int_equal(n, 0);

    assert_true(done);
    assert_false(atomic_load(&g_exec_bad));
    assert_int_equal(nthreads, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(atomic_load(&g_p[i].runs), 1);
        assert_false(atomic_load(&g_p[i].bad));
        assert_true(atomic_load(&g_p[i].run_ns) - t0 >= 10 * (i + 1) * MS);
    }
}

/* ------------------------- testRejectedExecutionExceptionWhenTooManyTimeoutsAreAddedBackToBack */

static void test_rejected_when_too_many_timeouts_back_to_back(void **state)
{
    (void)state;
    hwt_timer *timer = timer_with(100, 32, 2);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 5, HWT_SECONDS, NULL), 0);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[1], 5, HWT_SECONDS, NULL), 0);
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[2], 1, HWT_MILLISECONDS, &h),
                     HWT_EREJECTED);
    assert_int_equal(hwt_new_timeout_task(timer, &probe_task, &g_p[2], 1, HWT_MILLISECONDS, NULL),
                     HWT_EREJECTED);
    assert_int_equal(hwt_pending_timeouts(timer), 2);
    /* A rejected timeout never runs. */
    assert_false(hwtt_wait_until(atomic_load(&g_p[2].runs) != 0, 300));
    assert_int_equal(atomic_load(&g_p[2].cancels), 0);

    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    assert_int_equal(n, 2);
    hwt_timeouts_release(list, n);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&g_p[2].runs), 0);
}

/* -------- testNewTimeoutShouldStopThrowingRejectedExecutionExceptionWhenExistingTimeoutIsCancelled
 */

static void test_no_more_rejection_after_cancel(void **state)
{
    (void)state;
    hwt_timer *timer = timer_with(100, 32, 2);
    hwt_timeout *to_cancel = NULL;
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 5, HWT_SECONDS, NULL), 0);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[1], 5, HWT_SECONDS, &to_cancel), 0);
    assert_int_equal(hwt_new_timeout(timer, noop_task, NULL, 90, HWT_MILLISECONDS, NULL),
                     HWT_EREJECTED);
    assert_true(hwt_timeout_cancel(to_cancel));
    /* SPEC 3: the count goes down the moment the cancel returns true (Netty
     * needed to sleep a few ticks here). */
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    int64_t t0 = hwtt_now_ns();
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[2], 90, HWT_MILLISECONDS, NULL), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 2);
    assert_int_equal(hwt_new_timeout(timer, noop_task, NULL, 90, HWT_MILLISECONDS, NULL),
                     HWT_EREJECTED);

    assert_true(hwtt_wait_until(atomic_load(&g_p[2].runs) == 1, 90 + 100 + hwtt_slack_ms(1000)));
    assert_true(atomic_load(&g_p[2].run_ns) - t0 >= 90 * MS);
    assert_int_equal(hwt_pending_timeouts(timer), 1);

    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    assert_int_equal(n, 1);
    assert_ptr_equal(hwt_timeout_arg(list[0]), &g_p[0]);
    hwt_timeouts_release(list, n);
    hwt_timeout_release(to_cancel);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&g_p[1].runs), 0);
}

/* -------- testNewTimeoutShouldStopThrowingRejectedExecutionExceptionWhenExistingTimeoutIsExecuted
 */

static void test_no_more_rejection_after_expiry(void **state)
{
    (void)state;
    hwt_timer *timer = timer_with(25, 4, 2);
    hwt_timeout *h2 = NULL;
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 5, HWT_SECONDS, NULL), 0);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[1], 90, HWT_MILLISECONDS, &h2), 0);

    hwt_timeout *h3 = NULL;
    int rc = hwt_new_timeout(timer, noop_task, NULL, 5, HWT_SECONDS, &h3);
    if (rc == 0) {
        /* Only possible if the 90 ms one was already taken to run. */
        assert_true(hwt_timeout_is_expired(h2));
        assert_true(hwt_timeout_cancel(h3));
        hwt_timeout_release(h3);
    } else {
        assert_int_equal(rc, HWT_EREJECTED);
    }

    assert_true(hwtt_wait_until(atomic_load(&g_p[1].runs) == 1, 90 + 25 + hwtt_slack_ms(1000)));
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    int64_t t0 = hwtt_now_ns();
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[2], 90, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&g_p[2].runs) == 1, 90 + 25 + hwtt_slack_ms(1000)));
    assert_true(atomic_load(&g_p[2].run_ns) - t0 >= 90 * MS);

    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    assert_int_equal(n, 1);
    assert_ptr_equal(hwt_timeout_arg(list[0]), &g_p[0]);
    hwt_timeouts_release(list, n);
    hwt_timeout_release(h2);
    hwtt_destroy(timer);
}

/* ------------------------------------------------------- reportPendingTimeouts */

static void test_report_pending_timeouts(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    hwt_timeout *t1 = NULL, *t2 = NULL;
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], 100, HWT_MINUTES, &t1), 0);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[1], 100, HWT_MINUTES, &t2), 0);
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[2], 90, HWT_MILLISECONDS, NULL), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 3);

    assert_true(hwt_timeout_cancel(t1));
    assert_true(hwt_timeout_cancel(t2));
    assert_false(hwt_timeout_cancel(t2));
    assert_true(hwt_timeout_is_cancelled(t1));
    assert_true(hwt_timeout_is_cancelled(t2));
    assert_true(hwtt_wait_until(atomic_load(&g_p[2].runs) == 1, 90 + 100 + hwtt_slack_ms(1000)));
    assert_int_equal(hwt_pending_timeouts(timer), 0);

    hwt_timeout **list;
    assert_int_equal(stop_list(timer, &list), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    hwt_timeout_release(t1);
    hwt_timeout_release(t2);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&g_p[0].runs) + atomic_load(&g_p[1].runs), 0);
}

/* --------------------------------------------------------------- testOverflow */

static void test_overflow(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(timer, probe_run, &g_p[0], INT64_MAX, HWT_MILLISECONDS, &h),
                     0);
    assert_false(hwtt_wait_until(atomic_load(&g_p[0].runs) != 0, 1000));
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    assert_false(hwt_timeout_is_expired(h));
    assert_true(hwt_timeout_cancel(h));
    assert_int_equal(hwt_pending_timeouts(timer), 0);

    hwt_timeout **list;
    assert_int_equal(stop_list(timer, &list), 0);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&g_p[0].runs), 0);
}

/* ---------------------------------------------- testStopTimerCancelsPendingTasks */

static void test_stop_timer_cancels_pending_tasks(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    hwt_timeout *h[10];
    /* Five moved into the wheel, five still in the queue when stop comes. */
    for (int i = 0; i < 5; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &probe_task, &g_p[i], 5, HWT_SECONDS, &h[i]),
                         0);
    hwtt_sleep_ms(250);
    for (int i = 5; i < 10; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &probe_task, &g_p[i], 5, HWT_SECONDS, &h[i]),
                         0);
    assert_int_equal(hwt_pending_timeouts(timer), 10);

    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    assert_int_equal(n, 10);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    int seen[10] = {0};
    for (size_t i = 0; i < n; i++) {
        assert_true(hwt_timeout_is_cancelled(list[i]));
        assert_false(hwt_timeout_is_expired(list[i]));
        /* Handed back: already cancelled, cannot be cancelled or run again. */
        assert_false(hwt_timeout_cancel(list[i]));
        hwt_timeout_run(list[i]);
        for (int j = 0; j < 10; j++)
            seen[j] += list[i] == h[j];
    }
    for (int j = 0; j < 10; j++)
        assert_int_equal(seen[j], 1);
    /* The caller owns them: their cancelled callbacks are not called. */
    assert_false(
        hwtt_wait_until(atomic_load(&g_p[0].cancels) + atomic_load(&g_p[9].cancels) != 0, 200));
    for (int i = 0; i < 10; i++) {
        assert_int_equal(atomic_load(&g_p[i].cancels), 0);
        assert_int_equal(atomic_load(&g_p[i].runs), 0);
    }
    hwt_timeouts_release(list, n);
    for (int i = 0; i < 10; i++)
        hwt_timeout_release(h[i]);
    hwtt_destroy(timer);
    for (int i = 0; i < 10; i++)
        assert_int_equal(atomic_load(&g_p[i].cancels), 0);
}

/* hwt_stop(timer, NULL, NULL) drops them and calls their cancelled callbacks,
 * on the worker, before it returns. */
static void test_stop_without_list_calls_cancelled(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    hwt_timeout *h[10];
    for (int i = 0; i < 5; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &probe_task, &g_p[i], 5, HWT_SECONDS, &h[i]),
                         0);
    hwtt_sleep_ms(250);
    for (int i = 5; i < 10; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &probe_task, &g_p[i], 5, HWT_SECONDS, &h[i]),
                         0);

    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(atomic_load(&g_p[i].cancels), 1);
        assert_int_equal(atomic_load(&g_p[i].runs), 0);
        assert_true(atomic_load(&g_p[i].off_test_thread));
        assert_false(atomic_load(&g_p[i].bad));
        assert_true(hwt_timeout_is_cancelled(h[i]));
        assert_false(hwt_timeout_cancel(h[i]));
    }
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    assert_int_equal(s.cancelled, 10);
    hwtt_destroy(timer);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(atomic_load(&g_p[i].cancels), 1);
        hwt_timeout_release(h[i]);
    }
}

/* hwt_timer_destroy() without a stop drops what is pending the same way. */
static void test_destroy_drops_pending(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    hwt_timeout *h[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(hwt_new_timeout_task(timer, &probe_task, &g_p[i], 1, HWT_HOURS, &h[i]), 0);
    hwtt_destroy(timer);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(atomic_load(&g_p[i].cancels), 1);
        assert_int_equal(atomic_load(&g_p[i].runs), 0);
        /* Handles outlive the timer. */
        assert_true(hwt_timeout_is_cancelled(h[i]));
        assert_false(hwt_timeout_is_expired(h[i]));
        assert_false(hwt_timeout_cancel(h[i]));
        hwt_timeout_release(h[i]);
    }
}

/* -------------------------------------------------------- cancelWillCallCallback */

static void test_cancel_will_call_callback(void **state)
{
    (void)state;
    hwt_timer *timer = default_timer();
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout_task(timer, &probe_task, &g_p[0], 90, HWT_MILLISECONDS, &h),
                     0);
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    assert_true(hwt_timeout_cancel(h));
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    assert_false(hwt_timeout_cancel(h));
    /* Within one tick or 100 ms, whichever is longer. */
    assert_true(hwtt_wait_until(atomic_load(&g_p[0].cancels) == 1, 100 + hwtt_slack_ms(1000)));
    assert_true(atomic_load(&g_p[0].off_test_thread));
    assert_false(atomic_load(&g_p[0].bad));
    /* Past its deadline it still does not run, and the callback is not repeated. */
    assert_false(
        hwtt_wait_until(atomic_load(&g_p[0].runs) != 0 || atomic_load(&g_p[0].cancels) != 1, 300));

    hwt_timeout **list;
    assert_int_equal(stop_list(timer, &list), 0);
    hwt_timeout_release(h);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&g_p[0].cancels), 1);
    assert_int_equal(atomic_load(&g_p[0].runs), 0);
}

/* ------------- testPendingTimeoutsShouldBeCountedCorrectlyWhenTimeoutCancelledWithinGoalTick */

static atomic_bool g_blocker_started, g_blocker_done;

static void blocking_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&g_blocker_started, true);
    int64_t give_up = hwtt_now_ns() + 30000 * MS;
    while (!atomic_load(&g_gate) && hwtt_now_ns() < give_up)
        hwtt_sleep_us(200);
    atomic_store(&g_blocker_done, true);
}

static void test_pending_counted_when_cancelled_within_goal_tick(void **state)
{
    (void)state;
    atomic_store(&g_blocker_started, false);
    atomic_store(&g_blocker_done, false);
    hwt_timer *timer = default_timer();
    /* Eleven timeouts with the same delay: the first blocks the worker while
     * the other ten, due in the same tick, are cancelled from this thread. */
    assert_int_equal(hwt_new_timeout(timer, blocking_task, NULL, 200, HWT_MILLISECONDS, NULL), 0);
    hwt_timeout *h[10];
    for (int i = 0; i < 10; i++)
        assert_int_equal(
            hwt_new_timeout_task(timer, &probe_task, &g_p[i], 200, HWT_MILLISECONDS, &h[i]), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 11);
    assert_true(hwtt_wait_until(atomic_load(&g_blocker_started), 200 + 100 + hwtt_slack_ms(1000)));
    assert_int_equal(hwt_pending_timeouts(timer), 10);
    for (int i = 0; i < 10; i++)
        assert_true(hwt_timeout_cancel(h[i]));
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    atomic_store(&g_gate, true);

    assert_true(hwtt_wait_until(atomic_load(&g_blocker_done), hwtt_slack_ms(1000)));
    assert_true(hwtt_wait_until(sum_cancels(10) == 10, 100 + hwtt_slack_ms(1000)));
    /* Counted down exactly once each: not negative now that the worker saw them. */
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    assert_false(hwtt_wait_until(atomic_load(&g_p[0].runs) + atomic_load(&g_p[9].runs) != 0, 200));
    assert_int_equal(hwt_pending_timeouts(timer), 0);
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    assert_int_equal(s.cancelled, 10);
    assert_int_equal(s.expired, 1);
    assert_int_equal(s.pending, 0);

    /* The count still works afterwards. */
    assert_int_equal(hwt_new_timeout(timer, noop_task, NULL, 1, HWT_HOURS, NULL), 0);
    assert_int_equal(hwt_pending_timeouts(timer), 1);
    hwt_timeout **list;
    size_t n = stop_list(timer, &list);
    assert_int_equal(n, 1);
    hwt_timeouts_release(list, n);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(atomic_load(&g_p[i].runs), 0);
        assert_int_equal(atomic_load(&g_p[i].cancels), 1);
        hwt_timeout_release(h[i]);
    }
    hwtt_destroy(timer);
}

/* The same, with the cancels made by a task on the worker, inside the tick
 * that is expiring the bucket the cancelled timeouts are in. */
static hwt_timeout *g_victims[10];
static atomic_bool g_victims_ready;
static atomic_int g_victims_cancelled, g_canceller_pending_after;

static void cancelling_task(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    int64_t give_up = hwtt_now_ns() + 30000 * MS;
    while (!atomic_load(&g_victims_ready) && hwtt_now_ns() < give_up)
        hwtt_sleep_us(200);
    int n = 0;
    for (int i = 0; i < 10; i++)
        n += hwt_timeout_cancel(g_victims[i]);
    atomic_store(&g_victims_cancelled, n);
    atomic_store(&g_canceller_pending_after, (int)hwt_pending_timeouts(hwt_timeout_timer(timeout)));
    atomic_store(&g_blocker_done, true);
}

static void test_cancel_inside_task_within_goal_tick(void **state)
{
    (void)state;
    atomic_store(&g_blocker_done, false);
    atomic_store(&g_victims_ready, false);
    atomic_store(&g_victims_cancelled, -1);
    atomic_store(&g_canceller_pending_after, -1);
    hwt_timer *timer = default_timer();
    assert_int_equal(hwt_new_timeout(timer, cancelling_task, NULL, 200, HWT_MILLISECONDS, NULL), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(
            hwt_new_timeout_task(timer, &probe_task, &g_p[i], 200, HWT_MILLISECONDS, &g_victims[i]),
            0);
    atomic_store(&g_victims_ready, true);

    assert_true(hwtt_wait_until(atomic_load(&g_blocker_done), 200 + 100 + hwtt_slack_ms(1000)));
    assert_int_equal(atomic_load(&g_victims_cancelled), 10);
    assert_int_equal(atomic_load(&g_canceller_pending_after), 0);
    assert_true(hwtt_wait_until(sum_cancels(10) == 10, 100 + hwtt_slack_ms(1000)));
    assert_false(hwtt_wait_until(atomic_load(&g_p[0].runs) + atomic_load(&g_p[9].runs) != 0, 200));
    assert_int_equal(hwt_pending_timeouts(timer), 0);

    hwt_timeout **list;
    assert_int_equal(stop_list(timer, &list), 0);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(atomic_load(&g_p[i].runs), 0);
        assert_int_equal(atomic_load(&g_p[i].cancels), 1);
        assert_true(hwt_timeout_is_cancelled(g_victims[i]));
        hwt_timeout_release(g_victims[i]);
    }
    hwtt_destroy(timer);
}

/* ------------------------------------------------------------------- main */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    hwtt_watchdog(150);
    g_test_thread = pthread_self();
    const struct CMUnitTest tests[] = {
        T(test_schedule_timeout_should_not_run_before_delay),
        T(test_schedule_timeout_should_run_after_delay),
        T(test_stop_timer),
        T(test_new_timeout_after_stop_fails),
        T(test_timer_overflow_wheel_length),
        T(test_execution_on_time),
        T(test_execution_on_task_executor),
        T(test_execution_on_thread_executor),
        T(test_rejected_when_too_many_timeouts_back_to_back),
        T(test_no_more_rejection_after_cancel),
        T(test_no_more_rejection_after_expiry),
        T(test_report_pending_timeouts),
        T(test_overflow),
        T(test_stop_timer_cancels_pending_tasks),
        T(test_stop_without_list_calls_cancelled),
        T(test_destroy_drops_pending),
        T(test_cancel_will_call_callback),
        T(test_pending_counted_when_cancelled_within_goal_tick),
        T(test_cancel_inside_task_within_goal_tick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

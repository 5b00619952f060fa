/*
 * test_lifecycle.c - start (lazy, explicit, failing), stop (once, twice,
 * concurrently, from a task, with bad arguments), destroy (with pending
 * timeouts, from a task), and the worker thread's name, signal mask and
 * attributes.
 *
 * SPEC §2 (stop/destroy ownership), §3 (start, stop from a task, worker
 * thread). Tasks only record into static state; assertions run on the test
 * thread.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define FAR_HOURS 1 /* "never" within a test */

/* ------------------------------------------------------------ helpers */

/* What a task sees of the thread it runs on. */
typedef struct probe {
    atomic_int done;
    pid_t tid;
    pthread_t self;
    char name[32];
    int name_rc;
    sigset_t mask;
    int mask_rc;
    size_t stacksize;
    int attr_rc;
} probe;

static void probe_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    probe *p = arg;
    p->tid = gettid();
    p->self = pthread_self();
    p->name_rc = pthread_getname_np(pthread_self(), p->name, sizeof p->name);
    sigemptyset(&p->mask);
    p->mask_rc = pthread_sigmask(SIG_BLOCK, NULL, &p->mask);
    pthread_attr_t a;
    p->attr_rc = pthread_getattr_np(pthread_self(), &a);
    if (p->attr_rc == 0) {
        pthread_attr_getstacksize(&a, &p->stacksize);
        pthread_attr_destroy(&a);
    }
    atomic_store(&p->done, 1);
}

/* Runs probe_task on t's worker and waits for it; fails the test otherwise. */
static void probe_worker(hwt_timer *t, probe *p)
{
    memset(p, 0, sizeof *p);
    assert_int_equal(hwt_new_timeout(t, probe_task, p, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&p->done) == 1, 5000));
}

typedef struct counters {
    atomic_int ran;
    atomic_int cancelled;
    atomic_int cancelled_off_worker; /* cancelled callbacks not on `worker` */
    pthread_t worker;
    atomic_bool worker_known;
} counters;

static void cnt_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((counters *)arg)->ran, 1);
}

static void cnt_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    counters *c = arg;
    if (atomic_load(&c->worker_known) && !pthread_equal(c->worker, pthread_self()))
        atomic_fetch_add(&c->cancelled_off_worker, 1);
    atomic_fetch_add(&c->cancelled, 1);
}

static const hwt_task cnt_task = {.run = cnt_run, .cancelled = cnt_cancelled};

static hwt_timer *named_timer(const char *name, uint64_t tick_ms)
{
    hwt_options o;
    hwt_options_init(&o);
    o.thread_name = name;
    o.tick_duration = tick_ms;
    return hwtt_timer_opts(&o);
}

static bool sigsets_equal(const sigset_t *a, const sigset_t *b)
{
    for (int s = 1; s < NSIG; s++)
        if (sigismember(a, s) != sigismember(b, s))
            return false;
    return true;
}

/* ---------------------------------------------------------------- start */

static void test_lazy_start(void **state)
{
    (void)state;
    hwt_timer *t = named_timer("hwt-lc-lazy", 10);
    hwtt_sleep_ms(50); /* give an eager worker time to show up */
    assert_int_equal(hwtt_threads_named("hwt-lc-lazy"), 0);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    assert_int_equal(s.ticks, 0);
    assert_int_equal(s.wakeups, 0);

    assert_int_equal(hwt_timer_start(t), 0);
    assert_true(hwtt_wait_until(hwtt_threads_named("hwt-lc-lazy") == 1, 5000));
    assert_int_equal(hwt_timer_start(t), 0); /* already started */
    hwtt_sleep_ms(30);
    assert_int_equal(hwtt_threads_named("hwt-lc-lazy"), 1); /* still one worker */

    hwt_timeout **list = NULL;
    size_t n = 99;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 0);
    hwt_timeouts_release(list, n);
    assert_true(hwtt_wait_until(hwtt_threads_named("hwt-lc-lazy") == 0, 5000));
    hwt_timer_destroy(t);
}

static void test_first_timeout_starts_worker(void **state)
{
    (void)state;
    static counters c;
    memset(&c, 0, sizeof c);
    hwt_timer *t = named_timer("hwt-lc-first", 10);
    hwtt_sleep_ms(20);
    assert_int_equal(hwtt_threads_named("hwt-lc-first"), 0);
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&c.ran) == 1, 5000));
    assert_int_equal(hwtt_threads_named("hwt-lc-first"), 1);
    assert_int_equal(hwt_timer_start(t), 0);
    hwt_timer_destroy(t);
    assert_true(hwtt_wait_until(hwtt_threads_named("hwt-lc-first") == 0, 5000));
}

typedef struct starter {
    hwt_timer *t;
    pthread_barrier_t *bar;
    int rc;
} starter;

static void *start_thread(void *arg)
{
    starter *s = arg;
    pthread_barrier_wait(s->bar);
    s->rc = hwt_timer_start(s->t);
    return NULL;
}

static void test_concurrent_start_one_worker(void **state)
{
    (void)state;
    for (int round = 0; round < 5; round++) {
        hwt_timer *t = named_timer("hwt-lc-cstart", 10);
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, 4);
        starter st[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            st[i] = (starter){.t = t, .bar = &bar, .rc = -1};
            assert_int_equal(pthread_create(&th[i], NULL, start_thread, &st[i]), 0);
        }
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        bool some = hwtt_wait_until(hwtt_threads_named("hwt-lc-cstart") >= 1, 5000);
        hwtt_sleep_ms(20); /* let a second worker, if any, name itself */
        int named = hwtt_threads_named("hwt-lc-cstart");
        if (named != 1)
            /* not destroyed: stop would join one worker and wait forever for
             * the other to notice */
            fail_msg("round %d: %d worker threads for one timer after 4 concurrent "
                     "hwt_timer_start calls (expected 1)",
                     round, named);
        hwt_timer_destroy(t);
        for (int i = 0; i < 4; i++)
            assert_int_equal(st[i].rc, 0);
        assert_true(some);
        assert_true(hwtt_wait_until(hwtt_threads_named("hwt-lc-cstart") == 0, 5000));
    }
}

/* pthread_create fails (an impossible stack size): HWT_ESYS, logged, nothing
 * scheduled, the timer stays unstarted; stop and destroy work. */
static void test_start_failure_esys(void **state)
{
    (void)state;
    static hwtt_log log;
    static counters c;
    memset(&log, 0, sizeof log);
    memset(&c, 0, sizeof c);
    pthread_attr_t attr;
    assert_int_equal(pthread_attr_init(&attr), 0);
    if (pthread_attr_setstacksize(&attr, (size_t)1 << 40) != 0) {
        pthread_attr_destroy(&attr);
        print_message("skipping: a 1 TiB stack size is not accepted by pthread_attr\n");
        skip();
    }
    hwt_options o;
    hwt_options_init(&o);
    o.thread_attr = &attr;
    o.thread_name = "hwt-lc-esys";
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *t = hwtt_timer_opts(&o);

    sigset_t before, after;
    pthread_sigmask(SIG_BLOCK, NULL, &before);
    hwt_timeout *h = NULL;
    int rc = hwt_new_timeout(t, cnt_run, &c, 1, HWT_MILLISECONDS, &h);
    pthread_sigmask(SIG_BLOCK, NULL, &after);
    if (rc == 0) {
        /* this system could create a thread with a 1 TiB stack */
        hwt_timeout_release(h);
        hwt_timer_destroy(t);
        pthread_attr_destroy(&attr);
        print_message("skipping: pthread_create accepted a 1 TiB stack here\n");
        skip();
    }
    assert_int_equal(rc, HWT_ESYS);
    assert_null(h);
    assert_int_equal(hwt_pending_timeouts(t), 0);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    assert_int_equal(s.scheduled, 0);
    assert_int_equal(s.pending, 0);
    int errors1 = atomic_load(&log.count[HWT_LOG_ERROR]);
    assert_true(errors1 >= 1);
    assert_true(sigsets_equal(&before, &after)); /* the caller's mask is restored */

    /* may be retried: fails the same way, logged again, still nothing pending */
    assert_int_equal(hwt_timer_start(t), HWT_ESYS);
    assert_true(atomic_load(&log.count[HWT_LOG_ERROR]) > errors1);
    assert_int_equal(hwt_new_timeout_task(t, &cnt_task, &c, 1, HWT_MILLISECONDS, NULL), HWT_ESYS);
    assert_int_equal(hwt_pending_timeouts(t), 0);
    assert_int_equal(hwtt_threads_named("hwt-lc-esys"), 0);

    hwt_timeout **list = NULL;
    size_t n = 99;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 0);
    hwt_timeouts_release(list, n);
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 1, HWT_MILLISECONDS, NULL), HWT_ESTOPPED);
    assert_int_equal(hwt_timer_start(t), HWT_ESTOPPED);
    hwt_timer_destroy(t);
    pthread_attr_destroy(&attr);
    assert_int_equal(atomic_load(&c.ran), 0);
    assert_int_equal(atomic_load(&c.cancelled), 0);
}

/* ----------------------------------------------------------------- stop */

static void test_stop_never_started(void **state)
{
    (void)state;
    static counters c;
    memset(&c, 0, sizeof c);
    hwt_timer *t = named_timer("hwt-lc-never", 10);
    hwt_timeout **list = NULL;
    size_t n = 99;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 0);
    hwt_timeouts_release(list, n);

    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 1, HWT_MILLISECONDS, &h), HWT_ESTOPPED);
    assert_null(h);
    assert_int_equal(hwt_new_timeout_task(t, &cnt_task, &c, 1, HWT_MILLISECONDS, &h), HWT_ESTOPPED);
    assert_null(h);
    assert_int_equal(hwt_timer_start(t), HWT_ESTOPPED);
    assert_int_equal(hwt_pending_timeouts(t), 0);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    assert_int_equal(s.scheduled, 0);

    /* and again */
    list = (hwt_timeout **)&c;
    n = 99;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_null(list);
    assert_int_equal(n, 0);
    assert_int_equal(hwt_stop(t, NULL, NULL), 0);
    assert_int_equal(hwtt_threads_named("hwt-lc-never"), 0);
    hwt_timer_destroy(t);
    assert_int_equal(atomic_load(&c.ran), 0);
    assert_int_equal(atomic_load(&c.cancelled), 0);
}

static void test_second_stop_empty(void **state)
{
    (void)state;
    static counters c;
    memset(&c, 0, sizeof c);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 64);
    for (int i = 0; i < 5; i++)
        assert_int_equal(hwt_new_timeout_task(t, &cnt_task, &c, FAR_HOURS, HWT_HOURS, NULL), 0);
    assert_int_equal(hwt_pending_timeouts(t), 5);

    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 5);
    assert_non_null(list);
    for (size_t i = 0; i < n; i++) {
        assert_true(hwt_timeout_is_cancelled(list[i]));
        assert_false(hwt_timeout_is_expired(list[i]));
    }
    hwt_timeouts_release(list, n);
    assert_int_equal(hwt_pending_timeouts(t), 0);

    list = (hwt_timeout **)&c;
    n = 42;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_null(list);
    assert_int_equal(n, 0);
    assert_int_equal(hwt_stop(t, NULL, NULL), 0);
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 0, HWT_MILLISECONDS, NULL), HWT_ESTOPPED);
    assert_int_equal(hwt_timer_start(t), HWT_ESTOPPED);
    assert_int_equal(hwt_pending_timeouts(t), 0);
    hwt_timer_destroy(t);
    /* handed back: their cancelled callbacks are the caller's, never called */
    assert_int_equal(atomic_load(&c.cancelled), 0);
    assert_int_equal(atomic_load(&c.ran), 0);
}

static void test_stop_one_null_out_pointer(void **state)
{
    (void)state;
    static counters c;
    memset(&c, 0, sizeof c);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 64);
    assert_int_equal(hwt_new_timeout_task(t, &cnt_task, &c, FAR_HOURS, HWT_HOURS, NULL), 0);
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(t, &list, NULL), HWT_EINVAL);
    assert_int_equal(hwt_stop(t, NULL, &n), HWT_EINVAL);
    /* not stopped */
    assert_int_equal(hwt_pending_timeouts(t), 1);
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&c.ran) == 1, 5000));
    assert_int_equal(hwt_pending_timeouts(t), 1);
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 1);
    hwt_timeouts_release(list, n);
    hwt_timer_destroy(t);
    assert_int_equal(atomic_load(&c.cancelled), 0);
}

static atomic_int from_task_rc1, from_task_rc2, from_task_done;

static void stop_from_task(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    hwt_timer *t = hwt_timeout_timer(timeout);
    hwt_timeout **list = NULL;
    size_t n = 0;
    atomic_store(&from_task_rc1, hwt_stop(t, &list, &n));
    atomic_store(&from_task_rc2, hwt_stop(t, NULL, NULL));
    atomic_store(&from_task_done, 1);
}

static void test_stop_from_task_edeadlk(void **state)
{
    (void)state;
    static counters c;
    memset(&c, 0, sizeof c);
    atomic_store(&from_task_rc1, 12345);
    atomic_store(&from_task_rc2, 12345);
    atomic_store(&from_task_done, 0);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 64);
    assert_int_equal(hwt_new_timeout_task(t, &cnt_task, &c, FAR_HOURS, HWT_HOURS, NULL), 0);
    assert_int_equal(hwt_new_timeout(t, stop_from_task, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&from_task_done) == 1, 5000));
    assert_int_equal(atomic_load(&from_task_rc1), HWT_EDEADLK);
    assert_int_equal(atomic_load(&from_task_rc2), HWT_EDEADLK);
    /* still running */
    assert_int_equal(hwt_pending_timeouts(t), 1);
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&c.ran) == 1, 5000));
    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 1);
    hwt_timeouts_release(list, n);
    hwt_timer_destroy(t);
}

/* Two workers stopping each other's timer from a task: each would wait
 * for the other's worker, which waits for it. The stop that closes the
 * cycle gets HWT_EDEADLK, as a stop of the worker's own timer does; the
 * other then completes. Each task waits until both run, so that both
 * stops are in flight together. */
struct mutual {
    hwt_timer *timer[2];
    atomic_int running;
    atomic_int rc[2];
};
static struct mutual mutual;

static void stop_the_other(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    int me = (int)(intptr_t)arg;
    atomic_fetch_add(&mutual.running, 1);
    while (atomic_load(&mutual.running) < 2)
        hwtt_sleep_us(100);
    atomic_store(&mutual.rc[me], hwt_stop(mutual.timer[1 - me], NULL, NULL));
}

static void test_workers_stopping_each_other_do_not_hang(void **state)
{
    (void)state;
    memset(&mutual, 0, sizeof mutual);
    for (int i = 0; i < 2; i++) {
        atomic_store(&mutual.rc[i], 12345);
        mutual.timer[i] = hwtt_timer(1, HWT_MILLISECONDS, 64);
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(hwt_new_timeout(mutual.timer[i], stop_the_other, (void *)(intptr_t)i, 0,
                                         HWT_MILLISECONDS, NULL),
                         0);
    bool both_returned = hwtt_wait_until(
        atomic_load(&mutual.rc[0]) != 12345 && atomic_load(&mutual.rc[1]) != 12345,
        hwtt_slack_ms(5000));
    if (!both_returned)
        fail_msg("two workers stopping each other hang");
    int rc0 = atomic_load(&mutual.rc[0]), rc1 = atomic_load(&mutual.rc[1]);
    assert_true((rc0 == HWT_EDEADLK && rc1 == 0) || (rc0 == 0 && rc1 == HWT_EDEADLK));
    for (int i = 0; i < 2; i++)
        hwt_timer_destroy(mutual.timer[i]);
}

static atomic_int destroy_from_task_done;

static void destroy_from_task(hwt_timeout *timeout, void *arg)
{
    (void)arg;
    hwt_timer_destroy(hwt_timeout_timer(timeout));
    atomic_store(&destroy_from_task_done, 1);
}

static void test_destroy_from_task_logs_and_does_nothing(void **state)
{
    (void)state;
    static hwtt_log log;
    static counters c;
    memset(&log, 0, sizeof log);
    memset(&c, 0, sizeof c);
    atomic_store(&destroy_from_task_done, 0);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *t = hwtt_timer_opts(&o);
    assert_int_equal(hwt_new_timeout_task(t, &cnt_task, &c, FAR_HOURS, HWT_HOURS, NULL), 0);
    assert_int_equal(hwt_new_timeout(t, destroy_from_task, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&destroy_from_task_done) == 1, 5000));
    assert_int_equal(atomic_load(&log.count[HWT_LOG_ERROR]), 1);
    /* nothing happened: still running, the far timeout still pending */
    assert_int_equal(atomic_load(&c.cancelled), 0);
    assert_int_equal(hwt_pending_timeouts(t), 1);
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&c.ran) == 1, 5000));
    hwt_timer_destroy(t);
    /* the real destroy drops the far one */
    assert_int_equal(atomic_load(&c.cancelled), 1);
    assert_int_equal(atomic_load(&log.count[HWT_LOG_ERROR]), 1);
}

/* A log callback that destroys its timer on an error ("fatal: shut it
 * down"), counting how deeply it is nested; past a few levels it stops
 * calling, so that a library that calls it again and again fails the test
 * instead of overflowing the worker's stack. */
static struct {
    hwt_timer *timer;
    atomic_int errors, depth, max_depth;
} destroying_log;

static void destroy_on_error(void *ctx, hwt_log_level level, const char *message)
{
    (void)ctx;
    (void)message;
    if (level != HWT_LOG_ERROR)
        return;
    atomic_fetch_add(&destroying_log.errors, 1);
    int depth = atomic_fetch_add(&destroying_log.depth, 1) + 1;
    if (depth > atomic_load(&destroying_log.max_depth))
        atomic_store(&destroying_log.max_depth, depth);
    if (depth <= 3)
        hwt_timer_destroy(destroying_log.timer);
    atomic_fetch_sub(&destroying_log.depth, 1);
}

static void test_a_log_callback_that_destroys_on_error_is_called_once(void **state)
{
    (void)state;
    memset(&destroying_log, 0, sizeof destroying_log);
    atomic_store(&destroy_from_task_done, 0);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.log = destroy_on_error;
    destroying_log.timer = hwtt_timer_opts(&o);
    /* The task's destroy logs an error on the worker; the callback's destroy
     * logs it again there (it goes to stderr, not to the callback). */
    assert_int_equal(
        hwt_new_timeout(destroying_log.timer, destroy_from_task, NULL, 0, HWT_MILLISECONDS, NULL),
        0);
    assert_true(hwtt_wait_until(atomic_load(&destroy_from_task_done) == 1, 5000));
    assert_int_equal(atomic_load(&destroying_log.max_depth), 1);
    assert_int_equal(atomic_load(&destroying_log.errors), 1);
    hwt_timer_destroy(destroying_log.timer);
}

/* A timer created inside another timer's log callback still warns through
 * its own: X's callback, called for X's raised tick at create, creates Y
 * with a tick below the mode's minimum too. */
static struct {
    hwt_timer *y;
    atomic_int x_calls, y_warnings;
} nested_log;

static void y_counts_warnings(void *ctx, hwt_log_level level, const char *message)
{
    (void)ctx;
    (void)message;
    if (level == HWT_LOG_WARN)
        atomic_fetch_add(&nested_log.y_warnings, 1);
}

static void raised_tick_options(hwt_options *o, void (*log)(void *, hwt_log_level, const char *))
{
    hwt_options_init(o);
    o->tick_duration = 1;
    o->tick_unit = HWT_MICROSECONDS;
    o->sleep_mode = HWT_SLEEP_MILLIS; /* raised to 1 ms, with a warning */
    o->log = log;
}

static void x_creates_y(void *ctx, hwt_log_level level, const char *message)
{
    (void)ctx;
    (void)level;
    (void)message;
    if (atomic_fetch_add(&nested_log.x_calls, 1) != 0)
        return;
    hwt_options o;
    raised_tick_options(&o, y_counts_warnings);
    if (hwt_timer_create(&nested_log.y, &o) != 0)
        nested_log.y = NULL;
}

static void test_a_timer_created_in_a_log_callback_logs_through_its_own(void **state)
{
    (void)state;
    memset(&nested_log, 0, sizeof nested_log);
    hwt_options o;
    raised_tick_options(&o, x_creates_y);
    hwt_timer *x = hwtt_timer_opts(&o);
    assert_non_null(nested_log.y);
    assert_int_equal(atomic_load(&nested_log.x_calls), 1);
    assert_int_equal(atomic_load(&nested_log.y_warnings), 1);
    hwt_timer_destroy(nested_log.y);
    hwt_timer_destroy(x);
}

typedef struct stopper {
    hwt_timer *t;
    pthread_barrier_t *bar;
    int rc;
    hwt_timeout **list;
    size_t n;
} stopper;

static void *stop_thread(void *arg)
{
    stopper *s = arg;
    pthread_barrier_wait(s->bar);
    s->rc = hwt_stop(s->t, &s->list, &s->n);
    return NULL;
}

static void test_concurrent_stops(void **state)
{
    (void)state;
    static counters c;
    enum { N = 200, ROUNDS = 10 };
    for (int round = 0; round < ROUNDS; round++) {
        memset(&c, 0, sizeof c);
        hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 64);
        for (int i = 0; i < N; i++)
            assert_int_equal(hwt_new_timeout_task(t, &cnt_task, &c, FAR_HOURS, HWT_HOURS, NULL), 0);
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, 2);
        stopper st[2];
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            st[i] = (stopper){.t = t, .bar = &bar, .rc = -1, .list = (hwt_timeout **)&c, .n = 9999};
            assert_int_equal(pthread_create(&th[i], NULL, stop_thread, &st[i]), 0);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        int64_t pending = hwt_pending_timeouts(t);
        hwt_timer_destroy(t);

        assert_int_equal(st[0].rc, 0);
        assert_int_equal(st[1].rc, 0);
        assert_int_equal(st[0].n + st[1].n, N);
        int full = st[0].n == N ? 0 : 1;
        assert_int_equal(st[full].n, N);
        assert_int_equal(st[1 - full].n, 0);
        assert_null(st[1 - full].list);
        assert_non_null(st[full].list);
        for (size_t i = 0; i < st[full].n; i++)
            assert_true(hwt_timeout_is_cancelled(st[full].list[i]));
        hwt_timeouts_release(st[full].list, st[full].n);
        assert_int_equal(pending, 0);
        assert_int_equal(atomic_load(&c.cancelled), 0);
        assert_int_equal(atomic_load(&c.ran), 0);
    }
}

/* Destroy (and stop(NULL, NULL)) drop pending timeouts and call their
 * cancelled callbacks, on the worker, before returning. */
static void drop_pending(bool use_destroy)
{
    static counters c;
    static probe p;
    enum { N = 50, H = 5 };
    memset(&c, 0, sizeof c);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 64);
    probe_worker(t, &p);
    c.worker = p.self;
    atomic_store(&c.worker_known, true);
    hwt_timeout *h[H];
    for (int i = 0; i < N; i++)
        assert_int_equal(hwt_new_timeout_task(t, &cnt_task, &c, i % 2 ? FAR_HOURS : 1,
                                              i % 2 ? HWT_HOURS : HWT_DAYS, i < H ? &h[i] : NULL),
                         0);
    assert_int_equal(hwt_pending_timeouts(t), N);
    if (use_destroy) {
        hwt_timer_destroy(t);
    } else {
        assert_int_equal(hwt_stop(t, NULL, NULL), 0);
        assert_int_equal(hwt_pending_timeouts(t), 0);
        hwt_stats s;
        hwt_timer_stats(t, &s);
        assert_int_equal(s.cancelled, N);
        assert_int_equal(s.scheduled, N + 1);
        assert_int_equal(s.pending, 0);
    }
    /* every callback of the stop has run when it returns */
    assert_int_equal(atomic_load(&c.cancelled), N);
    assert_int_equal(atomic_load(&c.ran), 0);
    assert_int_equal(atomic_load(&c.cancelled_off_worker), 0);
    for (int i = 0; i < H; i++) {
        assert_true(hwt_timeout_is_cancelled(h[i]));
        assert_false(hwt_timeout_is_expired(h[i]));
        assert_false(hwt_timeout_cancel(h[i]));
    }
    if (!use_destroy)
        hwt_timer_destroy(t);
    for (int i = 0; i < H; i++)
        hwt_timeout_release(h[i]);
    assert_int_equal(atomic_load(&c.cancelled), N);
}

static void test_destroy_drops_pending(void **state)
{
    (void)state;
    drop_pending(true);
}

static void test_stop_null_null_drops_pending(void **state)
{
    (void)state;
    drop_pending(false);
}

/* The stop takes what the wheel holds in one of two ways (worker.c,
 * drain_wheel): by walking the buckets when the wheel holds little of the
 * timer's pool, or by scanning the pool when it holds much of it. Either
 * way it hands back exactly the pending timeouts: not the cancelled ones,
 * not the expired ones, none twice. `expired_first` timeouts run before, so
 * the pool is big and the wheel nearly empty (the walk); without them the
 * wheel holds most of the pool (the scan). */
static void stop_hands_back_exactly_the_pending(int expired_first)
{
    enum { FAR = 3000 };
    static counters c;
    memset(&c, 0, sizeof c);
    hwt_timer *t = named_timer("hwt-lc-drain", 1);
    for (int i = 0; i < expired_first; i++)
        assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&c.ran) == expired_first, 10000));

    static hwt_timeout *far[FAR];
    for (int i = 0; i < FAR; i++)
        assert_int_equal(hwt_new_timeout(t, cnt_run, &c, FAR_HOURS, HWT_HOURS, &far[i]), 0);
    for (int i = 0; i < FAR; i += 3)
        assert_true(hwt_timeout_cancel(far[i]));
    /* queued after the far ones by the same thread: once it ran, they are all
     * in the wheel */
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&c.ran) == expired_first + 1, 10000));

    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, FAR - (FAR + 2) / 3);
    static char seen[FAR];
    memset(seen, 0, sizeof seen);
    for (size_t k = 0; k < n; k++) {
        int i = 0;
        while (i < FAR && far[i] != list[k])
            i++;
        assert_true(i < FAR);      /* one of ours */
        assert_true(i % 3 != 0);   /* not a cancelled one */
        assert_int_equal(seen[i], 0); /* not twice */
        seen[i] = 1;
        assert_true(hwt_timeout_is_cancelled(list[k]));
    }
    assert_int_equal(hwt_pending_timeouts(t), 0);
    hwt_timeouts_release(list, n);
    for (int i = 0; i < FAR; i++)
        hwt_timeout_release(far[i]);
    hwt_timer_destroy(t);
    assert_int_equal(atomic_load(&c.ran), expired_first + 1);
}

static void test_stop_walks_a_sparse_wheel(void **state)
{
    (void)state;
    stop_hands_back_exactly_the_pending(60000);
}

static void test_stop_scans_a_full_wheel(void **state)
{
    (void)state;
    stop_hands_back_exactly_the_pending(0);
}

/* --------------------------------------------------------- the worker */

static void check_worker_name(const char *given, const char *want)
{
    static probe p;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.thread_name = given;
    hwt_timer *t = hwtt_timer_opts(&o);
    probe_worker(t, &p);
    char comm[64] = "";
    int rc = hwtt_read_task_file(p.tid, "comm", NULL, comm, sizeof comm);
    hwt_timer_destroy(t);
    assert_int_equal(rc, 0);
    assert_string_equal(comm, want);
    assert_int_equal(p.name_rc, 0);
    assert_string_equal(p.name, want);
    assert_int_not_equal(p.tid, gettid());
}

static void test_worker_name(void **state)
{
    (void)state;
    check_worker_name("hwt-lc-name", "hwt-lc-name");
    check_worker_name(NULL, "hwtimer");
    check_worker_name("hwt-lc-a-very-long-worker-name", "hwt-lc-a-very-l"); /* 15 bytes */
    check_worker_name("exactly15chars!", "exactly15chars!");
}

static void test_worker_name_is_copied(void **state)
{
    (void)state;
    static probe p;
    char name[32];
    snprintf(name, sizeof name, "hwt-lc-copied");
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.thread_name = name;
    hwt_timer *t = hwtt_timer_opts(&o);
    snprintf(name, sizeof name, "overwritten!"); /* before the worker starts */
    probe_worker(t, &p);
    hwt_timer_destroy(t);
    assert_string_equal(p.name, "hwt-lc-copied");
}

/* The signals a thread can block here: every one natively; under an
 * emulator, those that blocking all of them on this thread does block.
 * qemu-user maps the target's real-time signals onto the host's, which
 * glibc already holds two of, so the top ones have no host signal: they
 * cannot be blocked (nor raised) in the emulated program. */
static void blockable_here(sigset_t *set)
{
    sigfillset(set);
    if (!hwtt_under_emulator())
        return;
    sigset_t all, old;
    sigfillset(&all);
    assert_int_equal(pthread_sigmask(SIG_BLOCK, &all, &old), 0);
    assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, set), 0);
}

/* Starts a timer made with `attr` (NULL: none) and checks that its worker
 * blocks every signal it can, as it sees its mask and as the kernel does. */
static void check_worker_blocks_all_signals(const pthread_attr_t *attr)
{
    static probe p;
    hwt_options o;
    hwt_options_init(&o);
    o.thread_name = "hwt-lc-sig";
    o.tick_duration = 10;
    o.thread_attr = attr;
    hwt_timer *t = hwtt_timer_opts(&o);
    sigset_t before, after;
    pthread_sigmask(SIG_BLOCK, NULL, &before);
    assert_int_equal(hwt_timer_start(t), 0);
    pthread_sigmask(SIG_BLOCK, NULL, &after);
    probe_worker(t, &p);
    char sigblk[64] = "";
    int rc = hwtt_read_task_file(p.tid, "status", "SigBlk:", sigblk, sizeof sigblk);
    hwt_timer_destroy(t);

    /* starting the worker does not change the caller's mask */
    assert_true(sigsets_equal(&before, &after));
    assert_false(sigismember(&after, SIGINT)); /* so the check below means something */

    /* as the worker sees its own mask */
    assert_int_equal(p.mask_rc, 0);
    sigset_t blockable;
    blockable_here(&blockable);
    for (int s = 1; s <= SIGRTMAX; s++) {
        if (s == SIGKILL || s == SIGSTOP || (s > 31 && s < SIGRTMIN))
            continue; /* cannot be blocked, or reserved by glibc */
        if (s >= SIGRTMIN && !sigismember(&blockable, s)) {
            print_message("  signal %d cannot be blocked under the emulator\n", s);
            continue; /* reserved by the emulator (only under one: see blockable_here) */
        }
        if (sigismember(&p.mask, s) != 1)
            fail_msg("signal %d (%s) is not blocked on the worker", s, strsignal(s));
    }

    /* as the kernel sees it (not SIGRTMAX: valgrind keeps that one for itself) */
    assert_int_equal(rc, 0);
    unsigned long long blk = strtoull(sigblk, NULL, 16);
    const int must[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1,  SIGUSR2,     SIGPIPE,
                        SIGALRM, SIGTERM, SIGCHLD, SIGRTMIN, SIGRTMIN + 1};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        /* Under an emulator the kernel sees the emulator's host thread, and
         * the emulator numbers the target's real-time signals its own way. */
        if (must[i] >= SIGRTMIN && hwtt_under_emulator())
            continue;
        if (!(blk & (1ull << (must[i] - 1))))
            fail_msg("SigBlk %s: signal %d not blocked", sigblk, must[i]);
    }
}

static void test_worker_blocks_all_signals(void **state)
{
    (void)state;
    check_worker_blocks_all_signals(NULL);
}

/* glibc gives a thread the attr's signal mask, if it has one, instead of
 * its creator's: the worker must block them all the same. */
static void test_worker_blocks_all_signals_whatever_the_attr_sets(void **state)
{
    (void)state;
    pthread_attr_t attr;
    assert_int_equal(pthread_attr_init(&attr), 0);
    sigset_t none;
    sigemptyset(&none);
    assert_int_equal(pthread_attr_setsigmask_np(&attr, &none), 0);
    check_worker_blocks_all_signals(&attr);
    pthread_attr_destroy(&attr);
}

static void test_thread_attr_honoured(void **state)
{
    (void)state;
    static probe p;
    /* Default stacks are 8 MiB, and glibc reuses a cached stack up to 4x the
     * size asked for: ask for more than the default, so the size seen can only
     * come from this attr. */
    const size_t want = (size_t)12 * 1024 * 1024 + 64 * 1024;
    pthread_attr_t attr;
    assert_int_equal(pthread_attr_init(&attr), 0);
    assert_int_equal(pthread_attr_setstacksize(&attr, want), 0);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.thread_attr = &attr;
    hwt_timer *t = hwtt_timer_opts(&o);
    probe_worker(t, &p);
    pthread_attr_destroy(&attr); /* only needed until the worker has started */
    static counters c;
    memset(&c, 0, sizeof c);
    assert_int_equal(hwt_new_timeout(t, cnt_run, &c, 0, HWT_MILLISECONDS, NULL), 0);
    bool ran = hwtt_wait_until(atomic_load(&c.ran) == 1, 5000);
    hwt_timer_destroy(t);
    assert_true(ran);
    assert_int_equal(p.attr_rc, 0);
    if (p.stacksize < want || p.stacksize > want + 1024 * 1024)
        fail_msg("worker stack size %zu, asked for %zu", p.stacksize, want);
}

int main(void)
{
    hwtt_watchdog(150);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_start),
        cmocka_unit_test(test_first_timeout_starts_worker),
        cmocka_unit_test(test_concurrent_start_one_worker),
        cmocka_unit_test(test_start_failure_esys),
        cmocka_unit_test(test_stop_never_started),
        cmocka_unit_test(test_second_stop_empty),
        cmocka_unit_test(test_stop_one_null_out_pointer),
        cmocka_unit_test(test_stop_from_task_edeadlk),
        cmocka_unit_test(test_workers_stopping_each_other_do_not_hang),
        cmocka_unit_test(test_destroy_from_task_logs_and_does_nothing),
        cmocka_unit_test(test_a_log_callback_that_destroys_on_error_is_called_once),
        cmocka_unit_test(test_a_timer_created_in_a_log_callback_logs_through_its_own),
        cmocka_unit_test(test_concurrent_stops),
        cmocka_unit_test(test_destroy_drops_pending),
        cmocka_unit_test(test_stop_null_null_drops_pending),
        cmocka_unit_test(test_stop_walks_a_sparse_wheel),
        cmocka_unit_test(test_stop_scans_a_full_wheel),
        cmocka_unit_test(test_worker_name),
        cmocka_unit_test(test_worker_name_is_copied),
        cmocka_unit_test(test_worker_blocks_all_signals),
        cmocka_unit_test(test_worker_blocks_all_signals_whatever_the_attr_sets),
        cmocka_unit_test(test_thread_attr_honoured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

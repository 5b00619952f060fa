/*
 * test_stress.c - SPEC §2 under load: every timeout ends exactly one way.
 *
 * Each run: 4 producer threads schedule timeouts (random delays 0-20 ms in
 * ns/us/ms units; half through hwt_new_timeout_task with a cancelled
 * callback), 2 canceller threads cancel random live handles, and the test
 * thread ends the timer mid-flight while the producers are still going.
 * Every timeout's arg is its own slot of atomic counters; after the run the
 * test thread checks, slot by slot:
 *
 *   - a successful schedule ended exactly once: its run was called, or it was
 *     cancelled (a hwt_timeout_cancel() that returned true, or dropped by the
 *     stop) with its cancelled callback called once if it has one, or it was
 *     handed back by hwt_stop();
 *   - a schedule that returned HWT_ESTOPPED left no trace (no handle, no
 *     callback, nothing handed back);
 *   - cancel() == true never ran; its cancelled callback ran once;
 *   - every handle was released exactly once (by a canceller that took it,
 *     or by the test thread at the end - after destroy for half of them);
 *   - run and cancelled callbacks ran on the right thread (worker/executor);
 *   - no callback ran after hwt_stop()/hwt_timer_destroy() returned, except
 *     executor runs of timeouts the worker handed over before;
 *   - pending 0 right after the stop; stats: scheduled == successful
 *     schedules, expired == runs, cancelled == cancel-true + handed back +
 *     dropped.
 *
 * Variants: stop with a list; hwt_stop(NULL, NULL); hwt_timer_destroy
 * instead of stop; an executor thread (with a list, and with destroy); tasks
 * that schedule and cancel other timeouts.
 *
 * Scale: HWT_STRESS_ROUNDS (rounds per variant, default 5; 1 under
 * valgrind or HWT_TEST_SLOWDOWN >= 20) and HWT_STRESS_PER_PRODUCER (schedule
 * calls per producer per round, default 2500; 1000 under valgrind) make longer runs:
 *   HWT_STRESS_ROUNDS=50 HWT_STRESS_PER_PRODUCER=20000 build/tests/test_stress
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRODUCERS 4
#define CANCELLERS 2
#define MAX_PER_PRODUCER 200000
#define SLOT_UNTRIED 1 /* rc before the scheduling call returned */

enum { FINAL_NONE, FINAL_EXPIRED, FINAL_CANCELLED, FINAL_BOTH, FINAL_NEITHER };
enum { ROLE_OTHER, ROLE_PRODUCER, ROLE_CANCELLER, ROLE_MAIN, ROLE_EXECUTOR };

typedef struct slot {
    atomic_int rc; /* of the scheduling call; SLOT_UNTRIED before */
    atomic_int ran;
    atomic_int cb; /* cancelled callback calls */
    atomic_int handed;
    atomic_int cancel_true;
    atomic_int released;
    atomic_int final_state; /* FINAL_*: the handle's state when it was released */
    atomic_int bad_thread;  /* a callback ran on a thread it must not */
    atomic_int bad_view;    /* a callback saw the wrong state/arg through its handle */
} slot;

/* Slot classes by index (children of the nested variant follow the same rule):
 *   i % 2 == 0          with a cancelled callback (hwt_new_timeout_task)
 *   i % 8 == 0          no handle kept (out-pointer NULL)
 *   (i / 2) % 4 == 1    "take" slot: a canceller takes the handle with an
 *                       exchange, cancels and releases it; never touched otherwise
 *   otherwise           "shared": cancellers and tasks cancel through a plain
 *                       load; released by the test thread after the run */
static bool slot_has_cb(int i)
{
    return i % 2 == 0;
}
static bool slot_keeps_handle(int i)
{
    return i % 8 != 0;
}
static bool slot_is_take(int i)
{
    return (i / 2) % 4 == 1;
}

typedef enum { END_STOP_LIST, END_STOP_DROP, END_DESTROY } end_mode;

typedef struct variant {
    const char *name;
    end_mode end;
    bool executor;
    bool nested; /* tasks schedule and cancel other timeouts */
} variant;

/* ---------------------------------------------------------------- state */

static struct run {
    const variant *v;
    hwt_timer *timer;
    int per_producer;
    int base; /* first child slot */
    int children_max;
    slot *slots;
    _Atomic(hwt_timeout *) *handles;
    atomic_int progress[PRODUCERS]; /* schedule calls returned, per producer */
    atomic_int child_next;
    atomic_bool stop_begun, stop_done, producers_done, executor_started;
    atomic_int producer_wait_timeouts;
    atomic_long cancel_calls, cancel_trues, cancel_true_after_stop, take_releases;
    atomic_long child_calls, task_cancel_calls;
    atomic_int unexpected_rc, out_written_on_error;
    uint64_t seed;
} R;

static _Thread_local int role;
static _Thread_local uint64_t rng_state;

static uint64_t rnd(void)
{
    if (rng_state == 0)
        rng_state = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)&rng_state;
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int env_int(const char *name, int dflt, int lo, int hi)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return dflt;
    long v = strtol(s, NULL, 10);
    return v < lo ? lo : v > hi ? hi : (int)v;
}

/* ------------------------------------------------------------ executor */

static struct executor {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hwt_timeout **items;
    size_t head, tail, cap;
    bool quit;
    pthread_t th;
    atomic_long handed_over, run_calls;
} X;

static void exec_submit(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    pthread_mutex_lock(&X.mu);
    if (X.tail == X.cap && X.head > 0) { /* compact, or grow */
        memmove(X.items, X.items + X.head, (X.tail - X.head) * sizeof *X.items);
        X.tail -= X.head;
        X.head = 0;
    }
    if (X.tail == X.cap) {
        X.cap = X.cap ? 2 * X.cap : 1024;
        X.items = realloc(X.items, X.cap * sizeof *X.items);
        if (X.items == NULL)
            abort();
    }
    X.items[X.tail++] = timeout;
    pthread_cond_signal(&X.cv);
    pthread_mutex_unlock(&X.mu);
    atomic_fetch_add(&X.handed_over, 1);
}

static void *exec_main(void *arg)
{
    (void)arg;
    role = ROLE_EXECUTOR;
    for (;;) {
        pthread_mutex_lock(&X.mu);
        while (!X.quit && X.head == X.tail)
            pthread_cond_wait(&X.cv, &X.mu);
        if (X.head == X.tail) { /* quit and drained */
            pthread_mutex_unlock(&X.mu);
            return NULL;
        }
        hwt_timeout *t = X.items[X.head++];
        pthread_mutex_unlock(&X.mu);
        hwt_timeout_run(t);
        atomic_fetch_add(&X.run_calls, 1);
        if (rnd() % 64 == 0)
            hwtt_sleep_us(100); /* let a backlog build up now and then */
    }
}

static void exec_start(void)
{
    pthread_mutex_init(&X.mu, NULL);
    pthread_cond_init(&X.cv, NULL);
    X.items = NULL;
    X.head = X.tail = X.cap = 0;
    X.quit = false;
    atomic_store(&X.handed_over, 0);
    atomic_store(&X.run_calls, 0);
    assert_int_equal(pthread_create(&X.th, NULL, exec_main, NULL), 0);
}

static void exec_finish(void)
{
    pthread_mutex_lock(&X.mu);
    X.quit = true;
    pthread_cond_broadcast(&X.cv);
    pthread_mutex_unlock(&X.mu);
    pthread_join(X.th, NULL);
    free(X.items);
    X.items = NULL;
    pthread_cond_destroy(&X.cv);
    pthread_mutex_destroy(&X.mu);
}

/* ------------------------------------------------------------ callbacks */

static int schedule_slot(int i, bool far);

static void nested_work(int i)
{
    if (i >= R.base)
        return; /* children do not spawn further */
    if (i % 3 == 0) {
        int j = atomic_fetch_add(&R.child_next, 1);
        if (j < R.base + R.children_max) {
            schedule_slot(j, false);
            atomic_fetch_add(&R.child_calls, 1);
        }
    } else if (i % 3 == 1) {
        /* cancel a random shared handle of a producer's, or of a child */
        int k;
        if (rnd() % 4 == 0 && atomic_load(&R.child_next) > R.base) {
            int n = atomic_load(&R.child_next);
            if (n > R.base + R.children_max)
                n = R.base + R.children_max;
            k = R.base + (int)(rnd() % (uint64_t)(n - R.base));
        } else {
            int p = (int)(rnd() % PRODUCERS);
            int n = atomic_load(&R.progress[p]);
            if (n == 0)
                return;
            k = p * R.per_producer + (int)(rnd() % (uint64_t)n);
        }
        if (slot_is_take(k))
            return;
        hwt_timeout *h = atomic_load(&R.handles[k]);
        atomic_fetch_add(&R.task_cancel_calls, 1);
        if (h != NULL && hwt_timeout_cancel(h)) {
            atomic_fetch_add(&R.slots[k].cancel_true, 1);
            atomic_fetch_add(&R.cancel_trues, 1);
        }
    }
}

static void on_run(hwt_timeout *timeout, void *arg)
{
    slot *s = arg;
    atomic_fetch_add(&s->ran, 1);
    int want = R.v->executor ? ROLE_EXECUTOR : ROLE_OTHER;
    if (role != want)
        atomic_fetch_add(&s->bad_thread, 1);
    if (hwt_timeout_arg(timeout) != arg || !hwt_timeout_is_expired(timeout) ||
        hwt_timeout_is_cancelled(timeout) || hwt_timeout_timer(timeout) != R.timer)
        atomic_fetch_add(&s->bad_view, 1);
    if (R.v->nested)
        nested_work((int)(s - R.slots));
}

static void on_cancelled(hwt_timeout *timeout, void *arg)
{
    slot *s = arg;
    atomic_fetch_add(&s->cb, 1);
    if (role != ROLE_OTHER && role != ROLE_MAIN) /* the worker (or a stopping thread) */
        atomic_fetch_add(&s->bad_thread, 1);
    if (hwt_timeout_arg(timeout) != arg || !hwt_timeout_is_cancelled(timeout) ||
        hwt_timeout_is_expired(timeout))
        atomic_fetch_add(&s->bad_view, 1);
}

static const hwt_task cb_task = {.run = on_run, .cancelled = on_cancelled};

/* ------------------------------------------------------------ threads */

static hwt_unit random_delay(int64_t *delay)
{
    int64_t us = (int64_t)(rnd() % 20001); /* 0 .. 20 ms */
    switch (rnd() % 3) {
    case 0: *delay = us * 1000; return HWT_NANOSECONDS;
    case 1: *delay = us; return HWT_MICROSECONDS;
    default: *delay = us / 1000; return HWT_MILLISECONDS;
    }
}

/* Schedules slot i; any thread (producers, tasks). Returns the result.
 * `far`: an hour away, so that the end of the run surely finds it pending. */
static int schedule_slot(int i, bool far)
{
    slot *s = &R.slots[i];
    int64_t delay;
    hwt_unit unit = random_delay(&delay);
    if (far) {
        delay = 1;
        unit = HWT_HOURS;
    }
    hwt_timeout *h = NULL;
    hwt_timeout **out = slot_keeps_handle(i) ? &h : NULL;
    int rc = slot_has_cb(i) ? hwt_new_timeout_task(R.timer, &cb_task, s, delay, unit, out)
                            : hwt_new_timeout(R.timer, on_run, s, delay, unit, out);
    if (rc == 0 && out != NULL)
        atomic_store(&R.handles[i], h);
    if (rc != 0 && h != NULL)
        atomic_fetch_add(&R.out_written_on_error, 1);
    if (rc != 0 && rc != HWT_ESTOPPED)
        atomic_fetch_add(&R.unexpected_rc, 1);
    atomic_store(&s->rc, rc);
    return rc;
}

static void *producer_main(void *arg)
{
    int p = (int)(intptr_t)arg;
    role = ROLE_PRODUCER;
    rng_state = R.seed * 0x2545F4914F6CDD1DULL + (uint64_t)p * 7919 + 1;
    for (int k = 0; k < R.per_producer; k++) {
        /* Keep a quarter of the work for after the stop has begun, so every
         * run races the stop and meets HWT_ESTOPPED. */
        if (k == R.per_producer * 3 / 4 &&
            !hwtt_wait_until(atomic_load(&R.stop_begun), hwtt_slack_ms(20000)))
            atomic_fetch_add(&R.producer_wait_timeouts, 1);
        /* a few far ones first and last: whatever the timing, the stop (or
         * destroy) finds pending timeouts to hand back or drop */
        schedule_slot(p * R.per_producer + k, k < 4 || k >= R.per_producer - 4);
        atomic_fetch_add(&R.progress[p], 1);
        if (k % 16 == 15)
            hwtt_sleep_us(1000); /* spread the work over many timeout lifetimes */
    }
    return NULL;
}

/* Records the final state of a handle, releases it, counts the release. */
static void release_handle(int i, hwt_timeout *h)
{
    bool exp = hwt_timeout_is_expired(h), can = hwt_timeout_is_cancelled(h);
    atomic_store(&R.slots[i].final_state, exp && can ? FINAL_BOTH
                                          : exp      ? FINAL_EXPIRED
                                          : can      ? FINAL_CANCELLED
                                                     : FINAL_NEITHER);
    hwt_timeout_release(h);
    atomic_fetch_add(&R.slots[i].released, 1);
}

static void *canceller_main(void *arg)
{
    role = ROLE_CANCELLER;
    rng_state = R.seed * 0x9E3779B97F4A7C15ULL + (uint64_t)(intptr_t)arg * 104729 + 3;
    long calls = 0;
    while (!atomic_load(&R.producers_done)) {
        int i;
        int nchild = atomic_load(&R.child_next);
        if (nchild > R.base + R.children_max)
            nchild = R.base + R.children_max;
        if (R.v->nested && nchild > R.base && rnd() % 8 == 0) {
            i = R.base + (int)(rnd() % (uint64_t)(nchild - R.base));
        } else {
            int p = (int)(rnd() % PRODUCERS);
            int n = atomic_load(&R.progress[p]);
            if (n == 0) {
                hwtt_sleep_us(50);
                continue;
            }
            i = p * R.per_producer + (int)(rnd() % (uint64_t)n);
        }
        bool after_stop = atomic_load(&R.stop_done);
        bool won = false;
        if (slot_is_take(i)) {
            hwt_timeout *h = atomic_exchange(&R.handles[i], NULL);
            if (h != NULL) {
                won = hwt_timeout_cancel(h);
                calls++;
                if (won)
                    atomic_fetch_add(&R.slots[i].cancel_true, 1);
                release_handle(i, h); /* after destroy too, in that variant */
                atomic_fetch_add(&R.take_releases, 1);
            }
        } else {
            hwt_timeout *h = atomic_load(&R.handles[i]);
            if (h != NULL) {
                won = hwt_timeout_cancel(h);
                calls++;
                if (won)
                    atomic_fetch_add(&R.slots[i].cancel_true, 1);
            }
        }
        if (won) {
            atomic_fetch_add(&R.cancel_trues, 1);
            if (after_stop)
                atomic_fetch_add(&R.cancel_true_after_stop, 1);
        }
        if (calls % 8 == 7)
            hwtt_sleep_us(1000); /* about one cancel per four schedules */
    }
    atomic_fetch_add(&R.cancel_calls, calls);
    return NULL;
}

/* ------------------------------------------------------------ one run */

typedef struct totals {
    long attempted, ok, estopped, ran, cb, handed, cancel_true, dropped, released;
    long cancel_calls, ms;
} totals;

static long sum_callbacks(void)
{
    long n = 0;
    int end = atomic_load(&R.child_next);
    if (end > R.base + R.children_max)
        end = R.base + R.children_max;
    for (int i = 0; i < end; i++)
        n += atomic_load(&R.slots[i].ran) + atomic_load(&R.slots[i].cb);
    return n;
}

static void run_once(const variant *v, uint64_t seed, totals *tot)
{
    int64_t t0 = hwtt_now_ns();
    int per = env_int("HWT_STRESS_PER_PRODUCER", hwtt_slowdown() >= 20 ? 1000 : 2500, 16,
                      MAX_PER_PRODUCER);
    memset(&R, 0, sizeof R);
    R.v = v;
    R.seed = seed;
    R.per_producer = per;
    R.base = PRODUCERS * per;
    R.children_max = v->nested ? R.base / 2 : 0;
    int nslots = R.base + R.children_max;
    R.slots = calloc((size_t)nslots, sizeof *R.slots);
    R.handles = calloc((size_t)nslots, sizeof *R.handles);
    assert_non_null(R.slots);
    assert_non_null(R.handles);
    for (int i = 0; i < nslots; i++)
        atomic_store(&R.slots[i].rc, SLOT_UNTRIED);
    atomic_store(&R.child_next, R.base);
    role = ROLE_MAIN;
    rng_state = seed + 11;

    static hwtt_log log;
    memset(&log, 0, sizeof log);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_MILLISECONDS;
    o.ticks_per_wheel = 8; /* 20 ms delays wrap the wheel: upper levels in use */
    o.thread_name = "hwt-stress";
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    if (v->executor) {
        o.executor = exec_submit;
        exec_start();
    }
    R.timer = hwtt_timer_opts(&o);

    pthread_t prod[PRODUCERS], canc[CANCELLERS];
    for (int c = 0; c < CANCELLERS; c++)
        assert_int_equal(pthread_create(&canc[c], NULL, canceller_main, (void *)(intptr_t)c), 0);
    for (int p = 0; p < PRODUCERS; p++)
        assert_int_equal(pthread_create(&prod[p], NULL, producer_main, (void *)(intptr_t)p), 0);

    /* mid-flight: half of the schedule calls made */
    bool reached_half = hwtt_wait_until(({
                                            int done = 0;
                                            for (int p = 0; p < PRODUCERS; p++)
                                                done += atomic_load(&R.progress[p]);
                                            done >= R.base / 2;
                                        }),
                                        hwtt_slack_ms(30000));
    atomic_store(&R.stop_begun, true);

    hwt_timeout **list = NULL;
    size_t n = 0;
    int stop_rc = 0;
    int64_t pending_after_stop = 0;
    long callbacks_at_stop = 0;
    if (v->end == END_DESTROY) {
        /* A timer must not be used after destroy: the producers finish first
         * (they are still scheduling while the worker runs and cancellers
         * race); the destroy then meets pending timeouts and cancels. */
        for (int p = 0; p < PRODUCERS; p++)
            pthread_join(prod[p], NULL);
        hwt_timer_destroy(R.timer);
        callbacks_at_stop = sum_callbacks();
    } else {
        stop_rc =
            v->end == END_STOP_LIST ? hwt_stop(R.timer, &list, &n) : hwt_stop(R.timer, NULL, NULL);
        pending_after_stop = hwt_pending_timeouts(R.timer);
        callbacks_at_stop = sum_callbacks();
    }
    atomic_store(&R.stop_done, true);

    /* handed back: mark, check their state, hwt_timeout_run does nothing */
    int list_not_cancelled = 0, list_expired = 0;
    for (size_t k = 0; k < n; k++) {
        slot *s = hwt_timeout_arg(list[k]);
        atomic_fetch_add(&s->handed, 1);
        list_not_cancelled += !hwt_timeout_is_cancelled(list[k]);
        list_expired += hwt_timeout_is_expired(list[k]);
        hwt_timeout_run(list[k]);
    }

    if (v->end != END_DESTROY)
        for (int p = 0; p < PRODUCERS; p++)
            pthread_join(prod[p], NULL);
    atomic_store(&R.producers_done, true);
    for (int c = 0; c < CANCELLERS; c++)
        pthread_join(canc[c], NULL);
    if (v->executor)
        exec_finish(); /* runs what the worker handed over before the stop */
    long callbacks_at_end = sum_callbacks();

    hwt_stats st;
    memset(&st, 0, sizeof st);
    int second_rc = 0;
    size_t second_n = 0;
    hwt_timeout **second_list = NULL;
    if (v->end != END_DESTROY) {
        hwt_timer_stats(R.timer, &st);
        second_rc = hwt_stop(R.timer, &second_list, &second_n);
    }

    /* release: even slots before the destroy, odd ones after */
    int end = atomic_load(&R.child_next);
    if (end > nslots)
        end = nslots;
    for (int i = 0; i < R.base; i += 2) {
        hwt_timeout *h = atomic_exchange(&R.handles[i], NULL);
        if (h != NULL)
            release_handle(i, h);
    }
    if (v->end != END_DESTROY)
        hwt_timer_destroy(R.timer);
    long callbacks_after_destroy = sum_callbacks();
    for (int i = 0; i < nslots; i++) {
        hwt_timeout *h = atomic_exchange(&R.handles[i], NULL);
        if (h != NULL)
            release_handle(i, h);
    }
    hwt_timeouts_release(list, n); /* after destroy and after the handles */

    /* ------------------------------------------------ per-slot checks */
    long attempted = 0, ok = 0, estopped = 0, ran = 0, cb = 0, handed = 0, cancel_true = 0,
         dropped = 0, released = 0;
    int untried = 0, bad_end = 0, bad_cancel = 0, bad_release = 0, bad_state = 0,
        trace_on_error = 0, bad_thread = 0, bad_view = 0;
    int first_bad = -1;
    for (int i = 0; i < nslots; i++) {
        slot *s = &R.slots[i];
        int rc = atomic_load(&s->rc);
        int r = atomic_load(&s->ran), c = atomic_load(&s->cb), h = atomic_load(&s->handed);
        int ct = atomic_load(&s->cancel_true), rel = atomic_load(&s->released);
        int fin = atomic_load(&s->final_state);
        bool kept = slot_keeps_handle(i);
        bad_thread += atomic_load(&s->bad_thread) != 0;
        bad_view += atomic_load(&s->bad_view) != 0;
        if (rc == SLOT_UNTRIED) {
            if (i < R.base)
                untried++; /* a producer slot must have been tried */
            else if (r || c || h || ct || rel)
                bad_end++;
            continue;
        }
        attempted++;
        ran += r;
        cb += c;
        handed += h;
        cancel_true += ct;
        released += rel;
        if (rc != 0) {
            estopped += rc == HWT_ESTOPPED;
            if (r || c || h || ct || rel) {
                trace_on_error++;
                if (first_bad < 0)
                    first_bad = i;
            }
            continue;
        }
        ok++;
        /* ended exactly once */
        int cancelled_end; /* cancel-true or dropped, seen through cb or the handle */
        if (slot_has_cb(i))
            cancelled_end = c;
        else
            cancelled_end = (fin == FINAL_CANCELLED && h == 0) ? 1 : 0;
        int ends = r + h + cancelled_end;
        if (ends != 1 || r > 1 || c > 1 || h > 1 || (h && c)) {
            bad_end++;
            if (first_bad < 0)
                first_bad = i;
        }
        /* cancel() == true at most once, never ran, callback called */
        if (ct > 1 || (ct && r) || (ct && h) || (ct && slot_has_cb(i) && c != 1)) {
            bad_cancel++;
            if (first_bad < 0)
                first_bad = i;
        }
        long d = cancelled_end - ct;
        if (d > 0)
            dropped += d;
        /* every kept handle released once; its final state matches */
        if (rel != (kept ? 1 : 0))
            bad_release++;
        if (kept && !((r == 1 && fin == FINAL_EXPIRED) || (r == 0 && fin == FINAL_CANCELLED)))
            bad_state++;
    }

    if (v->end != END_DESTROY)
        assert_int_equal(second_rc, 0);
    hwt_timeouts_release(second_list, second_n);
    if (v->executor) {
        assert_int_equal(atomic_load(&X.run_calls), atomic_load(&X.handed_over));
        assert_int_equal(atomic_load(&X.handed_over), ran);
    }

    totals me = {attempted,
                 ok,
                 estopped,
                 ran,
                 cb,
                 handed,
                 cancel_true,
                 dropped,
                 released,
                 atomic_load(&R.cancel_calls) + atomic_load(&R.task_cancel_calls),
                 (long)((hwtt_now_ns() - t0) / 1000000)};
    print_message("  %-13s seed %-3llu: %ld schedule calls (%ld ok, %ld ESTOPPED), %ld cancel "
                  "calls (%ld true), ran %ld, cancelled cb %ld, handed back %ld, dropped %ld, "
                  "handles released %ld, %ld ms\n",
                  v->name, (unsigned long long)seed, attempted, ok, estopped, me.cancel_calls,
                  cancel_true, ran, cb, handed, dropped, released, me.ms);
    if (first_bad >= 0) {
        slot *s = &R.slots[first_bad];
        print_message("  first bad slot %d: rc %d ran %d cb %d handed %d cancel_true %d "
                      "released %d final %d (has_cb %d, keeps handle %d, take %d)\n",
                      first_bad, atomic_load(&s->rc), atomic_load(&s->ran), atomic_load(&s->cb),
                      atomic_load(&s->handed), atomic_load(&s->cancel_true),
                      atomic_load(&s->released), atomic_load(&s->final_state),
                      slot_has_cb(first_bad), slot_keeps_handle(first_bad),
                      slot_is_take(first_bad));
    }
    free(R.slots);
    free((void *)R.handles);

    assert_true(reached_half);
    assert_int_equal(atomic_load(&R.producer_wait_timeouts), 0);
    assert_int_equal(untried, 0);
    assert_int_equal(atomic_load(&R.unexpected_rc), 0);
    assert_int_equal(atomic_load(&R.out_written_on_error), 0);
    assert_int_equal(stop_rc, 0);
    assert_int_equal(pending_after_stop, 0);
    assert_int_equal(list_not_cancelled, 0);
    assert_int_equal(list_expired, 0);
    assert_int_equal(trace_on_error, 0);
    assert_int_equal(bad_end, 0);
    assert_int_equal(bad_cancel, 0);
    assert_int_equal(bad_release, 0);
    assert_int_equal(bad_state, 0);
    assert_int_equal(bad_thread, 0);
    assert_int_equal(bad_view, 0);
    assert_int_equal(atomic_load(&R.cancel_true_after_stop), 0);
    /* every callback of the stop had run when it returned; nothing after it
     * but executor runs of what was handed over before */
    if (!v->executor)
        assert_int_equal(callbacks_at_end, callbacks_at_stop);
    assert_int_equal(callbacks_after_destroy, callbacks_at_end);
    assert_int_equal((long)n, handed);
    assert_int_equal(second_n, 0);
    assert_int_equal(atomic_load(&log.count[HWT_LOG_ERROR]), 0);
    assert_int_equal(atomic_load(&log.count[HWT_LOG_WARN]), 0);
    if (v->end != END_DESTROY) {
        assert_int_equal(st.pending, 0);
        assert_int_equal(st.scheduled, (uint64_t)ok);
        assert_int_equal(st.expired, (uint64_t)ran);
        assert_int_equal(st.cancelled, (uint64_t)(cancel_true + handed + dropped));
        assert_int_equal(st.rejected, 0);
    }
    /* the run exercised what it is meant to */
    assert_true(ok > 0 && ran > 0 && cancel_true > 0);
    if (v->end != END_DESTROY) /* producers may not race a destroy */
        assert_true(estopped > 0);
    if (v->end == END_STOP_LIST)
        assert_true(handed > 0);
    else
        assert_true(dropped > 0);
    if (v->nested)
        assert_true(atomic_load(&R.child_calls) > 0 && atomic_load(&R.task_cancel_calls) > 0);

    tot->attempted += attempted;
    tot->ok += ok;
    tot->estopped += estopped;
    tot->ran += ran;
    tot->cb += cb;
    tot->handed += handed;
    tot->cancel_true += cancel_true;
    tot->dropped += dropped;
    tot->released += released;
    tot->cancel_calls += me.cancel_calls;
    tot->ms += me.ms;
}

static totals grand;

static void run_variant(const variant *v)
{
    int rounds = env_int("HWT_STRESS_ROUNDS", hwtt_slowdown() >= 20 ? 1 : 5, 1, 1000000);
    totals t;
    memset(&t, 0, sizeof t);
    for (int r = 0; r < rounds; r++)
        run_once(v, (uint64_t)r + 1, &t);
    print_message("  %-13s total over %d round(s): %ld schedule calls, %ld cancel calls, "
                  "%ld ended (%ld ran, %ld cancel-true, %ld handed back, %ld dropped), %ld ms\n",
                  v->name, rounds, t.attempted, t.cancel_calls,
                  t.ran + t.cancel_true + t.handed + t.dropped, t.ran, t.cancel_true, t.handed,
                  t.dropped, t.ms);
    grand.attempted += t.attempted;
    grand.cancel_calls += t.cancel_calls;
    grand.ok += t.ok;
    grand.ms += t.ms;
}

static const variant V_LIST = {"stop-list", END_STOP_LIST, false, false};
static const variant V_DROP = {"stop-drop", END_STOP_DROP, false, false};
static const variant V_DESTROY = {"destroy", END_DESTROY, false, false};
static const variant V_EXEC = {"executor", END_STOP_LIST, true, false};
static const variant V_EXEC_DESTROY = {"exec-destroy", END_DESTROY, true, false};
static const variant V_NESTED = {"nested", END_STOP_LIST, false, true};
static const variant V_NESTED_DROP = {"nested-drop", END_STOP_DROP, false, true};

static void test_stress_stop_with_list(void **state)
{
    (void)state;
    run_variant(&V_LIST);
}
static void test_stress_stop_dropping(void **state)
{
    (void)state;
    run_variant(&V_DROP);
}
static void test_stress_destroy(void **state)
{
    (void)state;
    run_variant(&V_DESTROY);
}
static void test_stress_executor(void **state)
{
    (void)state;
    run_variant(&V_EXEC);
}
static void test_stress_executor_destroy(void **state)
{
    (void)state;
    run_variant(&V_EXEC_DESTROY);
}
static void test_stress_nested_tasks(void **state)
{
    (void)state;
    run_variant(&V_NESTED);
}
static void test_stress_nested_tasks_drop(void **state)
{
    (void)state;
    run_variant(&V_NESTED_DROP);
}

/* ------------------------------------------------ stop races, many times */

/* Short rounds that each end with a stop landing in the middle of 4
 * producers scheduling flat out (no pauses): a timeout whose schedule call
 * raced the stop must still end exactly once (or the call returned
 * HWT_ESTOPPED and nothing happened). Every timeout has a cancelled
 * callback, so each ending is visible without handles. HWT_STRESS_RACES
 * rounds (default 400; 50 under valgrind, with at most 500 instead of 3000
 * calls per producer and round). */
#define RACE_PER 3000
static slot race_slots[PRODUCERS * RACE_PER];
static atomic_int race_progress[PRODUCERS];
static pthread_barrier_t race_go;
static hwt_timer *race_timer;
static int race_per; /* schedule calls per producer per round, at most RACE_PER */

static void race_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((slot *)arg)->ran, 1);
}

static void race_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((slot *)arg)->cb, 1);
}

static const hwt_task race_task = {.run = race_run, .cancelled = race_cancelled};

static void *race_producer(void *arg)
{
    int p = (int)(intptr_t)arg;
    rng_state = 0xABCDEF12345ULL * (uint64_t)(p + 1) + (uint64_t)hwtt_now_ns();
    pthread_barrier_wait(&race_go);
    for (int k = 0; k < race_per; k++) {
        int i = p * RACE_PER + k;
        int rc = hwt_new_timeout_task(race_timer, &race_task, &race_slots[i],
                                      (int64_t)(rnd() % 2000), HWT_MICROSECONDS, NULL);
        atomic_store(&race_slots[i].rc, rc);
        atomic_store(&race_progress[p], k + 1);
        if (rc == HWT_ESTOPPED)
            break;
    }
    return NULL;
}

static void test_stress_stop_races(void **state)
{
    (void)state;
    int rounds = env_int("HWT_STRESS_RACES", hwtt_slowdown() >= 20 ? 50 : 400, 1, 10000000);
    race_per = hwtt_slowdown() >= 20 ? 500 : RACE_PER;
    long calls = 0, ok = 0, estopped = 0, ran = 0, cb = 0, handed = 0;
    int bad = 0, unexpected = 0, not_stopped = 0, stop_fail = 0, pending_bad = 0;
    int64_t t0 = hwtt_now_ns();
    for (int r = 0; r < rounds; r++) {
        memset(race_slots, 0, sizeof race_slots);
        for (int i = 0; i < PRODUCERS * RACE_PER; i++)
            atomic_store(&race_slots[i].rc, SLOT_UNTRIED);
        for (int p = 0; p < PRODUCERS; p++)
            atomic_store(&race_progress[p], 0);
        assert_int_equal(pthread_barrier_init(&race_go, NULL, PRODUCERS + 1), 0);
        race_timer = hwtt_timer(100, HWT_MICROSECONDS, 16);
        assert_int_equal(hwt_timer_start(race_timer), 0);
        pthread_t th[PRODUCERS];
        for (int p = 0; p < PRODUCERS; p++)
            assert_int_equal(pthread_create(&th[p], NULL, race_producer, (void *)(intptr_t)p), 0);
        pthread_barrier_wait(&race_go);
        /* stop once some work is done, at a slightly different point each round */
        int want = 20 + (int)(rnd() % 400);
        hwtt_wait_until(({
                            int d = 0;
                            for (int p = 0; p < PRODUCERS; p++)
                                d += atomic_load(&race_progress[p]);
                            d >= want;
                        }),
                        hwtt_slack_ms(5000));
        hwt_timeout **list = NULL;
        size_t n = 0;
        bool with_list = r % 2 == 0;
        int rc = with_list ? hwt_stop(race_timer, &list, &n) : hwt_stop(race_timer, NULL, NULL);
        stop_fail += rc != 0;
        pending_bad += hwt_pending_timeouts(race_timer) != 0;
        for (size_t k = 0; k < n; k++)
            atomic_fetch_add(&((slot *)hwt_timeout_arg(list[k]))->handed, 1);
        hwt_timeouts_release(list, n);
        for (int p = 0; p < PRODUCERS; p++)
            pthread_join(th[p], NULL);
        pthread_barrier_destroy(&race_go);
        hwt_stats st;
        hwt_timer_stats(race_timer, &st);
        hwt_timer_destroy(race_timer);
        long r_ok = 0, r_ran = 0;
        for (int i = 0; i < PRODUCERS * RACE_PER; i++) {
            slot *s = &race_slots[i];
            int src = atomic_load(&s->rc);
            int a = atomic_load(&s->ran), c = atomic_load(&s->cb), h = atomic_load(&s->handed);
            if (src == SLOT_UNTRIED)
                continue;
            calls++;
            if (src == 0) {
                r_ok++;
                r_ran += a;
                bad += a + c + h != 1;
                cb += c;
                handed += h;
            } else {
                estopped += src == HWT_ESTOPPED;
                unexpected += src != HWT_ESTOPPED;
                bad += a + c + h != 0;
            }
        }
        /* each producer ran into the stop (unless it finished first) */
        for (int p = 0; p < PRODUCERS; p++) {
            int k = atomic_load(&race_progress[p]);
            not_stopped +=
                k < race_per && atomic_load(&race_slots[p * RACE_PER + k - 1].rc) != HWT_ESTOPPED;
        }
        ok += r_ok;
        ran += r_ran;
        bad += st.scheduled != (uint64_t)r_ok || st.expired != (uint64_t)r_ran;
    }
    print_message("  %d stop races: %ld schedule calls (%ld ok, %ld ESTOPPED), ran %ld, "
                  "cancelled cb %ld, handed back %ld, %ld ms\n",
                  rounds, calls, ok, estopped, ran, cb, handed,
                  (long)((hwtt_now_ns() - t0) / 1000000));
    grand.attempted += calls;
    grand.ok += ok;
    assert_int_equal(stop_fail, 0);
    assert_int_equal(pending_bad, 0);
    assert_int_equal(unexpected, 0);
    assert_int_equal(not_stopped, 0);
    assert_int_equal(bad, 0);
    assert_true(estopped > 0 && ran > 0);
}

static void test_stress_summary(void **state)
{
    (void)state;
    print_message("  all variants: %ld schedule calls (%ld ok), %ld cancel calls, %ld ms\n",
                  grand.attempted, grand.ok, grand.cancel_calls, grand.ms);
    assert_true(grand.attempted > 0);
}

int main(void)
{
    hwtt_watchdog(170);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_stop_with_list),
        cmocka_unit_test(test_stress_stop_dropping),
        cmocka_unit_test(test_stress_destroy),
        cmocka_unit_test(test_stress_executor),
        cmocka_unit_test(test_stress_executor_destroy),
        cmocka_unit_test(test_stress_nested_tasks),
        cmocka_unit_test(test_stress_nested_tasks_drop),
        cmocka_unit_test(test_stress_stop_races),
        cmocka_unit_test(test_stress_summary),
    };
    hwtt_apply_filters();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * timer.c - lifecycle: options, create/start/stop/destroy, the instance
 * count, statistics and error texts.
 *
 * Threads: create is single-threaded per timer; start and stop serialise on
 * lifecycle_lock (the fast paths only read `state`); stats and the pending
 * count read atomics. The worker never takes lifecycle_lock after start, so
 * stop may hold it while it joins the worker.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "internal.h"

#define STR2(x) #x
#define STR(x) STR2(x)

static atomic_int live_timers;
static atomic_bool warned_too_many;
static _Atomic uint64_t last_timer_id;

const char *hwt_version(void)
{
    return STR(HWT_VERSION_MAJOR) "." STR(HWT_VERSION_MINOR) "." STR(HWT_VERSION_PATCH);
}

const char *hwt_strerror(int code)
{
    switch (code) {
    case 0: return "success";
    case HWT_EINVAL: return "invalid argument";
    case HWT_ENOMEM: return "out of memory";
    case HWT_EREJECTED: return "too many pending timeouts (max_pending_timeouts)";
    case HWT_ESTOPPED: return "timer stopped";
    case HWT_EDEADLK: return "hwt_stop called from the timer's own worker thread";
    case HWT_ESYS: return "a system resource (a thread, a thread key) could not be had";
    }
    return "unknown error";
}

/* ---------------------------------------------------------------- options */

void hwt_options_init(hwt_options *options)
{
    if (options == NULL)
        return;
    memset(options, 0, sizeof *options);
    options->tick_duration = 100;
    options->tick_unit = HWT_MILLISECONDS;
    options->ticks_per_wheel = 512;
    options->max_pending_timeouts = -1;
    options->max_transfers_per_tick = 100000;
    options->sleep_mode = HWT_SLEEP_DEFAULT;
    options->thread_name = "hwtimer";
}

static hwt_sleep_mode resolve_sleep_mode(hwt_sleep_mode mode)
{
    if (mode != HWT_SLEEP_DEFAULT)
        return mode;
#ifdef _WIN32
    return HWT_SLEEP_WINDOWS;
#else
    return HWT_SLEEP_PRECISE;
#endif
}

static bool sleep_mode_valid(hwt_sleep_mode mode)
{
    return mode == HWT_SLEEP_DEFAULT || mode == HWT_SLEEP_PRECISE || mode == HWT_SLEEP_MILLIS ||
           mode == HWT_SLEEP_WINDOWS;
}

/* Checks the options and derives the tick in ns: 0 or HWT_EINVAL. */
static int validate(const hwt_options *o, int64_t *tick_ns)
{
    int64_t unit_ns = hwt__unit_ns(o->tick_unit);
    if (unit_ns == 0 || !sleep_mode_valid(o->sleep_mode) || o->tick_duration == 0 ||
        o->ticks_per_wheel == 0 || o->ticks_per_wheel > (UINT32_C(1) << 30) ||
        o->max_transfers_per_tick == 0)
        return HWT_EINVAL;
    if (o->thread_attr != NULL) {
        int detach;
        if (pthread_attr_getdetachstate(o->thread_attr, &detach) != 0 ||
            detach != PTHREAD_CREATE_JOINABLE)
            return HWT_EINVAL;
    }
    int64_t duration = o->tick_duration > INT64_MAX ? INT64_MAX : (int64_t)o->tick_duration;
    *tick_ns = hwt__sat_mul(duration, unit_ns);
    /* Netty's rule: the wheel's span must fit in a long. */
    if (*tick_ns >= INT64_MAX / hwt__wheel_round_length(o->ticks_per_wheel))
        return HWT_EINVAL;
    return 0;
}

/* ---------------------------------------------------------------- create */

int hwt_timer_create(hwt_timer **out, const hwt_options *options)
{
    hwt_options defaults;
    if (options == NULL) {
        hwt_options_init(&defaults);
        options = &defaults;
    }
    int64_t tick_ns;
    if (out == NULL || validate(options, &tick_ns) != 0)
        return HWT_EINVAL;

    hwt__fences_init();
    hwt_timer *timer = hwt__aligned_alloc(HWT_SITE_TIMER, 64, sizeof *timer);
    if (timer == NULL)
        return HWT_ENOMEM;
    memset(timer, 0, sizeof *timer);
    timer->log = options->log;
    timer->log_ctx = options->log_ctx;
    timer->sleep_mode = resolve_sleep_mode(options->sleep_mode);
    int64_t min_tick = hwt__min_tick_ns(timer->sleep_mode);
    if (tick_ns < min_tick) {
        hwt__log(timer, HWT_LOG_WARN,
                 "tick of %lld ns is below the sleep mode's minimum; using %lld ns",
                 (long long)tick_ns, (long long)min_tick);
        tick_ns = min_tick;
    }
    uint32_t wheel_len = hwt__wheel_round_length(options->ticks_per_wheel);
    timer->tick_ns = tick_ns;
    timer->cancel_latency_ns =
        tick_ns > HWT_CANCEL_LATENCY_MIN_NS ? tick_ns : HWT_CANCEL_LATENCY_MIN_NS;
    timer->max_pending = options->max_pending_timeouts;
    timer->max_transfers = options->max_transfers_per_tick;
    timer->thread_attr = options->thread_attr;
    snprintf(timer->thread_name, sizeof timer->thread_name, "%s",
             options->thread_name != NULL ? options->thread_name : "hwtimer");
    timer->executor = options->executor;
    timer->executor_ctx = options->executor_ctx;
    atomic_init(&timer->state, HWT_STATE_INIT);
    atomic_init(&timer->refs, 1);
    atomic_init(&timer->wake_before, INT64_MIN);
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        atomic_init(&timer->stripes[i].queued_min, INT64_MAX);
    int rc = hwt__pool_init(&timer->pool);
    if (rc != 0) {
        hwt__free(timer);
        return rc;
    }
    if (hwt__wheel_init(&timer->wheel, wheel_len, tick_ns, &timer->pool.ids) != 0) {
        hwt__pool_destroy(&timer->pool);
        hwt__free(timer);
        return HWT_ENOMEM;
    }
    pthread_mutex_init(&timer->lifecycle_lock, NULL);
    pthread_mutex_init(&timer->tasks_lock, NULL);
    timer->id = atomic_fetch_add(&last_timer_id, 1) + 1;
    pthread_condattr_t cattr;
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&timer->started_cond, &cattr);
    pthread_condattr_destroy(&cattr);

    if (atomic_fetch_add(&live_timers, 1) + 1 > HWT_MAX_LIVE_TIMERS &&
        !atomic_exchange(&warned_too_many, true))
        hwt__log(timer, HWT_LOG_ERROR,
                 "you are creating too many hwt_timer instances (more than %d live); "
                 "a timer is a shared resource: reuse one across the application",
                 HWT_MAX_LIVE_TIMERS);
    *out = timer;
    return 0;
}

/* ---------------------------------------------------------------- start */

/* Creates the worker with every signal blocked from its first instruction. */
static int spawn_worker(hwt_timer *timer)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&timer->thread, timer->thread_attr, hwt__worker_main, timer);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int hwt__timer_ensure_started(hwt_timer *timer)
{
    int state = atomic_load_explicit(&timer->state, memory_order_acquire);
    if (state == HWT_STATE_STARTED)
        return 0;
    if (state == HWT_STATE_SHUTDOWN)
        return HWT_ESTOPPED;
    int rc = 0;
    pthread_mutex_lock(&timer->lifecycle_lock);
    if (!timer->spawned && atomic_load(&timer->state) == HWT_STATE_INIT) {
        int err = spawn_worker(timer);
        if (err != 0) {
            hwt__log(timer, HWT_LOG_ERROR, "cannot create the worker thread: %s", strerror(err));
            pthread_mutex_unlock(&timer->lifecycle_lock);
            return HWT_ESYS;
        }
        timer->spawned = true;
    }
    /* The start latch. The wait releases the lock: other starters wait here
     * too (spawned is set), and a stop may come in and join. */
    while (timer->spawned && !timer->worker_ready)
        pthread_cond_wait(&timer->started_cond, &timer->lifecycle_lock);
    int expected = HWT_STATE_INIT;
    if (!atomic_compare_exchange_strong(&timer->state, &expected, HWT_STATE_STARTED) &&
        expected == HWT_STATE_SHUTDOWN)
        rc = HWT_ESTOPPED;
    pthread_mutex_unlock(&timer->lifecycle_lock);
    return rc;
}

int hwt_timer_start(hwt_timer *timer)
{
    return timer == NULL ? HWT_EINVAL : hwt__timer_ensure_started(timer);
}

void hwt__kick(hwt_timer *timer)
{
    /* Read before the exchange: while the worker is already woken, threads
     * kicking at once (cancellers, say) then share the line instead of
     * taking it from each other. */
    if (atomic_load(&timer->kicked) || atomic_exchange(&timer->kicked, 1))
        return;
    atomic_fetch_add(&timer->wake_seq, 1);
    hwt__wake(&timer->wake_seq);
}

/* ---------------------------------------------------------------- stop */

int hwt_stop(hwt_timer *timer, hwt_timeout ***unprocessed, size_t *count)
{
    if (timer == NULL || (unprocessed == NULL) != (count == NULL))
        return HWT_EINVAL;
    if (hwt__current_worker == timer)
        return HWT_EDEADLK;
    hwt_timeout **ignored_list;
    size_t ignored_count;
    bool want_list = unprocessed != NULL;
    if (!want_list) {
        unprocessed = &ignored_list;
        count = &ignored_count;
    }
    *unprocessed = NULL;
    *count = 0;

    int rc = 0;
    pthread_mutex_lock(&timer->lifecycle_lock);
    /* The worker reads the mode once it sees SHUTDOWN: set it first. No
     * worker runs unless one was spawned and not joined yet. */
    atomic_store(&timer->stop_mode, want_list ? HWT_STOP_LIST : HWT_STOP_DROP);
    atomic_store(&timer->state, HWT_STATE_SHUTDOWN);
    if (timer->spawned) { /* running, or still starting: it will see SHUTDOWN */
        atomic_fetch_add(&timer->wake_seq, 1);
        hwt__wake(&timer->wake_seq);
        pthread_join(timer->thread, NULL);
        timer->spawned = false;
    }
    /* After the join (or a failed hand-back earlier) the list is ours. */
    if (want_list)
        rc = hwt__stopset_take(&timer->stopped_set, unprocessed, count);
    else
        hwt__stopset_drop(&timer->stopped_set);
    pthread_mutex_unlock(&timer->lifecycle_lock);
    return rc;
}

/* ---------------------------------------------------------------- destroy */

void hwt_timer_destroy(hwt_timer *timer)
{
    if (timer == NULL)
        return;
    if (hwt__current_worker == timer) {
        hwt__log(timer, HWT_LOG_ERROR,
                 "hwt_timer_destroy called from the timer's own task: ignored");
        return;
    }
    hwt_stop(timer, NULL, NULL);
    atomic_fetch_sub(&live_timers, 1);
    hwt__pool_forget_thread(timer);
    hwt__timer_unref_n(timer, 1);
}

void hwt__timer_unref_n(hwt_timer *timer, size_t n)
{
    if (atomic_fetch_sub_explicit(&timer->refs, n, memory_order_acq_rel) != n)
        return;
    hwt__wheel_free(&timer->wheel);
    hwt__pool_destroy(&timer->pool);
    hwt__task_pairs_free(timer);
    pthread_mutex_destroy(&timer->tasks_lock);
    pthread_mutex_destroy(&timer->lifecycle_lock);
    pthread_cond_destroy(&timer->started_cond);
    hwt__free(timer);
}

/* ---------------------------------------------------------------- stats */

static int64_t read_pending(hwt_timer *timer)
{
    if (timer->max_pending > 0)
        return atomic_load_explicit(&timer->pending, memory_order_relaxed);
    /* Scheduled (counted when a call starts, so a task never sees itself)
     * minus ended. The stripes are read one by one while others count: a
     * racing read may be off for a moment, never below 0. */
    int64_t sum = -(int64_t)atomic_load_explicit(&timer->expired, memory_order_relaxed);
    for (unsigned i = 0; i < HWT_STRIPES; i++) {
        struct hwt__stripe *s = &timer->stripes[i];
        sum += (int64_t)(atomic_load_explicit(&s->started, memory_order_relaxed) -
                         atomic_load_explicit(&s->failed, memory_order_relaxed) -
                         atomic_load_explicit(&s->cancelled, memory_order_relaxed));
    }
    return sum > 0 ? sum : 0;
}

int64_t hwt_pending_timeouts(const hwt_timer *timer)
{
    if (timer == NULL)
        return HWT_EINVAL;
    return read_pending((hwt_timer *)timer);
}

void hwt_timer_stats(const hwt_timer *ctimer, hwt_stats *stats)
{
    if (ctimer == NULL || stats == NULL)
        return;
    hwt_timer *timer = (hwt_timer *)ctimer;
    memset(stats, 0, sizeof *stats);
    stats->pending = read_pending(timer);
    /* Ends before starts: a timeout is counted scheduled before it can expire
     * or be cancelled (release, then acquire here), so expired + cancelled
     * never exceeds scheduled in the snapshot. */
    stats->expired = atomic_load(&timer->expired);
    for (unsigned i = 0; i < HWT_STRIPES; i++) {
        stats->cancelled += atomic_load(&timer->stripes[i].cancelled);
        stats->rejected += atomic_load(&timer->stripes[i].rejected);
    }
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        stats->scheduled += atomic_load(&timer->stripes[i].scheduled);
    stats->wakeups = atomic_load(&timer->wakeups);
    stats->late_max_ns = atomic_load(&timer->late_max_ns);
    if (atomic_load_explicit(&timer->state, memory_order_acquire) != HWT_STATE_INIT &&
        timer->worker_ready) {
        int64_t elapsed = hwt__now_ns() - timer->start_ns;
        stats->ticks = elapsed > 0 ? (uint64_t)(elapsed / timer->tick_ns) : 0;
    }
}

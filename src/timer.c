/*
 * timer.c - lifecycle: options, create/start/stop/destroy, the process
 * around a timer (fork, thread cancellation), the instance count,
 * statistics and error texts.
 *
 * Threads: create is single-threaded per timer; start and stop meet under
 * lifecycle_lock, but never hold it while they wait: a starter waits on
 * lifecycle_cond for the worker to announce itself, a stopper for the
 * worker's answer, and the join happens without the lock. So the worker
 * can always take it (to announce itself, or to answer), and any
 * interleaving of starts, stops and destroys completes. A starter or
 * stopper holds a reference to the timer's memory while it waits, and so
 * does a thread's first schedule (its cache's binding keeps the timer for
 * the later ones), so a destroy racing them frees nothing under their
 * feet. Thread cancellation is
 * held off inside these calls (pthread_cond_wait and pthread_join are
 * cancellation points): a cancelled caller acts on it after it returns,
 * with no lock held.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "internal.h"
#include "steps.h"
#include "os.h"

#define STR2(x) #x
#define STR(x) STR2(x)

_Atomic unsigned hwt__fork_generation;

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
    return mode == HWT_SLEEP_DEFAULT ? HWT_SLEEP_PRECISE : mode; /* Linux only */
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

/* ---------------------------------------------------------------- fork */

/* In the child of a fork(), only the forking thread exists: every timer is
 * inherited, its worker is gone, and its locks may be held by threads that
 * are gone too. A new generation makes every inherited timer stopped (see
 * hwt__inherited: calls on it touch neither its locks nor its memory), the
 * forking thread is nobody's worker any more, and its cached timeouts (of
 * an inherited timer) are dropped. The arena (arena.h), which the child's
 * new timers share with the inherited ones, is not forked in the middle of
 * a change. getpid() instead would be a system call per schedule.
 *
 * The handlers are registered when the library is loaded, before main()
 * and the libraries loaded after this one register theirs: fork() runs
 * prepare handlers newest first and the others oldest first, so ours lock
 * the arena after, and make the child's timers inherited before, any
 * handler of the application's. Such a handler may then call the library:
 * create a timer, or destroy an inherited one. If that registration
 * failed, hwt_timer_create tries again (and fails if it cannot). */
static pthread_mutex_t atfork_lock = PTHREAD_MUTEX_INITIALIZER;
static bool atfork_registered;
static pthread_mutex_t stopping_lock = PTHREAD_MUTEX_INITIALIZER; /* see worker_may_stop */

/* The live timers, linked through live_prev/live_next under live_lock,
 * which the forking thread holds across the fork: a child's handler marks
 * each inherited timer with when its worker was lost (forked_ns), once, so
 * its ticks stop there however many forks later they are read. The time is
 * read in the parent, before the fork (under the arena's lock, which keeps
 * forks of one process apart): read in the child, it could be later than a
 * stop the parent made meanwhile. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static hwt_timer *live_list;
static int64_t fork_prepared_ns;

static void link_live(hwt_timer *timer)
{
    pthread_mutex_lock(&live_lock);
    timer->live_next = live_list;
    if (live_list != NULL)
        live_list->live_prev = timer;
    live_list = timer;
    pthread_mutex_unlock(&live_lock);
}

static void unlink_live(hwt_timer *timer)
{
    pthread_mutex_lock(&live_lock);
    if (timer->live_prev != NULL)
        timer->live_prev->live_next = timer->live_next;
    else
        live_list = timer->live_next;
    if (timer->live_next != NULL)
        timer->live_next->live_prev = timer->live_prev;
    pthread_mutex_unlock(&live_lock);
}

static void before_fork(void)
{
    hwt__arena_before_fork();
    hwt__pool_before_fork();
    pthread_mutex_lock(&live_lock);
    fork_prepared_ns = hwt__now_ns();
}

static void after_fork_in_parent(void)
{
    pthread_mutex_unlock(&live_lock);
    hwt__pool_after_fork_in_parent();
    hwt__arena_after_fork_in_parent();
}

static void after_fork_in_child(void)
{
    atomic_fetch_add(&hwt__fork_generation, 1);
    /* The count of live timers is the list's: another thread of the
     * parent's may have been between the two, in a create (counted, not
     * listed yet: that timer is nobody's here) or a destroy (the other
     * way round: the child may destroy it again). */
    int live = 0;
    for (hwt_timer *t = live_list; t != NULL; t = t->live_next) {
        if (t->forked_ns == 0) /* inherited at this fork, not an earlier one */
            t->forked_ns = fork_prepared_ns;
        live++;
    }
    atomic_store(&live_timers, live);
    pthread_mutex_unlock(&live_lock); /* the forking thread's: it is the child's */
    atomic_store(&warned_too_many, false); /* once per process: this is a new one */
    hwt__current_worker = NULL;
    hwt__arena_after_fork_in_child();
    hwt__pool_after_fork_in_child();
    pthread_mutex_init(&atfork_lock, NULL); /* a thread that held it is gone */
    pthread_mutex_init(&stopping_lock, NULL);
}

/* 0, or pthread_atfork's error number. */
static int register_atfork(void)
{
    int err = 0;
    pthread_mutex_lock(&atfork_lock);
    if (!atfork_registered) {
        err = pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
        atfork_registered = err == 0;
    }
    pthread_mutex_unlock(&atfork_lock);
    return err;
}

__attribute__((constructor)) static void register_atfork_at_load(void)
{
    (void)register_atfork(); /* a failure is retried, and reported, by hwt_timer_create */
}

/* The timer's mutexes and condition: 0, or the error number with nothing
 * left. */
static int init_sync(hwt_timer *timer)
{
    int err = pthread_mutex_init(&timer->lifecycle_lock, NULL);
    if (err != 0)
        return err;
    err = pthread_mutex_init(&timer->tasks_lock, NULL);
    if (err != 0) {
        pthread_mutex_destroy(&timer->lifecycle_lock);
        return err;
    }
    err = pthread_cond_init(&timer->lifecycle_cond, NULL);
    if (err != 0) {
        pthread_mutex_destroy(&timer->tasks_lock);
        pthread_mutex_destroy(&timer->lifecycle_lock);
    }
    return err;
}

/* HWT_ESYS, its cause logged with the timer's logger (SPEC: the caller
 * learns why from the log, not from the code). */
static int system_failure(const hwt_timer *timer, const char *what, int err)
{
    hwt__log(timer, HWT_LOG_ERROR, "hwt_timer_create: cannot %s: %s", what, strerror(err));
    return HWT_ESYS;
}

/* ---------------------------------------------------------------- create */

static void free_timer(hwt_timer *timer);

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

    hwt_timer *timer = hwt__aligned_alloc(HWT_SITE_TIMER, 64, sizeof *timer);
    if (timer == NULL)
        return HWT_ENOMEM;
    memset(timer, 0, sizeof *timer);
    timer->log = options->log;
    timer->log_ctx = options->log_ctx;
    int err = register_atfork();
    if (err != 0) {
        int rc = system_failure(timer, "register its fork handlers", err);
        hwt__free(timer);
        return rc;
    }
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
    timer->cancel_latency_ns = hwt__cancel_latency(tick_ns);
    timer->max_pending = options->max_pending_timeouts;
    timer->max_transfers = options->max_transfers_per_tick;
    timer->backlog_kick = hwt__backlog_kick(timer->max_transfers);
    timer->backlog_check_mask = hwt__backlog_check_mask(timer->max_transfers, HWT_STRIPES);
    timer->thread_attr = options->thread_attr;
    snprintf(timer->thread_name, sizeof timer->thread_name, "%s",
             options->thread_name != NULL ? options->thread_name : "hwtimer");
    timer->executor = options->executor;
    timer->executor_ctx = options->executor_ctx;
    atomic_init(&timer->state, HWT_STATE_INIT);
    atomic_init(&timer->refs, 1);
    timer->free_memory = free_timer;
    atomic_init(&timer->wake_before, INT64_MIN);
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        atomic_init(&timer->stripes[i].queued_min, INT64_MAX);
    err = hwt__pool_init(&timer->pool);
    if (err != 0) {
        int rc = system_failure(timer, "initialise its pool's lock", err);
        hwt__free(timer);
        return rc;
    }
    if (!hwt__wheel_init(&timer->worker.wheel, wheel_len, tick_ns)) {
        hwt__pool_destroy(&timer->pool);
        hwt__free(timer);
        return HWT_ENOMEM;
    }
    err = init_sync(timer);
    if (err != 0) {
        int rc = system_failure(timer, "initialise its lock or condition", err);
        hwt__wheel_free(&timer->worker.wheel);
        hwt__pool_destroy(&timer->pool);
        hwt__free(timer);
        return rc;
    }
    timer->id = atomic_fetch_add(&last_timer_id, 1) + 1;

    unsigned generation = atomic_load(&hwt__fork_generation);
    if (atomic_fetch_add(&live_timers, 1) + 1 > HWT_MAX_LIVE_TIMERS &&
        !atomic_exchange(&warned_too_many, true))
        hwt__log(timer, HWT_LOG_ERROR,
                 "you are creating too many hwt_timer instances (more than %d live); "
                 "a timer is a shared resource: reuse one across the application",
                 HWT_MAX_LIVE_TIMERS);
    /* After the log: a callback that forks returns, in the child, a timer
     * of the child's, not one inherited already. There, the count is the
     * list's (after_fork_in_child), which this one is not on yet. */
    timer->fork_generation = atomic_load(&hwt__fork_generation);
    if (timer->fork_generation != generation)
        atomic_fetch_add(&live_timers, 1);
    link_live(timer);
    *out = timer;
    return 0;
}

/* ---------------------------------------------------------------- start */

static int hold_off_cancellation(void)
{
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    return old;
}

static void allow_cancellation(int old)
{
    int ignored;
    pthread_setcancelstate(old, &ignored);
}

/* A reference to the timer's memory for a call that waits: a destroy racing
 * it cannot free the lock and condition it waits on. */
static void hold(hwt_timer *timer)
{
    hwt__timer_ref_n(timer, 1);
}

/* Creates the worker with every signal blocked from its first instruction
 * (it inherits this mask), unless thread_attr sets a mask of its own: then
 * the worker blocks them as it begins (hwt__worker_main). */
static int spawn_worker(hwt_timer *timer)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&timer->thread, timer->thread_attr, hwt__worker_main, timer);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* The slow path of a start: creates the worker if nobody has, then waits
 * (the start latch) until it has set the start time. 0, HWT_ESTOPPED or
 * HWT_ESYS. */
static int start_slow(hwt_timer *timer)
{
    int rc = 0;
    pthread_mutex_lock(&timer->lifecycle_lock);
    if (atomic_load(&timer->state) == HWT_STATE_SHUTDOWN) {
        rc = HWT_ESTOPPED;
    } else if (!timer->spawned) {
        int err = spawn_worker(timer);
        if (err != 0) {
            pthread_mutex_unlock(&timer->lifecycle_lock);
            hwt__log(timer, HWT_LOG_ERROR, "cannot create the worker thread: %s", strerror(err));
            return HWT_ESYS;
        }
        timer->spawned = true;
        pthread_mutex_unlock(&timer->lifecycle_lock);
        hwt__step_reached(HWT_STEP_START_SPAWNED, timer);
        pthread_mutex_lock(&timer->lifecycle_lock);
    }
    /* The worker announces itself before it can end, and is joined only
     * after that: the wait ends whether or not a stop came meanwhile. */
    while (rc == 0 && timer->spawned && !timer->worker_ready)
        pthread_cond_wait(&timer->lifecycle_cond, &timer->lifecycle_lock);
    pthread_mutex_unlock(&timer->lifecycle_lock);
    if (rc != 0)
        return rc;
    hwt__step_reached(HWT_STEP_START_LATCHED, timer);
    int expected = HWT_STATE_INIT;
    if (!atomic_compare_exchange_strong(&timer->state, &expected, HWT_STATE_STARTED) &&
        expected == HWT_STATE_SHUTDOWN)
        rc = HWT_ESTOPPED;
    return rc;
}

static int ensure_started(hwt_timer *timer)
{
    int state = atomic_load_explicit(&timer->state, memory_order_acquire);
    if (state == HWT_STATE_STARTED)
        return 0;
    if (state == HWT_STATE_SHUTDOWN)
        return HWT_ESTOPPED;
    int cancel_state = hold_off_cancellation();
    hold(timer);
    int rc = start_slow(timer);
    hwt__timer_unref_n(timer, 1);
    allow_cancellation(cancel_state);
    return rc;
}

int hwt_timer_start(hwt_timer *timer)
{
    if (timer == NULL)
        return HWT_EINVAL;
    return hwt__inherited(timer) ? HWT_ESTOPPED : ensure_started(timer);
}

/* ---------------------------------------------------------------- schedule */

static int schedule(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled, void *arg,
                    int64_t delay, hwt_unit unit, hwt_timeout **timeout)
{
    int64_t unit_ns = hwt__unit_ns(unit);
    if (timer == NULL || run == NULL || unit_ns == 0)
        return HWT_EINVAL;
    if (hwt__inherited(timer)) /* in a fork child: its worker is the parent's */
        return HWT_ESTOPPED;
    /* A thread's first call holds nothing of the timer until its cache
     * binds, in the allocation; a stop does not wait for a call that has
     * not counted itself yet. So a destroy racing it (the first call of all
     * starts the worker, and may meet a destroy while it does) would free
     * the timer under it: a reference for the whole call. Later calls are
     * kept by the binding. */
    bool first = !hwt__pool_thread_bound(timer);
    if (first)
        hold(timer);
    int rc = ensure_started(timer);
    if (rc == 0)
        rc = hwt__schedule(timer, run, cancelled, arg, hwt__sat_mul(delay, unit_ns), timeout);
    /* A stopped timer's pool keeps nothing free: a thread refused by the
     * stop gives back what its cache holds (the binding kept the timer
     * until here; the call counted itself as failed already). A call that
     * failed otherwise never reached the cache's clock: it looks now. */
    if (rc == HWT_ESTOPPED && !first)
        hwt__pool_forget_thread(timer);
    else if (rc != 0 && !first)
        hwt__pool_note_call(timer);
    if (first)
        hwt__timer_unref_n(timer, 1);
    return rc;
}

int hwt_new_timeout(hwt_timer *timer, hwt_task_fn run, void *arg, int64_t delay, hwt_unit unit,
                    hwt_timeout **timeout)
{
    return schedule(timer, run, NULL, arg, delay, unit, timeout);
}

int hwt_new_timeout_task(hwt_timer *timer, const hwt_task *task, void *arg, int64_t delay,
                         hwt_unit unit, hwt_timeout **timeout)
{
    if (task == NULL)
        return HWT_EINVAL;
    return schedule(timer, task->run, task->cancelled, arg, delay, unit, timeout);
}

/* ---------------------------------------------------------------- stop */

/* Asks the worker (spawned, running or parked after a failed hand-back) to
 * end its timeouts in `mode`, and waits for its answer; joins it once it
 * has handed everything over. Called with the lock held and stop_busy set;
 * returns with the lock held. */
static int stop_worker(hwt_timer *timer, hwt_timeout ***list, size_t *count)
{
    uint64_t request = ++timer->stop_requests;
    pthread_cond_broadcast(&timer->lifecycle_cond); /* a parked worker */
    pthread_mutex_unlock(&timer->lifecycle_lock);
    hwt__step_reached(HWT_STEP_STOP_REQUESTED, timer);
    atomic_fetch_add(&timer->wake_seq, 1); /* a running one */
    hwt__wake(&timer->wake_seq);

    pthread_mutex_lock(&timer->lifecycle_lock);
    while (timer->stop_replies != request)
        pthread_cond_wait(&timer->lifecycle_cond, &timer->lifecycle_lock);
    int rc = timer->stop_result;
    *list = timer->handed;
    *count = timer->handed_count;
    timer->handed = NULL;
    timer->handed_count = 0;
    pthread_mutex_unlock(&timer->lifecycle_lock);
    hwt__step_reached(HWT_STEP_STOP_ANSWERED, timer);
    if (rc == 0) /* it has nothing left and is ending: only we join it */
        pthread_join(timer->thread, NULL);
    pthread_mutex_lock(&timer->lifecycle_lock);
    if (rc == 0)
        timer->spawned = false;
    return rc;
}

/* A worker (in a task, a cancelled callback or the executor) that stops
 * another timer waits for that timer's worker. Should that worker be
 * stopping ours, itself or through others, none of them would return: that
 * stop gets HWT_EDEADLK, as a stop of the worker's own timer does. The
 * edges (worker_stopping) change under one process-wide lock, taken only
 * by stops called on a worker, so that of two stops closing a cycle the
 * second sees the first's edge. A timer on the chain is alive: the stop
 * that made its edge holds a reference to it. */

/* Records that this thread's worker (if it is one) stops `timer`: false,
 * with nothing recorded, if that would close a cycle. */
static bool worker_may_stop(hwt_timer *timer)
{
    hwt_timer *self = hwt__current_worker;
    if (self == NULL)
        return true;
    bool acyclic = true;
    pthread_mutex_lock(&stopping_lock);
    for (hwt_timer *t = timer; t != NULL && acyclic; t = t->worker_stopping)
        acyclic = t != self;
    if (acyclic)
        self->worker_stopping = timer;
    pthread_mutex_unlock(&stopping_lock);
    return acyclic;
}

static void worker_stop_done(void)
{
    hwt_timer *self = hwt__current_worker;
    if (self == NULL)
        return;
    pthread_mutex_lock(&stopping_lock);
    self->worker_stopping = NULL;
    pthread_mutex_unlock(&stopping_lock);
}

int hwt_stop(hwt_timer *timer, hwt_timeout ***unprocessed, size_t *count)
{
    if (timer == NULL || (unprocessed == NULL) != (count == NULL))
        return HWT_EINVAL;
    if (hwt__current_worker == timer) /* (never so in a fork child: see after_fork_in_child) */
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
    if (hwt__inherited(timer)) /* the parent's: nothing of it runs here */
        return 0;

    int cancel_state = hold_off_cancellation();
    hold(timer);
    if (!worker_may_stop(timer)) {
        hwt__timer_unref_n(timer, 1);
        allow_cancellation(cancel_state);
        return HWT_EDEADLK;
    }
    int rc = 0;
    pthread_mutex_lock(&timer->lifecycle_lock);
    /* Another thread stops it: wait until it is done, then take our turn,
     * as a stop after it would. Its stop may have failed (a list it could
     * not allocate) and left the worker holding the timeouts: ours must
     * then end them, or nobody would. */
    if (timer->stop_busy) {
        hwt__step_reached(HWT_STEP_STOP_WAITS, timer);
        while (timer->stop_busy)
            pthread_cond_wait(&timer->lifecycle_cond, &timer->lifecycle_lock);
    }
    timer->stop_busy = true;
    /* The worker reads the mode once it sees SHUTDOWN: set it first. */
    atomic_store(&timer->stop_mode, want_list ? HWT_STOP_LIST : HWT_STOP_DROP);
    atomic_store(&timer->state, HWT_STATE_SHUTDOWN);
    if (timer->spawned) /* else it never started, or a stop has ended it */
        rc = stop_worker(timer, unprocessed, count);
    atomic_store(&timer->stopped, true);
    timer->stop_busy = false;
    pthread_cond_broadcast(&timer->lifecycle_cond);
    pthread_mutex_unlock(&timer->lifecycle_lock);
    worker_stop_done();
    hwt__timer_unref_n(timer, 1);
    allow_cancellation(cancel_state);
    return rc;
}

/* ---------------------------------------------------------------- destroy */

void hwt_timer_destroy(hwt_timer *timer)
{
    if (timer == NULL)
        return;
    if (hwt__inherited(timer)) { /* the child's count of live timers includes it */
        atomic_fetch_sub(&live_timers, 1);
        unlink_live(timer); /* the child's copy of the list */
        return;
    }
    if (hwt__current_worker == timer) {
        hwt__log(timer, HWT_LOG_ERROR,
                 "hwt_timer_destroy called from the timer's own task: ignored (destroy it "
                 "from another thread)");
        return;
    }
    if (hwt_stop(timer, NULL, NULL) == HWT_EDEADLK) {
        hwt__log(timer, HWT_LOG_ERROR,
                 "hwt_timer_destroy called on a worker whose timer this timer's worker is "
                 "stopping: ignored (it would wait for itself)");
        return;
    }
    atomic_fetch_sub(&live_timers, 1);
    hwt__step_reached(HWT_STEP_DESTROY_UNLINKING, timer);
    unlink_live(timer);
    hwt__pool_forget_thread(timer);
    hwt__timer_unref_n(timer, 1);
}

/* The last reference is gone (internal.h, hwt__timer_unref_n). */
static void free_timer(hwt_timer *timer)
{
    hwt__wheel_free(&timer->worker.wheel);
    hwt__pool_destroy(&timer->pool);
    hwt__tasks_free(timer);
    pthread_mutex_destroy(&timer->tasks_lock);
    pthread_mutex_destroy(&timer->lifecycle_lock);
    pthread_cond_destroy(&timer->lifecycle_cond);
    hwt__free(timer);
}

/* ---------------------------------------------------------------- stats */

/* Timeouts ever queued: a schedule counts once its timeout is queued,
 * before the call returns (a call that fails never counts). */
static uint64_t queued_ever(hwt_timer *timer)
{
    uint64_t queued = 0;
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        queued += hwt__stack_pushes(&timer->stripes[i].queue);
    return queued;
}

/* Timeouts ever ended: run (or handed to the executor), cancelled, or
 * dropped or handed back by a stop. Each one's queueing is counted before
 * its end: the worker takes what was queued, a canceller holds a handle
 * the schedule returned. */
static uint64_t ended_ever(hwt_timer *timer)
{
    uint64_t ended = atomic_load(&timer->expired);
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        ended += hwt__stripe_cancelled(&timer->stripes[i]);
    return ended;
}

#define PENDING_READ_TRIES 8

static int64_t read_pending(hwt_timer *timer)
{
    /* After a stop: 0, also while a schedule that started before it sees
     * SHUTDOWN and counts itself failed. In a fork child: the parent's. */
    if (atomic_load(&timer->stopped) || hwt__inherited(timer))
        return 0;
    if (timer->max_pending > 0)
        return atomic_load_explicit(&timer->pending, memory_order_relaxed);
    /* Queued minus ended, the ends read first: every end counted has its
     * queueing counted too, so a read is never below the count at the
     * moment the ends were read. Between two equal reads of the queued
     * total (no schedule meanwhile) it is the count at some moment; while
     * schedules keep coming throughout, the lowest of a few tries (it may
     * then count some made during the call). */
    uint64_t queued = queued_ever(timer);
    uint64_t lowest = UINT64_MAX;
    for (int i = 0; i < PENDING_READ_TRIES; i++) {
        uint64_t ended = ended_ever(timer);
        uint64_t queued_after = queued_ever(timer);
        uint64_t count = queued_after - ended;
        if (queued_after == queued)
            return (int64_t)count;
        if (count < lowest)
            lowest = count;
        queued = queued_after;
    }
    return (int64_t)lowest;
}

int64_t hwt_pending_timeouts(const hwt_timer *timer)
{
    if (timer == NULL)
        return HWT_EINVAL;
    return read_pending((hwt_timer *)timer);
}

/* The ticks from the worker's start until it ended, or until now. Reads
 * never go back: each raises ticks_reported to what it reports, and the
 * worker, as it ends, marks the word final with its last count (or more,
 * if a read got further), after which every read reports that. */
static uint64_t ticks_elapsed(hwt_timer *timer)
{
    uint64_t reported = atomic_load(&timer->ticks_reported);
    if (reported & HWT_TICKS_FINAL)
        return reported & ~HWT_TICKS_FINAL;
    if (hwt__inherited(timer)) {
        /* Its worker ended at the first fork after it was made; reported
         * no further (the parent's count, kept in this copy, is not
         * written). */
        uint64_t ticks = hwt__ticks_at(timer, timer->forked_ns);
        return ticks > reported ? ticks : reported;
    }
    hwt__step_reached(HWT_STEP_STATS_CLOCK, timer);
    uint64_t ticks = hwt__ticks_at(timer, hwt__now_ns());
    while (!(reported & HWT_TICKS_FINAL) && ticks > reported &&
           !atomic_compare_exchange_weak(&timer->ticks_reported, &reported, ticks)) {
    }
    if (reported & HWT_TICKS_FINAL)
        return reported & ~HWT_TICKS_FINAL;
    return ticks > reported ? ticks : reported;
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
        stats->cancelled += hwt__stripe_cancelled(&timer->stripes[i]);
        stats->rejected += atomic_load(&timer->stripes[i].rejected);
    }
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        stats->scheduled += hwt__stack_pushes(&timer->stripes[i].queue);
    stats->wakeups = atomic_load(&timer->wakeups);
    stats->late_max_ns = atomic_load(&timer->late_max_ns);
    /* The worker's readiness alone, not the state: a fork child made while
     * the starter had yet to mark the timer STARTED inherits a worker that
     * ticked until the fork (start_ns is set before worker_ready). */
    if (timer->worker_ready)
        stats->ticks = ticks_elapsed(timer);
}

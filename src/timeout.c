/*
 * timeout.c - scheduling, handle states, reference counts and cancel.
 *
 * Shared by all threads: every function here may run concurrently with the
 * worker and with each other. A timeout's fate is decided by one CAS on its
 * state (hwt__timeout_leave_init), from HWT_TO_INIT to exactly one of:
 * EXPIRED (the worker) or CANCELLED (hwt_timeout_cancel, or the final drain
 * of a stop). Whoever wins counts the pending total down,
 * exactly once. A schedule racing a stop is settled before the drain: the
 * stop waits for every hwt_new_timeout that saw the timer running (the
 * stripes' started/queued/failed counts).
 *
 * References: the caller's handle (optional) and one "in-flight" reference
 * held by the queue, then the wheel, then whoever ends the timeout (the
 * worker, the executor, or the stop list). The timeout's memory goes back to
 * the timer's pool when both are gone; the timer's memory lives while any
 * timeout of it is out of the pool (pool.c).
 */
#include "alloc.h"
#include "internal.h"

/* Reserves one pending slot: 0, or HWT_EREJECTED over max_pending_timeouts.
 * Only limited timers need the exact total (a shared counter); unlimited
 * ones count nothing more than the stripe's `started`. */
static int reserve_pending(hwt_timer *timer, struct hwt__stripe *stripe)
{
    if (timer->max_pending <= 0)
        return 0;
    int64_t cur = atomic_load_explicit(&timer->pending, memory_order_relaxed);
    do {
        if (cur >= timer->max_pending) {
            hwt__stripe_add(&stripe->rejected, 1);
            return HWT_EREJECTED;
        }
    } while (!atomic_compare_exchange_weak_explicit(&timer->pending, &cur, cur + 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    return 0;
}

/* The number of timeouts scheduled by this thread between two looks at the
 * worker's backlog. */
#define BACKLOG_CHECK_EVERY 1024
static HWT_THREAD_LOCAL unsigned schedules_since_check;

/* Lowers the stripe's queued_min to `deadline` if it is earlier (after the
 * push: see the worker's earliest_queued). */
static void note_queued_deadline(struct hwt__stripe *stripe, int64_t deadline)
{
    int64_t min = atomic_load(&stripe->queued_min);
    while (deadline < min && !atomic_compare_exchange_weak(&stripe->queued_min, &min, deadline)) {
    }
}

/* Wakes the worker when it plans to sleep past this deadline, or when the
 * queues grow past HWT_BACKLOG_KICK. */
static void maybe_wake_for(hwt_timer *timer, int64_t deadline)
{
    if (hwt__current_worker == timer) /* it looks at the queues before sleeping */
        return;
    if (deadline < atomic_load(&timer->wake_before)) {
        hwt__kick(timer);
        return;
    }
    if (++schedules_since_check < BACKLOG_CHECK_EVERY)
        return;
    schedules_since_check = 0;
    if (hwt__queued_count(timer) >= HWT_BACKLOG_KICK)
        hwt__kick(timer);
}

/* Counts the call in its stripe's `started`, ordered before the state check
 * that follows (fences.c). */
static void announce(struct hwt__stripe *stripe)
{
    if (hwt__stripe_owned && atomic_load_explicit(&hwt__light_fences, memory_order_relaxed)) {
        hwt__stripe_add(&stripe->started, 1); /* the owner's plain store */
        atomic_signal_fence(memory_order_seq_cst);
    } else {
        atomic_fetch_add(&stripe->started, 1);
    }
}

/* Counts a schedule call that got past `started` but failed. */
static int fail(struct hwt__stripe *stripe, int rc)
{
    hwt__stripe_add(&stripe->failed, 1);
    return rc;
}

static int schedule(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled, void *arg,
                    int64_t delay, hwt_unit unit, hwt_timeout **out)
{
    int64_t unit_ns = hwt__unit_ns(unit);
    if (timer == NULL || run == NULL || unit_ns == 0)
        return HWT_EINVAL;
    int rc = hwt__timer_ensure_started(timer);
    if (rc != 0)
        return rc;
    /* Announce ourselves before looking at the state: a stop sets SHUTDOWN,
     * then its final drain waits until every announced call has queued its
     * timeout or failed, so no timeout slips in behind the drain. */
    struct hwt__stripe *stripe = hwt__my_stripe(timer);
    announce(stripe);
    if (atomic_load(&timer->state) == HWT_STATE_SHUTDOWN)
        return fail(stripe, HWT_ESTOPPED);
    /* The clock first, as Netty reads it before it allocates: a caller
     * preempted inside the call (or held up by a fresh page) gets its
     * deadline from when it called. */
    int64_t now = hwt__deadline_rel_now(timer);
    rc = reserve_pending(timer, stripe);
    if (rc != 0)
        return fail(stripe, rc);
    const struct hwt__task_pair *pair = NULL;
    if (cancelled != NULL && (pair = hwt__task_pair(timer, run, cancelled)) == NULL) {
        hwt__pending_sub(timer, 1);
        return fail(stripe, HWT_ENOMEM);
    }
    hwt_timeout *t;
    rc = hwt__timeout_alloc(timer, &t);
    if (rc != 0) {
        hwt__pending_sub(timer, 1);
        return fail(stripe, rc);
    }
    if (pair != NULL)
        t->pair = pair;
    else
        t->run = run;
    t->arg = arg;
    int64_t deadline = hwt__sat_add(now, hwt__sat_mul(delay, unit_ns));
    /* A past deadline fires on the next tick either way; keeping it at "now"
     * makes lateness (start - max(deadline, scheduled)) one subtraction. */
    if (deadline < now)
        deadline = now;
    t->deadline = deadline;
    /* The queue's in-flight reference, and the caller's handle. Once queued
     * the timeout may run and be recycled at any moment: not touched again. */
    atomic_store_explicit(&t->refs, out != NULL ? 2 : 1, memory_order_relaxed);
    atomic_store_explicit(&t->state, pair != NULL ? HWT_TO_INIT | HWT_TO_PAIR : HWT_TO_INIT,
                          memory_order_relaxed);
    /* Counted before anyone can end it (the worker, or a canceller with the
     * handle): hwt_timer_stats reads ends before starts. */
    hwt__stripe_add(&stripe->scheduled, 1);
    if (out != NULL)
        *out = t;

    hwt__stack_push(&stripe->queue, &t->queue_link);
    note_queued_deadline(stripe, deadline);
    hwt__stripe_add(&stripe->queued, 1);
    maybe_wake_for(timer, deadline);
    return 0;
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

bool hwt_timeout_cancel(hwt_timeout *timeout)
{
    if (timeout == NULL)
        return false;
    uint32_t now;
    if (!hwt__timeout_leave_init(timeout, HWT_TO_CANCELLED, &now))
        return false;
    hwt_timer *timer = hwt__timer_of(timeout);
    struct hwt__stripe *stripe = hwt__my_stripe(timer);
    hwt__pending_sub(timer, 1);
    hwt__stripe_add(&stripe->cancelled, 1);
    if (hwt__cancel_was_pushed(now))
        hwt__stack_push(&stripe->cancels, &timeout->stack_link);
    /* The worker unlinks it (or drops it from the queue) within max(tick,
     * 100 ms); wake it only if it planned a longer sleep, and only once per
     * sleep. */
    if (hwt__current_worker != timer && !atomic_load(&timer->cancel_watch))
        hwt__kick(timer);
    return true;
}

bool hwt_timeout_is_cancelled(const hwt_timeout *timeout)
{
    return timeout != NULL && (atomic_load(&timeout->state) & HWT_TO_LIFE) == HWT_TO_CANCELLED;
}

bool hwt_timeout_is_expired(const hwt_timeout *timeout)
{
    return timeout != NULL && (atomic_load(&timeout->state) & HWT_TO_LIFE) == HWT_TO_EXPIRED;
}

hwt_timer *hwt_timeout_timer(const hwt_timeout *timeout)
{
    return timeout != NULL ? hwt__timer_of(timeout) : NULL;
}

hwt_task_fn hwt_timeout_task(const hwt_timeout *timeout)
{
    return timeout != NULL ? hwt__task_run(timeout, atomic_load(&timeout->state)) : NULL;
}

void *hwt_timeout_arg(const hwt_timeout *timeout)
{
    return timeout != NULL ? timeout->arg : NULL;
}

void hwt__record_lateness(hwt_timer *timer, const hwt_timeout *timeout)
{
    /* The deadline clock (never behind, ~0.25 us ahead) for a statistic: a
     * clock_gettime per expired timeout cost the worker 13% of its CPU in
     * `hwt-bench expire`. Never for deciding what is due (worker.c). */
    int64_t late = hwt__deadline_rel_now(timer) - timeout->deadline;
    if (late <= 0)
        return;
    uint64_t cur = atomic_load_explicit(&timer->late_max_ns, memory_order_relaxed);
    while ((uint64_t)late > cur &&
           !atomic_compare_exchange_weak_explicit(&timer->late_max_ns, &cur, (uint64_t)late,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

void hwt_timeout_run(hwt_timeout *timeout)
{
    if (timeout == NULL)
        return;
    uint32_t prev = atomic_fetch_and(&timeout->state, ~(uint32_t)HWT_TO_EXEC_ARMED);
    if (!(prev & HWT_TO_EXEC_ARMED))
        return;
    hwt__record_lateness(hwt__timer_of(timeout), timeout);
    hwt__task_run(timeout, prev)(timeout, timeout->arg);
    hwt__timeout_unref(timeout);
}

void hwt__run_cancelled_callback(hwt_timeout *timeout)
{
    if (atomic_load_explicit(&timeout->state, memory_order_relaxed) & HWT_TO_PAIR)
        timeout->pair->cancelled(timeout, timeout->arg);
}

void hwt__timeout_unref(hwt_timeout *timeout)
{
    uint16_t prev = atomic_fetch_sub_explicit(&timeout->refs, 1, memory_order_acq_rel);
#ifdef HWT_DEBUG
    if (prev == 0) { /* caught, reported, and ignored: the memory stays pooled */
        atomic_fetch_add_explicit(&timeout->refs, 1, memory_order_relaxed);
        hwt__log(hwt__timer_of(timeout), HWT_LOG_ERROR,
                 "hwt_timeout_release: timeout %p released more often than referenced",
                 (void *)timeout);
        return;
    }
#endif
    if (prev == 1) {
        hwt_timer *timer = hwt__timer_of(timeout);
        hwt__timeout_free(timer, timeout);
    }
}

void hwt_timeout_release(hwt_timeout *timeout)
{
    if (timeout != NULL)
        hwt__timeout_unref(timeout);
}

void hwt_timeouts_release(hwt_timeout **timeouts, size_t count)
{
    if (timeouts == NULL)
        return;
    for (size_t i = 0; i < count; i++)
        hwt_timeout_release(timeouts[i]);
    hwt__free(timeouts);
}

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
 * stripes' started and failed counts, and what the worker took).
 *
 * References: the caller's handle (optional) and one "in-flight" reference
 * held by the queue, then the wheel, then whoever ends the timeout (the
 * worker, the executor, or the stop list). The timeout's memory goes back to
 * the timer's pool when both are gone; the timer's memory lives while any
 * timeout of it is out of the pool (pool.c).
 */
#include <pthread.h>
#include <sched.h>

#include "alloc.h"
#include "internal.h"
#include "steps.h"

/* Counts a refusal for max_pending_timeouts: HWT_EREJECTED. */
static int refuse(struct hwt__stripe *stripe)
{
    hwt__stripe_add(&stripe->rejected, 1);
    return HWT_EREJECTED;
}

/* Whether max_pending_timeouts is reached now (a snapshot). */
static bool pending_full(hwt_timer *timer)
{
    return timer->max_pending > 0 &&
           atomic_load_explicit(&timer->pending, memory_order_relaxed) >= timer->max_pending;
}

/* Reserves one pending slot: 0, or HWT_EREJECTED over max_pending_timeouts.
 * Only limited timers need the exact total (a shared counter); unlimited
 * ones count nothing more than the stripe's `started`. */
static int reserve_pending(hwt_timer *timer, struct hwt__stripe *stripe)
{
    if (timer->max_pending <= 0)
        return 0;
    int64_t cur = atomic_load_explicit(&timer->pending, memory_order_relaxed);
    do {
        if (cur >= timer->max_pending)
            return refuse(stripe);
    } while (!atomic_compare_exchange_weak_explicit(&timer->pending, &cur, cur + 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    return 0;
}

/* Lowers the stripe's queued_min to `deadline` if it is earlier (after the
 * push: see the worker's earliest_queued). */
static void note_queued_deadline(struct hwt__stripe *stripe, int64_t deadline)
{
    int64_t min = atomic_load(&stripe->queued_min);
    while (deadline < min && !atomic_compare_exchange_weak(&stripe->queued_min, &min, deadline)) {
    }
}

/* Wakes the worker when it plans to sleep past this deadline; and, for a
 * schedule whose push (`pushes`: its stripe's count with it, 0 for none)
 * lands on the look interval (backlog_check_mask), when the queues grow
 * past the timer's backlog_kick (hwt__backlog_kick), or when they hold a
 * transfer budget and it plans to sleep past the cancel latency (it then
 * moves them within the latency, after the burst: hwt__plan_backlog_waits). */
static void maybe_wake_for(hwt_timer *timer, int64_t deadline, uint64_t pushes)
{
    if (hwt__current_worker == timer) /* it looks at the queues before sleeping */
        return;
    if (deadline < atomic_load(&timer->wake_before)) {
        hwt__kick_worker(timer);
        return;
    }
    if (pushes == 0 || (pushes & timer->backlog_check_mask) != 0)
        return;
    uint64_t queued = hwt__queued_count(timer);
    if (queued >= timer->backlog_kick ||
        (queued >= timer->max_transfers && !atomic_load(&timer->cancel_watch)))
        hwt__kick_worker(timer);
}

/* Counts the call in its stripe's `started`. Sequentially consistent, as
 * the state check that follows it and the stop's SHUTDOWN store and reads
 * of `started` (worker.c, wait_for_producers): of a stop and a schedule
 * racing, at least one sees the other's store. */
static void announce(struct hwt__stripe *stripe)
{
    atomic_fetch_add(&stripe->started, 1);
}

/* Counts a schedule call that got past `started` but failed. */
static int fail(struct hwt__stripe *stripe, int rc)
{
    hwt__stripe_add(&stripe->failed, 1);
    return rc;
}

int hwt__schedule(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled, void *arg,
                  int64_t delay_ns, hwt_timeout **out)
{
    /* Announce ourselves before looking at the state: a stop sets SHUTDOWN,
     * then its final drain waits until every announced call has queued its
     * timeout or failed, so no timeout slips in behind the drain. */
    hwt__step_reached(HWT_STEP_SCHEDULE_STARTED, timer);
    struct hwt__stripe *stripe = hwt__my_stripe(timer);
    announce(stripe);
    hwt__step_reached(HWT_STEP_SCHEDULE_ANNOUNCED, timer);
    if (atomic_load(&timer->state) == HWT_STATE_SHUTDOWN)
        return fail(stripe, HWT_ESTOPPED);
    /* The clock first, as Netty reads it before it allocates: a caller
     * preempted inside the call (or held up by a fresh page) gets its
     * deadline from when it called. */
    int64_t abs_now = hwt__now_ns();
    int64_t now = abs_now - timer->start_ns;
    /* Refused at once while the limit is reached: a refused call changes
     * nothing (no task interned, no cache bound, no memory taken). The slot
     * itself is taken after the allocation (below). */
    if (pending_full(timer))
        return fail(stripe, refuse(stripe));
    uint16_t task;
    if (!hwt__task_intern(timer, run, cancelled, &task))
        return fail(stripe, HWT_ENOMEM);
    hwt_timeout *t;
    int no_key = 0;
    int rc = hwt__timeout_alloc(timer, abs_now, &t, &no_key);
    if (rc != 0) {
        if (rc != HWT_ESYS)
            return fail(stripe, rc);
        /* Logged once the call counts as failed: a stop's final drain waits
         * for every call it counted as started, and the log callback may
         * stop the timer (or wait on a thread that does). A reference keeps
         * the timer for the log should a destroy end it meanwhile. */
        hwt__timer_ref_n(timer, 1);
        fail(stripe, rc);
        hwt__pool_log_no_key(timer, no_key);
        hwt__timer_unref_n(timer, 1);
        return rc;
    }
    /* The pending slot last: a call that fails for memory (a new region
     * can take a while) never holds one that another call is refused for. */
    rc = reserve_pending(timer, stripe);
    if (rc != 0) {
        hwt__timeout_free(timer, t);
        return fail(stripe, rc);
    }
    t->task = task;
    t->arg = arg;
    int64_t deadline = hwt__sat_add(now, delay_ns);
    /* A past deadline fires on the next tick either way; keeping it at "now"
     * makes lateness (start - max(deadline, scheduled)) one subtraction. */
    if (deadline < now)
        deadline = now;
    t->node.deadline = deadline;
    /* The queue's in-flight reference, and the caller's handle. Once queued
     * the timeout may run and be recycled at any moment: not touched again. */
    atomic_store_explicit(&t->refs, out != NULL ? 2 : 1, memory_order_relaxed);
    atomic_store_explicit(&t->state,
                          cancelled != NULL ? HWT_TO_INIT | HWT_TO_CANCEL_CB : HWT_TO_INIT,
                          memory_order_relaxed);
    if (out != NULL)
        *out = t;

    hwt__step_reached(HWT_STEP_SCHEDULE_ADMITTED, timer);
    /* The push counts it scheduled: before anyone can end it (the worker
     * takes it from the queue; a canceller needs the handle, returned
     * after), as hwt_timer_stats, reading ends before starts, needs. */
    uint64_t pushes = hwt__stack_push_counted(&stripe->queue, &t->queue_link);
    note_queued_deadline(stripe, deadline);
    maybe_wake_for(timer, deadline, pushes);
    return 0;
}

bool hwt_timeout_cancel(hwt_timeout *timeout)
{
    if (timeout == NULL)
        return false;
    hwt_timer *timer = hwt__timer_of(timeout);
    uint32_t now;
    if (hwt__inherited(timer) || !hwt__timeout_leave_init(timeout, HWT_TO_CANCELLED, &now))
        return false;
    struct hwt__stripe *stripe = hwt__my_stripe(timer);
    hwt__pending_sub(timer, 1);
    /* Counted before we return (the pending count drops at once): by the
     * push, or else by the stripe's counter. */
    if (hwt__cancel_was_pushed(now))
        hwt__stack_push_counted(&stripe->cancels, &timeout->stack_link);
    else
        hwt__stripe_add(&stripe->cancelled, 1);
    /* The worker unlinks it (or drops it from the queue) within max(tick,
     * 100 ms); wake it only if it planned a longer sleep, and only once per
     * sleep. */
    if (hwt__current_worker != timer && !atomic_load(&timer->cancel_watch))
        hwt__kick_worker(timer);
    return true;
}

/* ------------------------------------------------------------ reschedule
 *
 * Later (the idle-timeout case, the common one): one CAS, on the deadline,
 * from the one it was compared with. It keeps a move from writing over
 * another's deadline that it was never compared with (two later moves at
 * once: the worker could file, or expire, the timeout by the loser's,
 * earlier than a move that returned true); failing, the call compares
 * again, and may go the earlier way below. The worker, before it expires a
 * timeout, claims the deadline it found due with a CAS of its own
 * (worker.c, expire): of the two, one wins. If the move wins, the claim
 * fails and the worker reads the later deadline; if the claim wins, the
 * move finds it and goes the earlier way: false if the worker marks the
 * timeout expired first (nothing changed: an executor's run measures
 * lateness by the deadline the worker found), true if its BUSY count comes
 * first (the worker's CAS on the state then fails, and it files the
 * timeout by the move's deadline). The timeout stays in its old slot
 * meanwhile: when that slot comes due the worker finds the later deadline
 * and files it again, once. A cancel or a stop between the call's look at
 * the state and its CAS does not stop it: the move came first, and the
 * timeout ends by them all the same.
 *
 * Earlier, or while other calls are writing (BUSY): add one to the BUSY
 * count (and bump the generation) first, then write (an exchange, which
 * gives the deadline it replaced), then take the one away - the worker
 * expires nothing while the count is not zero, so it cannot act on a
 * deadline that this call may still lose to a cancel or an expiry, or that
 * another call writing at once may still write over. The last to write
 * decides, and every call that released returns true. Then, as the slot
 * may be later than the new deadline (the old one's, or one the worker
 * filed it by meanwhile), the timeout goes on this thread's moved stack
 * (with a reference) for the worker to file it again, once its count is
 * back to zero: by a call whose deadline is earlier than the one it
 * replaced, and by any that wrote while others did (what it replaced may
 * be theirs, not the slot's). A cancel or a stop may win
 * while the count is not zero: the call then returns false (what it wrote
 * is never read: the timeout will not run). */

static int64_t new_deadline(hwt_timer *timer, int64_t delay_ns)
{
    int64_t now = hwt__rel_now(timer);
    int64_t deadline = hwt__sat_add(now, delay_ns);
    return deadline < now ? now : deadline;
}

/* Writes `deadline` and returns the one it replaced (claim bit cleared).
 * One exchange, not a read then a store: a move later's CAS (which counts
 * in no BUSY) landing between the two would be overwritten unseen, and the
 * worker may have filed the timeout by that later deadline meanwhile - we
 * would compare with the older one, find ours later, and not tell it. */
static int64_t exchange_deadline(hwt_timeout *t, int64_t deadline)
{
    return __atomic_exchange_n(&t->node.deadline, deadline, __ATOMIC_RELAXED) & INT64_MAX;
}

/* Writes `deadline` if the timeout's is still *expected; else false, with
 * the current one in *expected. */
static bool replace_deadline(hwt_timeout *t, int64_t *expected, int64_t deadline)
{
    return __atomic_compare_exchange_n(&t->node.deadline, expected, deadline, false,
                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* Wakes the worker if it plans to sleep past `deadline`, with the
 * timeout's entry on a moved stack (ours, or one an earlier move left). The
 * push before the read of its plan (see the worker's moved_waiting).
 * A call that pushed (`released`: the state its release wrote, MOVED set)
 * wakes it in any case if, between that release and the push, another call
 * moved the timeout earlier (a later generation) or a cancel won: seeing
 * MOVED, each left the entry to ours and woke the worker, which may have
 * found no entry yet and planned its sleep without it - past the other
 * call's deadline, or the cancel's latency. */
static void wake_for_moved(hwt_timer *timer, hwt_timeout *t, int64_t deadline, bool pushed,
                           uint32_t released)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (pushed) {
        uint32_t s = atomic_load(&t->state); /* ours: the caller holds a handle */
        if ((s & HWT_TO_GEN_MASK) != (released & HWT_TO_GEN_MASK) ||
            (s & HWT_TO_LIFE) == HWT_TO_CANCELLED) {
            hwt__kick_worker(timer);
            return;
        }
    }
    maybe_wake_for(timer, deadline, 0);
}

static bool reschedule_claimed(hwt_timer *timer, hwt_timeout *t, int64_t deadline, uint32_t s)
{
    uint32_t mine;
    for (;;) { /* claim: one more call writing */
        if ((s & HWT_TO_LIFE) != HWT_TO_INIT)
            return false;
        if ((s & HWT_TO_BUSY) == HWT_TO_BUSY) {
            /* HWT_TO_BUSY_MAX (63) calls writing this timeout at once, each
             * preempted in those few instructions: wait for one to finish.
             * The one place a reschedule waits for another thread. */
            sched_yield();
            s = atomic_load(&t->state);
            continue;
        }
        mine = s + HWT_TO_BUSY_ONE + HWT_TO_GEN;
        if (atomic_compare_exchange_weak(&t->state, &s, mine))
            break;
    }
    /* Others writing at once: the slot the timeout sits in may be later
     * than anything `before` says, so we tell as for an earlier one. */
    bool others = (s & HWT_TO_BUSY) != 0;
    hwt__step_reached(HWT_STEP_RESCHEDULE_CLAIMING, timer);
    int64_t before = exchange_deadline(t, deadline);
    hwt__step_reached(HWT_STEP_RESCHEDULE_CLAIMED, timer);
    uint32_t cur = mine;
    for (;;) { /* release */
        if ((cur & HWT_TO_LIFE) != HWT_TO_INIT)
            return false; /* a cancel or a stop won */
        bool tell = deadline < before || others ||
                    (cur & HWT_TO_GEN_MASK) != (mine & HWT_TO_GEN_MASK) || /* claimed since */
                    (cur & HWT_TO_BUSY) != HWT_TO_BUSY_ONE;
        bool push = tell && !(cur & HWT_TO_MOVED); /* else an entry is on its way */
        uint32_t next = cur - HWT_TO_BUSY_ONE + (push ? HWT_TO_MOVED : 0);
        if (atomic_compare_exchange_weak(&t->state, &cur, next)) {
            if (push) {
                hwt__step_reached(HWT_STEP_RESCHEDULE_TOLD, timer);
                atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed); /* the stack's */
                hwt__stack_push_upmc(&hwt__my_stripe(timer)->moved, &t->stack_link);
            }
            if (tell)
                wake_for_moved(timer, t, deadline, push, next);
            return true;
        }
    }
}

bool hwt_timeout_reschedule(hwt_timeout *timeout, int64_t delay, hwt_unit unit)
{
    int64_t unit_ns = hwt__unit_ns(unit);
    if (timeout == NULL || unit_ns == 0)
        return false;
    hwt_timer *timer = hwt__timer_of(timeout);
    if (hwt__inherited(timer))
        return false;
    uint32_t s = atomic_load(&timeout->state);
    if ((s & HWT_TO_LIFE) != HWT_TO_INIT) /* expired (also: from its own task), cancelled */
        return false;
    int64_t deadline = new_deadline(timer, hwt__sat_mul(delay, unit_ns));
    int64_t seen = hwt__deadline_word(timeout);
    while ((s & HWT_TO_LIFE) == HWT_TO_INIT && !(s & HWT_TO_BUSY) && !hwt__deadline_claimed(seen) &&
           deadline >= seen) {
        hwt__step_reached(HWT_STEP_RESCHEDULE_COMPARED, timer);
        /* Only over the deadline compared with: else another move wrote
         * since, and ours may be earlier than that one (compare again), or
         * the worker claimed it to expire the timeout (the earlier way:
         * false once it has, or written under BUSY if it backs off). */
        if (replace_deadline(timeout, &seen, deadline))
            return true;
        s = atomic_load(&timeout->state);
    }
    return reschedule_claimed(timer, timeout, deadline, s);
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
    return timeout != NULL ? hwt__task_of(hwt__timer_of(timeout), timeout)->run : NULL;
}

void *hwt_timeout_arg(const hwt_timeout *timeout)
{
    return timeout != NULL ? timeout->arg : NULL;
}

void hwt__record_lateness(hwt_timer *timer, int64_t deadline)
{
    int64_t late = hwt__rel_now(timer) - deadline;
    if (late <= 0)
        return;
    uint64_t cur = atomic_load_explicit(&timer->late_max_ns, memory_order_relaxed);
    while ((uint64_t)late > cur &&
           !atomic_compare_exchange_weak_explicit(&timer->late_max_ns, &cur, (uint64_t)late,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

static void unref_on_unwind(void *timeout)
{
    hwt__timeout_unref(timeout);
}

void hwt_timeout_run(hwt_timeout *timeout)
{
    if (timeout == NULL)
        return;
    hwt_timer *timer = hwt__timer_of(timeout);
    if (hwt__inherited(timer)) /* the parent's executor runs it */
        return;
    uint32_t prev = atomic_fetch_and(&timeout->state, ~(uint32_t)HWT_TO_EXEC_ARMED);
    if (!(prev & HWT_TO_EXEC_ARMED))
        return;
    hwt__record_lateness(timer, hwt__deadline_of(timeout));
    /* An executor's thread runs this timer's timeouts again and again, and
     * frees each one whose handle is gone: into a cache of its own, as a
     * scheduling thread's frees go, not one by one into the depot under its
     * lock (5 times the CPU per run with two such threads). Not for a
     * stopped timer: nothing will allocate from its pool again, and the
     * binding would keep it (destroyed, too) while the thread idles. A stop
     * may come between the look and the bind: looked at again after it (the
     * executor's reference keeps the timer). */
    if (!hwt__pool_thread_bound(timer) &&
        atomic_load_explicit(&timer->state, memory_order_relaxed) != HWT_STATE_SHUTDOWN &&
        hwt__pool_bind_thread(timer) == 0 && atomic_load(&timer->state) == HWT_STATE_SHUTDOWN)
        hwt__pool_forget_thread(timer);
    /* The task may end the executor's thread (a pthread_cancel acted on at
     * a cancellation point, pthread_exit): the executor's reference goes all
     * the same, or the timeout, and the timer with it, would never be freed. */
    pthread_cleanup_push(unref_on_unwind, timeout);
    hwt__task_of(timer, timeout)->run(timeout, timeout->arg);
    pthread_cleanup_pop(1);
}

void hwt__run_cancelled_callback(hwt_timeout *timeout)
{
    if (atomic_load_explicit(&timeout->state, memory_order_relaxed) & HWT_TO_CANCEL_CB) {
        hwt_timer *timer = hwt__timer_of(timeout);
        hwt__task_of(timer, timeout)->cancelled(timeout, timeout->arg);
        hwt__end_forked_worker(timer); /* always on the worker */
    }
}

/* Only a holder of a reference ever adds one (a reschedule holds the
 * user's handle, the worker its in-flight one), so a count of 1 read by
 * the holder of that 1 cannot change under it: the last reference goes
 * without a locked operation. The acquire pairs with the other holders'
 * decrements (acq_rel), so their writes come before the free. That is the
 * common case on the worker, which drops each cancelled timeout after its
 * user has released it; the locked decrement there cost over a third of
 * the worker's walk (bench/README.md, "The last reference"). A debug build
 * always decrements: of two releases racing for the last reference (one
 * too many, a bug), exactly one then reads 0 and is caught. */
void hwt__timeout_unref(hwt_timeout *timeout)
{
#ifdef HWT_DEBUG
    uint8_t prev = atomic_fetch_sub_explicit(&timeout->refs, 1, memory_order_acq_rel);
    if (prev == 0) { /* caught, reported, and ignored: the memory stays pooled */
        atomic_fetch_add_explicit(&timeout->refs, 1, memory_order_relaxed);
        hwt__log(hwt__timer_of(timeout), HWT_LOG_ERROR,
                 "hwt_timeout_release: timeout %p released more often than referenced",
                 (void *)timeout);
        return;
    }
#else
    uint8_t prev = atomic_load_explicit(&timeout->refs, memory_order_acquire);
    if (prev != 1)
        prev = atomic_fetch_sub_explicit(&timeout->refs, 1, memory_order_acq_rel);
#endif
    if (prev == 1) {
        hwt_timer *timer = hwt__timer_of(timeout);
        /* In a fork child an inherited timer's pool may be mid-change: its
         * memory is the parent's business, the child's copy is left alone. */
        if (!hwt__inherited(timer))
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
    hwt__array_free(timeouts); /* hwt_stop's, from stopset.c */
}

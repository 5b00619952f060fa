/*
 * worker.c - the worker thread: wait for a tick's end, drain cancellations,
 * transfer new timeouts into the wheel, expire what is due; and the final
 * drain when the timer stops.
 *
 * Runs on the worker thread only (timer->worker, struct hwt__worker, is its
 * alone). This file acts; what to do and when to sleep is decided by the
 * pure functions of worker_policy.h, from a snapshot taken here. It meets
 * other threads through the queues (stacks.h), the timeout state CAS
 * (timeout.c) and a few atomics of the timer:
 *
 *   wake_before   before sleeping the worker publishes the start of the tick
 *                 it will wake for; a producer whose deadline is earlier wakes
 *                 it (INT64_MIN while awake: it will look at the queue anyway).
 *   queued_min    per stripe, the earliest deadline queued since the worker
 *                 took the stripe's stack: the worker does not sleep past it.
 *   cancel_watch  1 if the worker will wake within max(tick, 100 ms) anyway;
 *                 otherwise the first canceller wakes it, and so does a
 *                 producer that finds a budget of new timeouts queued.
 *   kicked        wake_seq as the last kick left it, once its wake-up call
 *                 returned: a waker that finds it equal to wake_seq needs
 *                 no system call (hwt__kick_worker).
 *   wake_seq      the futex word: a waker increments it, then wakes; the
 *                 worker increments it as it plans, which makes every kick
 *                 noted before stale.
 *
 * No lost wake-up: the worker publishes wake_before/cancel_watch, bumps
 * wake_seq (its key), and only then checks the queues (queued_min, the
 * cancel stacks) and the state; a waker makes its change visible (enqueue and
 * queued_min, push, SHUTDOWN) before it reads wake_before/cancel_watch and
 * bumps wake_seq. Either the worker sees the change, or the waker sees the
 * plan and the futex wait returns at once. New timeouts due after the planned
 * wake-up stay queued until then, or for the cancel latency at most (a
 * budget of them wakes a worker that plans a longer sleep, to be moved
 * within the latency; timer->backlog_kick of them, at once): looping
 * for them would keep the worker moving timeouts one by one as producers
 * push them, on the CPUs and cache lines the producers need.
 */
#define _GNU_SOURCE
#include <ck_pr.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include "internal.h"
#include "os.h"
#include "steps.h"
#include "worker_policy.h"

HWT_THREAD_LOCAL hwt_timer *hwt__current_worker;

/* ---------------------------------------------------------- cancellation */

/* The queue or the wheel let go of a timeout that a user cancelled (its
 * cancellation may not be processed yet). Drops the in-flight reference once
 * nothing else is owed. */
static void let_go_cancelled(hwt_timer *timer, hwt_timeout *t)
{
    t->wflags |= HWT_W_RELEASED;
    uint32_t state = atomic_load_explicit(&t->state, memory_order_relaxed);
    if (!hwt__cancel_notice_owed(state) || (t->wflags & HWT_W_CANCEL_DONE))
        hwt__timeout_unref(t);
    else
        timer->worker.awaiting_cancel++; /* process_cancels drops it */
}

/* Sets or clears a timeout's HWT_W_DEFERRED and keeps worker.deferred, the
 * count of them that the final drain waits for, in step. */
static void set_deferred(hwt_timer *timer, hwt_timeout *t, bool deferred)
{
    if (((t->wflags & HWT_W_DEFERRED) != 0) == deferred)
        return;
    t->wflags ^= HWT_W_DEFERRED;
    if (deferred)
        timer->worker.deferred++;
    else
        timer->worker.deferred--;
}

/* A timeout the worker ends (runs it, or takes it for a stop) with MOVED in
 * `state`, the state it ended it from: a reschedule's entry for it is on a
 * moved stack, or about to be pushed there (the reschedule set MOVED and
 * has yet to take its reference and push). The final drain waits for that
 * entry (worker.awaiting_moved): pushed after the worker has gone, it
 * would keep its reference, and the timeout and its timer, for good. */
static void owe_moved_entry(hwt_timer *timer, hwt_timeout *t, uint32_t state)
{
    if (!(state & HWT_TO_MOVED))
        return;
    t->wflags |= HWT_W_MOVED_OWED;
    timer->worker.awaiting_moved++;
}

/* The worker hears of a user's cancel (from its canceller's push, or from
 * the moved stack it was on): unlinks it, calls its cancelled callback, and
 * drops the in-flight reference unless the queue still holds it. */
static void cancel_noticed(hwt_timer *timer, hwt_timeout *t)
{
    t->wflags |= HWT_W_CANCEL_DONE;
    if (hwt__timeout_in_wheel(t)) {
        hwt__wheel_unlink(&timer->worker.wheel, &t->node);
        t->wflags |= HWT_W_RELEASED;
        hwt__run_cancelled_callback(t);
        hwt__timeout_unref(t);
    } else if (t->wflags & HWT_W_DEFERRED) { /* out of the wheel, for a reschedule */
        set_deferred(timer, t, false);
        t->wflags |= HWT_W_RELEASED;
        hwt__run_cancelled_callback(t);
        hwt__timeout_unref(t);
    } else if (t->wflags & HWT_W_RELEASED) {
        timer->worker.awaiting_cancel--;
        hwt__run_cancelled_callback(t);
        hwt__timeout_unref(t);
    } else {
        /* Still queued (it has a cancelled callback, or a reschedule queued
         * it on a moved stack): transfer will drop it. */
        hwt__run_cancelled_callback(t);
    }
}

/* Unlinks cancelled timeouts and calls their cancelled callbacks, in the
 * order each thread cancelled them. Returns how many. Not those cancelled
 * while on a moved stack (rescheduled earlier, not yet filed again): their
 * one stack link is taken, so process_moved hears of their cancel, after
 * this (the SPEC promises no order of cancelled callbacks).
 *
 * One walk down each stack, newest first: only the callbacks' order shows,
 * so a timeout without a cancelled callback is let go as the walk meets it,
 * and those with one are put in order on the way (pushed onto a list that
 * comes out oldest first). Reversing the whole stack first would walk it
 * twice, and a tick's cancels can be megabytes: each timeout would be
 * fetched from memory twice, one after another down a chain of pointers. */
static size_t process_cancels(hwt_timer *timer)
{
    size_t n = 0;
    for (unsigned i = 0; i < HWT_STRIPES; i++) {
        ck_stack_t *cancels = &timer->stripes[i].cancels;
        if (hwt__stack_is_empty(cancels)) /* no write: its line holds the stripe's counters */
            continue;
        ck_stack_entry_t *with_callback = NULL; /* oldest first */
        for (ck_stack_entry_t *e = hwt__stack_take_all_upmc(cancels), *next; e != NULL; e = next) {
            n++;
            next = e->next;
            hwt_timeout *t = hwt__timeout_of_stack(e);
            if (atomic_load_explicit(&t->state, memory_order_relaxed) & HWT_TO_CANCEL_CB) {
                e->next = with_callback;
                with_callback = e;
            } else {
                cancel_noticed(timer, t);
            }
        }
        for (ck_stack_entry_t *e = with_callback, *next; e != NULL; e = next) {
            next = e->next;
            cancel_noticed(timer, hwt__timeout_of_stack(e));
        }
    }
    return n;
}

/* ---------------------------------------------------------- reschedules */

/* Takes a timeout out of the wheel's way while reschedules write it (BUSY:
 * its deadline is being written): it waits on the worker's own list
 * (worker.busy), with a reference, and is filed again at a later pass.
 * Unless it is on a moved stack already, or about to be (MOVED: the
 * reschedule that set it pushes next), whose entry will do the same: the
 * final drain waits for that entry (worker.deferred). MOVED is set only
 * while the timeout is pending: a cancel that won since the caller saw BUSY
 * has pushed the timeout's one stack link on its cancel stack, so it is let
 * go as any cancelled timeout. Not on a moved stack: an entry there keeps
 * the worker from sleeping, and a reschedule preempted (or stopped in a
 * debugger) in its write would have the worker pass and defer it again at
 * full speed for as long; the reschedule tells us only if it moves the
 * timeout earlier, so the worker looks again by the end of each tick
 * (hwt__plan_busy_check). */
static void defer_moved(hwt_timer *timer, hwt_timeout *t)
{
    hwt__step_reached(HWT_STEP_WORKER_DEFERS, timer);
    if (hwt__timeout_in_wheel(t))
        hwt__wheel_unlink(&timer->worker.wheel, &t->node);
    uint32_t s = atomic_load(&t->state);
    do {
        if ((s & HWT_TO_LIFE) != HWT_TO_INIT) {
            set_deferred(timer, t, false);
            let_go_cancelled(timer, t);
            return;
        }
    } while (!(s & HWT_TO_MOVED) && !atomic_compare_exchange_weak(&t->state, &s, s | HWT_TO_MOVED));
    set_deferred(timer, t, true);
    if (s & HWT_TO_MOVED)
        return;
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    t->stack_link.next = timer->worker.busy;
    timer->worker.busy = &t->stack_link;
}

/* Files again, by its deadline as it is now, each timeout that a reschedule
 * moved earlier (its old slot may be later) or that was deferred; learns of
 * the cancels that found one on a moved stack. Each entry holds a reference.
 * In the final drain (`stopping`) what is out of the wheel is taken for the
 * stop instead. Those still queued (not yet moved into the wheel) lower
 * moved_queued_min: the ticks are not processed past them before the
 * transfer has moved them. */
static void take_for_stop(void *ctx, hwt_timeout *t);
static bool expire(hwt_timer *timer, hwt_timeout *t, int64_t due_before);

/* Processes the cancels let wait (hwt__plan_cancels_wait), if any: before a
 * task of a tick that they may have been made before, as each tick's order
 * has it. */
static void end_cancels_wait(hwt_timer *timer)
{
    struct hwt__worker *w = &timer->worker;
    if (w->cancels_wait < 0)
        return;
    w->pass_cancels += process_cancels(timer);
    w->cancels_wait = -1;
}

/* Files a timeout that is out of the wheel by its deadline, or runs it at
 * once if that is due in a tick already processed (before cur: one that a
 * pass processed while this timeout was still queued or on a moved stack):
 * placed, it would wait for cur's end, more than a tick after its deadline.
 * The cancels let wait go first: some may be from before that tick ended. */
static void file_or_run(hwt_timer *timer, hwt_timeout *t)
{
    int64_t overdue_before = timer->worker.wheel.cur * timer->tick_ns;
    if (hwt__deadline_of(t) >= overdue_before) {
        hwt__wheel_place(&timer->worker.wheel, &t->node);
        return;
    }
    end_cancels_wait(timer);
    if (!expire(timer, t, overdue_before))
        hwt__wheel_place(&timer->worker.wheel, &t->node);
}

/* One entry of a moved stack or of worker.busy, with its reference. */
static void file_moved(hwt_timer *timer, hwt_timeout *t, bool stopping)
{
    uint32_t s = atomic_fetch_and(&t->state, ~(uint32_t)HWT_TO_MOVED);
    bool deferred = (t->wflags & HWT_W_DEFERRED) != 0;
    if ((s & HWT_TO_LIFE) == HWT_TO_INIT) {
        if (!(s & HWT_TO_TRANSFERRED)) {
            /* Queued, or taken and not moved yet: the bounds the queues
             * were planned by may be later (see last_before_queued). */
            int64_t d = hwt__deadline_of(t);
            if (d < timer->worker.moved_queued_min)
                timer->worker.moved_queued_min = d;
        } else if (stopping) {
            if (deferred) {
                set_deferred(timer, t, false);
                take_for_stop(timer, t);
            }
        } else if (s & HWT_TO_BUSY) {
            defer_moved(timer, t); /* its own reference */
        } else {
            if (hwt__timeout_in_wheel(t))
                hwt__wheel_unlink(&timer->worker.wheel, &t->node);
            set_deferred(timer, t, false);
            file_or_run(timer, t);
        }
    } else if (t->wflags & HWT_W_MOVED_OWED) {
        /* Run, or the stop has it: only the reference. */
        t->wflags &= ~(uint8_t)HWT_W_MOVED_OWED;
        timer->worker.awaiting_moved--;
    } else if ((s & HWT_TO_LIFE) == HWT_TO_CANCELLED && !(t->wflags & HWT_W_CANCEL_DONE)) {
        cancel_noticed(timer, t); /* its canceller saw MOVED and left it to us */
    }
    hwt__timeout_unref(t);
}

/* Each entry of a chain taken from a moved stack or from worker.busy. */
static void file_chain(hwt_timer *timer, ck_stack_entry_t *e, bool stopping)
{
    for (ck_stack_entry_t *next; e != NULL; e = next) {
        next = e->next;
        file_moved(timer, hwt__timeout_of_stack(e), stopping);
    }
}

static void process_moved(hwt_timer *timer, bool stopping)
{
    /* Those deferred at earlier passes first: deferred again, they go on
     * a new list. */
    ck_stack_entry_t *busy = timer->worker.busy;
    timer->worker.busy = NULL;
    file_chain(timer, busy, stopping);
    for (unsigned i = 0; i < HWT_STRIPES; i++) {
        ck_stack_t *moved = &timer->stripes[i].moved;
        if (!hwt__stack_is_empty(moved))
            file_chain(timer, hwt__stack_reverse(hwt__stack_take_all_upmc(moved)), stopping);
    }
}

static bool cancels_waiting(hwt_timer *timer)
{
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        if (!hwt__stack_is_empty(&timer->stripes[i].cancels))
            return true;
    return false;
}

/* Whether a reschedule queued a timeout since process_moved took the moved
 * stacks. After the plan is published (wake_before): a rescheduler pushes,
 * then reads wake_before (timeout.c), so either it wakes us or we see its
 * push here. */
static bool moved_waiting(hwt_timer *timer)
{
    atomic_thread_fence(memory_order_seq_cst);
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        if (!hwt__stack_is_empty(&timer->stripes[i].moved))
            return true;
    return false;
}

/* The earliest deadline (ns since start) a new timeout on a stripe's stack
 * may have: a lower bound, INT64_MAX if the stacks are empty. A producer
 * pushes, then lowers queued_min, then reads wake_before: either it saw our
 * plan (and woke us if due earlier), or we see its queued_min here (both
 * sides: seq_cst), and then its push too. A minimum with the stack empty is
 * stale (its producer lowered it just after we took its push; the next take
 * resets it): it must not keep us awake. Clearing it here instead would
 * cost a locked write on the producers' line per pass. */
static int64_t earliest_queued(hwt_timer *timer)
{
    int64_t min = INT64_MAX;
    for (unsigned i = 0; i < HWT_STRIPES; i++) {
        int64_t m = atomic_load(&timer->stripes[i].queued_min);
        if (m < min && !hwt__stack_is_empty(&timer->stripes[i].queue))
            min = m;
    }
    return min;
}

/* A lower bound of the deadlines of the new timeouts not yet in the wheel
 * (INT64_MAX: none), for hwt__plan_last_tick: no tick after it may be
 * processed before they are moved. It goes by earliest_queued, the timeouts
 * a reschedule moved earlier while queued, and the taken lists' minimum
 * deadlines - but queued_min counts a deadline just after its push: a
 * timeout pushed a moment before may be due earlier still (it then runs
 * after the ticks processed, as if scheduled after them: its schedule call
 * had not returned). Between two slices of a transfer (`mid_transfer`), a
 * taken list whose due-soon part has been moved counts by the rest's
 * minimum: the transfer goes on with the rest. Otherwise by the whole
 * list's, as a pass whose budget ran out leaves the rest for the next one. */
static int64_t queued_floor(hwt_timer *timer, bool mid_transfer)
{
    struct hwt__worker *w = &timer->worker;
    int64_t min = earliest_queued(timer);
    if (w->moved_queued_min < min)
        min = w->moved_queued_min;
    for (unsigned i = 0; i < HWT_STRIPES; i++) {
        if (w->taken[i] == NULL)
            continue;
        int64_t m = mid_transfer && w->taken_soon[i] == 0 ? w->taken_later_min[i] : w->taken_min[i];
        if (m < min)
            min = m;
    }
    return min;
}

/* ---------------------------------------------------------- transfer */

/* Adds n to a counter only the worker writes (others read it): no locked
 * op. Release, as hwt_timer_stats wants for `expired`. */
static void bump(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n,
                          memory_order_release);
}

/* Reverses a stack just taken (newest first) into the order it is moved in:
 * the timeouts due before `soon_before` (ns since start) first, then the
 * rest, each part oldest first - a stable partition, and `soon_before` is a
 * tick boundary, so timeouts due in one tick keep their order. The soon
 * ones are few (a few ms of deadlines); once they are in the wheel, the
 * ticks before the rest's earliest deadline can run between slices of a
 * long transfer (run_loop). Lets go of the timeouts
 * already cancelled on the way: each is touched once, not twice (where
 * timeouts are cancelled soon after they are scheduled, most are), and adds
 * their number to *dropped.
 * Sets stripe i's taken_min, taken_soon and taken_later_min, and counts
 * the stack in its `took`. */
static ck_stack_entry_t *reverse_live(hwt_timer *timer, unsigned i, ck_stack_entry_t *newest_first,
                                      int64_t soon_before, size_t *dropped)
{
    ck_stack_entry_t *soon = NULL, *soon_last = NULL, *later = NULL;
    int64_t soon_min = INT64_MAX, later_min = INT64_MAX;
    size_t soon_count = 0;
    uint64_t count = 0;
    for (; newest_first != NULL; count++) {
        ck_stack_entry_t *next = newest_first->next;
        hwt_timeout *t = hwt__timeout_of_queue_link(newest_first);
        if ((atomic_load_explicit(&t->state, memory_order_relaxed) & HWT_TO_LIFE) != HWT_TO_INIT) {
            let_go_cancelled(timer, t); /* cancelled for good: order does not matter */
            ++*dropped;
        } else if (hwt__deadline_of(t) < soon_before) {
            if (soon_last == NULL)
                soon_last = newest_first;
            newest_first->next = soon;
            soon = newest_first;
            soon_count++;
            if (hwt__deadline_of(t) < soon_min)
                soon_min = hwt__deadline_of(t);
        } else {
            newest_first->next = later;
            later = newest_first;
            if (hwt__deadline_of(t) < later_min)
                later_min = hwt__deadline_of(t);
        }
        newest_first = next;
    }
    timer->worker.took[i] += count;
    timer->worker.taken_soon[i] = soon_count;
    timer->worker.taken_min[i] = soon_count > 0 ? soon_min : later_min;
    timer->worker.taken_later_min[i] = later_min;
    if (soon_last == NULL)
        return later;
    soon_last->next = later;
    return soon;
}

/* The oldest new timeout of stripe i, or NULL. Takes the stripe's whole
 * stack when what was taken before has been moved - once per pass when
 * `took` is given (set when it did): a pass that took again whatever was
 * pushed meanwhile could chase the producers for its whole budget, for
 * milliseconds, while the ticks wait. The cancelled ones of a new
 * take are let go of at once and counted in *dropped. */
static hwt_timeout *take_queued(hwt_timer *timer, unsigned i, bool *took, size_t *dropped)
{
    ck_stack_entry_t *e = timer->worker.taken[i];
    while (e == NULL) {
        struct hwt__stripe *stripe = &timer->stripes[i];
        if ((took != NULL && *took) ||
            hwt__stack_is_empty(&stripe->queue)) /* no write: producers keep the line */
            return NULL;
        if (took != NULL)
            *took = true;
        /* Before the take: a deadline pushed after it is noted afresh. And
         * seen so by every thread before the take is: a producer whose push
         * follows the take must not read the minimum of what we took (on
         * arm64 the store-release does not order the exclusive pair of the
         * take after it; on x86-64 this is only the compiler's barrier). */
        atomic_store(&stripe->queued_min, INT64_MAX);
        ck_pr_fence_store_atomic();
        int64_t soon_before = hwt__soon_before(hwt__rel_now(timer), timer->tick_ns);
        e = reverse_live(timer, i, hwt__stack_take_all_upmc(&stripe->queue), soon_before, dropped);
    }
    timer->worker.taken[i] = e->next;
    e->next = NULL; /* the node's links: not in the wheel (hwt__timeout_in_wheel) */
    if (timer->worker.taken_soon[i] > 0)
        timer->worker.taken_soon[i]--;
    return hwt__timeout_of_queue_link(e);
}

/* Marks a queued timeout TRANSFERRED (so that its canceller pushes its
 * cancel for us): false if a cancel won. A reschedule may change the state
 * meanwhile (its generation): then again. */
static bool mark_transferred(hwt_timeout *t)
{
    uint32_t state = atomic_load_explicit(&t->state, memory_order_relaxed);
    while ((state & HWT_TO_LIFE) == HWT_TO_INIT) /* no failing CAS for cancelled ones */
        if (atomic_compare_exchange_weak(&t->state, &state, state | HWT_TO_TRANSFERRED))
            return true;
    return false;
}

/* Moves up to `budget` new timeouts from the queues into the wheel, taking
 * the stripes in turn (each in its own order; took[i]: stripe i's stack was
 * taken in this pass). Marking each one TRANSFERRED
 * (a CAS, against a racing cancel) tells its canceller that the worker must
 * hear of the cancel; the cancelled ones it drops instead are counted in
 * the pass's cancels. One due in a tick already processed runs at once
 * (file_or_run). */
static uint32_t transfer(hwt_timer *timer, uint32_t budget, bool *took)
{
    uint32_t n = 0;
    size_t dropped = 0;
    /* Every stripe's timeouts due soon first (a take puts them in front;
     * at most one other is moved with them, the first of the rest), then
     * the rest. */
    for (int soon_only = 1; soon_only >= 0; soon_only--) {
        for (unsigned k = 0; k < HWT_STRIPES && n < budget; k++) {
            unsigned i = (timer->worker.next_stripe + k) % HWT_STRIPES;
            while (n < budget && (!soon_only || timer->worker.taken_soon[i] > 0 ||
                                  timer->worker.taken[i] == NULL)) {
                hwt_timeout *t = take_queued(timer, i, &took[i], &dropped);
                if (t == NULL)
                    break;
                if (mark_transferred(t)) {
                    n++;
                    file_or_run(timer, t);
                } else {
                    /* Cancelled since the take: let go of at once, not
                     * charged to the budget (as those cancelled before
                     * it), so that a burst taken and then cancelled is
                     * reused within the latency, not a budget a pass. */
                    let_go_cancelled(timer, t);
                    dropped++;
                }
            }
        }
    }
    timer->worker.next_stripe++; /* who goes first when the budget runs out */
    bump(&timer->transferred, n + dropped);
    timer->worker.pass_cancels += dropped;
    return n;
}

/* ---------------------------------------------------------- expiry */

/* The worker's claim on a due deadline (internal.h): false if the
 * deadline is no longer `deadline`. */
static bool claim_deadline(hwt_timeout *t, int64_t deadline)
{
    return __atomic_compare_exchange_n(&t->node.deadline, &deadline,
                                       deadline | HWT_DEADLINE_CLAIMED, false, __ATOMIC_RELAXED,
                                       __ATOMIC_RELAXED);
}

/* Takes the claim back, unless a move under BUSY has written since. */
static void unclaim_deadline(hwt_timeout *t, int64_t deadline)
{
    int64_t claimed = deadline | HWT_DEADLINE_CLAIMED;
    __atomic_compare_exchange_n(&t->node.deadline, &claimed, deadline, false, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}

/* Ends a timeout found due (out of the wheel, or never in it) if its
 * deadline is before `due_before` (ns): runs it, or lets go of it if a
 * cancel won. A deadline a reschedule moved later: false, to be filed again.
 * A reschedule in progress (BUSY): deferred (see defer_moved). First the
 * deadline is claimed, with a CAS from the one found due: a later move (one
 * CAS on the deadline, timeout.c) that came in between makes it fail, and
 * one that comes after fails on the claim. Then the state's CAS, from the
 * state read before the deadline: a move under BUSY bumps the generation
 * and makes it fail; and so does a cancel. Failing, the claim is taken back
 * (unless such a move wrote over it) and all is read again: a claim stays
 * only on a timeout that expired. */
static bool expire(hwt_timer *timer, hwt_timeout *t, int64_t due_before)
{
    uint32_t target = HWT_TO_EXPIRED | (timer->executor != NULL ? HWT_TO_EXEC_ARMED : 0);
    uint32_t state = atomic_load(&t->state);
    int64_t deadline;
    for (;;) {
        if ((state & HWT_TO_LIFE) != HWT_TO_INIT) {
            let_go_cancelled(timer, t);
            return true;
        }
        if (state & HWT_TO_BUSY) {
            defer_moved(timer, t);
            return true;
        }
        deadline = hwt__deadline_of(t);
        if (deadline >= due_before)
            return false;
        hwt__step_reached(HWT_STEP_WORKER_EXPIRING, timer);
        if (!claim_deadline(t, deadline)) {
            state = atomic_load(&t->state);
            continue;
        }
        hwt__step_reached(HWT_STEP_WORKER_CLAIMED, timer);
        uint32_t next = (state & (HWT_TO_CANCEL_CB | HWT_TO_TRANSFERRED | HWT_TO_MOVED)) | target;
        if (atomic_compare_exchange_weak(&t->state, &state, next)) {
            state = next;
            break;
        }
        unclaim_deadline(t, deadline);
    }
    t->wflags |= HWT_W_RELEASED;
    owe_moved_entry(timer, t, state);
    /* Count down before the task runs: it sees the count without itself. */
    hwt__pending_sub(timer, 1);
    bump(&timer->expired, 1); /* release: see hwt_timer_stats */
    if (timer->executor != NULL) {
        timer->executor(timer->executor_ctx, t); /* it owns the in-flight reference */
        hwt__end_forked_worker(timer);
        return true;
    }
    hwt__record_lateness(timer, deadline); /* the one decided on: a losing move may write after */
    hwt__task_of(timer, t)->run(t, t->arg);
    hwt__end_forked_worker(timer);
    hwt__timeout_unref(t);
    return true;
}

/* The wheel's callback for each timeout of the tick it processes (cur),
 * already unlinked: one whose deadline moved later goes back in. */
static enum hwt__wheel_verdict expire_node(void *ctx, struct hwt__wheel_node *node)
{
    hwt_timer *timer = ctx;
    int64_t due_before = hwt__sat_mul(timer->worker.wheel.cur + 1, timer->tick_ns);
    if (expire(timer, hwt__timeout_of_node(node), due_before))
        return HWT_WHEEL_TAKEN;
    bump(&timer->refiled, 1);
    return HWT_WHEEL_REFILE;
}

/* ---------------------------------------------------------- the loop */

/* Before the ticks up to `last` are processed: cancels that were let wait
 * (hwt__plan_cancels_wait, worker.cancels_wait >= 0) are processed first
 * when one of those ticks has a timeout due, in the wheel or still queued
 * (it may run as overdue in the transfer). A cancel made before a tick
 * ended is then processed, its cancelled callback run, before that tick's
 * tasks, as each tick's order has it; the wait only spares passes that
 * expire nothing. */
static void cancels_before_ticks(hwt_timer *timer, int64_t last, bool mid_transfer)
{
    struct hwt__wheel *wheel = &timer->worker.wheel;
    if (timer->worker.cancels_wait < 0 || last < wheel->cur)
        return;
    if (hwt__wheel_next_event(wheel) > last &&
        queued_floor(timer, mid_transfer) / timer->tick_ns > last)
        return;
    end_cancels_wait(timer);
}

/* Moves up to the budget of new timeouts (the stacks' due-soon timeouts
 * first), in slices: the ticks that end meanwhile run between two slices,
 * as far as nothing still queued or taken is due before them, so that a due
 * tick does not wait for a whole budget's transfer. Returns how many were
 * moved. */
static uint32_t transfer_in_slices(hwt_timer *timer, const struct hwt__policy *policy)
{
    struct hwt__wheel *wheel = &timer->worker.wheel;
    bool took[HWT_STRIPES] = {false};
    uint32_t moved = 0;
    for (;;) {
        uint32_t slice = hwt__plan_slice(policy, moved);
        uint32_t n = transfer(timer, slice, took);
        moved += n;
        if (n < slice)
            timer->worker.moved_queued_min = INT64_MAX; /* all moved, by their deadlines now */
        if (n < slice || moved == policy->max_transfers)
            return moved;
        int64_t ended = hwt__plan_last_tick(policy, queued_floor(timer, true),
                                            hwt__rel_now(timer) / policy->tick_ns - 1);
        if (ended >= wheel->cur) {
            cancels_before_ticks(timer, ended, true);
            hwt__wheel_advance(wheel, ended, expire_node, timer);
        }
        hwt__step_reached(HWT_STEP_TRANSFER_SLICED, timer);
    }
}

/* The pass's steps are those of worker_policy.h; each decision is asked of
 * it, from what is read here. */
static void run_loop(hwt_timer *timer)
{
    struct hwt__wheel *wheel = &timer->worker.wheel;
    const struct hwt__policy policy = {
        .tick_ns = timer->tick_ns,
        .cancel_latency_ns = timer->cancel_latency_ns,
        .max_transfers = timer->max_transfers,
        .backlog_kick = timer->backlog_kick,
        .naps = timer->worker.naps,
    };
    const int64_t tick = policy.tick_ns;
    struct hwt__worker *w = &timer->worker;
    bool slept_soon = true; /* the last sleep was planned within the latency */
    w->cancels_wait = -1;

    while (atomic_load(&timer->state) != HWT_STATE_SHUTDOWN) {
        int64_t now = hwt__rel_now(timer);
        int64_t last_elapsed = now / tick - 1; /* ticks whose end has passed */
        w->cancels_wait = hwt__plan_cancels_wait(&policy, now, slept_soon, w->cancels_wait,
                                                 cancels_waiting(timer));
        w->pass_cancels = w->cancels_wait < 0 ? process_cancels(timer) : 0;
        process_moved(timer, false);
        /* The elapsed ticks that no queued timeout is due before are
         * processed first: new timeouts due in the last of them would join
         * its bucket's tail, so running them right after the transfer keeps
         * the order, and the wheel's due timeouts do not wait behind a long
         * transfer. */
        int64_t ahead = hwt__plan_last_tick(&policy, queued_floor(timer, false), last_elapsed);
        if (ahead >= wheel->cur) {
            cancels_before_ticks(timer, ahead, false);
            hwt__wheel_advance(wheel, ahead, expire_node, timer);
        }
        /* The backlog's reads (every stripe's lines, which producers write)
         * only after a long sleep: a busy worker passes every tick. */
        bool backlog_waits = !slept_soon && hwt__plan_backlog_waits(&policy, now, slept_soon,
                                                                    hwt__queued_count(timer),
                                                                    queued_floor(timer, false));
        uint32_t moved = 0;
        if (!backlog_waits)
            moved = transfer_in_slices(timer, &policy);
        hwt__wheel_precascade(wheel, HWT_PRECASCADE_BUDGET);
        /* And the ticks that ended during the tasks and the transfer, as far
         * as nothing left queued is due before them. Those that had ended
         * when the pass began go in any case: with the budget spent, what
         * is left queued waits for the next pass, as in Netty, rather than
         * hold the wheel's due timeouts back (docs/design.md). */
        now = hwt__rel_now(timer);
        int64_t ended = hwt__plan_last_tick(&policy, queued_floor(timer, false), now / tick - 1);
        if (ended > last_elapsed)
            last_elapsed = ended;
        if (last_elapsed >= wheel->cur) {
            cancels_before_ticks(timer, last_elapsed, false);
            hwt__wheel_advance(wheel, last_elapsed, expire_node, timer);
        }

        struct hwt__sleep_snapshot seen = {
            .now = now,
            .cur = wheel->cur,
            .next_event = hwt__wheel_next_event(wheel),
            .moved = moved,
            .cancels = w->pass_cancels,
            .queued = (int64_t)hwt__queued_count(timer),
            .cancels_wait = w->cancels_wait,
            .backlog_waited = backlog_waits,
        };
        struct hwt__sleep_plan plan = hwt__plan_sleep(&policy, &seen);
        slept_soon = plan.cancel_watch;

        atomic_store(&timer->wake_before, plan.wake_before);
        atomic_store(&timer->cancel_watch, plan.cancel_watch);
        /* A new key: `kicked` (a kick's value of wake_seq) now differs from
         * it, so the next waker calls; a waker that bumps after this, the
         * futex wait returns at once. */
        uint32_t key = atomic_fetch_add(&timer->wake_seq, 1) + 1;
        /* Equal to the key, `kicked` is a kick's from 2^32 plans ago (or the
         * start's 0): not one for this plan. */
        uint32_t stale = key;
        if (atomic_load(&timer->kicked) == key)
            atomic_compare_exchange_strong(&timer->kicked, &stale, key - 1);
        hwt__step_reached(HWT_STEP_WORKER_PLANNED, timer);
        if (atomic_load(&timer->state) == HWT_STATE_SHUTDOWN)
            break;
        /* What came in since: read after the plan is published (see the top
         * of this file), the moved stacks first (moved_waiting's fence). */
        struct hwt__recheck now_seen;
        now_seen.moved_waiting = moved_waiting(timer);
        now_seen.cancels_waiting = cancels_waiting(timer);
        now_seen.earliest_queued = earliest_queued(timer);
        now_seen.queued = (int64_t)hwt__queued_count(timer);
        if (hwt__plan_may_sleep(&policy, &plan, &now_seen)) {
            /* What this pass freed into our cache: back where producers
             * take from, and the regions it empties to the system (SPEC:
             * memory after a burst goes back within seconds). One lock per
             * sleep. */
            int64_t trim_at = hwt__pool_give_back_freed(timer);
            int64_t until =
                plan.wake_at == INT64_MAX ? INT64_MAX : hwt__sat_add(timer->start_ns, plan.wake_at);
            /* The regions a burst left while threads still took timeouts
             * go back once the depot is quiet, not at the next burst. */
            if (trim_at < until)
                until = trim_at;
            if (timer->worker.busy != NULL) {
                int64_t check =
                    hwt__sat_add(timer->start_ns, hwt__plan_busy_check(&policy, seen.now));
                if (check < until)
                    until = check;
            }
            if (hwt__sleep(timer->sleep_mode, &timer->wake_seq, key, until))
                bump(&timer->wakeups, 1);
        } else {
            int64_t nap_until = hwt__plan_nap(&policy, &seen, &plan, &now_seen);
            if (nap_until >= 0 && hwt__sleep(timer->sleep_mode, &timer->wake_seq, key,
                                             hwt__sat_add(timer->start_ns, nap_until)))
                bump(&timer->wakeups, 1);
        }
        atomic_store(&timer->wake_before, INT64_MIN);
    }
}

/* ---------------------------------------------------------- final drain */

/* Marks a not-yet-ended timeout cancelled by the stop and keeps it. */
static void take_for_stop(void *ctx, hwt_timeout *t)
{
    hwt_timer *timer = ctx;
    uint32_t state;
    if (!hwt__timeout_leave_init(t, HWT_TO_CANCELLED, &state)) {
        let_go_cancelled(timer, t);
        return;
    }
    t->wflags |= HWT_W_RELEASED;
    owe_moved_entry(timer, t, state);
    hwt__stopset_add(&timer->worker.stopped_set, t);
}

static void take_node_for_stop(void *ctx, struct hwt__wheel_node *node)
{
    take_for_stop(ctx, hwt__timeout_of_node(node));
}

/* Takes for the stop every timeout queued on the stripes, until every
 * schedule call that saw the timer running has had its timeout taken or
 * failed: after SHUTDOWN no other can start, and those that start fail.
 * A stripe's failed count is read before its started count: a call counts
 * itself started before failed, so every call counted in `failed`, and
 * every one whose timeout was taken, is then counted in `started` too, and
 * the two sides balance only when no call is left out. (Read the other way,
 * a call that starts and fails between the two reads would balance one
 * still on its way to the push.) */
static void take_queues_for_stop(hwt_timer *timer)
{
    for (unsigned i = 0; i < HWT_STRIPES; i++) {
        struct hwt__stripe *s = &timer->stripes[i];
        for (;;) {
            uint64_t failed = atomic_load_explicit(&s->failed, memory_order_acquire);
            hwt_timeout *t;
            size_t dropped = 0;
            while ((t = take_queued(timer, i, NULL, &dropped)) != NULL)
                take_for_stop(timer, t);
            hwt__step_reached(HWT_STEP_STOP_COUNTING, timer);
            if (atomic_load(&s->started) == failed + timer->worker.took[i])
                break;
            sched_yield();
        }
    }
}

/* For each timeout of the pool (a scan in memory order, free ones too: a
 * free one is RELEASED or was never TRANSFERRED): takes those the wheel
 * holds. */
static void take_if_in_wheel(void *ctx, hwt_timeout *t)
{
    hwt_timer *timer = ctx;
    if (hwt__timeout_in_wheel(t)) {
        hwt__wheel_forget(&timer->worker.wheel, &t->node);
        take_for_stop(timer, t);
    }
}

/* Takes every timeout of the wheel. Walking the buckets' lists costs a cache
 * miss per timeout (a list's timeouts are scattered); when the wheel holds
 * much of the pool, a scan of the pool in memory order is several times
 * faster, as it reads memory in order. */
static void drain_wheel(hwt_timer *timer)
{
    if (timer->worker.wheel.count > hwt__pool_capacity(&timer->pool) / 8) {
        hwt__pool_for_each(&timer->pool, take_if_in_wheel, timer);
        hwt__wheel_clear(&timer->worker.wheel);
    } else {
        hwt__wheel_drain(&timer->worker.wheel, take_node_for_stop, timer);
    }
}

/* Ends every timeout the timer still holds. Runs on the worker after the
 * loop saw SHUTDOWN: after it, no timeout of this timer can be cancelled or
 * expired any more, and every cancelled callback owed has been called. */
static void final_drain(hwt_timer *timer)
{
    /* About what the wheel and the queues hold (the set grows for the
     * schedules still on their way to the push). */
    hwt__stopset_reserve(&timer->worker.stopped_set,
                         timer->worker.wheel.count + (size_t)hwt__queued_count(timer));
    /* First, as it waits for the schedules in flight: the wheel's drain may
     * scan the pool, which no thread may allocate from meanwhile. */
    take_queues_for_stop(timer);
    process_moved(timer, true); /* the deferred: neither in the wheel nor queued */
    drain_wheel(timer);
    /* A canceller may have won its CAS just before we marked the timeout
     * and not pushed it yet: wait for every cancellation we let go of. And
     * a deferred timeout, in neither the wheel nor a queue, may wait for
     * the entry of a reschedule that has set MOVED and not pushed yet. */
    process_cancels(timer);
    process_moved(timer, true);
    while (timer->worker.awaiting_cancel > 0 || timer->worker.awaiting_moved > 0 ||
           timer->worker.deferred > 0) {
        hwt__step_reached(HWT_STEP_DRAIN_WAITS, timer);
        sched_yield();
        process_cancels(timer);
        process_moved(timer, true);
    }
    size_t taken = hwt__stopset_size(&timer->worker.stopped_set);
    hwt__pending_sub(timer, (int64_t)taken);
    hwt__stripe_add(&hwt__my_stripe(timer)->cancelled, taken);
}

/* Answers the stop requests: drops what the final drain took (calling the
 * cancelled callbacks here, on the worker, as for every other cancel) or
 * hands it over as one array. If the array cannot be had (HWT_ENOMEM), the
 * worker keeps everything and waits for the next stop, which may ask again
 * or drop instead: either way the callbacks still run on the worker. */
static void answer_stops(hwt_timer *timer)
{
    uint64_t answered = 0;
    pthread_mutex_lock(&timer->lifecycle_lock);
    for (;;) {
        while (timer->stop_requests == answered)
            pthread_cond_wait(&timer->lifecycle_cond, &timer->lifecycle_lock);
        answered = timer->stop_requests;
        int mode = atomic_load(&timer->stop_mode);
        pthread_mutex_unlock(&timer->lifecycle_lock);
        int rc = 0;
        hwt_timeout **list = NULL;
        size_t count = 0;
        if (mode == HWT_STOP_DROP)
            hwt__stopset_drop(&timer->worker.stopped_set);
        else
            rc = hwt__stopset_take(&timer->worker.stopped_set, &list, &count);
        hwt__step_reached(HWT_STEP_WORKER_DRAINED, timer);
        pthread_mutex_lock(&timer->lifecycle_lock);
        timer->stop_result = rc;
        timer->handed = list;
        timer->handed_count = count;
        timer->stop_replies = answered;
        pthread_cond_broadcast(&timer->lifecycle_cond);
        if (rc == 0)
            break;
    }
    pthread_mutex_unlock(&timer->lifecycle_lock);
}

/* The worker's last tick, as hwt_timer_stats reports it from now on: the
 * most reported so far, or more, marked final in the same word, so that no
 * read that found the worker running counts past it afterwards. */
static void note_last_tick(hwt_timer *timer)
{
    uint64_t last = hwt__ticks_at(timer, hwt__now_ns());
    uint64_t reported = atomic_load(&timer->ticks_reported);
    while (!atomic_compare_exchange_weak(&timer->ticks_reported, &reported,
                                         (reported > last ? reported : last) | HWT_TICKS_FINAL)) {
    }
}

void *hwt__worker_main(void *arg)
{
    hwt_timer *timer = arg;
    /* spawn_worker (timer.c) created us with every signal blocked; a
     * thread_attr that sets a mask of its own (pthread_attr_setsigmask_np)
     * overrides that, so block them again. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    hwt__current_worker = timer;
    timer->worker.moved_queued_min = INT64_MAX;
    hwt__os_name_thread(timer->thread_name);
    /* Wake on time, not 50 us late. A nap in a burst (hwt__plan_nap) is
     * worth it only if its wake-up takes a CPU at once: without short
     * turns, the producers of a burst that hold every CPU keep it waiting,
     * and expire's tail grew (bench/README.md, "A worker that chases a
     * burst"). */
    if (timer->sleep_mode == HWT_SLEEP_PRECISE)
        timer->worker.naps = hwt__os_precise_sleeps();

    hwt__step_reached(HWT_STEP_WORKER_STARTING, timer);
    /* Its cache before the starters go on: what the bind allocates is
     * there when they return (a program that counts its heap blocks around
     * a start sees them all). */
    int no_key = hwt__pool_bind_thread(timer);
    pthread_mutex_lock(&timer->lifecycle_lock);
    timer->start_ns = hwt__now_ns();
    timer->worker_ready = true;
    pthread_cond_broadcast(&timer->lifecycle_cond);
    pthread_mutex_unlock(&timer->lifecycle_lock);
    /* Only now that the starters may go on: a failure is logged, and the
     * log callback may schedule on this timer (which waits for the start),
     * or fork (the child must not serve this timer). */
    if (no_key != 0) {
        hwt__pool_log_no_key(timer, no_key);
        hwt__end_forked_worker(timer);
    }

    run_loop(timer);
    note_last_tick(timer);
    final_drain(timer);
    hwt__pool_close(timer);
    answer_stops(timer);
    return NULL;
}

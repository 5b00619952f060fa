/*
 * worker_policy.h - what the worker decides, apart from how it acts.
 *
 * The worker (worker.c) takes a snapshot of the clock, its wheel and the
 * queues, asks the functions below what to do, and does it. They are pure:
 * no atomics, no clock, no side effects, so tests/internal/test_plan.c
 * checks the decisions from made-up snapshots, without threads, as
 * wahern/timeout's timeouts_timeout is checked. Times are ns since the
 * worker started; ticks are numbered from 0 at that start, a tick t ending
 * at (t + 1) * tick_ns.
 *
 * A pass of the worker, and the decision each step asks for:
 *   1. cancels: process them now, or let them wait until the end of tick X
 *      (hwt__plan_cancels_wait);
 *   2. the moved stacks are processed every pass (they may be due soon);
 *   3. the ticks that ended and that nothing queued is due before are
 *      processed ahead of the transfer (hwt__plan_last_tick);
 *   4. unless they may wait for the next pass (hwt__plan_backlog_waits), up
 *      to max_transfers_per_tick new timeouts are moved, in slices of
 *      HWT_TRANSFER_SLICE, the ticks that end meanwhile processed between
 *      two slices (hwt__plan_slice, hwt__plan_last_tick);
 *   5. up to HWT_PRECASCADE_BUDGET timeouts per level are cascaded early;
 *   6. the ticks that ended during all that (hwt__plan_last_tick again);
 *   7. when to wake and what producers and cancellers must wake it for
 *      (hwt__plan_sleep), then, once that is published, whether to sleep
 *      at all (hwt__plan_may_sleep), and if not, whether to nap before the
 *      next pass (hwt__plan_nap).
 */
#ifndef HWT_WORKER_POLICY_H
#define HWT_WORKER_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"

/* ------------------------------------------------------------------------
 * The tuning constants, each with its reason.
 */

/* A cancel is processed (the timeout unlinked, its cancelled callback
 * called) within max(tick, this). The slack lets the worker process cancels
 * in batches at its planned wake-ups instead of once per cancel, and lets a
 * canceller skip the wake-up system call whenever the worker will come by
 * within it anyway (cancel_watch). */
#define HWT_CANCEL_LATENCY_MIN_NS (100 * INT64_C(1000000))

/* The backlog (queued timeouts not yet moved into the wheel) at which a
 * producer wakes a sleeping worker although none of them is due before its
 * planned wake-up, in transfer budgets (max_transfers_per_tick): the
 * threshold is HWT_BACKLOG_BUDGETS x the budget (hwt__backlog_kick).
 * Below it, the backlog waits for that wake-up, or for the cancel latency
 * if the worker saw some of it queued when it planned or once it holds one
 * budget (a producer then wakes a worker that plans to sleep past the
 * latency: hwt__plan_backlog_waits). A smaller backlog that arrived after
 * the worker planned waits for the wake-up: no producer wakes the worker
 * for a trickle of far deadlines. Moving timeouts while threads schedule
 * flat out takes CPUs and cache lines from those threads, and moving them
 * in one batch after the burst costs less; leaving a burst queued until a
 * far wake-up would move it whenever that comes, say while other threads
 * cancel its timeouts. The bound is on the walk: the worker takes a
 * stripe's whole stack and walks it before a due-soon timeout in it can be
 * placed (about 1-2 ns per timeout), and moves at most one budget per pass,
 * so a backlog of ten budgets is ten passes of work waiting. A larger
 * budget means a worker that may move more at once, so it may also let
 * more wait; with the default budget (100 000) the threshold is 10^6,
 * about 1-2 ms of walking. */
#define HWT_BACKLOG_BUDGETS 10

/* At most how many schedules a stripe takes between two looks at the
 * backlog (whichever thread's push lands on a multiple of the interval
 * looks): the look reads every stripe's counter (17 cache lines that other
 * producers write), too dear for every call. Counted per stripe, not per
 * thread, so that a backlog spread over many threads, each making few
 * schedules, is seen too. Fewer for small transfer budgets: see
 * hwt__backlog_check_mask. */
#define HWT_BACKLOG_CHECK_EVERY 1024

/* Timeouts moved between two looks at the clock in a long transfer. Moving
 * a full budget takes milliseconds while producers share the CPUs; a tick
 * that ends meanwhile is processed between two slices, so its timeouts wait
 * behind one slice instead of the whole transfer: about 0.5 ms of the
 * worker's CPU (~60 ns a timeout in a burst, bench/README.md, "Where the
 * burst's worst lateness comes from"), more in wall time while producers
 * hold the CPUs. */
#define HWT_TRANSFER_SLICE 8192

/* Timeouts cascaded ahead of time per level per pass at least (wheel.c,
 * "spreading the cascades"); more only to finish in time. Small enough that
 * a pass stays short, large enough that a level's cascade is spread over a
 * few passes rather than done in the tick it falls due. */
#define HWT_PRECASCADE_BUDGET 512

/* How far ahead "due soon" reaches when the worker takes a stack: those are
 * moved first, before the rest of every stack, so that they are not behind a
 * long transfer. About as long as moving a full budget can take while
 * producers share the CPUs, and at least 2 ticks (hwt__plan_soon_ns). */
#define HWT_SOON_NS (8 * INT64_C(1000000))

/* A burst's pace (hwt__plan_nap): while a tick is due by the end of this
 * one and new timeouts keep coming, the worker waits up to a quarter of a
 * tick, at most HWT_NAP_MAX_NS, between two passes instead of passing
 * again at once (thousands of passes of a dozen timeouts each, a worker
 * that never sleeps and competes for the CPUs with the producers). Only
 * with HWT_SLEEP_PRECISE (the others sleep whole milliseconds) and short
 * turns on a CPU (os.h), without which a nap's wake-up waits for a busy
 * producer's turn to end. Long enough for a pass to find a few hundred
 * timeouts, short enough that what comes in during a tick is moved within
 * it. Not under HWT_NAP_MIN_NS: a system call for less is not worth it. */
#define HWT_NAP_MAX_NS (250 * INT64_C(1000))
#define HWT_NAP_MIN_NS (10 * INT64_C(1000))

/* ------------------------------------------------------------------------
 * Thresholds derived from the options (computed once, at create).
 */

/* The backlog that makes a producer wake a sleeping worker (see
 * HWT_BACKLOG_BUDGETS). At most 10 x UINT32_MAX: no overflow. */
static inline uint64_t hwt__backlog_kick(uint32_t max_transfers)
{
    return (uint64_t)HWT_BACKLOG_BUDGETS * max_transfers;
}

/* The interval of the looks at the backlog, as a mask of a stripe's push
 * count (a power of two: no division per schedule): at most
 * HWT_BACKLOG_CHECK_EVERY, and small enough that a budget of new timeouts
 * spread evenly over the stripes is looked at, at least once per stripe. */
static inline uint64_t hwt__backlog_check_mask(uint32_t max_transfers, unsigned stripes)
{
    uint64_t every = max_transfers / stripes;
    uint64_t pow2 = 1;
    while (pow2 * 2 <= every && pow2 * 2 <= HWT_BACKLOG_CHECK_EVERY)
        pow2 *= 2;
    return pow2 - 1;
}

/* The cancel latency: max(tick, HWT_CANCEL_LATENCY_MIN_NS). */
static inline int64_t hwt__cancel_latency(int64_t tick_ns)
{
    return tick_ns > HWT_CANCEL_LATENCY_MIN_NS ? tick_ns : HWT_CANCEL_LATENCY_MIN_NS;
}

/* How far ahead of now a taken stack's timeouts count as due soon. */
static inline int64_t hwt__plan_soon_ns(int64_t tick_ns)
{
    return tick_ns < HWT_SOON_NS / 2 ? HWT_SOON_NS : hwt__sat_mul(2, tick_ns);
}

/* Timeouts due before this (ns since start) count as due soon in a stack
 * taken at `now`: hwt__plan_soon_ns ahead, on to the next tick boundary.
 * All the timeouts of one tick are then soon or none is, so the partition
 * keeps their order (within a tick, the order they were moved in is the
 * order they were scheduled in, each thread's, as Netty's). */
static inline int64_t hwt__soon_before(int64_t now, int64_t tick_ns)
{
    int64_t soon = hwt__sat_add(now, hwt__plan_soon_ns(tick_ns));
    int64_t into = soon % tick_ns;
    return into == 0 ? soon : hwt__sat_add(soon, tick_ns - into);
}

/* ------------------------------------------------------------------------
 * The decisions of a pass.
 */

/* The options a plan depends on. */
struct hwt__policy {
    int64_t tick_ns;
    int64_t cancel_latency_ns; /* hwt__cancel_latency(tick_ns) */
    uint32_t max_transfers;    /* max_transfers_per_tick: the budget of a pass */
    uint64_t backlog_kick;     /* hwt__backlog_kick(max_transfers) */
    bool naps;                 /* precise sleeps with short CPU turns: hwt__plan_nap */
};

/* Step 1. Cancellations found waiting after a sleep that was not planned to
 * end within the cancel latency (!slept_soon): the first canceller since
 * woke us, right after its push. Their processing can wait, up to the end
 * of the tick returned (at most half the latency from now), so that a burst
 * of cancels is not processed while the cancelling threads still run; the
 * cancellers that follow see a wake-up planned soon and do not wake us. A
 * cancel is then processed within the latency as long as our wake-up took
 * less than half of it. `carried`: the tick a previous pass let them wait
 * until (-1: none); a wait ends once that tick has ended. Returns the tick
 * the cancels wait until, or -1: process them now. */
static inline int64_t hwt__plan_cancels_wait(const struct hwt__policy *p, int64_t now,
                                             bool slept_soon, int64_t carried,
                                             bool cancels_waiting)
{
    int64_t last_elapsed = now / p->tick_ns - 1;
    int64_t wait = carried;
    if (wait < 0 && !slept_soon) {
        int64_t until = hwt__sat_add(now, p->cancel_latency_ns / 2) / p->tick_ns - 1;
        wait = until > last_elapsed && cancels_waiting ? until : -1;
    }
    return wait >= 0 && wait <= last_elapsed ? -1 : wait;
}

/* Steps 3, 4 and 6. The last of the ticks up to `last` that may be
 * processed before the queued timeouts are moved: none of them may be due
 * in an earlier one. `queued_floor` is a lower bound of their deadlines
 * (INT64_MAX: none queued). Below wheel.cur: none to process. */
static inline int64_t hwt__plan_last_tick(const struct hwt__policy *p, int64_t queued_floor,
                                          int64_t last)
{
    int64_t floor_tick = queued_floor / p->tick_ns;
    return floor_tick < last ? floor_tick : last;
}

/* Step 4. Whether the new timeouts found queued after a sleep that was not
 * planned to end within the cancel latency (!slept_soon: a producer woke
 * us, for a deadline or for a budget of them, see HWT_BACKLOG_BUDGETS; or a
 * canceller; or a far wake-up came) wait for the next pass instead of being
 * moved in this one: when they are fewer than backlog_kick and none is due
 * within the latency (`queued_floor`: a lower bound of their deadlines).
 * That pass comes within the latency (hwt__plan_sleep caps the sleep while
 * any are queued), and moves them in one batch: a burst of far timeouts is
 * moved once it is over, not while its producers run, nor while other
 * threads cancel it. Only after such a sleep: a worker that planned to
 * wake within the latency moves new timeouts as they come. A timeout
 * cancelled while queued is dropped in that pass, which comes within half
 * the latency (hwt__plan_sleep, backlog_waited): its canceller woke us, and
 * that wake-up's delay and this pass fit in the other half. */
static inline bool hwt__plan_backlog_waits(const struct hwt__policy *p, int64_t now,
                                           bool slept_soon, uint64_t queued, int64_t queued_floor)
{
    return !slept_soon && queued > 0 && queued < p->backlog_kick &&
           queued_floor >= hwt__sat_add(now, p->cancel_latency_ns);
}

/* Step 4. The size of the next slice of a transfer that has moved `moved`
 * this pass (0: the budget is spent). */
static inline uint32_t hwt__plan_slice(const struct hwt__policy *p, uint32_t moved)
{
    uint32_t left = p->max_transfers - moved;
    return left < HWT_TRANSFER_SLICE ? left : HWT_TRANSFER_SLICE;
}

/* Step 7: what the pass saw, after its work. */
struct hwt__sleep_snapshot {
    int64_t now;          /* read after the pass's work */
    int64_t cur;          /* the wheel's next tick to process */
    int64_t next_event;   /* hwt__wheel_next_event (INT64_MAX: nothing) */
    uint32_t moved;       /* new timeouts moved this pass */
    size_t cancels;       /* cancels processed, or cancelled timeouts dropped, this pass */
    int64_t queued;       /* new timeouts pushed and not yet moved (hwt__queued_count) */
    int64_t cancels_wait; /* hwt__plan_cancels_wait's answer for this pass */
    bool backlog_waited;  /* hwt__plan_backlog_waits held: the queues were left as they were */
};

struct hwt__sleep_plan {
    int64_t next;            /* the tick whose end to wake at (INT64_MAX: no deadline) */
    int64_t wake_at;         /* ns: that end (INT64_MAX: sleep until woken) */
    int64_t wake_before;     /* published: producers wake us for deadlines before it */
    bool cancel_watch;       /* published: we wake within the cancel latency anyway */
    bool more_queued;        /* the budget ran out: more to move at once */
    int64_t move_now_before; /* queued deadlines before this must not wait for the wake-up */
};

/* Step 7. Wake at the next tick with work (pre-cascade passes included),
 * sooner if the transfer budget ran out (more at the end of this tick), and
 * within the cancel latency if cancels are flowing (so that cancellers need
 * not wake us each time) or if new timeouts are left queued (due after the
 * planned wake-up): those are moved in one batch after a burst of schedules
 * rather than during it (hwt__backlog_kick), and not left for their
 * deadline, as cancelling them while the worker drops them from the queue
 * costs the cancellers more. Cancels let wait until a tick wake us at its
 * end. */
static inline struct hwt__sleep_plan hwt__plan_sleep(const struct hwt__policy *p,
                                                     const struct hwt__sleep_snapshot *s)
{
    struct hwt__sleep_plan plan;
    int64_t next = s->next_event;
    plan.more_queued = s->moved == p->max_transfers;
    if (plan.more_queued && next > s->cur)
        next = s->cur;
    if (s->cancels > 0 || (!plan.more_queued && s->queued > 0)) {
        int64_t cap = hwt__sat_add(s->now, p->cancel_latency_ns) / p->tick_ns - 1;
        if (s->backlog_waited) {
            /* Woken (not planned) for a queued timeout's cancel, maybe: as
             * for cancels that wait (hwt__plan_cancels_wait), half the
             * latency from now, so that the wake-up's own delay and this
             * pass do not take the drop past the latency of the cancel. At
             * least to the end of this tick. */
            int64_t half = hwt__sat_add(s->now, p->cancel_latency_ns / 2) / p->tick_ns - 1;
            int64_t this_tick = s->now / p->tick_ns;
            cap = half > this_tick ? half : this_tick;
        }
        if (cap < next)
            next = cap;
    }
    if (s->cancels_wait >= 0 && s->cancels_wait < next)
        next = s->cancels_wait;
    plan.next = next;
    plan.wake_at = next == INT64_MAX ? INT64_MAX : hwt__sat_mul(next + 1, p->tick_ns);
    plan.cancel_watch = plan.wake_at - s->now <= p->cancel_latency_ns;
    plan.wake_before = next == INT64_MAX ? INT64_MAX : hwt__sat_mul(next, p->tick_ns);
    /* Due before the planned wake-up: moved at once, not at it. And every
     * one when a tick is due by the end of this one, so that its expiry
     * does not wait behind a long transfer of what came in meanwhile. */
    plan.move_now_before = next <= s->cur ? INT64_MAX : plan.wake_before;
    return plan;
}

/* Step 7, after the plan is published: what the queues hold now. */
struct hwt__recheck {
    bool moved_waiting;      /* a reschedule queued a timeout since the moved stacks were taken */
    bool cancels_waiting;    /* a cancel stack is not empty */
    int64_t earliest_queued; /* a lower bound of the queued deadlines (INT64_MAX: none) */
    int64_t queued;          /* new timeouts queued */
};

/* Whether to sleep as planned. Not if a reschedule queued a timeout (the
 * moved stacks are processed every pass: it may be due soon). Not for
 * cancels if the wake-up is not within the cancel latency; if it is, they
 * wait for it: looping for them would keep the worker busy, competing with
 * the cancelling threads for CPUs and cache lines, for as long as they
 * cancel. When the budget ran out, the plan already wakes us at the end of
 * this tick for the rest. Otherwise not if a queued timeout must be moved
 * at once (move_now_before) or the backlog reached the kick threshold: a
 * backlog that grew while we moved the last (a transfer takes each stack
 * once) does not wait, as its producer's kick found us awake. */
static inline bool hwt__plan_may_sleep(const struct hwt__policy *p,
                                       const struct hwt__sleep_plan *plan,
                                       const struct hwt__recheck *r)
{
    if (r->moved_waiting || (!plan->cancel_watch && r->cancels_waiting))
        return false;
    if (plan->more_queued)
        return true; /* woken at the end of this tick: see hwt__plan_sleep */
    /* New timeouts queued since the snapshot, and a plan past the latency:
     * a canceller of one of them (not pushed: nothing else shows it) or a
     * producer that found a budget queued may have kicked already, with
     * nothing for us to see but the count. Plan again: with them queued,
     * within the latency. */
    if (!plan->cancel_watch && r->queued > 0)
        return false;
    return r->earliest_queued >= plan->move_now_before && r->queued < (int64_t)p->backlog_kick;
}

/* While timeouts wait out of the wheel for reschedules still writing them
 * (worker.busy): when to look at them again, sleeping as planned otherwise.
 * Such a reschedule wakes us only if it moves its timeout earlier; moved
 * later, the timeout is due no sooner than the tick it falls in, so the end
 * of this tick is soon enough. At least HWT_NAP_MAX_NS from now, so that a
 * fine tick does not make the worker spin while a reschedule is preempted
 * in its write: those few instructions are all it waits for, but a
 * preempted thread, or one stopped in a debugger, may take long. */
static inline int64_t hwt__plan_busy_check(const struct hwt__policy *p, int64_t now)
{
    int64_t tick_end = hwt__sat_mul(now / p->tick_ns + 1, p->tick_ns);
    int64_t soonest = hwt__sat_add(now, HWT_NAP_MAX_NS);
    return tick_end > soonest ? tick_end : soonest;
}

/* When hwt__plan_may_sleep says not to sleep as planned: how long to wait
 * before the next pass anyway (see HWT_NAP_MAX_NS). Returns the time (ns
 * since the start) to wake at, or -1 to pass again at once: for a
 * reschedule's or a cancel's entry, a backlog at the kick threshold, a
 * tick that ended and is not processed yet (a queued timeout is due in
 * it), a queued timeout due in a tick already processed (queued while the
 * pass's tasks ran: it is late already), or where the worker does not nap
 * (!p->naps). Never past the end of the current tick, nor past the planned
 * wake-up: what the nap lets wait is moved before the tick it may be due
 * in is processed, so no timeout runs later for it. */
static inline int64_t hwt__plan_nap(const struct hwt__policy *p,
                                    const struct hwt__sleep_snapshot *s,
                                    const struct hwt__sleep_plan *plan,
                                    const struct hwt__recheck *r)
{
    if (!p->naps || r->moved_waiting || (!plan->cancel_watch && r->cancels_waiting) ||
        r->queued >= (int64_t)p->backlog_kick || s->cur < s->now / p->tick_ns ||
        r->earliest_queued < hwt__sat_mul(s->cur, p->tick_ns))
        return -1;
    int64_t nap = p->tick_ns / 4 < HWT_NAP_MAX_NS ? p->tick_ns / 4 : HWT_NAP_MAX_NS;
    int64_t until = hwt__sat_add(s->now, nap);
    int64_t tick_end = hwt__sat_mul(s->now / p->tick_ns + 1, p->tick_ns);
    if (until > tick_end)
        until = tick_end;
    if (until > plan->wake_at)
        until = plan->wake_at;
    return until - s->now >= HWT_NAP_MIN_NS ? until : -1;
}

#endif

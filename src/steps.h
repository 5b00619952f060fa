/*
 * steps.h - a test hook called at the internal steps of a timer's start and
 * stop, and at a few of the worker's and the calls' in between, so that a
 * test can pause a thread at any one of them and force each interleaving of
 * a race deterministically (as the allocation
 * hook in alloc.h forces each allocation failure). Without a hook set, a
 * step costs one relaxed load. Any thread.
 */
#ifndef HWT_STEPS_H
#define HWT_STEPS_H

#include <stdatomic.h>
#include <stddef.h>

typedef enum {
    HWT_STEP_START_SPAWNED,      /* a starter created the worker, lock released */
    HWT_STEP_START_LATCHED,      /* a starter saw the worker ready, before its CAS */
    HWT_STEP_WORKER_STARTING,    /* the worker runs, before it announces itself */
    HWT_STEP_WORKER_DRAINED,     /* the worker's final drain is done, before it replies */
    HWT_STEP_STOP_REQUESTED,     /* a stopper published SHUTDOWN, lock released */
    HWT_STEP_STOP_ANSWERED,      /* a stopper has the worker's reply, before the join */
    HWT_STEP_STOP_WAITS,         /* a stopper found another stop busy, before it waits: the
                                    lock is held, so count arrivals here, never pause */
    HWT_STEP_SCHEDULE_STARTED,   /* a schedule found the timer started, before it counts itself */
    HWT_STEP_SCHEDULE_ANNOUNCED, /* a schedule counted itself, before its state check */
    HWT_STEP_SCHEDULE_ADMITTED, /* a schedule saw the timer running, before it queues its timeout */
    HWT_STEP_STOP_COUNTING,     /* the final drain counted the failed schedules of a stripe,
                                   before it reads the started ones */
    HWT_STEP_RESCHEDULE_CLAIMED,  /* a reschedule counts in BUSY and wrote its deadline, before
                                     it leaves the count */
    HWT_STEP_RESCHEDULE_TOLD,     /* a reschedule left BUSY setting MOVED, before it pushes
                                     the timeout on its moved stack */
    HWT_STEP_WORKER_DEFERS,       /* the worker found a timeout BUSY, before it defers it */
    HWT_STEP_DRAIN_WAITS,         /* the final drain waits for cancels and moved entries still
                                     to come (each time round) */
    HWT_STEP_RESCHEDULE_COMPARED, /* a later move compared its deadline with the one it read,
                                     before it writes its own */
    HWT_STEP_WORKER_PLANNED,      /* the worker published its plan and bumped the futex word
                                     (its key), before it looks at the queues again */
    HWT_STEP_TRANSFER_SLICED,     /* the worker moved a slice of a long transfer (and ran the
                                     ticks that ended), before the next slice */
    HWT_STEP_RESCHEDULE_CLAIMING, /* a reschedule counts in BUSY, before it writes its deadline */
    HWT_STEP_STATS_CLOCK,         /* a stats read found the worker running, before it reads the
                                     clock for the ticks */
    HWT_STEP_WORKER_EXPIRING,     /* the worker found a pending timeout due, before it claims
                                     its deadline */
    HWT_STEP_WORKER_CLAIMED,      /* the worker claimed a due timeout's deadline, before it
                                     marks the timeout expired */
    /* A thread has the turn to map and populate memory, before it maps
     * (arena.c; no timer: NULL). */
    HWT_STEP_POPULATE_TURN,
    HWT_STEP_KICKING,           /* a waker bumped the futex word, before its wake-up call */
    HWT_STEP_DESTROY_UNLINKING, /* a destroy counted its timer out of the live ones, before it
                                   unlinks it from their list */
    HWT_STEP_COUNT
} hwt__step;

/* Called with the step and the timer; NULL: none. Tests only. */
typedef void (*hwt__step_fn)(hwt__step step, void *timer);
void hwt__set_step_hook(hwt__step_fn hook);

extern _Atomic(hwt__step_fn) hwt__step_hook;

static inline void hwt__step_reached(hwt__step step, void *timer)
{
    hwt__step_fn hook = atomic_load_explicit(&hwt__step_hook, memory_order_acquire);
    if (hook != NULL)
        hook(step, timer);
}

#endif

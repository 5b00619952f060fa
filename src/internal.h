/*
 * internal.h - the private structures shared by the library's files.
 *
 * Who touches what:
 *   hwt_timer: configuration is written once by hwt_timer_create; the
 *     "producer side" fields are atomics used by any thread; `worker`
 *     (struct hwt__worker) belongs to the worker thread; lifecycle fields
 *     are under lifecycle_lock.
 *   hwt_timeout: state and refs are atomics (any thread); the wheel node's
 *     links and wflags are the worker's; task/arg/node.deadline are
 *     written by the producer before the timeout is published and are
 *     read-only afterwards.
 */
#ifndef HWT_INTERNAL_H
#define HWT_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "arena.h"
#include "clock.h"
#include "hwtimer.h"
#include "stacks.h"
#include "steps.h"
#include "pool.h"
#include "wheel.h"
#include "worker_policy.h"

#define HWT_MAX_LIVE_TIMERS 64

/* ---- timeout state (hwt_timeout.state): a lifecycle value and flags. */
enum {
    HWT_TO_INIT = 0,        /* pending */
    HWT_TO_CANCELLED = 1,   /* cancelled by hwt_timeout_cancel or by a stop */
    HWT_TO_EXPIRED = 2,     /* taken by the worker to run */
    HWT_TO_LIFE = 3,        /* mask of the lifecycle value */
    HWT_TO_TRANSFERRED = 4, /* set by the worker (CAS) as it moves a pending
                               timeout from the queue into the wheel */
    HWT_TO_EXEC_ARMED = 8,  /* with EXPIRED: handed to the executor, not yet run */
    HWT_TO_CANCEL_CB = 16,  /* set at creation: the task has a cancelled callback */
    /* Reschedule (timeout.c). MOVED: the timeout is on a stripe's moved
     * stack (through stack_link), holding a reference, for the worker to
     * file it again. A move to an earlier deadline is written under BUSY, a
     * count of the calls writing at once (HWT_TO_BUSY_ONE each, up to
     * HWT_TO_BUSY_MAX): the worker never reads a deadline while any is, so
     * it never acts on one that a call may still lose or write over. Such a
     * move adds HWT_TO_GEN as it counts itself in: a worker that read the
     * deadline before it cannot then expire the timeout (its CAS fails). A
     * move later writes the deadline alone, with a CAS that the worker's
     * claim on it (HWT_DEADLINE_CLAIMED) makes fail. */
    HWT_TO_MOVED = 32,
    HWT_TO_BUSY_ONE = 64,
    HWT_TO_BUSY = 63 * 64, /* bits 6..11: the count */
    HWT_TO_BUSY_MAX = 63,
    HWT_TO_GEN = 4096 /* bits 12..31: a generation count, wrapping */
};
#define HWT_TO_GEN_MASK (~(uint32_t)(HWT_TO_GEN - 1))

/* ---- worker-only flags (hwt_timeout.wflags). Whether a timeout is in a
 * wheel bucket, hwt__timeout_in_wheel says. */
enum {
    HWT_W_RELEASED = 1,    /* out of the queue and not in the wheel any more */
    HWT_W_CANCEL_DONE = 2, /* its cancellation was processed (callback called) */
    HWT_W_DEFERRED = 4,    /* out of the wheel, on a moved stack until a reschedule is done */
    HWT_W_MOVED_OWED = 8   /* ended with a reschedule's moved entry yet to come by */
};

/* A timeout's task: interned per timer (tasks.c), the timeout keeps its index. */
struct hwt__task_pair {
    hwt_task_fn run, cancelled; /* cancelled: NULL if none */
};

/* The task table's blocks double from HWT_TASKS_FIRST_BLOCK entries:
 * block b holds indices [FIRST * (2^b - 1), FIRST * (2^(b+1) - 1)). */
#define HWT_TASKS_FIRST_BLOCK 64
#define HWT_TASK_BLOCKS 10
#define HWT_MAX_TASKS (HWT_TASKS_FIRST_BLOCK * ((1u << HWT_TASK_BLOCKS) - 1)) /* 65 472 */

/* A hash index of the task table: slots hold an index + 1 (0: empty). */
struct hwt__task_index {
    size_t mask;                   /* slots - 1: slots are a power of two */
    struct hwt__task_index *older; /* the one it replaced */
    _Atomic uint32_t slots[];
};

/* The first index of block b. */
static inline size_t hwt__task_block_start(unsigned b)
{
    return HWT_TASKS_FIRST_BLOCK * (((size_t)1 << b) - 1);
}

static inline unsigned hwt__task_block_of(size_t index)
{
    return (unsigned)(63 - __builtin_clzll((unsigned long long)index + HWT_TASKS_FIRST_BLOCK)) -
           6 /* log2(HWT_TASKS_FIRST_BLOCK) */;
}

/* A timeout is its wheel node (wheel.h) and what the timer needs around it,
 * 40 bytes, in its pool's chunks in the arena (arena.h). The node's links
 * are used by one list at a time: the wheel's bucket, or - as one pointer,
 * queue_link - the stripe's new-timeout stack, the worker's taken list or
 * the stop's overflow list. So a timeout is in the wheel only once it is
 * TRANSFERRED and until it is RELEASED (hwt__timeout_in_wheel); the worker
 * clears queue_link as it takes a timeout off its taken list. While free, a
 * timeout that heads a magazine keeps depot_link in arg's place and the
 * magazine's size in the deadline's (pool.c). node.deadline lives from the
 * producer's write until the timeout is freed. */
struct hwt_timeout {
    union {
        struct hwt__wheel_node node; /* deadline: ns since the worker started, >= time
                                        scheduled; links: while in a wheel bucket (worker) */
        ck_stack_entry_t queue_link; /* over node.link: see above */
        struct {
            uint64_t link_;   /* node.link's place */
            size_t mag_count; /* node.deadline's place, while free heading a magazine */
        };
    };
    ck_stack_entry_t stack_link; /* cancel or moved stack, or the next free one in a magazine */
    union {
        void *arg;
        ck_stack_entry_t depot_link; /* while free, heading a magazine (pool.c) */
    };
    _Atomic uint32_t state;
    uint16_t task;        /* its (run, cancelled) in the timer's task table (tasks.c) */
    _Atomic uint8_t refs; /* a handle, the queue or wheel, a moved stack, an executor: a few */
    uint8_t wflags;
};

enum { HWT_STATE_INIT, HWT_STATE_STARTED, HWT_STATE_SHUTDOWN };

/* The timeouts a stop took (stopset.c). */
struct hwt__stopset {
    hwt_timeout **array;
    size_t count, cap;
    ck_stack_entry_t *overflow; /* chained by queue_link when the array could not grow */
    size_t overflow_count;
};

/* Threads are dealt the stripes round-robin (stripes.c). */
#define HWT_STRIPES 16

/* One stripe: a new-timeout stack (intrusive, many producers, the worker
 * takes it whole; see stacks.h), a cancel stack, and counters that only the
 * threads using the stripe write (hwt__stripe_add). A thread always uses the
 * same stripe, so its timeouts keep their order. */
struct hwt__stripe {
    _Alignas(64) ck_stack_t queue; /* counts its pushes: the successful schedules */
    /* The earliest deadline pushed on `queue` since the worker last took it
     * (INT64_MAX: none). The worker sleeps only past what is queued, so a
     * producer adding a later deadline never wakes it (timeout.c). */
    _Atomic int64_t queued_min;
    _Alignas(64) ck_stack_t cancels; /* counts its pushes: cancels the worker hears of */
    ck_stack_t moved;                /* timeouts rescheduled earlier (HWT_TO_MOVED) */
    _Atomic uint64_t started;        /* schedule calls past argument checks (those that
                                        succeed are counted by `queue`)... */
    _Atomic uint64_t failed;         /* ...that failed; the stop waits until started ==
                                        failed + what the worker took from `queue` */
    _Atomic uint64_t cancelled;      /* cancels not pushed on `cancels`, and what stops
                                        dropped or handed back (see hwt__stripe_cancelled) */
    _Atomic uint64_t rejected;
};

enum { HWT_STOP_DROP, HWT_STOP_LIST };

/* The worker's own state (worker.c). Owned by the worker thread: no other
 * thread reads or writes it while the worker runs. Before it starts, create
 * sets up the wheel and the rest is zero; the worker sets moved_queued_min
 * as it starts. After it is joined, only the timer's last reference
 * (hwt__timer_unref_n) touches it, to free the wheel. What the worker
 * decides from it is in worker_policy.h. */
struct hwt__worker {
    struct hwt__wheel wheel;
    size_t awaiting_cancel;   /* let go of, cancellation not processed yet */
    size_t awaiting_moved;    /* ended while on a moved stack, or about to be (MOVED_OWED) */
    size_t deferred;          /* out of the wheel for a reschedule (HWT_W_DEFERRED) */
    ck_stack_entry_t *busy;   /* of those, the ones reschedules were writing (defer_moved) */
    int64_t moved_queued_min; /* earliest deadline of queued timeouts rescheduled earlier */
    int64_t cancels_wait;     /* cancels wait until this tick's end (-1: none; worker.c) */
    size_t pass_cancels;      /* cancels processed in this pass */
    unsigned next_stripe;     /* the stripe transfer starts with */
    bool naps;                /* precise sleeps with short CPU turns: may nap (hwt__plan_nap) */
    uint64_t took[HWT_STRIPES]; /* timeouts ever taken from each stripe's queue */
    /* Per stripe, what the worker took from the stack but has not moved yet
     * (the transfer budget ran out), linked by queue_link: those due soon
     * first, then the others, each part oldest first. */
    ck_stack_entry_t *taken[HWT_STRIPES];
    int64_t taken_min[HWT_STRIPES];       /* a lower bound of their deadlines */
    size_t taken_soon[HWT_STRIPES];       /* how many of them are due soon */
    int64_t taken_later_min[HWT_STRIPES]; /* a lower bound of the others' deadlines */
    struct hwt__stopset stopped_set;      /* what the final drain took, until handed over */
};

struct hwt_timer {
    /* ---- configuration, written by create, then read-only */
    int64_t tick_ns;
    int64_t cancel_latency_ns; /* max(tick, 100 ms) */
    int64_t max_pending;       /* <= 0: unlimited */
    uint32_t max_transfers;
    hwt_sleep_mode sleep_mode;
    const pthread_attr_t *thread_attr;
    char thread_name[16];
    void (*executor)(void *ctx, hwt_timeout *timeout);
    void *executor_ctx;
    void (*log)(void *ctx, hwt_log_level level, const char *message);
    void *log_ctx;
    uint64_t backlog_kick;     /* hwt__backlog_kick(max_transfers): producers read it */
    uint64_t backlog_check_mask; /* hwt__backlog_check_mask: when a push looks at the backlog */
    int64_t start_ns; /* set by the worker before state becomes STARTED */

    /* ---- producer side: any thread */
    /* Read by every call, alone on its line: the counters below change often. */
    _Alignas(64) _Atomic int state;
    /* Only with max_pending > 0: the exact reservation count. */
    _Alignas(64) _Atomic int64_t pending;
    /* References to the timer's memory: the creator's, one per timeout out
     * of the pool's depot (pool.c), one per call waiting in a start or a
     * stop (timer.c). The last one calls free_memory (timer.c). */
    _Atomic uint64_t refs;
    void (*free_memory)(hwt_timer *timer);
    _Alignas(64) _Atomic int64_t wake_before; /* producers wake the worker for earlier deadlines */
    _Atomic int cancel_watch;                 /* 1: the worker will wake soon enough for cancels */
    _Atomic uint32_t kicked; /* wake_seq as a kick left it, once its wake-up call returned */
    _Atomic uint32_t wake_seq;                /* the futex word the worker sleeps on */
    _Atomic uint64_t transferred;             /* timeouts the worker took from the queues */

    /* Threads are spread over stripes so that producers and cancellers on
     * different threads do not share cache lines (see hwt__stripe_index). */
    struct hwt__stripe stripes[HWT_STRIPES];
    struct hwt__pool pool;

    _Alignas(64) struct hwt__worker worker;

    /* ---- written by the worker only, read by hwt_timer_stats */
    _Alignas(64) _Atomic uint64_t expired;
    _Atomic uint64_t wakeups;
    _Atomic uint64_t late_max_ns;
    _Atomic uint64_t refiled; /* timeouts filed again after a reschedule (tests) */

    /* ---- interned tasks (tasks.c). Read by every schedule (id) and every
     * run (the blocks), written seldom: on lines of their own, away from
     * the worker's counters above. */
    _Alignas(64) uint64_t id; /* unique in the process, never 0 */
    _Atomic(struct hwt__task_pair *) task_blocks[HWT_TASK_BLOCKS];
    _Atomic(struct hwt__task_index *) task_index; /* finds a pair's index */
    size_t task_count;                            /* under tasks_lock */
    _Alignas(64) pthread_mutex_t tasks_lock;      /* held to add one */

    /* ---- lifecycle (timer.c, and the worker's side in worker.c): under
     * lifecycle_lock; lifecycle_cond is broadcast on every change. No
     * thread holds the lock while it waits for another (it waits on the
     * condition, which releases it), so the worker can always announce
     * itself or reply to a stop. */
    pthread_mutex_t lifecycle_lock;
    pthread_cond_t lifecycle_cond;
    pthread_t thread;
    bool spawned;              /* a worker was created and not joined yet */
    _Atomic bool worker_ready; /* start_ns is set; read by stats without the lock */
    /* The most ticks hwt_timer_stats reported; once the worker has ended,
     * HWT_TICKS_FINAL with its last count (timer.c, ticks_elapsed). */
    _Atomic uint64_t ticks_reported;
    bool stop_busy;            /* a stop is in progress: other stoppers wait for it */
    hwt_timer *worker_stopping; /* the timer this one's worker is stopping, from a
                                   callback (timer.c: stop cycles) */
    uint64_t stop_requests;    /* stops asked of the worker... */
    uint64_t stop_replies;     /* ...and answered by it */
    int stop_result;           /* the last answer: 0, or HWT_ENOMEM (it kept the list) */
    hwt_timeout **handed;      /* the last answer's list (HWT_STOP_LIST) */
    size_t handed_count;
    _Atomic int stop_mode;     /* HWT_STOP_*, set before SHUTDOWN is published */
    _Atomic bool stopped;      /* a stop has ended: the pending count reads 0 */
    unsigned fork_generation;  /* hwt__fork_generation when created (timer.c) */
    /* The process's live timers (created, not destroyed), for the fork
     * handlers (timer.c); and, in a fork child, when the fork that took
     * this timer's worker happened (0 while it has its own). */
    hwt_timer *live_prev, *live_next;
    int64_t forked_ns;
};

/* Thread-local variables of the library: initial-exec, so that reading one
 * is a plain load instead of a __tls_get_addr call (the library is linked at
 * start-up, not dlopen()ed; the few bytes fit the static TLS reserve). */
#define HWT_THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))

/* The timer whose worker is the calling thread, or NULL. */
extern HWT_THREAD_LOCAL hwt_timer *hwt__current_worker;

/* stripes.c: the calling thread's stripe number (UINT_MAX: none yet). */
extern HWT_THREAD_LOCAL unsigned hwt__stripe_of_thread;
unsigned hwt__stripe_assign(void);

/* The calling thread's stripe number (fixed per thread). */
static inline unsigned hwt__stripe_index(void)
{
    unsigned i = hwt__stripe_of_thread;
    return i != UINT_MAX ? i : hwt__stripe_assign();
}

static inline struct hwt__stripe *hwt__my_stripe(hwt_timer *timer)
{
    return &timer->stripes[hwt__stripe_index()];
}

/* Adds n to a counter of the calling thread's stripe (release order). */
static inline void hwt__stripe_add(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_release);
}

/* Counts n timeouts out of the pending total (cancel, expiry, stop). Only
 * limited timers keep an exact total; unlimited ones derive it from the
 * stripes' counters (see read_pending in timer.c). */
static inline void hwt__pending_sub(hwt_timer *timer, int64_t n)
{
    if (timer->max_pending > 0)
        atomic_fetch_sub_explicit(&timer->pending, n, memory_order_relaxed);
}

/* New timeouts queued and not yet moved by the worker (cancelled ones
 * included): a snapshot, exact only when no producer is running. A push
 * counts itself, so the worker never reads fewer than it has taken. */
static inline uint64_t hwt__queued_count(hwt_timer *timer)
{
    uint64_t scheduled = 0;
    for (unsigned i = 0; i < HWT_STRIPES; i++)
        scheduled += hwt__stack_pushes(&timer->stripes[i].queue);
    return scheduled - atomic_load_explicit(&timer->transferred, memory_order_relaxed);
}

/* Successful cancels on a stripe (and what stops dropped or handed back
 * there): those its cancel stack counted, and the others. */
static inline uint64_t hwt__stripe_cancelled(struct hwt__stripe *stripe)
{
    return hwt__stack_pushes(&stripe->cancels) +
           atomic_load_explicit(&stripe->cancelled, memory_order_acquire);
}

/* Nanoseconds since the worker started (callers: after the start latch). */
static inline int64_t hwt__rel_now(const hwt_timer *timer)
{
    return hwt__now_ns() - timer->start_ns;
}


/* Incremented in a child process after fork() (timer.c): a timer created
 * in another generation is inherited, and its worker does not exist here. */
extern _Atomic unsigned hwt__fork_generation;

static inline bool hwt__inherited(const hwt_timer *timer)
{
    return timer->fork_generation !=
           atomic_load_explicit(&hwt__fork_generation, memory_order_relaxed);
}

/* After a user's callback on the worker thread (a task, a cancelled
 * callback, the executor): in the child of a fork() made inside it, this
 * thread is the only one, and the worker of a timer inherited from the
 * parent, whose timeouts are the parent's and must not run here. Going back
 * to the worker's loop would run them; the child should have called exec or
 * _exit in the callback, and ends as if it had: _exit(0) (not exit: the
 * parent's atexit handlers and stdio buffers are the parent's too). */
static inline void hwt__end_forked_worker(const hwt_timer *timer)
{
    if (hwt__inherited(timer))
        _exit(0);
}

/* log.c: with thread cancellation held off around the user's callback. */
void hwt__log(const hwt_timer *timer, hwt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define HWT_TICKS_FINAL (UINT64_C(1) << 63)

/* Ticks from the worker's start to `at` (CLOCK_MONOTONIC ns). */
static inline uint64_t hwt__ticks_at(const hwt_timer *timer, int64_t at)
{
    int64_t elapsed = at - timer->start_ns;
    return elapsed > 0 ? (uint64_t)(elapsed / timer->tick_ns) : 0;
}

/* Wakes the worker (or has its next sleep return at once) so that it looks
 * at the queues and the pool again and plans anew; about once per plan. The
 * worker bumps wake_seq as it plans, so a kick finding `kicked` equal to
 * wake_seq was made for this plan, and its wake-up call has returned: the
 * worker is awake, or its sleep returns at once (the word is not the one it
 * read). Noted only once the call returned: a waker preempted (or stopped)
 * between its bump and its call must not silence the others, as a flag set
 * before the bump did - every later kick made no call, and the worker slept
 * on for as long as that waker did. Only loads while the worker is already
 * woken: threads kicking at once (cancellers, say) then share the lines. */
static __attribute__((noinline, cold, unused)) void hwt__kick_worker_now(hwt_timer *timer)
{
    uint32_t seq = atomic_fetch_add(&timer->wake_seq, 1) + 1;
    hwt__step_reached(HWT_STEP_KICKING, timer);
    hwt__wake(&timer->wake_seq);
    atomic_store(&timer->kicked, seq);
}

static inline void hwt__kick_worker(hwt_timer *timer)
{
    if (atomic_load(&timer->kicked) != atomic_load(&timer->wake_seq))
        hwt__kick_worker_now(timer); /* out of line: the callers' hot paths keep their registers */
}

/* Takes n references to the timer's memory. Any thread. */
static inline void hwt__timer_ref_n(hwt_timer *timer, size_t n)
{
    atomic_fetch_add_explicit(&timer->refs, n, memory_order_relaxed);
}

/* Drops n references; the last one frees the timer (through free_memory,
 * set by hwt_timer_create: the files below timer.c drop references too).
 * Any thread. */
static inline void hwt__timer_unref_n(hwt_timer *timer, size_t n)
{
    if (atomic_fetch_sub_explicit(&timer->refs, n, memory_order_acq_rel) == n)
        timer->free_memory(timer);
}


/* stopset.c */
/* Makes room for n at once when the set is empty (best effort: 1M
 * timeouts take one allocation instead of ten, and no copies). */
void hwt__stopset_reserve(struct hwt__stopset *set, size_t n);
void hwt__stopset_add(struct hwt__stopset *set, hwt_timeout *timeout);
size_t hwt__stopset_size(const struct hwt__stopset *set);
/* Hands everything over as one array (NULL if empty): 0 or HWT_ENOMEM. */
int hwt__stopset_take(struct hwt__stopset *set, hwt_timeout ***array, size_t *count);
/* Calls each one's cancelled callback and drops it. */
void hwt__stopset_drop(struct hwt__stopset *set);

/* tasks.c */
/* The index of (run, cancelled) in the timer's task table, interned if new:
 * false when the table is full (HWT_MAX_TASKS) or memory is exhausted. Any
 * thread. */
bool hwt__task_intern(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled, uint16_t *index);
void hwt__tasks_free(hwt_timer *timer);

/* Entry `index` of the timer's task table. Any thread that got the index
 * from the thread that interned it, or after it (the entry was written
 * before). */
static inline const struct hwt__task_pair *hwt__task_at(const hwt_timer *timer, size_t index)
{
    unsigned b = hwt__task_block_of(index);
    const struct hwt__task_pair *pairs =
        atomic_load_explicit(&((hwt_timer *)timer)->task_blocks[b], memory_order_relaxed);
    return &pairs[index - hwt__task_block_start(b)];
}

/* A timeout's task. */
static inline const struct hwt__task_pair *hwt__task_of(const hwt_timer *timer,
                                                        const hwt_timeout *t)
{
    return hwt__task_at(timer, t->task);
}

/* The one state change every timeout makes: from INIT to `to` (keeping
 * the flags). True for the one caller that wins; *now gets the new state. */
static inline bool hwt__timeout_leave_init(hwt_timeout *t, uint32_t to, uint32_t *now)
{
    uint32_t cur = atomic_load(&t->state);
    uint32_t next;
    do { /* retried only when the worker set TRANSFERRED meanwhile */
        if ((cur & HWT_TO_LIFE) != HWT_TO_INIT)
            return false;
        next = (cur & (HWT_TO_CANCEL_CB | HWT_TO_TRANSFERRED | HWT_TO_MOVED)) | to;
    } while (!atomic_compare_exchange_weak(&t->state, &cur, next));
    *now = next;
    return true;
}

/* Whether the canceller of a timeout in this (cancelled) state pushed it on
 * its cancel stack. Not when it was still queued without a cancelled
 * callback: the transfer drops it then, with nothing else owed, so such a
 * cancel costs the worker nothing more. Not either when
 * it was on a moved stack (MOVED): the worker learns of the cancel there. */
static inline bool hwt__cancel_was_pushed(uint32_t state)
{
    return (state & (HWT_TO_TRANSFERRED | HWT_TO_CANCEL_CB)) != 0 && !(state & HWT_TO_MOVED);
}

/* Whether the worker is still to hear of this (cancelled) timeout's cancel:
 * from its canceller's push, or from the moved stack it is on. */
static inline bool hwt__cancel_notice_owed(uint32_t state)
{
    return (state & (HWT_TO_TRANSFERRED | HWT_TO_CANCEL_CB | HWT_TO_MOVED)) != 0;
}

/* A pending timeout's deadline: written by its producer before it is
 * published and by reschedules, read by the worker. The worker claims it
 * before it expires the timeout, by setting the sign bit with a CAS (a
 * deadline is never negative): a move later, one CAS from the deadline it
 * compared with, then fails, and does not return true for a timeout that
 * runs by its old deadline (worker.c, expire). The claim stays on a timeout
 * that expired, and only there: hwt__deadline_of reads through it. */
#define HWT_DEADLINE_CLAIMED INT64_MIN

static inline int64_t hwt__deadline_word(const hwt_timeout *t)
{
    return __atomic_load_n(&t->node.deadline, __ATOMIC_RELAXED);
}

static inline bool hwt__deadline_claimed(int64_t word)
{
    return word < 0;
}

static inline int64_t hwt__deadline_of(const hwt_timeout *t)
{
    return hwt__deadline_word(t) & INT64_MAX;
}

/* Whether the wheel holds a timeout. The worker's (and, after it, the
 * stop's), on any timeout of the pool, free ones too. While queued, the
 * node's links hold queue_link: only a TRANSFERRED timeout's are the
 * wheel's, until it is RELEASED. */
static inline bool hwt__timeout_in_wheel(const hwt_timeout *t)
{
    return !(t->wflags & HWT_W_RELEASED) &&
           (atomic_load_explicit(&((hwt_timeout *)t)->state, memory_order_relaxed) &
            HWT_TO_TRANSFERRED) &&
           hwt__wheel_linked(&t->node);
}

/* worker.c */
void *hwt__worker_main(void *arg);

/* timeout.c */
/* Schedules on a started timer (the API's checks done): counts the call,
 * allocates, queues, wakes the worker if it must. 0, HWT_ESTOPPED,
 * HWT_EREJECTED or HWT_ENOMEM (nothing changed). Any thread. */
int hwt__schedule(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled, void *arg,
                  int64_t delay_ns, hwt_timeout **timeout);
void hwt__timeout_unref(hwt_timeout *timeout);
void hwt__record_lateness(hwt_timer *timer, int64_t deadline);
void hwt__run_cancelled_callback(hwt_timeout *timeout);

static inline hwt_timeout *hwt__timeout_of_queue_link(ck_stack_entry_t *entry)
{
    return (hwt_timeout *)((char *)entry - offsetof(hwt_timeout, queue_link));
}

static inline hwt_timeout *hwt__timeout_of_stack(ck_stack_entry_t *entry)
{
    return (hwt_timeout *)((char *)entry - offsetof(hwt_timeout, stack_link));
}

static inline hwt_timeout *hwt__timeout_of_node(struct hwt__wheel_node *node)
{
    return (hwt_timeout *)((char *)node - offsetof(hwt_timeout, node));
}

_Static_assert(offsetof(hwt_timeout, queue_link) == offsetof(hwt_timeout, node.link) &&
                   sizeof(ck_stack_entry_t) == sizeof(struct hwt__wheel_link) &&
                   offsetof(hwt_timeout, depot_link) == offsetof(hwt_timeout, arg) &&
                   offsetof(hwt_timeout, mag_count) == offsetof(hwt_timeout, node.deadline),
               "queue_link is the node's links; a magazine's head keeps the deadline's and "
               "the argument's places");
_Static_assert(sizeof(struct hwt_timeout) <= 40,
               "a timeout is at most 40 bytes: 409 and a 24-byte header fill a 16 KiB chunk");
_Static_assert(sizeof(struct hwt_timeout) % HWT_ARENA_UNIT == 0,
               "timeouts are 8-aligned: a ref reaches each (arena.h)");

#endif

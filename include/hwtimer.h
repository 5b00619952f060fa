/*
 * hwtimer.h - libhwtimer, a hashed wheel timer for multithreaded C programs.
 *
 * What Netty's io.netty.util.HashedWheelTimer is to the JVM: any thread
 * schedules one-shot timeouts with a callback; one worker thread per timer
 * runs the callbacks that are due, tick by tick. This is the only installed
 * header. Each function carries its contract: who may call it, and when.
 *
 * Conventions
 *   - Functions that can fail return int: 0 on success or a negative HWT_E*
 *     code. A call that fails changed nothing.
 *   - "any thread" means: callable concurrently from any number of threads,
 *     including from inside a task running on the timer's worker.
 *   - Signal handlers: hwt_timeout_cancel, hwt_timeout_is_cancelled,
 *     hwt_timeout_is_expired, hwt_timeout_timer, hwt_timeout_task and
 *     hwt_timeout_arg are async-signal-safe (atomics, a lock-free push and a
 *     futex wake). No other function is: scheduling and releasing use a
 *     per-thread cache of timeouts that a handler on the same thread could
 *     find half-updated, and the lifecycle functions take locks.
 *   - Misuse C cannot detect (using a timer after hwt_timer_destroy, releasing
 *     a timeout twice, using a timeout after its last release) is undefined
 *     behaviour. A build with HWT_DEBUG defined catches double release.
 *
 * Ownership (every timeout ends exactly one way):
 *   its task's run is called once; or it is cancelled (a hwt_timeout_cancel()
 *   that returned true, or dropped by hwt_stop(t, NULL, NULL) or
 *   hwt_timer_destroy()) and its cancelled callback, if any, is called once;
 *   or it is handed back by hwt_stop(). Never two of these, never none.
 *
 * Timing (Netty's rules): a timeout with deadline D = now + delay - start
 * fires while the worker processes tick floor(D / tick), i.e. never before D
 * and nominally before D + tick. Beyond Netty, the worker does not wake on
 * ticks where nothing is due, and far-future timeouts are not rescanned on
 * every wheel revolution.
 */
#ifndef HWTIMER_H
#define HWTIMER_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(HWT_BUILDING_LIBRARY) && defined(__GNUC__)
#define HWT_EXTERN __attribute__((visibility("default")))
#else
#define HWT_EXTERN
#endif

/* The reserved unions below are anonymous, which C99 lacks: __extension__
 * keeps -std=c99 -pedantic builds of callers quiet, as glibc's headers do. */
#if defined(__GNUC__)
#define HWT_EXTENSION __extension__
#else
#define HWT_EXTENSION
#endif

#define HWT_VERSION_MAJOR 1
#define HWT_VERSION_MINOR 1
#define HWT_VERSION_PATCH 0

/* ---------------------------------------------------------------- errors */

/* NULL where an object is required, an out-of-range option or enum, or one
 * hwt_stop out-pointer without the other. */
#define HWT_EINVAL (-EINVAL)
/* An allocation failed; nothing was scheduled and nothing leaked. */
#define HWT_ENOMEM (-ENOMEM)
/* max_pending_timeouts would be exceeded (Netty's RejectedExecutionException). */
#define HWT_EREJECTED (-10001)
/* The timer was stopped (Netty's "cannot be started once stopped"). */
#define HWT_ESTOPPED (-10002)
/* hwt_stop() called from the timer's own worker thread (from a task). */
#define HWT_EDEADLK (-EDEADLK)
/* A system resource could not be had - the worker thread, a thread key, a
 * pthread object (the cause is logged); nothing changed, retry later. */
#define HWT_ESYS (-10003)

/* A static, distinct text for each code above, "success" for 0, and
 * "unknown error" for anything else.
 * Any thread. */
HWT_EXTERN const char *hwt_strerror(int code);

/* "MAJOR.MINOR.PATCH" of the library actually linked. Any thread. */
HWT_EXTERN const char *hwt_version(void);

/* ----------------------------------------------------------------- types */

typedef struct hwt_timer hwt_timer;     /* opaque */
typedef struct hwt_timeout hwt_timeout; /* opaque, reference-counted handle */

/* A task. `timeout` is borrowed: valid while the call runs. */
typedef void (*hwt_task_fn)(hwt_timeout *timeout, void *arg);

typedef enum {
    HWT_NANOSECONDS,
    HWT_MICROSECONDS,
    HWT_MILLISECONDS,
    HWT_SECONDS,
    HWT_MINUTES,
    HWT_HOURS,
    HWT_DAYS
} hwt_unit;

/* How the worker sleeps to a tick's end.
 *   PRECISE: absolute CLOCK_MONOTONIC deadline, nanosecond resolution
 *            (minimum tick 1 us).
 *   MILLIS:  Netty's: whole milliseconds, rounded up (minimum tick 1 ms).
 *   WINDOWS: Netty's Windows rule: milliseconds rounded up, then down to a
 *            multiple of 10, and 1 if that gives 0 (minimum tick 1 ms).
 *   DEFAULT: PRECISE (the library builds for Linux only).
 * MILLIS and WINDOWS reproduce Netty's sleeps; any mode may be chosen. */
typedef enum {
    HWT_SLEEP_DEFAULT,
    HWT_SLEEP_PRECISE,
    HWT_SLEEP_MILLIS,
    HWT_SLEEP_WINDOWS
} hwt_sleep_mode;

typedef enum { HWT_LOG_DEBUG, HWT_LOG_INFO, HWT_LOG_WARN, HWT_LOG_ERROR } hwt_log_level;

/* Reserved space in hwt_stats and hwt_options. Callers allocate both, so
 * their sizes are part of the ABI of libhwtimer.so.1. Each ends in an
 * anonymous union of reserved 8-byte slots that holds it at 256 bytes on
 * 64-bit Linux (x86-64, arm64): hwt_stats has 24 slots (room for 24 more
 * counters), hwt_options 22 (a pointer or a 64-bit number takes one each). A
 * later 1.x version adds its fields in an anonymous struct beside the array,
 *     union {
 *         struct { uint64_t rescheduled; };
 *         uint64_t reserved[24];
 *     };
 * so that the size and the offset of every field stay as they are: abidiff
 * counts a change within a union that keeps its size as harmless, and
 * tests/abi-check fails on any other change. The slots are not API: do not
 * use them by name. */

/* A snapshot taken without stopping anything: each field is exact when
 * read, the set is consistent enough for monitoring. Counters only grow.
 * hwt_timer_stats() fills the whole struct, its reserved space with zeros, so
 * a counter that a later version adds reads 0 from this version's library. */
typedef struct hwt_stats {
    int64_t pending;      /* as hwt_pending_timeouts() */
    uint64_t scheduled;   /* successful hwt_new_timeout*() calls */
    uint64_t expired;     /* tasks handed to run (or to the executor) */
    uint64_t cancelled;   /* successful cancels + timeouts dropped or handed back by stop */
    uint64_t rejected;    /* HWT_EREJECTED results */
    uint64_t ticks;       /* ticks elapsed since the worker started, skipped ones too,
                             until it ended (a stop; for a timer inherited by a fork
                             child, the fork) */
    uint64_t wakeups;     /* times the worker returned from sleep */
    uint64_t late_max_ns; /* worst (task start - max(deadline, time scheduled)) */
    HWT_EXTENSION union {
        uint64_t reserved[24]; /* zeros; room for later counters (see above) */
    };
} hwt_stats;

typedef struct hwt_task {
    hwt_task_fn run;       /* required: called once when the timeout expires */
    hwt_task_fn cancelled; /* optional: called once, on the worker, after a successful
                              hwt_timeout_cancel(), or when stop/destroy drops the timeout */
} hwt_task;

/* Timer options. Fill them with hwt_options_init() first, then set the fields
 * you need: it zeroes the reserved space too, and every option that a later
 * version adds there means "as 1.0 behaves" when it is zero. A caller who
 * skips hwt_options_init and sets each field by hand must zero the struct
 * first (memset, or = {0}): this version never reads the reserved space, so
 * garbage there goes unnoticed today, but a later library would read it as
 * the options it adds. */
typedef struct hwt_options {
    uint64_t tick_duration;            /* 100 */
    hwt_unit tick_unit;                /* HWT_MILLISECONDS */
    uint32_t ticks_per_wheel;          /* 512; rounded up to a power of two; 1 .. 2^30.
                                          A wheel takes 16 bytes of address space per
                                          bucket (pages only as used), out of 32 GiB
                                          the process's timers share (less under an
                                          RLIMIT_AS): one of 2^30 takes half of it,
                                          and create gets HWT_ENOMEM when it is gone */
    int64_t max_pending_timeouts;      /* -1; <= 0 means unlimited */
    uint32_t max_transfers_per_tick;   /* 100000; new timeouts moved into the wheel
                                          per worker wake-up; >= 1 */
    hwt_sleep_mode sleep_mode;         /* HWT_SLEEP_DEFAULT */
    const pthread_attr_t *thread_attr; /* NULL: defaults. Must be joinable (a detached
                                          attr is HWT_EINVAL) and stay valid until the
                                          worker has started. The worker blocks every
                                          signal, whatever mask the attr sets. */
    const char *thread_name;           /* "hwtimer"; copied; Linux keeps 15 bytes */
    /* NULL: tasks run on the worker (Netty's ImmediateExecutor). Otherwise the
     * worker calls executor(executor_ctx, timeout) for each expired timeout; the
     * executor owns one reference and must call hwt_timeout_run() exactly once,
     * from any thread. */
    void (*executor)(void *ctx, hwt_timeout *timeout);
    void *executor_ctx;
    /* NULL: warnings and errors go to stderr, debug and info are dropped.
     * Called from the thread that hit the condition (creator, worker, producer).
     * It may call the library; a message for a timer whose callback is already
     * running on the same thread goes to stderr instead, so that a callback
     * that destroys the timer on an error cannot call itself again and again. */
    void (*log)(void *ctx, hwt_log_level level, const char *message);
    void *log_ctx;
    HWT_EXTENSION union {
        uint64_t reserved[22]; /* zeroed by hwt_options_init(), never read; room
                                  for later options (see above) */
    };
} hwt_options;

/* ------------------------------------------------------------- the timer */

/* Fills *options with the defaults shown above and zeroes its reserved space;
 * NULL does nothing. Any thread. */
HWT_EXTERN void hwt_options_init(hwt_options *options);

/* Creates a timer (options NULL = defaults); the worker is not started yet.
 * HWT_EINVAL: timer NULL; ticks_per_wheel 0 or > 2^30; tick_duration 0;
 * max_transfers_per_tick 0; an invalid unit or sleep mode; a detached
 * thread_attr; a tick (ns, saturated) >= INT64_MAX / rounded wheel length.
 * A tick below the sleep mode's minimum is raised to it, with a warning through
 * the log callback. More than 64 live timers in the process logs one error, once
 * per process (a fork child's own once more). HWT_ENOMEM: nothing allocated. HWT_ESYS: a mutex, condition or the fork
 * handler could not be had (the cause is logged). Any thread. */
HWT_EXTERN int hwt_timer_create(hwt_timer **timer, const hwt_options *options);

/* Starts the worker if it is not running and waits until it has set the start
 * time; optional, the first timeout does it. 0 if already started.
 * HWT_ESTOPPED after a stop; HWT_ESYS if the thread could not be created (the
 * cause is logged; the timer stays unstarted and the call may be retried).
 * Racing a stop: 0 or HWT_ESTOPPED, never a hang. Any thread. */
HWT_EXTERN int hwt_timer_start(hwt_timer *timer);

/* Schedules run(timeout, arg) to run once, `delay` `unit`s from now (starting
 * the worker if needed). Every int64_t delay in every unit is accepted: the
 * conversion to nanoseconds saturates, an overflowing positive delay means
 * "never", zero or negative delays fire on the next tick.
 * If `timeout` is not NULL, *timeout receives one reference that the caller
 * ends with hwt_timeout_release(); with NULL the caller holds nothing.
 * Errors: HWT_EINVAL (timer or run NULL, invalid unit), HWT_ESTOPPED,
 * HWT_EREJECTED, HWT_ENOMEM (memory is exhausted, or the timer already
 * knows 65 472 distinct (run, cancelled) pairs: it keeps each pair it sees
 * once, for its lifetime), HWT_ESYS (the worker thread, or the thread key
 * of the calling thread's timeout cache, could not be had). Lock-free on the
 * hot path (a short lock once per 64 timeouts at most, to refill the
 * thread's cache). Never waits for the worker, except the first call, which
 * waits for it to start; a call that maps a new region of timeouts may wait
 * while the kernel fills it, or another thread of the process fills one
 * (they take turns): milliseconds at worst, also in a task.
 * Any thread, including tasks on the worker. */
HWT_EXTERN int hwt_new_timeout(hwt_timer *timer, hwt_task_fn run, void *arg, int64_t delay,
                               hwt_unit unit, hwt_timeout **timeout);

/* As hwt_new_timeout() with a task that may have a cancelled callback. *task is
 * copied; task or task->run NULL is HWT_EINVAL. Any thread. */
HWT_EXTERN int hwt_new_timeout_task(hwt_timer *timer, const hwt_task *task, void *arg,
                                    int64_t delay, hwt_unit unit, hwt_timeout **timeout);

/* Stops the worker. Every timeout that had not expired and was not cancelled is
 * marked cancelled and:
 *   - with both out-pointers: handed back in a new array (*unprocessed, *count),
 *     one reference each, their cancelled callbacks NOT called; free it with
 *     hwt_timeouts_release();
 *   - with both NULL: dropped, their cancelled callbacks called on the worker.
 * Every callback of the stop has run when it returns; hwt_pending_timeouts() is
 * then 0 and new timeouts get HWT_ESTOPPED. A second stop (or one racing with a
 * stop in progress, which it waits for) returns 0 with *unprocessed NULL and
 * *count 0, except after a stop that failed with HWT_ENOMEM (below): it then
 * hands back or drops what that one kept. Stopping a never-started timer
 * returns 0 with an empty list.
 * HWT_EINVAL: timer NULL, or one out-pointer without the other.
 * HWT_EDEADLK: called from the timer's own worker (from a task), or from
 * another timer's worker whose timer this timer's worker is stopping, itself
 * or through others (two tasks on two timers stopping each other's timer:
 * one of them gets it; each would otherwise wait for the other forever).
 * HWT_ENOMEM: the array could not be allocated; the timer is stopped and keeps
 * the timeouts: call hwt_stop() again to get them, or destroy to drop them (their
 * cancelled callbacks then run on the worker, which waits for that stop).
 * Thread cancellation is held off inside the call (it waits for the worker):
 * a pthread_cancel acts once it returns. Any thread but the worker.
 *
 * The process around a timer:
 *   - fork(): in the child, a timer inherited from the parent is stopped:
 *     hwt_new_timeout and hwt_timer_start return HWT_ESTOPPED, hwt_stop returns
 *     0 with an empty list, hwt_timer_destroy returns at once (neither touches
 *     the parent's worker), hwt_pending_timeouts reads 0. Its pending timeouts
 *     belong to the parent: in the child they are not run, not handed back, and
 *     hwt_timeout_cancel on them returns false; their handles may be released
 *     (the child's copy of their memory is left alone). Timers created in the
 *     child work; the parent's are unaffected. A fork() from a task (or a
 *     cancelled callback, the executor, or a log callback on the worker) runs
 *     the child on the worker's thread: exec or _exit there; if the callback
 *     returns in the child, the child calls _exit(0) rather than serve the
 *     parent's timer. The library's pthread_atfork handlers are registered
 *     when it is loaded, before the application's, whose handlers may call
 *     the library (create a timer, destroy an inherited one).
 *   - Threads cancelled with pthread_cancel (deferred cancellation) while in a
 *     library call leave no lock held. Asynchronous cancellation is undefined. */
HWT_EXTERN int hwt_stop(hwt_timer *timer, hwt_timeout ***unprocessed, size_t *count);

/* Stops the timer if needed (as hwt_stop(timer, NULL, NULL)) and gives up the
 * creator's reference. The timer's memory lives on until the last timeout
 * reference is released, and until every other thread that scheduled on it
 * (or ran its timeouts as an executor) has let go of its cache of it: at its
 * exit, at its next call on any timer a second or so after the stop, or
 * after scheduling on eight other timers (each thread keeps a cache of up to
 * a few hundred timeouts for each of the last eight timers it used; the
 * calling thread's is given back here). From the timer's own
 * worker (a task) it logs an error and does nothing - the timer stays
 * alive, so destroy it from another thread. The same where hwt_stop() would
 * return HWT_EDEADLK (a cycle of workers). NULL does nothing. Any thread but
 * the worker; once per timer. */
HWT_EXTERN void hwt_timer_destroy(hwt_timer *timer);

/* Timeouts scheduled and not yet run, cancelled or stopped. Goes down the
 * moment hwt_timeout_cancel() returns true, and before a task starts; a
 * schedule counts once it has queued its timeout, before it returns. Read
 * while other threads schedule and cancel, it is never below the count at
 * some moment of the call; with no limit set and schedules coming
 * throughout the call, it may count some made during it. HWT_EINVAL for
 * NULL. Any thread. */
HWT_EXTERN int64_t hwt_pending_timeouts(const hwt_timer *timer);

/* Fills *stats (see hwt_stats), its reserved space with zeros. NULL for either
 * does nothing. Any thread. */
HWT_EXTERN void hwt_timer_stats(const hwt_timer *timer, hwt_stats *stats);

/* ----------------------------------------------------------- the timeout */

/* Cancels a pending timeout: true if this call cancelled it (it will not run;
 * its cancelled callback runs on the worker within one tick or 100 ms, whichever
 * is longer), false if it had already expired, been cancelled or stopped, or
 * timeout is NULL. Lock-free: marks and queues, the worker unlinks. Any thread. */
HWT_EXTERN bool hwt_timeout_cancel(hwt_timeout *timeout);

/* Moves a pending timeout's deadline to `delay` `unit`s from now (since 1.1):
 * true if it was pending and now waits for the new deadline (Netty's rules
 * apply to it: never before it, nominally within a tick after it); false if
 * it had already expired, been cancelled or stopped, or timeout is NULL or
 * unit invalid - nothing changed. Same delay rules as hwt_new_timeout (saturating, zero or
 * negative = next tick). It races expiry, cancel, stop and other reschedules
 * like any state change: whichever wins decides; after a true result the task
 * never runs before the new deadline; concurrent reschedules leave it due at
 * one of the requested deadlines. The pending count does not change.
 * A timeout stays one-shot: from its own task it is already expired (false);
 * a periodic task schedules its next timeout instead.
 * Moving a deadline later costs a clock read and one compare-and-swap; the worker files the timeout again when its old slot comes due
 * (at most once per time it does). Moving it earlier also queues it for the
 * worker, as a cancel does. Lock-free, no allocation, never blocks - but for a
 * 64th call moving one timeout earlier while 63 others are each preempted
 * mid-write: it yields until one of them finishes. Any thread. */
HWT_EXTERN bool hwt_timeout_reschedule(hwt_timeout *timeout, int64_t delay, hwt_unit unit);

/* True once cancelled (by hwt_timeout_cancel or by a stop). NULL: false. Any thread. */
HWT_EXTERN bool hwt_timeout_is_cancelled(const hwt_timeout *timeout);

/* True once the worker has taken it to run (also while it runs). NULL: false.
 * Any thread. */
HWT_EXTERN bool hwt_timeout_is_expired(const hwt_timeout *timeout);

/* The timer it was scheduled on (valid until the last reference is released;
 * after hwt_timer_destroy only for comparison). NULL: NULL. Any thread. */
HWT_EXTERN hwt_timer *hwt_timeout_timer(const hwt_timeout *timeout);

/* Its task's run function and its argument. NULL: NULL. Any thread. */
HWT_EXTERN hwt_task_fn hwt_timeout_task(const hwt_timeout *timeout);
HWT_EXTERN void *hwt_timeout_arg(const hwt_timeout *timeout);

/* For executors: runs the task of a timeout the worker handed to the executor,
 * then gives up the executor's reference (also when the task ends the thread:
 * pthread_exit, or a cancellation acted on; or a C++ exception leaves it).
 * A timeout not handed to an executor, a second call, or NULL: does nothing.
 * Any thread, once per hand-over, by the executor only: an executor that
 * releases a hand-over instead of running it must not let it be run later
 * (the run would give up a reference that is no longer the executor's). */
HWT_EXTERN void hwt_timeout_run(hwt_timeout *timeout);

/* Gives up one reference (from hwt_new_timeout*, hwt_stop's list, or an
 * executor hand-over that will not be run). NULL does nothing. Any thread, any
 * time, also after the timer was stopped or destroyed. Releasing more
 * references than one holds is undefined. */
HWT_EXTERN void hwt_timeout_release(hwt_timeout *timeout);

/* Releases each of timeouts[0 .. count-1], then frees the array, which
 * hwt_stop() returned. Free that array here, never with free(), whatever its
 * size: the pointer is not the start of a malloc block (a large array is a
 * mapping of its own, which goes back to the system at once). A count of 0
 * frees the array alone, for a caller that released its timeouts one by one.
 * A NULL array does nothing (whatever the count). Any thread. */
HWT_EXTERN void hwt_timeouts_release(hwt_timeout **timeouts, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* HWTIMER_H */

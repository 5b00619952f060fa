/*
 * pool.h - a per-timer pool of timeouts, with per-thread caches, so that
 * scheduling neither calls malloc nor touches a shared cache line per
 * timeout, and whose memory goes back to the system once a burst is over.
 *
 * Timeouts live in aligned 16 KiB chunks whose header names their timer (so
 * a timeout finds its timer without storing a pointer) and their region:
 * chunks come in regions of up to 2 MiB, mapped on demand in the arena
 * (arena.h) and given back when every timeout in them is free again (pool.c
 * says when and why it is safe).
 * Any thread may allocate or free.
 */
#ifndef HWT_POOL_H
#define HWT_POOL_H

#include <ck_stack.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hwtimer.h"
#include "os.h"

#define HWT_TIMEOUT_CHUNK_BYTES 16384 /* also the alignment */
/* As many timeouts as fit beside the header, which takes the rest: a
 * chunk's last timeout ends at the chunk's end. */
#define HWT_TIMEOUTS_PER_CHUNK                                                                     \
    ((HWT_TIMEOUT_CHUNK_BYTES - sizeof(struct hwt__timeout_chunk)) / sizeof(hwt_timeout))
#define HWT_CHUNK_HEADER_BYTES                                                                     \
    (HWT_TIMEOUT_CHUNK_BYTES - HWT_TIMEOUTS_PER_CHUNK * sizeof(hwt_timeout))
/* Chunks come in regions of up to this; a region of this size is aligned to
 * it, so that it can be one large page (see grow in pool.c). */
#define HWT_MAX_REGION_BYTES HWT_OS_LARGE_PAGE_BYTES

struct hwt__region; /* pool.c */

/* The lists of regions a pool keeps (pool.c). */
enum { HWT_REGIONS_ALL, HWT_REGIONS_RECYCLED, HWT_REGIONS_TAILS, HWT_REGIONS_IDLE, HWT_REGION_LISTS };

struct hwt__pool {
    /* The depot: what no thread holds. Taken once per magazine (64
     * timeouts) or never-used chunk a thread takes or gives back. */
    pthread_mutex_t lock;
    struct hwt__region *regions[HWT_REGION_LISTS];
    size_t capacity; /* timeouts in the pool's regions */
    size_t free;     /* of them in the depot (freed, or never handed out) */
    int64_t last_take_ns; /* when threads last took timeouts at a churn's pace (coarse) */
    int64_t take_window_ns;  /* the current window of note_allocated (pool.c) */
    size_t window_allocated; /* timeouts allocated in it */
    unsigned scans;       /* hwt__pool_for_each in progress: no region goes back */
    bool trim_wanted; /* the worker planned a trim, or was woken to plan one (pool.c) */
    bool closed;      /* no thread will take timeouts any more: nothing is kept */
};

/* Header of a timeout chunk, at its aligned start. */
struct hwt__timeout_chunk {
    hwt_timer *timer;
    struct hwt__region *region;
};

/* The chunk a timeout lives in. */
static inline const struct hwt__timeout_chunk *hwt__chunk_of(const hwt_timeout *timeout)
{
    uintptr_t chunk = (uintptr_t)timeout & ~(uintptr_t)(HWT_TIMEOUT_CHUNK_BYTES - 1);
    return (const struct hwt__timeout_chunk *)chunk;
}

static inline hwt_timer *hwt__timer_of(const hwt_timeout *timeout)
{
    return hwt__chunk_of(timeout)->timer;
}

/* 0, or the error number of initialising the depot's lock. */
int hwt__pool_init(struct hwt__pool *pool);
/* Unmaps every region. Only when no object of the pool is in use or cached. */
void hwt__pool_destroy(struct hwt__pool *pool);

/* A zeroed timeout of `timer` in *out: 0, HWT_ENOMEM when memory is
 * exhausted (also for the thread's caches, at its first call), or HWT_ESYS
 * when the calling thread's cache cannot be set up (no thread key to be
 * had: the error number in *no_key, for the caller to log with
 * hwt__pool_log_no_key once it is safe to). Nothing changes on failure.
 * Any thread. `now`: the caller's hwt__now_ns() reading, by which the
 * thread's cache gives what it holds back about once a second. */
int hwt__timeout_alloc(hwt_timer *timer, int64_t now, hwt_timeout **out, int *no_key);
/* Any thread; `timeout` must not be touched afterwards (its memory may go
 * back to the system). */
void hwt__timeout_free(hwt_timer *timer, hwt_timeout *timeout);

/* Scanning every timeout of a pool, in memory order (free ones too): for the
 * final drain, when no thread can allocate from the pool any more (other
 * threads may still free; `fn` may free too). No region goes back to the
 * system during the scan. A free timeout is not in the wheel
 * (hwt__timeout_in_wheel says so: it was RELEASED, or never TRANSFERRED). */
size_t hwt__pool_capacity(struct hwt__pool *pool);
void hwt__pool_for_each(struct hwt__pool *pool, void (*fn)(void *ctx, hwt_timeout *timeout),
                        void *ctx);

/* The worker after its final drain: from now on no thread takes timeouts,
 * so every region that is or becomes entirely free goes back at once (a
 * stopped timer's memory is what its remaining handles hold). */
void hwt__pool_close(hwt_timer *timer);

/* A call of the calling thread on `timer` that did not reach its cache (a
 * schedule that failed before allocating): gives back what the cache holds
 * if it has not for about a second, as an allocation would. */
void hwt__pool_note_call(hwt_timer *timer);

/* Gives back what the calling thread caches for `timer` (before the creator's
 * reference is dropped, so the timer can be freed without waiting for it). */
void hwt__pool_forget_thread(hwt_timer *timer);

/* In a fork child: forgets the calling thread's cache without touching the
 * (inherited) timer it was bound to, and resets the pool's process-wide
 * lock (a thread that held it is gone). */
void hwt__pool_after_fork_in_child(void);
/* Around a fork: the process's list of thread caches does not change as
 * the child copies it (before_fork takes its lock; the parent's handler
 * and hwt__pool_after_fork_in_child release it). */
void hwt__pool_before_fork(void);
void hwt__pool_after_fork_in_parent(void);

/* Binds the calling thread's cache to `timer` (the worker, at start: its
 * frees are then cached, and given back when it exits). 0, or the error
 * number when no thread key could be had (ENOMEM: or no memory for the
 * thread's caches): the thread's frees then go straight to the depot. Not
 * logged: see hwt__pool_log_no_key. */
int hwt__pool_bind_thread(hwt_timer *timer);

/* Whether the calling thread has a cache bound to `timer`: it allocated
 * from it, and the binding holds a reference to the timer until the thread
 * exits, gives it up for one timer more than it caches, or finds the timer
 * stopped. */
bool hwt__pool_thread_bound(const hwt_timer *timer);

/* Logs (ERROR) that no thread key could be had: err, from a bind. Calls the
 * user's log callback, which may call the library: never from inside a
 * schedule that a stop may be waiting for, nor before the worker is up. */
void hwt__pool_log_no_key(const hwt_timer *timer, int err);

/* Gives what the calling thread caches for `timer` (if it is bound to it)
 * back to the depot, and with them any region they empty; it stays bound.
 * Bound to another timer (a task scheduled there), it gives that timer its
 * cache back and binds to `timer` again. Then gives back the regions the depot kept for its busy
 * allowance if it has been quiet long enough. Returns when to call again
 * for such regions (CLOCK_MONOTONIC ns; INT64_MAX: none kept). For the
 * worker before it sleeps: nobody else can take what its cache holds (a
 * few freed timeouts in random places would keep their regions mapped for
 * as long as it runs), and no other thread may come by to trim. */
int64_t hwt__pool_give_back_freed(hwt_timer *timer);

/* The most a thread caches for the timer it is bound to: two magazines of
 * freed timeouts and what is left of one never-used chunk. */
#define HWT_POOL_MAG_SIZE 64
/* The timers a thread keeps a cache for at once (pool.c, CACHE_TIMERS). */
#define HWT_POOL_THREAD_TIMERS 8
#define HWT_POOL_THREAD_CACHE_MAX (2 * HWT_POOL_MAG_SIZE + HWT_TIMEOUTS_PER_CHUNK)

/* Free timeouts the depot keeps mapped rather than give back (pool.c): the
 * reserve, and more while threads are taking timeouts (a churn). */
#define HWT_POOL_RESERVE_BYTES (UINT64_C(4) << 20)
#define HWT_POOL_BUSY_KEEP_BYTES (UINT64_C(16) << 20)

/* For tests: how many timeouts of `timer` the calling thread caches. */
size_t hwt__pool_thread_cached(hwt_timer *timer);

#endif

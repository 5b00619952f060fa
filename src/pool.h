/*
 * pool.h - a per-timer pool of timeouts, with per-thread caches, so that
 * scheduling neither calls malloc nor touches a shared cache line per
 * timeout.
 *
 * Memory is type-stable: chunks are allocated on demand and only freed with
 * the timer's memory (after the last timeout reference is gone). Timeouts
 * live in aligned chunks whose header names their timer, so a timeout finds
 * its timer without storing a pointer. Any thread may allocate or free.
 */
#ifndef HWT_POOL_H
#define HWT_POOL_H

#include <ck_stack.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hwtimer.h"

#define HWT_TIMEOUT_CHUNK_BYTES 16384 /* also the alignment */
/* As many timeouts as fit beside the header, which takes the rest (32 bytes
 * with 56-byte timeouts): a chunk's last timeout ends at the chunk's end. */
#define HWT_TIMEOUTS_PER_CHUNK                                                                     \
    ((HWT_TIMEOUT_CHUNK_BYTES - sizeof(struct hwt__timeout_chunk)) / sizeof(hwt_timeout))
#define HWT_CHUNK_HEADER_BYTES                                                                     \
    (HWT_TIMEOUT_CHUNK_BYTES - HWT_TIMEOUTS_PER_CHUNK * sizeof(hwt_timeout))
#define HWT_MAX_REGION_BYTES (UINT64_C(2) << 20) /* chunks come in regions of up to this */

struct hwt__pool {
    _Alignas(16) ck_stack_t depot;   /* full magazines */
    _Alignas(16) ck_stack_t regions; /* every region, for the final free */
};

/* Header of a timeout chunk, at its aligned start. Chunks come in regions
 * of one or more; the first chunk of a region also records the region. */
struct hwt__timeout_chunk {
    hwt_timer *timer;
    ck_stack_entry_t region_link;
    size_t region_bytes;
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

/* 0 or HWT_ENOMEM. */
int hwt__pool_init(struct hwt__pool *pool);
/* Frees every chunk. Only when no object of the pool is in use or cached. */
void hwt__pool_destroy(struct hwt__pool *pool);

/* A zeroed timeout of `timer`, or NULL when memory is exhausted. */
hwt_timeout *hwt__timeout_alloc(hwt_timer *timer);
void hwt__timeout_free(hwt_timer *timer, hwt_timeout *timeout);

/* Scanning every timeout of a pool, in memory order (free ones too): for the
 * final drain, when no thread can allocate from the pool any more. A free
 * timeout has no worker flags (wflags) set. */
size_t hwt__pool_capacity(struct hwt__pool *pool);
void hwt__pool_for_each(struct hwt__pool *pool, void (*fn)(void *ctx, hwt_timeout *timeout),
                        void *ctx);

/* Gives back what the calling thread caches for `timer` (before the creator's
 * reference is dropped, so the timer can be freed without waiting for it). */
void hwt__pool_forget_thread(hwt_timer *timer);

/* In a fork child: forgets the calling thread's cache without touching the
 * (inherited) timer it was bound to. */
void hwt__pool_drop_thread_cache(void);

/* Binds the calling thread's cache to `timer` (the worker, at start: its
 * frees are then cached, and given back when it exits). */
void hwt__pool_bind_thread(hwt_timer *timer);

#endif

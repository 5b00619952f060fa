/*
 * pool.c - the timeout and queue-entry pools (see pool.h). Any thread.
 */
#include <string.h>

#include "alloc.h"
#include "internal.h"

#define CHUNK_HEADER 64
#define TIMEOUTS_PER_CHUNK ((HWT_TIMEOUT_CHUNK_BYTES - CHUNK_HEADER) / sizeof(hwt_timeout))
#define ENTRIES_PER_CHUNK 170

_Static_assert(sizeof(struct hwt__timeout_chunk) <= CHUNK_HEADER, "chunk header fits");

struct entry_chunk {
    _Alignas(16) ck_stack_entry_t chunk_link;
    struct hwt__qentry entries[ENTRIES_PER_CHUNK];
};

void hwt__pool_init(struct hwt__pool *pool)
{
    memset(pool, 0, sizeof *pool);
}

static hwt_timeout *chunk_slot(struct hwt__timeout_chunk *chunk, size_t i)
{
    return (hwt_timeout *)((char *)chunk + CHUNK_HEADER) + i;
}

void hwt__pool_destroy(struct hwt__pool *pool)
{
    ck_stack_entry_t *e = hwt__stack_take_all(&pool->timeout_chunks);
    while (e != NULL) {
        ck_stack_entry_t *next = e->next;
        hwt__free((char *)e - offsetof(struct hwt__timeout_chunk, chunk_link));
        e = next;
    }
    e = hwt__stack_take_all(&pool->entry_chunks);
    while (e != NULL) {
        ck_stack_entry_t *next = e->next;
        hwt__free((char *)e - offsetof(struct entry_chunk, chunk_link));
        e = next;
    }
}

/* Allocates a chunk, keeps its first timeout for the caller, pools the rest. */
static hwt_timeout *grow_timeouts(hwt_timer *timer)
{
    struct hwt__timeout_chunk *chunk =
        hwt__aligned_alloc(HWT_SITE_TIMEOUT_POOL, HWT_TIMEOUT_CHUNK_BYTES, HWT_TIMEOUT_CHUNK_BYTES);
    if (chunk == NULL)
        return NULL;
    chunk->timer = timer;
    for (size_t i = 1; i < TIMEOUTS_PER_CHUNK; i++)
        hwt__stack_push(&timer->pool.free_timeouts, &chunk_slot(chunk, i)->stack_link);
    hwt__stack_push(&timer->pool.timeout_chunks, &chunk->chunk_link);
    return chunk_slot(chunk, 0);
}

hwt_timeout *hwt__timeout_alloc(hwt_timer *timer)
{
    ck_stack_entry_t *e = hwt__stack_pop(&timer->pool.free_timeouts);
    hwt_timeout *t = e != NULL ? hwt__timeout_of_stack(e) : grow_timeouts(timer);
    if (t == NULL)
        return NULL;
    memset(t, 0, sizeof *t);
    atomic_fetch_add_explicit(&timer->refs, 1, memory_order_relaxed);
    return t;
}

void hwt__timeout_free(hwt_timer *timer, hwt_timeout *timeout)
{
    hwt__stack_push(&timer->pool.free_timeouts, &timeout->stack_link);
    hwt__timer_unref(timer);
}

static struct hwt__qentry *grow_entries(hwt_timer *timer)
{
    struct entry_chunk *chunk = hwt__aligned_alloc(HWT_SITE_ENTRY_POOL, 64, sizeof *chunk);
    if (chunk == NULL)
        return NULL;
    for (size_t i = 1; i < ENTRIES_PER_CHUNK; i++)
        hwt__stack_push(&timer->pool.free_entries, &chunk->entries[i].pool_link);
    hwt__stack_push(&timer->pool.entry_chunks, &chunk->chunk_link);
    return &chunk->entries[0];
}

struct hwt__qentry *hwt__entry_alloc(hwt_timer *timer)
{
    ck_stack_entry_t *e = hwt__stack_pop(&timer->pool.free_entries);
    if (e == NULL)
        return grow_entries(timer);
    return (struct hwt__qentry *)((char *)e - offsetof(struct hwt__qentry, pool_link));
}

void hwt__entry_free(hwt_timer *timer, struct hwt__qentry *entry)
{
    hwt__stack_push(&timer->pool.free_entries, &entry->pool_link);
}

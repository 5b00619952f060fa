/*
 * pool.c - the timeout and queue-entry pools (see pool.h). Any thread.
 *
 * Magazines (Bonwick's slab allocator): free objects travel in chains of up
 * to MAG_SIZE, linked through the object's own free-list field. Each thread
 * caches two chains per object class for the one timer it used last
 * ("loaded" to allocate from and free to, "spare"); only when both are
 * empty or full does it pop or push a whole chain on the timer's depot, a
 * ck_stack (mpmc pop with a generation counter: the memory is type-stable).
 *
 * The timer's reference count holds one reference per object outside the
 * depot (cached or in use), minus the queues' stub entries, which the timer
 * owns; so its memory outlives every cached or used object. A cache is bound
 * by allocating (and by the worker, to its own timer, at start); a thread
 * gives it back when it allocates from another timer, when it exits (a
 * pthread key destructor), or when it destroys the timer. Freeing never
 * binds: a thread that only releases handles holds nothing.
 */
#include <pthread.h>
#include <string.h>

#include "alloc.h"
#include "internal.h"

#define MAG_SIZE 64
#define CHUNK_HEADER 64
#define TIMEOUTS_PER_CHUNK ((HWT_TIMEOUT_CHUNK_BYTES - CHUNK_HEADER) / sizeof(hwt_timeout))
#define ENTRIES_PER_CHUNK 127

_Static_assert(sizeof(struct hwt__timeout_chunk) <= CHUNK_HEADER, "chunk header fits");

struct entry_chunk {
    _Alignas(16) ck_stack_entry_t chunk_link;
    struct hwt__qentry entries[ENTRIES_PER_CHUNK];
};

/* Where each class keeps its free-list link and its magazine head. */
static const struct {
    size_t node_off, head_off;
} layout[HWT_POOL_CLASSES] = {
    [HWT_POOL_TIMEOUTS] = {offsetof(hwt_timeout, stack_link), offsetof(hwt_timeout, mag)},
    [HWT_POOL_ENTRIES] = {offsetof(struct hwt__qentry, pool_link),
                          offsetof(struct hwt__qentry, mag)},
};

struct mag {
    ck_stack_entry_t *first; /* free-list nodes, linked by ->next */
    size_t count;
};

struct thread_cache {
    hwt_timer *timer;
    struct mag loaded[HWT_POOL_CLASSES], spare[HWT_POOL_CLASSES];
};

static HWT_THREAD_LOCAL struct thread_cache cache;
static pthread_key_t cache_key;
static pthread_once_t cache_key_once = PTHREAD_ONCE_INIT;

static void *object_of(int cls, ck_stack_entry_t *node)
{
    return (char *)node - layout[cls].node_off;
}

static struct hwt__mag_head *head_of(int cls, ck_stack_entry_t *node)
{
    return (struct hwt__mag_head *)((char *)node - layout[cls].node_off + layout[cls].head_off);
}

static ck_stack_entry_t *node_of_head(int cls, ck_stack_entry_t *depot_link)
{
    char *head = (char *)depot_link - offsetof(struct hwt__mag_head, depot_link);
    return (ck_stack_entry_t *)(head - layout[cls].head_off + layout[cls].node_off);
}

/* ---------------------------------------------------------------- depot */

static void depot_push(hwt_timer *timer, int cls, struct mag m)
{
    struct hwt__mag_head *head = head_of(cls, m.first);
    head->count = m.count;
    hwt__stack_push(&timer->pool.depot[cls], &head->depot_link);
}

static struct mag depot_pop(hwt_timer *timer, int cls)
{
    struct mag m = {NULL, 0};
    ck_stack_entry_t *link = hwt__stack_pop(&timer->pool.depot[cls]);
    if (link != NULL) {
        m.first = node_of_head(cls, link);
        m.count = head_of(cls, m.first)->count;
        atomic_fetch_add_explicit(&timer->refs, m.count, memory_order_relaxed);
    }
    return m;
}

/* ---------------------------------------------------------------- chunks */

/* Chains n objects spaced `stride` bytes apart, starting at `first`. */
static struct mag chain(int cls, char *first, size_t stride, size_t n)
{
    struct mag m = {NULL, n};
    for (size_t i = n; i-- > 0;) {
        ck_stack_entry_t *node = (ck_stack_entry_t *)(first + i * stride + layout[cls].node_off);
        node->next = m.first;
        m.first = node;
    }
    return m;
}

/* Timeout memory comes in regions of 16 KiB chunks, each region twice the
 * last up to 2 MiB: a small timer stays small, a big one takes few page
 * faults (2 MiB regions are backed by transparent huge pages). The caller's
 * cache gets the first chunk, the depot the rest. */
#define FIRST_REGION_BYTES HWT_TIMEOUT_CHUNK_BYTES
#define MAX_REGION_BYTES (UINT64_C(2) << 20)

static struct mag grow_timeouts(hwt_timer *timer)
{
    const int cls = HWT_POOL_TIMEOUTS;
    struct mag first = {NULL, 0};
    size_t bytes = atomic_load_explicit(&timer->pool.next_region_bytes, memory_order_relaxed);
    if (bytes == 0)
        bytes = FIRST_REGION_BYTES;
    char *region = hwt__map_aligned(HWT_SITE_TIMEOUT_POOL, bytes, HWT_TIMEOUT_CHUNK_BYTES,
                                    bytes == MAX_REGION_BYTES);
    if (region == NULL)
        return first;
    atomic_store_explicit(&timer->pool.next_region_bytes,
                          bytes * 2 > MAX_REGION_BYTES ? MAX_REGION_BYTES : bytes * 2,
                          memory_order_relaxed);
    struct hwt__timeout_chunk *head = (struct hwt__timeout_chunk *)region;
    head->region_bytes = bytes;
    for (size_t off = 0; off < bytes; off += HWT_TIMEOUT_CHUNK_BYTES) {
        struct hwt__timeout_chunk *chunk = (struct hwt__timeout_chunk *)(region + off);
        chunk->timer = timer;
        struct mag m =
            chain(cls, (char *)chunk + CHUNK_HEADER, sizeof(hwt_timeout), TIMEOUTS_PER_CHUNK);
        if (off == 0)
            first = m;
        else
            depot_push(timer, cls, m);
    }
    hwt__stack_push(&timer->pool.chunks[cls], &head->region_link);
    atomic_fetch_add_explicit(&timer->refs, first.count, memory_order_relaxed);
    return first;
}

static struct mag grow_entries(hwt_timer *timer)
{
    const int cls = HWT_POOL_ENTRIES;
    struct mag m = {NULL, 0};
    struct entry_chunk *chunk = hwt__aligned_alloc(HWT_SITE_ENTRY_POOL, 64, sizeof *chunk);
    if (chunk == NULL)
        return m;
    hwt__stack_push(&timer->pool.chunks[cls], &chunk->chunk_link);
    m = chain(cls, (char *)chunk->entries, sizeof(struct hwt__qentry), ENTRIES_PER_CHUNK);
    atomic_fetch_add_explicit(&timer->refs, m.count, memory_order_relaxed);
    return m;
}

void hwt__pool_init(struct hwt__pool *pool)
{
    memset(pool, 0, sizeof *pool);
}

void hwt__pool_destroy(struct hwt__pool *pool)
{
    ck_stack_entry_t *e = hwt__stack_take_all(&pool->chunks[HWT_POOL_TIMEOUTS]);
    while (e != NULL) {
        ck_stack_entry_t *next = e->next;
        struct hwt__timeout_chunk *head =
            (struct hwt__timeout_chunk *)((char *)e -
                                          offsetof(struct hwt__timeout_chunk, region_link));
        hwt__unmap(head, head->region_bytes);
        e = next;
    }
    e = hwt__stack_take_all(&pool->chunks[HWT_POOL_ENTRIES]);
    while (e != NULL) {
        ck_stack_entry_t *next = e->next;
        hwt__free((char *)e - offsetof(struct entry_chunk, chunk_link));
        e = next;
    }
}

/* ---------------------------------------------------------------- caches */

/* Gives the calling thread's cache back to its timer and unbinds it. */
static void flush(struct thread_cache *c)
{
    hwt_timer *timer = c->timer;
    if (timer == NULL)
        return;
    size_t returned = 0;
    for (int cls = 0; cls < HWT_POOL_CLASSES; cls++) {
        struct mag *mags[2] = {&c->loaded[cls], &c->spare[cls]};
        for (int i = 0; i < 2; i++) {
            if (mags[i]->count > 0) {
                depot_push(timer, cls, *mags[i]);
                returned += mags[i]->count;
            }
            mags[i]->first = NULL;
            mags[i]->count = 0;
        }
    }
    c->timer = NULL;
    if (returned > 0)
        hwt__timer_unref_n(timer, returned);
}

static void flush_at_thread_exit(void *c)
{
    flush(c);
}

static void make_key(void)
{
    pthread_key_create(&cache_key, flush_at_thread_exit);
}

static struct thread_cache *bind(hwt_timer *timer)
{
    struct thread_cache *c = &cache;
    if (c->timer != timer) {
        if (c->timer != NULL)
            flush(c);
        else {
            pthread_once(&cache_key_once, make_key);
            pthread_setspecific(cache_key, c); /* arms the exit destructor */
        }
        c->timer = timer;
    }
    return c;
}

void hwt__pool_forget_thread(hwt_timer *timer)
{
    if (cache.timer == timer)
        flush(&cache);
}

void hwt__pool_bind_thread(hwt_timer *timer)
{
    bind(timer);
}

void hwt__pool_abandon_thread(hwt_timer *timer)
{
    if (cache.timer == timer)
        memset(&cache, 0, sizeof cache);
}

static void *alloc(hwt_timer *timer, int cls)
{
    struct thread_cache *c = bind(timer);
    struct mag *m = &c->loaded[cls];
    if (m->count == 0) {
        if (c->spare[cls].count > 0) {
            *m = c->spare[cls];
            c->spare[cls].first = NULL;
            c->spare[cls].count = 0;
        } else {
            *m = depot_pop(timer, cls);
            if (m->count == 0)
                *m = cls == HWT_POOL_TIMEOUTS ? grow_timeouts(timer) : grow_entries(timer);
            if (m->count == 0)
                return NULL;
        }
    }
    ck_stack_entry_t *node = m->first;
    m->first = node->next;
    m->count--;
    return object_of(cls, node);
}

static void release(hwt_timer *timer, int cls, void *object)
{
    ck_stack_entry_t *node = (ck_stack_entry_t *)((char *)object + layout[cls].node_off);
    struct thread_cache *c = &cache;
    if (c->timer != timer) {
        /* Only allocating binds a cache (and the worker, for its own timer):
         * binding here could pin a destroyed timer's memory to a thread that
         * merely released its last handle. Straight back to the depot. */
        node->next = NULL;
        depot_push(timer, cls, (struct mag){node, 1});
        hwt__timer_unref_n(timer, 1);
        return;
    }
    struct mag *m = &c->loaded[cls];
    if (m->count >= MAG_SIZE) {
        struct mag full = c->spare[cls];
        c->spare[cls] = *m;
        m->first = NULL;
        m->count = 0;
        if (full.count > 0) {
            depot_push(timer, cls, full);
            hwt__timer_unref_n(timer, full.count); /* never the last: `object` is ours */
        }
    }
    node->next = m->first;
    m->first = node;
    m->count++;
}

hwt_timeout *hwt__timeout_alloc(hwt_timer *timer)
{
    hwt_timeout *t = alloc(timer, HWT_POOL_TIMEOUTS);
    if (t != NULL)
        memset(t, 0, sizeof *t);
    return t;
}

void hwt__timeout_free(hwt_timer *timer, hwt_timeout *timeout)
{
    release(timer, HWT_POOL_TIMEOUTS, timeout);
}

struct hwt__qentry *hwt__entry_alloc(hwt_timer *timer)
{
    return alloc(timer, HWT_POOL_ENTRIES);
}

void hwt__entry_free(hwt_timer *timer, struct hwt__qentry *entry)
{
    release(timer, HWT_POOL_ENTRIES, entry);
}

/*
 * pool.c - the timeout pool (see pool.h). Any thread.
 *
 * Magazines (Bonwick's slab allocator): free objects travel in chains of up
 * to MAG_SIZE, linked through the object's own free-list field. Each thread
 * caches two chains per object class for the one timer it used last
 * ("loaded" to allocate from and free to, "spare"); only when both are
 * empty or full does it pop or push a whole chain on the timer's depot, a
 * ck_stack (mpmc pop with a generation counter: the memory is type-stable).
 *
 * The timer's reference count holds one reference per object outside the
 * depot (cached or in use), so its memory outlives every cached or used
 * object. A cache is bound
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

_Static_assert(sizeof(struct hwt__timeout_chunk) <= HWT_CHUNK_HEADER_BYTES, "chunk header fits");
_Static_assert(HWT_CHUNK_HEADER_BYTES + HWT_TIMEOUTS_PER_CHUNK * sizeof(hwt_timeout) ==
                   HWT_TIMEOUT_CHUNK_BYTES,
               "a chunk's last timeout ends where the next chunk starts (fresh_after)");

struct mag {
    ck_stack_entry_t *first; /* free-list nodes, linked by ->next */
    size_t count;
};

/* Allocating a recycled timeout prefetches the one this many pops ahead in
 * its magazine, noted by its freer (hwt__timeout_free): one pop ahead is too
 * close to hide a miss to another CPU's cache (`hwt-bench churn`, 10
 * interleaved runs: 55.9 -> 52.8 ns per pair; 8 ahead did no better). */
#define PREFETCH_AHEAD 4

struct thread_cache {
    hwt_timer *timer;
    struct mag loaded, spare;
    /* The last PREFETCH_AHEAD timeouts freed onto `loaded`, by free count. */
    hwt_timeout *freed[PREFETCH_AHEAD];
    size_t freed_count;
    /* Never used timeouts, consecutive in memory, taken in order: one write
     * each. (Chaining them first wrote every cold cache line twice.) */
    hwt_timeout *fresh;
    size_t fresh_count;
    size_t region_bytes; /* of the last region it mapped for `timer` (0: none) */
};

static HWT_THREAD_LOCAL struct thread_cache cache;
static pthread_key_t cache_key;
static pthread_once_t cache_key_once = PTHREAD_ONCE_INIT;

/* A free timeout links into its magazine through stack_link; the first one
 * of a magazine also heads it: depot_link, and mag_count (in the deadline's
 * place). */
static hwt_timeout *object_of(ck_stack_entry_t *node)
{
    return hwt__timeout_of_stack(node);
}

static ck_stack_entry_t *node_of_head(ck_stack_entry_t *depot_link)
{
    hwt_timeout *t = (hwt_timeout *)((char *)depot_link - offsetof(hwt_timeout, depot_link));
    return &t->stack_link;
}

/* ---------------------------------------------------------------- depot */

/* A depot entry is a magazine (a chain) or, with FRESH in its count, a run
 * of never used timeouts consecutive in memory, not chained. */
#define FRESH ((size_t)1 << (sizeof(size_t) * 8 - 1))

static void depot_push_head(hwt_timer *timer, hwt_timeout *first, size_t count_and_flag)
{
    first->mag_count = count_and_flag;
    hwt__stack_push(&timer->pool.depot, &first->depot_link);
}

static void depot_push(hwt_timer *timer, struct mag m)
{
    depot_push_head(timer, object_of(m.first), m.count);
}

/* A magazine or a fresh run (*fresh set) from the depot; count 0 if empty. */
static struct mag depot_pop(hwt_timer *timer, bool *fresh)
{
    struct mag m = {NULL, 0};
    ck_stack_entry_t *link = hwt__stack_pop(&timer->pool.depot);
    if (link != NULL) {
        m.first = node_of_head(link);
        size_t count = object_of(m.first)->mag_count;
        *fresh = (count & FRESH) != 0;
        m.count = count & ~FRESH;
        atomic_fetch_add_explicit(&timer->refs, m.count, memory_order_relaxed);
    }
    return m;
}

/* ---------------------------------------------------------------- chunks */

/* Timeout memory comes in regions of 16 KiB chunks. A region is one fresh
 * run for the thread that maps it; each thread's regions double from one
 * chunk up to 2 MiB, so a thread that schedules little holds little, and a
 * busy one maps few regions. (Another thread maps its own; a thread that
 * exits gives the rest of its run back to the depot.) Chunk headers are
 * written as the run reaches them, so that new memory is first written in
 * address order: on VMs where each new page's first write traps to the
 * host, writing every chunk's header when the region was mapped (a page in
 * four first, then the rest) cost ~1.5x as much in all (56 MiB populated:
 * 47.7 against 31 ms on one thread). Chunks of one region handed to two
 * threads in turn were slower still: their first writes, 16 KiB apart,
 * contend in the host (`hwt-bench schedule` ~85 against ~70 ns).
 *
 * No transparent huge pages: with 2 MiB-aligned regions and MADV_HUGEPAGE,
 * `hwt-bench schedule` was ~20% faster but the expire workload's lateness
 * p99 doubled (1.3-2.0 -> 1.9-4.4 ms; most likely the producers clearing
 * huge pages in the kernel while the worker is due). */
#define FIRST_REGION_BYTES HWT_TIMEOUT_CHUNK_BYTES

static size_t timeouts_in_region(size_t region_bytes)
{
    return region_bytes / HWT_TIMEOUT_CHUNK_BYTES * HWT_TIMEOUTS_PER_CHUNK;
}

static struct mag grow_timeouts(hwt_timer *timer, struct thread_cache *c)
{
    struct mag first = {NULL, 0}; /* a fresh run */
    size_t bytes = c->region_bytes == 0                         ? FIRST_REGION_BYTES
                   : c->region_bytes * 2 > HWT_MAX_REGION_BYTES ? HWT_MAX_REGION_BYTES
                                                                : c->region_bytes * 2;
    char *region = hwt__map_aligned(HWT_SITE_TIMEOUT_POOL, bytes, HWT_TIMEOUT_CHUNK_BYTES);
    if (region == NULL)
        return first;
    c->region_bytes = bytes;
    struct hwt__timeout_chunk *head = (struct hwt__timeout_chunk *)region;
    head->timer = timer;
    head->region_bytes = bytes;
    hwt_timeout *run = (hwt_timeout *)(region + HWT_CHUNK_HEADER_BYTES);
    first = (struct mag){&run->stack_link, timeouts_in_region(bytes)};
    hwt__stack_push(&timer->pool.regions, &head->region_link);
    atomic_fetch_add_explicit(&timer->refs, first.count, memory_order_relaxed);
    return first;
}

int hwt__pool_init(struct hwt__pool *pool)
{
    memset(pool, 0, sizeof *pool);
    return 0;
}

static struct hwt__timeout_chunk *region_of(ck_stack_entry_t *region_link)
{
    return (struct hwt__timeout_chunk *)((char *)region_link -
                                         offsetof(struct hwt__timeout_chunk, region_link));
}

void hwt__pool_destroy(struct hwt__pool *pool)
{
    ck_stack_entry_t *e = hwt__stack_take_all(&pool->regions);
    while (e != NULL) {
        ck_stack_entry_t *next = e->next;
        struct hwt__timeout_chunk *head = region_of(e);
        hwt__unmap(head, head->region_bytes);
        e = next;
    }
}

size_t hwt__pool_capacity(struct hwt__pool *pool)
{
    size_t n = 0;
    for (ck_stack_entry_t *e = hwt__stack_peek(&pool->regions); e != NULL; e = e->next)
        n += timeouts_in_region(region_of(e)->region_bytes);
    return n;
}

void hwt__pool_for_each(struct hwt__pool *pool, void (*fn)(void *ctx, hwt_timeout *timeout),
                        void *ctx)
{
    for (ck_stack_entry_t *e = hwt__stack_peek(&pool->regions); e != NULL; e = e->next) {
        char *region = (char *)region_of(e);
        size_t bytes = region_of(e)->region_bytes;
        for (size_t off = 0; off < bytes; off += HWT_TIMEOUT_CHUNK_BYTES) {
            hwt_timeout *t = (hwt_timeout *)(region + off + HWT_CHUNK_HEADER_BYTES);
            for (size_t i = 0; i < HWT_TIMEOUTS_PER_CHUNK; i++)
                fn(ctx, &t[i]);
        }
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
    struct mag *mags[2] = {&c->loaded, &c->spare};
    for (int i = 0; i < 2; i++) {
        if (mags[i]->count > 0) {
            depot_push(timer, *mags[i]);
            returned += mags[i]->count;
        }
        mags[i]->first = NULL;
        mags[i]->count = 0;
    }
    if (c->fresh_count > 0) {
        depot_push_head(timer, c->fresh, c->fresh_count | FRESH);
        returned += c->fresh_count;
        c->fresh = NULL;
        c->fresh_count = 0;
    }
    c->timer = NULL;
    c->region_bytes = 0;
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

void hwt__pool_drop_thread_cache(void)
{
    memset(&cache, 0, sizeof cache);
}

void hwt__pool_bind_thread(hwt_timer *timer)
{
    bind(timer);
}

/* The timeout a fresh run continues with after t: the next one, or past a
 * chunk's end the first of the next chunk, whose header is written now
 * (the same timer). Only while the run has more. */
static hwt_timeout *fresh_after(hwt_timeout *t)
{
    char *next = (char *)(t + 1);
    if (((uintptr_t)next & (HWT_TIMEOUT_CHUNK_BYTES - 1)) != 0)
        return t + 1;
    struct hwt__timeout_chunk *chunk = (struct hwt__timeout_chunk *)next;
    const struct hwt__timeout_chunk *before =
        (const struct hwt__timeout_chunk *)(next - HWT_TIMEOUT_CHUNK_BYTES);
    chunk->timer = before->timer;
    return (hwt_timeout *)(next + HWT_CHUNK_HEADER_BYTES);
}

hwt_timeout *hwt__timeout_alloc(hwt_timer *timer)
{
    struct thread_cache *c = bind(timer);
    struct mag *m = &c->loaded;
    if (m->count == 0 && c->spare.count > 0) {
        *m = c->spare;
        c->spare.first = NULL;
        c->spare.count = 0;
        c->freed_count = 0; /* a new chain: later frees start over */
    }
    if (m->count == 0 && c->fresh_count == 0) {
        bool fresh = true;
        struct mag got = depot_pop(timer, &fresh);
        if (got.count == 0)
            got = grow_timeouts(timer, c);
        if (got.count == 0)
            return NULL;
        if (fresh) {
            c->fresh = object_of(got.first);
            c->fresh_count = got.count;
        } else {
            *m = got;
            c->freed_count = 0;
        }
    }
    hwt_timeout *t;
    if (m->count > 0) { /* recycled first: its memory is more likely cached */
        ck_stack_entry_t *node = m->first;
        m->first = node->next;
        m->count--;
        t = object_of(node);
        /* Recycled memory is often in another CPU's cache: fetch the one
         * PREFETCH_AHEAD pops ahead, which its freer noted (any address of
         * the pool is safe to prefetch). */
        if (t->arg != NULL)
            __builtin_prefetch(t->arg, 1);
        else if (m->first != NULL)
            __builtin_prefetch(object_of(m->first), 1);
    } else {
        t = c->fresh;
        c->fresh_count--;
        c->fresh = c->fresh_count > 0 ? fresh_after(t) : NULL;
    }
    memset(t, 0, sizeof *t);
    return t;
}

void hwt__timeout_free(hwt_timer *timer, hwt_timeout *timeout)
{
    ck_stack_entry_t *node = &timeout->stack_link;
    struct thread_cache *c = &cache;
    if (c->timer != timer) {
        /* Only allocating binds a cache (and the worker, for its own timer):
         * binding here could pin a destroyed timer's memory to a thread that
         * merely released its last handle. Straight back to the depot. */
        node->next = NULL;
        timeout->arg = NULL; /* nothing to prefetch after it */
        depot_push(timer, (struct mag){node, 1});
        hwt__timer_unref_n(timer, 1);
        return;
    }
    struct mag *m = &c->loaded;
    if (m->count >= MAG_SIZE) {
        struct mag full = c->spare;
        c->spare = *m;
        m->first = NULL;
        m->count = 0;
        c->freed_count = 0;
        if (full.count > 0) {
            depot_push(timer, full);
            hwt__timer_unref_n(timer, full.count); /* never the last: `timeout` is ours */
        }
    }
    node->next = m->first;
    m->first = node;
    m->count++;
    /* Popped PREFETCH_AHEAD pops before the one freed that many frees ago:
     * note it in the free timeout's `arg` (unused while free). */
    size_t slot = c->freed_count % PREFETCH_AHEAD;
    timeout->arg = c->freed_count >= PREFETCH_AHEAD ? c->freed[slot] : NULL;
    c->freed[slot] = timeout;
    c->freed_count++;
}

/*
 * pool.c - the timeout pool (see pool.h). Any thread.
 *
 * Three layers, as in Bonwick's slab allocator with magazines:
 *
 *   thread caches  per thread, one for each of the last CACHE_TIMERS (8)
 *                  timers it allocated from (see there), in an array
 *                  allocated at its first bind: two
 *                  magazines (chains of up to MAG_SIZE freed timeouts,
 *                  linked through stack_link: "loaded" to allocate from and
 *                  free to, "spare") and the rest of one never-used chunk,
 *                  consecutive in memory and taken in order (one write
 *                  each). No lock and no atomic: most allocations and frees
 *                  end here. A cache is bound by allocating (and by the
 *                  worker, to its own timer, at start); a thread gives it
 *                  back when it allocates from one timer more (the cache
 *                  it bound longest ago), when it exits (a pthread key
 *                  destructor), when it destroys the timer, and when it
 *                  frees a timeout of the timer once it is stopped.
 *                  Freeing never binds, but running a timeout for an
 *                  executor does (hwt_timeout_run: an executor's thread
 *                  frees what it runs): a thread that only releases
 *                  handles holds nothing.
 *   the depot      per timer, behind one mutex, taken once per magazine or
 *                  chunk a thread takes or gives back. It keeps every free
 *                  timeout in its own region, as a stack of magazines: a
 *                  whole magazine of one region (the usual case: a cache
 *                  notes each free's region, from the chunk header the
 *                  free has just read) goes onto its region's stack as it
 *                  is; any other is sorted into its timeouts' regions (one
 *                  pass over at most MAG_SIZE timeouts the giver has just
 *                  touched). Taking a magazine is O(1). Freed timeouts go
 *                  out before never-used ones (their memory is more likely
 *                  cached).
 *   regions        1 to 128 chunks of 16 KiB, mapped at once, in the arena
 *                  (arena.h: the wheel links timeouts by 32-bit refs). Each
 *                  thread's regions double from one chunk up to 2 MiB, so a
 *                  thread that schedules little holds little and a busy one
 *                  maps few regions. A region hands out its never-used chunks
 *                  one at a time, in address order, to the thread that mapped
 *                  it, or to any once that thread has let go of it (a thread
 *                  does not write into another's region while both fill theirs:
 *                  in VMs, first writes 16 KiB apart from two threads contend
 *                  in the host). Chunk headers are written as their chunk is
 *                  handed out.
 *
 * What a thread may keep cached: two magazines and the rest of one chunk,
 * HWT_POOL_THREAD_CACHE_MAX = 2 * 64 + 409 = 537 timeouts (21 KiB), for
 * each of up to CACHE_TIMERS timers. Each cached timeout keeps its region
 * mapped, so the freed ones a thread other than the worker caches are of
 * at most CACHE_REGIONS regions (a free from one more gives its magazines
 * back first): a burst released in random order would otherwise leave a
 * region per cached timeout mapped behind a thread that then calls
 * nothing. A thread that frees about as much as it takes (one timeout at
 * a time, say) reuses the same few and keeps the others, so it gives all
 * it holds back (the rest of its chunk too) if it has not for
 * CACHE_GIVE_BACK_NS: an allocation looks at the schedule's own clock
 * reading, a free at the coarse clock every CACHE_CHECK_FREES frees, a
 * schedule that fails before allocating at the coarse clock
 * (hwt__pool_note_call); as it does, it gives back what it
 * caches of its other timers if it has not for as long, and unbinds those
 * that are stopped (give_back_others). A thread refused by a stop gives its
 * cache back; one that makes no more such calls keeps them until it exits.
 * The worker gives all its cache holds back before each sleep, of
 * whichever timer (hwt__pool_give_back_freed).
 *
 * The timer's reference count holds one reference per timeout outside the
 * depot (cached or in use), so its memory outlives every cached or used
 * timeout (hwt__timer_unref_n).
 *
 * Giving memory back. Each region counts the timeouts the depot holds of it
 * (freed, or in chunks never handed out). The give-back that makes the
 * count the whole region (none of its timeouts in use, none in any thread's
 * cache) unlinks the region, and the giver unmaps it once it has dropped
 * the lock: at once, with no thread woken for it. Unless the depot would
 * then keep too little free: RESERVE_BYTES worth always, so that a load
 * going up and down a little does not map and unmap in a loop, and up to
 * HWT_POOL_BUSY_KEEP_BYTES while threads are taking timeouts from it (see
 * keep_timeouts). A region kept so waits (IDLE) until a later give-back
 * finds the depot keeps enough without it, or a thread takes from it; the
 * worker makes such a give-back once the depot has been quiet for BUSY_NS
 * (it plans a wake-up for it before it sleeps, and a thread that keeps a
 * region for the allowance after that wakes it to plan again). So once a
 * burst is over, what stays mapped is the reserve and at most a region
 * more; once the timer is stopped (hwt__pool_close), nothing free.
 *
 * Why nothing touches a region after it is unmapped:
 *   - every timeout of it is free, so nothing refers to one as a timeout in
 *     use: not a handle, the queues, the wheel, an executor or a
 *     stop list; each of those holds a reference (timeout.c), and the one
 *     who drops the last reference frees the timeout as its last access;
 *   - none is in a thread's cache (those are not counted in the depot), so
 *     no cache's magazine or never-used run points into it;
 *   - inside the depot a region's free timeouts are linked only to each
 *     other (magazines are sorted by region on the way in), and the region
 *     leaves every list of the depot, under the lock, before it is
 *     unmapped. Every access to the depot is under the lock, so every
 *     earlier access to the region's timeouts ended before it was unlinked.
 *     That is why the depot has a lock: a lock-free one (a ck_stack with
 *     an mpmc pop) may read a node's link after another thread took the
 *     node, which needs memory that never goes away. The lock is taken
 *     once per 64 timeouts at most, by one thread at a time mostly;
 *   - hwt__pool_for_each reads every timeout of every region without the
 *     lock, while other threads may free: it counts itself in `scans`
 *     first, and while a scan runs no region is given back (they wait in
 *     IDLE); when the last scan ends, it gives back what it need not keep
 *     of them. The scan does not
 *     hold the lock, so frees during it (the scan's own too, through the
 *     worker's cache) take it as usual;
 *   - a region's descriptor lives outside the region, and is freed with it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "arena.h"
#include "internal.h"

#define MAG_SIZE HWT_POOL_MAG_SIZE

/* Free timeouts the depot keeps mapped rather than give back: a few MiB,
 * little beside a burst, and some 87 000 timeouts of slack for a load that
 * goes up and down. */
#define RESERVE_BYTES HWT_POOL_RESERVE_BYTES

_Static_assert(sizeof(struct hwt__timeout_chunk) <= HWT_CHUNK_HEADER_BYTES, "chunk header fits");
_Static_assert(HWT_CHUNK_HEADER_BYTES + HWT_TIMEOUTS_PER_CHUNK * sizeof(hwt_timeout) ==
                   HWT_TIMEOUT_CHUNK_BYTES,
               "a chunk's last timeout ends where the next chunk starts");

struct mag {
    ck_stack_entry_t *first; /* free timeouts, linked by stack_link.next */
    size_t count;
    struct hwt__region *region; /* of every one of them; NULL: of several */
};

struct region_link {
    struct hwt__region *prev, *next;
    bool in;
};

/* A region's descriptor (outside the region: it outlives nothing of it). */
struct hwt__region {
    char *base; /* its first chunk */
    size_t bytes;
    size_t capacity;     /* timeouts */
    size_t free;         /* of them in the depot: in mags, building, or never-used chunks */
    unsigned chunks;     /* bytes / HWT_TIMEOUT_CHUNK_BYTES */
    unsigned next_chunk; /* the chunks from this one on were never handed out */
    const void *owner;   /* the thread cache that takes its never-used chunks; NULL: any */
    ck_stack_entry_t *mags; /* full magazines, linked by their heads' depot_link */
    struct mag building;    /* freed timeouts, fewer than MAG_SIZE */
    struct region_link links[HWT_REGION_LISTS];
    struct hwt__region *gone; /* in a list of regions to unmap once the lock is dropped */
};

/* The most regions the freed timeouts in a thread's cache may be of (see
 * hwt__timeout_free): what an idle thread keeps mapped, beside its run of
 * never-used ones. A free from one more gives the magazines back first:
 * one lock per few frees of a burst released in random order. */
#define CACHE_REGIONS 4

struct thread_cache {
    hwt_timer *timer;
    struct mag loaded, spare;
    /* The regions of the freed timeouts in loaded and spare (or of some
     * allocated since), for any thread but the worker: hwt__timeout_free. */
    struct hwt__region *regions[CACHE_REGIONS];
    unsigned region_count;
    /* Never-used timeouts, consecutive in memory, taken in order. */
    hwt_timeout *fresh;
    size_t fresh_count;
    size_t region_bytes;     /* of the last region it mapped for `timer` (0: none) */
    unsigned frees_to_check; /* frees until it looks at the clock */
    unsigned bound_at;       /* bound_count when bound (bind evicts the oldest) */
    size_t allocated;        /* since it last took from the depot (note_allocated)... */
    int64_t took_ns;         /* ...which it did then (or bound itself; coarse) */
    int64_t given_back_ns;   /* when it last gave what it holds back */
};

/* Timers a thread caches timeouts of at once (HWT_POOL_THREAD_TIMERS): a
 * thread that schedules on several (say request timeouts on one, idle
 * connections on another) keeps a cache for each instead of giving one
 * back and binding another at every switch (a flush chains the rest of its
 * chunk, up to 409 writes, under the pool's lock: a schedule alternating
 * between two timers took 30 times as long). A thread that turns to one
 * more gives back the cache it bound longest ago: scheduling on more timers
 * than this in turn pays that at every switch. */
#define CACHE_TIMERS HWT_POOL_THREAD_TIMERS

/* The calling thread's caches (CACHE_TIMERS of them), allocated at its
 * first bind and freed at its exit (the key destructor): in the heap, so
 * that the library's thread-local variables stay a few bytes. They are
 * initial-exec (internal.h), and a library loaded with dlopen takes them
 * from glibc's small static TLS reserve, which other libraries share. */
static HWT_THREAD_LOCAL struct thread_cache *caches;

/* A thread's caches, linked into the process's list of them: the list
 * keeps every thread's caches reachable, also in a fork child, where the
 * other threads are gone (the child frees theirs), so that a leak checker
 * sees them in use. */
struct cache_set {
    struct thread_cache slot[CACHE_TIMERS]; /* first: `caches` points here */
    struct cache_set *prev, *next;
};
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cache_set *sets;

/* A set is allocated and linked, and unlinked and freed, under the list's
 * lock, which a fork's prepare handler takes (hwt__pool_before_fork): the
 * child finds each set linked, or not allocated at all, never allocated and
 * not linked yet (or unlinked and not freed yet), which would be a block
 * nothing points to - a leak to a leak checker. (The arena allocates under
 * its own lock, which the prepare handler takes too.) The test hook is
 * asked first, without the lock: it may call the library. */
static struct thread_cache *new_caches(void)
{
    if (hwt__alloc_should_fail(HWT_SITE_THREAD_CACHES))
        return NULL;
    pthread_mutex_lock(&sets_lock);
    struct cache_set *set = calloc(1, sizeof *set);
    if (set != NULL) {
        set->next = sets;
        if (sets != NULL)
            sets->prev = set;
        sets = set;
    }
    pthread_mutex_unlock(&sets_lock);
    return set != NULL ? set->slot : NULL;
}

static void unlink_set(struct cache_set *set)
{
    if (set->prev != NULL)
        set->prev->next = set->next;
    else
        sets = set->next;
    if (set->next != NULL)
        set->next->prev = set->prev;
}

static void free_caches(struct thread_cache *slots)
{
    struct cache_set *set = (struct cache_set *)slots;
    pthread_mutex_lock(&sets_lock);
    unlink_set(set);
    hwt__free(set); /* under the lock: see new_caches */
    pthread_mutex_unlock(&sets_lock);
}
static HWT_THREAD_LOCAL unsigned bound_count; /* binds so far (a slot's bound_at) */

/* The calling thread's cache bound to `timer` (NULL: a free slot), or
 * NULL. */
static struct thread_cache *cache_of(const hwt_timer *timer)
{
    if (caches == NULL)
        return NULL;
    for (unsigned i = 0; i < CACHE_TIMERS; i++)
        if (caches[i].timer == timer)
            return &caches[i];
    return NULL;
}

/* A free timeout links into its magazine through stack_link; the first one
 * of a magazine in a region's `mags` also heads it: depot_link, and
 * mag_count (in the deadline's place). */
static hwt_timeout *object_of(ck_stack_entry_t *node)
{
    return hwt__timeout_of_stack(node);
}

static ck_stack_entry_t *node_of_head(ck_stack_entry_t *depot_link)
{
    hwt_timeout *t = (hwt_timeout *)((char *)depot_link - offsetof(hwt_timeout, depot_link));
    return &t->stack_link;
}

static struct hwt__region *region_of(ck_stack_entry_t *node)
{
    return hwt__chunk_of(object_of(node))->region;
}

static size_t timeouts_in_region(size_t region_bytes)
{
    return region_bytes / HWT_TIMEOUT_CHUNK_BYTES * HWT_TIMEOUTS_PER_CHUNK;
}

#define RESERVE_TIMEOUTS timeouts_in_region(RESERVE_BYTES)
#define BUSY_KEEP_TIMEOUTS timeouts_in_region(HWT_POOL_BUSY_KEEP_BYTES)
#define BUSY_NS (50 * INT64_C(1000000)) /* threads drew on the depot this recently */
/* Timeouts allocated in a BUSY_NS window (counted as the caches that
 * allocated them take from the depot again) that make the depot busy: a
 * churn allocates thousands. A light load allocates a few, however often
 * its caches go back and forth - the worker gives its cache back before
 * each sleep, a thread when it turns to one timer more or once a second -
 * and keeps nothing beyond the reserve. */
#define BUSY_ALLOCATED (16 * MAG_SIZE)
/* The coarse clock runs up to a scheduler tick behind: a trim planned for
 * BUSY_NS after the last take waits this much more, so that it finds the
 * depot quiet. */
#define TRIM_SLACK_NS (25 * INT64_C(1000000)) /* a jiffy at HZ=100 is 10 ms */
/* A thread that keeps calling gives back what its cache holds about this
 * often (an allocation looks at the time each call, a free every few): a
 * thread that frees as much as it takes would otherwise keep the same
 * ones, and their regions, for as long as it lives. */
#define CACHE_GIVE_BACK_NS (1000 * INT64_C(1000000))
/* Frees between two looks at the (coarse, ~7 ns) clock: a thread that only
 * releases handles, a few a second, still gives back within seconds. The
 * worker's frees come by the thousand, and it gives back before each sleep
 * anyway: it looks less often. */
#define CACHE_CHECK_FREES 4
#define CACHE_CHECK_WORKER_FREES 64
_Static_assert(HWT_POOL_BUSY_KEEP_BYTES >= HWT_POOL_RESERVE_BYTES, "busy keeps at least the reserve");

/* ---------------------------------------------------------------- lists */

/* The depot's lists of regions (under the lock): ALL, every region;
 * RECYCLED, those holding freed timeouts (in mags or building); TAILS,
 * those with never-used chunks; IDLE, those entirely free but kept. */
static void list_add(struct hwt__pool *pool, int list, struct hwt__region *r)
{
    struct region_link *l = &r->links[list];
    l->prev = NULL;
    l->next = pool->regions[list];
    if (l->next != NULL)
        l->next->links[list].prev = r;
    pool->regions[list] = r;
    l->in = true;
}

static void list_remove(struct hwt__pool *pool, int list, struct hwt__region *r)
{
    struct region_link *l = &r->links[list];
    if (!l->in)
        return;
    if (l->prev != NULL)
        l->prev->links[list].next = l->next;
    else
        pool->regions[list] = l->next;
    if (l->next != NULL)
        l->next->links[list].prev = l->prev;
    l->prev = l->next = NULL;
    l->in = false;
}

/* ---------------------------------------------------------------- depot */

/* Unlinks a region none of whose timeouts is out of the depot; the caller
 * unmaps what *gone gathers once it has dropped the lock. */
static void give_back(struct hwt__pool *pool, struct hwt__region *r, struct hwt__region **gone)
{
    for (int list = 0; list < HWT_REGION_LISTS; list++)
        list_remove(pool, list, r);
    pool->free -= r->capacity;
    pool->capacity -= r->capacity;
    r->gone = *gone;
    *gone = r;
}

/* A coarse CLOCK_MONOTONIC (a few ms of resolution: enough here, and
 * cheaper than the precise one). */
static int64_t coarse_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* How many free timeouts the depot keeps: the reserve, or more while
 * threads are taking timeouts at a churn's pace (note_allocated). In a churn
 * (threads scheduling while the worker frees, in batches, what they
 * cancelled) regions that become free
 * are needed again within moments, and a page given back and taken again
 * costs a fault and, in VMs, a trap to the host (a churn that gave regions
 * back at once took 1.4x the CPU). The busy allowance is bounded, so that a
 * burst that ends while threads still take leaves at most it and a region
 * behind; once none has taken for BUSY_NS, the next give-back trims to the
 * reserve. Keeping a whole burst for the next one does not pay either: a
 * second burst of a million that found all of the first one's memory kept
 * (1 GiB for 1 s) took 1.6x the wall time of one given new regions, since
 * freed timeouts come back scattered, in the order the worker freed them,
 * and new ones are written in address order (bench/interleave
 * schedule_warm, ten pairs: 53.6 against 34.1 ns per schedule). Handing
 * kept regions out again in address order took the second burst's slow
 * rounds away but not its median, and slowed churn (bench/README.md,
 * "Keeping a burst, in address order"). */
static size_t keep_timeouts(const struct hwt__pool *pool)
{
    if (pool->closed)
        return 0;
    if (coarse_now_ns() - pool->last_take_ns < BUSY_NS)
        return BUSY_KEEP_TIMEOUTS;
    return RESERVE_TIMEOUTS;
}

/* A region became entirely free: back to the system, or kept (IDLE) while
 * the depot keeps that much or a scan runs. */
static void region_free(struct hwt__pool *pool, struct hwt__region *r, struct hwt__region **gone)
{
    if (pool->scans == 0 && pool->free - r->capacity >= keep_timeouts(pool)) {
        give_back(pool, r, gone);
        return;
    }
    list_add(pool, HWT_REGIONS_IDLE, r);
}

/* Gives back the kept regions the depot need not keep any more. Cheap
 * when there is nothing to do; with less than a whole region beyond what it
 * keeps free, it does nothing (a small region might have gone). */
static void trim_idle(struct hwt__pool *pool, struct hwt__region **gone)
{
    const size_t region = timeouts_in_region(HWT_MAX_REGION_BYTES);
    if (pool->regions[HWT_REGIONS_IDLE] == NULL || pool->scans > 0 ||
        (!pool->closed && pool->free < RESERVE_TIMEOUTS + region))
        return;
    size_t keep = keep_timeouts(pool);
    if (!pool->closed && pool->free < keep + region)
        return;
    for (struct hwt__region *r = pool->regions[HWT_REGIONS_IDLE]; r != NULL;) {
        struct hwt__region *next = r->links[HWT_REGIONS_IDLE].next;
        if (pool->free - r->capacity >= keep)
            give_back(pool, r, gone);
        r = next;
    }
}

/* When a trim would give back regions kept only for the busy allowance:
 * once the depot has been quiet for BUSY_NS (INT64_MAX: nothing to trim,
 * as right after a trim_idle that found the depot quiet). */
static int64_t next_trim_locked(const struct hwt__pool *pool)
{
    if (pool->regions[HWT_REGIONS_IDLE] == NULL || pool->scans > 0 || pool->closed ||
        pool->free < RESERVE_TIMEOUTS + timeouts_in_region(HWT_MAX_REGION_BYTES))
        return INT64_MAX;
    return hwt__sat_add(pool->last_take_ns, BUSY_NS + TRIM_SLACK_NS);
}

/* Takes back a chain of freed timeouts, each into its own region. */
static void put_locked(struct hwt__pool *pool, ck_stack_entry_t *node, struct hwt__region **gone)
{
    while (node != NULL) {
        ck_stack_entry_t *next = node->next;
        struct hwt__region *r = region_of(node);
        struct mag *b = &r->building;
        node->next = b->first;
        b->first = node;
        if (++b->count == MAG_SIZE) {
            hwt_timeout *head = object_of(b->first);
            head->mag_count = b->count;
            head->depot_link.next = r->mags;
            r->mags = &head->depot_link;
            b->first = NULL;
            b->count = 0;
            /* In front, so that takers get whole magazines first. */
            if (pool->regions[HWT_REGIONS_RECYCLED] != r)
                list_remove(pool, HWT_REGIONS_RECYCLED, r);
        }
        if (!r->links[HWT_REGIONS_RECYCLED].in)
            list_add(pool, HWT_REGIONS_RECYCLED, r);
        pool->free++;
        if (++r->free == r->capacity)
            region_free(pool, r, gone);
        node = next;
    }
    trim_idle(pool, gone);
}

/* Takes back a whole magazine of one region's timeouts, as it is. */
static void put_whole_locked(struct hwt__pool *pool, struct mag m, struct hwt__region **gone)
{
    struct hwt__region *r = m.region;
    hwt_timeout *head = object_of(m.first);
    head->mag_count = m.count;
    head->depot_link.next = r->mags;
    r->mags = &head->depot_link;
    if (pool->regions[HWT_REGIONS_RECYCLED] != r) { /* in front: see put_locked */
        list_remove(pool, HWT_REGIONS_RECYCLED, r);
        list_add(pool, HWT_REGIONS_RECYCLED, r);
    }
    pool->free += m.count;
    r->free += m.count;
    if (r->free == r->capacity)
        region_free(pool, r, gone);
    trim_idle(pool, gone);
}

/* Takes back a magazine: as it is if it is whole and of one region (the
 * usual case: timeouts freed together were mostly allocated together),
 * else sorted into its timeouts' regions. */
static void put_mag_locked(struct hwt__pool *pool, struct mag m, struct hwt__region **gone)
{
    if (m.count == MAG_SIZE && m.region != NULL)
        put_whole_locked(pool, m, gone);
    else if (m.count > 0)
        put_locked(pool, m.first, gone);
}

/* Unmaps what give_back unlinked (without the lock: unmapping 2 MiB
 * takes a while, and nothing else can reach these regions). */
static void release_regions(struct hwt__region *gone)
{
    while (gone != NULL) {
        struct hwt__region *next = gone->gone;
        hwt__arena_unmap(gone->base, gone->bytes);
        hwt__free(gone);
        gone = next;
    }
}

/* Under the lock, by a thread giving timeouts back: whether the worker
 * must be woken to plan a trim (kick it then). It plans one each time it is
 * about to sleep (hwt__pool_give_back_freed); trim_wanted says it has one
 * planned, or has been kicked for one. A give-back after its plan can leave
 * the depot with regions to trim that it did not plan for - and it may
 * sleep for hours. */
static bool trim_wanted_locked(hwt_timer *timer)
{
    struct hwt__pool *pool = &timer->pool;
    if (hwt__current_worker == timer || pool->trim_wanted || next_trim_locked(pool) == INT64_MAX)
        return false;
    pool->trim_wanted = true;
    return true;
}

/* Gives a magazine back to the depot, and drops its timeouts' references
 * to the timer (last: it may free the timer). */
static void depot_put(hwt_timer *timer, struct mag m)
{
    struct hwt__region *gone = NULL;
    pthread_mutex_lock(&timer->pool.lock);
    put_mag_locked(&timer->pool, m, &gone);
    bool kick = trim_wanted_locked(timer);
    pthread_mutex_unlock(&timer->pool.lock);
    release_regions(gone);
    if (kick)
        hwt__kick_worker(timer); /* before the unref: the timer is alive */
    hwt__timer_unref_n(timer, m.count);
}

/* Writes the header of chunk k of a region, as it is handed out. */
static char *chunk_out(hwt_timer *timer, struct hwt__region *r, unsigned k)
{
    struct hwt__timeout_chunk *chunk =
        (struct hwt__timeout_chunk *)(r->base + (size_t)k * HWT_TIMEOUT_CHUNK_BYTES);
    chunk->timer = timer;
    chunk->region = r;
    return (char *)chunk;
}

/* What a thread gets from the depot: a magazine of freed timeouts, or a
 * never-used chunk (the chunk's region and number). */
struct take {
    struct mag mag;
    struct hwt__region *fresh_region;
    unsigned fresh_chunk;
};

/* Counts the timeouts a cache allocated since it last took from the depot
 * at `since` (as it takes again, or gives everything back) in the current
 * BUSY_NS window; enough make the depot busy (last_take_ns). Allocations
 * spread over more than a window count for the window's share: a light
 * load's cache may hold what it took seconds ago, and several such
 * caches given back at once are no churn. Returns the time. */
static int64_t note_allocated(struct hwt__pool *pool, size_t allocated, int64_t since)
{
    int64_t now = coarse_now_ns();
    if (now - since > BUSY_NS)
        allocated = (size_t)((uint64_t)allocated * (uint64_t)BUSY_NS / (uint64_t)(now - since));
    if (now - pool->take_window_ns >= BUSY_NS) {
        pool->take_window_ns = now;
        pool->window_allocated = 0;
    }
    pool->window_allocated += allocated;
    if (pool->window_allocated >= BUSY_ALLOCATED)
        pool->last_take_ns = now;
    return now;
}

/* A magazine, else a never-used chunk of a region that `c` owns or nobody
 * does (or anybody, with any_owner); count 0 if the depot has neither. */
static struct take take_locked(struct hwt__pool *pool, const struct thread_cache *c,
                               bool any_owner)
{
    struct take got = {{NULL, 0, NULL}, NULL, 0};
    struct hwt__region *r = pool->regions[HWT_REGIONS_RECYCLED];
    if (r != NULL) {
        list_remove(pool, HWT_REGIONS_IDLE, r);
        if (r->mags != NULL) {
            ck_stack_entry_t *head = r->mags;
            r->mags = head->next;
            got.mag.first = node_of_head(head);
            got.mag.count = object_of(got.mag.first)->mag_count;
        } else {
            got.mag = r->building;
            r->building.first = NULL;
            r->building.count = 0;
        }
        got.mag.region = r;
        if (r->mags == NULL && r->building.count == 0)
            list_remove(pool, HWT_REGIONS_RECYCLED, r);
        r->free -= got.mag.count;
        pool->free -= got.mag.count;
        return got;
    }
    struct hwt__region *any = NULL;
    for (r = pool->regions[HWT_REGIONS_TAILS]; r != NULL; r = r->links[HWT_REGIONS_TAILS].next) {
        if (r->owner == c)
            break;
        if ((r->owner == NULL || any_owner) && any == NULL)
            any = r;
    }
    if (r == NULL)
        r = any;
    if (r == NULL)
        return got;
    list_remove(pool, HWT_REGIONS_IDLE, r);
    got.fresh_region = r;
    got.fresh_chunk = r->next_chunk++;
    if (r->next_chunk == r->chunks)
        list_remove(pool, HWT_REGIONS_TAILS, r);
    got.mag.count = HWT_TIMEOUTS_PER_CHUNK;
    r->free -= got.mag.count;
    pool->free -= got.mag.count;
    return got;
}

/* Lists a region just mapped for cache c, its chunks from `handed` on
 * waiting in the depot for it: NULL, with the region unmapped, when its
 * descriptor cannot be had. */
static struct hwt__region *add_region(hwt_timer *timer, struct thread_cache *c, char *base,
                                      size_t bytes, unsigned handed)
{
    struct hwt__region *r = hwt__malloc(HWT_SITE_TIMEOUT_POOL, sizeof *r);
    if (r == NULL) {
        hwt__arena_unmap(base, bytes);
        return NULL;
    }
    memset(r, 0, sizeof *r);
    r->base = base;
    r->bytes = bytes;
    r->capacity = timeouts_in_region(bytes);
    r->chunks = (unsigned)(bytes / HWT_TIMEOUT_CHUNK_BYTES);
    r->next_chunk = handed;
    r->free = r->capacity - handed * HWT_TIMEOUTS_PER_CHUNK;
    r->owner = c;
    c->region_bytes = bytes;

    struct hwt__pool *pool = &timer->pool;
    pthread_mutex_lock(&pool->lock);
    list_add(pool, HWT_REGIONS_ALL, r);
    if (r->chunks > handed)
        list_add(pool, HWT_REGIONS_TAILS, r);
    if (handed == 0) /* entirely free: kept, or trimmed, as any such region */
        list_add(pool, HWT_REGIONS_IDLE, r);
    pool->capacity += r->capacity;
    pool->free += r->free;
    pthread_mutex_unlock(&pool->lock);
    return r;
}

/* Maps a new region for the calling thread: its first chunk is the thread's,
 * the others wait in the depot for it. False when memory ran out;
 * nothing changed then. */
static bool grow(hwt_timer *timer, struct thread_cache *c, struct take *got)
{
    size_t bytes = c->region_bytes == 0                         ? HWT_TIMEOUT_CHUNK_BYTES
                   : c->region_bytes * 2 > HWT_MAX_REGION_BYTES ? HWT_MAX_REGION_BYTES
                                                                : c->region_bytes * 2;
    /* Regions are aligned to their size (arena.c), so that a full-size one
     * can be one large page: one TLB entry instead of 512. Timeouts are
     * reused in the order they were freed, from all over the pool, and the
     * worker walks them in the order they were queued: with a million
     * pending, TLB misses on small pages were most of what a schedule or a
     * churn pair cost (bench/README.md, "Large pages"). */
    char *base = hwt__arena_map(HWT_SITE_TIMEOUT_POOL, bytes, true);
    /* No room in the range for that size (a small one, under a low
     * RLIMIT_AS, holds a few slots, and each size of region cuts one): a
     * smaller region. */
    while (base == NULL && bytes > HWT_TIMEOUT_CHUNK_BYTES && !hwt__arena_has_room(bytes)) {
        bytes /= 2;
        base = hwt__arena_map(HWT_SITE_TIMEOUT_POOL, bytes, true);
    }
    struct hwt__region *r = base != NULL ? add_region(timer, c, base, bytes, 1) : NULL;
    if (r == NULL)
        return false;
    *got = (struct take){{NULL, HWT_TIMEOUTS_PER_CHUNK, NULL}, r, 0};
    return true;
}

/* Free timeouts in the depot that cache c may take without growing: freed
 * ones, and never-used chunks kept for it or for anyone. */
static size_t takeable_locked(const struct hwt__pool *pool, const struct thread_cache *c)
{
    size_t n = pool->free;
    for (const struct hwt__region *r = pool->regions[HWT_REGIONS_TAILS]; r != NULL;
         r = r->links[HWT_REGIONS_TAILS].next)
        if (r->owner != NULL && r->owner != c)
            n -= (size_t)(r->chunks - r->next_chunk) * HWT_TIMEOUTS_PER_CHUNK;
    return n;
}

/* Whether a thread that took from the depot without growing should map its
 * next region now (grow_ahead): it grows full-size regions, and what it
 * may take is down to a quarter of one (a few hundred us of scheduling;
 * more would leave more never-used memory behind when a burst ends: half a
 * region tried, churn's median 1.06x). Pool locked. */
static bool should_grow_ahead_locked(const struct hwt__pool *pool, const struct thread_cache *c)
{
    return c->region_bytes == HWT_MAX_REGION_BYTES &&
           takeable_locked(pool, c) < timeouts_in_region(HWT_MAX_REGION_BYTES) / 4;
}

/* Maps the calling thread's next full-size region before it needs it, if
 * no other thread is populating memory: its chunks wait in the depot for
 * it. A thread that runs out maps its region at once and, should another
 * thread be populating one, sleeps until that is done, its CPU idle; ahead
 * of need, a thread skips its turn instead and goes on with what it has
 * (arena.c). On 2 CPUs that trims a burst's slow runs more than its
 * median (bench/README.md, "Mapping ahead"). Best effort: nothing changes
 * when the memory is not to be had. */
static void grow_ahead(hwt_timer *timer, struct thread_cache *c)
{
    char *base = hwt__arena_map_if_free(HWT_SITE_TIMEOUT_POOL, HWT_MAX_REGION_BYTES);
    if (base != NULL)
        add_region(timer, c, base, HWT_MAX_REGION_BYTES, 0);
}

/* ---------------------------------------------------------------- pool */

int hwt__pool_init(struct hwt__pool *pool)
{
    memset(pool, 0, sizeof *pool);
    /* Adaptive: a waiter spins a little before it sleeps. The lock is held
     * for a few dozen ns at a time, while a futex sleep and wake-up cost
     * microseconds (more in VMs). */
    pthread_mutexattr_t attr;
    int err = pthread_mutexattr_init(&attr);
    if (err == 0) {
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
        err = pthread_mutex_init(&pool->lock, &attr);
        pthread_mutexattr_destroy(&attr);
    }
    return err;
}

void hwt__pool_destroy(struct hwt__pool *pool)
{
    struct hwt__region *r = pool->regions[HWT_REGIONS_ALL];
    while (r != NULL) {
        struct hwt__region *next = r->links[HWT_REGIONS_ALL].next;
        hwt__arena_unmap(r->base, r->bytes);
        hwt__free(r);
        r = next;
    }
    memset(pool->regions, 0, sizeof pool->regions);
    pthread_mutex_destroy(&pool->lock);
}

size_t hwt__pool_capacity(struct hwt__pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    size_t n = pool->capacity;
    pthread_mutex_unlock(&pool->lock);
    return n;
}

void hwt__pool_for_each(struct hwt__pool *pool, void (*fn)(void *ctx, hwt_timeout *timeout),
                        void *ctx)
{
    pthread_mutex_lock(&pool->lock);
    pool->scans++;
    struct hwt__region *r = pool->regions[HWT_REGIONS_ALL];
    pthread_mutex_unlock(&pool->lock);
    /* No region leaves ALL while scans > 0; one added meanwhile goes in
     * front of where this walk started, and is not walked. */
    for (; r != NULL; r = r->links[HWT_REGIONS_ALL].next) {
        for (size_t off = 0; off < r->bytes; off += HWT_TIMEOUT_CHUNK_BYTES) {
            hwt_timeout *t = (hwt_timeout *)(r->base + off + HWT_CHUNK_HEADER_BYTES);
            for (size_t i = 0; i < HWT_TIMEOUTS_PER_CHUNK; i++)
                fn(ctx, &t[i]);
        }
    }
    struct hwt__region *gone = NULL;
    pthread_mutex_lock(&pool->lock);
    if (--pool->scans == 0) /* what became free meanwhile waits in IDLE */
        trim_idle(pool, &gone);
    pthread_mutex_unlock(&pool->lock);
    release_regions(gone);
}

/* ---------------------------------------------------------------- caches */

/* Chains the never-used timeouts of a run (to give them back as freed). */
static ck_stack_entry_t *chain_run(hwt_timeout *first, size_t n)
{
    for (size_t i = 0; i < n; i++)
        first[i].stack_link.next = i + 1 < n ? &first[i + 1].stack_link : NULL;
    return n > 0 ? &first->stack_link : NULL;
}

/* Unhooks the cache's run of never-used timeouts, chained as freed ones
 * (before the depot's lock: it writes each one). */
static ck_stack_entry_t *unhook_run(struct thread_cache *c)
{
    ck_stack_entry_t *run = chain_run(c->fresh, c->fresh_count);
    c->fresh = NULL;
    c->fresh_count = 0;
    return run;
}

/* Puts what the cache holds in the depot: its freed timeouts (two
 * magazines) and its run, unhooked with unhook_run (`run_count` of them:
 * kept, a run keeps its region mapped as much as a freed timeout does).
 * Returns how many; their references to the timer are the caller's to
 * drop, after the lock. */
static size_t put_cache_locked(struct hwt__pool *pool, struct thread_cache *c,
                               ck_stack_entry_t *run, size_t run_count, struct hwt__region **gone)
{
    size_t n = c->loaded.count + c->spare.count + run_count;
    put_mag_locked(pool, c->loaded, gone);
    put_mag_locked(pool, c->spare, gone);
    c->loaded = c->spare = (struct mag){NULL, 0, NULL};
    c->region_count = 0;
    put_locked(pool, run, gone);
    return n;
}

/* Gives the calling thread's cache back to its timer and unbinds it. */
static void flush(struct thread_cache *c)
{
    hwt_timer *timer = c->timer;
    if (timer == NULL)
        return;
    struct hwt__pool *pool = &timer->pool;
    size_t run_count = c->fresh_count;
    ck_stack_entry_t *run = unhook_run(c);
    struct hwt__region *gone = NULL;
    pthread_mutex_lock(&pool->lock);
    /* A thread going from timer to timer churns too. */
    note_allocated(pool, c->allocated, c->took_ns);
    size_t returned = put_cache_locked(pool, c, run, run_count, &gone);
    /* Its regions' never-used chunks go to whoever needs them. */
    for (struct hwt__region *r = pool->regions[HWT_REGIONS_TAILS]; r != NULL;
         r = r->links[HWT_REGIONS_TAILS].next)
        if (r->owner == c)
            r->owner = NULL;
    bool kick = trim_wanted_locked(timer);
    pthread_mutex_unlock(&pool->lock);
    release_regions(gone);
    if (kick)
        hwt__kick_worker(timer);
    memset(c, 0, sizeof *c);
    hwt__timer_unref_n(timer, returned + 1); /* + the binding's */
}

/* The cache's thread-exit destructor. Its key is made on first need, not
 * with pthread_once: a process that had run out of keys may have one again
 * later, and the next schedule should then work. */
static pthread_key_t cache_key;
static atomic_bool cache_key_made;
static pthread_mutex_t cache_key_lock = PTHREAD_MUTEX_INITIALIZER;

static void flush_at_thread_exit(void *all)
{
    struct thread_cache *c = all;
    for (unsigned i = 0; i < CACHE_TIMERS; i++)
        flush(&c[i]);
    free_caches(c);
    caches = NULL; /* a later destructor that schedules allocates them again */
}

/* Whether any of a thread's CACHE_TIMERS caches is bound to a timer. */
static bool any_bound(const struct thread_cache *slots)
{
    for (unsigned i = 0; i < CACHE_TIMERS; i++)
        if (slots[i].timer != NULL)
            return true;
    return false;
}

/* Gives a cache back and unbinds it (flush), and frees the thread's caches
 * once none is bound: a thread that has let go of every timer holds
 * nothing. `c` must not be used after. */
static void unbind(struct thread_cache *c)
{
    flush(c);
    if (any_bound(caches))
        return;
    (void)pthread_setspecific(cache_key, NULL); /* armed: a slot was bound */
    free_caches(caches);
    caches = NULL;
}

/* 0 or the error of pthread_key_create. */
static int have_cache_key(void)
{
    if (atomic_load_explicit(&cache_key_made, memory_order_acquire))
        return 0;
    int err = 0;
    pthread_mutex_lock(&cache_key_lock);
    if (!atomic_load_explicit(&cache_key_made, memory_order_relaxed)) {
        err = pthread_key_create(&cache_key, flush_at_thread_exit);
        if (err == 0)
            atomic_store_explicit(&cache_key_made, true, memory_order_release);
    }
    pthread_mutex_unlock(&cache_key_lock);
    return err;
}

/* The library is being unloaded (dlclose), or the process is exiting: the
 * key goes, so that a thread still alive, whose caches it points to, does
 * not call flush_at_thread_exit as it exits, in code that an unload has
 * taken away. Its caches are then never given back; after an unload
 * nothing could use them. A thread that schedules after this, during an
 * exit, makes a key afresh. */
__attribute__((destructor)) static void delete_cache_key_at_unload(void)
{
    pthread_mutex_lock(&cache_key_lock);
    if (atomic_load_explicit(&cache_key_made, memory_order_relaxed)) {
        (void)pthread_key_delete(cache_key);
        atomic_store_explicit(&cache_key_made, false, memory_order_release);
    }
    pthread_mutex_unlock(&cache_key_lock);
}

/* Binds a cache of the calling thread to `timer` (*out): 0; HWT_ENOMEM when
 * its caches cannot be allocated; or, with nothing changed, the error
 * number when the thread-exit destructor cannot be armed (the cache would
 * then keep the timer's memory forever once the thread exits). A free slot
 * if there is one, else the one bound longest ago, given back first. Not
 * logged here: the caller may be in the middle of a schedule that a stop
 * waits for, and the log callback may stop the timer or schedule. */
static int bind(hwt_timer *timer, struct thread_cache **out)
{
    struct thread_cache *c = cache_of(timer);
    if (c != NULL) {
        *out = c;
        return 0;
    }
    bool allocated = false;
    if (caches == NULL) {
        caches = new_caches();
        if (caches == NULL)
            return HWT_ENOMEM;
        allocated = true;
    }
    c = cache_of(NULL);
    if (c != NULL) {
        /* Armed afresh at each bind into a free slot: the destructor
         * disarms it, and a later destructor of the same exiting thread
         * may schedule again. */
        int err = have_cache_key();
        if (err == 0)
            err = pthread_setspecific(cache_key, caches);
        if (err != 0) {
            if (allocated) { /* nothing would free them */
                free_caches(caches);
                caches = NULL;
            }
            return err;
        }
    } else {
        /* The one bound longest ago (not bound_count % CACHE_TIMERS: binds
         * into slots a stop or destroy freed count too). */
        c = &caches[0];
        for (unsigned i = 1; i < CACHE_TIMERS; i++)
            if (bound_count - caches[i].bound_at > bound_count - c->bound_at)
                c = &caches[i];
        flush(c);
    }
    *out = c;
    c->timer = timer;
    c->bound_at = bound_count++;
    c->frees_to_check = CACHE_CHECK_FREES;
    c->given_back_ns = c->took_ns = coarse_now_ns();
    /* The binding's own reference: a cache that allocation has emptied
     * still points at the timer, and its flush (at thread exit, or when the
     * thread turns to one timer more) locks the timer's pool. */
    hwt__timer_ref_n(timer, 1);
    return 0;
}

/* Gives what the calling thread's cache (bound to `timer`) holds back to
 * the depot; it stays bound. The worker, should it be the caller, plans a
 * trim before it sleeps (hwt__pool_give_back_freed). */
static void give_back_cached(hwt_timer *timer, struct thread_cache *c, bool with_run)
{
    struct hwt__region *gone = NULL;
    size_t run_count = with_run ? c->fresh_count : 0;
    ck_stack_entry_t *run = with_run ? unhook_run(c) : NULL;
    pthread_mutex_lock(&timer->pool.lock);
    size_t returned = put_cache_locked(&timer->pool, c, run, run_count, &gone);
    bool kick = trim_wanted_locked(timer);
    pthread_mutex_unlock(&timer->pool.lock);
    release_regions(gone);
    if (kick)
        hwt__kick_worker(timer);
    hwt__timer_unref_n(timer, returned); /* never the last: the thread is bound */
}

int64_t hwt__pool_give_back_freed(hwt_timer *timer)
{
    /* Tasks that scheduled on other timers: those timers get their caches
     * back now (the worker may sleep for long). Then, or if a stop or
     * destroy of its own timer left it unbound, the worker binds to its own
     * again (failing, its frees go straight to the depot until the next
     * sleep tries again). */
    for (unsigned i = 0; caches != NULL && i < CACHE_TIMERS; i++)
        if (caches[i].timer != timer)
            flush(&caches[i]);
    struct thread_cache *c = NULL;
    (void)bind(timer, &c);
    struct hwt__pool *pool = &timer->pool;
    struct hwt__region *gone = NULL;
    size_t returned = 0, run_count = c != NULL ? c->fresh_count : 0;
    ck_stack_entry_t *run = run_count > 0 ? unhook_run(c) : NULL;
    pthread_mutex_lock(&pool->lock);
    if (c != NULL)
        returned = put_cache_locked(pool, c, run, run_count, &gone);
    trim_idle(pool, &gone);
    int64_t trim_at = next_trim_locked(pool);
    pool->trim_wanted = trim_at != INT64_MAX; /* the caller plans for it */
    pthread_mutex_unlock(&pool->lock);
    release_regions(gone);
    hwt__timer_unref_n(timer, returned); /* never the last: the thread is bound */
    return trim_at;
}

void hwt__pool_close(hwt_timer *timer)
{
    struct hwt__region *gone = NULL;
    pthread_mutex_lock(&timer->pool.lock);
    timer->pool.closed = true;
    trim_idle(&timer->pool, &gone);
    pthread_mutex_unlock(&timer->pool.lock);
    release_regions(gone);
}

/* The calling thread's other caches, as it gives back the one it calls on
 * (about once a second while it keeps calling): a thread that turned to
 * another timer calls nothing more on this one, and its cache would keep
 * this timer's regions mapped (and a destroyed timer's memory allocated)
 * for as long as the thread lives. A stopped timer's cache is unbound.
 * The worker's own is left to it (it gives it back before each sleep). */
static void give_back_others(const struct thread_cache *c, int64_t now)
{
    for (unsigned i = 0; i < CACHE_TIMERS; i++) {
        struct thread_cache *o = &caches[i];
        if (o == c || o->timer == NULL || o->timer == hwt__current_worker ||
            now - o->given_back_ns < CACHE_GIVE_BACK_NS)
            continue;
        if (atomic_load(&o->timer->state) == HWT_STATE_SHUTDOWN) {
            flush(o); /* may free that timer: nothing of it is touched after */
            continue; /* c stays bound: the array stays */
        }
        o->given_back_ns = now;
        if (o->loaded.count + o->spare.count + o->fresh_count > 0)
            give_back_cached(o->timer, o, true);
    }
}

/* Gives what the calling thread's cache holds back if it has not for
 * CACHE_GIVE_BACK_NS by `now`: a thread that frees about as much as it
 * takes reuses the same few timeouts and would keep the others, and their
 * regions, for as long as it lives. */
static void give_back_if_due(hwt_timer *timer, struct thread_cache *c, int64_t now)
{
    if (now - c->given_back_ns < CACHE_GIVE_BACK_NS)
        return;
    c->given_back_ns = now;
    if (c->loaded.count + c->spare.count + c->fresh_count > 0)
        give_back_cached(timer, c, true);
    give_back_others(c, now);
}

/* Counts a free into the calling thread's cache: every few it looks at the
 * coarse clock. An allocation looks every time, at the schedule's own
 * reading. */
static void count_free(hwt_timer *timer, struct thread_cache *c)
{
    if (--c->frees_to_check != 0)
        return;
    c->frees_to_check =
        hwt__current_worker == timer ? CACHE_CHECK_WORKER_FREES : CACHE_CHECK_FREES;
    give_back_if_due(timer, c, coarse_now_ns());
}

void hwt__pool_note_call(hwt_timer *timer)
{
    struct thread_cache *c = cache_of(timer);
    if (c != NULL)
        give_back_if_due(timer, c, coarse_now_ns());
}

void hwt__pool_forget_thread(hwt_timer *timer)
{
    struct thread_cache *c = cache_of(timer);
    if (c != NULL)
        unbind(c);
}

void hwt__pool_before_fork(void)
{
    pthread_mutex_lock(&sets_lock);
}

void hwt__pool_after_fork_in_parent(void)
{
    pthread_mutex_unlock(&sets_lock);
}

void hwt__pool_after_fork_in_child(void)
{
    /* The other threads are gone: their caches are only memory here. The
     * list was whole at the fork: the forking thread took its lock
     * (hwt__pool_before_fork), and it is the child's. */
    pthread_mutex_unlock(&sets_lock);
    /* Every set is the parent's now, the forking thread's too: a set with
     * a bound slot stays in the list, untouched (its timers are inherited,
     * and one that the parent destroyed lives on only through such a
     * binding: freeing the set would leave that timer unreachable, a leak
     * to a leak checker); the others go. The forking thread starts afresh:
     * its next bind allocates a set of its own, and its exit flushes
     * nothing of the parent's. */
    for (struct cache_set *set = sets, *next; set != NULL; set = next) {
        next = set->next;
        if (!any_bound(set->slot)) {
            unlink_set(set);
            hwt__free(set);
        }
    }
    if (caches != NULL && atomic_load(&cache_key_made))
        (void)pthread_setspecific(cache_key, NULL);
    caches = NULL;
    bound_count = 0;
    /* Another thread of the parent may have held it at the fork: it is
     * gone, and the child's first timer must still get its key. */
    pthread_mutex_init(&cache_key_lock, NULL);
}

int hwt__pool_bind_thread(hwt_timer *timer)
{
    struct thread_cache *c;
    int err = bind(timer, &c);
    return err == HWT_ENOMEM ? ENOMEM : err;
}

bool hwt__pool_thread_bound(const hwt_timer *timer)
{
    return cache_of(timer) != NULL;
}

void hwt__pool_log_no_key(const hwt_timer *timer, int err)
{
    hwt__log(timer, HWT_LOG_ERROR, "no thread key (or no memory) for the timeout cache: %s",
             strerror(err));
}

size_t hwt__pool_thread_cached(hwt_timer *timer)
{
    const struct thread_cache *c = cache_of(timer);
    return c != NULL ? c->loaded.count + c->spare.count + c->fresh_count : 0;
}

/* Fills the empty cache from the depot, or from a new region. */
static bool refill(hwt_timer *timer, struct thread_cache *c)
{
    struct take got;
    pthread_mutex_lock(&timer->pool.lock);
    c->took_ns = note_allocated(&timer->pool, c->allocated, c->took_ns);
    got = take_locked(&timer->pool, c, false);
    bool ahead = got.mag.count > 0 && should_grow_ahead_locked(&timer->pool, c);
    pthread_mutex_unlock(&timer->pool.lock);
    c->allocated = 0;
    if (got.mag.count == 0 && !grow(timer, c, &got)) {
        /* No new region: another thread's never-used chunks, which are
         * kept for it only so that a thread's timeouts share regions. */
        pthread_mutex_lock(&timer->pool.lock);
        got = take_locked(&timer->pool, c, true);
        pthread_mutex_unlock(&timer->pool.lock);
        if (got.mag.count == 0)
            return false;
    }
    hwt__timer_ref_n(timer, got.mag.count);
    if (got.fresh_region != NULL) {
        char *chunk = chunk_out(timer, got.fresh_region, got.fresh_chunk);
        c->fresh = (hwt_timeout *)(chunk + HWT_CHUNK_HEADER_BYTES);
        c->fresh_count = got.mag.count;
        c->region_count = 0; /* no freed ones */
    } else {
        c->loaded = got.mag;
        c->regions[0] = got.mag.region; /* the depot's magazines are of one region */
        c->region_count = 1;
    }
    if (ahead)
        grow_ahead(timer, c);
    return true;
}

int hwt__timeout_alloc(hwt_timer *timer, int64_t now, hwt_timeout **out, int *no_key)
{
    struct thread_cache *c = cache_of(timer);
    if (c == NULL) {
        int err = bind(timer, &c);
        if (err == HWT_ENOMEM)
            return HWT_ENOMEM;
        if (err != 0) {
            *no_key = err;
            return HWT_ESYS;
        }
    }
    give_back_if_due(timer, c, now);
    struct mag *m = &c->loaded;
    if (m->count == 0 && c->spare.count > 0) {
        *m = c->spare;
        c->spare = (struct mag){NULL, 0, NULL};
    }
    if (m->count == 0 && c->fresh_count == 0 && !refill(timer, c))
        return HWT_ENOMEM;
    hwt_timeout *t;
    if (m->count > 0) { /* freed ones first: their memory is more likely cached */
        ck_stack_entry_t *node = m->first;
        m->first = node->next;
        m->count--;
        t = object_of(node);
        /* Recycled memory is often in another CPU's cache: start fetching
         * the next one (a prefetch never faults, whatever the address). */
        if (m->first != NULL)
            __builtin_prefetch(object_of(m->first), 1);
    } else {
        t = c->fresh++;
        c->fresh_count--;
    }
    memset(t, 0, sizeof *t);
    c->allocated++;
    *out = t;
    return 0;
}

static bool holds_region(const struct thread_cache *c, const struct hwt__region *r)
{
    for (unsigned i = 0; i < c->region_count; i++)
        if (c->regions[i] == r)
            return true;
    return false;
}

void hwt__timeout_free(hwt_timer *timer, hwt_timeout *timeout)
{
    ck_stack_entry_t *node = &timeout->stack_link;
    struct thread_cache *c = cache_of(timer);
    if (c != NULL && hwt__current_worker != timer &&
        atomic_load_explicit(&timer->state, memory_order_relaxed) == HWT_STATE_SHUTDOWN) {
        /* Stopped: nothing will allocate from this pool again, and what the
         * cache holds would only keep regions (and, once destroyed, the
         * timer) for as long as the thread lives: a stop's list released by
         * the threads that scheduled it. */
        unbind(c);
        c = NULL;
    }
    if (c == NULL) {
        /* Only allocating binds a cache (and the worker, for its own timer):
         * binding here could pin a destroyed timer's memory to a thread that
         * merely released its last handle. Straight back to the depot. */
        node->next = NULL;
        depot_put(timer, (struct mag){node, 1, NULL});
        return;
    }
    struct mag *m = &c->loaded;
    if (m->count >= MAG_SIZE) {
        struct mag full = c->spare;
        c->spare = *m;
        *m = (struct mag){NULL, 0, NULL};
        if (full.count > 0) /* never the last reference: `timeout` is ours */
            depot_put(timer, full);
    }
    /* The chunk header was just read (hwt__timer_of): noting the region
     * costs no miss, and lets a magazine of one region go back whole. */
    struct hwt__region *r = hwt__chunk_of(timeout)->region;
    if (hwt__current_worker != timer && !holds_region(c, r)) {
        /* Any thread but the worker keeps the freed timeouts it caches to
         * CACHE_REGIONS regions: it may go idle, calling nothing, right
         * after its last free, and keep its cache for as long as it lives,
         * so its cache must not keep a region mapped per timeout (a burst
         * released in random order). The worker gives its cache back
         * before each sleep, and frees cancels in whatever order they come. */
        if (c->region_count == CACHE_REGIONS)
            give_back_cached(timer, c, false);
        c->regions[c->region_count++] = r;
    }
    if (m->count == 0)
        m->region = r;
    else if (m->region != r)
        m->region = NULL;
    node->next = m->first;
    m->first = node;
    m->count++;
    count_free(timer, c);
}

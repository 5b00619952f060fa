/*
 * tasks.c - interned (run, cancelled) pairs, so that a timeout stores a
 * 16-bit index instead of a function pointer: 6 bytes of every timeout (a
 * timeout is 40 bytes, see internal.h). A program has few distinct pairs;
 * each timer keeps its own, append-only, until its memory is freed.
 *
 * Any thread reads without a lock; additions take the timer's tasks_lock.
 * The table grows in blocks that double (64, 128, ... entries), so that an
 * index finds its block with one bit scan and no entry ever moves. A pair
 * finds its index through an open-addressing hash index, kept at most half
 * full; an entry is written before its index slot is published (release),
 * and a grown hash index is published whole. Each thread remembers the last
 * pair it used (by timer id: ids start at 1 and are never reused), so a
 * thread scheduling one kind of timeout looks nothing up.
 */
#include <string.h>

#include "alloc.h"
#include "internal.h"

_Static_assert(HWT_MAX_TASKS - 1 <= UINT16_MAX, "a task index fits the timeout's 16 bits");

struct task_cache {
    uint64_t timer_id; /* not the address: a freed timer's may be reused */
    hwt_task_fn run, cancelled;
    uint16_t index;
};

static HWT_THREAD_LOCAL struct task_cache last;

static size_t block_length(unsigned block)
{
    return (size_t)HWT_TASKS_FIRST_BLOCK << block;
}

static uint64_t hash_of(hwt_task_fn run, hwt_task_fn cancelled)
{
    uint64_t h = (uint64_t)(uintptr_t)run * UINT64_C(0x9e3779b97f4a7c15);
    h ^= (uint64_t)(uintptr_t)cancelled * UINT64_C(0xc2b2ae3d27d4eb4f);
    return h ^ (h >> 29);
}

/* The index of (run, cancelled), or -1: a probe of the current hash index.
 * Without the lock, a pair being added may be missed (the caller looks
 * again under it). */
static long find(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled)
{
    struct hwt__task_index *ix = atomic_load_explicit(&timer->task_index, memory_order_acquire);
    if (ix == NULL)
        return -1;
    for (size_t i = hash_of(run, cancelled);; i++) {
        uint32_t slot = atomic_load_explicit(&ix->slots[i & ix->mask], memory_order_acquire);
        if (slot == 0)
            return -1;
        const struct hwt__task_pair *pair = hwt__task_at(timer, slot - 1);
        if (pair->run == run && pair->cancelled == cancelled)
            return (long)slot - 1;
    }
}

/* Files entry `index` in a hash index (its entry written before). */
static void index_put(struct hwt__task_index *ix, size_t index, uint64_t hash)
{
    size_t i = hash;
    while (atomic_load_explicit(&ix->slots[i & ix->mask], memory_order_relaxed) != 0)
        i++;
    atomic_store_explicit(&ix->slots[i & ix->mask], (uint32_t)index + 1, memory_order_release);
}

/* Makes room in the hash index for entry n, under tasks_lock: at most half
 * full, so that a probe ends soon. A grown index replaces the old one,
 * which stays until the timer is freed (a reader may still be probing it). */
static bool index_room_locked(hwt_timer *timer, size_t n)
{
    struct hwt__task_index *ix = atomic_load_explicit(&timer->task_index, memory_order_relaxed);
    if (ix != NULL && 2 * (n + 1) <= ix->mask + 1)
        return true;
    size_t len = ix == NULL ? 2 * HWT_TASKS_FIRST_BLOCK : 2 * (ix->mask + 1);
    struct hwt__task_index *grown =
        hwt__calloc(HWT_SITE_TASKS, 1, sizeof *grown + len * sizeof grown->slots[0]);
    if (grown == NULL)
        return false;
    grown->mask = len - 1;
    grown->older = ix;
    for (size_t i = 0; i < n; i++) {
        const struct hwt__task_pair *pair = hwt__task_at(timer, i);
        index_put(grown, i, hash_of(pair->run, pair->cancelled));
    }
    atomic_store_explicit(&timer->task_index, grown, memory_order_release);
    return true;
}

/* Appends (run, cancelled), under tasks_lock: its index, or -1 when the
 * table is full or memory is exhausted (nothing changed then). */
static long add_locked(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled)
{
    size_t n = timer->task_count;
    if (n == HWT_MAX_TASKS || !index_room_locked(timer, n))
        return -1;
    unsigned b = hwt__task_block_of(n);
    struct hwt__task_pair *pairs =
        atomic_load_explicit(&timer->task_blocks[b], memory_order_relaxed);
    if (pairs == NULL) {
        pairs = hwt__calloc(HWT_SITE_TASKS, block_length(b), sizeof *pairs);
        if (pairs == NULL)
            return -1;
        atomic_store_explicit(&timer->task_blocks[b], pairs, memory_order_relaxed);
    }
    struct hwt__task_pair *slot = &pairs[n - hwt__task_block_start(b)];
    slot->run = run;
    slot->cancelled = cancelled;
    timer->task_count = n + 1;
    index_put(atomic_load_explicit(&timer->task_index, memory_order_relaxed), n,
              hash_of(run, cancelled));
    return (long)n;
}

bool hwt__task_intern(hwt_timer *timer, hwt_task_fn run, hwt_task_fn cancelled, uint16_t *index)
{
    if (last.timer_id == timer->id && last.run == run && last.cancelled == cancelled) {
        *index = last.index;
        return true;
    }
    long found = find(timer, run, cancelled);
    if (found < 0) {
        pthread_mutex_lock(&timer->tasks_lock);
        found = find(timer, run, cancelled);
        if (found < 0)
            found = add_locked(timer, run, cancelled);
        pthread_mutex_unlock(&timer->tasks_lock);
        if (found < 0)
            return false;
    }
    last = (struct task_cache){timer->id, run, cancelled, (uint16_t)found};
    *index = (uint16_t)found;
    return true;
}

void hwt__tasks_free(hwt_timer *timer)
{
    for (unsigned b = 0; b < HWT_TASK_BLOCKS; b++)
        hwt__free(atomic_load_explicit(&timer->task_blocks[b], memory_order_relaxed));
    struct hwt__task_index *ix = atomic_load_explicit(&timer->task_index, memory_order_relaxed);
    while (ix != NULL) {
        struct hwt__task_index *older = ix->older;
        hwt__free(ix);
        ix = older;
    }
}

/*
 * arena.c - the reserved range behind 32-bit links (see arena.h). Any thread.
 *
 * Bookkeeping. The range is cut into slots of 2 MiB (a large page each), one
 * bit per slot: used or free. A map of more than 1 MiB takes whole slots,
 * consecutive; a smaller one takes a piece of a slot cut into equal pieces
 * of 16 KiB << k (k = 0..6: 128 to 2 pieces), one bit per piece, so that
 * the pool's regions (16 KiB doubling to 2 MiB per thread, pool.c) fit
 * without waste and stay aligned to their size. A cut slot with a free
 * piece is on its size's list; a slot whose last piece is given back is
 * free again. Slot 0 is never handed out: ref 0 means "none".
 *
 * The lock guards the bookkeeping only: the mmap calls that put memory in
 * a range taken, and take it out of one given back, run without it.
 *
 * Populated maps take turns (populate_lock). Mapping takes the process's
 * memory-map lock for writing and populating holds it for reading, for up
 * to milliseconds where fresh pages are dear, so a thread whose map comes
 * during another's population sleeps through it anyway, its CPU idle
 * (bench/README.md, "Each full-size region takes three system calls").
 * Taking turns in a lock of our own lets a thread that does not need the
 * memory yet skip its turn instead (hwt__arena_map_if_free): the pool maps
 * a thread's next region ahead of need that way (pool.c, grow_ahead).
 */
#define _GNU_SOURCE
#include "arena.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "os.h"
#include "steps.h"

#define BLOCKS_PER_SLOT (HWT_ARENA_SLOT_BYTES / HWT_ARENA_BLOCK_BYTES) /* 128 */
#define CUT_SIZES 7 /* pieces of 16 KiB << 0 .. 6 */

_Static_assert(HWT_ARENA_SLOT_BYTES == HWT_OS_LARGE_PAGE_BYTES, "a slot is a large page");
_Static_assert(BLOCKS_PER_SLOT == 128, "a cut slot's pieces fit two 64-bit words");

/* A slot cut into pieces of one size. */
struct cut_slot {
    uint64_t used[2]; /* one bit per piece */
    uint32_t next;    /* the next cut slot of its size with a free piece, + 1 (0: none) */
    uint8_t size;     /* pieces of HWT_ARENA_BLOCK_BYTES << size */
    bool listed;      /* on its size's list */
};

/* Taken around a populated map, before arena.lock (see the top). */
static pthread_mutex_t populate_lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
    pthread_mutex_t lock;
    size_t slots;
    uint64_t *slot_used;           /* a bit per slot */
    struct cut_slot *cut;          /* per slot: valid while it is cut */
    uint32_t with_free[CUT_SIZES]; /* cut slots with a free piece, by size: slot + 1 */
} arena = {.lock = PTHREAD_MUTEX_INITIALIZER};

char *hwt__arena_base;

/* ------------------------------------------------------------ reserving */

static size_t reservation_wanted(void)
{
    size_t bytes = HWT_ARENA_MAX_BYTES;
    struct rlimit limit;
    if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
        size_t share = (size_t)(limit.rlim_cur / 8) & ~(size_t)(HWT_ARENA_SLOT_BYTES - 1);
        if (share < bytes)
            bytes = share;
    }
    return bytes;
}

/* Reserves the range, slot-aligned, at the first map: false if even the
 * smallest will not do. */
static bool reserve_locked(hwt__alloc_site site)
{
    if (hwt__arena_base != NULL)
        return true;
    for (size_t bytes = reservation_wanted(); bytes >= HWT_ARENA_MIN_BYTES; bytes /= 2) {
        size_t span = bytes + HWT_ARENA_SLOT_BYTES;
        char *raw = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (raw == MAP_FAILED)
            continue;
        char *base = (char *)(((uintptr_t)raw + HWT_ARENA_SLOT_BYTES - 1) &
                              ~(uintptr_t)(HWT_ARENA_SLOT_BYTES - 1));
        if (base > raw)
            munmap(raw, (size_t)(base - raw));
        if (base + bytes < raw + span)
            munmap(base + bytes, (size_t)(raw + span - (base + bytes)));
        size_t slots = bytes / HWT_ARENA_SLOT_BYTES;
        arena.slot_used = hwt__calloc(site, (slots + 63) / 64, sizeof *arena.slot_used);
        arena.cut = hwt__calloc(site, slots, sizeof *arena.cut);
        if (arena.slot_used == NULL || arena.cut == NULL) {
            hwt__free(arena.slot_used);
            hwt__free(arena.cut);
            arena.slot_used = NULL;
            arena.cut = NULL;
            munmap(base, bytes);
            return false;
        }
        arena.slots = slots;
        arena.slot_used[0] = 1; /* slot 0: ref 0 is "none" */
        hwt__arena_base = base;
        return true;
    }
    return false;
}

/* ------------------------------------------------------------ slots */

static bool slot_is_used(size_t s)
{
    return (arena.slot_used[s / 64] >> (s % 64)) & 1;
}

static void mark_slots(size_t first, size_t n, bool used)
{
    for (size_t s = first; s < first + n; s++) {
        if (used)
            arena.slot_used[s / 64] |= UINT64_C(1) << (s % 64);
        else
            arena.slot_used[s / 64] &= ~(UINT64_C(1) << (s % 64));
    }
}

/* The first of n free slots in a row, or 0: none. */
static size_t free_slots_locked(size_t n)
{
    size_t run = 0;
    for (size_t s = 1; s < arena.slots; s++) {
        if (run == 0 && arena.slot_used[s / 64] == ~UINT64_C(0)) {
            s |= 63; /* a full word: skip it */
            continue;
        }
        run = slot_is_used(s) ? 0 : run + 1;
        if (run == n)
            return s + 1 - n;
    }
    return 0;
}

/* The same, taken. */
static size_t take_slots_locked(size_t n)
{
    size_t s = free_slots_locked(n);
    if (s != 0)
        mark_slots(s, n, true);
    return s;
}

/* ------------------------------------------------------------ pieces */

static size_t pieces_per_slot(unsigned size)
{
    return BLOCKS_PER_SLOT >> size;
}

static void list_cut_slot(unsigned size, size_t s)
{
    arena.cut[s].next = arena.with_free[size];
    arena.with_free[size] = (uint32_t)s + 1;
    arena.cut[s].listed = true;
}

static void unlist_cut_slot(unsigned size, size_t s)
{
    uint32_t *link = &arena.with_free[size];
    while (*link != s + 1)
        link = &arena.cut[*link - 1].next;
    *link = arena.cut[s].next;
    arena.cut[s].listed = false;
}

/* A free piece of 16 KiB << size, taken; NULL if none is to be had. */
static char *take_piece_locked(unsigned size)
{
    size_t s;
    if (arena.with_free[size] != 0) {
        s = arena.with_free[size] - 1;
    } else {
        s = take_slots_locked(1);
        if (s == 0)
            return NULL;
        memset(&arena.cut[s], 0, sizeof arena.cut[s]);
        arena.cut[s].size = (uint8_t)size;
        list_cut_slot(size, s);
    }
    struct cut_slot *c = &arena.cut[s];
    size_t i = c->used[0] != ~UINT64_C(0) ? (size_t)__builtin_ctzll(~c->used[0])
                                          : 64 + (size_t)__builtin_ctzll(~c->used[1]);
    c->used[i / 64] |= UINT64_C(1) << (i % 64);
    size_t taken =
        (size_t)__builtin_popcountll(c->used[0]) + (size_t)__builtin_popcountll(c->used[1]);
    if (taken == pieces_per_slot(size))
        unlist_cut_slot(size, s);
    return hwt__arena_base + s * HWT_ARENA_SLOT_BYTES + i * (HWT_ARENA_BLOCK_BYTES << size);
}

static void give_piece_locked(char *p, unsigned size)
{
    size_t off = (size_t)(p - hwt__arena_base);
    size_t s = off / HWT_ARENA_SLOT_BYTES;
    size_t i = off % HWT_ARENA_SLOT_BYTES / (HWT_ARENA_BLOCK_BYTES << size);
    struct cut_slot *c = &arena.cut[s];
    c->used[i / 64] &= ~(UINT64_C(1) << (i % 64));
    if (c->used[0] == 0 && c->used[1] == 0) {
        if (c->listed)
            unlist_cut_slot(size, s);
        mark_slots(s, 1, false);
    } else if (!c->listed) {
        list_cut_slot(size, s);
    }
}

/* ------------------------------------------------------------ maps */

/* What a map of `size` takes: a piece of 16 KiB << *cut (true), or *slots
 * whole slots (false). */
static bool shape_of(size_t size, unsigned *cut, size_t *slots)
{
    size_t blocks = (size + HWT_ARENA_BLOCK_BYTES - 1) / HWT_ARENA_BLOCK_BYTES;
    if (blocks <= BLOCKS_PER_SLOT / 2) {
        unsigned k = 0;
        while (((size_t)1 << k) < blocks)
            k++;
        *cut = k;
        return true;
    }
    *slots = (size + HWT_ARENA_SLOT_BYTES - 1) / HWT_ARENA_SLOT_BYTES;
    return false;
}

static size_t mapped_bytes(size_t size)
{
    return (size + HWT_ARENA_BLOCK_BYTES - 1) & ~(size_t)(HWT_ARENA_BLOCK_BYTES - 1);
}

static void give_back_locked(char *p, size_t size)
{
    unsigned cut;
    size_t slots;
    if (shape_of(size, &cut, &slots))
        give_piece_locked(p, cut);
    else
        mark_slots((size_t)(p - hwt__arena_base) / HWT_ARENA_SLOT_BYTES, slots, false);
}

static void *map(hwt__alloc_site site, size_t size, bool populate)
{
    if (hwt__alloc_should_fail(site) || size == 0)
        return NULL;
    unsigned cut;
    size_t slots;
    bool piece = shape_of(size, &cut, &slots);
    char *p = NULL;
    pthread_mutex_lock(&arena.lock);
    if (reserve_locked(site)) {
        if (piece) {
            p = take_piece_locked(cut);
        } else if (slots <= arena.slots) {
            size_t s = take_slots_locked(slots);
            p = s != 0 ? hwt__arena_base + s * HWT_ARENA_SLOT_BYTES : NULL;
        }
    }
    pthread_mutex_unlock(&arena.lock);
    if (p == NULL)
        return NULL;
    size_t bytes = mapped_bytes(size);
    if (mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) ==
        MAP_FAILED) {
        pthread_mutex_lock(&arena.lock);
        give_back_locked(p, size);
        pthread_mutex_unlock(&arena.lock);
        return NULL;
    }
    if (!piece)
        hwt__os_prefer_large_pages(p, bytes);
    /* The pool hands out every page of a region soon: fault them in with one
     * call instead of a trap per 4 KiB page, which costs several us in some
     * VMs - most of a schedule's cost there. Best effort. */
    if (populate)
        hwt__os_populate(p, bytes);
    return p;
}

/* A populated map in the turn the caller took (populate_lock), which it
 * ends. */
static void *map_in_turn(hwt__alloc_site site, size_t size)
{
    hwt__step_reached(HWT_STEP_POPULATE_TURN, NULL);
    void *p = map(site, size, true);
    pthread_mutex_unlock(&populate_lock);
    return p;
}

void *hwt__arena_map(hwt__alloc_site site, size_t size, bool populate)
{
    if (!populate)
        return map(site, size, false);
    pthread_mutex_lock(&populate_lock);
    return map_in_turn(site, size);
}

void *hwt__arena_map_if_free(hwt__alloc_site site, size_t size)
{
    if (pthread_mutex_trylock(&populate_lock) != 0)
        return NULL;
    return map_in_turn(site, size);
}

bool hwt__arena_has_room(size_t size)
{
    unsigned cut = 0;
    size_t slots = 1; /* a piece: a slot to cut, unless one cut for its size has room */
    bool piece = shape_of(size, &cut, &slots);
    pthread_mutex_lock(&arena.lock);
    bool room = hwt__arena_base == NULL || (piece && arena.with_free[cut] != 0) ||
                (slots <= arena.slots && free_slots_locked(slots) != 0);
    pthread_mutex_unlock(&arena.lock);
    return room;
}

void hwt__arena_unmap(void *p, size_t size)
{
    if (p == NULL)
        return;
    size_t bytes = mapped_bytes(size);
    /* Back to reserved: the memory goes to the system, the addresses stay
     * ours. Should the kernel refuse (no memory for the split mapping), the
     * pages are still dropped and read as zeros when mapped again. */
    if (mmap(p, bytes, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) ==
        MAP_FAILED)
        madvise(p, bytes, MADV_DONTNEED);
    pthread_mutex_lock(&arena.lock);
    give_back_locked(p, size);
    pthread_mutex_unlock(&arena.lock);
}

void hwt__arena_before_fork(void)
{
    pthread_mutex_lock(&populate_lock);
    pthread_mutex_lock(&arena.lock);
}

void hwt__arena_after_fork_in_parent(void)
{
    pthread_mutex_unlock(&arena.lock);
    pthread_mutex_unlock(&populate_lock);
}

void hwt__arena_after_fork_in_child(void)
{
    /* The forking thread took them in hwt__arena_before_fork, and is the
     * child's one thread: it gives them back, as in the parent. */
    pthread_mutex_unlock(&arena.lock);
    pthread_mutex_unlock(&populate_lock);
}

size_t hwt__arena_bytes(void)
{
    pthread_mutex_lock(&arena.lock);
    size_t bytes = arena.slots * HWT_ARENA_SLOT_BYTES;
    pthread_mutex_unlock(&arena.lock);
    return bytes;
}

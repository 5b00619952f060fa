/*
 * arena.h - the range of address space in which the library keeps what a
 * 32-bit link may point to: timeouts, and the wheel's buckets. A link
 * (hwt__ref) is an object's distance from the range's start in 8-byte
 * units, 0 for none, so following or making one is a shift and an add, and
 * a timeout holds its two wheel links in the room of one pointer (a timeout
 * is 40 bytes: internal.h).
 *
 * The range is reserved once per process, at the first hwt__arena_map: 32
 * GiB of address space and no memory (PROT_NONE, MAP_NORESERVE), less where
 * the system refuses that much or the process's address-space limit is low
 * (an eighth of RLIMIT_AS at most), down to HWT_ARENA_MIN_BYTES. Memory is
 * mapped into it on demand and given back to the system by hwt__arena_unmap,
 * which leaves the addresses reserved for the next map.
 *
 * Any thread; the reservation and the bookkeeping are behind one lock, taken
 * per map and unmap (a timeout pool maps 16 KiB to 2 MiB at a time), and
 * populated maps take turns.
 */
#ifndef HWT_ARENA_H
#define HWT_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"

typedef uint32_t hwt__ref;

#define HWT_ARENA_UNIT 8                         /* bytes per ref step: objects are 8-aligned */
#define HWT_ARENA_MAX_BYTES (UINT64_C(32) << 30) /* 2^32 units */
#define HWT_ARENA_MIN_BYTES (UINT64_C(16) << 20) /* 8 slots, 7 usable: ~360 000 timeouts */
#define HWT_ARENA_BLOCK_BYTES (UINT64_C(16) << 10) /* the unit of a map */
#define HWT_ARENA_SLOT_BYTES (UINT64_C(2) << 20)   /* a large page */

/* The range's start: set by the first map, then never changed. */
extern char *hwt__arena_base;

/* The object at `ref` (not 0): any thread that got the ref after the map. */
static inline void *hwt__arena_at(hwt__ref ref)
{
    return hwt__arena_base + (size_t)ref * HWT_ARENA_UNIT;
}

/* The ref of an object in the arena, 8-aligned. */
static inline hwt__ref hwt__arena_ref(const void *p)
{
    return (hwt__ref)((size_t)((const char *)p - hwt__arena_base) / HWT_ARENA_UNIT);
}

/* Zeroed, writable memory in the arena: `size` rounded up to a whole number
 * of blocks (16 KiB), aligned to its rounded size up to a slot (2 MiB, a
 * large page: a mapping of whole slots is backed by large pages where the
 * system has them); with `populate`, its pages faulted in where the kernel
 * can (else each on its first touch), after any other thread's populated
 * map under way. NULL when the arena or memory is exhausted (nothing
 * changed then). */
void *hwt__arena_map(hwt__alloc_site site, size_t size, bool populate);

/* A populated map, as hwt__arena_map(site, size, true), if no other
 * thread is making one (populated maps take turns: arena.c); NULL at once
 * if one is, or as hwt__arena_map fails. */
void *hwt__arena_map_if_free(hwt__alloc_site site, size_t size);

/* Whether the range has room for a map of `size` now (a snapshot): where a
 * map failed, tells a full range from a failing system. Any thread. */
bool hwt__arena_has_room(size_t size);

/* Gives a mapping back (the same size): its memory to the system, its
 * addresses to later maps. */
void hwt__arena_unmap(void *p, size_t size);

/* Around fork() (pthread_atfork, timer.c): the arena's bookkeeping is not
 * copied in the middle of a change - the lock is held across the fork - so
 * that a child's timers can use the inherited arena. */
void hwt__arena_before_fork(void);
void hwt__arena_after_fork_in_parent(void);
void hwt__arena_after_fork_in_child(void);

/* For tests: the arena's size (0 before the first map). */
size_t hwt__arena_bytes(void);

#endif

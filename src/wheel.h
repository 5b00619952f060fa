/*
 * wheel.h - the hashed wheel with overflow levels. No threads here: the
 * wheel belongs to the worker alone (and to the stopping thread after the
 * worker has ended). See the comment at the top of wheel.c for the design.
 */
#ifndef HWT_WHEEL_H
#define HWT_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hwtimer.h"

#define HWT_LEVEL_BITS 6
#define HWT_LEVEL_SLOTS 64
#define HWT_MAX_UPPER_LEVELS 11 /* enough for 63-bit tick numbers with a 1-bucket wheel */

struct hwt__ids;

/* A list of timeouts by id (ids.h); HWT_ID_NONE when empty. */
struct hwt__bucket {
    uint32_t head, tail;
};

struct hwt__wheel {
    int64_t cur;                /* the next tick to process; every earlier one is done */
    const struct hwt__ids *ids; /* the names of the timeouts it links */
    int64_t tick_ns;
    uint32_t bits0;        /* log2 of the level-0 length (ticks_per_wheel) */
    uint32_t upper_levels; /* levels above level 0 */
    uint64_t mask0;
    /* shift[k]: the lowest bit of level k's digit, for k = 0 .. upper_levels
     * + 1, capped at 63 (ticks are below 2^63: tick >> 63 is 0). */
    uint8_t shift[HWT_MAX_UPPER_LEVELS + 2];
    /* limit[k]: the first tick past the next range of level k (saturated):
     * a timeout due before it may be linked at level k. Set with cur. */
    uint64_t limit[HWT_MAX_UPPER_LEVELS + 1];
    int64_t pace;            /* ticks between worker passes while a pre-cascade runs */
    int64_t precascade_done; /* the pre-cascades' last pass was at this cur */
    /* Every level exists twice: for cur's range at that level and the next
     * range, in the arrays named by the range number's parity. Level 0's
     * range is a block (2^bits0 buckets). */
    struct hwt__bucket *level0[2];
    uint64_t *occ0[2]; /* one bit per level-0 bucket: non-empty */
    size_t occ0_words;
    struct hwt__bucket upper[HWT_MAX_UPPER_LEVELS][2][HWT_LEVEL_SLOTS];
    size_t upper_count[HWT_MAX_UPPER_LEVELS][2][HWT_LEVEL_SLOTS]; /* paces the pre-cascade */
    uint64_t occ_upper[HWT_MAX_UPPER_LEVELS][2];
    uint32_t upper_used; /* bit k-1: level k may hold timeouts (cleared lazily) */
    size_t count;        /* timeouts linked in the wheel */
};

/* Smallest power of two >= n (n in 1 .. 2^30). */
uint32_t hwt__wheel_round_length(uint32_t n);

/* 0 or HWT_ENOMEM. ticks_per_wheel is a power of two. The wheel links
 * timeouts named by `ids` (those of one pool). */
int hwt__wheel_init(struct hwt__wheel *wheel, uint32_t ticks_per_wheel, int64_t tick_ns,
                    const struct hwt__ids *ids);
void hwt__wheel_free(struct hwt__wheel *wheel);

/* Links a timeout (not linked) into the bucket of tick floor(deadline/tick),
 * or of the current tick if that one is past. */
void hwt__wheel_place(struct hwt__wheel *wheel, hwt_timeout *timeout);

/* Unlinks a linked timeout. */
void hwt__wheel_unlink(struct hwt__wheel *wheel, hwt_timeout *timeout);

/* The first tick >= cur at which the worker has something to do: a bucket
 * with timeouts, an overflow slot to move down, or a pass of a pre-cascade
 * (start or continue, see wheel.c); INT64_MAX if the wheel is empty. May
 * return an earlier tick at which nothing is due (huge wheels). */
int64_t hwt__wheel_next_event(const struct hwt__wheel *wheel);

/* One pass of the pre-cascades (see wheel.c): at each level whose next slot
 * is due soon, moves part of it down (below that level) ahead of time - at
 * least `budget` timeouts (or all), more to keep pace with the ticks left.
 * Returns how many were moved. */
size_t hwt__wheel_precascade(struct hwt__wheel *wheel, size_t budget);

/* Processes ticks cur .. last: for each due timeout, in tick order and within
 * a tick in the order they were linked, unlinks it and calls expire(ctx, t).
 * expire may not touch the wheel. Afterwards cur = last + 1. */
void hwt__wheel_advance(struct hwt__wheel *wheel, int64_t last,
                        void (*expire)(void *ctx, hwt_timeout *timeout), void *ctx);

/* Unlinks every timeout, calling fn(ctx, t) for each. */
void hwt__wheel_drain(struct hwt__wheel *wheel, void (*fn)(void *ctx, hwt_timeout *timeout),
                      void *ctx);

/* A faster drain when most of the pool is in the wheel (a scan in memory
 * order instead of walking the buckets' lists): hwt__wheel_forget each
 * linked timeout (neighbours untouched, as they all go), then
 * hwt__wheel_clear to empty the buckets. */
void hwt__wheel_forget(struct hwt__wheel *wheel, hwt_timeout *t);
void hwt__wheel_clear(struct hwt__wheel *wheel);

/* Checks the wheel's invariants (for tests): true if they hold. */
bool hwt__wheel_check(const struct hwt__wheel *wheel);

#endif

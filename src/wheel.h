/*
 * wheel.h - the hashed wheel with overflow levels: a leaf data structure
 * that files nodes by deadline and hands them back when their tick is
 * processed. It knows nothing of timeouts, timers or threads: whoever embeds
 * a node reaches its own object from it (container_of). No locks, no
 * atomics: one thread owns a wheel at a time (for the timer, the worker, then
 * the stopping thread after the worker has ended). See the comment at the
 * top of wheel.c for the design.
 */
#ifndef HWT_WHEEL_H
#define HWT_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"

#define HWT_LEVEL_BITS 6
#define HWT_LEVEL_SLOTS 64
#define HWT_MAX_UPPER_LEVELS 11 /* enough for 63-bit tick numbers with a 1-bucket wheel */

/* A link of a circular doubly linked list, as refs into the arena
 * (arena.h): every node and bucket lives there. A bucket is a link too: the
 * sentinel of its list when it holds nodes, {0, 0} when empty (so that
 * zeroed memory is a wheel of empty buckets). */
struct hwt__wheel_link {
    hwt__ref next, prev;
};

/* What the wheel files: embed it in your object, in the arena (16 bytes).
 * The wheel writes `link` and reads `deadline`; `deadline` is the owner's.
 * While the node is linked the owner may only move it later (atomically:
 * the wheel may read it meanwhile), and refiles the node when the wheel
 * hands it back before its new tick ("Refiling" in wheel.c); inside the
 * advance callback, anything goes. While not linked, link.prev is 0. */
struct hwt__wheel_node {
    struct hwt__wheel_link link; /* first: a link is its node */
    int64_t deadline;            /* in the wheel's time unit (ns): due at tick deadline / tick */
};

struct hwt__wheel {
    int64_t cur; /* the next tick to process; every earlier one is done */
    int64_t tick_ns;
    uint32_t bits0;        /* log2 of the level-0 length (ticks_per_wheel) */
    uint32_t upper_levels; /* levels above level 0 */
    uint64_t mask0;
    /* shift[k]: the lowest bit of level k's digit, for k = 0 .. upper_levels
     * + 1, capped at 63 (ticks are below 2^63: tick >> 63 is 0). */
    uint8_t shift[HWT_MAX_UPPER_LEVELS + 2];
    /* limit[k]: the first tick past the next range of level k (saturated):
     * a node due before it may be linked at level k. Set with cur. */
    uint64_t limit[HWT_MAX_UPPER_LEVELS + 1];
    int64_t pace;            /* ticks between worker passes while a pre-cascade runs */
    int64_t precascade_done; /* the pre-cascades' last pass was at this cur */
    /* Every level exists twice: for cur's range at that level and the next
     * range, in the arrays named by the range number's parity. Level 0's
     * range is a block (2^bits0 buckets). */
    struct hwt__wheel_link *level0[2]; /* in one arena mapping, level0_bytes */
    size_t level0_bytes;
    uint64_t *occ0[2]; /* one bit per level-0 bucket: non-empty */
    size_t occ0_words;
    struct hwt__wheel_link (*upper)[2][HWT_LEVEL_SLOTS]; /* [HWT_MAX_UPPER_LEVELS], in the arena */
    /* Paces the pre-cascade: at least the slot's nodes, 0 when it is empty
     * (an unlink from the middle of a list does not know its slot, see
     * wheel.c). */
    size_t upper_count[HWT_MAX_UPPER_LEVELS][2][HWT_LEVEL_SLOTS];
    uint64_t occ_upper[HWT_MAX_UPPER_LEVELS][2];
    uint32_t upper_used; /* bit k-1: level k may hold nodes (cleared lazily) */
    size_t count;        /* nodes linked in the wheel */
};

/* What the advance callback did with a due node. */
enum hwt__wheel_verdict {
    HWT_WHEEL_TAKEN, /* the node is the callback's now */
    HWT_WHEEL_REFILE /* place it again by its deadline (which the callback may have moved) */
};

typedef enum hwt__wheel_verdict (*hwt__wheel_due_fn)(void *ctx, struct hwt__wheel_node *node);
typedef void (*hwt__wheel_drain_fn)(void *ctx, struct hwt__wheel_node *node);

/* Smallest power of two >= n (n in 1 .. 2^30). */
uint32_t hwt__wheel_round_length(uint32_t n);

/* False when memory is exhausted (nothing to free then). ticks_per_wheel is
 * a power of two; tick_ns > 0. */
bool hwt__wheel_init(struct hwt__wheel *wheel, uint32_t ticks_per_wheel, int64_t tick_ns);
void hwt__wheel_free(struct hwt__wheel *wheel);

/* Whether a node is linked in a wheel (a node that was never placed is, if
 * zeroed, not). */
static inline bool hwt__wheel_linked(const struct hwt__wheel_node *node)
{
    return node->link.prev != 0;
}

/* Links a node (not linked) into the bucket of tick floor(deadline/tick),
 * or of the current tick if that one is past, behind what it holds. */
void hwt__wheel_place(struct hwt__wheel *wheel, struct hwt__wheel_node *node);

/* Unlinks a linked node: O(1), whatever its level. */
void hwt__wheel_unlink(struct hwt__wheel *wheel, struct hwt__wheel_node *node);

/* The first tick >= cur at which the owner has something to do: a bucket
 * with nodes, an overflow slot to move down, or a pass of a pre-cascade
 * (start or continue, see wheel.c); INT64_MAX if the wheel is empty. May
 * return an earlier tick at which nothing is due (huge wheels). */
int64_t hwt__wheel_next_event(const struct hwt__wheel *wheel);

/* One pass of the pre-cascades (see wheel.c): at each level whose next slot
 * is due soon, moves part of it down (below that level) ahead of time - at
 * least `budget` nodes (or all), more to keep pace with the ticks left.
 * Returns how many were moved. */
size_t hwt__wheel_precascade(struct hwt__wheel *wheel, size_t budget);

/* Processes ticks cur .. last: for each due node, in tick order and within
 * a tick in the order they were linked, unlinks it and calls due(ctx, node)
 * with cur at the node's tick. The callback may not touch the wheel, but it
 * may return HWT_WHEEL_REFILE to have the node placed again by its deadline
 * (a deadline moved later after the node was placed): one that is due by
 * then comes back to it within this tick, after the nodes linked before it -
 * so it must not refile a node whose deadline it has not moved. Afterwards
 * cur = last + 1. */
void hwt__wheel_advance(struct hwt__wheel *wheel, int64_t last, hwt__wheel_due_fn due, void *ctx);

/* Unlinks every node, calling fn(ctx, node) for each. */
void hwt__wheel_drain(struct hwt__wheel *wheel, hwt__wheel_drain_fn fn, void *ctx);

/* A faster drain when the owner can find every linked node in memory order
 * (a scan instead of walking the buckets' lists, whose nodes are scattered):
 * hwt__wheel_forget each linked node (neighbours untouched, as they all
 * go), then hwt__wheel_clear to empty the buckets. */
void hwt__wheel_forget(struct hwt__wheel *wheel, struct hwt__wheel_node *node);
void hwt__wheel_clear(struct hwt__wheel *wheel);

/* For tests: checks the wheel's invariants (true if they hold), and the
 * level a linked node is at (O(its bucket's length); -1 if not linked). */
bool hwt__wheel_check(const struct hwt__wheel *wheel);
int hwt__wheel_level_of(const struct hwt__wheel *wheel, const struct hwt__wheel_node *node);

#endif

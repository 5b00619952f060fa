/*
 * wheel.c - buckets and placement arithmetic. One owner thread: no atomics,
 * no locks. The wheel files nodes (wheel.h), not timeouts: it reads a node's
 * deadline and writes its links, nothing else.
 *
 * ---------------------------------------------------------------- the design
 *
 * Netty's HashedWheelTimer keeps one array of ticks_per_wheel buckets; a
 * timeout due in more than one revolution sits in its bucket with a
 * "remainingRounds" count that the worker decrements on every pass. A million
 * timeouts 10-70 s away on a 1 ms, 512-bucket wheel are therefore visited
 * ~100 times each per minute, and the worker must wake on every tick to do
 * it even when nothing is due.
 *
 * We keep Netty's semantics exactly - a node with deadline D is handed back
 * while the owner processes tick floor(D / tick) (or the current tick if that
 * one is past), and within a tick in the order the nodes were linked - but
 * store far nodes in overflow levels, as hierarchical timing wheels do
 * (Varghese & Lauck; Linux's timer wheel before 4.8; Kafka's purgatory):
 *
 *   level 0      ticks_per_wheel = 2^b buckets, one tick each
 *   level k >= 1 64 slots, each 2^(b + 6(k-1)) ticks wide
 *
 * Tick numbers are split into digits: the low b bits are level 0's digit,
 * then 6 bits per upper level. The bits above level k's digit are the tick's
 * range at level k (at level 0, its block). Every level exists twice: for
 * cur's range (cur: the next tick to process) and for the next range, in the
 * two arrays named by the range number's parity. A node due at tick d is
 * linked in the slot named by d's digit, in the array of d's range, at some
 * level k such that (checked by hwt__wheel_check):
 *
 *   (I1) d's range at level k is cur's or the next one; at level k >= 1 in
 *        cur's range, d's digit is larger than cur's (that slot was moved
 *        down already); at level 0, d >= cur (past-due: linked at cur);
 *   (I2) nodes due at the same tick are linked at lower levels the older
 *        they are, and in link order within a bucket.
 *
 * Whenever cur enters the first tick of a level-k slot, that slot is emptied
 * and its nodes are linked again lower down ("cascading"), top-down: a node
 * may join a lower slot starting at the same tick (behind older ones due
 * with it, see below) and must move on with it. A node falls as low as it
 * may at once and moves at most once per level, so a far-future node costs
 * O(levels), not O(revolutions).
 *
 * Placing (new nodes and moved ones alike): the lowest level allowed by
 * (I1), unless a slot holding d higher up (below the level it comes from)
 * is not empty: then the highest such slot, behind what waits there - it may
 * hold older nodes due at d, and (I2) must hold when they come down.
 *
 * Spreading the cascades: a slot's nodes are scattered in memory (they
 * arrived in any order), so moving a big slot at once stalls the owner - a
 * cache and TLB miss each: ~17 ms for a level-1 slot of 25 000, 11-45 ms for
 * a level-2 slot of 545 000. So the next slot of each level is moved down
 * ahead of time, into the next range of the level below (or lower), a part per
 * pass (hwt__wheel_precascade): at level 1 while cur's block runs, at level
 * k >= 2 during the last quarter of cur's level-k slot (late, so a timer
 * holding far timeouts stays idle; early enough to spread). A pass moves at
 * least a small budget, and the share of what is left that the ticks since
 * the last pass are of the ticks left, so the work is even however often the
 * owner passes; next_event wakes it for a pass every `pace` ticks (1/32
 * block), but only while a slot has something to move. Entering a slot then
 * only swaps the arrays' roles; what arrived late is moved at once, as before.
 *
 * Lists: each bucket is the sentinel of a circular doubly linked list of its
 * nodes (empty: {0, 0}, so a zeroed bucket array is empty and a huge level 0
 * stays untouched zero pages). Links are 32-bit refs into the arena
 * (arena.h), where nodes and buckets live: following one is a shift and an
 * add. A node records neither its bucket nor its level: unlinking splices
 * its neighbours, and only a node alone in its bucket has prev == next -
 * that is the bucket, whose level and slot follow from its address, to
 * clear its occupancy bit. So a node is two refs and a deadline, 16 bytes,
 * and an object embedding it pays nothing more for the wheel. The price: an
 * unlink from the middle of an upper slot's list does not know the slot, so
 * the slot's count, which only paces its pre-cascade, is an upper bound
 * (reset when the slot empties). An inflated count makes a pass move more
 * of the slot sooner, never fewer than the exact count would: the slot is
 * still empty by its start, and the total work is the same.
 *
 * Refiling: the owner may move a deadline later without touching the wheel
 * and refile the node when its old tick hands it back (the advance callback
 * answers HWT_WHEEL_REFILE): the node is placed again as a newcomer, so (I1)
 * and (I2) hold as for any placement; one due at once is handed back again
 * in the same tick, behind the nodes linked before it. A node still waiting
 * at an upper level is met first by its old slot's cascade or pre-cascade:
 * if its tick left that slot, it is placed there as a newcomer too (at any
 * level, behind older nodes of its tick wherever they wait); if not, it
 * comes down with the slot, in the slot's order.
 *
 * Sleeping: one occupancy bit per bucket (a 64-bit word per upper array, a
 * bitmap for level 0) gives the next tick at which anything happens - a
 * non-empty level-0 bucket, or a non-empty upper slot's first tick - with a
 * few count-trailing-zeros. The owner sleeps until then instead of ticking.
 * Ticks in between are skipped in O(1): no node needs them, and every node
 * still satisfies (I1) at the tick skipped to.
 *
 * Costs: link O(levels) bit tests, unlink O(1); moving down O(1) per node
 * per level; next event O(levels + level-0 words scanned), the scan capped
 * so a huge level 0 only costs an early, empty wake-up.
 */
#include "wheel.h"

#include <string.h>

#include "alloc.h"
#include "arena.h"

#define LEVEL0_SCAN_WORDS 1024 /* at most 65536 buckets scanned per next-event query */

static void set_cur(struct hwt__wheel *wheel, int64_t tick);

uint32_t hwt__wheel_round_length(uint32_t n)
{
    uint32_t len = 1;
    while (len < n)
        len <<= 1;
    return len;
}

static uint32_t log2_u32(uint32_t pow2)
{
    return (uint32_t)__builtin_ctz(pow2);
}

bool hwt__wheel_init(struct hwt__wheel *wheel, uint32_t ticks_per_wheel, int64_t tick_ns)
{
    memset(wheel, 0, sizeof *wheel); /* every bucket empty */
    wheel->tick_ns = tick_ns;
    wheel->bits0 = log2_u32(ticks_per_wheel);
    wheel->mask0 = (uint64_t)ticks_per_wheel - 1;
    wheel->pace = ticks_per_wheel >= 32 ? ticks_per_wheel / 32 : 1;
    wheel->precascade_done = -1;
    /* Enough upper levels that the top one holds tick digits up to bit 62. */
    wheel->upper_levels = wheel->bits0 >= 63 ? 0 : (62 - wheel->bits0) / HWT_LEVEL_BITS + 1;
    for (uint32_t k = 0; k <= wheel->upper_levels + 1; k++) {
        uint32_t shift = k == 0 ? 0 : wheel->bits0 + HWT_LEVEL_BITS * (k - 1);
        wheel->shift[k] = (uint8_t)(shift > 63 ? 63 : shift);
    }
    set_cur(wheel, 0);
    wheel->occ0_words = (ticks_per_wheel + 63) / 64;
    /* Buckets are link targets: in the arena. Not faulted in: a huge
     * wheel's untouched buckets stay untouched zero pages. */
    wheel->upper =
        hwt__arena_map(HWT_SITE_WHEEL, HWT_MAX_UPPER_LEVELS * sizeof *wheel->upper, false);
    wheel->level0_bytes = 2 * (size_t)ticks_per_wheel * sizeof(struct hwt__wheel_link);
    wheel->level0[0] = hwt__arena_map(HWT_SITE_WHEEL, wheel->level0_bytes, false);
    wheel->level0[1] = wheel->level0[0] != NULL ? wheel->level0[0] + ticks_per_wheel : NULL;
    for (int i = 0; i < 2; i++)
        wheel->occ0[i] = hwt__calloc(HWT_SITE_WHEEL, wheel->occ0_words, sizeof *wheel->occ0[i]);
    if (wheel->upper == NULL || wheel->level0[0] == NULL || wheel->occ0[0] == NULL ||
        wheel->occ0[1] == NULL) {
        hwt__wheel_free(wheel);
        return false;
    }
    return true;
}

void hwt__wheel_free(struct hwt__wheel *wheel)
{
    hwt__arena_unmap(wheel->upper, HWT_MAX_UPPER_LEVELS * sizeof *wheel->upper);
    hwt__arena_unmap(wheel->level0[0], wheel->level0_bytes);
    wheel->upper = NULL;
    for (int i = 0; i < 2; i++) {
        hwt__free(wheel->occ0[i]);
        wheel->level0[i] = NULL;
        wheel->occ0[i] = NULL;
    }
}

/* ------------------------------------------------------------ digits */

/* The lowest bit of level's digit. */
static uint32_t level_shift(const struct hwt__wheel *wheel, uint32_t level)
{
    return wheel->shift[level];
}

static uint32_t digit(const struct hwt__wheel *wheel, int64_t tick, uint32_t level)
{
    return (uint32_t)(((uint64_t)tick >> wheel->shift[level]) & (HWT_LEVEL_SLOTS - 1));
}

/* The bits above level's digit (0 at the top level). */
static uint64_t range_of(const struct hwt__wheel *wheel, int64_t tick, uint32_t level)
{
    return (uint64_t)tick >> wheel->shift[level + 1];
}

/* First tick of the slot (range, digit) of an upper level; INT64_MAX if past
 * the last tick. */
static int64_t slot_start(const struct hwt__wheel *wheel, uint32_t level, uint64_t range,
                          uint32_t d)
{
    /* range is at most cur's + 1 <= 2^(63 - shift): no wrap-around. */
    uint64_t tick =
        (range << level_shift(wheel, level + 1)) | ((uint64_t)d << level_shift(wheel, level));
    return tick > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)tick;
}

/* The lowest level at which a node due at `due` (>= cur) may be linked by
 * (I1): the first whose range is cur's or the next one. */
static uint32_t lowest_level(const struct hwt__wheel *wheel, int64_t due)
{
    uint32_t level = 0;
    while (level < wheel->upper_levels && (uint64_t)due >= wheel->limit[level])
        level++;
    return level;
}

/* Sets cur and the limits that depend on it. */
static void set_cur(struct hwt__wheel *wheel, int64_t tick)
{
    wheel->cur = tick;
    for (uint32_t k = 0; k <= wheel->upper_levels; k++) {
        uint32_t above = wheel->shift[k + 1];
        uint64_t ranges = range_of(wheel, tick, k) + 2;
        wheel->limit[k] = ranges > (UINT64_MAX >> above) ? UINT64_MAX : ranges << above;
    }
}

/* The tick a node is (to be) linked for: its due tick, or cur if past. */
static int64_t effective_due(const struct hwt__wheel *wheel, const struct hwt__wheel_node *node)
{
    /* An atomic read: the owner may move a deadline while the node is
     * linked (see "Refiling"); the node is filed by whichever value this
     * reads, and the owner refiles it if that was not the last. */
    int64_t due = __atomic_load_n(&node->deadline, __ATOMIC_RELAXED) / wheel->tick_ns;
    return due < wheel->cur ? wheel->cur : due;
}

struct slot_ref {
    struct hwt__wheel_link *bucket;
    uint64_t *occ_word;
    uint64_t occ_bit;
    size_t *count; /* upper levels only */
};

static struct slot_ref level0_ref(struct hwt__wheel *wheel, int parity, uint64_t idx)
{
    return (struct slot_ref){&wheel->level0[parity][idx], &wheel->occ0[parity][idx / 64],
                             UINT64_C(1) << (idx % 64), NULL};
}

static struct slot_ref upper_ref(struct hwt__wheel *wheel, uint32_t level, int parity, uint32_t d)
{
    return (struct slot_ref){&wheel->upper[level - 1][parity][d],
                             &wheel->occ_upper[level - 1][parity], UINT64_C(1) << d,
                             &wheel->upper_count[level - 1][parity][d]};
}

/* The bucket holding tick `due` at `level`, in the array of due's range. */
static struct slot_ref slot_at(struct hwt__wheel *wheel, uint32_t level, int64_t due)
{
    int parity = (int)(range_of(wheel, due, level) & 1);
    if (level == 0)
        return level0_ref(wheel, parity, (uint64_t)due & wheel->mask0);
    return upper_ref(wheel, level, parity, digit(wheel, due, level));
}

/* Where a link is if it is one of the wheel's buckets (*level: its level),
 * or a NULL bucket. The arrays' addresses tell: a node records no bucket. */
static struct slot_ref bucket_ref(const struct hwt__wheel *wheel,
                                  const struct hwt__wheel_link *link, uint32_t *level)
{
    struct hwt__wheel *w = (struct hwt__wheel *)wheel;
    uintptr_t a = (uintptr_t)link;
    uintptr_t upper = (uintptr_t)&w->upper[0][0][0];
    if (a - upper < HWT_MAX_UPPER_LEVELS * sizeof *w->upper) {
        size_t i = (size_t)(a - upper) / sizeof(struct hwt__wheel_link);
        *level = (uint32_t)(i / (2 * HWT_LEVEL_SLOTS)) + 1;
        return upper_ref(w, *level, (int)(i / HWT_LEVEL_SLOTS % 2),
                         (uint32_t)(i % HWT_LEVEL_SLOTS));
    }
    *level = 0;
    for (int p = 0; p < 2; p++) {
        uintptr_t base = (uintptr_t)w->level0[p];
        if (a - base <= wheel->mask0 * sizeof(struct hwt__wheel_link))
            return level0_ref(w, p, (a - base) / sizeof(struct hwt__wheel_link));
    }
    return (struct slot_ref){NULL, NULL, 0, NULL};
}

/* ------------------------------------------------------------ lists */

static struct hwt__wheel_node *node_of(struct hwt__wheel_link *link)
{
    return (struct hwt__wheel_node *)link; /* the link is the node's first member */
}

/* A link's target, and a link's ref (arena.h). */
static struct hwt__wheel_link *at(hwt__ref ref)
{
    return hwt__arena_at(ref);
}

static hwt__ref ref_of(const struct hwt__wheel_link *link)
{
    return hwt__arena_ref(link);
}

static bool occupied(struct slot_ref ref)
{
    return (*ref.occ_word & ref.occ_bit) != 0;
}

static void bucket_append(struct slot_ref ref, struct hwt__wheel_node *node)
{
    struct hwt__wheel_link *b = ref.bucket;
    hwt__ref bucket = ref_of(b), linked = ref_of(&node->link);
    if (!occupied(ref)) {
        *ref.occ_word |= ref.occ_bit;
        b->next = b->prev = bucket;
    }
    node->link.next = bucket;
    node->link.prev = b->prev;
    at(b->prev)->next = linked;
    b->prev = linked;
    if (ref.count != NULL)
        (*ref.count)++;
}

/* Marks a bucket empty (its nodes are gone or being taken). */
static void bucket_reset(struct slot_ref ref)
{
    ref.bucket->next = ref.bucket->prev = 0;
    *ref.occ_word &= ~ref.occ_bit;
    if (ref.count != NULL)
        *ref.count = 0;
}

/* Detaches a non-empty bucket's whole list: returns its first node's link;
 * the last one's next is still the bucket's address, which ends the walk. */
static struct hwt__wheel_link *bucket_take(struct slot_ref ref)
{
    struct hwt__wheel_link *first = at(ref.bucket->next);
    bucket_reset(ref);
    return first;
}

/* Links a node (not linked) at a level <= max_level: the lowest allowed, or
 * the highest non-empty slot holding its tick above that - (I2): older
 * nodes due at the same tick may wait there, the newcomer must queue behind.
 * A node coming down from the level above max_level (a cascade or a
 * pre-cascade) comes from the slot holding `from`. */
static void place_below(struct hwt__wheel *wheel, struct hwt__wheel_node *node, uint32_t max_level,
                        int64_t from)
{
    int64_t due = effective_due(wheel, node);
    uint32_t level = lowest_level(wheel, due);
    /* A node whose deadline moved later while it was linked, out of the
     * slot it comes from, is filed as a newcomer: older nodes due at its
     * new tick may wait at any level above its lowest, also at or above the
     * one it comes from - its lowest may be above that one, or, cascading
     * at the slot's start, below it while they wait in the next slot. Its
     * tick is not in the slot it comes from, so it never goes back there. */
    if (max_level < wheel->upper_levels &&
        (level > max_level || (uint64_t)due >> level_shift(wheel, max_level + 1) !=
                                  (uint64_t)from >> level_shift(wheel, max_level + 1)))
        max_level = wheel->upper_levels;
    /* Only levels that hold anything (most are empty): bits level .. max_level-1. */
    uint32_t above =
        wheel->upper_used & ((UINT32_C(1) << max_level) - 1) & ~((UINT32_C(1) << level) - 1);
    while (above != 0) {
        uint32_t k = 32 - (uint32_t)__builtin_clz(above);
        above &= ~(UINT32_C(1) << (k - 1));
        if ((wheel->occ_upper[k - 1][0] | wheel->occ_upper[k - 1][1]) == 0) {
            wheel->upper_used &= ~(UINT32_C(1) << (k - 1));
            continue;
        }
        int parity = (int)(range_of(wheel, due, k) & 1);
        if (wheel->occ_upper[k - 1][parity] & (UINT64_C(1) << digit(wheel, due, k))) {
            level = k;
            break;
        }
    }
    if (level > 0)
        wheel->upper_used |= UINT32_C(1) << (level - 1);
    bucket_append(slot_at(wheel, level, due), node);
    wheel->count++;
}

void hwt__wheel_place(struct hwt__wheel *wheel, struct hwt__wheel_node *node)
{
    place_below(wheel, node, wheel->upper_levels, 0);
}

void hwt__wheel_unlink(struct hwt__wheel *wheel, struct hwt__wheel_node *node)
{
    hwt__ref prev = node->link.prev, next = node->link.next;
    if (prev == next) { /* alone: both are its bucket */
        uint32_t level;
        bucket_reset(bucket_ref(wheel, at(prev), &level));
    } else {
        at(prev)->next = next;
        at(next)->prev = prev;
    }
    node->link.next = node->link.prev = 0;
    wheel->count--;
}

/* Unlinks the first node of a non-empty upper slot. */
static struct hwt__wheel_node *slot_pop(struct hwt__wheel *wheel, struct slot_ref ref)
{
    struct hwt__wheel_link *b = ref.bucket, *first = at(b->next);
    if (at(first->next) == b) {
        bucket_reset(ref);
    } else {
        b->next = first->next;
        at(first->next)->prev = ref_of(b);
        (*ref.count)--;
    }
    wheel->count--;
    first->next = first->prev = 0;
    return node_of(first);
}

/* ------------------------------------------------------------ moving cur */

/* Links again, lower down, every node of the level-k slot holding `tick`;
 * the next one is fetched while this one is placed (as in expire_bucket). */
static void cascade_slot(struct hwt__wheel *wheel, uint32_t level, int64_t tick)
{
    struct slot_ref ref = slot_at(wheel, level, tick);
    struct hwt__wheel_link *end = ref.bucket;
    struct hwt__wheel_link *link = bucket_take(ref);
    while (link != end) { /* nothing is placed back into this slot: below it */
        struct hwt__wheel_link *next = at(link->next);
        __builtin_prefetch(next);
        wheel->count--;
        place_below(wheel, node_of(link), level - 1, tick);
        link = next;
    }
}

/* Makes `tick` the current tick, cascading the slots that start there (I1):
 * top-down, as a slot may send nodes into the lower ones starting there. */
static void enter_tick(struct hwt__wheel *wheel, int64_t tick)
{
    set_cur(wheel, tick);
    for (uint32_t level = wheel->upper_levels; level >= 1; level--) {
        uint64_t below = ((uint64_t)1 << level_shift(wheel, level)) - 1;
        if (((uint64_t)tick & below) != 0)
            continue;
        if (occupied(slot_at(wheel, level, tick)))
            cascade_slot(wheel, level, tick);
    }
}

/* First occupied bucket of a level-0 array at index >= from, as a tick of
 * `block`; within the scan cap (then a tick where nothing is due). */
static int64_t first_in_level0(const struct hwt__wheel *wheel, int64_t block, uint64_t from)
{
    const uint64_t *occ = wheel->occ0[block & 1];
    int64_t base = (int64_t)((uint64_t)block << wheel->bits0);
    size_t w = from / 64;
    uint64_t word = occ[w] & (~UINT64_C(0) << (from % 64));
    size_t limit = w + LEVEL0_SCAN_WORDS;
    for (;;) {
        if (word != 0)
            return base + (int64_t)(w * 64 + (size_t)__builtin_ctzll(word));
        if (++w >= wheel->occ0_words)
            return INT64_MAX;
        if (w >= limit) /* give up: wake there, find nothing, look further */
            return base + (int64_t)(w * 64);
        word = occ[w];
    }
}

/* First tick of the first non-empty slot of an upper level after cur's
 * (either array); INT64_MAX if none. */
static int64_t first_upper(const struct hwt__wheel *wheel, uint32_t level)
{
    uint64_t range = range_of(wheel, wheel->cur, level);
    uint32_t d = digit(wheel, wheel->cur, level);
    uint64_t later =
        d == 63 ? 0 : wheel->occ_upper[level - 1][range & 1] & (~UINT64_C(0) << (d + 1));
    if (later != 0)
        return slot_start(wheel, level, range, (uint32_t)__builtin_ctzll(later));
    uint64_t next = wheel->occ_upper[level - 1][(range + 1) & 1];
    if (next != 0)
        return slot_start(wheel, level, range + 1, (uint32_t)__builtin_ctzll(next));
    return INT64_MAX;
}

/* Ticks before a level-k slot's first tick at which its pre-cascade opens. */
static int64_t precascade_window(const struct hwt__wheel *wheel, uint32_t level)
{
    int64_t width = (int64_t)1 << level_shift(wheel, level);
    return level == 1 ? width : width / 4;
}

/* The next tick at which something is due in level 0 or a slot must be
 * cascaded: what hwt__wheel_advance must not skip. */
static int64_t next_work(const struct hwt__wheel *wheel)
{
    if (wheel->count == 0)
        return INT64_MAX;
    int64_t block = (int64_t)range_of(wheel, wheel->cur, 0);
    int64_t best = first_in_level0(wheel, block, (uint64_t)wheel->cur & wheel->mask0);
    if (best == INT64_MAX && (uint64_t)block < ((uint64_t)INT64_MAX >> wheel->bits0))
        best = first_in_level0(wheel, block + 1, 0); /* unless cur's is the last block */
    for (uint32_t level = 1; level <= wheel->upper_levels; level++) {
        int64_t tick = first_upper(wheel, level);
        if (tick < best)
            best = tick;
    }
    return best;
}

int64_t hwt__wheel_next_event(const struct hwt__wheel *wheel)
{
    int64_t best = next_work(wheel);
    if (best == INT64_MAX)
        return best;
    /* Pre-cascade passes: the window's start, then one per `pace` ticks. */
    for (uint32_t level = 1; level <= wheel->upper_levels; level++) {
        int64_t first = first_upper(wheel, level);
        if (first == INT64_MAX)
            continue;
        /* The owner runs a pass at the end of the tick returned: cur +
         * pace - 1 makes one pass per pace ticks. */
        int64_t open = first - precascade_window(wheel, level);
        int64_t tick = open > wheel->cur                      ? open
                       : wheel->cur > INT64_MAX - wheel->pace ? INT64_MAX
                                                              : wheel->cur + wheel->pace - 1;
        if (tick < best)
            best = tick;
    }
    return best;
}

/* Moves part of level k's next slot into the next range of level k - 1, if
 * its window is open. */
static size_t precascade_level(struct hwt__wheel *wheel, uint32_t level, size_t budget)
{
    uint64_t range = range_of(wheel, wheel->cur, level);
    uint32_t d = digit(wheel, wheel->cur, level);
    int64_t first =
        d == 63 ? slot_start(wheel, level, range + 1, 0) : slot_start(wheel, level, range, d + 1);
    if (first == INT64_MAX || first - wheel->cur > precascade_window(wheel, level))
        return 0;
    struct slot_ref ref = slot_at(wheel, level, first);
    if (!occupied(ref))
        return 0;
    /* Spread what is left evenly over the ticks left: this pass takes the
     * share of the ticks since the last pass (or the window's start), so
     * frequent passes (a busy owner) move little each, and the pass at the
     * slot's last tick, all (the count is at least what is left). */
    int64_t open = first - precascade_window(wheel, level);
    int64_t from = wheel->precascade_done + 1 > open ? wheel->precascade_done + 1 : open;
    size_t n = 0;
    if (from <= wheel->cur)
        n = (size_t)((double)*ref.count * (double)(wheel->cur + 1 - from) /
                     (double)(first - from)) +
            1;
    if (n < budget)
        n = budget;
    size_t moved = 0;
    while (moved < n && occupied(ref)) {
        place_below(wheel, slot_pop(wheel, ref), level - 1, first);
        moved++;
    }
    return moved;
}

size_t hwt__wheel_precascade(struct hwt__wheel *wheel, size_t budget)
{
    size_t moved = 0;
    /* Top-down: what comes down from level k may go on down in this pass. */
    for (uint32_t level = wheel->upper_levels; level >= 1; level--)
        moved += precascade_level(wheel, level, budget);
    wheel->precascade_done = wheel->cur;
    return moved;
}

/* Hands every node of the level-0 bucket of cur to `due`, in link order;
 * refiled ones are placed again (those due now join the bucket afresh,
 * behind, and are handed back by the caller's next round). The next node
 * is fetched while `due` runs: a bucket's nodes are scattered, and the walk
 * would otherwise wait for each one's line after the previous task (see
 * "Prefetching the walks" in bench/README.md). */
static void expire_bucket(struct hwt__wheel *wheel, struct slot_ref ref, hwt__wheel_due_fn due,
                          void *ctx)
{
    struct hwt__wheel_link *end = ref.bucket;
    struct hwt__wheel_link *link = bucket_take(ref);
    while (link != end) {
        struct hwt__wheel_link *next = at(link->next);
        __builtin_prefetch(next);
        struct hwt__wheel_node *node = node_of(link);
        link->next = link->prev = 0;
        wheel->count--;
        if (due(ctx, node) == HWT_WHEEL_REFILE)
            hwt__wheel_place(wheel, node);
        link = next;
    }
}

void hwt__wheel_advance(struct hwt__wheel *wheel, int64_t last, hwt__wheel_due_fn due, void *ctx)
{
    while (wheel->cur <= last) {
        int64_t event = next_work(wheel);
        if (event > last) {
            /* Nothing due up to `last`: skip there; no tick with nodes and
             * no slot start with nodes lies in between, so (I1) still
             * holds. */
            enter_tick(wheel, last + 1);
            return;
        }
        if (event != wheel->cur)
            enter_tick(wheel, event);
        struct slot_ref ref = slot_at(wheel, 0, event);
        while (occupied(ref))
            expire_bucket(wheel, ref, due, ctx);
        enter_tick(wheel, event + 1);
    }
}

/* Empties every bucket; hands each node to fn (if any) first, in link
 * order. */
static void drain_all(struct hwt__wheel *wheel, hwt__wheel_drain_fn fn, void *ctx)
{
    for (uint32_t level = 0; level <= wheel->upper_levels; level++) {
        for (int p = 0; p < 2; p++) {
            size_t words = level == 0 ? wheel->occ0_words : 1;
            for (size_t w = 0; w < words; w++) {
                uint64_t *occ = level == 0 ? &wheel->occ0[p][w] : &wheel->occ_upper[level - 1][p];
                while (*occ != 0) {
                    uint32_t bit = (uint32_t)__builtin_ctzll(*occ);
                    struct slot_ref ref = level == 0 ? level0_ref(wheel, p, w * 64 + bit)
                                                     : upper_ref(wheel, level, p, bit);
                    struct hwt__wheel_link *end = ref.bucket;
                    struct hwt__wheel_link *link = bucket_take(ref);
                    while (fn != NULL && link != end) {
                        struct hwt__wheel_link *next = at(link->next);
                        link->next = link->prev = 0;
                        wheel->count--;
                        fn(ctx, node_of(link));
                        link = next;
                    }
                }
            }
        }
    }
    wheel->upper_used = 0;
}

void hwt__wheel_drain(struct hwt__wheel *wheel, hwt__wheel_drain_fn fn, void *ctx)
{
    drain_all(wheel, fn, ctx);
}

void hwt__wheel_forget(struct hwt__wheel *wheel, struct hwt__wheel_node *node)
{
    node->link.next = node->link.prev = 0;
    wheel->count--;
}

void hwt__wheel_clear(struct hwt__wheel *wheel)
{
    drain_all(wheel, NULL, NULL); /* each node was forgotten already */
}

/* ------------------------------------------------------------ checker */

/* Each node of bucket b (level `level`) must be linked to its neighbours
 * both ways, in the bucket where its due tick and level put it, and placed
 * as (I1) says; an empty bucket is {0, 0}. *len: its nodes. */
static bool check_bucket(const struct hwt__wheel *wheel, struct slot_ref ref, uint32_t level,
                         size_t *seen, size_t *len)
{
    const struct hwt__wheel_link *b = ref.bucket;
    *len = 0;
    if (!occupied(ref))
        return b->next == 0 && b->prev == 0 && (ref.count == NULL || *ref.count == 0);
    if (b->next == 0 || at(b->next) == b)
        return false;
    uint64_t cur_range = range_of(wheel, wheel->cur, level);
    const struct hwt__wheel_link *prev = b;
    for (hwt__ref r = b->next; at(r) != b; prev = at(r), r = at(r)->next) {
        const struct hwt__wheel_link *l = at(r);
        if (r == 0 || at(l->prev) != prev || *seen >= wheel->count) /* a cycle counts too many */
            return false;
        int64_t due = effective_due(wheel, (const struct hwt__wheel_node *)l);
        if (slot_at((struct hwt__wheel *)wheel, level, due).bucket != b)
            return false;
        uint64_t ahead = range_of(wheel, due, level) - cur_range;
        if (ahead > 1)
            return false;
        if (level > 0 && ahead == 0 && digit(wheel, due, level) <= digit(wheel, wheel->cur, level))
            return false;
        (*seen)++;
        (*len)++;
    }
    return at(b->prev) == prev && (ref.count == NULL || *ref.count >= *len);
}

bool hwt__wheel_check(const struct hwt__wheel *wheel)
{
    struct hwt__wheel *w = (struct hwt__wheel *)wheel;
    size_t seen = 0, len;
    for (int p = 0; p < 2; p++)
        for (uint64_t i = 0; i <= wheel->mask0; i++)
            if (!check_bucket(wheel, level0_ref(w, p, i), 0, &seen, &len))
                return false;
    for (uint32_t level = 1; level <= wheel->upper_levels; level++) {
        for (int p = 0; p < 2; p++) {
            for (uint32_t s = 0; s < HWT_LEVEL_SLOTS; s++) {
                struct slot_ref ref = upper_ref(w, level, p, s);
                if (!check_bucket(wheel, ref, level, &seen, &len))
                    return false;
                if (len > 0 && !(wheel->upper_used & (UINT32_C(1) << (level - 1))))
                    return false;
            }
        }
    }
    for (uint32_t level = wheel->upper_levels + 1; level <= HWT_MAX_UPPER_LEVELS; level++)
        if ((wheel->occ_upper[level - 1][0] | wheel->occ_upper[level - 1][1]) != 0)
            return false;
    return seen == wheel->count;
}

int hwt__wheel_level_of(const struct hwt__wheel *wheel, const struct hwt__wheel_node *node)
{
    if (!hwt__wheel_linked(node))
        return -1;
    uint32_t level;
    const struct hwt__wheel_link *l = at(node->link.next);
    while (bucket_ref(wheel, l, &level).bucket == NULL)
        l = at(l->next);
    return (int)level;
}

/*
 * wheel.c - buckets and placement arithmetic. Worker-only: no atomics, no locks.
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
 * We keep Netty's semantics exactly - a timeout with deadline D runs while
 * the worker processes tick floor(D / tick) (or the current tick if that one
 * is past), and within a tick in the order the timeouts were linked - but
 * store far timeouts in overflow levels, as hierarchical timing wheels do
 * (Varghese & Lauck; Linux's timer wheel before 4.8; Kafka's purgatory):
 *
 *   level 0      ticks_per_wheel = 2^b buckets, one tick each
 *   level k >= 1 64 slots, each 2^(b + 6(k-1)) ticks wide
 *
 * Tick numbers are split into digits: the low b bits are level 0's digit,
 * then 6 bits per upper level. The bits above level k's digit are the tick's
 * range at level k (at level 0, its block). Every level exists twice: for
 * cur's range (cur: the next tick to process) and for the next range, in the
 * two arrays named by the range number's parity. A timeout due at tick d is
 * linked in the slot named by d's digit, in the array of d's range, at some
 * level k such that (checked by hwt__wheel_check):
 *
 *   (I1) d's range at level k is cur's or the next one; at level k >= 1 in
 *        cur's range, d's digit is larger than cur's (that slot was moved
 *        down already); at level 0, d >= cur (past-due: linked at cur);
 *   (I2) timeouts due at the same tick are linked at lower levels the older
 *        they are, and in link order within a bucket.
 *
 * Whenever cur enters the first tick of a level-k slot, that slot is emptied
 * and its timeouts are linked again lower down ("cascading"), top-down: a
 * timeout may join a lower slot starting at the same tick (behind older ones
 * due with it, see below) and must move on with it. A timeout falls as low
 * as it may at once and moves at most once per level, so a far-future
 * timeout costs O(levels), not O(revolutions).
 *
 * Placing (new timeouts and moved ones alike): the lowest level allowed by
 * (I1), unless a slot holding d higher up (below the level it comes from)
 * is not empty: then the highest such slot, behind what waits there - it may
 * hold older timeouts due at d, and (I2) must hold when they come down.
 *
 * Spreading the cascades: a slot's timeouts are scattered in memory (they
 * arrived in any order), so moving a big slot at once stalls the worker - a
 * cache and TLB miss each: ~17 ms for a level-1 slot of 25 000, 11-45 ms for
 * a level-2 slot of 545 000. So the next slot of each level is moved down
 * ahead of time, into the next range of the level below (or lower), a part per
 * worker pass (hwt__wheel_precascade): at level 1 while cur's block runs, at
 * level k >= 2 during the last quarter of cur's level-k slot (late, so a
 * timer holding far timeouts stays idle; early enough to spread). A pass
 * moves at least a small budget, and the share of what is left that the
 * ticks since the last pass are of the ticks left, so the work is even
 * however often the worker passes; next_event wakes it for a pass every
 * `pace` ticks (1/32 block), but only while a slot has something to move.
 * Entering a slot then only swaps the arrays' roles; what arrived late is
 * moved at once, as before.
 *
 * Sleeping: one occupancy bit per bucket (a 64-bit word per upper array, a
 * bitmap for level 0) gives the next tick at which anything happens - a
 * non-empty level-0 bucket, or a non-empty upper slot's first tick - with a
 * few count-trailing-zeros. The worker sleeps until then instead of ticking.
 * Ticks in between are skipped in O(1): no timeout needs them, and every
 * timeout still satisfies (I1) at the tick skipped to.
 *
 * Costs: link O(levels) bit tests, unlink O(1); moving down O(1) per
 * timeout per level; next event O(levels + level-0 words scanned), the scan
 * capped so a huge level 0 only costs an early, empty wake-up.
 */
#include "wheel.h"

#include <string.h>

#include "alloc.h"
#include "ids.h"
#include "internal.h"

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

int hwt__wheel_init(struct hwt__wheel *wheel, uint32_t ticks_per_wheel, int64_t tick_ns,
                    const struct hwt__ids *ids)
{
    memset(wheel, 0, sizeof *wheel); /* every bucket empty: HWT_ID_NONE is 0 */
    wheel->ids = ids;
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
    /* calloc: a huge wheel's untouched buckets stay untouched zero pages. */
    for (int i = 0; i < 2; i++) {
        wheel->level0[i] = hwt__calloc(HWT_SITE_WHEEL, ticks_per_wheel, sizeof *wheel->level0[i]);
        wheel->occ0[i] = hwt__calloc(HWT_SITE_WHEEL, wheel->occ0_words, sizeof *wheel->occ0[i]);
        if (wheel->level0[i] == NULL || wheel->occ0[i] == NULL) {
            hwt__wheel_free(wheel);
            return HWT_ENOMEM;
        }
    }
    return 0;
}

void hwt__wheel_free(struct hwt__wheel *wheel)
{
    for (int i = 0; i < 2; i++) {
        hwt__free(wheel->level0[i]);
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

/* The lowest level at which a timeout due at `due` (>= cur) may be linked
 * by (I1): the first whose range is cur's or the next one. */
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

/* The tick a timeout is (to be) linked for: its due tick, or cur if past. */
static int64_t effective_due(const struct hwt__wheel *wheel, const hwt_timeout *t)
{
    int64_t due = t->deadline / wheel->tick_ns;
    return due < wheel->cur ? wheel->cur : due;
}

struct slot_ref {
    struct hwt__bucket *bucket;
    uint64_t *occ_word;
    uint64_t occ_bit;
    size_t *count; /* upper levels only */
};

/* The bucket holding tick `due` at `level`, in the array of due's range. */
static struct slot_ref slot_at(struct hwt__wheel *wheel, uint32_t level, int64_t due)
{
    struct slot_ref ref;
    int parity = (int)(range_of(wheel, due, level) & 1);
    if (level == 0) {
        uint64_t idx = (uint64_t)due & wheel->mask0;
        ref.bucket = &wheel->level0[parity][idx];
        ref.occ_word = &wheel->occ0[parity][idx / 64];
        ref.occ_bit = UINT64_C(1) << (idx % 64);
        ref.count = NULL;
    } else {
        uint32_t d = digit(wheel, due, level);
        ref.bucket = &wheel->upper[level - 1][parity][d];
        ref.occ_word = &wheel->occ_upper[level - 1][parity];
        ref.occ_bit = UINT64_C(1) << d;
        ref.count = &wheel->upper_count[level - 1][parity][d];
    }
    return ref;
}

/* Where a linked timeout is. */
static struct slot_ref slot_of(struct hwt__wheel *wheel, const hwt_timeout *t)
{
    return slot_at(wheel, t->wlevel, effective_due(wheel, t));
}

/* ------------------------------------------------------------ lists */

static hwt_timeout *timeout_at(const struct hwt__wheel *wheel, uint32_t id)
{
    return hwt__ids_timeout(wheel->ids, id);
}

static void bucket_append(struct hwt__wheel *wheel, struct hwt__bucket *b, hwt_timeout *t)
{
    uint32_t id = hwt__ids_of(t);
    t->link.next = HWT_ID_NONE;
    t->link.prev = b->tail;
    if (b->tail != HWT_ID_NONE)
        timeout_at(wheel, b->tail)->link.next = id;
    else
        b->head = id;
    b->tail = id;
}

/* Detaches and returns a bucket's whole list (ending with HWT_ID_NONE). */
static uint32_t bucket_take(struct hwt__bucket *b)
{
    uint32_t list = b->head;
    b->head = b->tail = HWT_ID_NONE;
    return list;
}

/* Links t (not linked) at a level <= max_level: the lowest allowed, or the
 * highest non-empty slot holding its tick above that - (I2): older timeouts
 * due at the same tick may wait there, the newcomer must queue behind. */
static void place_below(struct hwt__wheel *wheel, hwt_timeout *t, uint32_t max_level)
{
    int64_t due = effective_due(wheel, t);
    uint32_t level = lowest_level(wheel, due);
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
    struct slot_ref ref = slot_at(wheel, level, due);
    bucket_append(wheel, ref.bucket, t);
    *ref.occ_word |= ref.occ_bit;
    if (ref.count != NULL)
        (*ref.count)++;
    t->wflags |= HWT_W_LINKED;
    t->wlevel = (uint8_t)level;
    wheel->count++;
}

void hwt__wheel_place(struct hwt__wheel *wheel, hwt_timeout *t)
{
    place_below(wheel, t, wheel->upper_levels);
}

void hwt__wheel_unlink(struct hwt__wheel *wheel, hwt_timeout *t)
{
    struct slot_ref ref = slot_of(wheel, t);
    struct hwt__link *node = &t->link;
    if (node->prev != HWT_ID_NONE)
        timeout_at(wheel, node->prev)->link.next = node->next;
    else
        ref.bucket->head = node->next;
    if (node->next != HWT_ID_NONE)
        timeout_at(wheel, node->next)->link.prev = node->prev;
    else
        ref.bucket->tail = node->prev;
    if (ref.bucket->head == HWT_ID_NONE)
        *ref.occ_word &= ~ref.occ_bit;
    if (ref.count != NULL)
        (*ref.count)--;
    node->next = node->prev = HWT_ID_NONE;
    t->wflags &= (uint8_t)~HWT_W_LINKED;
    wheel->count--;
}

/* Unlinks the first timeout of a non-empty upper slot (neighbours kept). */
static hwt_timeout *slot_pop(struct hwt__wheel *wheel, struct slot_ref ref)
{
    hwt_timeout *t = timeout_at(wheel, ref.bucket->head);
    ref.bucket->head = t->link.next;
    if (t->link.next != HWT_ID_NONE)
        timeout_at(wheel, t->link.next)->link.prev = HWT_ID_NONE;
    else {
        ref.bucket->tail = HWT_ID_NONE;
        *ref.occ_word &= ~ref.occ_bit;
    }
    (*ref.count)--;
    wheel->count--;
    t->wflags &= (uint8_t)~HWT_W_LINKED;
    return t;
}

/* ------------------------------------------------------------ moving cur */

/* Links again, lower down, every timeout of the level-k slot holding `tick`. */
static void cascade_slot(struct hwt__wheel *wheel, uint32_t level, int64_t tick)
{
    struct slot_ref ref = slot_at(wheel, level, tick);
    uint32_t id = bucket_take(ref.bucket);
    *ref.occ_word &= ~ref.occ_bit;
    wheel->count -= *ref.count;
    *ref.count = 0;
    while (id != HWT_ID_NONE) {
        hwt_timeout *t = timeout_at(wheel, id);
        id = t->link.next;
        t->wflags &= (uint8_t)~HWT_W_LINKED;
        place_below(wheel, t, level - 1);
    }
}

/* Makes `tick` the current tick, cascading the slots that start there (I1):
 * top-down, as a slot may send timeouts into the lower ones starting there. */
static void enter_tick(struct hwt__wheel *wheel, int64_t tick)
{
    set_cur(wheel, tick);
    for (uint32_t level = wheel->upper_levels; level >= 1; level--) {
        uint64_t below = ((uint64_t)1 << level_shift(wheel, level)) - 1;
        if (((uint64_t)tick & below) != 0)
            continue;
        struct slot_ref ref = slot_at(wheel, level, tick);
        if (*ref.occ_word & ref.occ_bit)
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
        /* The worker runs a pass at the end of the tick returned: cur +
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
    if (!(*ref.occ_word & ref.occ_bit))
        return 0;
    /* Spread what is left evenly over the ticks left: this pass takes the
     * share of the ticks since the last pass (or the window's start), so
     * frequent passes (a busy worker) move little each, and the pass at the
     * slot's last tick, all. */
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
    while (moved < n && (*ref.occ_word & ref.occ_bit)) {
        place_below(wheel, slot_pop(wheel, ref), level - 1);
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

/* Unlinks every timeout of bucket b (its occupancy bit is the caller's) and
 * hands each to fn, in link order. */
static void drain_bucket(struct hwt__wheel *wheel, struct hwt__bucket *b,
                         void (*fn)(void *ctx, hwt_timeout *timeout), void *ctx)
{
    uint32_t id = bucket_take(b);
    if (fn == NULL) /* hwt__wheel_clear: each was forgotten already */
        return;
    while (id != HWT_ID_NONE) {
        hwt_timeout *t = timeout_at(wheel, id);
        id = t->link.next;
        t->link.next = t->link.prev = HWT_ID_NONE;
        t->wflags &= (uint8_t)~HWT_W_LINKED;
        wheel->count--;
        fn(ctx, t);
    }
}

void hwt__wheel_advance(struct hwt__wheel *wheel, int64_t last,
                        void (*expire)(void *ctx, hwt_timeout *timeout), void *ctx)
{
    while (wheel->cur <= last) {
        int64_t event = next_work(wheel);
        if (event > last) {
            /* Nothing due up to `last`: skip there; no tick with timeouts
             * and no slot start with timeouts lies in between, so (I1)
             * still holds. */
            enter_tick(wheel, last + 1);
            return;
        }
        if (event != wheel->cur)
            enter_tick(wheel, event);
        struct slot_ref ref = slot_at(wheel, 0, event);
        *ref.occ_word &= ~ref.occ_bit;
        drain_bucket(wheel, ref.bucket, expire, ctx);
        enter_tick(wheel, event + 1);
    }
}

void hwt__wheel_drain(struct hwt__wheel *wheel, void (*fn)(void *ctx, hwt_timeout *timeout),
                      void *ctx)
{
    for (int p = 0; p < 2; p++) {
        for (size_t w = 0; w < wheel->occ0_words; w++) {
            while (wheel->occ0[p][w] != 0) {
                size_t bit = (size_t)__builtin_ctzll(wheel->occ0[p][w]);
                wheel->occ0[p][w] &= wheel->occ0[p][w] - 1;
                drain_bucket(wheel, &wheel->level0[p][w * 64 + bit], fn, ctx);
            }
        }
    }
    wheel->upper_used = 0;
    for (uint32_t level = 1; level <= wheel->upper_levels; level++) {
        for (int p = 0; p < 2; p++) {
            uint64_t *occ = &wheel->occ_upper[level - 1][p];
            while (*occ != 0) {
                size_t slot = (size_t)__builtin_ctzll(*occ);
                *occ &= *occ - 1;
                wheel->upper_count[level - 1][p][slot] = 0;
                drain_bucket(wheel, &wheel->upper[level - 1][p][slot], fn, ctx);
            }
        }
    }
}

void hwt__wheel_forget(struct hwt__wheel *wheel, hwt_timeout *t)
{
    t->link.next = t->link.prev = HWT_ID_NONE;
    t->wflags &= (uint8_t)~HWT_W_LINKED;
    wheel->count--;
}

void hwt__wheel_clear(struct hwt__wheel *wheel)
{
    hwt__wheel_drain(wheel, NULL, NULL);
}

/* ------------------------------------------------------------ checker */

/* Each timeout of bucket b (level `level`, array `parity`) must be linked
 * where slot_of() says, flagged for that level, and placed as (I1) says. */
static bool check_bucket(const struct hwt__wheel *wheel, const struct hwt__bucket *b, bool occupied,
                         uint32_t level, size_t *seen, size_t *len)
{
    if ((b->head != HWT_ID_NONE) != occupied)
        return false;
    uint64_t cur_range = range_of(wheel, wheel->cur, level);
    uint32_t prev = HWT_ID_NONE;
    *len = 0;
    for (uint32_t id = b->head; id != HWT_ID_NONE;
         prev = id, id = timeout_at(wheel, id)->link.next) {
        const hwt_timeout *t = timeout_at(wheel, id);
        int64_t due = effective_due(wheel, t);
        if (hwt__ids_of(t) != id || t->link.prev != prev || !(t->wflags & HWT_W_LINKED) ||
            t->wlevel != level)
            return false;
        if (slot_of((struct hwt__wheel *)wheel, t).bucket != b)
            return false;
        uint64_t ahead = range_of(wheel, due, level) - cur_range;
        if (ahead > 1)
            return false;
        if (level > 0 && ahead == 0 && digit(wheel, due, level) <= digit(wheel, wheel->cur, level))
            return false;
        (*seen)++;
        (*len)++;
    }
    return b->tail == prev;
}

bool hwt__wheel_check(const struct hwt__wheel *wheel)
{
    size_t seen = 0, len;
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i <= wheel->mask0; i++) {
            bool occ = (wheel->occ0[p][i / 64] >> (i % 64)) & 1;
            if (!check_bucket(wheel, &wheel->level0[p][i], occ, 0, &seen, &len))
                return false;
        }
    }
    for (uint32_t level = 1; level <= wheel->upper_levels; level++) {
        for (int p = 0; p < 2; p++) {
            for (uint32_t s = 0; s < HWT_LEVEL_SLOTS; s++) {
                bool occ = (wheel->occ_upper[level - 1][p] >> s) & 1;
                if (!check_bucket(wheel, &wheel->upper[level - 1][p][s], occ, level, &seen, &len))
                    return false;
                if (len != wheel->upper_count[level - 1][p][s])
                    return false;
                if (occ && !(wheel->upper_used & (UINT32_C(1) << (level - 1))))
                    return false;
            }
        }
    }
    for (uint32_t level = wheel->upper_levels + 1; level <= HWT_MAX_UPPER_LEVELS; level++)
        if ((wheel->occ_upper[level - 1][0] | wheel->occ_upper[level - 1][1]) != 0)
            return false;
    return seen == wheel->count;
}

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
 * then 6 bits per upper level. A timeout due at tick d is linked at the
 * level of the highest digit in which d differs from cur (the next tick to
 * process), in the slot named by d's digit there; at level 0 that slot is
 * exactly d. Invariant (checked by hwt__wheel_check):
 *
 *   (I1) a timeout at level k >= 1 has the same digits above k as cur, and a
 *        larger digit k than cur;
 *   (I2) a timeout at level 0 is due in cur's block at a tick >= cur
 *        (past-due timeouts are linked at cur itself), or in the next block
 *        (see "spreading the cascades" below).
 *
 * Whenever cur enters a tick whose lower digits are all zero at level k, the
 * level-k slot named by cur's digit is emptied and its timeouts are linked
 * again (they land lower, in order): "cascading", done top-down so a timeout
 * can fall several levels at once. Each timeout cascades at most once per
 * level, so a far-future timeout costs O(levels), not O(revolutions).
 *
 * Spreading the cascades: a level-1 slot holds a whole block's timeouts,
 * scattered in memory (they arrived in any order), so moving them all at the
 * block's first tick stalls the worker (~17 ms for 25 000 timeouts in 56 MB
 * here: a cache and TLB miss each). So level 0 exists twice, for the block
 * of cur and for the next block (arrays named by the block number's parity):
 * a timeout due in the next block is linked there directly, and while the
 * current block runs, hwt__wheel_precascade() moves the next level-1 slot
 * into it a few hundred at a time. Crossing into the next block then only
 * swaps the arrays' roles. Invariant (I2) reads: a timeout at level 0 is due
 * in cur's block (at or after cur) or in the next one. Timeouts of the next
 * block may still sit higher up - in the level-1 slot not yet moved, or in a
 * slot of a higher level when the next block starts a new level-2 range -
 * and are moved at the block's first tick, as before.
 *
 * Sleeping: one occupancy bit per bucket (a 64-bit word per upper level, a
 * bitmap for level 0) gives the next tick at which anything happens - a
 * non-empty level-0 bucket, or a non-empty upper slot's first tick - with a
 * few count-trailing-zeros. The worker sleeps until then instead of ticking.
 * Ticks in between are skipped in O(1): by (I1)/(I2) no timeout needs them.
 *
 * Costs: link/unlink O(1); cascade O(1) per timeout per level; next event
 * O(levels + level-0 words scanned), the scan capped so a huge level 0
 * only costs an early, empty wake-up.
 */
#include "wheel.h"

#include <string.h>

#include "alloc.h"
#include "internal.h"

#define LEVEL0_SCAN_WORDS 1024 /* at most 65536 buckets scanned per next-event query */

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

int hwt__wheel_init(struct hwt__wheel *wheel, uint32_t ticks_per_wheel, int64_t tick_ns)
{
    memset(wheel, 0, sizeof *wheel);
    wheel->tick_ns = tick_ns;
    wheel->bits0 = log2_u32(ticks_per_wheel);
    wheel->mask0 = (uint64_t)ticks_per_wheel - 1;
    /* Enough upper levels that the top one holds tick digits up to bit 62. */
    wheel->upper_levels = wheel->bits0 >= 63 ? 0 : (62 - wheel->bits0) / HWT_LEVEL_BITS + 1;
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

static uint32_t level_shift(const struct hwt__wheel *wheel, uint32_t level)
{
    return wheel->bits0 + HWT_LEVEL_BITS * (level - 1);
}

static uint32_t digit(const struct hwt__wheel *wheel, int64_t tick, uint32_t level)
{
    return (uint32_t)(((uint64_t)tick >> level_shift(wheel, level)) & (HWT_LEVEL_SLOTS - 1));
}

/* The level a timeout due at `due` (>= cur) belongs to, per (I1)/(I2). */
static uint32_t level_of(const struct hwt__wheel *wheel, int64_t due)
{
    uint64_t diff = (uint64_t)due ^ (uint64_t)wheel->cur;
    if ((diff >> wheel->bits0) == 0)
        return 0;
    uint32_t high = 63 - (uint32_t)__builtin_clzll(diff);
    return 1 + (high - wheel->bits0) / HWT_LEVEL_BITS;
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
};

static int64_t block_of(const struct hwt__wheel *wheel, int64_t tick)
{
    return (int64_t)((uint64_t)tick >> wheel->bits0);
}

static struct slot_ref level0_slot(struct hwt__wheel *wheel, int64_t due)
{
    struct slot_ref ref;
    uint64_t idx = (uint64_t)due & wheel->mask0;
    int parity = (int)(block_of(wheel, due) & 1);
    ref.bucket = &wheel->level0[parity][idx];
    ref.occ_word = &wheel->occ0[parity][idx / 64];
    ref.occ_bit = UINT64_C(1) << (idx % 64);
    return ref;
}

static struct slot_ref upper_slot(struct hwt__wheel *wheel, int64_t due)
{
    struct slot_ref ref;
    uint32_t level = level_of(wheel, due);
    uint32_t d = digit(wheel, due, level);
    ref.bucket = &wheel->upper[level - 1][d];
    ref.occ_word = &wheel->occ_upper[level - 1];
    ref.occ_bit = UINT64_C(1) << d;
    return ref;
}

/* True if a timeout due at `due` (>= cur) belongs in level 0: due in cur's
 * block, or in the next block once nothing due there waits higher up (so
 * timeouts due at the same tick keep their order: a newcomer queues behind
 * the level-1 slot until hwt__wheel_precascade has emptied it). */
static bool belongs_in_level0(const struct hwt__wheel *wheel, int64_t due)
{
    int64_t ahead = block_of(wheel, due) - block_of(wheel, wheel->cur);
    if (ahead == 0)
        return true;
    if (ahead != 1)
        return false;
    uint32_t d = digit(wheel, wheel->cur, 1);
    return d < HWT_LEVEL_SLOTS - 1 && !(wheel->occ_upper[0] & (UINT64_C(1) << (d + 1)));
}

/* Where a linked timeout is. */
static struct slot_ref slot_of(struct hwt__wheel *wheel, const hwt_timeout *t)
{
    int64_t due = effective_due(wheel, t);
    return (t->wflags & HWT_W_LEVEL0) ? level0_slot(wheel, due) : upper_slot(wheel, due);
}

/* ------------------------------------------------------------ lists */

static void bucket_append(struct hwt__bucket *b, struct hwt__link *node)
{
    node->next = NULL;
    node->prev = b->tail;
    if (b->tail != NULL)
        b->tail->next = node;
    else
        b->head = node;
    b->tail = node;
}

/* Detaches and returns a bucket's whole list (NULL-terminated via next). */
static struct hwt__link *bucket_take(struct hwt__bucket *b)
{
    struct hwt__link *list = b->head;
    b->head = b->tail = NULL;
    return list;
}

void hwt__wheel_place(struct hwt__wheel *wheel, hwt_timeout *t)
{
    int64_t due = effective_due(wheel, t);
    bool level0 = belongs_in_level0(wheel, due);
    struct slot_ref ref = level0 ? level0_slot(wheel, due) : upper_slot(wheel, due);
    bucket_append(ref.bucket, &t->link);
    *ref.occ_word |= ref.occ_bit;
    t->wflags |= HWT_W_LINKED;
    if (level0)
        t->wflags |= HWT_W_LEVEL0;
    else
        t->wflags &= (uint8_t)~HWT_W_LEVEL0;
    wheel->count++;
}

void hwt__wheel_unlink(struct hwt__wheel *wheel, hwt_timeout *t)
{
    struct slot_ref ref = slot_of(wheel, t);
    struct hwt__link *node = &t->link;
    if (node->prev != NULL)
        node->prev->next = node->next;
    else
        ref.bucket->head = node->next;
    if (node->next != NULL)
        node->next->prev = node->prev;
    else
        ref.bucket->tail = node->prev;
    if (ref.bucket->head == NULL)
        *ref.occ_word &= ~ref.occ_bit;
    node->next = node->prev = NULL;
    t->wflags &= (uint8_t) ~(HWT_W_LINKED | HWT_W_LEVEL0);
    wheel->count--;
}

/* ------------------------------------------------------------ moving cur */

/* Links again every timeout of an upper slot whose first tick cur has reached. */
static void cascade_slot(struct hwt__wheel *wheel, uint32_t level, uint32_t slot)
{
    struct hwt__link *node = bucket_take(&wheel->upper[level - 1][slot]);
    wheel->occ_upper[level - 1] &= ~(UINT64_C(1) << slot);
    while (node != NULL) {
        struct hwt__link *next = node->next;
        hwt_timeout *t = hwt__timeout_of_link(node);
        wheel->count--;
        t->wflags &= (uint8_t) ~(HWT_W_LINKED | HWT_W_LEVEL0);
        hwt__wheel_place(wheel, t);
        node = next;
    }
}

/* Makes `tick` the current tick, cascading the slots that start there (I1). */
static void enter_tick(struct hwt__wheel *wheel, int64_t tick)
{
    wheel->cur = tick;
    for (uint32_t level = wheel->upper_levels; level >= 1; level--) {
        uint64_t below = ((uint64_t)1 << level_shift(wheel, level)) - 1;
        if (((uint64_t)tick & below) != 0)
            continue;
        uint32_t d = digit(wheel, tick, level);
        if (wheel->occ_upper[level - 1] & (UINT64_C(1) << d))
            cascade_slot(wheel, level, d);
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

int64_t hwt__wheel_next_event(const struct hwt__wheel *wheel)
{
    if (wheel->count == 0)
        return INT64_MAX;
    int64_t block = block_of(wheel, wheel->cur);
    int64_t best = first_in_level0(wheel, block, (uint64_t)wheel->cur & wheel->mask0);
    if (best == INT64_MAX)
        best = first_in_level0(wheel, block + 1, 0);
    for (uint32_t level = 1; level <= wheel->upper_levels; level++) {
        uint32_t d = digit(wheel, wheel->cur, level);
        uint64_t later = d == 63 ? 0 : wheel->occ_upper[level - 1] & (~UINT64_C(0) << (d + 1));
        if (later == 0)
            continue;
        uint32_t shift = level_shift(wheel, level);
        uint32_t above = shift + HWT_LEVEL_BITS;
        uint64_t high = above >= 64 ? 0 : ((uint64_t)wheel->cur >> above) << above;
        int64_t tick = (int64_t)(high | ((uint64_t)__builtin_ctzll(later) << shift));
        if (tick < best)
            best = tick;
    }
    return best;
}

/* The level-1 slot of the next block, if it is in the same level-2 range. */
static struct hwt__bucket *next_block_slot(const struct hwt__wheel *wheel, uint64_t *bit)
{
    if (wheel->upper_levels == 0)
        return NULL;
    uint32_t d = digit(wheel, wheel->cur, 1);
    if (d == HWT_LEVEL_SLOTS - 1)
        return NULL;
    *bit = UINT64_C(1) << (d + 1);
    return (struct hwt__bucket *)&wheel->upper[0][d + 1];
}

bool hwt__wheel_precascade_pending(const struct hwt__wheel *wheel)
{
    uint64_t bit;
    return next_block_slot(wheel, &bit) != NULL && (wheel->occ_upper[0] & bit) != 0;
}

size_t hwt__wheel_precascade(struct hwt__wheel *wheel, size_t budget)
{
    uint64_t bit;
    struct hwt__bucket *b = next_block_slot(wheel, &bit);
    size_t moved = 0;
    if (b == NULL)
        return 0;
    while (moved < budget && b->head != NULL) {
        struct hwt__link *node = b->head;
        b->head = node->next;
        if (b->head != NULL)
            b->head->prev = NULL;
        else
            b->tail = NULL;
        hwt_timeout *t = hwt__timeout_of_link(node);
        struct slot_ref ref = level0_slot(wheel, effective_due(wheel, t)); /* next block */
        bucket_append(ref.bucket, node);
        *ref.occ_word |= ref.occ_bit;
        t->wflags |= HWT_W_LEVEL0;
        moved++;
    }
    if (b->head == NULL)
        wheel->occ_upper[0] &= ~bit;
    return moved;
}

void hwt__wheel_advance(struct hwt__wheel *wheel, int64_t last,
                        void (*expire)(void *ctx, hwt_timeout *timeout), void *ctx)
{
    while (wheel->cur <= last) {
        int64_t event = hwt__wheel_next_event(wheel);
        if (event > last) {
            /* Nothing due up to `last`: skip there; no tick with timeouts
             * and no slot boundary with timeouts lies in between, so
             * (I1)/(I2) still hold. */
            enter_tick(wheel, last + 1);
            return;
        }
        if (event != wheel->cur)
            enter_tick(wheel, event);
        struct slot_ref ref = level0_slot(wheel, event);
        struct hwt__link *node = bucket_take(ref.bucket);
        *ref.occ_word &= ~ref.occ_bit;
        while (node != NULL) {
            struct hwt__link *next = node->next;
            hwt_timeout *t = hwt__timeout_of_link(node);
            node->next = node->prev = NULL;
            t->wflags &= (uint8_t) ~(HWT_W_LINKED | HWT_W_LEVEL0);
            wheel->count--;
            expire(ctx, t);
            node = next;
        }
        enter_tick(wheel, event + 1);
    }
}

static void drain_bucket(struct hwt__wheel *wheel, struct hwt__bucket *b,
                         void (*fn)(void *ctx, hwt_timeout *timeout), void *ctx)
{
    struct hwt__link *node = bucket_take(b);
    if (fn == NULL) /* hwt__wheel_clear: each was forgotten already */
        return;
    while (node != NULL) {
        struct hwt__link *next = node->next;
        hwt_timeout *t = hwt__timeout_of_link(node);
        node->next = node->prev = NULL;
        t->wflags &= (uint8_t) ~(HWT_W_LINKED | HWT_W_LEVEL0);
        wheel->count--;
        fn(ctx, t);
        node = next;
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
    for (uint32_t level = 1; level <= wheel->upper_levels; level++) {
        uint64_t *occ = &wheel->occ_upper[level - 1];
        while (*occ != 0) {
            size_t slot = (size_t)__builtin_ctzll(*occ);
            *occ &= *occ - 1;
            drain_bucket(wheel, &wheel->upper[level - 1][slot], fn, ctx);
        }
    }
}

void hwt__wheel_forget(struct hwt__wheel *wheel, hwt_timeout *t)
{
    t->link.next = t->link.prev = NULL;
    t->wflags &= (uint8_t) ~(HWT_W_LINKED | HWT_W_LEVEL0);
    wheel->count--;
}

void hwt__wheel_clear(struct hwt__wheel *wheel)
{
    hwt__wheel_drain(wheel, NULL, NULL);
}

/* ------------------------------------------------------------ checker */

/* Each timeout of bucket b must be linked where slot_of() says, flagged
 * for level 0 exactly when b is a level-0 bucket, and due in cur's block (at
 * or after cur) or the next one when at level 0, later otherwise. */
static bool check_bucket(const struct hwt__wheel *wheel, const struct hwt__bucket *b, bool occupied,
                         bool level0, size_t *seen)
{
    if ((b->head != NULL) != occupied)
        return false;
    int64_t block = block_of(wheel, wheel->cur);
    const struct hwt__link *prev = NULL;
    for (const struct hwt__link *n = b->head; n != NULL; prev = n, n = n->next) {
        const hwt_timeout *t = (const hwt_timeout *)((const char *)n - offsetof(hwt_timeout, link));
        int64_t due = effective_due(wheel, t);
        struct slot_ref ref = slot_of((struct hwt__wheel *)wheel, t);
        bool in_level0 = (t->wflags & HWT_W_LEVEL0) != 0;
        int64_t ahead = block_of(wheel, due) - block;
        if (n->prev != prev || ref.bucket != b || !(t->wflags & HWT_W_LINKED) ||
            in_level0 != level0 || (level0 ? (ahead < 0 || ahead > 1) : ahead < 1))
            return false;
        (*seen)++;
    }
    return b->tail == prev;
}

bool hwt__wheel_check(const struct hwt__wheel *wheel)
{
    size_t seen = 0;
    for (int p = 0; p < 2; p++) {
        for (size_t i = 0; i <= wheel->mask0; i++) {
            bool occ = (wheel->occ0[p][i / 64] >> (i % 64)) & 1;
            if (!check_bucket(wheel, &wheel->level0[p][i], occ, true, &seen))
                return false;
        }
    }
    for (uint32_t level = 1; level <= wheel->upper_levels; level++) {
        uint32_t d = digit(wheel, wheel->cur, level);
        for (uint32_t s = 0; s < HWT_LEVEL_SLOTS; s++) {
            bool occ = (wheel->occ_upper[level - 1] >> s) & 1;
            if (occ && s <= d) /* (I1): only slots after cur's digit hold timeouts */
                return false;
            if (!check_bucket(wheel, &wheel->upper[level - 1][s], occ, false, &seen))
                return false;
        }
    }
    for (uint32_t level = wheel->upper_levels + 1; level <= HWT_MAX_UPPER_LEVELS; level++)
        if (wheel->occ_upper[level - 1] != 0)
            return false;
    return seen == wheel->count;
}

/*
 * test_wheel.c - the wheel (src/wheel.c) against a reference model.
 *
 * Random placements (past, near, far, "never"), unlinks, pre-cascades and
 * advances (one tick, small and huge jumps, or from event to event as the
 * worker does) on wheels of 1, 2, 4, 8, 64 and 512 buckets, also with cur
 * near the end of time. After every operation hwt__wheel_check() must hold;
 * every timeout must fire at exactly max(due tick, tick current when it was
 * placed), in tick order and, within a tick, in placement order; next_event
 * must never pass work. Focused runs pile timeouts due at the same few ticks
 * around a level-1, -2 or -3 slot start while pre-cascades run part-way, so
 * a tick's timeouts wait at several levels at once. The move runs (random
 * and focused) also move deadlines while linked, as hwt_timeout_reschedule
 * does: later in place, earlier by an unlink and a placement; the order
 * they must keep is defined under "Moves later while linked".
 *
 * HWT_WHEEL_SEED=N (N != 0) runs the same tests on another random sequence:
 *   for s in $(seq 1 200); do HWT_WHEEL_SEED=$s build/tests/itest_wheel || break; done
 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wheel.h"

#define N_TIMEOUTS 4000

struct model {
    struct hwt__wheel_node t[N_TIMEOUTS];
    int64_t fire_tick[N_TIMEOUTS]; /* expected */
    int64_t fired_at[N_TIMEOUTS];  /* observed, -1 if not */
    uint64_t seq[N_TIMEOUTS];      /* placement order */
    bool live[N_TIMEOUTS];
    int refiles[N_TIMEOUTS]; /* how often the callback refiled it */
    uint64_t next_seq;
    int refile_percent; /* the callback refiles this share of the nodes due */
    /* Deadlines moved later while linked ("Moves later while linked"). */
    int64_t filed_tick[N_TIMEOUTS];     /* the tick it is linked for (at its last filing) */
    int64_t filed_deadline[N_TIMEOUTS]; /* the deadline it was filed by */
    bool pending[N_TIMEOUTS];           /* moved out of its bucket, not met there yet */
    size_t n_pending;
    /* Where a pending node waits (it stays there until met): level * 128 +
     * parity * 64 + digit, or 0 at level 0; and its place in that slot's
     * list, which keeps its order among the slot's pending nodes. */
    uint32_t slot_id[N_TIMEOUTS];
    uint32_t slot_pos[N_TIMEOUTS];
    uint64_t seen[N_TIMEOUTS]; /* found by the walk of this stamp */
    uint64_t stamp;
    /* The pending nodes an advance or a pre-cascade pass meets, in order. */
    struct meet {
        int64_t tick;
        uint32_t slot_id, pos;
        size_t i;
    } meets[N_TIMEOUTS];
    size_t n_meets, next_meet;
    struct hwt__wheel wheel;
    /* observed order check */
    int64_t last_tick;
    uint64_t last_seq;
    int errors;
};

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static uint64_t rnd(void);

/* A deadline moved later from `deadline` (in the same tick, a few ticks
 * later, or far), saturated. */
static int64_t moved_later(int64_t deadline);

/* ------------------------------------------- moves later while linked
 *
 * hwt_timeout_reschedule moves a deadline later by writing it while the node
 * stays linked wherever it is (level 0 or above, in cur's range or the next,
 * maybe in a slot a pre-cascade is part-way through); a move earlier unlinks
 * the node and places it again. The wheel meets a node moved later where it
 * waits: at its slot's cascade or pre-cascade (place_below files it by its
 * new deadline), or at its old tick's bucket (the callback answers
 * HWT_WHEEL_REFILE and it is placed again).
 *
 * The order the model expects: each node has a key, the moment it was last
 * filed, and within a tick nodes are handed back by key. A node is filed
 * when it is placed or refiled by the callback, and - moved later out of
 * the bucket it waits in (a level-0 bucket is one tick, an upper slot the
 * ticks of its digit) - when the wheel meets it there by its new deadline:
 * its slot's cascade (when cur enters the slot; within one entered tick,
 * top level first, each slot in list order), a pre-cascade pass that pops
 * it (top level first, in list order), or its old tick's expiry (REFILE).
 * It then queues behind every node filed for its new tick before that
 * moment, wherever those wait.
 *
 * One exception, stated rather than hidden: a node moved later WITHIN the
 * upper slot it waits in keeps its key and its place in that slot's list,
 * as if it had been filed with the new deadline at its last filing. The
 * wheel cannot do otherwise cheaply: a node records only its current
 * deadline, so when the slot cascades it cannot tell such a node from one
 * placed there for that tick, and the slot comes down in list order. So a
 * node Y filed for tick d after X was filed for an earlier tick of the same
 * slot runs after X if X is moved to d before the slot cascades, even when
 * Y was filed after X's move (by the definition above without the
 * exception, Y first). Meeting that would take the wheel a record of the
 * deadline each node was filed by (8 more bytes a node), or the owner an
 * unlink and place on every move later. (Within a level-0 bucket the
 * question does not arise: a move within its tick leaves it due there.)
 *
 * A pending node (moved out of its bucket, not met yet) still sits where
 * its old deadline put it, so hwt__wheel_check, which reads deadlines,
 * fails for it: model_check gives each pending node the deadline it was
 * filed by for the check's duration, and checks the rest as they are. */

/* Node i is filed now (placed, refiled, or met by its new deadline): a new
 * key, and the bucket of its fire tick. */
static void filed(struct model *m, size_t i)
{
    m->seq[i] = m->next_seq++;
    m->filed_tick[i] = m->fire_tick[i];
    m->filed_deadline[i] = m->t[i].deadline;
    if (m->pending[i]) {
        m->pending[i] = false;
        m->n_pending--;
    }
}

/* The pending nodes met by the cascades of ticks up to `tick` (planned by
 * model_advance) are filed now, in the order the wheel meets them. */
static void meet_until(struct model *m, int64_t tick)
{
    while (m->next_meet < m->n_meets && m->meets[m->next_meet].tick <= tick) {
        size_t i = m->meets[m->next_meet++].i;
        if (m->pending[i])
            filed(m, i);
    }
}

/* Counts an error of the callback (which may not fail a test itself); the
 * first one is told, to start from when a seed fails. */
static void model_error(struct model *m, const char *what, size_t i)
{
    if (m->errors++ == 0)
        print_message("wheel model: %s: node %zu at tick %lld: key %llu (last %llu), filed "
                      "%lld by %lld, fire %lld, deadline %lld, pending %d\n",
                      what, i, (long long)m->wheel.cur, (unsigned long long)m->seq[i],
                      (unsigned long long)m->last_seq, (long long)m->filed_tick[i],
                      (long long)m->filed_deadline[i], (long long)m->fire_tick[i],
                      (long long)m->t[i].deadline, m->pending[i]);
}

static enum hwt__wheel_verdict on_expire(void *ctx, struct hwt__wheel_node *node)
{
    struct model *m = ctx;
    size_t i = (size_t)(node - m->t);
    int64_t tick = m->wheel.cur;
    meet_until(m, tick); /* a tick's cascades run before its bucket */
    /* Handed back at the tick it is linked for, in key order. */
    if (!m->live[i] || m->fired_at[i] != -1 || hwt__wheel_linked(node))
        model_error(m, "dead, handed back twice or still linked", i);
    if (tick != m->filed_tick[i])
        model_error(m, "not at its bucket's tick", i);
    if (tick < m->last_tick || (tick == m->last_tick && m->seq[i] < m->last_seq))
        model_error(m, "out of order", i);
    m->last_tick = tick;
    m->last_seq = m->seq[i];
    if (m->pending[i]) {
        /* Moved out of this tick while linked: the owner refiles it. */
        if (node->deadline <= tick)
            model_error(m, "pending but due", i);
        filed(m, i);
        return HWT_WHEEL_REFILE;
    }
    if (tick != m->fire_tick[i] || node->deadline > tick) /* never before its deadline's tick */
        model_error(m, "not at its fire tick", i);
    if (m->refile_percent > 0 && m->refiles[i] < 3 && node->deadline < INT64_MAX &&
        rnd() % 100 < (uint64_t)m->refile_percent) {
        /* As a reschedule would: a later deadline, filed again as a newcomer
         * (due now: handed back in this tick, behind what was linked). */
        m->refiles[i]++;
        node->deadline = moved_later(node->deadline);
        m->fire_tick[i] = node->deadline < tick ? tick : node->deadline;
        filed(m, i);
        return HWT_WHEEL_REFILE;
    }
    m->fired_at[i] = tick;
    m->live[i] = false;
    return HWT_WHEEL_TAKEN;
}

/* cur + ahead, saturated (cur may be near the end of time). */
static int64_t later(int64_t cur, uint64_t ahead)
{
    return ahead > (uint64_t)(INT64_MAX - cur) ? INT64_MAX : cur + (int64_t)ahead;
}

static int64_t moved_later(int64_t deadline)
{
    switch (rnd() % 4) {
    case 0: return deadline; /* moved within its tick (a tick is 1 here): due now */
    case 1: return later(deadline, 1 + rnd() % 3);
    case 2: return later(deadline, rnd() % 5000);
    default: return later(deadline, rnd() % 100000000);
    }
}

static int64_t random_deadline(int64_t cur, uint32_t wheel_len)
{
    switch (rnd() % 8) {
    case 0: return cur > 0 ? (int64_t)(rnd() % (uint64_t)cur) : 0; /* past */
    case 1: return later(cur, rnd() % 4);
    case 2: return later(cur, rnd() % (wheel_len * 2 + 1));
    case 3: return later(cur, rnd() % 100000);
    case 4: return later(cur, rnd() % 100000000);
    case 5: return INT64_MAX;
    case 6: return later(cur, (rnd() >> 2) % (INT64_MAX / 4));
    default: return later(cur, rnd() % 5000);
    }
}

/* Zeroed memory in the arena, where the wheel's nodes must live (wheel.h). */
static void *arena_zalloc(size_t size)
{
    void *p = hwt__arena_map(HWT_SITE_WHEEL, size, false);
    assert_non_null(p);
    return p;
}

static struct model *model_new(uint32_t wheel_len)
{
    struct model *m = arena_zalloc(sizeof *m); /* zeroed nodes: not linked */
    assert_non_null(m);
    assert_true(hwt__wheel_init(&m->wheel, wheel_len, 1));
    for (size_t i = 0; i < N_TIMEOUTS; i++)
        m->fired_at[i] = -1;
    return m;
}

static void model_free(struct model *m)
{
    hwt__wheel_free(&m->wheel);
    hwt__arena_unmap(m, sizeof *m);
}

static void model_place(struct model *m, size_t i, int64_t deadline)
{
    m->t[i].deadline = deadline;
    m->fire_tick[i] = deadline < m->wheel.cur ? m->wheel.cur : deadline;
    filed(m, i);
    m->live[i] = true;
    hwt__wheel_place(&m->wheel, &m->t[i]);
    assert_true(hwt__wheel_linked(&m->t[i]));
}

static void model_unlink(struct model *m, size_t i)
{
    hwt__wheel_unlink(&m->wheel, &m->t[i]);
    assert_false(hwt__wheel_linked(&m->t[i]));
    m->live[i] = false;
    if (m->pending[i]) {
        m->pending[i] = false;
        m->n_pending--;
    }
}

/* First tick of the bucket holding `tick` at `level` (level 0: the tick). */
static int64_t bucket_first(const struct hwt__wheel *w, uint32_t level, int64_t tick)
{
    uint32_t shift = level == 0 ? 0 : w->shift[level];
    return (int64_t)(((uint64_t)tick >> shift) << shift);
}

/* The upper slot of a slot_id; the slot_id of the slot holding `tick` at
 * an upper level. */
static struct hwt__wheel_link *slot_of_id(struct hwt__wheel *w, uint32_t id)
{
    return &w->upper[id / 128 - 1][id / 64 % 2][id % 64];
}

static uint32_t slot_id_of(const struct hwt__wheel *w, uint32_t level, int64_t tick)
{
    uint64_t t = (uint64_t)tick;
    return level * 128 + (uint32_t)((t >> w->shift[level + 1]) & 1) * 64 +
           (uint32_t)((t >> w->shift[level]) % HWT_LEVEL_SLOTS);
}

/* Walks an upper slot: marks its nodes seen (a new stamp) and notes the
 * place of each pending one. */
static void walk_slot(struct model *m, uint32_t id)
{
    const struct hwt__wheel_link *b = slot_of_id(&m->wheel, id);
    m->stamp++;
    if (!(m->wheel.occ_upper[id / 128 - 1][id / 64 % 2] & (UINT64_C(1) << (id % 64))))
        return;
    uint32_t pos = 0;
    for (hwt__ref r = b->next; hwt__arena_at(r) != b; pos++) {
        const struct hwt__wheel_link *l = hwt__arena_at(r);
        size_t i = (size_t)((const struct hwt__wheel_node *)l - m->t);
        assert_true(i < N_TIMEOUTS);
        m->seen[i] = m->stamp;
        if (m->pending[i])
            m->slot_pos[i] = pos;
        r = l->next;
    }
}

/* Moves node i's deadline later while it stays linked, as a reschedule
 * does. Out of its bucket, it is pending until the wheel meets it; within,
 * it keeps its key (see above). */
static void model_move_later(struct model *m, size_t i, int64_t deadline)
{
    struct hwt__wheel_node *node = &m->t[i];
    assert_true(m->live[i] && deadline >= node->deadline);
    int level = hwt__wheel_level_of(&m->wheel, node);
    assert_true(level >= 0);
    __atomic_store_n(&node->deadline, deadline, __ATOMIC_RELAXED);
    int64_t f = m->filed_tick[i];
    /* Filed at cur with a past deadline: still due at that tick. */
    m->fire_tick[i] = deadline > f ? deadline : f;
    if (m->pending[i])
        return; /* still where its first move left it */
    if (bucket_first(&m->wheel, (uint32_t)level, m->fire_tick[i]) ==
        bucket_first(&m->wheel, (uint32_t)level, f)) {
        m->filed_tick[i] = m->fire_tick[i];
        m->filed_deadline[i] = deadline;
        return;
    }
    m->pending[i] = true;
    m->n_pending++;
    m->slot_id[i] = level == 0 ? 0 : slot_id_of(&m->wheel, (uint32_t)level, f);
    if (level > 0) { /* where it waits, and its place among the pending there */
        walk_slot(m, m->slot_id[i]);
        assert_true(m->seen[i] == m->stamp);
    }
}

/* Moves node i's deadline earlier, as a reschedule does: unlinked and
 * placed again, a newcomer. */
static void model_move_earlier(struct model *m, size_t i, int64_t deadline)
{
    assert_true(m->live[i] && deadline <= m->t[i].deadline);
    model_unlink(m, i);
    model_place(m, i, deadline);
}

/* The order the wheel meets pending nodes in: by tick, top level first,
 * then in list order. */
static int meet_cmp(const void *a, const void *b)
{
    const struct meet *x = a, *y = b;
    if (x->tick != y->tick)
        return x->tick < y->tick ? -1 : 1;
    if (x->slot_id / 128 != y->slot_id / 128)
        return x->slot_id / 128 > y->slot_id / 128 ? -1 : 1;
    if (x->slot_id != y->slot_id) /* different slots, same level and tick: cannot be */
        return x->slot_id < y->slot_id ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* hwt__wheel_check, with each pending node's deadline the one it was filed
 * by (where it still waits) for the check's duration. */
static bool model_check(struct model *m, size_t used)
{
    if (m->n_pending == 0)
        return hwt__wheel_check(&m->wheel);
    for (size_t i = 0; i < used; i++)
        if (m->pending[i]) {
            int64_t moved = m->t[i].deadline;
            m->t[i].deadline = m->filed_deadline[i];
            m->filed_deadline[i] = moved;
        }
    bool ok = hwt__wheel_check(&m->wheel);
    for (size_t i = 0; i < used; i++)
        if (m->pending[i]) {
            int64_t filed_by = m->t[i].deadline;
            m->t[i].deadline = m->filed_deadline[i];
            m->filed_deadline[i] = filed_by;
        }
    return ok;
}

/* One pre-cascade pass; the pending nodes it pops are met (filed) in the
 * order it pops them. Only the next slot of each level can lose nodes:
 * those holding pending nodes are walked after the pass. */
static size_t model_precascade(struct model *m, size_t used, size_t budget)
{
    struct hwt__wheel *w = &m->wheel;
    size_t n = 0;
    for (size_t i = 0; m->n_pending > 0 && i < used; i++) {
        if (!m->pending[i] || m->slot_id[i] == 0)
            continue;
        uint32_t level = m->slot_id[i] / 128;
        uint64_t width = UINT64_C(1) << w->shift[level];
        if ((uint64_t)bucket_first(w, level, m->filed_tick[i]) ==
            (uint64_t)bucket_first(w, level, w->cur) + width)
            m->meets[n++] = (struct meet){0, m->slot_id[i], m->slot_pos[i], i};
    }
    size_t moved = hwt__wheel_precascade(w, budget);
    qsort(m->meets, n, sizeof m->meets[0], meet_cmp); /* by slot */
    size_t met = 0;
    for (size_t k = 0; k < n; k++) {
        if (k == 0 || m->meets[k].slot_id != m->meets[k - 1].slot_id)
            walk_slot(m, m->meets[k].slot_id);
        if (m->seen[m->meets[k].i] != m->stamp)
            m->meets[met++] = m->meets[k];
    }
    for (size_t k = 0; k < met; k++)
        filed(m, m->meets[k].i);
    m->n_meets = m->next_meet = 0;
    return moved;
}

/* Before an advance to `last`: the pending nodes above level 0 whose slot
 * starts by last + 1 are met at that start (enter_tick), in meet order. */
static void plan_meets(struct model *m, size_t used, int64_t last)
{
    m->n_meets = m->next_meet = 0;
    for (size_t i = 0; m->n_pending > 0 && i < used; i++) {
        if (!m->pending[i] || m->slot_id[i] == 0)
            continue;
        int64_t start = bucket_first(&m->wheel, m->slot_id[i] / 128, m->filed_tick[i]);
        assert_true(start > m->wheel.cur);
        if (start - 1 <= last)
            m->meets[m->n_meets++] = (struct meet){start, m->slot_id[i], m->slot_pos[i], i};
    }
    qsort(m->meets, m->n_meets, sizeof m->meets[0], meet_cmp);
}

/* The tick by which the wheel hands node i back or meets it: for a pending
 * node its old tick (refiled there) or its slot's cascade, earlier still. */
static int64_t met_at(const struct model *m, size_t i)
{
    return m->pending[i] ? m->filed_tick[i] : m->fire_tick[i];
}

static int64_t model_earliest(const struct model *m, size_t used)
{
    int64_t earliest = INT64_MAX;
    for (size_t i = 0; i < used; i++)
        if (m->live[i] && met_at(m, i) < earliest)
            earliest = met_at(m, i);
    return earliest;
}

/* Advances to `last`; checks what fired against the model. */
static void model_advance(struct model *m, size_t used, int64_t last)
{
    assert_true(hwt__wheel_next_event(&m->wheel) <= model_earliest(m, used));
    m->last_tick = -1;
    m->last_seq = 0;
    plan_meets(m, used, last);
    hwt__wheel_advance(&m->wheel, last, on_expire, m);
    assert_true(m->wheel.cur == last + 1);
    meet_until(m, last + 1); /* entering last + 1 cascades too */
    assert_true(m->next_meet == m->n_meets);
    m->n_meets = m->next_meet = 0;
    for (size_t i = 0; i < used; i++) {
        if (m->fired_at[i] != -1)
            assert_true(m->fired_at[i] == m->fire_tick[i]);
        else if (m->live[i])
            assert_true(m->fire_tick[i] > last);
    }
    assert_int_equal(m->errors, 0);
}

/* A deadline for node i moved as a reschedule would: later (to a live
 * node's tick now and then, to meet it there) or earlier. */
static int64_t moved_deadline(const struct model *m, size_t i, size_t used, bool later_one)
{
    int64_t deadline = m->t[i].deadline, d;
    if (later_one) {
        size_t j = (size_t)(rnd() % used);
        d = rnd() % 2 && m->live[j] ? m->fire_tick[j] : moved_later(deadline);
        return d > deadline ? d : deadline;
    }
    d = rnd() % 2 ? random_deadline(m->wheel.cur, m->wheel.mask0 + 1)
                  : deadline - (int64_t)(rnd() % 1000);
    return d > deadline ? deadline : d < 0 ? 0 : d;
}

/* Random operations from tick `start` on; the callback refiles
 * `refile_percent` of the nodes due; `move_percent` of the rounds move a
 * linked node's deadline, 3 in 4 later (in place), else earlier. */
static void run_model_moving(uint32_t wheel_len, int rounds, int64_t start, int refile_percent,
                             int move_percent)
{
    struct model *m = model_new(wheel_len);
    m->refile_percent = refile_percent;
    hwt__wheel_advance(&m->wheel, start - 1, on_expire, m); /* empty: one jump */
    assert_true(m->wheel.cur == start);
    size_t used = 0;
    for (int r = 0; r < rounds; r++) {
        int op = (int)(rnd() % 10);
        if (move_percent > 0 && used > 0 && rnd() % 100 < (uint64_t)move_percent) {
            /* Of three, the live one the wheel meets first: far nodes
             * outnumber near ones, and a move matters where it is met. */
            size_t i = SIZE_MAX;
            for (int k = 0; k < 3; k++) {
                size_t j = (size_t)(rnd() % used);
                if (m->live[j] && (i == SIZE_MAX || met_at(m, j) < met_at(m, i)))
                    i = j;
            }
            if (i != SIZE_MAX) {
                if (rnd() % 4 != 0)
                    model_move_later(m, i, moved_deadline(m, i, used, true));
                else
                    model_move_earlier(m, i, moved_deadline(m, i, used, false));
            }
        } else if (op < 5 && used < N_TIMEOUTS) {
            size_t i = used++;
            model_place(m, i, random_deadline(m->wheel.cur, wheel_len));
        } else if (op == 7 && used > 0 && rnd() % 2) {
            model_precascade(m, used, (size_t)(rnd() % 64));
        } else if (op < 7 && used > 0) {
            size_t i = (size_t)(rnd() % used);
            if (m->live[i])
                model_unlink(m, i);
        } else {
            int64_t earliest = model_earliest(m, used);
            int64_t next = hwt__wheel_next_event(&m->wheel);
            int64_t step;
            switch (rnd() % 5) {
            case 0: step = 0; break;
            case 1: step = (int64_t)(rnd() % 3); break;
            case 2: step = (int64_t)(rnd() % 70000); break;
            case 3: /* as the worker: to the next event, then a pre-cascade pass */
                step = next != INT64_MAX && next - m->wheel.cur < 1000000 ? next - m->wheel.cur : 1;
                break;
            default:
                step = earliest != INT64_MAX && earliest > m->wheel.cur
                           ? earliest - m->wheel.cur + (int64_t)(rnd() % 2) - 1
                           : 1;
            }
            /* Moves later may carry cur to the end of time: stop short of it. */
            int64_t last = later(m->wheel.cur, (uint64_t)step);
            if (last > INT64_MAX - 2)
                last = m->wheel.cur - 1 > INT64_MAX - 2 ? m->wheel.cur - 1 : INT64_MAX - 2;
            model_advance(m, used, last);
            if (rnd() % 2)
                model_precascade(m, used, (size_t)(rnd() % 8));
        }
        assert_int_equal(m->errors, 0);
        assert_true(model_check(m, used));
    }
    model_free(m);
}

static void run_model_refiling(uint32_t wheel_len, int rounds, int64_t start, int refile_percent)
{
    run_model_moving(wheel_len, rounds, start, refile_percent, 0);
}

static void run_model_from(uint32_t wheel_len, int rounds, int64_t start)
{
    run_model_refiling(wheel_len, rounds, start, 0);
}

static void run_model(uint32_t wheel_len, int rounds)
{
    run_model_from(wheel_len, rounds, 0);
}

static void test_wheel_1(void **state)
{
    (void)state;
    run_model(1, 20000);
}
static void test_wheel_2(void **state)
{
    (void)state;
    run_model(2, 20000);
}
static void test_wheel_4(void **state)
{
    (void)state;
    run_model(4, 20000);
}
static void test_wheel_8(void **state)
{
    (void)state;
    run_model(8, 20000);
}
static void test_wheel_64(void **state)
{
    (void)state;
    run_model(64, 20000);
}
static void test_wheel_512(void **state)
{
    (void)state;
    run_model(512, 20000);
}

/* Near the end of time: top-level digits near 63, deadlines saturating at
 * INT64_MAX, no next range above the top level. */
static void test_wheel_huge_cur(void **state)
{
    (void)state;
    const int64_t starts[] = {INT64_MAX - ((int64_t)1 << 40), (int64_t)1 << 62,
                              INT64_MAX / 64 * 63};
    const uint32_t lens[] = {1, 4, 512};
    for (size_t s = 0; s < sizeof starts / sizeof *starts; s++)
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
            run_model_from(lens[l], 6000, starts[s]);
}

/* The lowest bit of a level's digit, as wheel.c computes it. */
static int64_t width_of(const struct hwt__wheel *w, uint32_t level)
{
    return (int64_t)1 << (level == 0 ? 0 : w->bits0 + HWT_LEVEL_BITS * (level - 1));
}

/* Timeouts due at a few ticks around the start B of a level-`level` slot,
 * placed all along (so early ones wait high, later ones lower, newcomers
 * behind older ones still up), pre-cascades with tiny budgets, advances by
 * events, by small steps and by late jumps (over pre-cascade windows). Each
 * tick's timeouts must run in placement order; returns the most levels one
 * tick's live timeouts were spread over at once. */
static int run_focus(uint32_t wheel_len, uint32_t level, bool moves)
{
    struct model *m = model_new(wheel_len);
    struct hwt__wheel *w = &m->wheel;
    assert_true(level <= w->upper_levels);
    int64_t width = width_of(w, level), lower = width_of(w, level - 1);
    int64_t b = 3 * width;
    const int64_t targets[] = {b - 1, b, b + 1, b + lower - 1, b + lower, b + width - 1, b + width};
    const size_t n_targets = sizeof targets / sizeof *targets;
    size_t used = 0;
    int spread = 0;
    int64_t unit = width / 512 + 1; /* some 2000 steps in all */
    while (w->cur <= b + width) {
        int op = (int)(rnd() % 64);
        if (op < 12) {
            if (used < N_TIMEOUTS) {
                model_place(m, used, targets[rnd() % n_targets]);
                used++;
            }
        } else if (op < 28) {
            if (rnd() % 2) /* as if passes ran every tick: small moves, levels part-way */
                w->precascade_done = w->cur - 1;
            model_precascade(m, used, 1 + (size_t)(rnd() % 3));
        } else if (op < 30 && used > 0) {
            size_t i = (size_t)(rnd() % used);
            if (m->live[i])
                model_unlink(m, i);
        } else if (moves && op < 34 && used > 0) {
            /* A reschedule to another target: later in place (out of its
             * slot, or within it), or earlier (unlinked, placed again). */
            size_t i = (size_t)(rnd() % used);
            int64_t to = targets[rnd() % n_targets];
            if (m->live[i] && rnd() % 4 != 0 && to >= m->t[i].deadline)
                model_move_later(m, i, to);
            else if (m->live[i] && to < m->t[i].deadline)
                model_move_earlier(m, i, to);
        } else if (rnd() % 512 < (uint64_t)(4 * width / unit)) { /* tiny wheels: rarer */
            int64_t next = hwt__wheel_next_event(w);
            int64_t last;
            if (op < 52) { /* as the worker (woken by newcomers too) */
                int64_t cap = w->cur + unit * (int64_t)(rnd() % 4);
                last = next < cap ? next : cap;
            } else if (op < 63) { /* a small step, maybe short of the next event */
                last = w->cur + (int64_t)(rnd() % (uint64_t)unit);
            } else { /* late: over pre-cascade passes, maybe over the slot start */
                last = w->cur + (int64_t)(rnd() % (uint64_t)(width / 4 + 1));
            }
            if (last > b + width)
                last = b + width;
            model_advance(m, used, last);
        }
        assert_true(model_check(m, used));
        /* How many levels does each target's timeouts sit at now? */
        for (size_t k = 0; k < n_targets; k++) {
            unsigned levels = 0;
            for (size_t i = 0; i < used; i++)
                if (m->live[i] && m->fire_tick[i] == targets[k])
                    levels |= 1u << hwt__wheel_level_of(w, &m->t[i]);
            int n = __builtin_popcount(levels);
            if (n > spread)
                spread = n;
        }
    }
    for (size_t i = 0; i < used; i++)
        assert_true(!m->live[i] || m->fired_at[i] != -1 || m->fire_tick[i] > b + width);
    model_free(m);
    return spread;
}

/* The widest spread of one tick's timeouts over levels seen in `reps` focus
 * runs per wheel length, around slot starts of `level`. */
static int best_focus_spread(const uint32_t *lens, size_t n_lens, int reps, uint32_t level,
                             bool moves)
{
    int best = 0;
    for (size_t l = 0; l < n_lens; l++)
        for (int rep = 0; rep < reps; rep++) {
            int spread = run_focus(lens[l], level, moves);
            best = spread > best ? spread : best;
        }
    return best;
}

static void test_same_tick_focus_level1(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 2, 4, 8, 512};
    assert_true(best_focus_spread(lens, sizeof lens / sizeof *lens, 4, 1, false) >= 2);
}

static void test_same_tick_focus_level2(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 2, 4, 8, 512};
    /* all levels at once: see the staircase */
    assert_true(best_focus_spread(lens, sizeof lens / sizeof *lens, 4, 2, false) >= 2);
}

static void test_same_tick_focus_level3(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 2, 4, 8};
    assert_true(best_focus_spread(lens, sizeof lens / sizeof *lens, 3, 3, false) >= 2);
}

/* The focus runs with deadlines moved while linked, to other targets: later
 * ones in place (so a tick's timeouts wait at several levels, and moved ones
 * in slots their new tick is not in), earlier ones unlinked and placed
 * again. Each tick's timeouts must run in the order defined under "Moves
 * later while linked". */
static void test_same_tick_focus_moves(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 2, 4, 8, 512};
    for (uint32_t level = 1; level <= 3; level++) {
        size_t n_lens = level < 3 ? 5 : 4; /* level 3 of 512 buckets: too long a run */
        assert_true(best_focus_spread(lens, n_lens, 2, level, true) >= 2);
    }
}

/* Ticks before a level's slot start at which its pre-cascade opens (as in
 * wheel.c: a whole block at level 1, the last quarter of the slot above). */
static int64_t window_of(const struct hwt__wheel *w, uint32_t level)
{
    return level == 1 ? width_of(w, 1) : width_of(w, level) / 4;
}

/* A staircase: timeouts due at tick b (a level-`top` slot start) placed
 * early wait at level top; at each level's pre-cascade window, down to
 * level `bottom`, one pass moves the oldest one level down while newcomers
 * queue at level top, so b's timeouts end up at every level top..bottom-1
 * at once. Then cur crosses b, either pass by pass as the worker does
 * (`late` false) or in one jump with every pre-cascade part-way (`late`
 * true): they must run in placement order. (Level 1's window on a wheel of
 * under 16 buckets has too few passes to leave anything behind: bottom 2.) */
static void staircase(uint32_t wheel_len, uint32_t top, bool late)
{
    uint32_t bottom = wheel_len >= 16 ? 1 : 2;
    struct model *m = model_new(wheel_len);
    struct hwt__wheel *w = &m->wheel;
    assert_true(top <= w->upper_levels);
    int64_t b = 3 * width_of(w, top);
    size_t used = 0;
    for (int k = 0; k < 3; k++, used++)
        model_place(m, used, b);
    model_place(m, used++, b + 1); /* a neighbour in the same slots */
    for (uint32_t level = top; level >= bottom; level--) {
        int64_t open = b - window_of(w, level);
        if (open > w->cur)
            model_advance(m, used, open - 1);
        /* One pass, budget 1, as if passes ran every tick (order must hold
         * whatever the pacing): each open level moves its oldest one down. */
        w->precascade_done = w->cur - 1;
        size_t before = hwt__wheel_precascade(w, 1);
        assert_true(before >= 1);
        assert_true(hwt__wheel_check(w));
        model_place(m, used++, b); /* a newcomer, behind those still up */
        model_place(m, used++, b + 1);
        assert_true(hwt__wheel_check(w));
    }
    unsigned levels = 0;
    for (size_t i = 0; i < used; i++)
        if (m->fire_tick[i] == b)
            levels |= 1u << hwt__wheel_level_of(w, &m->t[i]);
    /* b's timeouts at every level bottom-1 .. top */
    assert_int_equal(levels, ((2u << top) - 1) & ~((1u << (bottom - 1)) - 1));
    if (late) {
        model_advance(m, used, b + 1);
    } else {
        while (w->cur <= b + 1) {
            int64_t next = hwt__wheel_next_event(w);
            model_advance(m, used, next < b + 1 ? next : b + 1);
            hwt__wheel_precascade(w, 1);
            assert_true(hwt__wheel_check(w));
        }
    }
    assert_true(hwt__wheel_check(w));
    for (size_t i = 0; i < used; i++)
        assert_true(m->fired_at[i] == m->fire_tick[i]);
    assert_int_equal(w->count, 0);
    model_free(m);
}

static void test_same_tick_staircase(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 2, 4, 8, 16, 64, 512};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        for (uint32_t top = lens[l] >= 16 ? 1 : 2; top <= 3; top++) {
            staircase(lens[l], top, false);
            staircase(lens[l], top, true);
        }
}

/* Timeouts still in the level-k slot starting at `tick` (0 if none starts). */
static size_t left_at_start(const struct hwt__wheel *w, uint32_t k, int64_t tick)
{
    uint32_t shift = w->bits0 + HWT_LEVEL_BITS * (k - 1);
    if (((uint64_t)tick & (((uint64_t)1 << shift) - 1)) != 0)
        return 0;
    int parity = (int)(((uint64_t)tick >> (shift + HWT_LEVEL_BITS)) & 1);
    return w->upper_count[k - 1][parity][((uint64_t)tick >> shift) & (HWT_LEVEL_SLOTS - 1)];
}

/* Big level-2 and level-3 slots, driven as the worker drives the wheel:
 * the first wake-up is when a pre-cascade window opens, every slot is empty
 * when cur reaches its start (all moved ahead of time), and no pass moves
 * more than a few budgets. */
static void test_precascade_spreads_every_level(void **state)
{
    (void)state;
    const size_t budget = 2; /* below the rate needed: the pacing must add */
    struct model *m = model_new(64);
    struct hwt__wheel *w = &m->wheel;
    int64_t w2 = width_of(w, 2), w3 = width_of(w, 3);
    size_t used = 0;
    /* Slot 2 (slot 1 is the next range of the level below). */
    for (; used < 3000; used++)
        model_place(m, used, 2 * w2 + (int64_t)(rnd() % (uint64_t)w2));
    for (; used < 4000; used++)
        model_place(m, used, 2 * w3 + (int64_t)(rnd() % (uint64_t)w3));
    assert_true(hwt__wheel_level_of(w, &m->t[0]) == 2 && hwt__wheel_level_of(w, &m->t[3999]) == 3);
    assert_int_equal(hwt__wheel_next_event(w), 2 * w2 - window_of(w, 2));
    /* Woken for something else before the window opens: nothing moves yet
     * (a timer holding far timeouts stays idle). */
    model_advance(m, used, w2 + 5);
    assert_int_equal(hwt__wheel_precascade(w, budget), 0);
    size_t max_moved = 0;
    for (;;) {
        int64_t next = hwt__wheel_next_event(w);
        if (next == INT64_MAX)
            break;
        for (uint32_t k = 1; k <= 3; k++)
            assert_int_equal(left_at_start(w, k, next), 0);
        model_advance(m, used, next);
        size_t moved = hwt__wheel_precascade(w, budget);
        max_moved = moved > max_moved ? moved : max_moved;
        if (rnd() % 64 == 0)
            assert_true(hwt__wheel_check(w));
    }
    for (size_t i = 0; i < used; i++)
        assert_true(m->fired_at[i] == m->fire_tick[i]);
    assert_true(max_moved <= 6 * budget); /* unspread: 1000 at once */
    model_free(m);
}

/* Deadlines near the end of time, from cur 0, driven as the worker drives
 * the wheel: each runs at its tick, in order, after a few wake-ups per level
 * (the jumps are O(1)); INT64_MAX ("never") stays linked. */
static void test_huge_deadlines(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 2, 4, 512, 4096};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
        struct model *m = model_new(lens[l]);
        struct hwt__wheel *w = &m->wheel;
        const int64_t deadlines[] = {INT64_MAX,        INT64_MAX - 1,          (int64_t)1 << 62,
                                     INT64_MAX - 1,    ((int64_t)1 << 62) + 1, INT64_MAX - 2,
                                     (int64_t)1 << 62, INT64_MAX / 64 * 63,    INT64_MAX};
        size_t used = sizeof deadlines / sizeof *deadlines;
        for (size_t i = 0; i < used; i++)
            model_place(m, i, deadlines[i]);
        assert_true(hwt__wheel_check(w));
        int wakeups = 0;
        for (;;) {
            int64_t next = hwt__wheel_next_event(w);
            if (next > INT64_MAX - 1)
                break;
            model_advance(m, used, next);
            hwt__wheel_precascade(w, 512);
            assert_true(hwt__wheel_check(w));
            wakeups++;
            assert_true(wakeups < 60); /* a few per level */
        }
        for (size_t i = 0; i < used; i++)
            assert_true(deadlines[i] == INT64_MAX ? m->live[i] && m->fired_at[i] == -1
                                                  : m->fired_at[i] == deadlines[i]);
        assert_int_equal(w->count, 2);
        model_free(m);
    }
}

static enum hwt__wheel_verdict count_expire(void *ctx, struct hwt__wheel_node *node)
{
    (void)node;
    (*(int *)ctx)++;
    return HWT_WHEEL_TAKEN;
}

/* A far node is moved down O(levels) times, not once per revolution. */
static void test_far_timeout_not_rescanned(void **state)
{
    (void)state;
    struct hwt__wheel w;
    struct hwt__wheel_node *far = arena_zalloc(sizeof *far);
    far->deadline = 60000; /* ~117 revolutions of 512 ticks */
    assert_true(hwt__wheel_init(&w, 512, 1));
    hwt__wheel_place(&w, far);
    int wakeups = 0, fired = 0;
    while (fired == 0 && wakeups < 1000) {
        int64_t next = hwt__wheel_next_event(&w);
        assert_true(next <= 60000);
        wakeups++;
        hwt__wheel_advance(&w, next, count_expire, &fired);
        hwt__wheel_precascade(&w, 512); /* as the worker does each pass */
        assert_true(hwt__wheel_check(&w));
    }
    assert_int_equal(fired, 1);
    assert_int_equal(w.cur, 60001);
    /* one wake per level it falls through (its pre-cascade) plus its own
     * tick; far fewer than 117 */
    assert_true(wakeups <= 4);
    hwt__wheel_free(&w);
    hwt__arena_unmap(far, sizeof *far);
}

/* Nodes due at the same tick keep their placement order across cascades. */
static void test_same_tick_order_across_levels(void **state)
{
    (void)state;
    struct model *m = model_new(8);
    /* A: placed early (lands high); B: placed later (lands lower); same tick. */
    for (size_t i = 0; i < 10; i++) {
        model_place(m, i, 5000);
        m->last_tick = -1;
        hwt__wheel_advance(&m->wheel, m->wheel.cur + 400, on_expire, m);
    }
    m->last_tick = -1;
    m->last_seq = 0;
    hwt__wheel_advance(&m->wheel, 6000, on_expire, m);
    assert_int_equal(m->errors, 0);
    for (size_t i = 0; i < 10; i++)
        assert_true(m->fired_at[i] == 5000);
    model_free(m);
}

/* Records which of two nodes the wheel hands back, in order. */
struct two_seen {
    const struct hwt__wheel_node *first;
    int order[2];
    int n;
};

static enum hwt__wheel_verdict note_order(void *ctx, struct hwt__wheel_node *node)
{
    struct two_seen *s = ctx;
    if (s->n < 2)
        s->order[s->n] = (int)(node - s->first);
    s->n++;
    return HWT_WHEEL_TAKEN;
}

/* On a wheel of 64 ticks: C is placed (due c_due, at level c_level), then A
 * (due a_due, at a_level); A's deadline is then moved to C's while it stays
 * linked, as a reschedule later does, and its old slot's cascade at
 * a_slot_start files it. A must run after C, at C's tick, with and without
 * pre-cascades. */
static void check_moved_later_runs_behind(int64_t c_due, int c_level, int64_t a_due, int a_level,
                                          int64_t a_slot_start)
{
    enum { C, A };
    for (int precascade = 0; precascade < 2; precascade++) {
        struct hwt__wheel w;
        struct hwt__wheel_node *nodes = arena_zalloc(2 * sizeof *nodes);
        assert_true(hwt__wheel_init(&w, 64, 1));
        nodes[C].deadline = c_due;
        hwt__wheel_place(&w, &nodes[C]);
        nodes[A].deadline = a_due;
        hwt__wheel_place(&w, &nodes[A]);
        assert_int_equal(hwt__wheel_level_of(&w, &nodes[C]), c_level);
        assert_int_equal(hwt__wheel_level_of(&w, &nodes[A]), a_level);
        nodes[A].deadline = c_due;
        struct two_seen seen = {.first = nodes};
        for (int passes = 0; seen.n < 2 && passes < 100000; passes++) {
            hwt__wheel_advance(&w, hwt__wheel_next_event(&w), note_order, &seen);
            if (precascade)
                hwt__wheel_precascade(&w, 512);
            if (w.cur > a_slot_start) /* A filed by its new deadline: the links agree again */
                assert_true(hwt__wheel_check(&w));
        }
        assert_int_equal(seen.n, 2);
        assert_int_equal(w.cur, c_due + 1);
        assert_int_equal(seen.order[0], C);
        assert_int_equal(seen.order[1], A);
        hwt__wheel_free(&w);
        hwt__arena_unmap(nodes, 2 * sizeof *nodes);
    }
}

/* A node whose deadline is moved later while it waits at an upper level is
 * filed by its new deadline when its old slot cascades, and must queue
 * behind an older node due at that tick, as it would if it had been filed
 * again from level 0 (I2): C (due 10000) waits at level 2, A (due 5000) at
 * level 1, whose slot cascades at 4992. */
static void test_moved_later_at_an_upper_level_queues_behind_older(void **state)
{
    (void)state;
    check_moved_later_runs_behind(10000, 2, 5000, 1, 4992);
}

/* The same, when the new tick lies in the slot after the old one at the
 * node's level (the next range of the level below, so place_below's lowest
 * level for it is below the cascading one): the older node due at that tick
 * still waits at that level, and the moved one must queue behind it, not go
 * below it. At level L (1 and 2) of width W: C is due at 3W + 4 (digit 3), A
 * at 2W + 1 (digit 2), whose slot cascades at 2W (at level 1, C's slot's
 * pre-cascade is open from 2W on). */
static void test_moved_later_into_the_next_slot_queues_behind_older(void **state)
{
    (void)state;
    struct hwt__wheel w;
    assert_true(hwt__wheel_init(&w, 64, 1));
    for (int level = 1; level <= 2; level++) {
        int64_t width = width_of(&w, (uint32_t)level);
        check_moved_later_runs_behind(3 * width + 4, level, 2 * width + 1, level, 2 * width);
    }
    hwt__wheel_free(&w);
}

/* Unlinking the first, a middle, the last and the only node of a bucket, at
 * level 0 and above: the lists stay whole, a bucket left empty is empty
 * (occupancy, next event), and a node knows it is out. */
static void test_unlink_any_position(void **state)
{
    (void)state;
    const int64_t dues[] = {100, 5000}; /* level 0, level 1 of a 512-bucket wheel */
    for (size_t d = 0; d < 2; d++) {
        struct model *m = model_new(512);
        struct hwt__wheel *w = &m->wheel;
        for (size_t i = 0; i < 5; i++)
            model_place(m, i, dues[d]);
        model_place(m, 5, dues[d] + 1000); /* alone in another bucket */
        assert_int_equal(hwt__wheel_level_of(w, &m->t[0]), (int)d);
        const size_t order[] = {0, 2, 4, 5}; /* first, middle, last, alone */
        for (size_t k = 0; k < 4; k++) {
            size_t i = order[k];
            hwt__wheel_unlink(w, &m->t[i]);
            m->live[i] = false;
            assert_false(hwt__wheel_linked(&m->t[i]));
            assert_int_equal(hwt__wheel_level_of(w, &m->t[i]), -1);
            assert_true(hwt__wheel_check(w));
        }
        assert_int_equal(w->count, 2);
        model_advance(m, 6, dues[d] + 2000);
        assert_true(m->fired_at[1] == dues[d] && m->fired_at[3] == dues[d]);
        assert_int_equal(hwt__wheel_next_event(w), INT64_MAX);
        /* The other two, alone then last: the wheel is empty. */
        model_place(m, 1, w->cur + 3000);
        model_place(m, 3, w->cur + 3000);
        hwt__wheel_unlink(w, &m->t[1]);
        hwt__wheel_unlink(w, &m->t[3]);
        assert_true(hwt__wheel_check(w));
        assert_int_equal(w->count, 0);
        assert_int_equal(hwt__wheel_next_event(w), INT64_MAX);
        model_free(m);
    }
}

/* Unlinks from the middle of an upper slot's list leave its count high (the
 * slot is not known): its pre-cascade moves more per pass, but the slot is
 * still empty when cur reaches its start and everything left runs on time. */
static void test_unlinks_from_a_slot_keep_it_paced(void **state)
{
    (void)state;
    struct model *m = model_new(64);
    struct hwt__wheel *w = &m->wheel;
    int64_t w2 = width_of(w, 2);
    size_t used = 0;
    for (; used < 2000; used++)
        model_place(m, used, 2 * w2 + (int64_t)(rnd() % (uint64_t)w2));
    assert_int_equal(hwt__wheel_level_of(w, &m->t[0]), 2);
    for (size_t i = 1; i + 1 < used; i++)
        if (i % 10 != 0) {
            hwt__wheel_unlink(w, &m->t[i]);
            m->live[i] = false;
        }
    assert_true(hwt__wheel_check(w));
    for (;;) {
        int64_t next = hwt__wheel_next_event(w);
        if (next == INT64_MAX)
            break;
        if (next == 2 * w2)
            assert_int_equal(left_at_start(w, 2, next), 0);
        model_advance(m, used, next);
        hwt__wheel_precascade(w, 2);
        assert_true(hwt__wheel_check(w));
    }
    for (size_t i = 0; i < used; i++) {
        bool kept = i % 10 == 0 || i + 1 == used;
        assert_true(kept ? m->fired_at[i] == m->fire_tick[i] : m->fired_at[i] == -1);
    }
    assert_int_equal(w->count, 0);
    model_free(m);
}

/* The advance callback refiles nodes (a reschedule moved their deadline):
 * one moved within its tick comes back in the same tick, after the nodes
 * linked before it; one moved to the next tick runs there behind what was
 * linked for it before; one moved far runs at its new tick, from whatever
 * level it lands at. */
struct refile_log {
    struct hwt__wheel *wheel;
    struct hwt__wheel_node *nodes;
    int64_t new_deadline[5]; /* -1: take it; otherwise refile it once with this */
    size_t order[16];
    int64_t tick[16];
    size_t n;
};

static enum hwt__wheel_verdict refile_some(void *ctx, struct hwt__wheel_node *node)
{
    struct refile_log *log = ctx;
    size_t i = (size_t)(node - log->nodes);
    if (log->n < 16) {
        log->order[log->n] = i;
        log->tick[log->n] = log->wheel->cur;
    }
    log->n++;
    assert_false(hwt__wheel_linked(node));
    if (log->new_deadline[i] < 0)
        return HWT_WHEEL_TAKEN;
    node->deadline = log->new_deadline[i];
    log->new_deadline[i] = -1;
    return HWT_WHEEL_REFILE;
}

static void test_refile_from_advance(void **state)
{
    (void)state;
    const int64_t tick = 1000;
    struct hwt__wheel w;
    struct hwt__wheel_node *nodes = arena_zalloc(5 * sizeof *nodes);
    assert_true(hwt__wheel_init(&w, 8, tick));
    /* 1: within its tick; 2: to the next tick, behind 4; 3: far, to an upper level. */
    struct refile_log log = {.wheel = &w,
                             .nodes = nodes,
                             .new_deadline = {-1, 10 * tick + 500, 11 * tick, 100000 * tick, -1}};
    for (size_t i = 0; i < 4; i++) {
        nodes[i].deadline = 10 * tick + (int64_t)i;
        hwt__wheel_place(&w, &nodes[i]);
    }
    nodes[4].deadline = 11 * tick;
    hwt__wheel_place(&w, &nodes[4]);
    hwt__wheel_advance(&w, 11, refile_some, &log);
    assert_true(hwt__wheel_check(&w));
    const size_t order[] = {0, 1, 2, 3, 1, 4, 2};
    const int64_t ticks[] = {10, 10, 10, 10, 10, 11, 11};
    assert_int_equal(log.n, 7);
    for (size_t k = 0; k < 7; k++) {
        assert_int_equal(log.order[k], order[k]);
        assert_int_equal(log.tick[k], ticks[k]);
    }
    assert_int_equal(w.count, 1);
    assert_true(hwt__wheel_linked(&nodes[3]) && !hwt__wheel_linked(&nodes[1]));
    int wakeups = 0;
    while (log.n == 7 && wakeups++ < 100) {
        hwt__wheel_advance(&w, hwt__wheel_next_event(&w), refile_some, &log);
        hwt__wheel_precascade(&w, 512);
        assert_true(hwt__wheel_check(&w));
    }
    assert_int_equal(log.n, 8);
    assert_int_equal(log.order[7], 3);
    assert_int_equal(log.tick[7], 100000);
    assert_int_equal(w.count, 0);
    hwt__wheel_free(&w);
    hwt__arena_unmap(nodes, 5 * sizeof *nodes);
}

/* The random model with a callback that refiles a share of the nodes due
 * (moved within their tick, a little or far later): every one runs at its
 * last deadline's tick, in order, and the invariants hold throughout. */
static void test_refile_model(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 8, 512};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        run_model_refiling(lens[l], 20000, 0, 30);
    run_model_refiling(4, 6000, INT64_MAX - ((int64_t)1 << 40), 30);
}

/* The random model with deadlines moved while linked (and a callback that
 * refiles a few of the nodes due): each node runs at its last deadline's
 * tick, never before, and within a tick in the order defined under "Moves
 * later while linked". */
static void test_move_model(void **state)
{
    (void)state;
    const uint32_t lens[] = {1, 8, 64};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        run_model_moving(lens[l], 15000, 0, 10, 15);
    run_model_moving(4, 4000, INT64_MAX - ((int64_t)1 << 40), 10, 15);
}

int main(void)
{
    hwtt_watchdog(150);
    const char *seed = getenv("HWT_WHEEL_SEED");
    if (seed != NULL && strtoull(seed, NULL, 10) != 0) {
        rng_state = strtoull(seed, NULL, 10) * UINT64_C(0x9E3779B97F4A7C15);
        print_message("HWT_WHEEL_SEED=%s\n", seed);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wheel_1),
        cmocka_unit_test(test_wheel_2),
        cmocka_unit_test(test_wheel_4),
        cmocka_unit_test(test_wheel_8),
        cmocka_unit_test(test_wheel_64),
        cmocka_unit_test(test_wheel_512),
        cmocka_unit_test(test_wheel_huge_cur),
        cmocka_unit_test(test_same_tick_focus_level1),
        cmocka_unit_test(test_same_tick_focus_level2),
        cmocka_unit_test(test_same_tick_focus_level3),
        cmocka_unit_test(test_same_tick_focus_moves),
        cmocka_unit_test(test_same_tick_staircase),
        cmocka_unit_test(test_precascade_spreads_every_level),
        cmocka_unit_test(test_huge_deadlines),
        cmocka_unit_test(test_far_timeout_not_rescanned),
        cmocka_unit_test(test_same_tick_order_across_levels),
        cmocka_unit_test(test_moved_later_at_an_upper_level_queues_behind_older),
        cmocka_unit_test(test_moved_later_into_the_next_slot_queues_behind_older),
        cmocka_unit_test(test_unlink_any_position),
        cmocka_unit_test(test_unlinks_from_a_slot_keep_it_paced),
        cmocka_unit_test(test_refile_from_advance),
        cmocka_unit_test(test_refile_model),
        cmocka_unit_test(test_move_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

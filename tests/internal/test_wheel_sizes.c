/*
 * test_wheel_sizes.c - the wheel (src/wheel.c) against a reference model,
 * at the sizes test_wheel.c leaves out.
 *
 * test_wheel.c files deadlines in ticks of 1 ns on wheels of up to 512
 * buckets. A timer's tick is any length from 1 ns to hours and its wheel up
 * to 2^30 buckets, so here: ticks of 1, 3, 1000, 1 000 003 and 2^40 ns
 * (a deadline's tick is deadline / tick, and the end of time INT64_MAX /
 * tick), wheels of 1 to 4096 buckets started at tick 0, in the middle of
 * time and near its end, and wheels of 2^16, 2^20 and 2^30 buckets.
 * Deadlines are drawn near the first ticks of the slots of every level,
 * in the past, at the end of time, and anywhere; advances go a tick at a
 * time, to the next event as the worker does (sometimes far past it, as
 * after a long sleep), or jump.
 *
 * Half of the runs also move deadlines later while their nodes are linked,
 * as hwt_reschedule does (wheel.c, "Refiling"): the wheel may hand such a
 * node back by its old deadline, and the callback refiles it; it must run
 * at its new deadline's tick, never before. The callback also refiles a
 * share of the nodes it is handed with a later deadline, as the worker does
 * for a timeout moved later. Every other node must run at exactly max(its
 * deadline's tick, the tick current when it was placed), in tick order and,
 * within a tick, in placement order; next_event must never pass a node
 * that is due.
 *
 * HWT_WHEEL_SEED=N (N != 0) runs the same tests on another random sequence:
 *   for s in $(seq 1 50); do HWT_WHEEL_SEED=$s build/tests/itest_wheel_sizes || break; done
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wheel.h"

#define N_TIMEOUTS 2000
#define REFILE_PERCENT 25

struct model {
    struct hwt__wheel_node t[N_TIMEOUTS];
    int64_t fire_tick[N_TIMEOUTS]; /* expected */
    int64_t fired_at[N_TIMEOUTS];  /* observed, -1 if not */
    uint64_t seq[N_TIMEOUTS];      /* placement order */
    bool live[N_TIMEOUTS];
    bool moved_linked[N_TIMEOUTS]; /* its order within a tick is not checked */
    size_t used;
    uint64_t next_seq;
    int64_t tick_ns;
    struct hwt__wheel wheel;
    int64_t last_tick; /* order of the current advance */
    uint64_t last_seq;
    int errors;
    char first_error[256];
};

static uint64_t rng_state = 0x12345678abcdefULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A random number below 2^(a random 0 .. max_bits - 1): small ones as
 * often as huge ones. */
static uint64_t rnd_any_scale(unsigned max_bits)
{
    return rnd() % (UINT64_C(1) << (rnd() % max_bits));
}

static int64_t sat_add(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b)
        return INT64_MAX;
    if (b < 0 && a < INT64_MIN - b)
        return INT64_MIN;
    return a + b;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    if (a != 0 && b > INT64_MAX / a)
        return INT64_MAX;
    return a * b;
}

/* Counts an error; keeps the first one's description for the report. */
static void model_fail(struct model *m, const char *what, long long a, long long b)
{
    if (m->errors++ == 0)
        snprintf(m->first_error, sizeof m->first_error, "%s (%lld, %lld) at cur %lld", what, a, b,
                 (long long)m->wheel.cur);
}

/* The tick at which a node placed now with this deadline must run. */
static int64_t fire_tick_of(const struct model *m, int64_t deadline)
{
    int64_t tick = deadline / m->tick_ns;
    return tick < m->wheel.cur ? m->wheel.cur : tick;
}

/* As the worker: a node handed back before its deadline's tick goes back
 * in; otherwise it runs, or (a share of the time) its deadline is moved
 * later and it is refiled, as for a timeout moved later. */
static enum hwt__wheel_verdict on_due(void *ctx, struct hwt__wheel_node *node)
{
    struct model *m = ctx;
    size_t i = (size_t)(node - m->t);
    int64_t tick = m->wheel.cur;
    if (node->deadline >= sat_mul(tick + 1, m->tick_ns)) {
        if (!m->moved_linked[i] || tick > m->fire_tick[i])
            model_fail(m, "node handed back before its tick", (long long)i,
                       node->deadline / m->tick_ns);
        return HWT_WHEEL_REFILE;
    }
    if (!m->live[i] || m->fired_at[i] != -1 || tick != m->fire_tick[i])
        model_fail(m, "node ran at another tick than expected", (long long)i, m->fire_tick[i]);
    if (!m->moved_linked[i]) {
        if (tick < m->last_tick || (tick == m->last_tick && m->seq[i] < m->last_seq))
            model_fail(m, "node ran out of order", (long long)i, (long long)m->seq[i]);
        m->last_tick = tick;
        m->last_seq = m->seq[i];
        if (node->deadline < INT64_MAX && rnd() % 100 < REFILE_PERCENT) {
            int64_t step = (int64_t)(rnd() % 3 == 0 ? rnd() % (uint64_t)m->tick_ns
                                                     : rnd() % (UINT64_C(1) << 20));
            int64_t later = sat_add(node->deadline, sat_mul(step, rnd() % 2 ? m->tick_ns : 1));
            if (later >= sat_mul(tick + 1, m->tick_ns)) {
                node->deadline = later;
                m->fire_tick[i] = later / m->tick_ns;
                m->seq[i] = m->next_seq++;
                return HWT_WHEEL_REFILE;
            }
        }
    }
    m->fired_at[i] = tick;
    m->live[i] = false;
    return HWT_WHEEL_TAKEN;
}

/* NULL when there is no memory for the wheel (2^30 buckets under a limit). */
static struct model *model_new(uint32_t length, int64_t tick_ns)
{
    struct model *m = hwt__arena_map(HWT_SITE_WHEEL, sizeof *m, false);
    assert_non_null(m);
    m->tick_ns = tick_ns;
    if (!hwt__wheel_init(&m->wheel, length, tick_ns)) {
        hwt__arena_unmap(m, sizeof *m);
        return NULL;
    }
    for (size_t i = 0; i < N_TIMEOUTS; i++)
        m->fired_at[i] = -1;
    return m;
}

static void model_free(struct model *m)
{
    hwt__wheel_free(&m->wheel);
    hwt__arena_unmap(m, sizeof *m);
}

/* A deadline in ns: in the past, at the end of time, a few ticks ahead,
 * anywhere ahead, or around the first tick of a slot of some level - where
 * a node's level and slot change. */
static int64_t random_deadline(const struct model *m)
{
    int64_t cur = m->wheel.cur;
    int64_t tick;
    switch (rnd() % 10) {
    case 0: {
        int64_t now_ns = sat_mul(cur, m->tick_ns);
        return now_ns > 0 ? (int64_t)(rnd() % (uint64_t)now_ns) : 0;
    }
    case 1:
        return INT64_MAX;
    case 2:
        tick = sat_add(cur, (int64_t)(rnd() % 4));
        break;
    case 3:
        tick = sat_add(cur, (int64_t)(rnd() % 100000));
        break;
    case 4:
        tick = sat_add(cur, (int64_t)((rnd() >> 1) % (uint64_t)(INT64_MAX / m->tick_ns)));
        break;
    default: {
        uint32_t level = (uint32_t)(rnd() % (m->wheel.upper_levels + 2));
        uint32_t shift = m->wheel.shift[level] >= 63 ? 62 : m->wheel.shift[level];
        uint64_t slot_start = (((uint64_t)cur >> shift) + rnd() % 4) << shift;
        if (slot_start > (uint64_t)INT64_MAX)
            slot_start = (uint64_t)INT64_MAX;
        tick = sat_add((int64_t)slot_start, (int64_t)(rnd() % 3) - 1);
        if (tick < 0)
            tick = 0;
    }
    }
    int64_t ns = sat_mul(tick, m->tick_ns);
    return ns == INT64_MAX ? INT64_MAX : sat_add(ns, (int64_t)(rnd() % (uint64_t)m->tick_ns));
}

static int64_t earliest_fire_tick(const struct model *m)
{
    int64_t earliest = INT64_MAX;
    for (size_t i = 0; i < m->used; i++)
        if (m->live[i] && m->fire_tick[i] < earliest)
            earliest = m->fire_tick[i];
    return earliest;
}

/* Advances to `last` and checks that next_event did not pass a due node and
 * that every node due by `last` ran. */
static void advance_checked(struct model *m, int64_t last)
{
    int64_t earliest = earliest_fire_tick(m);
    if (hwt__wheel_next_event(&m->wheel) > earliest)
        model_fail(m, "next_event after a node's tick", hwt__wheel_next_event(&m->wheel),
                   earliest);
    m->last_tick = -1;
    m->last_seq = 0;
    hwt__wheel_advance(&m->wheel, last, on_due, m);
    if (m->wheel.cur != last + 1)
        model_fail(m, "cur not past the advance", m->wheel.cur, last);
    for (size_t i = 0; i < m->used; i++)
        if (m->live[i] && m->fire_tick[i] <= last)
            model_fail(m, "node due but not run", (long long)i, m->fire_tick[i]);
}

/* The last tick of a random advance (>= cur - 1: "none"). */
static int64_t random_advance(const struct model *m)
{
    int64_t cur = m->wheel.cur;
    int64_t next = hwt__wheel_next_event(&m->wheel);
    int64_t last;
    switch (rnd() % 4) {
    case 0:
        last = sat_add(cur, (int64_t)(rnd() % 3));
        break;
    case 1: /* the worker: slept to the next event, sometimes long after */
        last = next == INT64_MAX ? sat_add(cur, 1000) : next;
        if (rnd() % 3 == 0)
            last = sat_add(last, (int64_t)rnd_any_scale(40));
        break;
    case 2: {
        int64_t earliest = earliest_fire_tick(m);
        last = earliest == INT64_MAX ? cur : earliest;
        break;
    }
    default:
        last = sat_add(cur, (int64_t)rnd_any_scale(48));
    }
    /* A huge level 0 is scanned bucket by bucket: keep its jumps testable. */
    if (m->wheel.mask0 >= (1u << 16) - 1 && last - cur > (INT64_C(1) << 27))
        last = sat_add(cur, (int64_t)(rnd() % (UINT64_C(1) << 27)));
    /* The worker never advances past now / tick - 1 (clock.c: now < INT64_MAX). */
    if (last >= INT64_MAX / m->tick_ns - 1)
        last = INT64_MAX / m->tick_ns - 2;
    return last < cur - 1 ? cur - 1 : last;
}

struct run_config {
    uint32_t length;
    int64_t tick_ns;
    int64_t start_tick;
    int rounds;
    bool move_linked; /* move deadlines later while linked */
    bool check_invariants; /* hwt__wheel_check after each step: O(wheel) */
};

/* Random steps on one wheel; returns the number of errors (the first one
 * printed). */
static int run_random(struct run_config c)
{
    struct model *m = model_new(c.length, c.tick_ns);
    if (m == NULL) {
        print_message("  (no memory for a wheel of %u buckets: skipped)\n", c.length);
        return 0;
    }
    if (c.start_tick > 0)
        hwt__wheel_advance(&m->wheel, c.start_tick - 1, on_due, m);
    int round;
    for (round = 0; round < c.rounds && m->errors == 0; round++) {
        int op = (int)(rnd() % 12);
        if (op < 5 && m->used < N_TIMEOUTS) {
            size_t i = m->used++;
            m->t[i].deadline = random_deadline(m);
            m->fire_tick[i] = fire_tick_of(m, m->t[i].deadline);
            m->seq[i] = m->next_seq++;
            m->live[i] = true;
            hwt__wheel_place(&m->wheel, &m->t[i]);
        } else if (op == 5 && m->used > 0) {
            size_t i = (size_t)(rnd() % m->used);
            if (m->live[i]) {
                hwt__wheel_unlink(&m->wheel, &m->t[i]);
                m->live[i] = false;
            }
        } else if (op == 6) {
            hwt__wheel_precascade(&m->wheel, (size_t)(rnd() % 4));
        } else if (op == 7 && c.move_linked && m->used > 0) {
            size_t i = (size_t)(rnd() % m->used);
            if (m->live[i] && m->t[i].deadline < INT64_MAX) {
                int64_t later =
                    sat_add(m->t[i].deadline, sat_mul((int64_t)rnd_any_scale(40), m->tick_ns));
                m->t[i].deadline = later;
                if (later / m->tick_ns > m->fire_tick[i])
                    m->fire_tick[i] = later / m->tick_ns;
                m->moved_linked[i] = true;
            }
        } else {
            int64_t last = random_advance(m);
            if (last >= m->wheel.cur)
                advance_checked(m, last);
            hwt__wheel_precascade(&m->wheel, (size_t)(rnd() % 4));
        }
        /* A deadline moved while linked leaves its node where the old one
         * put it, which the invariants would flag. */
        if (c.check_invariants && !c.move_linked && !hwt__wheel_check(&m->wheel))
            model_fail(m, "invariants broken at round", round, 0);
    }
    if (m->errors)
        print_message("  %u buckets, tick %lld ns, from tick %lld%s: round %d: %s\n", c.length,
                      (long long)c.tick_ns, (long long)c.start_tick,
                      c.move_linked ? ", moving linked" : "", round, m->first_error);
    int errors = m->errors;
    model_free(m);
    return errors;
}

static void test_tick_lengths(void **state)
{
    (void)state;
    static const uint32_t lengths[] = {1, 2, 4, 64, 128, 4096};
    static const int64_t ticks_ns[] = {1, 3, 1000, 1000003, INT64_C(1) << 40};
    int errors = 0;
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
        for (size_t ti = 0; ti < sizeof ticks_ns / sizeof *ticks_ns; ti++) {
            int64_t end_of_time = INT64_MAX / ticks_ns[ti];
            int64_t starts[] = {0, 12345, end_of_time / 2, end_of_time - 5000000,
                                end_of_time - 70};
            for (size_t si = 0; si < sizeof starts / sizeof *starts; si++)
                for (int move = 0; move < 2; move++) {
                    if (starts[si] < 0)
                        continue;
                    struct run_config c = {lengths[li], ticks_ns[ti], starts[si], 1500,
                                           move == 1, lengths[li] <= 128};
                    errors += run_random(c) != 0;
                }
        }
    assert_int_equal(errors, 0);
}

static void test_big_wheels(void **state)
{
    (void)state;
    static const uint32_t lengths[] = {1u << 16, 1u << 20};
    int errors = 0;
    for (size_t li = 0; li < sizeof lengths / sizeof *lengths; li++)
        for (int move = 0; move < 2; move++) {
            struct run_config c = {lengths[li], 1000, 0, 4000, move == 1, false};
            errors += run_random(c) != 0;
            c.start_tick = INT64_MAX / 1000 - 3000000;
            errors += run_random(c) != 0;
        }
    assert_int_equal(errors, 0);
}

static void test_largest_wheel(void **state)
{
    (void)state;
    struct run_config c = {1u << 30, 1, 0, 3000, false, false};
    int errors = run_random(c) != 0;
    c.start_tick = (INT64_C(1) << 30) - 1000; /* level 0's second range */
    errors += run_random(c) != 0;
    assert_int_equal(errors, 0);
}

int main(void)
{
    hwtt_watchdog(600);
    hwtt_apply_filters();
    const char *seed = getenv("HWT_WHEEL_SEED");
    if (seed != NULL && strtoull(seed, NULL, 10) != 0)
        rng_state = strtoull(seed, NULL, 10) * UINT64_C(0x9E3779B97F4A7C15);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tick_lengths),
        cmocka_unit_test(test_big_wheels),
        cmocka_unit_test(test_largest_wheel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

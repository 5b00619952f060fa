/*
 * test_wheel.c - the wheel (src/wheel.c) against a reference model.
 *
 * Random placements (past, near, far, "never"), unlinks, pre-cascades and
 * advances (one tick, small and huge jumps) on wheels of 1, 2, 8, 64 and 512
 * buckets. After
 * every operation hwt__wheel_check() must hold; every timeout must fire at
 * exactly max(due tick, tick current when it was placed), in tick order and,
 * within a tick, in placement order; next_event must never pass work.
 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "internal.h"
#include "wheel.h"

#define N_TIMEOUTS 4000

struct model {
    hwt_timeout t[N_TIMEOUTS];
    int64_t fire_tick[N_TIMEOUTS]; /* expected */
    int64_t fired_at[N_TIMEOUTS];  /* observed, -1 if not */
    uint64_t seq[N_TIMEOUTS];      /* placement order */
    bool live[N_TIMEOUTS];
    uint64_t next_seq;
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

static void on_expire(void *ctx, hwt_timeout *t)
{
    struct model *m = ctx;
    size_t i = (size_t)(t - m->t);
    int64_t tick = m->wheel.cur;
    if (!m->live[i] || m->fired_at[i] != -1)
        m->errors++;
    m->fired_at[i] = tick;
    m->live[i] = false;
    if (tick < m->last_tick || (tick == m->last_tick && m->seq[i] < m->last_seq))
        m->errors++;
    m->last_tick = tick;
    m->last_seq = m->seq[i];
}

static int64_t random_deadline(int64_t cur, uint32_t wheel_len)
{
    switch (rnd() % 8) {
    case 0: return cur > 0 ? (int64_t)(rnd() % (uint64_t)cur) : 0; /* past */
    case 1: return cur + (int64_t)(rnd() % 4);
    case 2: return cur + (int64_t)(rnd() % (wheel_len * 2 + 1));
    case 3: return cur + (int64_t)(rnd() % 100000);
    case 4: return cur + (int64_t)(rnd() % 100000000);
    case 5: return INT64_MAX;
    case 6: return cur + (int64_t)(rnd() >> 2) % (INT64_MAX / 4);
    default: return cur + (int64_t)(rnd() % 5000);
    }
}

static void run_model(uint32_t wheel_len, int rounds)
{
    struct model *m = calloc(1, sizeof *m);
    assert_non_null(m);
    assert_int_equal(hwt__wheel_init(&m->wheel, wheel_len, 1), 0);
    for (size_t i = 0; i < N_TIMEOUTS; i++)
        m->fired_at[i] = -1;
    size_t used = 0;
    for (int r = 0; r < rounds; r++) {
        int op = (int)(rnd() % 10);
        if (op < 5 && used < N_TIMEOUTS) {
            size_t i = used++;
            m->t[i].deadline = random_deadline(m->wheel.cur, wheel_len);
            int64_t due = m->t[i].deadline;
            m->fire_tick[i] = due < m->wheel.cur ? m->wheel.cur : due;
            m->seq[i] = m->next_seq++;
            m->live[i] = true;
            hwt__wheel_place(&m->wheel, &m->t[i]);
        } else if (op == 7 && used > 0 && rnd() % 2) {
            hwt__wheel_precascade(&m->wheel, (size_t)(rnd() % 64));
        } else if (op < 7 && used > 0) {
            size_t i = (size_t)(rnd() % used);
            if (m->live[i]) {
                hwt__wheel_unlink(&m->wheel, &m->t[i]);
                m->live[i] = false;
            }
        } else {
            int64_t earliest = INT64_MAX;
            for (size_t i = 0; i < used; i++)
                if (m->live[i] && m->fire_tick[i] < earliest)
                    earliest = m->fire_tick[i];
            int64_t next = hwt__wheel_next_event(&m->wheel);
            assert_true(next <= earliest); /* never sleeps past work */
            int64_t step;
            switch (rnd() % 4) {
            case 0: step = 0; break;
            case 1: step = (int64_t)(rnd() % 3); break;
            case 2: step = (int64_t)(rnd() % 70000); break;
            default:
                step = earliest != INT64_MAX && earliest > m->wheel.cur
                           ? earliest - m->wheel.cur + (int64_t)(rnd() % 2) - 1
                           : 1;
            }
            int64_t last = m->wheel.cur + step;
            m->last_tick = -1;
            m->last_seq = 0;
            hwt__wheel_advance(&m->wheel, last, on_expire, m);
            assert_true(m->wheel.cur == last + 1);
            for (size_t i = 0; i < used; i++) {
                if (m->fired_at[i] != -1)
                    assert_true(m->fired_at[i] == m->fire_tick[i]);
                else if (m->live[i])
                    assert_true(m->fire_tick[i] > last);
            }
        }
        assert_int_equal(m->errors, 0);
        assert_true(hwt__wheel_check(&m->wheel));
    }
    hwt__wheel_free(&m->wheel);
    free(m);
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

static void count_expire(void *ctx, hwt_timeout *t)
{
    (void)t;
    (*(int *)ctx)++;
}

/* A far timeout is moved down O(levels) times, not once per revolution. */
static void test_far_timeout_not_rescanned(void **state)
{
    (void)state;
    struct hwt__wheel w;
    assert_int_equal(hwt__wheel_init(&w, 512, 1), 0);
    hwt_timeout t;
    memset(&t, 0, sizeof t);
    t.deadline = 60000; /* ~117 revolutions of a 512-tick wheel */
    hwt__wheel_place(&w, &t);
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
}

/* Timeouts due at the same tick keep their placement order across cascades. */
static void test_same_tick_order_across_levels(void **state)
{
    (void)state;
    struct model *m = calloc(1, sizeof *m);
    assert_non_null(m);
    assert_int_equal(hwt__wheel_init(&m->wheel, 8, 1), 0);
    for (size_t i = 0; i < N_TIMEOUTS; i++)
        m->fired_at[i] = -1;
    /* A: placed early (lands high); B: placed later (lands lower); same tick. */
    for (size_t i = 0; i < 10; i++) {
        m->t[i].deadline = 5000;
        m->fire_tick[i] = 5000;
        m->seq[i] = m->next_seq++;
        m->live[i] = true;
        hwt__wheel_place(&m->wheel, &m->t[i]);
        m->last_tick = -1;
        hwt__wheel_advance(&m->wheel, m->wheel.cur + 400, on_expire, m);
    }
    m->last_tick = -1;
    m->last_seq = 0;
    hwt__wheel_advance(&m->wheel, 6000, on_expire, m);
    assert_int_equal(m->errors, 0);
    for (size_t i = 0; i < 10; i++)
        assert_true(m->fired_at[i] == 5000);
    hwt__wheel_free(&m->wheel);
    free(m);
}

int main(void)
{
    hwtt_watchdog(150);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wheel_1),
        cmocka_unit_test(test_wheel_2),
        cmocka_unit_test(test_wheel_8),
        cmocka_unit_test(test_wheel_64),
        cmocka_unit_test(test_wheel_512),
        cmocka_unit_test(test_far_timeout_not_rescanned),
        cmocka_unit_test(test_same_tick_order_across_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

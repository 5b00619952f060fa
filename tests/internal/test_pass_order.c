/*
 * test_pass_order.c - the order of a worker pass (worker.c, run_loop): the
 * ticks that ended are processed before the new timeouts are moved, as far
 * as no queued timeout is due before them, and the result must be the order
 * of Netty's "move, then expire" tick by tick:
 *   - a timeout queued during the tick it is due in runs in that tick's
 *     pass, right after the wheel's timeouts of the tick (not a tick later);
 *   - a timeout still queued when several ticks have ended (the transfer
 *     budget ran out) runs before the wheel's timeouts of later ticks;
 *   - a timeout due now, queued behind a backlog of far ones larger than
 *     the transfer budget, is moved first and runs after a slice of the
 *     backlog, not after a whole budget;
 *   - a timeout queued, or moved earlier by a reschedule, while a pass's
 *     task runs, due in a tick that ends meanwhile and that the pass then
 *     processes, runs at once in the next pass (not a tick later, after
 *     the wheel's timeouts of the next tick).
 * A 100 ms tick leaves room for the timing each scenario needs; a scenario
 * whose timing was missed (the test thread was late) is tried again.
 */
#include <stdatomic.h>
#include <string.h>

#include "helpers.h"
#include "internal.h"

#define TICK_MS 100
#define TICK_NS ((int64_t)TICK_MS * 1000000)
#define MS_NS 1000000
#define ATTEMPTS 5

/* What ran, in order (tasks run one at a time on the worker). */
static char order[16];
static int64_t ran_at[16]; /* ns since the timer started */
static atomic_int ran;
static hwt_timer *the_timer;

static void record(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    int i = atomic_load(&ran);
    order[i] = (char)(uintptr_t)arg;
    ran_at[i] = hwt__rel_now(the_timer);
    atomic_store(&ran, i + 1);
}

static hwt_timer *fresh_timer(uint32_t max_transfers)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = TICK_MS;
    o.tick_unit = HWT_MILLISECONDS;
    o.ticks_per_wheel = 64;
    o.max_transfers_per_tick = max_transfers;
    the_timer = hwtt_track(hwtt_timer_opts(&o));
    assert_int_equal(hwt_timer_start(the_timer), 0);
    memset(order, 0, sizeof order);
    atomic_store(&ran, 0);
    return the_timer;
}

/* Schedules a recording task labelled `label` due at `at` (ns since the
 * timer started); false if that time has already passed. */
static bool schedule_at(hwt_timer *timer, char label, int64_t at)
{
    int64_t delay = at - hwt__rel_now(timer);
    if (delay <= 0)
        return false;
    assert_int_equal(
        hwt_new_timeout(timer, record, (void *)(uintptr_t)label, delay, HWT_NANOSECONDS, NULL), 0);
    return true;
}

/* X is in the wheel for tick c+2; Y, due in the same tick, is scheduled
 * while the worker sleeps until that tick's end (no wake-up: it is not due
 * earlier). The pass runs X, then moves Y and runs it at once: placed, Y
 * would wait for the next tick's pass. */
static void test_timeout_queued_in_its_tick_runs_in_that_pass(void **state)
{
    (void)state;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        hwt_timer *timer = fresh_timer(100000);
        int64_t c = hwt__rel_now(timer) / TICK_NS;
        assert_true(schedule_at(timer, 'X', (c + 2) * TICK_NS + 20 * MS_NS));
        assert_true(hwtt_wait_until(atomic_load(&timer->transferred) == 1, hwtt_slack_ms(2000)));
        int64_t y_at = (c + 2) * TICK_NS + 50 * MS_NS;
        hwtt_wait_until(hwt__rel_now(timer) >= y_at - 20 * MS_NS, hwtt_slack_ms(5000));
        bool timely = schedule_at(timer, 'Y', y_at) &&
                      hwt__rel_now(timer) < (c + 3) * TICK_NS - 10 * MS_NS &&
                      hwt__queued_count(timer) == 1;
        assert_true(hwtt_wait_until(atomic_load(&ran) == 2, hwtt_slack_ms(5000)));
        hwtt_destroy(timer);
        if (!timely)
            continue; /* Y came too late to be queued during its tick: again */
        assert_memory_equal(order, "XY", 2);
        if (ran_at[1] - ran_at[0] >= TICK_NS / 2)
            fail_msg("Y ran %lld ms after X: in a later pass",
                     (long long)((ran_at[1] - ran_at[0]) / MS_NS));
        return;
    }
    fail_msg("the test thread was late in all %d attempts", ATTEMPTS);
}

/* B's task holds the worker until the test thread has queued more and tick
 * c+6 has ended. */
static atomic_bool blocking, go;
static int64_t hold_until;

static void blocker(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&blocking, true);
    hwtt_wait_until(atomic_load(&go) && hwt__rel_now(the_timer) >= hold_until,
                    hwtt_slack_ms(30000));
    record(timeout, (void *)(uintptr_t)'B');
}

/* Two moves per pass. The wheel holds B (tick c+1), X (c+3) and Z (c+5).
 * While B holds the worker, the test thread queues two far fillers, then
 * Y3 (due in tick c+3, after X) and Y4 (c+4). When B returns, ticks up to
 * c+6 have ended and the pass moves only the fillers: Y3 and Y4 are still
 * queued. Netty's order, tick by tick: B, X, Y3, Y4, Z - the wheel's Z must
 * not run before them. */
static void test_timeout_left_queued_runs_before_later_ticks(void **state)
{
    (void)state;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        hwt_timer *timer = fresh_timer(2);
        atomic_store(&blocking, false);
        atomic_store(&go, false);
        int64_t c = hwt__rel_now(timer) / TICK_NS;
        hold_until = (c + 7) * TICK_NS;
        assert_true(schedule_at(timer, 'X', (c + 3) * TICK_NS + 20 * MS_NS));
        assert_true(schedule_at(timer, 'Z', (c + 5) * TICK_NS + 20 * MS_NS));
        assert_int_equal(hwt_new_timeout(timer, blocker, NULL,
                                         (c + 1) * TICK_NS + 20 * MS_NS - hwt__rel_now(timer),
                                         HWT_NANOSECONDS, NULL),
                         0);
        assert_true(hwtt_wait_until(atomic_load(&blocking), hwtt_slack_ms(5000)));
        for (int i = 0; i < 2; i++)
            assert_int_equal(
                hwt_new_timeout(timer, record, (void *)(uintptr_t)'F', 1, HWT_HOURS, NULL), 0);
        int expected = 3; /* B, X, Z */
        expected += schedule_at(timer, '3', (c + 3) * TICK_NS + 50 * MS_NS);
        expected += schedule_at(timer, '4', (c + 4) * TICK_NS + 50 * MS_NS);
        bool timely = expected == 5 && hwt__rel_now(timer) < (c + 3) * TICK_NS;
        atomic_store(&go, true);
        bool all = hwtt_wait_until(atomic_load(&ran) == expected, hwtt_slack_ms(5000));
        hwtt_destroy(timer);
        if (!timely)
            continue; /* the test thread queued Y3/Y4 too late: again */
        assert_true(all);
        if (memcmp(order, "BX34Z", 5) != 0)
            fail_msg("ran in the order %.5s, not BX34Z", order);
        return;
    }
    fail_msg("the test thread was late in all %d attempts", ATTEMPTS);
}

/* From a task, 50 ms into a tick: A due in 220 ms, then B in 180 ms, both
 * in the tick after next. The worker takes the two in one stack after the
 * task and moves the timeouts due soon (200 ms ahead) first: B was soon
 * and A not, so B was moved, and ran, first. Soon now ends on a tick
 * boundary, and one thread's timeouts due in one tick run in the order it
 * scheduled them, as in Netty. */
static int64_t scheduled_at; /* ns since start, when the task scheduled A and B */
static atomic_int pair_failures;

static void schedule_a_then_b(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    while (hwt__rel_now(the_timer) % TICK_NS < 50 * MS_NS)
        hwtt_sleep_us(500);
    scheduled_at = hwt__rel_now(the_timer);
    if (hwt_new_timeout(the_timer, record, (void *)(uintptr_t)'A', 220, HWT_MILLISECONDS, NULL) != 0 ||
        hwt_new_timeout(the_timer, record, (void *)(uintptr_t)'B', 180, HWT_MILLISECONDS, NULL) != 0)
        atomic_fetch_add(&pair_failures, 1);
}

static void test_one_threads_timeouts_of_one_tick_run_in_its_order(void **state)
{
    (void)state;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        hwt_timer *timer = fresh_timer(100000);
        atomic_store(&pair_failures, 0);
        assert_int_equal(hwt_new_timeout(timer, schedule_a_then_b, NULL, 0, HWT_NANOSECONDS, NULL), 0);
        assert_true(hwtt_wait_until(atomic_load(&ran) == 2, hwtt_slack_ms(5000)));
        hwtt_destroy(timer);
        assert_int_equal(atomic_load(&pair_failures), 0);
        int64_t into = scheduled_at % TICK_NS;
        if (into > 75 * MS_NS)
            continue; /* the task was late: A and B may be due in two ticks */
        if (memcmp(order, "AB", 2) != 0)
            fail_msg("ran in the order %.2s, not AB (scheduled %lld ms into a tick)", order,
                     (long long)(into / MS_NS));
        return;
    }
    fail_msg("the task was late in all %d attempts", ATTEMPTS);
}

/* From a task (so no thread wakes the worker meanwhile): a backlog of far
 * timeouts larger than one pass's budget, then S, due at once, queued
 * last. The next pass moves S first and runs it between two slices of the
 * backlog: fewer than a budget moved when it runs (moved in queue order, S
 * would wait for a second pass). A 100 us tick ends during the first
 * slice or two on any machine. */
enum { BACKLOG = 120000 };
static atomic_uint_fast64_t moved_when_s_ran;
static atomic_bool s_ran;

static void s_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&moved_when_s_ran, atomic_load(&the_timer->transferred));
    atomic_store(&s_ran, true);
}

static atomic_int backlog_failures; /* counted on the worker: no cmocka asserts there */

static void backlog_then_s(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    for (int i = 0; i < BACKLOG; i++)
        if (hwt_new_timeout(the_timer, record, (void *)(uintptr_t)'F', 1, HWT_HOURS, NULL) != 0)
            atomic_fetch_add(&backlog_failures, 1);
    if (hwt_new_timeout(the_timer, s_task, NULL, 0, HWT_NANOSECONDS, NULL) != 0)
        atomic_fetch_add(&backlog_failures, 1);
}

static void test_due_timeout_overtakes_a_backlog(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 100;
    o.tick_unit = HWT_MICROSECONDS;
    o.sleep_mode = HWT_SLEEP_PRECISE;
    assert_int_equal(o.max_transfers_per_tick, 100000);
    the_timer = hwtt_track(hwtt_timer_opts(&o));
    atomic_store(&s_ran, false);
    atomic_store(&backlog_failures, 0);
    assert_int_equal(hwt_new_timeout(the_timer, backlog_then_s, NULL, 0, HWT_NANOSECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&s_ran), hwtt_slack_ms(10000)));
    assert_int_equal(atomic_load(&backlog_failures), 0);
    print_message("  S ran with %llu of %d moved\n",
                  (unsigned long long)atomic_load(&moved_when_s_ran), BACKLOG + 2);
    /* Half a budget: S did not wait for a whole pass's transfer (the
     * slicing itself is checked in test_plan.c). */
    assert_true(atomic_load(&moved_when_s_ran) < o.max_transfers_per_tick / 2);
    hwtt_destroy(the_timer);
}

/* Starts B (the blocker) due at `at`; false if that time has passed. */
static bool schedule_blocker_at(hwt_timer *timer, int64_t at)
{
    int64_t delay = at - hwt__rel_now(timer);
    if (delay <= 0)
        return false;
    assert_int_equal(hwt_new_timeout(timer, blocker, NULL, delay, HWT_NANOSECONDS, NULL), 0);
    return true;
}

/* Waits for the first 20 ms of a tick, and returns that tick. */
static int64_t early_in_a_tick(hwt_timer *timer)
{
    hwtt_wait_until(hwt__rel_now(timer) % TICK_NS < 20 * MS_NS, hwtt_slack_ms(2000));
    return hwt__rel_now(timer) / TICK_NS;
}

/* W is in the wheel for tick c+2 and Z for c+4. B, due in tick c+2, is
 * queued while the worker sleeps until that tick's end, so the pass at
 * (c+3)T runs W, then B as it moves it (overdue). B holds the worker until
 * X, due in tick c+3, is queued and tick c+3 has ended: the pass then
 * processes tick c+3 with X still queued. The next pass must run X at once,
 * before Z and less than a tick late. */
static void test_timeout_queued_while_its_tick_is_processed_runs_next(void **state)
{
    (void)state;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        hwt_timer *timer = fresh_timer(100000);
        atomic_store(&blocking, false);
        atomic_store(&go, false);
        int64_t c = early_in_a_tick(timer);
        hold_until = (c + 4) * TICK_NS + 5 * MS_NS;
        bool timely = schedule_at(timer, 'W', (c + 2) * TICK_NS + 20 * MS_NS) &&
                      schedule_at(timer, 'Z', (c + 4) * TICK_NS + 10 * MS_NS);
        hwtt_wait_until(hwt__rel_now(timer) >= (c + 2) * TICK_NS + 60 * MS_NS, hwtt_slack_ms(5000));
        timely = timely && schedule_blocker_at(timer, (c + 2) * TICK_NS + 70 * MS_NS);
        assert_true(hwtt_wait_until(atomic_load(&blocking), hwtt_slack_ms(5000)));
        int64_t x_due = (c + 3) * TICK_NS + 50 * MS_NS;
        timely = timely && hwt__rel_now(timer) < (c + 3) * TICK_NS + 30 * MS_NS &&
                 schedule_at(timer, 'X', x_due);
        atomic_store(&go, true);
        bool all = hwtt_wait_until(atomic_load(&ran) == 4, hwtt_slack_ms(5000));
        hwtt_destroy(timer);
        if (!timely)
            continue;
        assert_true(all);
        if (memcmp(order, "WBXZ", 4) != 0)
            fail_msg("ran in the order %.4s, not WBXZ", order);
        if (ran_at[2] - x_due >= TICK_NS)
            fail_msg("X ran %lld ms after its deadline: a tick late",
                     (long long)((ran_at[2] - x_due) / MS_NS));
        return;
    }
    fail_msg("the test thread was late in all %d attempts", ATTEMPTS);
}

/* The same with a reschedule: Y waits an hour away; W and B are in the
 * wheel for tick c+2. B, run by the pass at (c+3)T after it took the moved
 * stacks, holds the worker until Y is moved to tick c+3 and that tick has
 * ended: the pass processes tick c+3 with Y on a moved stack. The next
 * pass must run Y at once, less than a tick late. */
static void test_timeout_moved_while_its_tick_is_processed_runs_next(void **state)
{
    (void)state;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        hwt_timer *timer = fresh_timer(100000);
        atomic_store(&blocking, false);
        atomic_store(&go, false);
        hwt_timeout *y;
        assert_int_equal(hwt_new_timeout(timer, record, (void *)(uintptr_t)'Y', 1, HWT_HOURS, &y),
                         0);
        int64_t c = early_in_a_tick(timer);
        hold_until = (c + 4) * TICK_NS + 5 * MS_NS;
        bool timely = schedule_at(timer, 'W', (c + 2) * TICK_NS + 20 * MS_NS) &&
                      schedule_blocker_at(timer, (c + 2) * TICK_NS + 30 * MS_NS);
        assert_true(hwtt_wait_until(atomic_load(&blocking), hwtt_slack_ms(5000)));
        int64_t y_due = (c + 3) * TICK_NS + 50 * MS_NS;
        timely = timely && hwt__rel_now(timer) < (c + 3) * TICK_NS + 30 * MS_NS;
        assert_true(hwt_timeout_reschedule(y, y_due - hwt__rel_now(timer), HWT_NANOSECONDS));
        atomic_store(&go, true);
        bool all = hwtt_wait_until(atomic_load(&ran) == 3, hwtt_slack_ms(5000));
        hwt_timeout_release(y);
        hwtt_destroy(timer);
        if (!timely)
            continue;
        assert_true(all);
        assert_memory_equal(order, "WBY", 3);
        if (ran_at[2] - y_due >= TICK_NS)
            fail_msg("Y ran %lld ms after its new deadline: a tick late",
                     (long long)((ran_at[2] - y_due) / MS_NS));
        return;
    }
    fail_msg("the test thread was late in all %d attempts", ATTEMPTS);
}

int main(void)
{
    hwtt_watchdog(300);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_timeout_queued_in_its_tick_runs_in_that_pass,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_timeout_left_queued_runs_before_later_ticks,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_one_threads_timeouts_of_one_tick_run_in_its_order,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_due_timeout_overtakes_a_backlog, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_timeout_queued_while_its_tick_is_processed_runs_next,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_timeout_moved_while_its_tick_is_processed_runs_next,
                                  hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

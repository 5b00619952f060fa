/*
 * test_abi.c - the caller-allocated structs keep the ABI of libhwtimer.so.1
 * (include/hwtimer.h, "Reserved space"):
 *   hwt_stats and hwt_options are 256 bytes each on 64-bit Linux, with their
 *   reserved slots where the header says (a change of size or layout fails
 *   here before it reaches a user built against an older header);
 *   hwt_options_init zeroes the reserved space and hwt_timer_stats fills it
 *   with zeros; the library never reads reserved option fields.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <stdalign.h>
#include <string.h>

#define MS INT64_C(1000000)

/* The documented sizes; a 1.x version must never change them. */
#define STATS_SIZE 256
#define OPTIONS_SIZE 256
/* Where each struct's reserved space starts: after the 1.0 fields. */
#define STATS_RESERVED_AT 64
#define OPTIONS_RESERVED_AT 80

static bool is_lp64(void)
{
    return sizeof(void *) == 8 && sizeof(long) == 8 && alignof(uint64_t) == 8;
}

/* Whether bytes [from, from + n) of p are all zero; reports the first that is not. */
static bool all_zero(const void *p, size_t from, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = from; i < from + n; i++) {
        if (b[i] != 0) {
            print_error("byte %zu is 0x%02x, not 0\n", i, b[i]);
            return false;
        }
    }
    return true;
}

static void test_struct_sizes(void **state)
{
    (void)state;
    if (!is_lp64()) {
        print_message("the sizes are documented for 64-bit Linux only: not checked here\n");
        skip();
    }
    assert_int_equal(sizeof(hwt_stats), STATS_SIZE);
    assert_int_equal(sizeof(hwt_options), OPTIONS_SIZE);

    /* The reserved arrays run from right after the 1.0 fields to the end. */
    assert_int_equal(offsetof(hwt_stats, late_max_ns) + sizeof(uint64_t), STATS_RESERVED_AT);
    assert_int_equal(offsetof(hwt_stats, reserved), STATS_RESERVED_AT);
    assert_int_equal(STATS_RESERVED_AT + sizeof(((hwt_stats *)0)->reserved), STATS_SIZE);
    assert_int_equal(offsetof(hwt_options, log_ctx) + sizeof(void *), OPTIONS_RESERVED_AT);
    assert_int_equal(offsetof(hwt_options, reserved), OPTIONS_RESERVED_AT);
    assert_int_equal(OPTIONS_RESERVED_AT + sizeof(((hwt_options *)0)->reserved), OPTIONS_SIZE);

    /* The 1.0 fields where 1.0 put them (a reordering is as bad as a resize).
     * A field a later version adds inside the reserved union gets its line
     * here too: abidiff counts every change within a union that keeps its
     * size as harmless, so tests/abi-check would not see it move. */
    assert_int_equal(offsetof(hwt_stats, pending), 0);
    assert_int_equal(offsetof(hwt_stats, scheduled), 8);
    assert_int_equal(offsetof(hwt_stats, expired), 16);
    assert_int_equal(offsetof(hwt_stats, cancelled), 24);
    assert_int_equal(offsetof(hwt_stats, rejected), 32);
    assert_int_equal(offsetof(hwt_stats, ticks), 40);
    assert_int_equal(offsetof(hwt_stats, wakeups), 48);
    assert_int_equal(offsetof(hwt_stats, late_max_ns), 56);
    assert_int_equal(offsetof(hwt_options, tick_duration), 0);
    assert_int_equal(offsetof(hwt_options, tick_unit), 8);
    assert_int_equal(offsetof(hwt_options, ticks_per_wheel), 12);
    assert_int_equal(offsetof(hwt_options, max_pending_timeouts), 16);
    assert_int_equal(offsetof(hwt_options, max_transfers_per_tick), 24);
    assert_int_equal(offsetof(hwt_options, sleep_mode), 28);
    assert_int_equal(offsetof(hwt_options, thread_attr), 32);
    assert_int_equal(offsetof(hwt_options, thread_name), 40);
    assert_int_equal(offsetof(hwt_options, executor), 48);
    assert_int_equal(offsetof(hwt_options, executor_ctx), 56);
    assert_int_equal(offsetof(hwt_options, log), 64);
    assert_int_equal(offsetof(hwt_options, log_ctx), 72);
}

static void test_options_init_zeroes_reserved(void **state)
{
    (void)state;
    hwt_options o;
    memset(&o, 0xff, sizeof o);
    hwt_options_init(&o);
    assert_true(all_zero(&o, offsetof(hwt_options, reserved), sizeof o.reserved));
    /* and the defaults are still there */
    assert_int_equal(o.tick_duration, 100);
    assert_string_equal(o.thread_name, "hwtimer");
}

static void test_stats_zeroes_reserved(void **state)
{
    (void)state;
    hwt_timer *t = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    hwt_stats s;

    /* unstarted */
    memset(&s, 0xff, sizeof s);
    hwt_timer_stats(t, &s);
    assert_true(all_zero(&s, offsetof(hwt_stats, reserved), sizeof s.reserved));
    assert_int_equal(s.scheduled, 0);

    /* started, with a timeout run */
    static atomic_int ran;
    atomic_store(&ran, 0);
    assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &ran, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(5000)));
    memset(&s, 0xff, sizeof s);
    hwt_timer_stats(t, &s);
    assert_true(all_zero(&s, offsetof(hwt_stats, reserved), sizeof s.reserved));
    assert_int_equal(s.scheduled, 1);

    /* stopped */
    assert_int_equal(hwt_stop(t, NULL, NULL), 0);
    memset(&s, 0xff, sizeof s);
    hwt_timer_stats(t, &s);
    assert_true(all_zero(&s, offsetof(hwt_stats, reserved), sizeof s.reserved));
    assert_int_equal(s.pending, 0);
    hwtt_destroy(t);
}

/* Garbage in the reserved options (a caller who set the fields by hand and
 * never zeroed the struct) changes nothing in 1.0: creation succeeds, nothing
 * is logged, and a timer with a 1 ms tick runs a timeout. */
static void test_reserved_options_not_read(void **state)
{
    (void)state;
    static hwtt_log log; /* static: the teardown may destroy the timer after a failure */
    memset(&log, 0, sizeof log);
    hwt_options o;
    hwt_options_init(&o);
    memset(o.reserved, 0xff, sizeof o.reserved);
    o.tick_duration = 1;
    o.ticks_per_wheel = 64;
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *t = hwtt_track(hwtt_timer_opts(&o));
    static atomic_int ran;
    atomic_store(&ran, 0);
    assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &ran, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, hwtt_slack_ms(5000)));
    hwtt_destroy(t);
    for (int level = HWT_LOG_DEBUG; level <= HWT_LOG_ERROR; level++)
        assert_int_equal(atomic_load(&log.count[level]), 0);
}

int main(void)
{
    hwtt_watchdog(120);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_sizes),
        cmocka_unit_test(test_options_init_zeroes_reserved),
        cmocka_unit_test_teardown(test_stats_zeroes_reserved, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_reserved_options_not_read, hwtt_teardown_timers),
    };
    return cmocka_run_group_tests_name("abi", tests, NULL, NULL);
}

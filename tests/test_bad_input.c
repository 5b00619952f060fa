/*
 * test_bad_input.c - every argument of every public function with hostile
 * values: NULL, zero, negative, out-of-range enums, INT64_MIN/INT64_MAX
 * delays in every unit, tick x wheel overflow, 2^30 + 1 buckets.
 *
 * Each case gets the result include/hwtimer.h documents ("A call that fails
 * changed nothing"): for failures, out-pointers keep their old value, the
 * pending count and the statistics do not move, the timer is not started or
 * stopped by it, and it still works afterwards. Table-driven where the
 * arguments vary; the run is checked under ASan+UBSan (no signed overflow in
 * the conversions) and valgrind like every suite.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD_UNITS_N 5
static const int bad_units[BAD_UNITS_N] = {-1, 7, 100, INT_MAX, INT_MIN};
static const hwt_unit all_units[7] = {HWT_NANOSECONDS, HWT_MICROSECONDS, HWT_MILLISECONDS,
                                      HWT_SECONDS,     HWT_MINUTES,      HWT_HOURS,
                                      HWT_DAYS};
static const char *const unit_name[7] = {"ns", "us", "ms", "s", "min", "h", "d"};
static const int64_t unit_ns[7] = {1,
                                   1000,
                                   1000000,
                                   1000000000,
                                   60 * INT64_C(1000000000),
                                   3600 * INT64_C(1000000000),
                                   86400 * INT64_C(1000000000)};

static bool stats_equal(const hwt_stats *a, const hwt_stats *b)
{
    return a->pending == b->pending && a->scheduled == b->scheduled && a->expired == b->expired &&
           a->cancelled == b->cancelled && a->rejected == b->rejected;
}

/* The timer still works: a 1 ms timeout runs. */
static void assert_works(hwt_timer *t)
{
    static hwtt_rec r;
    memset(&r, 0, sizeof r);
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &r, 1, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&r.ran) == 1, hwtt_slack_ms(5000)));
}

/* ------------------------------------------------------ hwt_timer_create */

typedef struct opt_case {
    const char *what;
    void (*set)(hwt_options *o);
    int want;       /* result of hwt_timer_create */
    int want_warns; /* -1: don't care; else number of HWT_LOG_WARN messages */
} opt_case;

static pthread_attr_t detached_attr;

#define OPT(fn, body)                                                                              \
    static void fn(hwt_options *o)                                                                 \
    {                                                                                              \
        body;                                                                                      \
    }
OPT(o_tick0, o->tick_duration = 0)
OPT(o_tick0_days, o->tick_duration = 0; o->tick_unit = HWT_DAYS)
OPT(o_unit_m1, o->tick_unit = (hwt_unit)-1)
OPT(o_unit_7, o->tick_unit = (hwt_unit)7)
OPT(o_unit_100, o->tick_unit = (hwt_unit)100)
OPT(o_unit_intmax, o->tick_unit = (hwt_unit)INT_MAX)
OPT(o_unit_intmin, o->tick_unit = (hwt_unit)INT_MIN)
OPT(o_wheel0, o->ticks_per_wheel = 0)
OPT(o_wheel_2p30_1, o->ticks_per_wheel = (UINT32_C(1) << 30) + 1)
OPT(o_wheel_2p31, o->ticks_per_wheel = UINT32_C(1) << 31)
OPT(o_wheel_max, o->ticks_per_wheel = UINT32_MAX)
OPT(o_transfers0, o->max_transfers_per_tick = 0)
OPT(o_sleep_m1, o->sleep_mode = (hwt_sleep_mode)-1)
OPT(o_sleep_4, o->sleep_mode = (hwt_sleep_mode)4)
OPT(o_sleep_intmax, o->sleep_mode = (hwt_sleep_mode)INT_MAX)
OPT(o_detached, o->thread_attr = &detached_attr)
/* tick x wheel overflow (Netty: tick_ns >= INT64_MAX / wheel length) */
OPT(o_tick_u64max_ns, o->tick_duration = UINT64_MAX; o->tick_unit = HWT_NANOSECONDS)
OPT(o_tick_u64max_days, o->tick_duration = UINT64_MAX; o->tick_unit = HWT_DAYS)
OPT(o_tick_i64max_ns_w1, o->tick_duration = INT64_MAX; o->tick_unit = HWT_NANOSECONDS;
    o->ticks_per_wheel = 1)
OPT(o_tick_i64max_plus1_w1, o->tick_duration = (uint64_t)INT64_MAX + 1;
    o->tick_unit = HWT_NANOSECONDS; o->ticks_per_wheel = 1)
OPT(o_tick_106752d_w1, o->tick_duration = 106752; o->tick_unit = HWT_DAYS; o->ticks_per_wheel = 1)
OPT(o_tick_ovf_512, o->tick_duration = INT64_MAX / 512; o->tick_unit = HWT_NANOSECONDS;
    o->ticks_per_wheel = 512)
OPT(o_tick_ovf_rounded, o->tick_duration = INT64_MAX / 512; o->tick_unit = HWT_NANOSECONDS;
    o->ticks_per_wheel = 257) /* rounds up to 512 */
OPT(o_day_2p20, o->tick_duration = 1; o->tick_unit = HWT_DAYS; o->ticks_per_wheel = 1u << 20)
OPT(o_hours_2p30, o->tick_duration = 3; o->tick_unit = HWT_HOURS; o->ticks_per_wheel = 1u << 30)
/* accepted */
OPT(o_defaults, (void)o)
OPT(o_tick_ok_512, o->tick_duration = INT64_MAX / 512 - 1; o->tick_unit = HWT_NANOSECONDS;
    o->ticks_per_wheel = 512)
OPT(o_tick_106751d_w1, o->tick_duration = 106751; o->tick_unit = HWT_DAYS; o->ticks_per_wheel = 1)
OPT(o_day_2p16, o->tick_duration = 1; o->tick_unit = HWT_DAYS; o->ticks_per_wheel = 1u << 16)
OPT(o_wheel1, o->ticks_per_wheel = 1)
OPT(o_wheel3, o->ticks_per_wheel = 3)
OPT(o_pending_min, o->max_pending_timeouts = INT64_MIN)
OPT(o_pending_0, o->max_pending_timeouts = 0)
OPT(o_transfers1, o->max_transfers_per_tick = 1)
OPT(o_transfers_max, o->max_transfers_per_tick = UINT32_MAX)
OPT(o_name_null, o->thread_name = NULL)
OPT(o_name_long, o->thread_name = "a-thread-name-far-longer-than-fifteen-bytes")
OPT(o_name_empty, o->thread_name = "")
OPT(o_units_each, o->tick_duration = 1; o->tick_unit = HWT_MICROSECONDS)
OPT(o_sleep_precise, o->sleep_mode = HWT_SLEEP_PRECISE)
OPT(o_sleep_millis, o->sleep_mode = HWT_SLEEP_MILLIS; o->tick_duration = 1)
OPT(o_sleep_windows, o->sleep_mode = HWT_SLEEP_WINDOWS; o->tick_duration = 10)
/* accepted, raised to the sleep mode's minimum with a warning */
OPT(o_1ns_precise, o->tick_duration = 1; o->tick_unit = HWT_NANOSECONDS;
    o->sleep_mode = HWT_SLEEP_PRECISE)
OPT(o_999ns_default, o->tick_duration = 999; o->tick_unit = HWT_NANOSECONDS)
OPT(o_1us_millis, o->tick_duration = 1; o->tick_unit = HWT_MICROSECONDS;
    o->sleep_mode = HWT_SLEEP_MILLIS)
OPT(o_999us_windows, o->tick_duration = 999; o->tick_unit = HWT_MICROSECONDS;
    o->sleep_mode = HWT_SLEEP_WINDOWS)

static const opt_case opt_cases[] = {
    {"tick_duration 0", o_tick0, HWT_EINVAL, 0},
    {"tick_duration 0 days", o_tick0_days, HWT_EINVAL, 0},
    {"tick_unit -1", o_unit_m1, HWT_EINVAL, 0},
    {"tick_unit 7", o_unit_7, HWT_EINVAL, 0},
    {"tick_unit 100", o_unit_100, HWT_EINVAL, 0},
    {"tick_unit INT_MAX", o_unit_intmax, HWT_EINVAL, 0},
    {"tick_unit INT_MIN", o_unit_intmin, HWT_EINVAL, 0},
    {"ticks_per_wheel 0", o_wheel0, HWT_EINVAL, 0},
    {"ticks_per_wheel 2^30+1", o_wheel_2p30_1, HWT_EINVAL, 0},
    {"ticks_per_wheel 2^31", o_wheel_2p31, HWT_EINVAL, 0},
    {"ticks_per_wheel UINT32_MAX", o_wheel_max, HWT_EINVAL, 0},
    {"max_transfers_per_tick 0", o_transfers0, HWT_EINVAL, 0},
    {"sleep_mode -1", o_sleep_m1, HWT_EINVAL, 0},
    {"sleep_mode 4", o_sleep_4, HWT_EINVAL, 0},
    {"sleep_mode INT_MAX", o_sleep_intmax, HWT_EINVAL, 0},
    {"detached thread_attr", o_detached, HWT_EINVAL, 0},
    {"tick UINT64_MAX ns", o_tick_u64max_ns, HWT_EINVAL, 0},
    {"tick UINT64_MAX days", o_tick_u64max_days, HWT_EINVAL, 0},
    {"tick INT64_MAX ns, wheel 1", o_tick_i64max_ns_w1, HWT_EINVAL, 0},
    {"tick INT64_MAX+1 ns, wheel 1", o_tick_i64max_plus1_w1, HWT_EINVAL, 0},
    {"tick 106752 days (> INT64_MAX ns), wheel 1", o_tick_106752d_w1, HWT_EINVAL, 0},
    {"tick INT64_MAX/512 ns x 512", o_tick_ovf_512, HWT_EINVAL, 0},
    {"tick INT64_MAX/512 ns x 257 (rounded to 512)", o_tick_ovf_rounded, HWT_EINVAL, 0},
    {"tick 1 day x 2^20", o_day_2p20, HWT_EINVAL, 0},
    {"tick 3 h x 2^30", o_hours_2p30, HWT_EINVAL, 0},
    {"defaults", o_defaults, 0, 0},
    {"tick INT64_MAX/512-1 ns x 512", o_tick_ok_512, 0, 0},
    {"tick 106751 days, wheel 1", o_tick_106751d_w1, 0, 0},
    {"tick 1 day x 2^16", o_day_2p16, 0, 0},
    {"ticks_per_wheel 1", o_wheel1, 0, 0},
    {"ticks_per_wheel 3", o_wheel3, 0, 0},
    {"max_pending_timeouts INT64_MIN (unlimited)", o_pending_min, 0, 0},
    {"max_pending_timeouts 0 (unlimited)", o_pending_0, 0, 0},
    {"max_transfers_per_tick 1", o_transfers1, 0, 0},
    {"max_transfers_per_tick UINT32_MAX", o_transfers_max, 0, 0},
    {"thread_name NULL", o_name_null, 0, 0},
    {"thread_name 43 bytes", o_name_long, 0, 0},
    {"thread_name empty", o_name_empty, 0, 0},
    {"tick 1 us", o_units_each, 0, 0},
    {"sleep_mode PRECISE", o_sleep_precise, 0, 0},
    {"sleep_mode MILLIS, 1 ms", o_sleep_millis, 0, 0},
    {"sleep_mode WINDOWS, 10 ms", o_sleep_windows, 0, 0},
    {"tick 1 ns PRECISE (raised to 1 us)", o_1ns_precise, 0, 1},
    {"tick 999 ns DEFAULT (raised to 1 us)", o_999ns_default, 0, 1},
    {"tick 1 us MILLIS (raised to 1 ms)", o_1us_millis, 0, 1},
    {"tick 999 us WINDOWS (raised to 1 ms)", o_999us_windows, 0, 1},
};

static void test_create_options_table(void **state)
{
    (void)state;
    assert_int_equal(pthread_attr_init(&detached_attr), 0);
    assert_int_equal(pthread_attr_setdetachstate(&detached_attr, PTHREAD_CREATE_DETACHED), 0);
    int failures = 0, n = (int)(sizeof opt_cases / sizeof opt_cases[0]);
    for (int i = 0; i < n; i++) {
        const opt_case *c = &opt_cases[i];
        static hwtt_log log;
        memset(&log, 0, sizeof log);
        hwt_options o;
        hwt_options_init(&o);
        o.log = hwtt_log_cb;
        o.log_ctx = &log;
        o.thread_name = "hwt-bad-opts";
        c->set(&o);
        hwt_options copy = o;
        hwt_timer *t = (hwt_timer *)&log; /* sentinel */
        int rc = hwt_timer_create(&t, &o);
        bool ok = rc == c->want;
        if (memcmp(&copy, &o, sizeof o) != 0) /* options are const */
            ok = false;
        int warns = atomic_load(&log.count[HWT_LOG_WARN]);
        int errors = atomic_load(&log.count[HWT_LOG_ERROR]);
        if (rc != 0) {
            if (t != (hwt_timer *)&log || warns + errors != 0)
                ok = false;
        } else {
            if (c->want_warns >= 0 && warns != c->want_warns)
                ok = false;
            if (errors != 0)
                ok = false;
            /* a created timer works, then goes away */
            if (t == (hwt_timer *)&log || t == NULL) {
                ok = false;
            } else {
                hwt_stats s;
                hwt_timer_stats(t, &s);
                if (s.scheduled != 0 || s.pending != 0 || hwt_pending_timeouts(t) != 0)
                    ok = false;
                hwt_timer_destroy(t);
            }
        }
        if (!ok) {
            failures++;
            print_message("  create %-45s: got %d (%s), %d warnings, %d errors; want %d\n", c->what,
                          rc, hwt_strerror(rc), warns, errors, c->want);
        }
    }
    pthread_attr_destroy(&detached_attr);
    /* NULL timer out-pointer; NULL options mean the defaults */
    hwt_options o;
    hwt_options_init(&o);
    assert_int_equal(hwt_timer_create(NULL, &o), HWT_EINVAL);
    assert_int_equal(hwt_timer_create(NULL, NULL), HWT_EINVAL);
    hwt_timer *t = NULL;
    assert_int_equal(hwt_timer_create(&t, NULL), 0);
    assert_non_null(t);
    hwt_timer_destroy(t);
    /* no worker was ever started by any of this */
    assert_int_equal(hwtt_threads_named("hwt-bad-opts"), 0);
    print_message("  %d option cases\n", n);
    assert_int_equal(failures, 0);
}

/* A timer created from an accepted case really works, at both ends of the
 * accepted tick x wheel range (1 ms and a 1-bucket wheel; 1 us ticks). */
static void test_accepted_extremes_work(void **state)
{
    (void)state;
    hwt_timer *a = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 1));
    assert_works(a);
    hwtt_destroy(a);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_NANOSECONDS; /* raised to 1 us */
    o.max_transfers_per_tick = 1;
    o.max_pending_timeouts = INT64_MIN;
    o.thread_name = NULL;
    hwt_timer *b = hwtt_track(hwtt_timer_opts(&o));
    assert_works(b);
    hwtt_destroy(b);
}

/* ------------------------------------------------- scheduling arguments */

static hwtt_rec dummy;

typedef struct sched_case {
    const char *what;
    bool null_timer, use_task, null_task, null_run;
    int unit;
    int want;
} sched_case;

static void test_schedule_invalid_arguments(void **state)
{
    (void)state;
    hwt_timer *t = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    /* one pending "never" timeout, so pending has something to keep */
    hwt_timeout *keep = NULL;
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &dummy, 1, HWT_DAYS, &keep), 0);

    sched_case cases[64];
    int n = 0;
    for (int api = 0; api < 2; api++) {
        bool task = api == 1;
        cases[n++] =
            (sched_case){"NULL timer", true, task, false, false, HWT_MILLISECONDS, HWT_EINVAL};
        cases[n++] =
            (sched_case){"NULL run", false, task, false, true, HWT_MILLISECONDS, HWT_EINVAL};
        if (task)
            cases[n++] =
                (sched_case){"NULL task", false, true, true, false, HWT_MILLISECONDS, HWT_EINVAL};
        for (int u = 0; u < BAD_UNITS_N; u++)
            cases[n++] =
                (sched_case){"invalid unit", false, task, false, false, bad_units[u], HWT_EINVAL};
        cases[n++] =
            (sched_case){"NULL timer + invalid unit", true, task, false, false, 7, HWT_EINVAL};
    }
    hwt_stats before;
    hwt_timer_stats(t, &before);
    int failures = 0;
    for (int i = 0; i < n; i++) {
        const sched_case *c = &cases[i];
        hwt_timer *tt = c->null_timer ? NULL : t;
        for (int with_out = 0; with_out < 2; with_out++) {
            hwt_timeout *h = (hwt_timeout *)&dummy; /* sentinel */
            hwt_timeout **out = with_out ? &h : NULL;
            int rc;
            if (c->use_task) {
                hwt_task task = {.run = c->null_run ? NULL : hwtt_rec_run,
                                 .cancelled = hwtt_rec_cancelled};
                rc = hwt_new_timeout_task(tt, c->null_task ? NULL : &task, &dummy, 0,
                                          (hwt_unit)c->unit, out);
            } else {
                rc = hwt_new_timeout(tt, c->null_run ? NULL : hwtt_rec_run, &dummy, 0,
                                     (hwt_unit)c->unit, out);
            }
            hwt_stats after;
            hwt_timer_stats(t, &after);
            if (rc != c->want || h != (hwt_timeout *)&dummy || !stats_equal(&before, &after) ||
                hwt_pending_timeouts(t) != 1) {
                failures++;
                print_message("  %s %s (unit %d, out %s): got %d\n",
                              c->use_task ? "hwt_new_timeout_task" : "hwt_new_timeout", c->what,
                              c->unit, with_out ? "given" : "NULL", rc);
            }
        }
    }
    /* also a task with a NULL run but no cancelled callback */
    hwt_task half = {.run = NULL, .cancelled = NULL};
    assert_int_equal(hwt_new_timeout_task(t, &half, NULL, 0, HWT_MILLISECONDS, NULL), HWT_EINVAL);
    print_message("  %d invalid scheduling cases, each with and without an out-pointer\n", n);
    assert_int_equal(failures, 0);
    assert_int_equal(atomic_load(&dummy.ran), 0);
    assert_int_equal(atomic_load(&dummy.cb), 0);
    assert_works(t);
    assert_true(hwt_timeout_cancel(keep));
    hwt_timeout_release(keep);
    hwtt_destroy(t);
}

/* An invalid call on a fresh timer does not start its worker. */
static void test_invalid_calls_do_not_start(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.thread_name = "hwt-bad-nostart";
    hwt_timer *t = hwtt_track(hwtt_timer_opts(&o));
    assert_int_equal(hwt_new_timeout(t, NULL, NULL, 0, HWT_MILLISECONDS, NULL), HWT_EINVAL);
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, NULL, 0, (hwt_unit)9, NULL), HWT_EINVAL);
    assert_int_equal(hwt_new_timeout_task(t, NULL, NULL, 0, HWT_MILLISECONDS, NULL), HWT_EINVAL);
    hwt_timeout **l = NULL;
    size_t c = 0;
    assert_int_equal(hwt_stop(t, &l, NULL), HWT_EINVAL);
    assert_int_equal(hwt_stop(t, NULL, &c), HWT_EINVAL);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    assert_int_equal(s.ticks, 0);
    assert_int_equal(s.wakeups, 0);
    assert_int_equal(hwtt_threads_named("hwt-bad-nostart"), 0);
    /* and the timer is not stopped either: it starts and works */
    assert_works(t);
    assert_int_equal(hwtt_threads_named("hwt-bad-nostart"), 1);
    hwtt_destroy(t);
}

/* ------------------------------------------------ delays in every unit */

#define DELAYS_N 9
static const int64_t delays[DELAYS_N] = {INT64_MIN, INT64_MIN + 1, -1000000,      -1,       0,
                                         1,         INT64_MAX / 2, INT64_MAX - 1, INT64_MAX};
static hwtt_rec delay_rec[7][DELAYS_N];

/* Documented: every delay in every unit is accepted; <= 0 fires on the next
 * tick; a positive delay that overflows means "never". */
static void test_extreme_delays_every_unit(void **state)
{
    (void)state;
    memset(delay_rec, 0, sizeof delay_rec);
    hwt_timer *t = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 8));
    hwt_timeout *h[7][DELAYS_N];
    int soon = 0, never = 0, failures = 0;
    bool is_soon[7][DELAYS_N];
    for (int u = 0; u < 7; u++) {
        for (int d = 0; d < DELAYS_N; d++) {
            int64_t delay = delays[d];
            /* <= 0 fires on the next tick; 1 ns/us/ms/s soon; everything
             * else (>= 1 minute) not within this test */
            is_soon[u][d] = delay <= 0 || (delay == 1 && unit_ns[u] <= 1000000000);
            soon += is_soon[u][d];
            never += !is_soon[u][d];
            int rc = (d % 2) ? hwt_new_timeout_task(t, &hwtt_rec_task, &delay_rec[u][d], delay,
                                                    all_units[u], &h[u][d])
                             : hwt_new_timeout(t, hwtt_rec_run, &delay_rec[u][d], delay,
                                               all_units[u], &h[u][d]);
            if (rc != 0) {
                failures++;
                h[u][d] = NULL;
                print_message("  delay %lld %s: got %d\n", (long long)delay, unit_name[u], rc);
            }
        }
    }
    assert_int_equal(failures, 0);
    bool ran =
        hwtt_wait_until(({
                            int k = 0;
                            for (int u = 0; u < 7; u++)
                                for (int d = 0; d < DELAYS_N; d++)
                                    k += is_soon[u][d] && atomic_load(&delay_rec[u][d].ran) == 1;
                            k == soon;
                        }),
                        hwtt_slack_ms(5000));
    /* 1 s timeouts may take a second: the "never" ones must still be pending */
    int64_t pending = hwt_pending_timeouts(t);
    int wrong = 0;
    for (int u = 0; u < 7; u++)
        for (int d = 0; d < DELAYS_N; d++) {
            int r = atomic_load(&delay_rec[u][d].ran);
            if (is_soon[u][d] ? r != 1 : r != 0) {
                wrong++;
                print_message("  delay %lld %s: ran %d\n", (long long)delays[d], unit_name[u], r);
            }
            if (!is_soon[u][d] && !hwt_timeout_cancel(h[u][d]))
                wrong++;
            hwt_timeout_release(h[u][d]);
        }
    hwt_stats s;
    hwt_timer_stats(t, &s);
    hwtt_destroy(t);
    print_message("  %d delays x 7 units: %d fired, %d still pending (\"never\")\n", DELAYS_N, soon,
                  never);
    assert_true(ran);
    assert_int_equal(wrong, 0);
    assert_int_equal(pending, never);
    assert_int_equal(s.scheduled, 7 * DELAYS_N);
    assert_int_equal(s.expired, soon);
    assert_int_equal(s.cancelled, never);
}

/* --------------------------------------------------- limits and stopping */

static void test_rejected_changes_nothing(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.max_pending_timeouts = 2;
    hwt_timer *t = hwtt_track(hwtt_timer_opts(&o));
    hwtt_rec r[4];
    memset(r, 0, sizeof r);
    hwt_timeout *a = NULL, *b = NULL;
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &r[0], 1, HWT_HOURS, &a), 0);
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[1], 1, HWT_HOURS, &b), 0);
    hwt_stats before, after;
    hwt_timer_stats(t, &before);
    hwt_timeout *h = (hwt_timeout *)&r[3];
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &r[2], 0, HWT_MILLISECONDS, &h),
                     HWT_EREJECTED);
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[2], INT64_MIN, HWT_DAYS, &h),
                     HWT_EREJECTED);
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, &r[2], 0, HWT_MILLISECONDS, NULL),
                     HWT_EREJECTED);
    hwt_timer_stats(t, &after);
    assert_ptr_equal(h, (hwt_timeout *)&r[3]);
    assert_int_equal(after.pending, 2);
    assert_int_equal(hwt_pending_timeouts(t), 2);
    assert_int_equal(after.scheduled, before.scheduled);
    assert_int_equal(after.rejected, before.rejected + 3);
    assert_int_equal(after.cancelled, before.cancelled);
    /* a cancel frees a slot at once */
    assert_true(hwt_timeout_cancel(a));
    assert_works(t);
    assert_int_equal(atomic_load(&r[2].ran), 0);
    assert_true(hwt_timeout_cancel(b));
    hwt_timeout_release(a);
    hwt_timeout_release(b);
    hwtt_destroy(t);
}

static void test_stop_invalid_arguments(void **state)
{
    (void)state;
    hwt_timeout **l = (hwt_timeout **)&dummy;
    size_t n = 42;
    assert_int_equal(hwt_stop(NULL, NULL, NULL), HWT_EINVAL);
    assert_int_equal(hwt_stop(NULL, &l, &n), HWT_EINVAL);
    assert_int_equal(hwt_stop(NULL, &l, NULL), HWT_EINVAL);
    hwt_timer *t = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    hwtt_rec r;
    memset(&r, 0, sizeof r);
    hwt_timeout *keep = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r, 1, HWT_HOURS, &keep), 0);
    hwt_stats before, after;
    hwt_timer_stats(t, &before);
    assert_int_equal(hwt_stop(t, &l, NULL), HWT_EINVAL);
    assert_int_equal(hwt_stop(t, NULL, &n), HWT_EINVAL);
    hwt_timer_stats(t, &after);
    /* out-pointers untouched; not stopped: pending kept, still schedules */
    assert_ptr_equal(l, (hwt_timeout **)&dummy);
    assert_int_equal(n, 42);
    assert_true(stats_equal(&before, &after));
    assert_int_equal(hwt_pending_timeouts(t), 1);
    assert_false(hwt_timeout_is_cancelled(keep));
    assert_works(t);
    assert_int_equal(atomic_load(&r.cb), 0);
    /* a real stop still hands it back */
    l = NULL;
    n = 0;
    assert_int_equal(hwt_stop(t, &l, &n), 0);
    assert_int_equal(n, 1);
    assert_ptr_equal(l[0], keep);
    hwt_timeouts_release(l, n);
    hwt_timeout_release(keep);
    hwtt_destroy(t);
}

/* After a stop: new timeouts get HWT_ESTOPPED and change nothing. */
static void test_after_stop_changes_nothing(void **state)
{
    (void)state;
    hwt_timer *t = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    assert_works(t);
    assert_int_equal(hwt_stop(t, NULL, NULL), 0);
    hwt_stats before, after;
    hwt_timer_stats(t, &before);
    int failures = 0;
    for (int u = 0; u < 7; u++) {
        for (int d = 0; d < DELAYS_N; d++) {
            hwt_timeout *h = (hwt_timeout *)&dummy;
            int rc =
                (d % 2)
                    ? hwt_new_timeout_task(t, &hwtt_rec_task, &dummy, delays[d], all_units[u], &h)
                    : hwt_new_timeout(t, hwtt_rec_run, &dummy, delays[d], all_units[u], &h);
            failures += rc != HWT_ESTOPPED || h != (hwt_timeout *)&dummy;
        }
    }
    /* argument errors still come first */
    assert_int_equal(hwt_new_timeout(t, NULL, NULL, 0, HWT_MILLISECONDS, NULL), HWT_EINVAL);
    assert_int_equal(hwt_new_timeout(t, hwtt_rec_run, NULL, 0, (hwt_unit)-1, NULL), HWT_EINVAL);
    assert_int_equal(hwt_timer_start(t), HWT_ESTOPPED);
    hwt_timer_stats(t, &after);
    assert_int_equal(failures, 0);
    assert_true(stats_equal(&before, &after));
    assert_int_equal(hwt_pending_timeouts(t), 0);
    assert_int_equal(atomic_load(&dummy.ran), 0);
    assert_int_equal(atomic_load(&dummy.cb), 0);
    hwt_timeout **l = (hwt_timeout **)&dummy;
    size_t n = 9;
    assert_int_equal(hwt_stop(t, &l, &n), 0);
    assert_null(l);
    assert_int_equal(n, 0);
    hwtt_destroy(t);
}

/* ------------------------------------------- from a task: EDEADLK etc. */

static hwt_timer *task_timer;
static atomic_int task_stop_rc1, task_stop_rc2, task_stop_rc3;
static atomic_bool task_done;

static void misuse_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    hwt_timeout **l = (hwt_timeout **)&dummy;
    size_t n = 5;
    atomic_store(&task_stop_rc1, hwt_stop(task_timer, NULL, NULL));
    atomic_store(&task_stop_rc2, hwt_stop(task_timer, &l, &n));
    /* argument checks first: one out-pointer is EINVAL even here */
    atomic_store(&task_stop_rc3, hwt_stop(task_timer, &l, NULL));
    if (l != (hwt_timeout **)&dummy || n != 5)
        atomic_store(&task_stop_rc2, 1);
    hwt_timer_destroy(task_timer); /* logs an error, does nothing */
    atomic_store(&task_done, true);
}

static void test_stop_destroy_from_task(void **state)
{
    (void)state;
    static hwtt_log log;
    memset(&log, 0, sizeof log);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    task_timer = hwtt_track(hwtt_timer_opts(&o));
    atomic_store(&task_done, false);
    assert_int_equal(hwt_new_timeout(task_timer, misuse_task, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&task_done), hwtt_slack_ms(5000)));
    assert_int_equal(atomic_load(&task_stop_rc1), HWT_EDEADLK);
    assert_int_equal(atomic_load(&task_stop_rc2), HWT_EDEADLK);
    assert_int_equal(atomic_load(&task_stop_rc3), HWT_EINVAL);
    assert_int_equal(atomic_load(&log.count[HWT_LOG_ERROR]), 1);
    assert_works(task_timer); /* neither stopped nor destroyed */
    hwtt_destroy(task_timer);
}

/* ------------------------------------------------ NULL everywhere else */

static void test_null_handles_and_timers(void **state)
{
    (void)state;
    assert_false(hwt_timeout_cancel(NULL));
    assert_false(hwt_timeout_is_cancelled(NULL));
    assert_false(hwt_timeout_is_expired(NULL));
    assert_null(hwt_timeout_timer(NULL));
    assert_null(hwt_timeout_task(NULL));
    assert_null(hwt_timeout_arg(NULL));
    hwt_timeout_run(NULL);
    hwt_timeout_release(NULL);
    hwt_timeouts_release(NULL, 0);
    hwt_timer_destroy(NULL);
    assert_int_equal(hwt_timer_start(NULL), HWT_EINVAL);
    assert_int_equal(hwt_pending_timeouts(NULL), HWT_EINVAL);
    hwt_stats s, pattern;
    memset(&s, 0xA5, sizeof s);
    memset(&pattern, 0xA5, sizeof pattern);
    hwt_timer_stats(NULL, &s);
    assert_memory_equal(&s, &pattern, sizeof s);
    hwt_timer_stats(NULL, NULL);
    hwt_timer *t = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    hwt_timer_stats(t, NULL);
    /* strerror: any int gives a static text */
    const int codes[] = {0,
                         1,
                         -1,
                         INT_MIN,
                         INT_MAX,
                         HWT_EINVAL,
                         HWT_ENOMEM,
                         HWT_EREJECTED,
                         HWT_ESTOPPED,
                         HWT_EDEADLK,
                         HWT_ESYS,
                         -10000,
                         -10004};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *txt = hwt_strerror(codes[i]);
        assert_non_null(txt);
        assert_true(strlen(txt) > 0);
    }
    assert_works(t);
    hwtt_destroy(t);
}

/* hwt_timeout_run on a timeout that was not handed to an executor does
 * nothing: pending, expired, cancelled, handed back. */
static void test_run_without_executor_does_nothing(void **state)
{
    (void)state;
    hwt_timer *t = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    hwtt_rec r[4];
    memset(r, 0, sizeof r);
    hwt_timeout *pending = NULL, *expired = NULL, *cancelled = NULL, *handed = NULL;
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[0], 1, HWT_HOURS, &pending), 0);
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[1], 0, HWT_MILLISECONDS, &expired),
                     0);
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[2], 1, HWT_HOURS, &cancelled), 0);
    assert_int_equal(hwt_new_timeout_task(t, &hwtt_rec_task, &r[3], 1, HWT_HOURS, &handed), 0);
    assert_true(hwtt_wait_until(atomic_load(&r[1].ran) == 1, hwtt_slack_ms(5000)));
    assert_true(hwt_timeout_cancel(cancelled));
    assert_true(hwtt_wait_until(atomic_load(&r[2].cb) == 1, hwtt_slack_ms(5000)));
    hwt_timeout_run(pending);
    hwt_timeout_run(expired);
    hwt_timeout_run(cancelled);
    assert_int_equal(hwt_pending_timeouts(t), 2);
    assert_int_equal(atomic_load(&r[0].ran), 0);
    assert_int_equal(atomic_load(&r[1].ran), 1);
    assert_int_equal(atomic_load(&r[2].ran), 0);
    assert_false(hwt_timeout_is_expired(pending));
    assert_true(hwt_timeout_cancel(pending));
    hwt_timeout **l = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(t, &l, &n), 0);
    assert_int_equal(n, 1);
    hwt_timeout_run(l[0]);
    assert_int_equal(atomic_load(&r[3].ran), 0);
    hwt_timeouts_release(l, n);
    hwt_timeout_release(pending);
    hwt_timeout_release(expired);
    hwt_timeout_release(cancelled);
    hwt_timeout_release(handed);
    hwtt_destroy(t);
    for (int i = 0; i < 4; i++)
        assert_true(atomic_load(&r[i].ran) + atomic_load(&r[i].cb) <= 1);
}

int main(void)
{
    hwtt_watchdog(120);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_create_options_table, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_accepted_extremes_work, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_schedule_invalid_arguments, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_invalid_calls_do_not_start, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_extreme_delays_every_unit, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_rejected_changes_nothing, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_stop_invalid_arguments, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_after_stop_changes_nothing, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_stop_destroy_from_task, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_null_handles_and_timers, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_run_without_executor_does_nothing, hwtt_teardown_timers),
    };
    hwtt_apply_filters();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

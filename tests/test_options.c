/*
 * test_options.c - options, timer creation validation, error codes, version,
 * the 64-live-timers warning, and argument errors of hwt_new_timeout*.
 *
 * SPEC §1 (API, error codes), §3 (option validation, tick minimum, instance
 * limit). Tasks run on the worker: they only record into atomics; every
 * assertion is made on the test thread.
 */
#define _GNU_SOURCE
#include "helpers.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A value *timer must keep when hwt_timer_create fails. */
#define SENTINEL ((hwt_timer *)(uintptr_t)0x5a5a5a50u)

/* ------------------------------------------------------------ helpers */

static void expect_create_einval_line(const hwt_options *o, int line)
{
    hwt_timer *t = SENTINEL;
    int rc = hwt_timer_create(&t, o);
    if (rc != HWT_EINVAL || t != SENTINEL) {
        if (rc == 0 && t != SENTINEL && t != NULL)
            hwt_timer_destroy(t);
        fail_msg("line %d: hwt_timer_create returned %d (expected HWT_EINVAL=%d), "
                 "*timer %s",
                 line, rc, HWT_EINVAL, t == SENTINEL ? "untouched" : "CHANGED");
    }
}
#define expect_create_einval(o) expect_create_einval_line((o), __LINE__)

static void expect_create_ok_line(const hwt_options *o, int line)
{
    hwt_timer *t = NULL;
    int rc = hwt_timer_create(&t, o);
    if (rc != 0 || t == NULL)
        fail_msg("line %d: hwt_timer_create returned %d (expected 0)", line, rc);
    hwt_timer_destroy(t);
}
#define expect_create_ok(o) expect_create_ok_line((o), __LINE__)

static hwt_options opts_tick(uint64_t tick, hwt_unit unit, uint32_t wheel)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = tick;
    o.tick_unit = unit;
    o.ticks_per_wheel = wheel;
    return o;
}

/* Running under valgrind or a sanitizer (huge allocations are not cheap). */
static bool heavy_tools(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return true;
#endif
#endif
    const char *preload = getenv("LD_PRELOAD");
    return preload != NULL && strstr(preload, "vgpreload") != NULL;
}

/* -------------------------------------------------- the instance limit */

/* Must run first: it relies on no other timer being live. Creating the 65th
 * live timer logs exactly one error; the warning is once per process. */
#define NLIVE 70
static hwt_timer *live[NLIVE];

static void test_instance_limit_logs_once(void **state)
{
    (void)state;
    static hwtt_log log1, log2;
    memset(&log1, 0, sizeof log1);
    memset(&log2, 0, sizeof log2);

    hwt_options o;
    hwt_options_init(&o);
    o.log = hwtt_log_cb;
    o.log_ctx = &log1;
    for (int i = 0; i < 64; i++)
        live[i] = hwtt_timer_opts(&o);
    assert_int_equal(atomic_load(&log1.count[HWT_LOG_ERROR]), 0);
    live[64] = hwtt_timer_opts(&o); /* the 65th live timer */
    assert_int_equal(atomic_load(&log1.count[HWT_LOG_ERROR]), 1);
    for (int i = 65; i < NLIVE; i++)
        live[i] = hwtt_timer_opts(&o);
    assert_int_equal(atomic_load(&log1.count[HWT_LOG_ERROR]), 1);
    for (int i = 0; i < NLIVE; i++) {
        hwt_timer_destroy(live[i]);
        live[i] = NULL;
    }
    assert_int_equal(atomic_load(&log1.count[HWT_LOG_ERROR]), 1);
    assert_int_equal(atomic_load(&log1.count[HWT_LOG_WARN]), 0);

    /* once per process: going above 64 again does not log again */
    o.log_ctx = &log2;
    for (int i = 0; i < NLIVE; i++)
        live[i] = hwtt_timer_opts(&o);
    for (int i = 0; i < NLIVE; i++) {
        hwt_timer_destroy(live[i]);
        live[i] = NULL;
    }
    assert_int_equal(atomic_load(&log2.count[HWT_LOG_ERROR]), 0);
}

/* ------------------------------------------------------------ defaults */

static void test_options_init_defaults(void **state)
{
    (void)state;
    hwt_options o;
    memset(&o, 0xa5, sizeof o);
    hwt_options_init(&o);
    assert_int_equal(o.tick_duration, 100);
    assert_int_equal(o.tick_unit, HWT_MILLISECONDS);
    assert_int_equal(o.ticks_per_wheel, 512);
    assert_int_equal(o.max_pending_timeouts, -1);
    assert_int_equal(o.max_transfers_per_tick, 100000);
    assert_int_equal(o.sleep_mode, HWT_SLEEP_DEFAULT);
    assert_null(o.thread_attr);
    assert_non_null(o.thread_name);
    assert_string_equal(o.thread_name, "hwtimer");
    assert_null(o.executor);
    assert_null(o.executor_ctx);
    assert_null(o.log);
    assert_null(o.log_ctx);
}

/* ------------------------------------------------------- create: EINVAL */

static void test_create_null_out_pointer(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    assert_int_equal(hwt_timer_create(NULL, NULL), HWT_EINVAL);
    assert_int_equal(hwt_timer_create(NULL, &o), HWT_EINVAL);
}

static void test_create_bad_wheel(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.ticks_per_wheel = 0;
    expect_create_einval(&o);
    o.ticks_per_wheel = (1u << 30) + 1;
    expect_create_einval(&o);
    o.ticks_per_wheel = 1u << 31;
    expect_create_einval(&o);
    o.ticks_per_wheel = UINT32_MAX;
    expect_create_einval(&o);
}

static void test_create_bad_tick_and_transfers(void **state)
{
    (void)state;
    for (int u = HWT_NANOSECONDS; u <= HWT_DAYS; u++) {
        hwt_options o = opts_tick(0, (hwt_unit)u, 512);
        expect_create_einval(&o);
    }
    hwt_options o;
    hwt_options_init(&o);
    o.max_transfers_per_tick = 0;
    expect_create_einval(&o);
    o.max_transfers_per_tick = 1; /* the smallest valid value */
    expect_create_ok(&o);
}

static void test_create_bad_enums(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_unit = (hwt_unit)7;
    expect_create_einval(&o);
    o.tick_unit = (hwt_unit)-1;
    expect_create_einval(&o);
    o.tick_unit = (hwt_unit)1000;
    expect_create_einval(&o);

    hwt_options_init(&o);
    o.sleep_mode = (hwt_sleep_mode)4;
    expect_create_einval(&o);
    o.sleep_mode = (hwt_sleep_mode)42;
    expect_create_einval(&o);
    o.sleep_mode = (hwt_sleep_mode)-1;
    expect_create_einval(&o);

    /* every valid one is accepted */
    for (int m = HWT_SLEEP_DEFAULT; m <= HWT_SLEEP_WINDOWS; m++) {
        hwt_options_init(&o);
        o.sleep_mode = (hwt_sleep_mode)m;
        expect_create_ok(&o);
    }
    for (int u = HWT_NANOSECONDS; u <= HWT_DAYS; u++) {
        hwt_options p = opts_tick(1, (hwt_unit)u, 512);
        p.log = hwtt_log_cb; /* sub-minimum ticks warn: keep stderr quiet */
        static hwtt_log quiet;
        p.log_ctx = &quiet;
        expect_create_ok(&p);
    }
}

/* Netty's rule: tick (ns, saturated) >= INT64_MAX / rounded wheel length. */
static void test_create_tick_wheel_overflow(void **state)
{
    (void)state;
    hwt_options o;

    /* 2^30 buckets: INT64_MAX / 2^30 = 8589934591 ns */
    o = opts_tick(8589934591ull, HWT_NANOSECONDS, 1u << 30);
    expect_create_einval(&o);
    o = opts_tick(9, HWT_SECONDS, 1u << 30);
    expect_create_einval(&o);
    o = opts_tick(1, HWT_DAYS, 1u << 30);
    expect_create_einval(&o);
    /* 2^29 + 1 rounds up to 2^30 */
    o = opts_tick(8589934591ull, HWT_NANOSECONDS, (1u << 29) + 1);
    expect_create_einval(&o);

    /* 1024 buckets: INT64_MAX / 1024 = 9007199254740991 ns */
    o = opts_tick(9007199254740991ull, HWT_NANOSECONDS, 1024);
    expect_create_einval(&o);
    o = opts_tick(9007199254740990ull, HWT_NANOSECONDS, 1024);
    expect_create_ok(&o);
    /* 1000 rounds up to 1024: same boundary */
    o = opts_tick(9007199254740991ull, HWT_NANOSECONDS, 1000);
    expect_create_einval(&o);
    o = opts_tick(9007199254740990ull, HWT_NANOSECONDS, 1000);
    expect_create_ok(&o);
    /* 513 rounds up to 1024, not down to 512 (which would accept it) */
    o = opts_tick(9007199254740991ull, HWT_NANOSECONDS, 513);
    expect_create_einval(&o);
    /* the same boundary in microseconds: the unit is converted first */
    o = opts_tick(9007199254740ull, HWT_MICROSECONDS, 1024); /* ...740000 ns */
    expect_create_ok(&o);
    o = opts_tick(9007199254741ull, HWT_MICROSECONDS, 1024); /* ...741000 ns */
    expect_create_einval(&o);

    /* 1 bucket: INT64_MAX / 1 */
    o = opts_tick((uint64_t)INT64_MAX, HWT_NANOSECONDS, 1);
    expect_create_einval(&o);
    o = opts_tick((uint64_t)INT64_MAX - 1, HWT_NANOSECONDS, 1);
    expect_create_ok(&o);

    /* huge ticks saturate, then fail the rule (no wrap-around to small values) */
    o = opts_tick(UINT64_MAX, HWT_NANOSECONDS, 1);
    expect_create_einval(&o);
    o = opts_tick((uint64_t)INT64_MAX + 1, HWT_NANOSECONDS, 1);
    expect_create_einval(&o);
    o = opts_tick(1ull << 62, HWT_DAYS, 1);
    expect_create_einval(&o);
    o = opts_tick(UINT64_MAX, HWT_DAYS, 1);
    expect_create_einval(&o);
    /* 2^64 / 86400e9 rounds to ~213503 days: a wrapped product would be small */
    o = opts_tick(213504ull * 1000, HWT_DAYS, 1);
    expect_create_einval(&o);
    o = opts_tick(1ull << 44, HWT_SECONDS, 512);
    expect_create_einval(&o);

    /* big but valid: one day per tick, 512 buckets */
    o = opts_tick(1, HWT_DAYS, 512);
    expect_create_ok(&o);
}

static void test_create_detached_attr(void **state)
{
    (void)state;
    pthread_attr_t attr;
    assert_int_equal(pthread_attr_init(&attr), 0);
    assert_int_equal(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED), 0);
    hwt_options o;
    hwt_options_init(&o);
    o.thread_attr = &attr;
    expect_create_einval(&o);
    /* the same attr made joinable is fine */
    assert_int_equal(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_JOINABLE), 0);
    expect_create_ok(&o);
    pthread_attr_destroy(&attr);
}

/* ------------------------------------------------------ create: valid */

typedef struct ran_rec {
    atomic_int ran;
    int64_t scheduled_ns; /* written before scheduling */
    int64_t delay_ns;
    _Atomic int64_t ran_ns;
} ran_rec;

static void record_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    ran_rec *r = arg;
    atomic_store(&r->ran_ns, hwtt_now_ns());
    atomic_fetch_add(&r->ran, 1);
}

/* A tiny (possibly non-power-of-two) wheel works: several revolutions, no
 * timeout early, all run. */
#define NREC 12
static ran_rec recs[NREC];

static void run_small_wheel(uint32_t wheel)
{
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, wheel);
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < NREC; i++) {
        recs[i].delay_ns = (int64_t)(i * 3) * 1000000; /* 0 .. 33 ms */
        recs[i].scheduled_ns = hwtt_now_ns();
        assert_int_equal(hwt_new_timeout(t, record_run, &recs[i], i * 3, HWT_MILLISECONDS, NULL),
                         0);
    }
    bool all = hwtt_wait_until(({
                                   int n = 0;
                                   for (int i = 0; i < NREC; i++)
                                       n += atomic_load(&recs[i].ran);
                                   n == NREC;
                               }),
                               5000);
    assert_int_equal(hwt_stop(t, NULL, NULL), 0);
    hwt_timer_destroy(t);
    assert_true(all);
    for (int i = 0; i < NREC; i++) {
        assert_int_equal(atomic_load(&recs[i].ran), 1);
        /* never before the deadline */
        assert_true(atomic_load(&recs[i].ran_ns) >= recs[i].scheduled_ns + recs[i].delay_ns);
    }
}

static void test_create_valid_wheels(void **state)
{
    (void)state;
    static const uint32_t ok[] = {1, 2, 3, 5, 1000, 1024, 1u << 20, (1u << 20) + 1};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        hwt_options o = opts_tick(100, HWT_MILLISECONDS, ok[i]);
        expect_create_ok(&o);
    }
    /* 2^30 buckets, with the largest tick the rule allows for it
     * (INT64_MAX / 2^30 - 1 ns): a wheel of gigabytes of untouched calloc'ed
     * memory. Accepted: 0, or HWT_ENOMEM where the system cannot map it.
     * Skipped under valgrind and sanitizers, which would touch or shadow it. */
    if (!heavy_tools()) {
        hwt_options o = opts_tick(8589934590ull, HWT_NANOSECONDS, 1u << 30);
        hwt_timer *t = SENTINEL;
        int rc = hwt_timer_create(&t, &o);
        if (rc == 0)
            hwt_timer_destroy(t);
        else
            assert_ptr_equal(t, SENTINEL);
        if (rc != 0 && rc != HWT_ENOMEM)
            fail_msg("ticks_per_wheel 2^30: hwt_timer_create returned %d", rc);
    } else {
        print_message("  (2^30-bucket wheel not created under valgrind/sanitizers)\n");
    }
    run_small_wheel(1);
    run_small_wheel(3);
}

static void test_create_null_options_is_defaults(void **state)
{
    (void)state;
    hwt_timer *t = SENTINEL;
    assert_int_equal(hwt_timer_create(&t, NULL), 0);
    assert_non_null(t);
    assert_ptr_not_equal(t, SENTINEL);
    static atomic_int n;
    atomic_store(&n, 0);
    assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &n, 1, HWT_MILLISECONDS, NULL), 0);
    bool ran = hwtt_wait_until(atomic_load(&n) == 1, 5000);
    /* default thread name, worker alive */
    int named = hwtt_threads_named("hwtimer");
    hwt_timer_destroy(t);
    assert_true(ran);
    assert_true(named >= 1);
}

/* A tick below the sleep mode's minimum is raised, with one warning. */
static void check_tick_warning(uint64_t tick, hwt_unit unit, hwt_sleep_mode mode, int warns)
{
    static hwtt_log log;
    memset(&log, 0, sizeof log);
    hwt_options o = opts_tick(tick, unit, 64);
    o.sleep_mode = mode;
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *t = hwtt_timer_opts(&o);
    hwt_timer_destroy(t);
    if (atomic_load(&log.count[HWT_LOG_WARN]) != warns)
        fail_msg("tick %llu unit %d mode %d: %d warnings, expected %d", (unsigned long long)tick,
                 (int)unit, (int)mode, atomic_load(&log.count[HWT_LOG_WARN]), warns);
    assert_int_equal(atomic_load(&log.count[HWT_LOG_ERROR]), 0);
}

static void test_create_tick_minimum_warns(void **state)
{
    (void)state;
    check_tick_warning(1, HWT_NANOSECONDS, HWT_SLEEP_PRECISE, 1);
    check_tick_warning(999, HWT_NANOSECONDS, HWT_SLEEP_PRECISE, 1);
    check_tick_warning(1000, HWT_NANOSECONDS, HWT_SLEEP_PRECISE, 0);
    check_tick_warning(1, HWT_MICROSECONDS, HWT_SLEEP_PRECISE, 0);
    check_tick_warning(1, HWT_NANOSECONDS, HWT_SLEEP_DEFAULT, 1); /* PRECISE on POSIX */
    check_tick_warning(1, HWT_MICROSECONDS, HWT_SLEEP_DEFAULT, 0);
    check_tick_warning(999, HWT_MICROSECONDS, HWT_SLEEP_MILLIS, 1);
    check_tick_warning(1, HWT_MILLISECONDS, HWT_SLEEP_MILLIS, 0);
    check_tick_warning(999999, HWT_NANOSECONDS, HWT_SLEEP_WINDOWS, 1);
    check_tick_warning(1000000, HWT_NANOSECONDS, HWT_SLEEP_WINDOWS, 0);
    check_tick_warning(100, HWT_MILLISECONDS, HWT_SLEEP_MILLIS, 0);
}

static void test_max_pending_unlimited(void **state)
{
    (void)state;
    static const int64_t unlimited[] = {0, -1, -2, INT64_MIN};
    for (size_t k = 0; k < sizeof unlimited / sizeof unlimited[0]; k++) {
        hwt_options o;
        hwt_options_init(&o);
        o.max_pending_timeouts = unlimited[k];
        hwt_timer *t = hwtt_timer_opts(&o);
        int bad = 0;
        for (int i = 0; i < 1000; i++)
            if (hwt_new_timeout(t, hwtt_count_task, NULL, 1, HWT_HOURS, NULL) != 0)
                bad++;
        int64_t pending = hwt_pending_timeouts(t);
        hwt_stats s;
        hwt_timer_stats(t, &s);
        assert_int_equal(hwt_stop(t, NULL, NULL), 0);
        hwt_timer_destroy(t);
        assert_int_equal(bad, 0);
        assert_int_equal(pending, 1000);
        assert_int_equal(s.rejected, 0);
        assert_int_equal(s.scheduled, 1000);
    }
    /* and a positive limit does limit (so the above is meaningful) */
    hwt_options o;
    hwt_options_init(&o);
    o.max_pending_timeouts = 1;
    hwt_timer *t = hwtt_timer_opts(&o);
    int rc1 = hwt_new_timeout(t, hwtt_count_task, NULL, 1, HWT_HOURS, NULL);
    int rc2 = hwt_new_timeout(t, hwtt_count_task, NULL, 1, HWT_HOURS, NULL);
    int64_t pending = hwt_pending_timeouts(t);
    hwt_timer_destroy(t);
    assert_int_equal(rc1, 0);
    assert_int_equal(rc2, HWT_EREJECTED);
    assert_int_equal(pending, 1);
}

/* ----------------------------------------------------- codes and texts */

static void test_error_codes(void **state)
{
    (void)state;
    assert_int_equal(HWT_EINVAL, -EINVAL);
    assert_int_equal(HWT_ENOMEM, -ENOMEM);
    assert_int_equal(HWT_EDEADLK, -EDEADLK);
    const int codes[] = {HWT_EINVAL,   HWT_ENOMEM,  HWT_EREJECTED,
                         HWT_ESTOPPED, HWT_EDEADLK, HWT_ESYS};
    for (int i = 0; i < 6; i++) {
        assert_true(codes[i] < 0);
        for (int j = i + 1; j < 6; j++)
            assert_int_not_equal(codes[i], codes[j]);
    }
    assert_int_not_equal(HWT_EREJECTED, -EAGAIN);
}

static void test_strerror(void **state)
{
    (void)state;
    const int codes[] = {HWT_EINVAL,   HWT_ENOMEM,  HWT_EREJECTED,
                         HWT_ESTOPPED, HWT_EDEADLK, HWT_ESYS};
    const char *txt[6];
    for (int i = 0; i < 6; i++) {
        txt[i] = hwt_strerror(codes[i]);
        assert_non_null(txt[i]);
        assert_true(strlen(txt[i]) > 0);
        /* static: the same text twice */
        assert_string_equal(hwt_strerror(codes[i]), txt[i]);
    }
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            assert_string_not_equal(txt[i], txt[j]);
    const int unknown[] = {1, -9999, 12345, INT_MIN, INT_MAX, -EPERM};
    for (size_t k = 0; k < sizeof unknown / sizeof unknown[0]; k++) {
        const char *u = hwt_strerror(unknown[k]);
        assert_non_null(u);
        assert_true(strlen(u) > 0);
        for (int i = 0; i < 6; i++)
            assert_string_not_equal(u, txt[i]);
    }
    assert_non_null(hwt_strerror(0));
}

static void test_version(void **state)
{
    (void)state;
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", HWT_VERSION_MAJOR, HWT_VERSION_MINOR,
             HWT_VERSION_PATCH);
    assert_non_null(hwt_version());
    assert_string_equal(hwt_version(), want);
}

/* ------------------------------------------- hwt_new_timeout arguments */

static void test_new_timeout_bad_args(void **state)
{
    (void)state;
    static atomic_int n;
    atomic_store(&n, 0);
    hwt_options o;
    hwt_options_init(&o);
    o.thread_name = "hwt-opt-badargs";
    hwt_timer *t = hwtt_timer_opts(&o);
    hwt_timeout *h = NULL;
    hwt_task good = {.run = hwtt_count_task, .cancelled = NULL};
    hwt_task norun = {.run = NULL, .cancelled = hwtt_count_task};

    assert_int_equal(hwt_new_timeout(NULL, hwtt_count_task, &n, 1, HWT_MILLISECONDS, &h),
                     HWT_EINVAL);
    assert_null(h);
    assert_int_equal(hwt_new_timeout(t, NULL, &n, 1, HWT_MILLISECONDS, &h), HWT_EINVAL);
    assert_null(h);
    assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &n, 1, (hwt_unit)7, &h), HWT_EINVAL);
    assert_null(h);
    assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &n, 1, (hwt_unit)-1, NULL), HWT_EINVAL);
    assert_int_equal(hwt_new_timeout_task(NULL, &good, &n, 1, HWT_MILLISECONDS, &h), HWT_EINVAL);
    assert_null(h);
    assert_int_equal(hwt_new_timeout_task(t, NULL, &n, 1, HWT_MILLISECONDS, &h), HWT_EINVAL);
    assert_null(h);
    assert_int_equal(hwt_new_timeout_task(t, &norun, &n, 1, HWT_MILLISECONDS, &h), HWT_EINVAL);
    assert_null(h);
    assert_int_equal(hwt_new_timeout_task(t, &good, &n, 1, (hwt_unit)42, NULL), HWT_EINVAL);

    /* nothing scheduled, nothing started */
    assert_int_equal(hwt_pending_timeouts(t), 0);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    assert_int_equal(s.scheduled, 0);
    assert_int_equal(s.rejected, 0);
    assert_int_equal(s.pending, 0);
    assert_int_equal(hwtt_threads_named("hwt-opt-badargs"), 0);

    /* the timer is still usable */
    assert_int_equal(hwt_new_timeout_task(t, &good, &n, 0, HWT_MILLISECONDS, NULL), 0);
    bool ran = hwtt_wait_until(atomic_load(&n) == 1, 5000);
    hwt_timer_destroy(t);
    assert_true(ran);
    assert_int_equal(atomic_load(&n), 1);
}

static void test_null_timer_queries(void **state)
{
    (void)state;
    assert_int_equal(hwt_pending_timeouts(NULL), HWT_EINVAL);
    hwt_stats s, before;
    memset(&s, 0x3c, sizeof s);
    memcpy(&before, &s, sizeof s);
    hwt_timer_stats(NULL, &s);
    assert_memory_equal(&s, &before, sizeof s);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 64);
    hwt_timer_stats(t, NULL); /* does nothing */
    hwt_timer_stats(t, &s);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.scheduled, 0);
    assert_int_equal(s.ticks, 0);
    hwt_timeout **list = (hwt_timeout **)SENTINEL;
    size_t count = 77;
    assert_int_equal(hwt_stop(NULL, &list, &count), HWT_EINVAL);
    assert_int_equal(hwt_stop(NULL, NULL, NULL), HWT_EINVAL);
    hwt_timer_destroy(NULL); /* does nothing */
    hwt_timer_destroy(t);
}

/* Every int64_t delay in every unit is accepted (§3): huge ones mean
 * "never", negative ones fire on the next tick. */
static void test_new_timeout_any_delay_accepted(void **state)
{
    (void)state;
    static atomic_int neg_ran, pos_ran;
    atomic_store(&neg_ran, 0);
    atomic_store(&pos_ran, 0);
    hwt_timer *t = hwtt_timer(10, HWT_MILLISECONDS, 64);
    hwt_timeout *far[7] = {0};
    int bad = 0;
    for (int u = HWT_NANOSECONDS; u <= HWT_DAYS; u++) {
        if (hwt_new_timeout(t, hwtt_count_task, &pos_ran, INT64_MAX, (hwt_unit)u, &far[u]) != 0)
            bad++;
        if (hwt_new_timeout(t, hwtt_count_task, &neg_ran, INT64_MIN, (hwt_unit)u, NULL) != 0)
            bad++;
        if (hwt_new_timeout(t, hwtt_count_task, &neg_ran, -1, (hwt_unit)u, NULL) != 0)
            bad++;
    }
    bool ran = hwtt_wait_until(atomic_load(&neg_ran) == 14, 5000);
    int64_t pending = hwt_pending_timeouts(t);
    int cancelled = 0;
    for (int u = 0; u < 7; u++)
        cancelled += hwt_timeout_cancel(far[u]);
    hwt_timer_destroy(t);
    for (int u = 0; u < 7; u++)
        hwt_timeout_release(far[u]);
    assert_int_equal(bad, 0);
    assert_true(ran);
    assert_int_equal(pending, 7);
    assert_int_equal(cancelled, 7);
    assert_int_equal(atomic_load(&pos_ran), 0);
}

int main(void)
{
    hwtt_watchdog(150);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        /* first: it needs to be the one that pushes the live count past 64 */
        cmocka_unit_test(test_instance_limit_logs_once),
        cmocka_unit_test(test_options_init_defaults),
        cmocka_unit_test(test_create_null_out_pointer),
        cmocka_unit_test(test_create_bad_wheel),
        cmocka_unit_test(test_create_bad_tick_and_transfers),
        cmocka_unit_test(test_create_bad_enums),
        cmocka_unit_test(test_create_tick_wheel_overflow),
        cmocka_unit_test(test_create_detached_attr),
        cmocka_unit_test(test_create_valid_wheels),
        cmocka_unit_test(test_create_null_options_is_defaults),
        cmocka_unit_test(test_create_tick_minimum_warns),
        cmocka_unit_test(test_max_pending_unlimited),
        cmocka_unit_test(test_error_codes),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_new_timeout_bad_args),
        cmocka_unit_test(test_null_timer_queries),
        cmocka_unit_test(test_new_timeout_any_delay_accepted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

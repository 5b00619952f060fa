/*
 * test_faults.c - faults: every allocation site made to fail, the worker
 * thread that cannot be created, a task that runs long, a task that
 * schedules a million timeouts.
 *
 * Allocation failures go through the library's test hook
 * (hwt__set_alloc_fail_hook, src/alloc.h): "fail the k-th allocation at site
 * S", for k = 1, 2, ... until the operation makes fewer than k allocations
 * there and succeeds. Each failure must give the documented error, change
 * nothing (no handle, pending and stats unchanged, nothing scheduled), leak
 * nothing (ASan's leak check; in the plain build also a count of the heap
 * blocks outstanding, see heap_blocks), and the timer must keep working once the hook is gone.
 * The last test prints which sites were covered.
 *
 * Scale: the million-timeout test schedules HWT_FAULTS_MILLION timeouts
 * (default 1000000; 200000 under TSan - 1M need ~1 GB of its shadow memory -
 * and when HWT_TEST_SLOW is set or HWT_TEST_SLOWDOWN >= 10).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "helpers.h"
#include "internal.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FAULTS_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FAULTS_SANITIZED 1
#endif
#if defined(__SANITIZE_THREAD__)
#define FAULTS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FAULTS_TSAN 1
#endif
#endif

static const char *const site_names[HWT_SITE_COUNT] = {
    [HWT_SITE_TIMER] = "TIMER",
    [HWT_SITE_WHEEL] = "WHEEL",
    [HWT_SITE_TIMEOUT_POOL] = "TIMEOUT_POOL",
    [HWT_SITE_STOP_LIST] = "STOP_LIST",
    [HWT_SITE_TASKS] = "TASKS",
    [HWT_SITE_THREAD_CACHES] = "THREAD_CACHES",
};

/* A site added to alloc.h later still gets a name (and is tried by the
 * create and schedule loops, which go over every site). */
static const char *site_name(int site)
{
    static char buf[HWT_SITE_COUNT][16];
    if (site_names[site] != NULL)
        return site_names[site];
    snprintf(buf[site], sizeof buf[site], "site %d", site);
    return buf[site];
}

/* ------------------------------------------------------------- the hook */

enum { HOOK_KTH, HOOK_ALWAYS, HOOK_RANDOM };

static atomic_int hook_mode;
static atomic_int hook_site;
static atomic_long hook_k;  /* HOOK_KTH: fail the k-th call at hook_site (1-based) */
static atomic_int hook_pct; /* HOOK_RANDOM: percent of pool allocations to fail */
static atomic_long site_calls[HWT_SITE_COUNT];
static atomic_long site_injected[HWT_SITE_COUNT]; /* since arm() */

/* Sites where an injected failure was seen to give the documented result,
 * per operation (create, schedule, stop). */
static int covered_create[HWT_SITE_COUNT], covered_schedule[HWT_SITE_COUNT],
    covered_stop[HWT_SITE_COUNT];

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* When hook_only_flagged is set, only allocations on threads that set
 * hook_flag_here are counted and may fail (the test thread, or a task). */
static atomic_bool hook_only_flagged;
static _Thread_local bool hook_flag_here;

static int fault_hook(hwt__alloc_site site)
{
    if ((int)site < 0 || site >= HWT_SITE_COUNT)
        return 0;
    if (atomic_load(&hook_only_flagged) && !hook_flag_here)
        return 0;
    long n = atomic_fetch_add(&site_calls[site], 1) + 1;
    int fail = 0;
    switch (atomic_load(&hook_mode)) {
    case HOOK_KTH: fail = (int)site == atomic_load(&hook_site) && n == atomic_load(&hook_k); break;
    case HOOK_ALWAYS: fail = (int)site == atomic_load(&hook_site); break;
    case HOOK_RANDOM: /* the 2nd call always fails, so any run that grows a pool twice
                         meets at least one failure */
        fail = site == HWT_SITE_TIMEOUT_POOL &&
               (n == 2 || (int)(mix64((uint64_t)n * 31 + site) % 100) < atomic_load(&hook_pct));
        break;
    }
    if (fail)
        atomic_fetch_add(&site_injected[site], 1);
    return fail;
}

static void arm(int mode, int site, long k)
{
    for (int s = 0; s < HWT_SITE_COUNT; s++) {
        atomic_store(&site_calls[s], 0);
        atomic_store(&site_injected[s], 0);
    }
    atomic_store(&hook_mode, mode);
    atomic_store(&hook_site, site);
    atomic_store(&hook_k, k);
    hwt__set_alloc_fail_hook(fault_hook);
}

static void disarm(void)
{
    hwt__set_alloc_fail_hook(NULL);
}

static int teardown(void **state)
{
    disarm();
    atomic_store(&hook_only_flagged, false);
    hook_flag_here = false;
    return hwtt_teardown_timers(state);
}

/* Leak accounting for the plain build: this executable interposes glibc's
 * malloc family (glibc supports replacing malloc, and its own internal calls
 * go through these symbols too) and counts the blocks outstanding. An
 * operation that failed must leave the count where it was. The sanitizers
 * bring their own allocators (ASan's leak check covers those builds):
 * heap_blocks() is -1 there and the checks are skipped. */
#ifndef FAULTS_SANITIZED
extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *p);
static atomic_long live_blocks;

void *malloc(size_t size)
{
    void *p = __libc_malloc(size);
    if (p != NULL)
        atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

void *calloc(size_t count, size_t size)
{
    void *p = __libc_calloc(count, size);
    if (p != NULL)
        atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

void *realloc(void *old, size_t size)
{
    void *p = __libc_realloc(old, size);
    if (old == NULL && p != NULL)
        atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    else if (old != NULL && size == 0 && p == NULL) /* glibc: freed */
        atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

void *memalign(size_t alignment, size_t size)
{
    void *p = __libc_memalign(alignment, size);
    if (p != NULL)
        atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

void *aligned_alloc(size_t alignment, size_t size)
{
    return memalign(alignment, size);
}

int posix_memalign(void **out, size_t alignment, size_t size)
{
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0)
        return EINVAL;
    void *p = memalign(alignment, size);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

static _Atomic(void *) watched;
static atomic_bool watched_was_freed;

/* Watches for free(p) (NULL: stop watching). */
static void watch_free(void *p)
{
    atomic_store(&watched_was_freed, false);
    atomic_store(&watched, p);
}

static bool watched_freed(void)
{
    return atomic_load(&watched_was_freed);
}

void free(void *p)
{
    if (p == NULL)
        return;
    if (p == atomic_load_explicit(&watched, memory_order_relaxed))
        atomic_store(&watched_was_freed, true);
    atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    __libc_free(p);
}

static long heap_blocks(void)
{
    return atomic_load(&live_blocks);
}
#else
static long heap_blocks(void)
{
    return -1;
}
static void watch_free(void *p)
{
    (void)p;
}
static bool watched_freed(void)
{
    return false;
}
#endif

/* ------------------------------------------------------------- records */

typedef struct rec {
    atomic_int ran;
    atomic_int cb;
    _Atomic int64_t ran_at; /* hwtt_now_ns() at the start of run */
} rec;

static void rec_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    rec *r = arg;
    atomic_store(&r->ran_at, hwtt_now_ns());
    atomic_fetch_add(&r->ran, 1);
}

static void rec_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((rec *)arg)->cb, 1);
}

static const hwt_task rec_task = {.run = rec_run, .cancelled = rec_cancelled};

static hwt_timer *small_timer(hwtt_log *log)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_MILLISECONDS;
    o.ticks_per_wheel = 64;
    o.thread_name = "hwt-faults";
    if (log != NULL) {
        o.log = hwtt_log_cb;
        o.log_ctx = log;
    }
    return hwtt_track(hwtt_timer_opts(&o));
}

/* ---------------------------------------------------------- create */

/* hwt_timer_create with the k-th allocation of each site failing: ENOMEM,
 * *timer untouched, nothing leaked; succeeds once k passes the number of
 * allocations the create makes at that site. */
static void test_create_fails_at_every_site(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.ticks_per_wheel = 4096; /* a wheel big enough to need its own allocations */
    /* warm up: first-use allocations of libc/the test (stdio, TLS keys) */
    hwt_timer *warm = NULL;
    assert_int_equal(hwt_timer_create(&warm, &o), 0);
    hwt_timer_destroy(warm);
    print_message("  create:");
    for (int site = 0; site < HWT_SITE_COUNT; site++) {
        long k;
        for (k = 1; k < 1000; k++) {
            long before = heap_blocks();
            hwt_timer *t = (hwt_timer *)&k; /* sentinel: must stay untouched */
            arm(HOOK_KTH, site, k);
            int rc = hwt_timer_create(&t, &o);
            disarm();
            long calls = atomic_load(&site_calls[site]);
            if (calls < k) { /* the k-th allocation never happened */
                assert_int_equal(rc, 0);
                assert_true(t != (hwt_timer *)&k);
                assert_int_equal(atomic_load(&site_injected[site]), 0);
                hwt_timer_destroy(t);
                break;
            }
            assert_int_equal(atomic_load(&site_injected[site]), 1);
            assert_int_equal(rc, HWT_ENOMEM);
            assert_ptr_equal(t, (hwt_timer *)&k);
            assert_int_equal(heap_blocks(), before); /* nothing leaked */
            covered_create[site]++;
        }
        print_message(" %s x%ld", site_name(site), k - 1);
    }
    print_message("\n");
    /* every site of the create was reached */
    assert_true(covered_create[HWT_SITE_TIMER] >= 1);
    assert_true(covered_create[HWT_SITE_WHEEL] >= 1);
}

/* Failed creates are not live timers: 100 of them, then 64 real ones, log no
 * "too many timers" error. */
static void test_failed_creates_not_counted_live(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    arm(HOOK_ALWAYS, HWT_SITE_WHEEL, 0);
    for (int i = 0; i < 100; i++) {
        hwt_timer *t = NULL;
        assert_int_equal(hwt_timer_create(&t, &o), HWT_ENOMEM);
        assert_null(t);
    }
    disarm();
    static hwtt_log log;
    memset(&log, 0, sizeof log);
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *ts[HWT_MAX_LIVE_TIMERS];
    for (int i = 0; i < HWT_MAX_LIVE_TIMERS; i++)
        assert_int_equal(hwt_timer_create(&ts[i], &o), 0);
    int errors = atomic_load(&log.count[HWT_LOG_ERROR]);
    for (int i = 0; i < HWT_MAX_LIVE_TIMERS; i++)
        hwt_timer_destroy(ts[i]);
    assert_int_equal(errors, 0);
}

/* ---------------------------------------------------------- schedule */

#define SCHED_N 1200

static rec sched_rec[SCHED_N + 1];

/* Schedules SCHED_N far-future timeouts on a fresh, started timer with the
 * k-th allocation at `site` failing. Returns the number of allocations made
 * at the site (so the caller knows when k passed them all). */
static long schedule_with_kth_failure(int site, long k, bool *failed_once)
{
    memset(sched_rec, 0, sizeof sched_rec);
    hwt_timer *t = small_timer(NULL);
    assert_int_equal(hwt_timer_start(t), 0);
    hook_flag_here = true; /* count and fail this thread's allocations only */
    atomic_store(&hook_only_flagged, true);
    arm(HOOK_KTH, site, k);
    int enomem = 0, other = 0, failed_at = -1, bad_out = 0, changed = 0;
    long ok = 0;
    for (int i = 0; i < SCHED_N; i++) {
        hwt_timeout *h = (hwt_timeout *)&sched_rec[SCHED_N]; /* sentinel */
        int64_t pending_before = hwt_pending_timeouts(t);
        hwt_stats sb, sa;
        hwt_timer_stats(t, &sb);
        int rc = (i % 2) ? hwt_new_timeout(t, rec_run, &sched_rec[i], 1, HWT_HOURS, &h)
                         : hwt_new_timeout_task(t, &rec_task, &sched_rec[i], 1, HWT_HOURS, &h);
        hwt_timer_stats(t, &sa);
        if (rc == 0) {
            ok++;
            hwt_timeout_release(h);
            continue;
        }
        if (rc == HWT_ENOMEM) {
            enomem++;
            failed_at = i;
        } else {
            other++;
        }
        bad_out += h != (hwt_timeout *)&sched_rec[SCHED_N];
        changed += hwt_pending_timeouts(t) != pending_before || sa.scheduled != sb.scheduled ||
                   sa.pending != sb.pending || sa.cancelled != sb.cancelled;
    }
    disarm();
    atomic_store(&hook_only_flagged, false);
    hook_flag_here = false;
    long calls = atomic_load(&site_calls[site]);
    long injected = atomic_load(&site_injected[site]);

    /* the timer keeps working: a short one runs */
    rec probe;
    memset(&probe, 0, sizeof probe);
    assert_int_equal(hwt_new_timeout(t, rec_run, &probe, 1, HWT_MILLISECONDS, NULL), 0);
    bool probe_ran = hwtt_wait_until(atomic_load(&probe.ran) == 1, hwtt_slack_ms(5000));
    hwt_stats s;
    hwt_timer_stats(t, &s);
    int64_t pending = hwt_pending_timeouts(t);

    /* nothing half-scheduled: the stop hands back exactly the successes */
    hwt_timeout **list = NULL;
    size_t n = 0;
    int stop_rc = hwt_stop(t, &list, &n);
    int in_list_failed = 0, dup = 0;
    for (size_t j = 0; j < n; j++) {
        rec *r = hwt_timeout_arg(list[j]);
        if (r == &sched_rec[failed_at >= 0 ? failed_at : 0] && failed_at >= 0)
            in_list_failed++;
        if (atomic_fetch_add(&r->cb, 100) >= 100) /* marks it; a second mark is a duplicate */
            dup++;
    }
    hwt_timeouts_release(list, n);
    hwtt_destroy(t);

    assert_int_equal(other, 0);
    assert_int_equal(bad_out, 0);
    assert_int_equal(changed, 0);
    assert_int_equal(enomem, injected);
    assert_true(injected <= 1);
    assert_true(probe_ran);
    assert_int_equal(stop_rc, 0);
    assert_int_equal((long)n, ok);
    assert_int_equal(in_list_failed, 0);
    assert_int_equal(dup, 0);
    assert_int_equal(pending, ok);
    assert_int_equal(s.scheduled, (uint64_t)ok + 1);
    *failed_once = enomem == 1;
    return calls;
}

static void test_schedule_fails_at_every_site(void **state)
{
    (void)state;
    print_message("  schedule (%d timeouts per timer):", SCHED_N);
    for (int site = 0; site < HWT_SITE_COUNT; site++) {
        long k;
        for (k = 1; k < 1000; k++) {
            bool failed = false;
            long calls = schedule_with_kth_failure(site, k, &failed);
            if (calls < k) {
                assert_false(failed);
                break;
            }
            assert_true(failed);
            covered_schedule[site]++;
        }
        print_message(" %s x%ld", site_name(site), k - 1);
    }
    print_message("\n");
    assert_true(covered_schedule[HWT_SITE_TIMEOUT_POOL] >= 1);
    assert_true(covered_schedule[HWT_SITE_TASKS] >= 1);
}

/* From a task on the worker: an allocation that fails there gives the task
 * ENOMEM (and nothing is scheduled); the worker carries on. Only the
 * worker's allocations are failed (hook_only_flagged + a thread-local flag
 * the task sets). Whether the worker needs to allocate at all depends on
 * what it has cached: if nothing was injected, the schedule must succeed. */
static atomic_int task_rc;
static rec task_child;
static hwt_timer *task_timer;
static bool task_with_cb;

static void scheduling_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    hwt_timeout *h = (hwt_timeout *)&task_child;
    hook_flag_here = true;
    int rc = task_with_cb
                 ? hwt_new_timeout_task(task_timer, &rec_task, &task_child, 0, HWT_MILLISECONDS, &h)
                 : hwt_new_timeout(task_timer, rec_run, &task_child, 0, HWT_MILLISECONDS, &h);
    hook_flag_here = false;
    if (rc != 0 && h != (hwt_timeout *)&task_child)
        rc = 12345; /* the out-pointer was written on failure */
    if (rc == 0)
        hwt_timeout_release(h);
    atomic_store(&task_rc, rc);
}

static void test_schedule_fails_in_task(void **state)
{
    (void)state;
    static const int sites[] = {HWT_SITE_TIMEOUT_POOL, HWT_SITE_TASKS};
    for (size_t si = 0; si < sizeof sites / sizeof sites[0]; si++) {
        int site = sites[si];
        task_with_cb = site == HWT_SITE_TASKS; /* a (run, cancelled) pair new to the timer */
        memset(&task_child, 0, sizeof task_child);
        atomic_store(&task_rc, 1);
        task_timer = small_timer(NULL);
        atomic_store(&hook_only_flagged, true);
        arm(HOOK_ALWAYS, site, 0);
        assert_int_equal(
            hwt_new_timeout(task_timer, scheduling_task, NULL, 0, HWT_MILLISECONDS, NULL), 0);
        bool done = hwtt_wait_until(atomic_load(&task_rc) != 1, hwtt_slack_ms(5000));
        long injected = atomic_load(&site_injected[site]);
        disarm();
        atomic_store(&hook_only_flagged, false);
        int rc = atomic_load(&task_rc);
        assert_true(done);
        if (injected > 0) {
            assert_int_equal(rc, HWT_ENOMEM);
            covered_schedule[site]++;
        } else {
            assert_int_equal(rc, 0);
            assert_true(hwtt_wait_until(atomic_load(&task_child.ran) == 1, hwtt_slack_ms(5000)));
        }
        /* the timer keeps working */
        rec probe;
        memset(&probe, 0, sizeof probe);
        assert_int_equal(hwt_new_timeout(task_timer, rec_run, &probe, 1, HWT_MILLISECONDS, NULL),
                         0);
        assert_true(hwtt_wait_until(atomic_load(&probe.ran) == 1, hwtt_slack_ms(5000)));
        hwt_stats s;
        hwt_timer_stats(task_timer, &s);
        hwtt_destroy(task_timer);
        if (rc == HWT_ENOMEM) {
            assert_int_equal(atomic_load(&task_child.ran), 0);
            assert_int_equal(s.scheduled, 2); /* the task and the probe */
        }
        print_message("  schedule from a task, worker's %s allocations failing: %s\n",
                      site_name(site), rc == HWT_ENOMEM ? "HWT_ENOMEM" : "none needed (0)");
    }
}

/* Interned (run, cancelled) pairs: 70 distinct cancelled callbacks need
 * three blocks of pairs; the k-th block allocation fails. The schedule that
 * needed it gets HWT_ENOMEM and changes nothing; its pair works once the
 * hook is gone; every other timeout keeps its own callbacks. */
static atomic_int cb_id_seen[70];
/* clang-format off */
#define CB_FN(n)                                                                                   \
    static void cb_fn_##n(hwt_timeout *timeout, void *arg)                                         \
    {                                                                                              \
        (void)timeout;                                                                             \
        atomic_fetch_add(&((rec *)arg)->cb, 1);                                                    \
        atomic_fetch_add(&cb_id_seen[n], 1);                                                       \
    }
#define CB_FN10(t)                                                                                 \
    CB_FN(t##0) CB_FN(t##1) CB_FN(t##2) CB_FN(t##3) CB_FN(t##4)                                    \
    CB_FN(t##5) CB_FN(t##6) CB_FN(t##7) CB_FN(t##8) CB_FN(t##9)
CB_FN(0) CB_FN(1) CB_FN(2) CB_FN(3) CB_FN(4) CB_FN(5) CB_FN(6) CB_FN(7) CB_FN(8) CB_FN(9)
CB_FN10(1) CB_FN10(2) CB_FN10(3) CB_FN10(4) CB_FN10(5) CB_FN10(6)
#define CB_REF(n) cb_fn_##n
#define CB_REF10(t)                                                                                \
    CB_REF(t##0), CB_REF(t##1), CB_REF(t##2), CB_REF(t##3), CB_REF(t##4),                          \
    CB_REF(t##5), CB_REF(t##6), CB_REF(t##7), CB_REF(t##8), CB_REF(t##9)
static const hwt_task_fn cb_fns[70] = {
    CB_REF(0), CB_REF(1), CB_REF(2), CB_REF(3), CB_REF(4),
    CB_REF(5), CB_REF(6), CB_REF(7), CB_REF(8), CB_REF(9),
    CB_REF10(1), CB_REF10(2), CB_REF10(3), CB_REF10(4), CB_REF10(5), CB_REF10(6)};
/* clang-format on */

static rec pair_rec[70];

static void test_task_pairs_fail_at_every_k(void **state)
{
    (void)state;
    long k;
    for (k = 1; k < 100; k++) {
        memset(pair_rec, 0, sizeof pair_rec);
        for (int i = 0; i < 70; i++)
            atomic_store(&cb_id_seen[i], 0);
        hwt_timer *t = small_timer(NULL);
        assert_int_equal(hwt_timer_start(t), 0);
        hook_flag_here = true;
        atomic_store(&hook_only_flagged, true);
        arm(HOOK_KTH, HWT_SITE_TASKS, k);
        int failed_at = -1, enomem = 0, other = 0, bad_out = 0;
        for (int i = 0; i < 70; i++) {
            hwt_task task = {.run = rec_run, .cancelled = cb_fns[i]};
            hwt_timeout *h = (hwt_timeout *)&pair_rec[0];
            int64_t before = hwt_pending_timeouts(t);
            int rc = hwt_new_timeout_task(t, &task, &pair_rec[i], 1, HWT_HOURS, &h);
            if (rc == 0) {
                hwt_timeout_release(h);
                continue;
            }
            enomem += rc == HWT_ENOMEM;
            other += rc != HWT_ENOMEM;
            bad_out += h != (hwt_timeout *)&pair_rec[0] || hwt_pending_timeouts(t) != before;
            failed_at = i;
        }
        disarm();
        atomic_store(&hook_only_flagged, false);
        hook_flag_here = false;
        long calls = atomic_load(&site_calls[HWT_SITE_TASKS]);
        long injected = atomic_load(&site_injected[HWT_SITE_TASKS]);
        int64_t pending = hwt_pending_timeouts(t);
        /* the failed pair works now */
        if (failed_at >= 0) {
            hwt_task task = {.run = rec_run, .cancelled = cb_fns[failed_at]};
            assert_int_equal(
                hwt_new_timeout_task(t, &task, &pair_rec[failed_at], 1, HWT_HOURS, NULL), 0);
        }
        hwtt_destroy(t); /* drops all: each one's own cancelled callback, once */
        int wrong = 0;
        for (int i = 0; i < 70; i++)
            wrong += atomic_load(&pair_rec[i].cb) != 1 || atomic_load(&cb_id_seen[i]) != 1 ||
                     atomic_load(&pair_rec[i].ran) != 0;
        assert_int_equal(other, 0);
        assert_int_equal(bad_out, 0);
        assert_int_equal(enomem, injected);
        assert_int_equal(pending, 70 - enomem);
        assert_int_equal(wrong, 0);
        if (injected > 0)
            covered_schedule[HWT_SITE_TASKS]++;
        if (calls < k)
            break;
    }
    print_message("  70 distinct (run, cancelled) pairs: TASKS x%ld\n", k - 1);
    assert_true(k > 2); /* more than one block was needed */
}

/* Random failures of the pool sites while 4 threads schedule: every call
 * gives 0 or ENOMEM; no more ENOMEMs than injected failures; the successes
 * all run exactly once, the failures never; nothing leaked (ASan). */
#define RF_THREADS 4
#define RF_PER 4000
static rec rf_rec[RF_THREADS * RF_PER];
static atomic_int rf_rc[RF_THREADS * RF_PER];
static hwt_timer *rf_timer;

static void *rf_producer(void *arg)
{
    int p = (int)(intptr_t)arg;
    for (int k = 0; k < RF_PER; k++) {
        int i = p * RF_PER + k;
        hwt_timeout *h = NULL;
        bool keep = k % 3 == 0;
        int rc = (k % 2) ? hwt_new_timeout_task(rf_timer, &rec_task, &rf_rec[i],
                                                (int64_t)(mix64((uint64_t)i) % 3000),
                                                HWT_MICROSECONDS, keep ? &h : NULL)
                         : hwt_new_timeout(rf_timer, rec_run, &rf_rec[i],
                                           (int64_t)(mix64((uint64_t)i) % 3000), HWT_MICROSECONDS,
                                           keep ? &h : NULL);
        if (rc != 0 && h != NULL)
            rc = 12345; /* out-pointer written on failure */
        if (h != NULL)
            hwt_timeout_release(h);
        atomic_store(&rf_rc[i], rc);
        if (k % 256 == 255)
            hwtt_sleep_us(500);
    }
    return NULL;
}

static void test_random_pool_failures_concurrent(void **state)
{
    (void)state;
    memset(rf_rec, 0, sizeof rf_rec);
    rf_timer = small_timer(NULL);
    assert_int_equal(hwt_timer_start(rf_timer), 0);
    atomic_store(&hook_pct, 30);
    arm(HOOK_RANDOM, -1, 0);
    pthread_t th[RF_THREADS];
    for (int p = 0; p < RF_THREADS; p++)
        assert_int_equal(pthread_create(&th[p], NULL, rf_producer, (void *)(intptr_t)p), 0);
    for (int p = 0; p < RF_THREADS; p++)
        pthread_join(th[p], NULL);
    disarm();
    long injected = atomic_load(&site_injected[HWT_SITE_TIMEOUT_POOL]);
    int ok = 0, enomem = 0, other = 0;
    for (int i = 0; i < RF_THREADS * RF_PER; i++) {
        int rc = atomic_load(&rf_rc[i]);
        ok += rc == 0;
        enomem += rc == HWT_ENOMEM;
        other += rc != 0 && rc != HWT_ENOMEM;
    }
    bool all_ran = hwtt_wait_until(({
                                       int n = 0;
                                       for (int i = 0; i < RF_THREADS * RF_PER; i++)
                                           n += atomic_load(&rf_rec[i].ran);
                                       n == ok;
                                   }),
                                   hwtt_slack_ms(10000));
    hwt_stats s;
    hwt_timer_stats(rf_timer, &s);
    hwtt_destroy(rf_timer);
    int bad = 0;
    for (int i = 0; i < RF_THREADS * RF_PER; i++) {
        int want = atomic_load(&rf_rc[i]) == 0 ? 1 : 0;
        bad += atomic_load(&rf_rec[i].ran) != want || atomic_load(&rf_rec[i].cb) != 0;
    }
    print_message("  random pool failures: %d schedule calls on %d threads, %d ok, %d "
                  "HWT_ENOMEM, %ld failures injected\n",
                  RF_THREADS * RF_PER, RF_THREADS, ok, enomem, injected);
    assert_int_equal(other, 0);
    assert_true(all_ran);
    assert_int_equal(bad, 0);
    assert_true(enomem <= injected);
    assert_true(enomem > 0); /* the pools had to grow */
    assert_int_equal(s.scheduled, (uint64_t)ok);
    assert_int_equal(s.expired, (uint64_t)ok);
    assert_int_equal(s.pending, 0);
}

/* ---------------------------------------------------------- stop list */

#define STOP_N 50
static rec stop_rec[STOP_N];

static hwt_timer *timer_with_pending(hwt_timeout **handles)
{
    memset(stop_rec, 0, sizeof stop_rec);
    hwt_timer *t = small_timer(NULL);
    for (int i = 0; i < STOP_N; i++)
        assert_int_equal(hwt_new_timeout_task(t, &rec_task, &stop_rec[i], 1, HWT_HOURS,
                                              handles != NULL ? &handles[i] : NULL),
                         0);
    assert_int_equal(hwt_pending_timeouts(t), STOP_N);
    return t;
}

static int total_cb(void)
{
    int n = 0;
    for (int i = 0; i < STOP_N; i++)
        n += atomic_load(&stop_rec[i].cb);
    return n;
}

static int total_ran(void)
{
    int n = 0;
    for (int i = 0; i < STOP_N; i++)
        n += atomic_load(&stop_rec[i].ran);
    return n;
}

/* The array cannot be allocated: ENOMEM, the timer is stopped (pending 0,
 * ESTOPPED), keeps the timeouts without calling their callbacks. */
static void failed_stop(hwt_timer *t, int failures)
{
    long before = heap_blocks();
    arm(HOOK_ALWAYS, HWT_SITE_STOP_LIST, 0);
    for (int f = 0; f < failures; f++) {
        hwt_timeout **list = (hwt_timeout **)&list; /* sentinel */
        size_t n = 77;
        int rc = hwt_stop(t, &list, &n);
        assert_int_equal(rc, HWT_ENOMEM);
        /* no array handed out */
        assert_true(list == NULL || list == (hwt_timeout **)&list);
        assert_true(n == 0 || n == 77);
    }
    long injected = atomic_load(&site_injected[HWT_SITE_STOP_LIST]);
    disarm();
    assert_true(injected >= failures); /* the final drain may have tried too */
    covered_stop[HWT_SITE_STOP_LIST]++;
    if (before >= 0)
        assert_int_equal(heap_blocks(), before);
    assert_int_equal(hwt_pending_timeouts(t), 0);
    rec extra;
    memset(&extra, 0, sizeof extra);
    hwt_timeout *h = NULL;
    assert_int_equal(hwt_new_timeout(t, rec_run, &extra, 0, HWT_MILLISECONDS, &h), HWT_ESTOPPED);
    assert_null(h);
    assert_int_equal(hwt_pending_timeouts(t), 0);
    assert_int_equal(total_cb(), 0);
    assert_int_equal(total_ran(), 0);
}

static void test_stop_list_enomem_then_stop_again(void **state)
{
    (void)state;
    hwt_timeout *handles[STOP_N];
    hwt_timer *t = timer_with_pending(handles);
    failed_stop(t, 2); /* twice: still kept */
    /* the handles see them cancelled by the stop; a cancel now loses */
    int not_cancelled = 0, cancel_true = 0;
    for (int i = 0; i < STOP_N; i++) {
        not_cancelled += !hwt_timeout_is_cancelled(handles[i]);
        cancel_true += hwt_timeout_cancel(handles[i]);
    }
    assert_int_equal(not_cancelled, 0);
    assert_int_equal(cancel_true, 0);

    hwt_timeout **list = NULL;
    size_t n = 0;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, STOP_N);
    int seen[STOP_N] = {0};
    for (size_t j = 0; j < n; j++) {
        rec *r = hwt_timeout_arg(list[j]);
        assert_true(r >= stop_rec && r < stop_rec + STOP_N);
        seen[r - stop_rec]++;
        assert_true(hwt_timeout_is_cancelled(list[j]));
    }
    for (int i = 0; i < STOP_N; i++)
        assert_int_equal(seen[i], 1);
    hwt_timeouts_release(list, n);
    /* a third stop: empty */
    list = (hwt_timeout **)&list;
    n = 5;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_null(list);
    assert_int_equal(n, 0);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    assert_int_equal(s.cancelled, STOP_N);
    assert_int_equal(s.pending, 0);
    hwtt_destroy(t);
    for (int i = 0; i < STOP_N; i++)
        hwt_timeout_release(handles[i]);
    assert_int_equal(total_cb(), 0); /* handed back: the caller owns them */
    assert_int_equal(total_ran(), 0);
}

static void test_stop_list_enomem_then_destroy(void **state)
{
    (void)state;
    hwt_timer *t = timer_with_pending(NULL);
    failed_stop(t, 1);
    hwtt_destroy(t); /* drops them: each cancelled callback once */
    for (int i = 0; i < STOP_N; i++)
        assert_int_equal(atomic_load(&stop_rec[i].cb), 1);
    assert_int_equal(total_ran(), 0);
}

static void test_stop_list_enomem_then_stop_dropping(void **state)
{
    (void)state;
    hwt_timer *t = timer_with_pending(NULL);
    failed_stop(t, 1);
    assert_int_equal(hwt_stop(t, NULL, NULL), 0);
    for (int i = 0; i < STOP_N; i++)
        assert_int_equal(atomic_load(&stop_rec[i].cb), 1);
    hwt_timeout **list = NULL;
    size_t n = 3;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_int_equal(n, 0);
    assert_null(list);
    hwtt_destroy(t);
    for (int i = 0; i < STOP_N; i++)
        assert_int_equal(atomic_load(&stop_rec[i].cb), 1);
    assert_int_equal(total_ran(), 0);
}

/* The k-th STOP_LIST allocation fails (k = 1, 2, ... until the stop makes
 * fewer than k), with 3000 timeouts to hand back or drop: whatever the stop
 * returns, every timeout comes back (now, or from a second stop after
 * HWT_ENOMEM) or has its cancelled callback called, exactly once. */
#define STOP_BIG 3000
static rec big_rec[STOP_BIG];

static void test_stop_kth_failure_nothing_lost(void **state)
{
    (void)state;
    for (int drop = 0; drop < 2; drop++) {
        long k;
        int enomems = 0;
        for (k = 1; k < 100; k++) {
            memset(big_rec, 0, sizeof big_rec);
            hwt_timer *t = small_timer(NULL);
            for (int i = 0; i < STOP_BIG; i++)
                assert_int_equal(
                    hwt_new_timeout_task(t, &rec_task, &big_rec[i], 1, HWT_HOURS, NULL), 0);
            arm(HOOK_KTH, HWT_SITE_STOP_LIST, k);
            hwt_timeout **list = NULL;
            size_t n = 0;
            int rc = drop ? hwt_stop(t, NULL, NULL) : hwt_stop(t, &list, &n);
            disarm();
            long calls = atomic_load(&site_calls[HWT_SITE_STOP_LIST]);
            long injected = atomic_load(&site_injected[HWT_SITE_STOP_LIST]);
            assert_true(rc == 0 || (rc == HWT_ENOMEM && !drop));
            if (rc == HWT_ENOMEM) {
                enomems++;
                assert_null(list);
                assert_int_equal(n, 0);
                assert_int_equal(hwt_stop(t, &list, &n), 0);
            }
            int64_t pending = hwt_pending_timeouts(t);
            for (size_t j = 0; j < n; j++) {
                rec *r = hwt_timeout_arg(list[j]);
                assert_true(r >= big_rec && r < big_rec + STOP_BIG);
                atomic_fetch_add(&r->cb, 1000); /* handed back */
            }
            hwt_timeouts_release(list, n);
            hwtt_destroy(t);
            int bad = 0;
            for (int i = 0; i < STOP_BIG; i++)
                bad += atomic_load(&big_rec[i].ran) != 0 ||
                       atomic_load(&big_rec[i].cb) != (drop ? 1 : 1000);
            assert_int_equal(pending, 0);
            assert_int_equal(bad, 0);
            if (injected > 0)
                covered_stop[HWT_SITE_STOP_LIST]++;
            if (calls < k)
                break;
        }
        print_message("  stop %s, %d timeouts, k-th STOP_LIST allocation failing: k = 1..%ld "
                      "covered, %d HWT_ENOMEM, nothing lost\n",
                      drop ? "dropping" : "with a list", STOP_BIG, k - 1, enomems);
        assert_true(k > 1);
    }
}

/* Nothing to hand back: no allocation, so no failure. */
static void test_stop_list_empty_needs_no_allocation(void **state)
{
    (void)state;
    hwt_timer *t = small_timer(NULL);
    assert_int_equal(hwt_timer_start(t), 0);
    arm(HOOK_ALWAYS, HWT_SITE_STOP_LIST, 0);
    hwt_timeout **list = (hwt_timeout **)&list;
    size_t n = 9;
    int rc = hwt_stop(t, &list, &n);
    disarm();
    assert_int_equal(rc, 0);
    assert_null(list);
    assert_int_equal(n, 0);
    hwtt_destroy(t);
}

/* ------------------------------------------------- worker thread creation */

static void test_worker_creation_fails_esys(void **state)
{
    (void)state;
    static hwtt_log log;
    memset(&log, 0, sizeof log);
    pthread_attr_t attr;
    assert_int_equal(pthread_attr_init(&attr), 0);
    if (pthread_attr_setstacksize(&attr, (size_t)1 << 40) != 0) {
        pthread_attr_destroy(&attr);
        print_message("  skipped: pthread_attr_setstacksize refuses 1 TiB here\n");
        skip();
    }
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.thread_attr = &attr;
    o.thread_name = "hwt-faults-esys";
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *t = hwtt_track(hwtt_timer_opts(&o));
    rec r[3];
    memset(r, 0, sizeof r);
    hwt_timeout *h = (hwt_timeout *)&r[2];
    int rc = hwt_new_timeout(t, rec_run, &r[0], 0, HWT_MILLISECONDS, &h);
    if (rc == 0) {
        hwt_timeout_release(h);
        hwtt_destroy(t);
        pthread_attr_destroy(&attr);
        print_message("  skipped: a thread with a 1 TiB stack was created here\n");
        skip();
    }
    assert_int_equal(rc, HWT_ESYS);
    assert_ptr_equal(h, (hwt_timeout *)&r[2]);
    assert_int_equal(hwt_pending_timeouts(t), 0);
    int errors = atomic_load(&log.count[HWT_LOG_ERROR]);
    assert_true(errors >= 1);
    print_message("  logged: \"%s\"\n", log.last);
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r[1], 0, HWT_MILLISECONDS, NULL),
                     HWT_ESYS);
    assert_true(atomic_load(&log.count[HWT_LOG_ERROR]) > errors);
    hwt_stats s;
    hwt_timer_stats(t, &s);
    assert_int_equal(s.scheduled, 0);
    assert_int_equal(s.pending, 0);

    /* a later call may retry: with a sane stack size it starts and runs */
    assert_int_equal(pthread_attr_setstacksize(&attr, (size_t)1 << 20), 0);
    assert_int_equal(hwt_new_timeout(t, rec_run, &r[1], 0, HWT_MILLISECONDS, &h), 0);
    assert_true(hwtt_wait_until(atomic_load(&r[1].ran) == 1, hwtt_slack_ms(5000)));
    hwt_timeout_release(h);
    hwtt_destroy(t);
    pthread_attr_destroy(&attr);
    assert_int_equal(atomic_load(&r[0].ran), 0);
    assert_int_equal(atomic_load(&r[0].cb), 0);
}

static void test_worker_creation_fails_then_stop_destroy(void **state)
{
    (void)state;
    static hwtt_log log;
    memset(&log, 0, sizeof log);
    pthread_attr_t attr;
    assert_int_equal(pthread_attr_init(&attr), 0);
    if (pthread_attr_setstacksize(&attr, (size_t)1 << 40) != 0) {
        pthread_attr_destroy(&attr);
        skip();
    }
    hwt_options o;
    hwt_options_init(&o);
    o.thread_attr = &attr;
    o.log = hwtt_log_cb;
    o.log_ctx = &log;
    hwt_timer *t = hwtt_track(hwtt_timer_opts(&o));
    rec r;
    memset(&r, 0, sizeof r);
    int rc = hwt_timer_start(t);
    if (rc == 0) {
        hwtt_destroy(t);
        pthread_attr_destroy(&attr);
        skip();
    }
    assert_int_equal(rc, HWT_ESYS);
    assert_int_equal(hwt_new_timeout_task(t, &rec_task, &r, 0, HWT_MILLISECONDS, NULL), HWT_ESYS);
    hwt_timeout **list = (hwt_timeout **)&list;
    size_t n = 4;
    assert_int_equal(hwt_stop(t, &list, &n), 0);
    assert_null(list);
    assert_int_equal(n, 0);
    assert_int_equal(hwt_timer_start(t), HWT_ESTOPPED);
    assert_int_equal(hwt_new_timeout(t, rec_run, &r, 0, HWT_MILLISECONDS, NULL), HWT_ESTOPPED);
    hwtt_destroy(t);
    pthread_attr_destroy(&attr);
    assert_int_equal(atomic_load(&r.ran), 0);
    assert_int_equal(atomic_load(&r.cb), 0);
    assert_true(atomic_load(&log.count[HWT_LOG_ERROR]) >= 2);
}

/* ------------------------------------------------------- a long task */

#define LT_N 200
#define LT_CANCEL 20
static rec lt_rec[LT_N];
static int64_t lt_sched_ns[LT_N], lt_delay_ms[LT_N];
static _Atomic int64_t lt_long_start, lt_long_end;

static void long_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    atomic_store(&lt_long_start, hwtt_now_ns());
    hwtt_sleep_ms(300); /* the task's own work, not a test decision */
    atomic_store(&lt_long_end, hwtt_now_ns());
}

static void test_long_task_delays_but_loses_nothing(void **state)
{
    (void)state;
    memset(lt_rec, 0, sizeof lt_rec);
    atomic_store(&lt_long_start, 0);
    atomic_store(&lt_long_end, 0);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.tick_unit = HWT_MILLISECONDS;
    o.ticks_per_wheel = 16;
    hwt_timer *t = hwtt_track(hwtt_timer_opts(&o));
    assert_int_equal(hwt_new_timeout(t, long_task, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&lt_long_start) != 0, hwtt_slack_ms(5000)));
    /* while it runs: 200 timeouts due from now to 400 ms, 20 of them cancelled */
    hwt_timeout *h[LT_N];
    for (int i = 0; i < LT_N; i++) {
        lt_delay_ms[i] = (i * 400) / LT_N;
        lt_sched_ns[i] = hwtt_now_ns();
        assert_int_equal(
            hwt_new_timeout_task(t, &rec_task, &lt_rec[i], lt_delay_ms[i], HWT_MILLISECONDS, &h[i]),
            0);
    }
    int cancel_true = 0;
    for (int i = 0; i < LT_N; i += LT_N / LT_CANCEL)
        cancel_true += hwt_timeout_cancel(h[i]);
    bool long_running = atomic_load(&lt_long_end) == 0; /* all this happened during it */
    bool done =
        hwtt_wait_until(({
                            int n = 0;
                            for (int i = 0; i < LT_N; i++)
                                n += atomic_load(&lt_rec[i].ran) + atomic_load(&lt_rec[i].cb);
                            n == LT_N;
                        }),
                        hwtt_slack_ms(10000));
    hwt_stats s;
    hwt_timer_stats(t, &s);
    hwtt_destroy(t);
    int64_t long_end = atomic_load(&lt_long_end);
    int early = 0, not_after_long = 0, bad = 0;
    for (int i = 0; i < LT_N; i++) {
        bool cancelled = i % (LT_N / LT_CANCEL) == 0;
        int ran = atomic_load(&lt_rec[i].ran), cb = atomic_load(&lt_rec[i].cb);
        if (cancelled ? (ran != 0 || cb != 1) : (ran != 1 || cb != 0))
            bad++;
        if (ran) {
            int64_t at = atomic_load(&lt_rec[i].ran_at);
            if (at < lt_sched_ns[i] + lt_delay_ms[i] * 1000000)
                early++;
            if (at < long_end)
                not_after_long++;
        }
        hwt_timeout_release(h[i]);
    }
    print_message("  long task: 300 ms on a 10 ms tick; %d timeouts, %d cancelled during it; "
                  "latest start %.1f ms late\n",
                  LT_N, cancel_true, (double)s.late_max_ns / 1e6);
    assert_true(done);
    assert_true(long_running);
    assert_int_equal(cancel_true, LT_CANCEL);
    assert_int_equal(bad, 0);
    assert_int_equal(early, 0);
    assert_int_equal(not_after_long, 0); /* one worker: nothing ran during the long task */
    assert_int_equal(s.expired, LT_N - LT_CANCEL + 1);
    assert_int_equal(s.cancelled, LT_CANCEL);
    assert_int_equal(s.pending, 0);
    assert_true(s.late_max_ns >= 100 * 1000000ULL); /* those due during it ran late */
}

/* --------------------------------------------- a million from the worker */

static atomic_long mil_ran, mil_failed;
static atomic_bool mil_parent_done, mil_first_seen;
static atomic_uint_fast64_t mil_transferred_at_first;
static atomic_bool mil_first_before_parent_done;
static long mil_n;
static hwt_timer *mil_timer;

static void mil_child(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    if (!atomic_exchange(&mil_first_seen, true)) {
        atomic_store(&mil_transferred_at_first, atomic_load(&mil_timer->transferred));
        atomic_store(&mil_first_before_parent_done, !atomic_load(&mil_parent_done));
    }
    atomic_fetch_add(&mil_ran, 1);
}

static void mil_parent(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    uint64_t x = 12345;
    for (long i = 0; i < mil_n; i++) {
        x = mix64(x + (uint64_t)i);
        if (hwt_new_timeout(mil_timer, mil_child, NULL, (int64_t)(x % 10000000), HWT_NANOSECONDS,
                            NULL) != 0)
            atomic_fetch_add(&mil_failed, 1);
    }
    atomic_store(&mil_parent_done, true);
}

static void test_million_from_the_worker(void **state)
{
    (void)state;
    const char *env = getenv("HWT_FAULTS_MILLION");
    bool slow = getenv("HWT_TEST_SLOW") != NULL || hwtt_slowdown() >= 10;
#ifdef FAULTS_TSAN
    slow = true; /* 1M timeouts: ~1 GB of TSan shadow memory */
#endif
    mil_n = env != NULL ? atol(env) : slow ? 200000 : 1000000;
    if (mil_n < 1)
        mil_n = 1;
    atomic_store(&mil_ran, 0);
    atomic_store(&mil_failed, 0);
    atomic_store(&mil_parent_done, false);
    atomic_store(&mil_first_seen, false);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_MILLISECONDS;
    o.ticks_per_wheel = 512;
    assert_int_equal(o.max_transfers_per_tick, 100000);
    mil_timer = hwtt_track(hwtt_timer_opts(&o));
    int64_t t0 = hwtt_now_ns();
    assert_int_equal(hwt_new_timeout(mil_timer, mil_parent, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    bool parent_done = hwtt_wait_until(atomic_load(&mil_parent_done), hwtt_slack_ms(60000));
    int64_t t1 = hwtt_now_ns();
    /* the timer still serves others meanwhile */
    rec probe;
    memset(&probe, 0, sizeof probe);
    assert_int_equal(hwt_new_timeout(mil_timer, rec_run, &probe, 1, HWT_MILLISECONDS, NULL), 0);
    bool all = hwtt_wait_until(atomic_load(&mil_ran) == mil_n - atomic_load(&mil_failed),
                               hwtt_slack_ms(60000));
    int64_t t2 = hwtt_now_ns();
    bool probe_ran = hwtt_wait_until(atomic_load(&probe.ran) == 1, hwtt_slack_ms(5000));
    hwt_stats s;
    hwt_timer_stats(mil_timer, &s);
    hwtt_destroy(mil_timer);
    print_message("  %ld timeouts scheduled from a task in %.0f ms, all run %.0f ms later "
                  "(first ran with %llu transferred)\n",
                  mil_n, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6,
                  (unsigned long long)atomic_load(&mil_transferred_at_first));
    assert_true(parent_done);
    assert_int_equal(atomic_load(&mil_failed), 0);
    assert_true(all);
    assert_int_equal(atomic_load(&mil_ran), mil_n);
    assert_true(probe_ran);
    assert_false(atomic_load(&mil_first_before_parent_done));
    /* the 100 000-per-wake-up cap: expiry began before the backlog was all moved */
    if (mil_n > 100002)
        assert_true(atomic_load(&mil_transferred_at_first) <= 100000 + 2);
    assert_int_equal(s.expired, (uint64_t)mil_n + 2);
    assert_int_equal(s.scheduled, (uint64_t)mil_n + 2);
    assert_int_equal(s.pending, 0);
}

/* ------------------------------------------ memory given back at the end */

/* "The timer's memory lives on until the last timeout reference is
 * released" - and no longer: once the timer is destroyed and the last
 * reference released, its memory is freed, whichever thread released last.
 * Plain build: the free() interposer above watches for the timer's own block
 * (the last thing hwt__timer_unref_n frees). Sanitizer builds: not checked
 * here. Half of the timeouts are scheduled on a helper thread; all handles
 * are released after hwt_timer_destroy, on the test thread, or on a helper
 * thread that is still alive when we look (as a server's thread would be). */
#define MR_N 600
static hwt_timeout *mr_handles[MR_N];
static hwt_timer *mr_timer;
static atomic_int mr_ran;
static atomic_bool mr_release_done, mr_may_exit;

static void *mr_schedule_helper(void *arg)
{
    (void)arg;
    for (int i = MR_N / 2; i < MR_N; i++)
        if (hwt_new_timeout(mr_timer, hwtt_count_task, &mr_ran, i % 2 ? 1 : 0,
                            i % 2 ? HWT_HOURS : HWT_MILLISECONDS, &mr_handles[i]) != 0)
            mr_handles[i] = NULL;
    return NULL;
}

static void *mr_release_helper(void *arg)
{
    (void)arg;
    for (int i = 0; i < MR_N; i++)
        hwt_timeout_release(mr_handles[i]);
    atomic_store(&mr_release_done, true);
    /* stays alive (as a server's thread would) until the test has looked */
    hwtt_wait_until(atomic_load(&mr_may_exit), 30000);
    return NULL;
}

/* Releases every handle after the destroy, on the test thread or on a
 * helper thread. Returns 1 if the timer's block was freed by then, 0 if not,
 * -1 if this build cannot tell. */
static int memory_round(bool last_on_helper)
{
    atomic_store(&mr_ran, 0);
    atomic_store(&mr_release_done, false);
    atomic_store(&mr_may_exit, false);
    mr_timer = small_timer(NULL);
    for (int i = 0; i < MR_N / 2; i++)
        assert_int_equal(hwt_new_timeout(mr_timer, hwtt_count_task, &mr_ran, i % 2 ? 1 : 0,
                                         i % 2 ? HWT_HOURS : HWT_MILLISECONDS, &mr_handles[i]),
                         0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, mr_schedule_helper, NULL), 0);
    pthread_join(th, NULL);
    for (int i = MR_N / 2; i < MR_N; i++)
        assert_non_null(mr_handles[i]);
    assert_true(hwtt_wait_until(atomic_load(&mr_ran) == MR_N / 2, hwtt_slack_ms(5000)));
    watch_free(mr_timer);
    hwtt_destroy(mr_timer);
    bool freed_early = watched_freed(); /* handles are still held: must not be */
    if (last_on_helper) {
        assert_int_equal(pthread_create(&th, NULL, mr_release_helper, NULL), 0);
        assert_true(hwtt_wait_until(atomic_load(&mr_release_done), hwtt_slack_ms(5000)));
    } else {
        for (int i = 0; i < MR_N; i++)
            hwt_timeout_release(mr_handles[i]);
    }
    int freed = heap_blocks() < 0 ? -1 : watched_freed();
    if (last_on_helper) {
        atomic_store(&mr_may_exit, true);
        pthread_join(th, NULL);
    }
    watch_free(NULL);
    assert_false(freed_early);
    return freed;
}

static void test_memory_freed_after_last_release(void **state)
{
    (void)state;
    /* control: with no handle out, the destroy frees the timer at once */
    hwt_timer *t = small_timer(NULL);
    atomic_store(&mr_ran, 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &mr_ran, i % 2, HWT_HOURS, NULL), 0);
    watch_free(t);
    hwtt_destroy(t);
    int control = heap_blocks() < 0 ? -1 : watched_freed();
    watch_free(NULL);
    if (control >= 0)
        assert_int_equal(control, 1);

    int main_last = memory_round(false);
    int helper_last = memory_round(true);
    print_message("  timer memory freed at the last release after destroy: %s (last release "
                  "on the test thread), %s (on a live helper thread)\n",
                  main_last < 0 ? "not checked"
                  : main_last   ? "yes"
                                : "NO",
                  helper_last < 0 ? "not checked"
                  : helper_last   ? "yes"
                                  : "NO");
    if (main_last >= 0) {
        assert_int_equal(main_last, 1);
        assert_int_equal(helper_last, 1);
    }
}

/* With max_pending_timeouts = 1 and nothing pending, thread A's schedule
 * held its pending slot while it allocated (here: a new block for a new
 * (run, cancelled) pair, held in the hook until B is done, then failed):
 * B's schedule was refused (HWT_EREJECTED, counted rejected), though
 * nothing was ever pending. The slot is now taken last. */
static atomic_int slot_stage; /* 0: pass; 1: A is in the hook; 2: fail A */
static _Thread_local bool slot_hold_here;

static int holding_then_failing(hwt__alloc_site site)
{
    if (!slot_hold_here || site != HWT_SITE_TASKS)
        return 0;
    atomic_store(&slot_stage, 1);
    hwtt_wait_until(atomic_load(&slot_stage) == 2, hwtt_slack_ms(10000));
    return 1;
}

static hwt_timer *slot_timer;
static atomic_int slot_a_rc;
static rec slot_rec;

static void *schedule_a_new_pair(void *arg)
{
    (void)arg;
    slot_hold_here = true;
    hwt_task task = {.run = rec_run, .cancelled = cb_fns[69]};
    atomic_store(&slot_a_rc,
                 hwt_new_timeout_task(slot_timer, &task, &slot_rec, 1, HWT_HOURS, NULL));
    slot_hold_here = false;
    return NULL;
}

static void test_a_schedule_failing_for_memory_holds_no_pending_slot(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.max_pending_timeouts = 1;
    slot_timer = hwtt_track(hwtt_timer_opts(&o));
    /* The task table's first block full (64 pairs): a new pair allocates. */
    for (int i = 0; i < 64; i++) {
        hwt_task task = {.run = rec_run, .cancelled = cb_fns[i]};
        hwt_timeout *h;
        assert_int_equal(hwt_new_timeout_task(slot_timer, &task, &slot_rec, 1, HWT_HOURS, &h), 0);
        assert_true(hwt_timeout_cancel(h));
        hwt_timeout_release(h);
    }
    assert_int_equal(hwt_pending_timeouts(slot_timer), 0);
    hwt_stats before, after;
    hwt_timer_stats(slot_timer, &before);
    atomic_store(&slot_stage, 0);
    hwt__set_alloc_fail_hook(holding_then_failing);
    pthread_t a;
    assert_int_equal(pthread_create(&a, NULL, schedule_a_new_pair, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&slot_stage) == 1, hwtt_slack_ms(5000)));
    hwt_task known = {.run = rec_run, .cancelled = cb_fns[0]};
    int b_rc = hwt_new_timeout_task(slot_timer, &known, &slot_rec, 1, HWT_HOURS, NULL);
    atomic_store(&slot_stage, 2);
    pthread_join(a, NULL);
    hwt__set_alloc_fail_hook(NULL);
    hwt_timer_stats(slot_timer, &after);
    assert_int_equal(atomic_load(&slot_a_rc), HWT_ENOMEM);
    assert_int_equal(b_rc, 0);
    assert_int_equal(after.rejected, before.rejected);
    /* And a refused call still takes nothing: the limit holds. */
    assert_int_equal(hwt_new_timeout_task(slot_timer, &known, &slot_rec, 1, HWT_HOURS, NULL),
                     HWT_EREJECTED);
    assert_int_equal(hwt_pending_timeouts(slot_timer), 1);
    hwtt_destroy(slot_timer);
}

/* Thread A scheduled 410 timeouts: its second region has a never-used
 * chunk in the depot, kept for A while A stays bound. Thread B, whose own
 * new region cannot be mapped, got HWT_ENOMEM though the depot held room
 * for 409 timeouts of the very timer. It now takes A's chunk. */
static _Thread_local bool region_fails_here;
static int failing_regions_here(hwt__alloc_site site)
{
    return region_fails_here && site == HWT_SITE_TIMEOUT_POOL;
}

/* And a call over the limit changes nothing (SPEC: it "gets HWT_EREJECTED
 * and changes nothing"): taking the slot after the allocation had it intern
 * its pair, bind its thread's cache and take a timeout (mapping a region)
 * first, and get HWT_ENOMEM, not HWT_EREJECTED, when memory was short. A
 * limit reached is now refused before any of that. */
static hwt_timer *full_timer(void)
{
    hwt_options o;
    hwt_options_init(&o);
    o.max_pending_timeouts = 1;
    hwt_timer *t = hwtt_track(hwtt_timer_opts(&o));
    assert_int_equal(hwt_new_timeout(t, rec_run, &slot_rec, 1, HWT_HOURS, NULL), 0);
    assert_int_equal(hwt_pending_timeouts(t), 1);
    return t;
}

struct refused {
    hwt_timer *timer;
    int rc;
    size_t cached;
    bool pool_fails;
};

static void *refused_on_a_fresh_thread(void *arg)
{
    struct refused *r = arg;
    region_fails_here = r->pool_fails;
    r->rc = hwt_new_timeout(r->timer, rec_run, &slot_rec, 1, HWT_HOURS, NULL);
    region_fails_here = false;
    r->cached = hwt__pool_thread_cached(r->timer);
    return NULL;
}

static void test_a_refused_call_takes_nothing(void **state)
{
    (void)state;
    hwt_timer *t = full_timer();
    size_t pairs = t->task_count, capacity = hwt__pool_capacity(&t->pool);
    hwt_task new_pair = {.run = rec_run, .cancelled = cb_fns[68]};
    assert_int_equal(hwt_new_timeout_task(t, &new_pair, &slot_rec, 1, HWT_HOURS, NULL),
                     HWT_EREJECTED);
    assert_int_equal(t->task_count, pairs);
    struct refused r = {.timer = t, .rc = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, refused_on_a_fresh_thread, &r), 0);
    pthread_join(th, NULL);
    assert_int_equal(r.rc, HWT_EREJECTED);
    assert_int_equal(r.cached, 0);
    assert_int_equal(hwt__pool_capacity(&t->pool), capacity);
    /* Memory short too: still HWT_EREJECTED, counted rejected. */
    hwt_stats before, after;
    hwt_timer_stats(t, &before);
    hwt__set_alloc_fail_hook(failing_regions_here);
    r = (struct refused){.timer = t, .rc = 1, .pool_fails = true};
    assert_int_equal(pthread_create(&th, NULL, refused_on_a_fresh_thread, &r), 0);
    pthread_join(th, NULL);
    hwt__set_alloc_fail_hook(NULL);
    hwt_timer_stats(t, &after);
    assert_int_equal(r.rc, HWT_EREJECTED);
    assert_int_equal(after.rejected, before.rejected + 1);
    hwtt_destroy(t);
}

static hwt_timer *owned_timer;
static atomic_bool owner_done, owner_may_exit;

static void *owner_schedules(void *arg)
{
    (void)arg;
    for (int i = 0; i < 410; i++)
        if (hwt_new_timeout(owned_timer, rec_run, &slot_rec, 1, HWT_HOURS, NULL) != 0)
            break;
    atomic_store(&owner_done, true);
    hwtt_wait_until(atomic_load(&owner_may_exit), hwtt_slack_ms(10000));
    return NULL;
}

static void *schedule_without_a_region(void *arg)
{
    region_fails_here = true;
    *(int *)arg = hwt_new_timeout(owned_timer, rec_run, &slot_rec, 1, HWT_HOURS, NULL);
    region_fails_here = false;
    return NULL;
}

static void test_enomem_only_when_no_chunk_is_free(void **state)
{
    (void)state;
    atomic_store(&owner_done, false);
    atomic_store(&owner_may_exit, false);
    owned_timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(owned_timer), 0);
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, owner_schedules, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&owner_done), hwtt_slack_ms(5000)));
    assert_true(hwt__pool_capacity(&owned_timer->pool) >=
                (size_t)hwt_pending_timeouts(owned_timer) + 400);
    hwt__set_alloc_fail_hook(failing_regions_here);
    int b_rc = 1;
    assert_int_equal(pthread_create(&b, NULL, schedule_without_a_region, &b_rc), 0);
    pthread_join(b, NULL);
    hwt__set_alloc_fail_hook(NULL);
    atomic_store(&owner_may_exit, true);
    pthread_join(a, NULL);
    hwtt_destroy(owned_timer);
    assert_int_equal(b_rc, 0);
}

/* ---------------------------------------------------------- summary */

static void test_sites_covered(void **state)
{
    (void)state;
    int all = 0;
    print_message("  allocation sites made to fail (injections with the documented result):\n");
    for (int s = 0; s < HWT_SITE_COUNT; s++) {
        int n = covered_create[s] + covered_schedule[s] + covered_stop[s];
        print_message("    %-13s create %d, schedule %d, stop %d\n", site_name(s),
                      covered_create[s], covered_schedule[s], covered_stop[s]);
        all += n > 0;
    }
    print_message("  %d of %d sites covered\n", all, HWT_SITE_COUNT);
    assert_int_equal(all, HWT_SITE_COUNT);
}

int main(void)
{
    hwtt_watchdog(170);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_create_fails_at_every_site, teardown),
        cmocka_unit_test_teardown(test_failed_creates_not_counted_live, teardown),
        cmocka_unit_test_teardown(test_schedule_fails_at_every_site, teardown),
        cmocka_unit_test_teardown(test_schedule_fails_in_task, teardown),
        cmocka_unit_test_teardown(test_task_pairs_fail_at_every_k, teardown),
        cmocka_unit_test_teardown(test_random_pool_failures_concurrent, teardown),
        cmocka_unit_test_teardown(test_stop_list_enomem_then_stop_again, teardown),
        cmocka_unit_test_teardown(test_stop_list_enomem_then_destroy, teardown),
        cmocka_unit_test_teardown(test_stop_list_enomem_then_stop_dropping, teardown),
        cmocka_unit_test_teardown(test_stop_kth_failure_nothing_lost, teardown),
        cmocka_unit_test_teardown(test_stop_list_empty_needs_no_allocation, teardown),
        cmocka_unit_test_teardown(test_a_schedule_failing_for_memory_holds_no_pending_slot,
                                  teardown),
        cmocka_unit_test_teardown(test_enomem_only_when_no_chunk_is_free, teardown),
        cmocka_unit_test_teardown(test_a_refused_call_takes_nothing, teardown),
        cmocka_unit_test_teardown(test_worker_creation_fails_esys, teardown),
        cmocka_unit_test_teardown(test_worker_creation_fails_then_stop_destroy, teardown),
        cmocka_unit_test_teardown(test_long_task_delays_but_loses_nothing, teardown),
        cmocka_unit_test_teardown(test_million_from_the_worker, teardown),
        cmocka_unit_test_teardown(test_memory_freed_after_last_release, teardown),
        cmocka_unit_test(test_sites_covered),
    };
    hwtt_apply_filters();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

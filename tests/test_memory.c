/*
 * test_memory.c - timeout memory goes back to the system after a burst
 * (SPEC 2, "the process around a timer"): two threads each schedule 2 M
 * one-hour timeouts, keeping the handles, then cancel and release them all;
 * resident memory (/proc/self/statm) comes back to within 32 MB of what it
 * was before, within 5 s, burst after burst, and the idle worker is not
 * woken for it. Bursts that a stop or a destroy ends give their memory
 * back as well, timer after timer, and so do threads that release a
 * burst's handles in random order and then stay alive, calling nothing,
 * and threads that release a stopped timer's list and then idle.
 *
 * Under TSan and valgrind the bursts are 10x smaller (their shadow memory
 * and speed). Under any sanitizer or valgrind resident memory is mostly
 * theirs (shadow memory, which they do not give back; ASan's allocator and
 * quarantine): the bursts run, the figures are printed, and the bounds are
 * checked only in plain builds (internal_pool checks the pool's own
 * accounting everywhere).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define MB (INT64_C(1) << 20)
#define BOUND (32 * MB)
#define THREADS 2

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

/* Whether resident memory is the library's and ours to judge. */
static bool rss_is_ours(void)
{
#ifdef SANITIZED
    return false;
#else
    return !hwtt_under_valgrind();
#endif
}

static size_t per_thread(void)
{
    return hwtt_slowdown() >= 10 ? 200000 : 2000000;
}

/* Resident bytes of this process. */
static int64_t rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    long size = 0, resident = 0;
    assert_int_equal(fscanf(f, "%ld %ld", &size, &resident), 2);
    fclose(f);
    return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

struct burst {
    hwt_timer *timer;
    hwt_timeout **handles; /* THREADS * per_thread(), allocated once: its pages
                              are in every measurement */
    pthread_barrier_t scheduled, measured;
};

struct burst_job {
    struct burst *b;
    size_t first, n;
    int failures;
    size_t cancelled;
};

static void *schedule_then_cancel(void *p)
{
    struct burst_job *job = p;
    hwt_timeout **h = job->b->handles + job->first;
    for (size_t i = 0; i < job->n; i++)
        if (hwt_new_timeout(job->b->timer, noop, NULL, 1, HWT_HOURS, &h[i]) != 0)
            job->failures++;
    pthread_barrier_wait(&job->b->scheduled);
    pthread_barrier_wait(&job->b->measured);
    for (size_t i = 0; i < job->n; i++) {
        job->cancelled += hwt_timeout_cancel(h[i]);
        hwt_timeout_release(h[i]);
    }
    return NULL;
}

struct burst_figures {
    int64_t peak;     /* with every timeout pending */
    int64_t back;     /* once within BOUND of the baseline... */
    int64_t back_ms;  /* ...this long after the last release */
    int64_t idle;     /* once the worker is idle again */
    uint64_t wakeups; /* the worker's, then */
};

/* Waits until the worker has not woken for `quiet_ms` (it may still be
 * moving what the burst queued, a budget per pass); false if that did not
 * happen within 10 s. */
static bool wait_for_idle_worker(hwt_timer *timer, int64_t quiet_ms, uint64_t *wakeups)
{
    int64_t deadline = hwtt_now_ns() + (hwtt_slack_ms(10000) + 3 * quiet_ms) * 1000000;
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    for (;;) {
        uint64_t before = st.wakeups;
        hwtt_sleep_ms(quiet_ms);
        hwt_timer_stats(timer, &st);
        *wakeups = st.wakeups;
        if (st.wakeups == before)
            return true;
        if (hwtt_now_ns() > deadline)
            return false;
    }
}

/* One burst; returns once resident memory is within BOUND of `base` or the
 * deadline passed (the caller asserts). */
static struct burst_figures run_burst(struct burst *b, int64_t base)
{
    size_t n = per_thread();
    struct burst_job jobs[THREADS];
    pthread_t th[THREADS];
    pthread_barrier_init(&b->scheduled, NULL, THREADS + 1);
    pthread_barrier_init(&b->measured, NULL, THREADS + 1);
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct burst_job){b, (size_t)i * n, n, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, schedule_then_cancel, &jobs[i]), 0);
    }
    pthread_barrier_wait(&b->scheduled);
    struct burst_figures fig = {rss(), 0, 0, 0, 0};
    assert_int_equal(hwt_pending_timeouts(b->timer), (int64_t)(THREADS * n));
    pthread_barrier_wait(&b->measured);
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].failures, 0);
        assert_int_equal(jobs[i].cancelled, n);
    }
    pthread_barrier_destroy(&b->scheduled);
    pthread_barrier_destroy(&b->measured);
    int64_t t0 = hwtt_now_ns();
    if (rss_is_ours())
        hwtt_wait_until(rss() - base <= BOUND, hwtt_slack_ms(5000));
    fig.back_ms = (hwtt_now_ns() - t0) / 1000000;
    fig.back = rss();
    assert_int_equal(hwt_pending_timeouts(b->timer), 0);
    /* A pass over what the burst left takes longer under sanitizers: a
     * quiet window scaled with them (a pass shows no wake-up while it runs). */
    assert_true(wait_for_idle_worker(b->timer, hwtt_slack_ms(400), &fig.wakeups));
    fig.idle = rss();
    return fig;
}

static void burst_setup(struct burst *b)
{
    b->timer = hwtt_track(hwtt_timer(100, HWT_MILLISECONDS, 512));
    assert_int_equal(hwt_timer_start(b->timer), 0);
    size_t bytes = THREADS * per_thread() * sizeof *b->handles;
    b->handles = malloc(bytes);
    assert_non_null(b->handles);
    memset(b->handles, 0, bytes); /* resident before the baseline */
}

static void print_figures(int burst, int64_t base, struct burst_figures f)
{
    print_message("  burst %d of %zu x %d timeouts: rss %.1f MB before, %.1f MB at the peak, "
                  "%.1f MB %lld ms after the last release, %.1f MB with the worker idle "
                  "(+%.1f MB)%s\n",
                  burst, per_thread(), THREADS, (double)base / MB, (double)f.peak / MB,
                  (double)f.back / MB, (long long)f.back_ms, (double)f.idle / MB,
                  (double)(f.idle - base) / MB, rss_is_ours() ? "" : " - not judged here");
}

/* One burst: resident memory comes back within 32 MB in 5 s. */
static void test_burst_memory_goes_back(void **state)
{
    (void)state;
    struct burst b;
    burst_setup(&b);
    int64_t base = rss();
    struct burst_figures f = run_burst(&b, base);
    print_figures(1, base, f);
    if (rss_is_ours()) {
        assert_true(f.peak - base > 3 * BOUND);
        assert_true(f.back - base <= BOUND);
        assert_true(f.idle - base <= BOUND);
    }
    hwtt_destroy(b.timer);
    free(b.handles);
}

/* Three bursts on one timer: each comes back within 32 MB of the first
 * baseline, and once the worker is idle the later ones no higher than the
 * first (plus a few MB of noise: glibc's arenas, thread stacks). */
static void test_bursts_do_not_ratchet(void **state)
{
    (void)state;
    struct burst b;
    burst_setup(&b);
    int64_t base = rss();
    int64_t first = 0;
    for (int i = 1; i <= 3; i++) {
        struct burst_figures f = run_burst(&b, base);
        print_figures(i, base, f);
        if (!rss_is_ours())
            continue;
        assert_true(f.back - base <= BOUND);
        if (i == 1)
            first = f.idle;
        else
            assert_true(f.idle - first <= 8 * MB);
    }
    hwtt_destroy(b.timer);
    free(b.handles);
}

static void *schedule_only(void *p)
{
    struct burst_job *job = p;
    for (size_t i = 0; i < job->n; i++)
        if (hwt_new_timeout(job->b->timer, noop, NULL, 1, HWT_HOURS, NULL) != 0)
            job->failures++;
    return NULL;
}

/* Bursts on one timer after another, each ended by the stop: a destroy
 * (dropping them) or a stop handing them back. The stop's array of the
 * pending timeouts (8 bytes each) is freed with them; were it malloc's,
 * glibc would serve the next stop's array from a thread's heap and keep
 * it there once freed (after freeing a large block it mapped, malloc maps
 * no block of that size again), so every timer after the first would
 * leave that much resident for good. */
static void test_stopped_bursts_do_not_ratchet(void **state)
{
    (void)state;
    size_t n = per_thread();
    int64_t base = rss(), first = 0;
    for (int i = 1; i <= 3; i++) {
        struct burst b = {.timer = hwtt_track(hwtt_timer(100, HWT_MILLISECONDS, 512))};
        struct burst_job jobs[THREADS];
        pthread_t th[THREADS];
        for (int k = 0; k < THREADS; k++) {
            jobs[k] = (struct burst_job){&b, 0, n, 0, 0};
            assert_int_equal(pthread_create(&th[k], NULL, schedule_only, &jobs[k]), 0);
        }
        for (int k = 0; k < THREADS; k++) {
            assert_int_equal(pthread_join(th[k], NULL), 0);
            assert_int_equal(jobs[k].failures, 0);
        }
        int64_t peak = rss();
        if (i == 2) {
            hwt_timeout **list = NULL;
            size_t count = 0;
            assert_int_equal(hwt_stop(b.timer, &list, &count), 0);
            assert_int_equal(count, THREADS * n);
            hwt_timeouts_release(list, count);
        }
        hwtt_destroy(b.timer);
        /* The first comes back within BOUND; the later ones to where it did. */
        int64_t bound = i == 1 ? base + BOUND : first + 8 * MB, t0 = hwtt_now_ns();
        if (rss_is_ours())
            hwtt_wait_until(rss() <= bound, hwtt_slack_ms(5000));
        int64_t after = rss();
        print_message("  timer %d, %s %zu x %d timeouts: rss %.1f MB before, %.1f MB at the "
                      "peak, %.1f MB %lld ms after the stop%s\n",
                      i, i == 2 ? "handed back" : "destroyed with", n, THREADS, (double)base / MB,
                      (double)peak / MB, (double)after / MB,
                      (long long)((hwtt_now_ns() - t0) / 1000000),
                      rss_is_ours() ? "" : " - not judged here");
        if (!rss_is_ours())
            continue;
        assert_true(peak - base > 3 * BOUND);
        assert_true(after <= bound);
        if (i == 1)
            first = after;
    }
}

/* Giving memory back wakes nobody: once a burst has settled (the worker
 * has finished with what it queued), the idle worker is not woken for
 * 300 ms. */
static void test_no_wakeups_after_a_burst(void **state)
{
    (void)state;
    struct burst b;
    burst_setup(&b);
    int64_t base = rss();
    struct burst_figures f = run_burst(&b, base);
    print_figures(1, base, f);
    hwtt_sleep_ms(300);
    hwt_stats st;
    hwt_timer_stats(b.timer, &st);
    print_message("  wake-ups: %llu once idle, %llu 300 ms later\n", (unsigned long long)f.wakeups,
                  (unsigned long long)st.wakeups);
    assert_int_equal(st.wakeups, f.wakeups);
    hwtt_destroy(b.timer);
    free(b.handles);
}

/* Threads that released a burst's handles in any order (connections close
 * in any order) and then go idle, alive but calling nothing: what their
 * caches keep of the burst is a few regions, not a region per cached
 * timeout. Each thread schedules and cancels its share; once the worker
 * has let go of them (the handles hold the last references, so the
 * releases free on the releasing threads), it releases them shuffled and
 * waits, while resident memory must come back within 32 MB in 5 s. */
struct idle_job {
    struct burst *b;
    size_t first, n;
    int failures;
    pthread_barrier_t *cancelled, *let_go, *released, *done;
};

static void *release_shuffled_then_idle(void *p)
{
    struct idle_job *job = p;
    hwt_timeout **h = job->b->handles + job->first;
    for (size_t i = 0; i < job->n; i++) {
        if (hwt_new_timeout(job->b->timer, noop, NULL, 1, HWT_HOURS, &h[i]) != 0 ||
            !hwt_timeout_cancel(h[i]))
            job->failures++;
    }
    pthread_barrier_wait(job->cancelled);
    pthread_barrier_wait(job->let_go);
    uint64_t x = 0x9e3779b97f4a7c15u + job->first;
    for (size_t i = job->n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = x % (i + 1);
        hwt_timeout *t = h[i];
        h[i] = h[j];
        h[j] = t;
    }
    for (size_t i = 0; i < job->n; i++)
        hwt_timeout_release(h[i]);
    pthread_barrier_wait(job->released);
    pthread_barrier_wait(job->done); /* alive and idle while memory is measured */
    return NULL;
}

static void test_idle_threads_that_released_in_any_order_keep_little(void **state)
{
    (void)state;
    struct burst b;
    burst_setup(&b);
    int64_t base = rss();
    size_t n = per_thread();
    pthread_barrier_t cancelled, let_go, released, done;
    pthread_barrier_init(&cancelled, NULL, THREADS + 1);
    pthread_barrier_init(&let_go, NULL, THREADS + 1);
    pthread_barrier_init(&released, NULL, THREADS + 1);
    pthread_barrier_init(&done, NULL, THREADS + 1);
    struct idle_job jobs[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct idle_job){&b, (size_t)i * n, n, 0, &cancelled, &let_go, &released, &done};
        assert_int_equal(pthread_create(&th[i], NULL, release_shuffled_then_idle, &jobs[i]), 0);
    }
    pthread_barrier_wait(&cancelled);
    int64_t peak = rss();
    uint64_t wakeups;
    bool worker_done = wait_for_idle_worker(b.timer, hwtt_slack_ms(400), &wakeups);
    pthread_barrier_wait(&let_go);
    pthread_barrier_wait(&released);
    int64_t t0 = hwtt_now_ns();
    if (rss_is_ours())
        hwtt_wait_until(rss() - base <= BOUND, hwtt_slack_ms(5000));
    int64_t back = rss(), back_ms = (hwtt_now_ns() - t0) / 1000000;
    pthread_barrier_wait(&done);
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].failures, 0);
    }
    pthread_barrier_destroy(&cancelled);
    pthread_barrier_destroy(&let_go);
    pthread_barrier_destroy(&released);
    pthread_barrier_destroy(&done);
    print_message("  %zu x %d released shuffled by threads then idle: rss %.1f MB before, %.1f MB "
                  "at the peak, %.1f MB %lld ms after the last release%s\n",
                  n, THREADS, (double)base / MB, (double)peak / MB, (double)back / MB,
                  (long long)back_ms, rss_is_ours() ? "" : " - not judged here");
    assert_true(worker_done);
    assert_int_equal(hwt_pending_timeouts(b.timer), 0);
    if (rss_is_ours()) {
        assert_true(peak - base > 3 * BOUND);
        assert_true(back - base <= BOUND);
    }
    hwtt_destroy(b.timer);
    free(b.handles);
}

/* A stop's list released by the threads that scheduled the timeouts (each
 * closes its own connections), then the timer destroyed, the threads alive
 * and idle: every timeout has ended and every handle is released, so none
 * of the stopped timer's memory is in use and it all goes back
 * (docs/reliability.md: "A stopped timer keeps no free memory at all").
 * 16 threads (a server's pool), a sixteenth of 4 M timeouts each, each
 * releasing a shuffled share of the list. */
#define STOP_POOL 16

struct stop_pool_job {
    hwt_timer *timer;
    size_t n;
    int failures;
    hwt_timeout ***list;
    size_t *count;
    unsigned self;
    pthread_barrier_t *scheduled, *stopped, *released, *done;
};

static void *schedule_release_share_then_idle(void *p)
{
    struct stop_pool_job *job = p;
    for (size_t i = 0; i < job->n; i++)
        if (hwt_new_timeout(job->timer, noop, NULL, 1, HWT_HOURS, NULL) != 0)
            job->failures++;
    pthread_barrier_wait(job->scheduled);
    pthread_barrier_wait(job->stopped); /* the list is shuffled */
    for (size_t i = job->self; i < *job->count; i += STOP_POOL)
        hwt_timeout_release((*job->list)[i]);
    pthread_barrier_wait(job->released);
    pthread_barrier_wait(job->done); /* alive and idle while memory is measured */
    return NULL;
}

static void test_a_stopped_timers_list_released_by_a_pool_goes_back(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_timer(100, HWT_MILLISECONDS, 512);
    assert_int_equal(hwt_timer_start(timer), 0);
    size_t n = THREADS * per_thread() / STOP_POOL; /* 4 M in all (400 k slowed down) */
    hwt_timeout **list = NULL;
    size_t count = 0;
    pthread_barrier_t scheduled, stopped, released, done;
    pthread_barrier_init(&scheduled, NULL, STOP_POOL + 1);
    pthread_barrier_init(&stopped, NULL, STOP_POOL + 1);
    pthread_barrier_init(&released, NULL, STOP_POOL + 1);
    pthread_barrier_init(&done, NULL, STOP_POOL + 1);
    struct stop_pool_job jobs[STOP_POOL];
    pthread_t th[STOP_POOL];
    int64_t base = rss();
    for (unsigned i = 0; i < STOP_POOL; i++) {
        jobs[i] = (struct stop_pool_job){timer, n,          0,        &list,     &count,
                                         i,     &scheduled, &stopped, &released, &done};
        assert_int_equal(pthread_create(&th[i], NULL, schedule_release_share_then_idle, &jobs[i]),
                         0);
    }
    pthread_barrier_wait(&scheduled);
    int64_t peak = rss();
    assert_int_equal(hwt_stop(timer, &list, &count), 0);
    assert_int_equal(count, STOP_POOL * n);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = count - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = x % (i + 1);
        hwt_timeout *t = list[i];
        list[i] = list[j];
        list[j] = t;
    }
    pthread_barrier_wait(&stopped);
    pthread_barrier_wait(&released);
    hwt_timeouts_release(list, 0); /* the array alone */
    hwt_timer_destroy(timer);
    int64_t t0 = hwtt_now_ns();
    if (rss_is_ours())
        hwtt_wait_until(rss() - base <= BOUND, hwtt_slack_ms(5000));
    int64_t back = rss(), back_ms = (hwtt_now_ns() - t0) / 1000000;
    pthread_barrier_wait(&done);
    for (int i = 0; i < STOP_POOL; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(jobs[i].failures, 0);
    }
    int64_t exited = rss();
    pthread_barrier_destroy(&scheduled);
    pthread_barrier_destroy(&stopped);
    pthread_barrier_destroy(&released);
    pthread_barrier_destroy(&done);
    print_message("  %zu x %d handed back by a stop, released shuffled by the threads that "
                  "scheduled them, timer destroyed: rss %.1f MB before, %.1f MB at the peak, "
                  "%.1f MB %lld ms after the destroy, %.1f MB once the threads exited%s\n",
                  n, STOP_POOL, (double)base / MB, (double)peak / MB, (double)back / MB,
                  (long long)back_ms, (double)exited / MB,
                  rss_is_ours() ? "" : " - not judged here");
    if (rss_is_ours()) {
        assert_true(peak - base > 3 * BOUND);
        assert_true(back - base <= BOUND);
    }
}

int main(void)
{
    hwtt_watchdog(600);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_burst_memory_goes_back, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_bursts_do_not_ratchet, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_no_wakeups_after_a_burst, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_stopped_bursts_do_not_ratchet, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_idle_threads_that_released_in_any_order_keep_little,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_stopped_timers_list_released_by_a_pool_goes_back,
                                  hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

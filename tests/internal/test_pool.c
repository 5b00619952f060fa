/*
 * test_pool.c - the timeout pool (pool.c): never used timeouts are handed
 * out in memory order from fresh runs, recycled ones from magazines; a
 * thread that exits gives both back, and nothing is ever handed out twice.
 * Every timeout of every region lies whole inside a chunk that names its
 * timer.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "internal.h"

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* A timer's first region is one chunk: this many timeouts. */
static size_t first_region_capacity(void)
{
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
    size_t n = hwt__pool_capacity(&timer->pool);
    hwtt_destroy(timer);
    return n;
}

struct sched_job {
    hwt_timer *timer;
    size_t n;
    hwt_timeout **out; /* n handles, or NULL for none */
    hwtt_rec *rec;     /* counts cancelled callbacks, or NULL for none */
    int failures;
};

static void *schedule_n(void *p)
{
    struct sched_job *job = p;
    for (size_t i = 0; i < job->n; i++)
        if (hwt_new_timeout_task(job->timer, &hwtt_rec_task, job->rec, 1, HWT_HOURS,
                                 job->out != NULL ? &job->out[i] : NULL) != 0)
            job->failures++;
    return NULL;
}

/* Runs schedule_n on a thread of its own, which then exits. */
static void schedule_on_thread(struct sched_job *job)
{
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, schedule_n, job), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(job->failures, 0);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

/* Fails if any two of the n pointers are equal. */
static void assert_distinct(hwt_timeout **list, size_t n)
{
    hwt_timeout **sorted = malloc(n * sizeof *sorted);
    assert_non_null(sorted);
    memcpy(sorted, list, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_ptr);
    for (size_t i = 1; i < n; i++)
        if (sorted[i] == sorted[i - 1])
            fail_msg("timeout %p handed out twice", (void *)sorted[i]);
    free(sorted);
}

/* A thread that used 10 timeouts of a fresh run and exited gives the rest
 * back: a second thread takes them without the pool growing. */
static void test_exiting_thread_gives_its_fresh_run_back(void **state)
{
    (void)state;
    size_t chunk = first_region_capacity();
    assert_true(chunk > 20);
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);

    hwtt_rec rec = {0};
    struct sched_job a = {timer, 10, NULL, &rec, 0};
    schedule_on_thread(&a);
    assert_int_equal(hwt__pool_capacity(&timer->pool), chunk);
    struct sched_job b = {timer, chunk - 10, NULL, &rec, 0};
    schedule_on_thread(&b);
    assert_int_equal(hwt__pool_capacity(&timer->pool), chunk); /* no growth */

    hwt_timeout **list;
    size_t count;
    assert_int_equal(hwt_stop(timer, &list, &count), 0);
    assert_int_equal(count, chunk);
    assert_distinct(list, count);
    hwt_timeouts_release(list, count);
    hwtt_destroy(timer);
}

/* Recycled and fresh timeouts mixed, from two threads: every live timeout is
 * a distinct object, and a stop hands back exactly the live ones. */
static void test_nothing_is_handed_out_twice(void **state)
{
    (void)state;
    enum { N = 3000 };
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    hwt_timeout **first = calloc(2 * N, sizeof *first);
    hwt_timeout **second = calloc(2 * N, sizeof *second);
    assert_non_null(first);
    assert_non_null(second);

    hwtt_rec rec = {0};
    struct sched_job jobs[2] = {{timer, N, first, &rec, 0}, {timer, N, first + N, &rec, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, schedule_n, &jobs[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(jobs[0].failures + jobs[1].failures, 0);
    assert_distinct(first, 2 * N);

    /* Cancel every other one and let go of it: back to the pool once the
     * worker has called its cancelled callback and taken it off the queue. */
    size_t live = 0;
    for (size_t i = 0; i < 2 * N; i++) {
        if (i % 2 == 0) {
            assert_true(hwt_timeout_cancel(first[i]));
            hwt_timeout_release(first[i]);
        } else {
            first[live++] = first[i];
        }
    }
    assert_int_equal(hwt_pending_timeouts(timer), N);
    assert_true(
        hwtt_wait_until(atomic_load(&rec.cb) == N && atomic_load(&timer->transferred) == 2 * N,
                        hwtt_slack_ms(2000)));

    struct sched_job again[2] = {{timer, N, second, NULL, 0}, {timer, N, second + N, NULL, 0}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, schedule_n, &again[i]), 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(again[0].failures + again[1].failures, 0);

    hwt_timeout **all = malloc(3 * N * sizeof *all);
    assert_non_null(all);
    memcpy(all, first, live * sizeof *all);
    memcpy(all + live, second, 2 * N * sizeof *all);
    assert_distinct(all, live + 2 * N);

    hwt_timeout **list;
    size_t count;
    assert_int_equal(hwt_stop(timer, &list, &count), 0);
    assert_int_equal(count, live + 2 * N);
    qsort(all, count, sizeof *all, cmp_ptr); /* the same set: both sorted */
    qsort(list, count, sizeof *list, cmp_ptr);
    assert_memory_equal(all, list, count * sizeof *list);

    hwt_timeouts_release(list, count);
    for (size_t i = 0; i < live; i++)
        hwt_timeout_release(first[i]);
    for (size_t i = 0; i < 2 * N; i++)
        hwt_timeout_release(second[i]);
    free(all);
    free(first);
    free(second);
    hwtt_destroy(timer);
}

/* The stop's fast drain scans every timeout of the pool, free ones too, and
 * takes those whose wheel node is linked: timeouts that were in the wheel,
 * then cancelled (unlinked by the worker) and freed, must not look linked -
 * only the live ones are handed back and counted out of the wheel. */
static void test_stop_scan_skips_free_timeouts(void **state)
{
    (void)state;
    enum { N = 3000 };
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    hwt_timeout **h = calloc(2 * N, sizeof *h);
    assert_non_null(h);
    hwtt_rec rec = {0};
    struct sched_job job = {timer, 2 * N, h, &rec, 0};
    schedule_n(&job);
    assert_int_equal(job.failures, 0);
    /* All in the wheel first: a timeout due now wakes the worker, which
     * moves everything queued before it. */
    assert_int_equal(hwt_new_timeout_task(timer, &hwtt_rec_task, &rec, 0, HWT_MILLISECONDS, NULL),
                     0);
    assert_true(
        hwtt_wait_until(atomic_load(&rec.ran) == 1 && atomic_load(&timer->transferred) == 2 * N + 1,
                        hwtt_slack_ms(2000)));
    size_t live = 0;
    for (size_t i = 0; i < 2 * N; i++) {
        if (i % 2 == 0) {
            assert_true(hwt_timeout_cancel(h[i]));
            hwt_timeout_release(h[i]);
        } else {
            h[live++] = h[i];
        }
    }
    /* Unlinked and their callbacks called: free once their handles are gone. */
    assert_true(hwtt_wait_until(atomic_load(&rec.cb) == N, hwtt_slack_ms(2000)));
    /* The scan, not the walk of the buckets (worker.c, drain_wheel). */
    assert_true(N > hwt__pool_capacity(&timer->pool) / 8);

    hwt_timeout **list;
    size_t count;
    assert_int_equal(hwt_stop(timer, &list, &count), 0);
    assert_int_equal(count, live);
    qsort(h, live, sizeof *h, cmp_ptr);
    qsort(list, count, sizeof *list, cmp_ptr);
    assert_memory_equal(h, list, count * sizeof *list);
    assert_int_equal(atomic_load(&rec.cb), N); /* no cancelled callback again */
    assert_int_equal(timer->wheel.count, 0);   /* the worker has ended: its wheel took just those */
    hwt_timeouts_release(list, count);
    for (size_t i = 0; i < live; i++)
        hwt_timeout_release(h[i]);
    free(h);
    hwtt_destroy(timer);
}

/* 16 threads, alive together, each schedule one timeout: each maps one
 * chunk, not a region that doubles with every thread (16 threads would
 * then hold 16 KiB, 32 KiB, ... 2 MiB, 2 MiB...). */
enum { FEW_THREADS = 16 };
static pthread_barrier_t few_scheduled, few_checked;
static hwt_timer *few_timer;

static void *schedule_one_and_wait(void *arg)
{
    (void)arg;
    hwt_timeout *t = NULL;
    int rc = hwt_new_timeout(few_timer, noop, NULL, 1, HWT_HOURS, &t);
    pthread_barrier_wait(&few_scheduled);
    pthread_barrier_wait(&few_checked);
    hwt_timeout_release(t);
    return (void *)(intptr_t)rc;
}

static void test_threads_that_schedule_little_hold_little(void **state)
{
    (void)state;
    size_t chunk = first_region_capacity();
    few_timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(few_timer), 0);
    pthread_barrier_init(&few_scheduled, NULL, FEW_THREADS + 1);
    pthread_barrier_init(&few_checked, NULL, FEW_THREADS + 1);
    pthread_t th[FEW_THREADS];
    for (int i = 0; i < FEW_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, schedule_one_and_wait, NULL), 0);
    pthread_barrier_wait(&few_scheduled);
    size_t capacity = hwt__pool_capacity(&few_timer->pool);
    pthread_barrier_wait(&few_checked);
    for (int i = 0; i < FEW_THREADS; i++) {
        void *rc;
        assert_int_equal(pthread_join(th[i], &rc), 0);
        assert_int_equal((intptr_t)rc, 0);
    }
    pthread_barrier_destroy(&few_scheduled);
    pthread_barrier_destroy(&few_checked);
    print_message("  %d threads, one timeout each: pool of %zu timeouts (%zu per chunk)\n",
                  FEW_THREADS, capacity, chunk);
    assert_true(capacity <= FEW_THREADS * chunk);
    hwtt_destroy(few_timer);
}

/* Regions of every size (16 KiB doubling to 2 MiB, then 2 MiB): each
 * timeout lies whole inside its chunk, after the header, no two overlap, and
 * each chunk names its timer. */
static void test_chunks_hold_whole_timeouts(void **state)
{
    (void)state;
    enum { N = 120000 }; /* regions of 16 KiB .. 2 MiB, and a second 2 MiB one */
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    hwt_timeout **h = calloc(N, sizeof *h);
    hwt_timeout **sorted = calloc(N, sizeof *sorted);
    assert_non_null(h);
    assert_non_null(sorted);
    /* 1000 at a time, each from a thread that then exits: the next thread
     * continues the fresh run it gave back, across chunk ends (whose
     * headers are written as the run reaches them), or maps a region. */
    hwtt_rec rec = {0};
    for (size_t i = 0; i < N; i += 1000) {
        struct sched_job job = {timer, 1000, &h[i], &rec, 0};
        schedule_on_thread(&job);
    }
    for (size_t i = 0; i < N; i++) {
        uintptr_t offset = (uintptr_t)h[i] & (HWT_TIMEOUT_CHUNK_BYTES - 1);
        assert_true(offset >= HWT_CHUNK_HEADER_BYTES);
        assert_true(offset + sizeof(hwt_timeout) <= HWT_TIMEOUT_CHUNK_BYTES);
        assert_int_equal((offset - HWT_CHUNK_HEADER_BYTES) % sizeof(hwt_timeout), 0);
        assert_ptr_equal(hwt__timer_of(h[i]), timer);
        sorted[i] = h[i];
    }
    qsort(sorted, N, sizeof *sorted, cmp_ptr);
    for (size_t i = 1; i < N; i++)
        assert_true((uintptr_t)sorted[i - 1] + sizeof(hwt_timeout) <= (uintptr_t)sorted[i]);
    for (size_t i = 0; i < N; i++)
        hwt_timeout_release(h[i]);
    free(sorted);
    free(h);
    hwtt_destroy(timer);
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_exiting_thread_gives_its_fresh_run_back,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_nothing_is_handed_out_twice, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_stop_scan_skips_free_timeouts, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_threads_that_schedule_little_hold_little,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_chunks_hold_whole_timeouts, hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_pool.c - the timeout pool (pool.c): never used timeouts are handed
 * out in memory order from fresh runs, recycled ones from magazines; a
 * thread that exits gives both back, and nothing is ever handed out twice.
 * Regions whose timeouts are all free go back to the system, beyond a
 * reserve (more while threads take timeouts), but never during a scan of
 * the pool; a thread caches a bounded number of timeouts; every timeout lies
 * whole inside a chunk that names its timer; the stop's scan skips free ones.
 * A thread maps its next region before it runs out, unless another thread
 * is populating memory then.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "internal.h"
#include "steps.h"

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* The references a started timer holds besides its timeouts': its
 * creator's, and the worker's cache binding (each thread whose cache is
 * bound to the timer holds one, emptied or not). */
#define BASE_REFS 2

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

/* Cancels and lets go of h[0], h[2], ...; moves the others to the front of
 * h. Returns how many are left. */
static size_t cancel_every_other(hwt_timeout **h, size_t n)
{
    size_t live = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 2 == 0) {
            assert_true(hwt_timeout_cancel(h[i]));
            hwt_timeout_release(h[i]);
        } else {
            h[live++] = h[i];
        }
    }
    return live;
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
    size_t live = cancel_every_other(first, 2 * N);
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
    size_t live = cancel_every_other(h, 2 * N);
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
    assert_int_equal(timer->worker.wheel.count, 0);   /* the worker has ended: its wheel took just those */
    hwt_timeouts_release(list, count);
    for (size_t i = 0; i < live; i++)
        hwt_timeout_release(h[i]);
    free(h);
    hwtt_destroy(timer);
}

/* Timeouts in `bytes` of regions. */
static size_t timeouts_in(uint64_t bytes)
{
    return (size_t)(bytes / HWT_TIMEOUT_CHUNK_BYTES) * HWT_TIMEOUTS_PER_CHUNK;
}

/* Schedules n one-hour timeouts with handles from a thread that then exits
 * (its cache goes back to the depot). */
static hwt_timeout **schedule_kept(hwt_timer *timer, size_t n)
{
    static hwtt_rec rec; /* counts nothing these tests look at */
    hwt_timeout **h = calloc(n, sizeof *h);
    assert_non_null(h);
    struct sched_job job = {timer, n, h, &rec, 0};
    schedule_on_thread(&job);
    return h;
}

/* The worker let go of these cancelled timeouts: only their handles hold
 * them. */
static bool only_handles_hold(hwt_timeout **h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (atomic_load(&h[i]->refs) != 1)
            return false;
    return true;
}

/* When a thread last took timeouts from the depot, for the give-backs that
 * follow: long ago (the depot keeps its reserve), or "now" for ever (it
 * keeps its busy allowance). */
static void set_last_take(hwt_timer *timer, int64_t ns)
{
    pthread_mutex_lock(&timer->pool.lock);
    timer->pool.last_take_ns = ns;
    pthread_mutex_unlock(&timer->pool.lock);
}
/* The coarse clock the depot reads, for set_last_take. */
static int64_t coarse_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define LONG_AGO 0
#define ALWAYS_NOW (INT64_MAX / 2)

/* A burst well beyond the reserve: once every timeout is free again (and
 * no thread takes any), the pool keeps the reserve and at most a region
 * more, not the burst. */
static void test_freed_regions_go_back(void **state)
{
    (void)state;
    enum { N = 400000 }; /* ~19 MB: regions up to 2 MiB */
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_timeout **h = schedule_kept(timer, N);
    size_t peak = hwt__pool_capacity(&timer->pool);
    assert_true(peak >= N);
    for (size_t i = 0; i < N; i++)
        assert_true(hwt_timeout_cancel(h[i]));
    assert_true(hwtt_wait_until(only_handles_hold(h, N), hwtt_slack_ms(5000)));
    set_last_take(timer, LONG_AGO);
    for (size_t i = 0; i < N; i++)
        hwt_timeout_release(h[i]);
    assert_int_equal(atomic_load(&timer->refs), BASE_REFS);
    /* What stays: fully free regions while the rest is under the reserve,
     * so the reserve and at most one region more. */
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + HWT_MAX_REGION_BYTES);
    size_t after = hwt__pool_capacity(&timer->pool);
    print_message("  %d timeouts: pool of %zu at the peak, %zu once free (bound %zu)\n", N, peak,
                  after, bound);
    assert_true(after <= bound);
    free(h);
    hwtt_destroy(timer);
}

/* The worker frees the cancelled timeouts whose handles were released
 * first, into its own cache. Freed in random order (connections close in
 * any order), the last of them sat in every region of the burst, and kept
 * each mapped for as long as the worker ran: 72 MB of 4 M timeouts in the
 * reviewer's run. The worker now gives its cache's freed timeouts back
 * before it sleeps. The cancels and releases run on a thread that exits
 * (its own cache goes back then), so that only the worker's could hold. */
struct cancel_job {
    hwt_timeout **h;
    size_t n;
};

static void *cancel_and_release_shuffled(void *p)
{
    struct cancel_job *job = p;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = job->n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = x % (i + 1);
        hwt_timeout *t = job->h[i];
        job->h[i] = job->h[j];
        job->h[j] = t;
    }
    for (size_t i = 0; i < job->n; i++) {
        if (!hwt_timeout_cancel(job->h[i]))
            return p;
        hwt_timeout_release(job->h[i]); /* first: the worker's unlink frees it */
    }
    return NULL;
}

static void test_the_workers_freed_timeouts_go_back(void **state)
{
    (void)state;
    enum { N = 400000 }; /* ~19 MB: regions up to 2 MiB */
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_timeout **h = schedule_kept(timer, N);
    set_last_take(timer, LONG_AGO);
    struct cancel_job job = {h, N};
    pthread_t canceller;
    assert_int_equal(pthread_create(&canceller, NULL, cancel_and_release_shuffled, &job), 0);
    void *failed;
    pthread_join(canceller, &failed);
    assert_null(failed);
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + HWT_MAX_REGION_BYTES);
    bool back = hwtt_wait_until(hwt__pool_capacity(&timer->pool) <= bound, hwtt_slack_ms(5000));
    print_message("  %d cancelled in random order: pool of %zu (bound %zu)\n", N,
                  hwt__pool_capacity(&timer->pool), bound);
    assert_true(back);
    free(h);
    hwtt_destroy(timer);
}

/* While threads take timeouts, regions that become free are kept, up to
 * the busy allowance (a churn takes them again at once); once none has
 * taken any for a while, the next give-back trims to the reserve. */
static void test_a_busy_depot_keeps_more(void **state)
{
    (void)state;
    enum { N = 600000 }; /* ~29 MB: more than the allowance */
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_timeout **h = schedule_kept(timer, N);
    for (size_t i = 0; i < N; i++)
        assert_true(hwt_timeout_cancel(h[i]));
    assert_true(hwtt_wait_until(only_handles_hold(h, N), hwtt_slack_ms(5000)));
    size_t region = timeouts_in(HWT_MAX_REGION_BYTES);
    size_t busy = timeouts_in(HWT_POOL_BUSY_KEEP_BYTES);

    set_last_take(timer, ALWAYS_NOW);
    for (size_t i = 1; i < N; i++)
        hwt_timeout_release(h[i]);
    size_t kept_busy = hwt__pool_capacity(&timer->pool);
    set_last_take(timer, LONG_AGO);
    hwt_timeout_release(h[0]); /* a give-back after the depot went quiet */
    size_t kept_quiet = hwt__pool_capacity(&timer->pool);
    print_message("  %d timeouts free: %zu kept while busy (allowance %zu), %zu once quiet\n", N,
                  kept_busy, busy, kept_quiet);
    assert_true(kept_busy + region > busy);
    assert_true(kept_busy <= busy + region);
    assert_true(kept_quiet <= timeouts_in(HWT_POOL_RESERVE_BYTES + HWT_MAX_REGION_BYTES));
    free(h);
    hwtt_destroy(timer);
}

#define FAR_TAKES 8192

/* The busy allowance lasts while threads take timeouts, not for good. A
 * far timeout has the worker sleep long; a burst's timeouts are cancelled
 * and let go of, and released in two halves: the first while the depot is
 * quiet (those regions go back at once), the second right after a thread
 * took timeouts for a far one (which wakes nobody): those are kept for the
 * allowance, after the worker planned its sleep. It must be woken to trim
 * them once the depot has been quiet for a while. */
struct far_taker {
    hwt_timer *timer;
    hwt_timeout *h[FAR_TAKES];
    int failures;
};

/* A new thread, whose empty cache takes from the depot: at a churn's pace
 * (some hundred takes of a magazine), for far timeouts that wake nobody. */
static void *take_far(void *p)
{
    struct far_taker *f = p;
    for (size_t i = 0; i < FAR_TAKES; i++)
        if (hwt_new_timeout(f->timer, noop, NULL, 2, HWT_HOURS, &f->h[i]) != 0)
            f->failures++;
    return NULL;
}

static void release_far(struct far_taker *f)
{
    for (size_t i = 0; i < FAR_TAKES; i++)
        hwt_timeout_release(f->h[i]);
}

/* A burst of n timeouts with handles, cancelled and let go of by the
 * worker (only the handles hold them), with a far timeout (*far) that has
 * the worker plan an hour-long sleep: it has planned when this returns. */
static hwt_timeout **burst_under_a_long_sleep(hwt_timer *timer, size_t n, hwt_timeout **far)
{
    assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, far), 0);
    hwt_timeout **h = schedule_kept(timer, n);
    for (size_t i = 0; i < n; i++)
        assert_true(hwt_timeout_cancel(h[i]));
    assert_true(hwtt_wait_until(only_handles_hold(h, n), hwtt_slack_ms(5000)));
    int64_t minute = 60 * INT64_C(1000000000);
    assert_true(hwtt_wait_until(atomic_load(&timer->wake_before) > hwt__rel_now(timer) + minute,
                                hwtt_slack_ms(5000)));
    hwtt_sleep_ms(100); /* time for the worker to go to sleep: its plan is made */
    return h;
}

static void test_the_busy_allowance_goes_once_quiet(void **state)
{
    (void)state;
    enum { N = 600000 }; /* ~29 MB */
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_timeout *far;
    hwt_timeout **h = burst_under_a_long_sleep(timer, N, &far);
    for (size_t i = 0; i < N / 2; i++)
        hwt_timeout_release(h[i]);
    static struct far_taker f;
    f = (struct far_taker){.timer = timer};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, take_far, &f), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(f.failures, 0);
    for (size_t i = N / 2; i < N; i++) { /* threads still take (however slow this is) */
        if ((i - N / 2) % 2048 == 0)
            set_last_take(timer, coarse_now());
        hwt_timeout_release(h[i]);
    }
    size_t at_end = hwt__pool_capacity(&timer->pool);
    /* The reserve, a region, and the far timeouts' region. */
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + 2 * HWT_MAX_REGION_BYTES);
    assert_true(at_end > bound); /* kept for the allowance: there is something to trim */
    bool back = hwtt_wait_until(hwt__pool_capacity(&timer->pool) <= bound, hwtt_slack_ms(3000));
    print_message("  %d freed around a take: pool of %zu then, %zu once quiet (bound %zu)\n", N,
                  at_end, hwt__pool_capacity(&timer->pool), bound);
    release_far(&f);
    hwt_timeout_release(far);
    free(h);
    hwtt_destroy(timer);
    assert_true(back);
}

/* After a stop no thread takes timeouts: what the stop frees goes back
 * then, busy allowance or not (threads scheduled up to the stop). */
static void test_a_stopped_timer_keeps_no_allowance(void **state)
{
    (void)state;
    enum { N = 400000 };
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    static hwtt_rec rec;
    struct sched_job job = {timer, N, NULL, &rec, 0};
    schedule_on_thread(&job);
    set_last_take(timer, ALWAYS_NOW);
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    size_t after = hwt__pool_capacity(&timer->pool);
    print_message("  %d dropped by a stop while busy: pool of %zu after it\n", N, after);
    hwtt_destroy(timer);
    assert_int_equal(after, 0);
}

/* The depot's free count can pass the reserve and a region without any
 * region becoming entirely free (half of each region's timeouts freed):
 * the regions kept while it held less than the reserve are then the busy
 * allowance's, which the worker did not plan a trim for. It is woken to
 * plan one, and trims them once the depot is quiet. */
static bool idle_beyond_reserve(hwt_timer *timer)
{
    size_t region = timeouts_in(HWT_MAX_REGION_BYTES);
    pthread_mutex_lock(&timer->pool.lock);
    bool beyond = timer->pool.regions[HWT_REGIONS_IDLE] != NULL &&
                  timer->pool.free >= timeouts_in(HWT_POOL_RESERVE_BYTES) + region;
    pthread_mutex_unlock(&timer->pool.lock);
    return beyond;
}

static void test_regions_kept_for_the_reserve_go_once_quiet(void **state)
{
    (void)state;
    enum { N = 600000 };
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_timeout *far;
    hwt_timeout **h = burst_under_a_long_sleep(timer, N, &far);
    /* Quiet: the first regions go entirely free while the depot holds less
     * than the reserve, and are kept for it. */
    set_last_take(timer, LONG_AGO);
    size_t first = timeouts_in(HWT_POOL_RESERVE_BYTES);
    for (size_t i = 0; i < first; i++)
        hwt_timeout_release(h[i]);
    /* Busy (threads take about now), and every other timeout of the rest
     * freed: no region entirely free, the free count far past the reserve. */
    for (size_t i = first; i < N; i += 2) {
        if ((i - first) % 2048 == 0)
            set_last_take(timer, coarse_now());
        hwt_timeout_release(h[i]);
    }
    assert_true(idle_beyond_reserve(timer)); /* there is something to trim */
    static struct far_taker f; /* real takes, then quiet */
    f = (struct far_taker){.timer = timer};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, take_far, &f), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(f.failures, 0);
    bool trimmed = hwtt_wait_until(!idle_beyond_reserve(timer), hwtt_slack_ms(3000));
    print_message("  after the depot went quiet: pool of %zu, regions beyond the reserve %s\n",
                  hwt__pool_capacity(&timer->pool), trimmed ? "trimmed" : "kept");
    for (size_t i = first + 1; i < N; i += 2)
        hwt_timeout_release(h[i]);
    release_far(&f);
    hwt_timeout_release(far);
    free(h);
    hwtt_destroy(timer);
    assert_true(trimmed);
}

/* A light load after a burst: a task that schedules the next one a tick
 * later, one pending at a time. Its caches go back and forth with the
 * depot (the worker gives its cache back before each sleep, and the next
 * schedule takes a magazine): every 10 ms, or every 250 us, as often as a
 * churn's takes, though it allocates one timeout a tick. The allowance
 * goes. */
struct periodic {
    hwt_timer *timer;
    int64_t period_us;
    atomic_bool stop;
    atomic_int runs, failures;
};

static void periodic_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct periodic *p = arg;
    atomic_fetch_add(&p->runs, 1);
    if (!atomic_load(&p->stop) &&
        hwt_new_timeout(p->timer, periodic_task, p, p->period_us, HWT_MICROSECONDS, NULL) != 0)
        atomic_fetch_add(&p->failures, 1);
}

/* A burst of n timeouts cancelled and released while threads still take:
 * the depot keeps the busy allowance. */
static void burst_ends_busy(hwt_timer *timer, size_t n)
{
    hwt_timeout **h = schedule_kept(timer, n);
    for (size_t i = 0; i < n; i++)
        assert_true(hwt_timeout_cancel(h[i]));
    assert_true(hwtt_wait_until(only_handles_hold(h, n), hwtt_slack_ms(5000)));
    /* Often: under TSan on a busy machine 2 048 releases took longer than
     * the depot's quiet time, and the worker trimmed it mid-burst. */
    for (size_t i = 0; i < n; i++) {
        if (i % 128 == 0)
            set_last_take(timer, coarse_now());
        hwt_timeout_release(h[i]);
    }
    /* Still taking as it ends: the caller reads the pool at once, before a
     * slow run (TSan) lets the depot go quiet and the worker trim it. */
    set_last_take(timer, coarse_now());
    free(h);
}

static void light_load_after_a_burst(int64_t period_us)
{
    hwt_timer *timer = hwtt_track(hwtt_timer((uint64_t)period_us, HWT_MICROSECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    burst_ends_busy(timer, 600000);
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + 2 * HWT_MAX_REGION_BYTES);
    size_t at_end = hwt__pool_capacity(&timer->pool);
    static struct periodic p;
    p = (struct periodic){.timer = timer, .period_us = period_us};
    assert_int_equal(hwt_new_timeout(timer, periodic_task, &p, period_us, HWT_MICROSECONDS, NULL),
                     0);
    bool back = hwtt_wait_until(hwt__pool_capacity(&timer->pool) <= bound, hwtt_slack_ms(3000));
    size_t with_load = hwt__pool_capacity(&timer->pool);
    atomic_store(&p.stop, true);
    int runs_at_stop = atomic_load(&p.runs);
    assert_true(hwtt_wait_until(atomic_load(&p.runs) > runs_at_stop, hwtt_slack_ms(5000)));
    print_message("  600000 freed: pool of %zu then, %zu under a task every %lld us (%d runs, "
                  "bound %zu)\n",
                  at_end, with_load, (long long)period_us, runs_at_stop, bound);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&p.failures), 0);
    assert_true(at_end > bound);
    assert_true(back);
}

static void test_a_light_load_keeps_no_allowance(void **state)
{
    (void)state;
    light_load_after_a_burst(10000);
}

static void test_a_light_load_on_a_fine_tick_keeps_no_allowance(void **state)
{
    (void)state;
    light_load_after_a_burst(250);
}

/* A thread that schedules on two timers in turn (a light load) gives its
 * cache back to one and takes from the other at each switch. */
struct alternator {
    hwt_timer *a, *b;
    atomic_bool stop;
    atomic_int rounds, failures;
};

static void *alternate(void *p)
{
    struct alternator *x = p;
    while (!atomic_load(&x->stop)) {
        if (hwt_new_timeout(x->a, noop, NULL, 20, HWT_MILLISECONDS, NULL) != 0 ||
            hwt_new_timeout(x->b, noop, NULL, 20, HWT_MILLISECONDS, NULL) != 0)
            atomic_fetch_add(&x->failures, 1);
        atomic_fetch_add(&x->rounds, 1);
        hwtt_sleep_us(500);
    }
    return NULL;
}

static void test_a_thread_using_two_timers_keeps_no_allowance(void **state)
{
    (void)state;
    hwt_timer *a = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    hwt_timer *b = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(a), 0);
    assert_int_equal(hwt_timer_start(b), 0);
    burst_ends_busy(a, 600000);
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + 2 * HWT_MAX_REGION_BYTES);
    size_t at_end = hwt__pool_capacity(&a->pool);
    static struct alternator x;
    x = (struct alternator){.a = a, .b = b};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, alternate, &x), 0);
    bool back = hwtt_wait_until(hwt__pool_capacity(&a->pool) <= bound, hwtt_slack_ms(3000));
    size_t with_load = hwt__pool_capacity(&a->pool);
    atomic_store(&x.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("  600000 freed: pool of %zu then, %zu under a thread using two timers (%d "
                  "rounds, bound %zu)\n",
                  at_end, with_load, atomic_load(&x.rounds), bound);
    hwtt_destroy(a);
    hwtt_destroy(b);
    assert_int_equal(atomic_load(&x.failures), 0);
    assert_true(at_end > bound);
    assert_true(back);
}

/* What a thread allocated counts towards a churn when it gives its cache
 * back, not only when it takes again: a thread that churns on two timers
 * in turn gives its cache to one and takes from the other at each switch,
 * and would otherwise never count. Here 1 100 timeouts, of which the two
 * takes after the first counted 818, then a give-back. */
static bool depot_busy(hwt_timer *timer)
{
    pthread_mutex_lock(&timer->pool.lock);
    bool busy = coarse_now() - timer->pool.last_take_ns < 50 * INT64_C(1000000);
    pthread_mutex_unlock(&timer->pool.lock);
    return busy;
}

struct allocate_then_give_back {
    hwt_timer *timer;
    bool busy_before, busy_after;
    int failures;
};

static void *allocate_then_give_back(void *p)
{
    struct allocate_then_give_back *job = p;
    for (int i = 0; i < 1100; i++)
        if (hwt_new_timeout(job->timer, noop, NULL, 1, HWT_HOURS, NULL) != 0)
            job->failures++;
    job->busy_before = depot_busy(job->timer);
    hwt__pool_forget_thread(job->timer); /* as a schedule on another timer would */
    job->busy_after = depot_busy(job->timer);
    return NULL;
}

static void test_a_cache_given_back_counts_what_it_allocated(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    set_last_take(timer, LONG_AGO);
    struct allocate_then_give_back job = {.timer = timer};
    pthread_t th;
    int64_t t0 = hwtt_now_ns();
    assert_int_equal(pthread_create(&th, NULL, allocate_then_give_back, &job), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    int64_t took_ms = (hwtt_now_ns() - t0) / 1000000;
    assert_int_equal(job.failures, 0);
    if (took_ms >= 40) /* the count is per 50 ms window: this run was too slow to tell */
        skip();
    assert_false(job.busy_before);
    assert_true(job.busy_after);
}

/* Small regions kept for the reserve before a stop go at the stop too. */
static void test_a_stopped_small_pool_keeps_nothing_free(void **state)
{
    (void)state;
    enum { N = 2000 }; /* regions of 1, 2 and 4 chunks */
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_timeout **h = schedule_kept(timer, N);
    for (size_t i = 0; i < N; i++)
        assert_true(hwt_timeout_cancel(h[i]));
    assert_true(hwtt_wait_until(only_handles_hold(h, N), hwtt_slack_ms(5000)));
    for (size_t i = 0; i < N; i++) /* this thread never scheduled: straight to the depot */
        hwt_timeout_release(h[i]);
    size_t before = hwt__pool_capacity(&timer->pool);
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    size_t after = hwt__pool_capacity(&timer->pool);
    print_message("  %d free before the stop: pool of %zu, %zu after it\n", N, before, after);
    free(h);
    hwtt_destroy(timer);
    assert_true(before > 0);
    assert_int_equal(after, 0);
}

/* A thread that released a burst's handles in random order caches its last
 * frees, each in another region; taking and freeing one timeout at a time
 * afterwards (a light load) reuses the same one, so the others kept their
 * regions mapped for as long as the thread lived. A thread that keeps
 * calling gives what it caches back every so often. */
struct light_load {
    hwt_timer *timer;
    size_t n;
    hwt_timeout **h;
    atomic_bool released, stop;
    atomic_int failures;
    int64_t period_ms; /* between two timeouts of the light load (0: 1 ms) */
};

static void *burst_then_light_load(void *p)
{
    struct light_load *l = p;
    for (size_t i = 0; i < l->n; i++)
        if (hwt_new_timeout(l->timer, noop, NULL, 1, HWT_MILLISECONDS, &l->h[i]) != 0)
            atomic_fetch_add(&l->failures, 1);
    /* Run, and let go of by the worker: the release frees here. */
    if (!hwtt_wait_until(only_handles_hold(l->h, l->n), hwtt_slack_ms(10000)))
        atomic_fetch_add(&l->failures, 1);
    uint64_t x = 0x9e3779b97f4a7c15u; /* connections close in any order */
    for (size_t i = l->n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = x % (i + 1);
        hwt_timeout *t = l->h[i];
        l->h[i] = l->h[j];
        l->h[j] = t;
    }
    for (size_t i = 0; i < l->n; i++)
        hwt_timeout_release(l->h[i]);
    atomic_store(&l->released, true);
    while (!atomic_load(&l->stop)) {
        hwt_timeout *t;
        if (hwt_new_timeout(l->timer, noop, NULL, 0, HWT_MILLISECONDS, &t) != 0 ||
            !hwtt_wait_until(only_handles_hold(&t, 1), hwtt_slack_ms(5000))) {
            atomic_fetch_add(&l->failures, 1);
            break;
        }
        hwt_timeout_release(t);
        hwtt_sleep_ms(l->period_ms > 0 ? l->period_ms : 1);
    }
    return NULL;
}

/* A thread releases a burst of N in random order, then keeps a light load
 * (a timeout every period_ms; 0: every 1 ms): the pool must be back
 * within the bound (the reserve, a region, and the light load's region)
 * within `within_ms`. */
static void check_light_load_gives_back(int64_t period_ms, int64_t within_ms)
{
    enum { N = 600000 }; /* ~29 MB, in a dozen regions */
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    assert_int_equal(hwt_timer_start(timer), 0);
    struct light_load l = {
        .timer = timer, .n = N, .h = calloc(N, sizeof(hwt_timeout *)), .period_ms = period_ms};
    assert_non_null(l.h);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, burst_then_light_load, &l), 0);
    assert_true(hwtt_wait_until(atomic_load(&l.released), hwtt_slack_ms(30000)));
    size_t at_release = hwt__pool_capacity(&timer->pool);
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + 2 * HWT_MAX_REGION_BYTES);
    bool back =
        hwtt_wait_until(hwt__pool_capacity(&timer->pool) <= bound, hwtt_slack_ms(within_ms));
    size_t while_alive = hwt__pool_capacity(&timer->pool);
    atomic_store(&l.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("  %d released in random order: pool of %zu then, %zu (waited up to %lld ms) "
                  "while the thread calls every %lld ms (bound %zu)\n",
                  N, at_release, while_alive, (long long)within_ms, (long long)period_ms, bound);
    assert_int_equal(atomic_load(&l.failures), 0);
    free(l.h);
    hwtt_destroy(timer);
    assert_true(back);
}

static void test_a_thread_that_keeps_calling_gives_its_cache_back(void **state)
{
    (void)state;
    check_light_load_gives_back(0, 5000);
}

/* The same, with a thread that keeps calling at a human pace: a timeout
 * every half second (a heartbeat, a client's requests). Its cache still
 * gives its freed timeouts back about once a second: an allocation looks
 * at the time every call (the schedule's own clock reading), not every 64
 * calls (32 rounds, 16 s, during which the last frees of the burst, in
 * random regions, kept the burst mapped). */
static void test_a_thread_that_calls_slowly_gives_its_cache_back(void **state)
{
    (void)state;
    (void)hwtt_slowdown(); /* cached before other threads read it */
    check_light_load_gives_back(hwtt_slack_ms(500), 3000); /* 3 x "about once a second" */
}

/* Several threads each schedule a burst (their regions double up to 2 MiB),
 * let it go, then keep a light load of one timeout at a time. Each thread's
 * cache holds the rest of the never-used chunk it was taking from (its
 * fresh run), in the last 2 MiB region of its burst. The periodic give-back
 * returns that run too, not only the magazines of freed timeouts: kept, it
 * kept a whole region of each such thread's burst mapped (and populated)
 * for minutes, while its load was one timeout - the footprint followed the
 * number of threads that once had a burst, not the load. */
enum { SPREAD_THREADS = 6, SPREAD_BURST = 60000 }; /* past 16 KiB .. 1 MiB: into 2 MiB */

struct spread_job {
    hwt_timer *timer;
    hwt_timeout **h;
    atomic_int *released;
    atomic_bool *stop;
    atomic_int failures;
    atomic_int rounds; /* of the light load */
};

/* Every burst is scheduled before any is let go of: each thread maps its
 * own regions, none takes another's freed timeouts. */
static pthread_barrier_t spread_scheduled;

static void *burst_then_one_at_a_time(void *p)
{
    struct spread_job *job = p;
    for (size_t i = 0; i < SPREAD_BURST; i++)
        if (hwt_new_timeout(job->timer, noop, NULL, 1, HWT_HOURS, &job->h[i]) != 0)
            atomic_fetch_add(&job->failures, 1);
    pthread_barrier_wait(&spread_scheduled);
    for (size_t i = 0; i < SPREAD_BURST; i++)
        if (!hwt_timeout_cancel(job->h[i]))
            atomic_fetch_add(&job->failures, 1);
    if (!hwtt_wait_until(only_handles_hold(job->h, SPREAD_BURST), hwtt_slack_ms(10000)))
        atomic_fetch_add(&job->failures, 1);
    for (size_t i = 0; i < SPREAD_BURST; i++)
        hwt_timeout_release(job->h[i]);
    atomic_fetch_add(job->released, 1);
    while (!atomic_load(job->stop)) { /* a light load: one timeout at a time */
        hwt_timeout *t; /* runs on the next tick; this thread's release frees it */
        if (hwt_new_timeout(job->timer, noop, NULL, 0, HWT_MILLISECONDS, &t) != 0 ||
            !hwtt_wait_until(only_handles_hold(&t, 1), hwtt_slack_ms(5000))) {
            atomic_fetch_add(&job->failures, 1);
            break;
        }
        hwt_timeout_release(t);
        atomic_fetch_add(&job->rounds, 1);
        hwtt_sleep_ms(1);
    }
    return NULL;
}

/* SPREAD_THREADS threads running burst_then_one_at_a_time on `timer`. */
struct spread {
    struct spread_job jobs[SPREAD_THREADS];
    pthread_t th[SPREAD_THREADS];
    atomic_int released;
    atomic_bool stop;
};

static void start_spread(struct spread *sp, hwt_timer *timer)
{
    atomic_store(&sp->released, 0);
    atomic_store(&sp->stop, false);
    pthread_barrier_init(&spread_scheduled, NULL, SPREAD_THREADS);
    for (int i = 0; i < SPREAD_THREADS; i++) {
        sp->jobs[i] =
            (struct spread_job){.timer = timer, .released = &sp->released, .stop = &sp->stop};
        sp->jobs[i].h = calloc(SPREAD_BURST, sizeof(hwt_timeout *));
        assert_non_null(sp->jobs[i].h);
        assert_int_equal(pthread_create(&sp->th[i], NULL, burst_then_one_at_a_time, &sp->jobs[i]),
                         0);
    }
}

/* Stops and joins them; their failures, and the rounds of their light loads
 * in *rounds. */
static int join_spread(struct spread *sp, int *rounds)
{
    atomic_store(&sp->stop, true);
    int failures = 0;
    *rounds = 0;
    for (int i = 0; i < SPREAD_THREADS; i++) {
        assert_int_equal(pthread_join(sp->th[i], NULL), 0);
        failures += atomic_load(&sp->jobs[i].failures);
        *rounds += atomic_load(&sp->jobs[i].rounds);
        free(sp->jobs[i].h);
    }
    pthread_barrier_destroy(&spread_scheduled);
    return failures;
}

static void test_threads_with_a_light_load_give_their_burst_back(void **state)
{
    (void)state;
    (void)hwtt_slowdown(); /* cached before other threads read it */
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    assert_int_equal(hwt_timer_start(timer), 0);
    static struct spread sp;
    start_spread(&sp, timer);
    bool all_released =
        hwtt_wait_until(atomic_load(&sp.released) == SPREAD_THREADS, hwtt_slack_ms(30000));
    size_t at_release = hwt__pool_capacity(&timer->pool);
    /* As for one thread that keeps calling: the reserve, a region, and the
     * light load's region. */
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + 2 * HWT_MAX_REGION_BYTES);
    /* Past the threads' give-backs (about once a second each). */
    bool back = hwtt_wait_until(hwt__pool_capacity(&timer->pool) <= bound, hwtt_slack_ms(3000));
    size_t while_alive = hwt__pool_capacity(&timer->pool);
    int rounds;
    int failures = join_spread(&sp, &rounds);
    size_t after_exit = hwt__pool_capacity(&timer->pool);
    print_message("  %d threads, %d each, then one at a time: pool of %zu at the release, %zu "
                  "3 s later under the light load (bound %zu), %zu once the threads exited\n",
                  SPREAD_THREADS, SPREAD_BURST, at_release, while_alive, bound, after_exit);
    hwtt_destroy(timer);
    assert_true(all_released);
    assert_int_equal(failures, 0);
    assert_true(back);
}

/* A stopped timer keeps no free memory (reliability.md), and a thread that
 * scheduled keeps its cache only until it "exits, calls again, or
 * schedules on another timer". A thread schedules a burst, the timer is
 * stopped (dropping it), and the thread, alive, calls on the timer again:
 * its schedules are refused before they reach the pool, and the refusal
 * gives its cache back - the rest of the never-used chunk it was taking
 * from, in the last 2 MiB region of its burst, which it kept mapped
 * (populated) for as long as the thread lived. */
struct stopped_job {
    hwt_timer *timer;
    size_t n;
    atomic_bool scheduled, stopped, called_again, may_exit;
    atomic_int failures;
};

static void *burst_then_call_the_stopped_timer(void *p)
{
    struct stopped_job *job = p;
    for (size_t i = 0; i < job->n; i++)
        if (hwt_new_timeout(job->timer, noop, NULL, 1, HWT_HOURS, NULL) != 0)
            atomic_fetch_add(&job->failures, 1);
    atomic_store(&job->scheduled, true);
    if (!hwtt_wait_until(atomic_load(&job->stopped), hwtt_slack_ms(30000)))
        atomic_fetch_add(&job->failures, 1);
    for (int i = 0; i < 1000; i++) /* calls again: refused */
        if (hwt_new_timeout(job->timer, noop, NULL, 1, HWT_HOURS, NULL) != HWT_ESTOPPED)
            atomic_fetch_add(&job->failures, 1);
    atomic_store(&job->called_again, true);
    hwtt_wait_until(atomic_load(&job->may_exit), hwtt_slack_ms(30000));
    return NULL;
}

static void test_a_stopped_timer_keeps_nothing_for_a_live_thread(void **state)
{
    (void)state;
    (void)hwtt_slowdown(); /* cached before other threads read it */
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    static struct stopped_job job;
    job = (struct stopped_job){.timer = timer, .n = 60000}; /* into a 2 MiB region */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, burst_then_call_the_stopped_timer, &job), 0);
    assert_true(hwtt_wait_until(atomic_load(&job.scheduled), hwtt_slack_ms(30000)));
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    atomic_store(&job.stopped, true);
    assert_true(hwtt_wait_until(atomic_load(&job.called_again), hwtt_slack_ms(30000)));
    bool back = hwtt_wait_until(hwt__pool_capacity(&timer->pool) == 0, hwtt_slack_ms(1000));
    size_t kept = hwt__pool_capacity(&timer->pool);
    atomic_store(&job.may_exit, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    size_t after_exit = hwt__pool_capacity(&timer->pool);
    print_message("  %zu dropped by a stop: pool of %zu while the thread that scheduled them "
                  "lives and calls again, %zu once it exited\n",
                  job.n, kept, after_exit);
    hwtt_destroy(timer);
    assert_int_equal(atomic_load(&job.failures), 0);
    assert_true(back);
}

/* The same threads' light load (some 6 000 timeouts in 2 s between them,
 * 150 in 50 ms: 7 times below a churn's 1 024), while it runs and once it
 * ends: the depot must not read "busy". Each cache counts what it allocated
 * since it last took from the depot as it takes again or gives everything
 * back - as it recycles its own magazine, a second of its light load, and
 * the tail of its burst - and only the 50 ms window's share of it counts.
 * Counted whole, the threads' periodic give-backs (together: they started
 * together) and their exits made the depot busy: the regions the exits
 * emptied were kept for the busy allowance, and the idle worker was woken
 * to plan a trim and again to make it. */
static void test_a_light_load_that_ends_keeps_no_allowance(void **state)
{
    (void)state;
    (void)hwtt_slowdown(); /* cached before other threads read it */
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    assert_int_equal(hwt_timer_start(timer), 0);
    static struct spread sp;
    start_spread(&sp, timer);
    assert_true(hwtt_wait_until(atomic_load(&sp.released) == SPREAD_THREADS, hwtt_slack_ms(30000)));
    /* The light load: some 1 000 timeouts a thread, one at a time, in 2 s.
     * Past the burst's own takes (50 ms), the depot must never read busy:
     * the threads, started together, give their caches back together about
     * once a second, and each then counts what it allocated since its last
     * take - a second of its light load. */
    hwtt_sleep_ms(100);
    bool busy_during = false;
    int64_t light_until = hwtt_now_ns() + 1900 * INT64_C(1000000);
    while (hwtt_now_ns() < light_until) {
        busy_during = busy_during || depot_busy(timer);
        hwtt_sleep_ms(2);
    }
    int rounds;
    int failures = join_spread(&sp, &rounds);
    bool busy = depot_busy(timer);
    size_t at_exit = hwt__pool_capacity(&timer->pool);
    hwt_stats before, after;
    hwt_timer_stats(timer, &before);
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + HWT_MAX_REGION_BYTES);
    /* Nothing is due: the worker has no reason to wake. */
    bool trimmed =
        hwtt_wait_until(hwt__pool_capacity(&timer->pool) <= bound, hwtt_slack_ms(1000));
    hwtt_sleep_ms(200);
    hwt_timer_stats(timer, &after);
    print_message("  %d light loads (%d timeouts in 2 s): depot %s during them; ended: depot "
                  "%s, pool of %zu at once (bound %zu), %zu later; the idle worker woke %llu "
                  "times\n",
                  SPREAD_THREADS, rounds, busy_during ? "busy" : "quiet", busy ? "busy" : "quiet",
                  at_exit, bound,
                  hwt__pool_capacity(&timer->pool),
                  (unsigned long long)(after.wakeups - before.wakeups));
    hwtt_destroy(timer);
    assert_int_equal(failures, 0);
    assert_true(trimmed);
    assert_false(busy_during);
    assert_false(busy);
    assert_true(at_exit <= bound);
    assert_int_equal(after.wakeups, before.wakeups);
}

/* A thread that released a burst's handles in random order, then keeps
 * calling only by releasing the handles it still holds, one every 300 ms
 * (connections closing one by one), gives its cache back within seconds
 * too: a free looks at the clock every few frees. Every 64, it kept the last
 * frees of its burst - each in another 2 MiB region - for 19 s. */
struct slow_releases {
    hwt_timer *timer;
    size_t n, kept;
    hwt_timeout **h;
    hwt_timeout **later; /* `kept` handles of this timer's first chunk, to release slowly */
    int64_t period_ms;
    atomic_bool released, stop;
    atomic_int failures;
    atomic_size_t cached; /* what its cache held after its last call */
};

static void *burst_then_release_slowly(void *p)
{
    struct slow_releases *l = p;
    for (size_t i = 0; i < l->n; i++)
        if (hwt_new_timeout(l->timer, noop, NULL, 1, HWT_MILLISECONDS, &l->h[i]) != 0)
            atomic_fetch_add(&l->failures, 1);
    if (!hwtt_wait_until(only_handles_hold(l->h, l->n), hwtt_slack_ms(10000)))
        atomic_fetch_add(&l->failures, 1);
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = l->n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = x % (i + 1);
        hwt_timeout *t = l->h[i];
        l->h[i] = l->h[j];
        l->h[j] = t;
    }
    for (size_t i = 0; i < l->n; i++)
        hwt_timeout_release(l->h[i]);
    atomic_store(&l->cached, hwt__pool_thread_cached(l->timer));
    atomic_store(&l->released, true);
    for (size_t i = 0; i < l->kept && !atomic_load(&l->stop); i++) {
        hwtt_sleep_ms(l->period_ms);
        hwt_timeout_release(l->later[i]); /* keeps calling: a release a period */
        l->later[i] = NULL;
        atomic_store(&l->cached, hwt__pool_thread_cached(l->timer));
    }
    while (!atomic_load(&l->stop))
        hwtt_sleep_ms(5);
    for (size_t i = 0; i < l->kept; i++)
        if (l->later[i] != NULL)
            hwt_timeout_release(l->later[i]);
    return NULL;
}

static void test_a_thread_that_releases_slowly_gives_its_cache_back(void **state)
{
    (void)state;
    (void)hwtt_slowdown();
    enum { N = 600000, KEPT = 20 };
    size_t first = first_region_capacity();
    hwt_timer *timer = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    assert_int_equal(hwt_timer_start(timer), 0);
    static struct slow_releases l;
    l = (struct slow_releases){.timer = timer, .n = N, .kept = KEPT, .period_ms = 300};
    l.h = calloc(N, sizeof(hwt_timeout *));
    assert_non_null(l.h);
    /* The handles released slowly: of the timer's first region (one chunk,
     * scheduled here), so that they keep no region of the burst. */
    static hwt_timeout *later[KEPT];
    for (int i = 0; i < KEPT; i++)
        assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_MILLISECONDS, &later[i]), 0);
    assert_true(hwtt_wait_until(only_handles_hold(later, KEPT), hwtt_slack_ms(5000)));
    l.later = later;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, burst_then_release_slowly, &l), 0);
    assert_true(hwtt_wait_until(atomic_load(&l.released), hwtt_slack_ms(30000)));
    size_t at_release = hwt__pool_capacity(&timer->pool);
    size_t cached_then = atomic_load(&l.cached);
    /* The reserve, a region, and the first region (its handles). */
    size_t bound =
        timeouts_in(HWT_POOL_RESERVE_BYTES + 2 * HWT_MAX_REGION_BYTES) + first;
    /* "About once a second": three seconds of releases, ten calls. */
    bool back = hwtt_wait_until(hwt__pool_capacity(&timer->pool) <= bound, 3000);
    size_t while_alive = hwt__pool_capacity(&timer->pool), cached = atomic_load(&l.cached);
    atomic_store(&l.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("  %d released in random order, then one every %lld ms: cache of %zu then, "
                  "%zu 3 s later; pool of %zu then, %zu 3 s later (bound %zu)\n",
                  N, (long long)l.period_ms, cached_then, cached, at_release, while_alive, bound);
    assert_int_equal(atomic_load(&l.failures), 0);
    free(l.h);
    hwtt_destroy(timer);
    assert_true(back);
}

/* A burst within the reserve keeps its memory (a load that goes up and
 * down does not map and unmap in a loop): the next burst reuses it. */
static void test_small_bursts_keep_their_memory(void **state)
{
    (void)state;
    size_t n = timeouts_in(HWT_POOL_RESERVE_BYTES) / 4;
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    size_t first = 0;
    for (int round = 0; round < 3; round++) {
        hwt_timeout **h = schedule_kept(timer, n);
        size_t capacity = hwt__pool_capacity(&timer->pool);
        if (round == 0)
            first = capacity;
        for (size_t i = 0; i < n; i++)
            assert_true(hwt_timeout_cancel(h[i]));
        assert_true(hwtt_wait_until(only_handles_hold(h, n), hwtt_slack_ms(5000)));
        assert_int_equal(atomic_load(&timer->refs), BASE_REFS + n); /* the test thread caches none */
        for (size_t i = 0; i < n; i++)
            hwt_timeout_release(h[i]);
        assert_int_equal(atomic_load(&timer->refs), BASE_REFS); /* all in the depot */
        assert_int_equal(hwt__pool_capacity(&timer->pool), capacity);
        assert_int_equal(capacity, first); /* the later bursts mapped nothing */
        free(h);
    }
    hwtt_destroy(timer);
}

/* hwt__pool_for_each reads every timeout of every region while other
 * threads free: a region made entirely free during the scan stays mapped
 * until the scan ends (else the scan reads unmapped memory), and a free
 * during the scan does not wait for it (the scan holds no lock). */
struct scan_ctx {
    hwt_timer *timer;
    hwt_timeout **handles;
    size_t n, visits, capacity_during;
    unsigned linked;
};

static void release_all_then_count(void *p, hwt_timeout *t)
{
    struct scan_ctx *ctx = p;
    if (ctx->visits++ == 0) {
        for (size_t i = 0; i < ctx->n; i++)
            hwt_timeout_release(ctx->handles[i]);
        ctx->capacity_during = hwt__pool_capacity(&ctx->timer->pool);
    }
    ctx->linked += hwt__timeout_in_wheel(t); /* reads the timeout */
}

static void test_no_region_goes_back_during_a_scan(void **state)
{
    (void)state;
    enum { N = 300000 };
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_timeout **h = schedule_kept(timer, N);
    for (size_t i = 0; i < N; i++)
        assert_true(hwt_timeout_cancel(h[i]));
    assert_true(hwtt_wait_until(only_handles_hold(h, N), hwtt_slack_ms(5000)));
    size_t before = hwt__pool_capacity(&timer->pool);
    set_last_take(timer, LONG_AGO);

    struct scan_ctx ctx = {timer, h, N, 0, 0, 0};
    hwt__pool_for_each(&timer->pool, release_all_then_count, &ctx);
    size_t after = hwt__pool_capacity(&timer->pool);
    print_message("  pool of %zu before the scan, %zu during it, %zu after\n", before,
                  ctx.capacity_during, after);
    assert_int_equal(ctx.visits, before);
    assert_int_equal(ctx.capacity_during, before);
    assert_int_equal(ctx.linked, 0);
    assert_true(after <= timeouts_in(HWT_POOL_RESERVE_BYTES + HWT_MAX_REGION_BYTES));
    assert_int_equal(atomic_load(&timer->refs), BASE_REFS);
    free(h);
    hwtt_destroy(timer);
}

/* A thread caches at most HWT_POOL_THREAD_CACHE_MAX timeouts, after
 * scheduling many and after freeing many: the timer's reference count (one
 * per timeout out of the depot) says so, not only the cache itself. */
struct cache_job {
    hwt_timer *timer;
    hwt_timeout **h;
    size_t n;
    size_t cached_scheduled, cached_freed;
    pthread_barrier_t step;
};

static void *schedule_wait_release(void *p)
{
    struct cache_job *job = p;
    for (size_t i = 0; i < job->n; i++)
        if (hwt_new_timeout(job->timer, noop, NULL, 1, HWT_HOURS, &job->h[i]) != 0)
            return (void *)1;
    job->cached_scheduled = hwt__pool_thread_cached(job->timer);
    pthread_barrier_wait(&job->step); /* the test cancels */
    pthread_barrier_wait(&job->step);
    for (size_t i = 0; i < job->n; i++)
        hwt_timeout_release(job->h[i]);
    job->cached_freed = hwt__pool_thread_cached(job->timer);
    pthread_barrier_wait(&job->step); /* the test counts */
    pthread_barrier_wait(&job->step);
    return NULL;
}

static void test_a_thread_caches_a_bounded_number(void **state)
{
    (void)state;
    enum { N = 100000 };
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    struct cache_job job = {timer, calloc(N, sizeof(hwt_timeout *)), N, 0, 0, {{0}}};
    assert_non_null(job.h);
    pthread_barrier_init(&job.step, NULL, 2);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, schedule_wait_release, &job), 0);

    pthread_barrier_wait(&job.step);
    for (size_t i = 0; i < N; i++)
        assert_true(hwt_timeout_cancel(job.h[i]));
    /* The worker let go of them: the handles and the thread's cache hold. */
    assert_true(hwtt_wait_until(only_handles_hold(job.h, N), hwtt_slack_ms(5000)));
    assert_int_equal(atomic_load(&timer->refs),
                     BASE_REFS + 1 + N + job.cached_scheduled); /* + the thread's binding */
    pthread_barrier_wait(&job.step);

    pthread_barrier_wait(&job.step);
    uint64_t refs = atomic_load(&timer->refs);
    pthread_barrier_wait(&job.step);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("  a thread caches %zu after %d schedules, %zu after %d frees (at most %zu)\n",
                  job.cached_scheduled, N, job.cached_freed, N,
                  (size_t)HWT_POOL_THREAD_CACHE_MAX);
    assert_true(job.cached_scheduled <= HWT_POOL_THREAD_CACHE_MAX);
    assert_true(job.cached_freed <= HWT_POOL_THREAD_CACHE_MAX);
    assert_int_equal(refs, BASE_REFS + 1 + job.cached_freed);
    assert_int_equal(atomic_load(&timer->refs), BASE_REFS); /* its exit gave them back */
    pthread_barrier_destroy(&job.step);
    free(job.h);
    hwtt_destroy(timer);
}

/* A thread whose cache allocation has emptied stays bound to the timer:
 * its flush, at thread exit or when it turns to another timer, locks that
 * timer's pool. It used to hold no reference then, so a destroy elsewhere
 * freed the timer under it (heap-use-after-free at the thread's exit). The
 * binding now holds one: after a stop, with every timeout ended and the
 * worker gone, the creator's and the bound thread's are all there is. */
struct emptying_job {
    hwt_timer *timer;
    atomic_int ran;
    atomic_bool emptied, may_exit;
    int scheduled;
};

static void *empty_the_cache(void *p)
{
    struct emptying_job *job = p;
    do {
        if (hwt_new_timeout(job->timer, hwtt_count_task, &job->ran, 0, HWT_MILLISECONDS, NULL) !=
            0)
            return NULL;
        job->scheduled++;
    } while (hwt__pool_thread_cached(job->timer) > 0);
    atomic_store(&job->emptied, true);
    int64_t deadline = hwtt_now_ns() + INT64_C(30) * 1000000000;
    while (!atomic_load(&job->may_exit) && hwtt_now_ns() < deadline)
        hwtt_sleep_us(100);
    return NULL; /* the cache's flush runs here */
}

static void test_an_emptied_cache_keeps_its_timer_alive(void **state)
{
    (void)state;
    hwt_timer *timer = hwtt_timer(1, HWT_MILLISECONDS, 64); /* not tracked: destroyed here */
    struct emptying_job job = {.timer = timer};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, empty_the_cache, &job), 0);
    assert_true(hwtt_wait_until(atomic_load(&job.emptied), hwtt_slack_ms(10000)));
    assert_true(job.scheduled > 0);
    assert_true(hwtt_wait_until(atomic_load(&job.ran) == job.scheduled, hwtt_slack_ms(10000)));
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0); /* the worker's cache is flushed */
    assert_int_equal(atomic_load(&timer->refs), 2);   /* the creator's and the binding's */
    hwt_timer_destroy(timer);
    atomic_store(&job.may_exit, true);
    pthread_join(thread, NULL);
}

/* A thread that schedules only to be refused (HWT_EREJECTED: the timer is
 * at max_pending_timeouts) still calls: it gives its cache - the rest of
 * its chunk - back about once a second. A thread schedules K one-hour
 * timeouts with handles, up to the limit, then schedules once every 300 ms,
 * ten times at most: its cache must be empty by then (refused calls never
 * reached the cache's clock before). */
struct refused_caller {
    hwt_timer *timer;
    size_t k, calls;
    hwt_timeout *h[32];
    size_t cached_before, cached_after, made;
    int failures;
};

static void *schedule_then_get_refused(void *p)
{
    struct refused_caller *s = p;
    for (size_t i = 0; i < s->k; i++)
        if (hwt_new_timeout(s->timer, noop, NULL, 1, HWT_HOURS, &s->h[i]) != 0)
            s->failures++;
    s->cached_before = hwt__pool_thread_cached(s->timer);
    s->cached_after = s->cached_before;
    for (size_t i = 0; i < s->calls && s->cached_after > 0; i++) {
        hwtt_sleep_ms(300);
        if (hwt_new_timeout(s->timer, noop, NULL, 1, HWT_HOURS, NULL) != HWT_EREJECTED)
            s->failures++;
        s->made = i + 1;
        s->cached_after = hwt__pool_thread_cached(s->timer);
    }
    for (size_t i = 0; i < s->k; i++)
        hwt_timeout_release(s->h[i]);
    return NULL;
}

static void test_a_thread_refused_for_the_limit_gives_its_cache_back(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 10;
    o.ticks_per_wheel = 64;
    o.max_pending_timeouts = 20;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    assert_int_equal(hwt_timer_start(timer), 0);
    static struct refused_caller s;
    s = (struct refused_caller){.timer = timer, .k = 20, .calls = 10};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, schedule_then_get_refused, &s), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("  cache of %zu after its schedules, %zu after %zu refused ones 300 ms apart\n",
                  s.cached_before, s.cached_after, s.made);
    hwtt_destroy(timer);
    assert_int_equal(s.failures, 0);
    assert_true(s.cached_before > 0);
    assert_int_equal(s.cached_after, 0);
}

/* The worker gives back what its cache holds before each sleep, also when a
 * task on timer A scheduled on timer B and so bound A's worker's cache to
 * B: it gave back nothing of B's then, and slept holding the rest of B's
 * chunk - once B was stopped, a region of a stopped timer that stayed
 * mapped. */
struct cross_timer {
    hwt_timer *other;
    size_t n;
    atomic_size_t cached_after_burst, cached_after_sleep;
    atomic_bool burst_done, checked;
    atomic_int failures;
};

static void burst_on_other(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct cross_timer *x = arg;
    for (size_t i = 0; i < x->n; i++)
        if (hwt_new_timeout(x->other, noop, NULL, 1, HWT_HOURS, NULL) != 0)
            atomic_fetch_add(&x->failures, 1);
    atomic_store(&x->cached_after_burst, hwt__pool_thread_cached(x->other));
    atomic_store(&x->burst_done, true);
}

static void look_at_other(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct cross_timer *x = arg;
    atomic_store(&x->cached_after_sleep, hwt__pool_thread_cached(x->other));
    atomic_store(&x->checked, true);
}

/* Two started timers: A (1 ms tick), whose worker the test watches, and B. */
static void start_two_timers(hwt_timer **a, hwt_timer **b)
{
    *a = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
    *b = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(*a), 0);
    assert_int_equal(hwt_timer_start(*b), 0);
}

/* Runs `probe` as a task of `a` 300 ms from now and waits until it sets
 * *done; how many times A's worker woke meanwhile (it must have slept). */
static uint64_t probe_after_a_sleep(hwt_timer *a, hwt_task_fn probe, void *arg, atomic_bool *done)
{
    hwt_stats before, after;
    hwt_timer_stats(a, &before);
    assert_int_equal(hwt_new_timeout(a, probe, arg, 300, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(done), hwtt_slack_ms(10000)));
    hwt_timer_stats(a, &after);
    return after.wakeups - before.wakeups;
}

static void test_a_worker_bound_to_another_timer_gives_back_before_it_sleeps(void **state)
{
    (void)state;
    hwt_timer *a, *b;
    start_two_timers(&a, &b);
    static struct cross_timer x;
    x = (struct cross_timer){.other = b, .n = 100000};
    assert_int_equal(hwt_new_timeout(a, burst_on_other, &x, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&x.burst_done), hwtt_slack_ms(10000)));
    uint64_t sleeps = probe_after_a_sleep(a, look_at_other, &x, &x.checked);
    /* Stopped: every timeout of B ended; only what A's worker caches is left. */
    assert_int_equal(hwt_stop(b, NULL, NULL), 0);
    bool empty = hwtt_wait_until(hwt__pool_capacity(&b->pool) == 0, 2000);
    print_message("  A's worker caches %zu of B's after its burst on B, %zu after %llu sleeps; "
                  "B's pool holds %zu timeouts 2 s after B's stop\n",
                  atomic_load(&x.cached_after_burst), atomic_load(&x.cached_after_sleep),
                  (unsigned long long)sleeps, hwt__pool_capacity(&b->pool));
    assert_int_equal(atomic_load(&x.failures), 0);
    assert_true(sleeps > 0);
    assert_int_equal(atomic_load(&x.cached_after_sleep), 0);
    assert_true(empty);
}

/* The same worker's cache after the other timer's stop refuses its task
 * (HWT_ESTOPPED): the refused schedule gives the cache back and unbinds it
 * (hwt__pool_forget_thread; a destroy of the other timer from a task does
 * the same). Before it sleeps the worker binds to its own timer again: it
 * rebound only a cache bound to another timer, and stayed unbound for good,
 * each timeout of its own timer it freed taking the pool's lock
 * (depot_put) instead of one give-back per sleep. */
struct rebind_check {
    hwt_timer *own, *other;
    atomic_int rc_first, rc_refused;
    atomic_bool first_done, other_stopped, refused_done, checked, bound_after;
};

/* One task: schedules on the other timer (binding the worker's cache to
 * it), waits (bounded) until the test has stopped that timer, and schedules
 * there again: refused, in the same pass, before any sleep. */
static void schedule_on_other_twice(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct rebind_check *x = arg;
    atomic_store(&x->rc_first, hwt_new_timeout(x->other, noop, NULL, 1, HWT_HOURS, NULL));
    atomic_store(&x->first_done, true);
    (void)hwtt_wait_until(atomic_load(&x->other_stopped), hwtt_slack_ms(10000));
    atomic_store(&x->rc_refused, hwt_new_timeout(x->other, noop, NULL, 1, HWT_HOURS, NULL));
    atomic_store(&x->refused_done, true);
}

static void look_at_own_binding(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct rebind_check *x = arg;
    atomic_store(&x->bound_after, hwt__pool_thread_bound(x->own));
    atomic_store(&x->checked, true);
}

static void test_a_worker_refused_by_another_timers_stop_binds_to_its_own_again(void **state)
{
    (void)state;
    hwt_timer *a, *b;
    start_two_timers(&a, &b);
    static struct rebind_check x;
    x = (struct rebind_check){.own = a, .other = b};
    assert_int_equal(hwt_new_timeout(a, schedule_on_other_twice, &x, 0, HWT_MILLISECONDS, NULL),
                     0);
    assert_true(hwtt_wait_until(atomic_load(&x.first_done), hwtt_slack_ms(10000)));
    assert_int_equal(hwt_stop(b, NULL, NULL), 0);
    atomic_store(&x.other_stopped, true);
    assert_true(hwtt_wait_until(atomic_load(&x.refused_done), hwtt_slack_ms(10000)));
    uint64_t sleeps = probe_after_a_sleep(a, look_at_own_binding, &x, &x.checked);
    print_message("  task on B: %d, then refused with %d; after %llu sleeps A's worker is %s A\n",
                  atomic_load(&x.rc_first), atomic_load(&x.rc_refused), (unsigned long long)sleeps,
                  atomic_load(&x.bound_after) ? "bound to" : "NOT bound to");
    assert_int_equal(atomic_load(&x.rc_first), 0);
    assert_int_equal(atomic_load(&x.rc_refused), HWT_ESTOPPED);
    assert_true(sleeps > 0);
    assert_true(atomic_load(&x.bound_after));
}

/* ------------------------------------------------------------ mapping ahead
 *
 * A thread that runs out of memory maps a region and populates it at once,
 * and sleeps, its CPU idle, while another thread populates one (one at a
 * time: arena.c). So a thread that grows full-size regions maps its next
 * one while a quarter of one is still to be taken, if no other thread is
 * populating then (pool.c, grow_ahead). */

/* Watches the pool of `timer` grow during one schedule: a full-size region
 * mapped with `room` timeouts still free beyond the i scheduled before (0:
 * it had run out). */
struct growth {
    hwt_timer *timer;
    size_t cap;         /* the pool's capacity before the call */
    size_t full_grown;  /* full-size regions mapped during calls */
    size_t grown_ahead; /* of them, with room left */
    size_t last_room;   /* at the last full-size growth */
};

static void note_growth(struct growth *g, size_t scheduled_before)
{
    size_t cap = hwt__pool_capacity(&g->timer->pool);
    if (cap >= g->cap + timeouts_in(HWT_MAX_REGION_BYTES)) {
        g->full_grown++;
        g->last_room = g->cap - scheduled_before;
        if (g->last_room > 0)
            g->grown_ahead++;
    }
    g->cap = cap;
}

struct ahead_job {
    struct growth g;
    size_t n;
    hwt_timeout **h;
    size_t scheduled;
    int failures;
};

/* Schedules up to n one-hour timeouts with handles, and stops right after
 * the second region mapped ahead (its memory all unused). */
static void *schedule_until_two_ahead(void *p)
{
    struct ahead_job *job = p;
    job->g.cap = hwt__pool_capacity(&job->g.timer->pool);
    for (size_t i = 0; i < job->n && job->g.grown_ahead < 2; i++) {
        if (hwt_new_timeout(job->g.timer, noop, NULL, 1, HWT_HOURS, &job->h[i]) != 0) {
            job->failures++;
            break;
        }
        job->scheduled++;
        note_growth(&job->g, i);
    }
    return NULL;
}

static void test_a_thread_maps_its_next_region_before_it_runs_out(void **state)
{
    (void)state;
    enum { N = 200000 }; /* small regions (~37 000), then five full-size ones */
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    hwt_timeout **h = calloc(N, sizeof *h);
    assert_non_null(h);
    struct ahead_job job = {.g = {.timer = timer}, .n = N, .h = h};
    pthread_t th; /* exits after: its cache goes back */
    assert_int_equal(pthread_create(&th, NULL, schedule_until_two_ahead, &job), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("  %zu scheduled: %zu full-size regions, %zu of them mapped ahead "
                  "(the last with %zu free)\n",
                  job.scheduled, job.g.full_grown, job.g.grown_ahead, job.g.last_room);
    assert_int_equal(job.failures, 0);
    /* The first full-size region comes when the small ones run out; each
     * after it while a quarter of the one before is left, none later. */
    assert_int_equal(job.g.grown_ahead, 2);
    assert_int_equal(job.g.full_grown, 3);
    assert_true(job.g.last_room >= timeouts_in(HWT_MAX_REGION_BYTES) / 8);

    /* The region mapped last was never used: it goes back with the rest. */
    for (size_t i = 0; i < job.scheduled; i++)
        assert_true(hwt_timeout_cancel(h[i]));
    assert_true(hwtt_wait_until(only_handles_hold(h, job.scheduled), hwtt_slack_ms(5000)));
    for (size_t i = 0; i < job.scheduled; i++) /* this thread never scheduled: to the depot */
        hwt_timeout_release(h[i]);
    assert_int_equal(hwt_stop(timer, NULL, NULL), 0);
    assert_int_equal(hwt__pool_capacity(&timer->pool), 0);
    free(h);
    hwtt_destroy(timer);
}

/* A gate at HWT_STEP_POPULATE_TURN: armed, the first thread to take the
 * turn to populate waits there, holding it, until the test opens it. */
static atomic_bool turn_armed, turn_reached, turn_open;

static void hold_the_populate_turn(hwt__step step, void *timer)
{
    (void)timer;
    if (step != HWT_STEP_POPULATE_TURN || !atomic_exchange(&turn_armed, false))
        return;
    atomic_store(&turn_reached, true);
    hwtt_wait_until(atomic_load(&turn_open), hwtt_slack_ms(5000)); /* a waiter fails, late */
}

static void *schedule_one_hour(void *p)
{
    return hwt_new_timeout(p, noop, NULL, 1, HWT_HOURS, NULL) == 0 ? NULL : p;
}

/* The thread that would map ahead while another populates goes on with
 * what it has (it would sleep through the other's population if it
 * waited), and maps ahead at its next chance. */
static void test_a_thread_skips_mapping_ahead_while_another_populates(void **state)
{
    (void)state;
    const size_t region = timeouts_in(HWT_MAX_REGION_BYTES);
    hwt_timer *timer = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    hwt_timer *other = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
    assert_int_equal(hwt_timer_start(timer), 0);
    assert_int_equal(hwt_timer_start(other), 0);
    struct growth g = {.timer = timer, .cap = hwt__pool_capacity(&timer->pool)};
    size_t i = 0;
    while (g.full_grown == 0) { /* up to a first full-size region of its own */
        assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
        note_growth(&g, i++);
    }
    assert_int_equal(g.grown_ahead, 0);

    /* Another thread takes the turn (its first region on `other`) and
     * holds it. */
    atomic_store(&turn_reached, false);
    atomic_store(&turn_open, false);
    atomic_store(&turn_armed, true);
    hwt__set_step_hook(hold_the_populate_turn);
    pthread_t populating;
    assert_int_equal(pthread_create(&populating, NULL, schedule_one_hour, other), 0);
    assert_true(hwtt_wait_until(atomic_load(&turn_reached), hwtt_slack_ms(5000)));

    /* Well into the last quarter of its region: every refill there would
     * map ahead, and finds the turn taken. */
    size_t held = g.cap;
    while (g.cap - i > region / 8 && g.cap == held) {
        assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
        note_growth(&g, i++);
    }
    bool skipped = g.cap == held && !atomic_load(&turn_open);
    atomic_store(&turn_open, true);
    void *failed;
    assert_int_equal(pthread_join(populating, &failed), 0);
    hwt__set_step_hook(NULL);
    assert_null(failed);
    assert_true(skipped); /* nothing mapped, and no waiting for the turn */

    /* The turn is free: the next refill maps ahead, with room left. */
    while (g.full_grown == 1 && g.cap > i) {
        assert_int_equal(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), 0);
        note_growth(&g, i++);
    }
    print_message("  region mapped ahead once the turn was free, with %zu free\n", g.last_room);
    assert_int_equal(g.grown_ahead, 1);
    assert_true(g.last_room > 0);
    hwtt_destroy(other);
    hwtt_destroy(timer);
}

int main(void)
{
    hwtt_watchdog(120);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_a_thread_maps_its_next_region_before_it_runs_out,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_thread_skips_mapping_ahead_while_another_populates,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_exiting_thread_gives_its_fresh_run_back,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_nothing_is_handed_out_twice, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_threads_that_schedule_little_hold_little,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_chunks_hold_whole_timeouts, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_stop_scan_skips_free_timeouts, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_freed_regions_go_back, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_the_workers_freed_timeouts_go_back, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_busy_depot_keeps_more, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_small_bursts_keep_their_memory, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_the_busy_allowance_goes_once_quiet, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_stopped_timer_keeps_no_allowance, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_regions_kept_for_the_reserve_go_once_quiet,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_stopped_small_pool_keeps_nothing_free,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_light_load_keeps_no_allowance, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_light_load_on_a_fine_tick_keeps_no_allowance,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_thread_using_two_timers_keeps_no_allowance,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_cache_given_back_counts_what_it_allocated,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_thread_that_keeps_calling_gives_its_cache_back,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_thread_that_calls_slowly_gives_its_cache_back,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_threads_with_a_light_load_give_their_burst_back,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_light_load_that_ends_keeps_no_allowance,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_stopped_timer_keeps_nothing_for_a_live_thread,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_thread_that_releases_slowly_gives_its_cache_back,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_no_region_goes_back_during_a_scan, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_thread_caches_a_bounded_number, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_an_emptied_cache_keeps_its_timer_alive,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_thread_refused_for_the_limit_gives_its_cache_back,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_worker_bound_to_another_timer_gives_back_before_it_sleeps,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(
            test_a_worker_refused_by_another_timers_stop_binds_to_its_own_again,
            hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

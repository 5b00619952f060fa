/*
 * test_pool_timers.c - a thread's timeout caches across several timers
 * (pool.c, CACHE_TIMERS = HWT_POOL_THREAD_TIMERS): a cache per timer, so
 * that a thread scheduling on several in turn does not give one back and
 * bind another at every switch; the one bound longest ago goes for one
 * timer more; a thread that keeps calling on other timers still gives back
 * what it caches of one it no longer uses, and lets a destroyed one go
 * within seconds; every reference comes back at thread exit, also when
 * another library's key destructor schedules during it, and on a worker
 * whose tasks schedule on many timers. Executor threads (hwt_timeout_run)
 * cache their frees too, and a thread's frees of a stopped timer bypass its
 * cache. The lock counts: the depot's lock is taken once per magazine or
 * chunk, not once per timeout, in those patterns (pthread_mutex_lock is
 * defined here and forwards to the next one, RTLD_NEXT: the library's
 * objects are linked into this program, so their calls come here).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "helpers.h"
#include "internal.h"

static int (*real_lock)(pthread_mutex_t *);

#define MAX_WATCHED (HWT_POOL_THREAD_TIMERS + 2)
static pthread_mutex_t *watched[MAX_WATCHED];
static atomic_int watched_count;
static HWT_THREAD_LOCAL long pool_locks; /* the calling thread's, of watched pools */

int pthread_mutex_lock(pthread_mutex_t *mutex)
{
    int n = atomic_load(&watched_count);
    for (int i = 0; i < n; i++)
        if (watched[i] == mutex)
            pool_locks++;
    if (real_lock == NULL)
        real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    return real_lock(mutex);
}

static void watch(hwt_timer *timer)
{
    int n = atomic_load(&watched_count);
    assert_true(n < MAX_WATCHED);
    watched[n] = &timer->pool.lock;
    atomic_store(&watched_count, n + 1);
}

static void unwatch_all(void)
{
    atomic_store(&watched_count, 0);
}

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static size_t timeouts_in(uint64_t bytes)
{
    return (size_t)(bytes / HWT_TIMEOUT_CHUNK_BYTES) * HWT_TIMEOUTS_PER_CHUNK;
}

static bool only_handles_hold(hwt_timeout *const *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (atomic_load(&h[i]->refs) != 1)
            return false;
    return true;
}

/* ------------------------------------------------------------------------
 * Several threads each schedule a burst on timer A, let it go (released in
 * the order scheduled), then keep a light load on timer B: one timeout at a
 * time, every millisecond. They keep calling, so what they cache of A must
 * go back within seconds, as it did when a schedule on B gave A's cache back
 * (before f001f56), and as it does when the light load is on A itself
 * (test_pool.c, test_threads_with_a_light_load_give_their_burst_back). */
enum { THREADS = 6, BURST = 60000 }; /* each past 16 KiB .. 1 MiB: into 2 MiB regions */

struct job {
    hwt_timer *a, *b;
    hwt_timeout **h;
    atomic_int *released;
    atomic_bool *stop;
    atomic_int failures;
    atomic_size_t cached_of_a; /* after its light load began */
};

static pthread_barrier_t all_scheduled;

static void *burst_on_a_then_light_load_on_b(void *p)
{
    struct job *job = p;
    for (size_t i = 0; i < BURST; i++)
        if (hwt_new_timeout(job->a, noop, NULL, 1, HWT_HOURS, &job->h[i]) != 0)
            atomic_fetch_add(&job->failures, 1);
    pthread_barrier_wait(&all_scheduled);
    for (size_t i = 0; i < BURST; i++)
        if (!hwt_timeout_cancel(job->h[i]))
            atomic_fetch_add(&job->failures, 1);
    if (!hwtt_wait_until(only_handles_hold(job->h, BURST), hwtt_slack_ms(10000)))
        atomic_fetch_add(&job->failures, 1);
    for (size_t i = 0; i < BURST; i++)
        hwt_timeout_release(job->h[i]);
    atomic_fetch_add(job->released, 1);
    while (!atomic_load(job->stop)) {
        hwt_timeout *t;
        if (hwt_new_timeout(job->b, noop, NULL, 0, HWT_MILLISECONDS, &t) != 0 ||
            !hwtt_wait_until(only_handles_hold(&t, 1), hwtt_slack_ms(5000))) {
            atomic_fetch_add(&job->failures, 1);
            break;
        }
        hwt_timeout_release(t);
        atomic_store(&job->cached_of_a, hwt__pool_thread_cached(job->a));
        hwtt_sleep_ms(1);
    }
    return NULL;
}

static void test_threads_busy_on_another_timer_give_a_burst_back(void **state)
{
    (void)state;
    (void)hwtt_slowdown(); /* cached before other threads read it */
    hwt_timer *a = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    hwt_timer *b = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    assert_int_equal(hwt_timer_start(a), 0);
    assert_int_equal(hwt_timer_start(b), 0);
    static struct job jobs[THREADS];
    pthread_t th[THREADS];
    atomic_int released = 0;
    atomic_bool stop = false;
    pthread_barrier_init(&all_scheduled, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct job){.a = a, .b = b, .released = &released, .stop = &stop};
        jobs[i].h = calloc(BURST, sizeof(hwt_timeout *));
        assert_non_null(jobs[i].h);
        assert_int_equal(pthread_create(&th[i], NULL, burst_on_a_then_light_load_on_b, &jobs[i]),
                         0);
    }
    bool all_released = hwtt_wait_until(atomic_load(&released) == THREADS, hwtt_slack_ms(30000));
    size_t at_release = hwt__pool_capacity(&a->pool);
    /* As test_threads_with_a_light_load_give_their_burst_back allows: the
     * reserve, a region, and a light load's region. */
    size_t bound = timeouts_in(HWT_POOL_RESERVE_BYTES + 2 * HWT_MAX_REGION_BYTES);
    bool back = hwtt_wait_until(hwt__pool_capacity(&a->pool) <= bound, hwtt_slack_ms(3000));
    size_t while_alive = hwt__pool_capacity(&a->pool);
    size_t cached = 0;
    for (int i = 0; i < THREADS; i++)
        cached += atomic_load(&jobs[i].cached_of_a);
    atomic_store(&stop, true);
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        failures += atomic_load(&jobs[i].failures);
        free(jobs[i].h);
    }
    size_t after_exit = hwt__pool_capacity(&a->pool);
    pthread_barrier_destroy(&all_scheduled);
    print_message("  %d threads, %d each on A, then a light load on B: A's pool of %zu at the "
                  "release, %zu 3 s later (bound %zu; the threads still cached %zu of A), %zu "
                  "once they exited\n",
                  THREADS, BURST, at_release, while_alive, bound, cached, after_exit);
    hwtt_destroy(a);
    hwtt_destroy(b);
    assert_true(all_released);
    assert_int_equal(failures, 0);
    assert_true(back);
}

/* ------------------------------------------------------------------------
 * A thread scheduled on A, then serves B (schedules there every ms). A is
 * destroyed by another thread. A's memory (the timer, its wheel, the
 * regions that the thread's cache keeps mapped) must not stay allocated
 * for as long as that thread lives and calls the library: before f001f56
 * its first schedule on B gave A's cache back, and freed A. */
static void (*free_for_real)(hwt_timer *timer);
static atomic_bool a_freed;

static void note_freed(hwt_timer *timer)
{
    (void)timer;
    atomic_store(&a_freed, true);
}

struct server {
    hwt_timer *a, *b;
    atomic_bool scheduled_on_a, stop;
    atomic_int failures;
};

static void *schedule_on_a_then_serve_b(void *p)
{
    struct server *s = p;
    for (int i = 0; i < 1000; i++) /* into its own chunk of A */
        if (hwt_new_timeout(s->a, noop, NULL, 1, HWT_HOURS, NULL) != 0)
            atomic_fetch_add(&s->failures, 1);
    atomic_store(&s->scheduled_on_a, true);
    while (!atomic_load(&s->stop)) {
        if (hwt_new_timeout(s->b, noop, NULL, 0, HWT_MILLISECONDS, NULL) != 0)
            atomic_fetch_add(&s->failures, 1);
        hwtt_sleep_ms(1);
    }
    return NULL;
}

static void test_a_destroyed_timer_is_freed_while_its_thread_serves_another(void **state)
{
    (void)state;
    (void)hwtt_slowdown();
    hwt_timer *a = hwtt_timer(1, HWT_MILLISECONDS, 512); /* not tracked: destroyed here */
    hwt_timer *b = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 512));
    free_for_real = a->free_memory;
    a->free_memory = note_freed;
    atomic_store(&a_freed, false);
    static struct server s;
    s = (struct server){.a = a, .b = b};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, schedule_on_a_then_serve_b, &s), 0);
    assert_true(hwtt_wait_until(atomic_load(&s.scheduled_on_a), hwtt_slack_ms(10000)));
    hwt_timer_destroy(a); /* drops the 1 000; this thread holds no cache of A */
    /* The thread keeps calling, about once a millisecond: well past the
     * "about once a second" a calling thread gives its cache back at. */
    bool freed = hwtt_wait_until(atomic_load(&a_freed), hwtt_slack_ms(3000));
    atomic_store(&s.stop, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    bool freed_at_exit = atomic_load(&a_freed);
    print_message("  A destroyed while a thread that scheduled on it serves B: freed %s; freed "
                  "once the thread exited: %s\n",
                  freed ? "within 3 s" : "NOT within 3 s", freed_at_exit ? "yes" : "no");
    if (freed_at_exit)
        free_for_real(a);
    assert_int_equal(atomic_load(&s.failures), 0);
    assert_true(freed);
}

/* ------------------------------------------------------------------------
 * "A thread that turns to one more gives back the cache it bound longest
 * ago" (pool.c, CACHE_TIMERS). A thread binds all its slots; the second
 * timer is destroyed (its slot freed); it binds one more, then another:
 * that one must evict the first (bound longest ago), not the one bound just
 * before. Binds into a freed slot used to count as the oldest. */
enum { SLOTS = HWT_POOL_THREAD_TIMERS };

struct order_job {
    hwt_timer *t[SLOTS + 2];
    bool first_bound, next_to_last_bound;
    int failures;
};

static void *bind_in_order(void *p)
{
    struct order_job *j = p;
    for (int i = 0; i < SLOTS; i++)
        if (hwt_new_timeout(j->t[i], noop, NULL, 1, HWT_HOURS, NULL) != 0)
            j->failures++;
    hwt_timer_destroy(j->t[1]); /* gives this thread's cache of it back */
    for (int i = SLOTS; i < SLOTS + 2; i++)
        if (hwt_new_timeout(j->t[i], noop, NULL, 1, HWT_HOURS, NULL) != 0)
            j->failures++;
    j->first_bound = hwt__pool_thread_bound(j->t[0]);
    j->next_to_last_bound = hwt__pool_thread_bound(j->t[SLOTS]);
    return NULL;
}

static void test_one_timer_more_evicts_the_cache_bound_longest_ago(void **state)
{
    (void)state;
    static struct order_job j;
    j = (struct order_job){0};
    for (int i = 0; i < SLOTS + 2; i++) {
        j.t[i] = hwtt_timer(10, HWT_MILLISECONDS, 64);
        if (i != 1)
            hwtt_track(j.t[i]);
    }
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, bind_in_order, &j), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    print_message("  after %d timers, the second destroyed, two more: the first %s, the next to "
                  "last %s\n",
                  SLOTS, j.first_bound ? "still bound" : "given back",
                  j.next_to_last_bound ? "bound" : "given back");
    assert_int_equal(j.failures, 0);
    assert_true(j.next_to_last_bound);
    assert_false(j.first_bound);
}

/* ------------------------------------------------------------------------
 * Thread exit with every cache bound, and another library's key destructor
 * that schedules on the timers (one more too) during the exit, before and
 * after ours: every binding and cached timeout goes back. */
static hwt_timer *exit_timers[SLOTS + 1];
static pthread_key_t other_key_before, other_key_after;
static atomic_int exit_failures;

static void schedule_on_all(void *arg)
{
    (void)arg;
    for (int i = SLOTS; i >= 0; i--)
        if (hwt_new_timeout(exit_timers[i], noop, NULL, 1, HWT_HOURS, NULL) != 0)
            atomic_fetch_add(&exit_failures, 1);
}

static void *bind_four_then_exit(void *p)
{
    (void)p;
    for (int i = 0; i < SLOTS; i++)
        if (hwt_new_timeout(exit_timers[i], noop, NULL, 1, HWT_HOURS, NULL) != 0)
            atomic_fetch_add(&exit_failures, 1);
    pthread_setspecific(other_key_before, (void *)1);
    pthread_setspecific(other_key_after, (void *)1);
    return NULL;
}

static void test_exit_destructors_that_schedule_leave_nothing_bound(void **state)
{
    (void)state;
    /* Ours is made on the library's first need (earlier tests): before
     * ours in index order, and after it. */
    static bool made;
    if (!made) {
        assert_int_equal(pthread_key_create(&other_key_after, schedule_on_all), 0);
        made = true;
    }
    for (int i = 0; i <= SLOTS; i++) {
        exit_timers[i] = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
        assert_int_equal(hwt_timer_start(exit_timers[i]), 0);
    }
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, bind_four_then_exit, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    hwt_stats st;
    for (int i = 0; i <= SLOTS; i++) {
        hwt_timer_stats(exit_timers[i], &st);
        int64_t refs = atomic_load(&exit_timers[i]->refs);
        print_message("  timer %d: refs %lld, pending %lld\n", i, (long long)refs,
                      (long long)st.pending);
        assert_int_equal(refs, 2 + st.pending); /* creator, worker's binding, pending */
    }
    assert_int_equal(atomic_load(&exit_failures), 0);
}

/* ------------------------------------------------------------------------
 * A's worker runs a task that schedules on as many other timers as a thread
 * caches (its own cache is evicted) and on A again, 200 times; once it sleeps, every
 * timer's references are its creator's, its worker's binding and its
 * pending timeouts'. */
static hwt_timer *wt[SLOTS + 1];
static atomic_int task_runs;

static void fan_out(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
    for (int i = 1; i <= SLOTS; i++)
        if (hwt_new_timeout(wt[i], noop, NULL, 1, HWT_HOURS, NULL) != 0)
            atomic_fetch_add(&exit_failures, 1);
    if (atomic_fetch_add(&task_runs, 1) + 1 < 200 &&
        hwt_new_timeout(wt[0], fan_out, NULL, 0, HWT_MILLISECONDS, NULL) != 0)
        atomic_fetch_add(&exit_failures, 1);
}

static void test_a_worker_fanning_out_keeps_references_straight(void **state)
{
    (void)state;
    atomic_store(&exit_failures, 0);
    for (int i = 0; i <= SLOTS; i++) {
        wt[i] = hwtt_track(hwtt_timer(1, HWT_MILLISECONDS, 64));
        assert_int_equal(hwt_timer_start(wt[i]), 0);
    }
    assert_int_equal(hwt_new_timeout(wt[0], fan_out, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&task_runs) == 200, hwtt_slack_ms(10000)));
    hwtt_sleep_ms(200); /* it sleeps: its caches of the others go back */
    for (int i = 0; i <= SLOTS; i++) {
        hwt_stats st;
        hwt_timer_stats(wt[i], &st);
        int64_t refs = atomic_load(&wt[i]->refs);
        print_message("  timer %d: refs %lld, pending %lld\n", i, (long long)refs,
                      (long long)st.pending);
        /* This thread's own cache of A (its one schedule) and binding. */
        int64_t mine = i == 0 ? 1 + (int64_t)hwt__pool_thread_cached(wt[0]) : 0;
        assert_int_equal(refs, 2 + st.pending + mine);
    }
    assert_int_equal(atomic_load(&exit_failures), 0);
}

/* A thread that schedules on two timers in turn keeps a cache for each:
 * it used to give one back and bind the other at every switch (a flush
 * chains the rest of its chunk), a schedule 30 times as dear. A thread
 * that turns to one timer more than it can cache gives back the cache it
 * bound longest ago, and only that one; its exit gives back every one. */
struct many_timers_job {
    hwt_timer **timers;
    int count;
    bool all_bound_in_turn; /* each kept its cache while the others were used */
    bool first_given_back;  /* after one timer more than it caches */
    bool others_still_bound;
    int failures;
};

static void *schedule_on_many_timers(void *p)
{
    struct many_timers_job *job = p;
    job->all_bound_in_turn = true;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < job->count - 1; i++) {
            if (hwt_new_timeout(job->timers[i], noop, NULL, 1, HWT_HOURS, NULL) != 0)
                job->failures++;
            for (int k = 0; k <= i || (round > 0 && k < job->count - 1); k++)
                if (!hwt__pool_thread_bound(job->timers[k]) ||
                    hwt__pool_thread_cached(job->timers[k]) == 0)
                    job->all_bound_in_turn = false;
        }
    if (hwt_new_timeout(job->timers[job->count - 1], noop, NULL, 1, HWT_HOURS, NULL) != 0)
        job->failures++;
    job->first_given_back = !hwt__pool_thread_bound(job->timers[0]);
    job->others_still_bound = true;
    for (int k = 1; k < job->count; k++)
        if (!hwt__pool_thread_bound(job->timers[k]))
            job->others_still_bound = false;
    return NULL;
}

static void test_a_thread_keeps_a_cache_per_timer_it_uses(void **state)
{
    (void)state;
    enum { TIMERS = HWT_POOL_THREAD_TIMERS + 1 }; /* one more than a thread caches */
    hwt_timer *timers[TIMERS];
    for (int i = 0; i < TIMERS; i++) {
        timers[i] = hwtt_track(hwtt_timer(10, HWT_MILLISECONDS, 64));
        assert_int_equal(hwt_timer_start(timers[i]), 0);
    }
    struct many_timers_job job = {.timers = timers, .count = TIMERS};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, schedule_on_many_timers, &job), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    int64_t refs[TIMERS];
    for (int i = 0; i < TIMERS; i++)
        refs[i] = atomic_load(&timers[i]->refs);
    for (int i = 0; i < TIMERS; i++)
        hwtt_destroy(timers[i]);
    assert_int_equal(job.failures, 0);
    assert_true(job.all_bound_in_turn);
    assert_true(job.first_given_back);
    assert_true(job.others_still_bound);
    /* Its exit gave every cache back: what is left is the creator's, the
     * worker's binding and the pending timeouts. */
    for (int i = 0; i < TIMERS; i++)
        assert_int_equal(refs[i], 2 + (i < TIMERS - 1 ? 3 : 1)); /* creator, worker */
}

/* ------------------------------------------------------------------------
 * An executor's thread binds a cache in hwt_timeout_run unless the timer is
 * stopped; a stop (here a destroy) that lands between that look and the
 * bind left the thread bound to the destroyed timer, keeping its memory
 * while the thread idled. The destroy is made to land there by the
 * allocation hook, at the bind's allocation of the thread's caches. */
static hwt_timeout *_Atomic handed; /* written by the worker (the executor) */
static hwt_timer *ex_timer;
static atomic_bool in_exec_thread, ex_ran, ex_exit;
static atomic_int hook_fired;

static void keep(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    atomic_store(&handed, timeout);
}

static int destroy_inside_bind(hwt__alloc_site site)
{
    if (site == HWT_SITE_THREAD_CACHES && atomic_load(&in_exec_thread) &&
        atomic_fetch_add(&hook_fired, 1) == 0)
        hwt_timer_destroy(ex_timer); /* stop + destroy, from the executor's thread */
    return 0;
}

static void *run_handed_then_idle(void *p)
{
    (void)p;
    atomic_store(&in_exec_thread, true);
    hwt_timeout_run(atomic_load(&handed));
    atomic_store(&in_exec_thread, false);
    atomic_store(&ex_ran, true);
    while (!atomic_load(&ex_exit))
        hwtt_sleep_us(200);
    return NULL;
}

static void test_an_executor_bind_racing_a_destroy_keeps_nothing(void **state)
{
    (void)state;
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.executor = keep;
    atomic_store(&handed, NULL);
    ex_timer = hwtt_timer_opts(&o); /* not tracked: destroyed in the hook */
    free_for_real = ex_timer->free_memory;
    ex_timer->free_memory = note_freed;
    atomic_store(&a_freed, false);
    hwt_timeout *h;
    assert_int_equal(hwt_new_timeout(ex_timer, noop, NULL, 0, HWT_MILLISECONDS, &h), 0);
    assert_true(hwtt_wait_until(atomic_load(&handed) != NULL, hwtt_slack_ms(5000)));
    hwt__set_alloc_fail_hook(destroy_inside_bind);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_handed_then_idle, NULL), 0);
    bool ran = hwtt_wait_until(atomic_load(&ex_ran), hwtt_slack_ms(5000));
    hwt__set_alloc_fail_hook(NULL);
    hwt_timeout_release(h); /* the last handle */
    bool freed = hwtt_wait_until(atomic_load(&a_freed), hwtt_slack_ms(2000));
    atomic_store(&ex_exit, true);
    assert_int_equal(pthread_join(th, NULL), 0);
    bool freed_at_exit = atomic_load(&a_freed);
    print_message("  executor's bind racing a destroy: timer freed while the thread idles: %s; "
                  "once it exited: %s\n",
                  freed ? "yes" : "NO", freed_at_exit ? "yes" : "no");
    if (freed_at_exit)
        free_for_real(ex_timer);
    assert_true(ran);
    assert_int_equal(atomic_load(&hook_fired), 1);
    assert_true(freed);
}

/* Enough for a few dozen magazines per timer. */
#define N 6400
/* What the invariant allows, with room for chunks and regions: one lock per
 * 32 timeouts (a magazine holds 64). */
#define ALLOWED(n) ((n) / 32 + 8)

/* ------------------------------------------------------------- executors */

static hwt_timeout *parked[N];
static atomic_int parked_n;

static void park(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    int i = atomic_fetch_add(&parked_n, 1);
    if (i < N)
        parked[i] = timeout;
}

struct run_job {
    hwt_timer *timer;
    bool scheduled_first; /* as a producer thread would have */
    long locks;
};

static void *run_all(void *p)
{
    struct run_job *job = p;
    if (job->scheduled_first) {
        hwt_timeout *t = NULL;
        if (hwt_new_timeout(job->timer, noop, NULL, 1, HWT_HOURS, &t) == 0) {
            hwt_timeout_cancel(t);
            hwt_timeout_release(t);
        }
    }
    long before = pool_locks;
    for (int i = 0; i < N; i++)
        hwt_timeout_run(parked[i]);
    job->locks = pool_locks - before;
    return NULL;
}

static long run_on_a_thread(bool scheduled_first)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.executor = park;
    hwt_timer *timer = hwtt_track(hwtt_timer_opts(&o));
    atomic_store(&parked_n, 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(hwt_new_timeout(timer, noop, NULL, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&parked_n) == N, hwtt_slack_ms(10000)));
    watch(timer);
    struct run_job job = {timer, scheduled_first, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_all, &job), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    unwatch_all();
    hwtt_destroy(timer);
    return job.locks;
}

static void test_an_executor_thread_takes_the_depot_lock_once_per_magazine(void **state)
{
    (void)state;
    long scheduler = run_on_a_thread(true), executor_thread = run_on_a_thread(false);
    print_message("  %d hwt_timeout_run: %ld pool locks on a thread that had scheduled on the "
                  "timer, %ld on an executor pool's thread (allowed %d)\n",
                  N, scheduler, executor_thread, ALLOWED(N));
    assert_true(scheduler <= ALLOWED(N));
    assert_true(executor_thread <= ALLOWED(N));
}

/* ------------------------------------------------------- timers in turn */

struct turn_job {
    hwt_timer **timers;
    int count;
    long locks;
    int failures;
};

static void *schedule_in_turn(void *p)
{
    struct turn_job *job = p;
    long before = pool_locks;
    for (int i = 0; i < N * job->count; i++)
        if (hwt_new_timeout(job->timers[i % job->count], noop, NULL, 1, HWT_HOURS, NULL) != 0)
            job->failures++;
    job->locks = pool_locks - before;
    return NULL;
}

static long in_turn(int count)
{
    hwt_timer *timers[MAX_WATCHED];
    for (int i = 0; i < count; i++) {
        timers[i] = hwtt_track(hwtt_timer(100, HWT_MILLISECONDS, 512));
        assert_int_equal(hwt_timer_start(timers[i]), 0);
        watch(timers[i]);
    }
    struct turn_job job = {timers, count, 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, schedule_in_turn, &job), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    unwatch_all();
    for (int i = 0; i < count; i++)
        hwtt_destroy(timers[i]);
    assert_int_equal(job.failures, 0);
    return job.locks;
}

static void test_a_thread_scheduling_on_its_timers_in_turn_takes_few_locks(void **state)
{
    (void)state;
    long two = in_turn(2), all = in_turn(HWT_POOL_THREAD_TIMERS);
    print_message("  %d schedules on each of 2 timers in turn: %ld pool locks; on each of %d: "
                  "%ld (allowed %d, %d)\n",
                  N, two, HWT_POOL_THREAD_TIMERS, all, ALLOWED(2 * N),
                  ALLOWED(HWT_POOL_THREAD_TIMERS * N));
    assert_true(two <= ALLOWED(2 * N));
    assert_true(all <= ALLOWED(HWT_POOL_THREAD_TIMERS * N));
}

int main(void)
{
    real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    if (real_lock == NULL)
        return 1;
    hwtt_watchdog(300);
    /* Before the library makes its key (its first schedule): a lower index. */
    if (pthread_key_create(&other_key_before, schedule_on_all) != 0)
        return 1;
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_a_thread_keeps_a_cache_per_timer_it_uses,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_thread_scheduling_on_its_timers_in_turn_takes_few_locks,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_an_executor_thread_takes_the_depot_lock_once_per_magazine,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_an_executor_bind_racing_a_destroy_keeps_nothing,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_threads_busy_on_another_timer_give_a_burst_back,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_destroyed_timer_is_freed_while_its_thread_serves_another,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_one_timer_more_evicts_the_cache_bound_longest_ago,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_exit_destructors_that_schedule_leave_nothing_bound,
                                  hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_a_worker_fanning_out_keeps_references_straight,
                                  hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

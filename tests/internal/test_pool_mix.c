/*
 * test_pool_mix.c - the per-thread caches (pool.c) under a mix of calls:
 * a random mix of schedules, cancels, releases, executor runs, timer
 * destroys and thread exits over several timers; at the end every timer
 * created must have been freed (all its references back), and ASan sees
 * no use after free.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc.h"
#include "helpers.h"
#include "internal.h"

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* The library's own (the same for every timer); set by every stress thread
 * that makes a timer, so atomic. */
static _Atomic(void (*)(hwt_timer *)) real_free;
static atomic_long created, freed;

static void count_free(hwt_timer *timer)
{
    atomic_fetch_add(&freed, 1);
    atomic_load(&real_free)(timer);
}

/* ---------------------------------------------------------------- stress */

enum { SLOTS = 12, THREADS = 4, HANDLES = 256 };

struct slot {
    pthread_rwlock_t lock; /* read: a call on the timer; write: replacing it */
    hwt_timer *timer;
};
static struct slot slots[SLOTS];
static atomic_bool stop_all;

/* Executor: a small queue served by the stress threads. */
static pthread_mutex_t exq_lock = PTHREAD_MUTEX_INITIALIZER;
static hwt_timeout *exq[4096];
static size_t exq_n;

static void enqueue(void *ctx, hwt_timeout *timeout)
{
    (void)ctx;
    pthread_mutex_lock(&exq_lock);
    if (exq_n < 4096) {
        exq[exq_n++] = timeout;
        pthread_mutex_unlock(&exq_lock);
        return;
    }
    pthread_mutex_unlock(&exq_lock);
    hwt_timeout_run(timeout); /* full: here, on the worker */
}

static hwt_timeout *dequeue(void)
{
    pthread_mutex_lock(&exq_lock);
    hwt_timeout *t = exq_n > 0 ? exq[--exq_n] : NULL;
    pthread_mutex_unlock(&exq_lock);
    return t;
}

static hwt_timer *new_timer(unsigned i)
{
    hwt_timer *t;
    if (i % 3 == 0) {
        hwt_options o;
        hwt_options_init(&o);
        o.tick_duration = 1;
        o.executor = enqueue;
        t = hwtt_timer_opts(&o);
    } else {
        t = hwtt_timer(1, HWT_MILLISECONDS, 64);
    }
    atomic_store(&real_free, t->free_memory);
    t->free_memory = count_free;
    atomic_fetch_add(&created, 1);
    return t;
}

/* A task that schedules on another slot's timer (from the worker or an
 * executor's thread). */
static void hop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    unsigned i = (unsigned)(uintptr_t)arg % SLOTS;
    if (pthread_rwlock_tryrdlock(&slots[i].lock) != 0)
        return;
    (void)hwt_new_timeout(slots[i].timer, noop, NULL, 0, HWT_MILLISECONDS, NULL);
    pthread_rwlock_unlock(&slots[i].lock);
}

static void *stress_thread(void *p)
{
    unsigned seed = (unsigned)(uintptr_t)p;
    hwt_timeout *h[HANDLES] = {0};
    int ops = 2000 + rand_r(&seed) % 4000;
    for (int k = 0; k < ops && !atomic_load(&stop_all); k++) {
        unsigned r = (unsigned)rand_r(&seed);
        unsigned i = r % SLOTS;
        unsigned j = (r >> 8) % HANDLES;
        switch ((r >> 16) % 16) {
        case 0: case 1: case 2: case 3: case 4: case 5:
            pthread_rwlock_rdlock(&slots[i].lock);
            if (h[j] == NULL)
                (void)hwt_new_timeout(slots[i].timer, (r & 1) ? hop : noop,
                                      (void *)(uintptr_t)(r >> 4), (r >> 20) % 3,
                                      HWT_MILLISECONDS, &h[j]);
            else
                (void)hwt_new_timeout(slots[i].timer, noop, NULL, 0, HWT_MILLISECONDS, NULL);
            pthread_rwlock_unlock(&slots[i].lock);
            break;
        case 6:
            if (h[j] != NULL)
                hwt_timeout_cancel(h[j]);
            break;
        case 7: case 8: case 9:
            if (h[j] != NULL) {
                hwt_timeout_release(h[j]);
                h[j] = NULL;
            }
            break;
        case 10: case 11: {
            hwt_timeout *t;
            while ((t = dequeue()) != NULL)
                hwt_timeout_run(t);
            break;
        }
        case 12:
            if ((r >> 24) % 8 == 0) { /* replace the timer */
                pthread_rwlock_wrlock(&slots[i].lock);
                hwt_timer_destroy(slots[i].timer);
                slots[i].timer = new_timer(i);
                pthread_rwlock_unlock(&slots[i].lock);
            }
            break;
        default:
            if ((r >> 24) % 64 == 0)
                hwtt_sleep_us(200);
            break;
        }
    }
    for (int j = 0; j < HANDLES; j++)
        hwt_timeout_release(h[j]);
    return NULL; /* the exit: key destructor */
}

static void test_random_mix_frees_every_timer(void **state)
{
    (void)state;
    for (unsigned i = 0; i < SLOTS; i++) {
        pthread_rwlock_init(&slots[i].lock, NULL);
        slots[i].timer = new_timer(i);
    }
    int64_t until = hwtt_now_ns() + 8 * INT64_C(1000000000);
    unsigned gen = 1;
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, stress_thread, (void *)(uintptr_t)gen++), 0);
    while (hwtt_now_ns() < until) {
        for (int i = 0; i < THREADS; i++) {
            if (pthread_tryjoin_np(th[i], NULL) == 0)
                assert_int_equal(
                    pthread_create(&th[i], NULL, stress_thread, (void *)(uintptr_t)gen++), 0);
        }
        hwtt_sleep_ms(5);
    }
    atomic_store(&stop_all, true);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    hwt_timeout *t;
    while ((t = dequeue()) != NULL)
        hwt_timeout_run(t);
    for (unsigned i = 0; i < SLOTS; i++)
        hwt_timer_destroy(slots[i].timer);
    /* What the executors were handed after the last drain of the queue. */
    hwtt_sleep_ms(50);
    while ((t = dequeue()) != NULL)
        hwt_timeout_run(t);
    bool all = hwtt_wait_until(atomic_load(&freed) == atomic_load(&created), hwtt_slack_ms(3000));
    print_message("  %u threads run, %ld timers created, %ld freed\n", gen - 1,
                  atomic_load(&created), atomic_load(&freed));
    assert_true(all);
}

/* ------------------------------------------------------------------------
 * A fork while another thread is between the allocation of its cache set
 * and its linking into the list (new_caches: it waits for the list's lock,
 * which the fork's prepare handler holds). In the child that set is
 * nobody's: run under valgrind (by hand: CI runs only the public suites
 * under it), the child's exit status says whether it found it lost. A prepare handler registered before the library's (a
 * constructor that runs first) runs after it: it lets the other thread go
 * on into new_caches, and gives it time to block on the lock. */
static atomic_bool in_window_test, hook_waiting, go_on;

static int pause_before_sets(hwt__alloc_site site)
{
    if (site == HWT_SITE_THREAD_CACHES && atomic_load(&in_window_test)) {
        atomic_store(&hook_waiting, true);
        while (!atomic_load(&go_on))
            hwtt_sleep_us(100);
    }
    return 0;
}

static void late_prepare(void)
{
    if (!atomic_load(&in_window_test))
        return;
    atomic_store(&go_on, true); /* the library holds the list's lock now */
    hwtt_sleep_ms(100);         /* the other thread allocates, and waits for it */
}

__attribute__((constructor(101))) static void register_first(void)
{
    pthread_atfork(late_prepare, NULL, NULL);
}

static hwt_timer *window_timer;

static void *first_schedule(void *p)
{
    (void)p;
    (void)hwt_new_timeout(window_timer, noop, NULL, 1, HWT_HOURS, NULL);
    return NULL;
}

static void test_a_fork_while_a_thread_links_its_caches(void **state)
{
    (void)state;
    window_timer = hwtt_timer(1, HWT_MILLISECONDS, 64);
    assert_int_equal(hwt_timer_start(window_timer), 0);
    hwt__set_alloc_fail_hook(pause_before_sets);
    atomic_store(&in_window_test, true);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, first_schedule, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&hook_waiting), hwtt_slack_ms(5000)));
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    atomic_store(&in_window_test, false);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    hwt__set_alloc_fail_hook(NULL);
    hwt_timer_destroy(window_timer);
    print_message("  child's exit status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
    hwtt_watchdog(300);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_mix_frees_every_timer),
        cmocka_unit_test(test_a_fork_while_a_thread_links_its_caches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

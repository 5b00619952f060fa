/*
 * test_sched_hint.c - the worker asks the fair scheduler for a short slice
 * (src/sched_hint.c). Where the kernel honours sched_runtime for SCHED_OTHER
 * (Linux 6.12+), sched_getattr of the worker shows HWT_WORKER_SLICE_NS, with
 * the nice value it inherited from the thread that started it; a worker
 * that is not SCHED_OTHER (SCHED_BATCH inherited, SCHED_FIFO from
 * thread_attr) is left alone, with a debug message and no warning. Each
 * test first asks for the slice on a scratch thread and skips if the kernel
 * does not report it back.
 *
 * The worker is found by its (unique) name in /proc/self/task.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "helpers.h"
#include "internal.h"

#ifdef SYS_sched_setattr

struct attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t sched_util_min, sched_util_max;
};

static int get_attr(pid_t tid, struct attr *a)
{
    memset(a, 0, sizeof *a);
    return (int)syscall(SYS_sched_getattr, tid, a, (unsigned)sizeof *a, 0U);
}

/* ---- the kernel's support, probed on a scratch thread */

struct probe {
    bool honoured;            /* the kernel reported the requested slice back */
    uint64_t default_runtime; /* what a thread that asked for nothing has */
};

static void *probe_main(void *arg)
{
    struct probe *p = arg;
    struct attr a;
    if (get_attr(0, &a) != 0 || a.sched_policy != SCHED_OTHER)
        return NULL;
    p->default_runtime = a.sched_runtime;
    a.size = sizeof a;
    a.sched_flags = 0;
    a.sched_runtime = HWT_WORKER_SLICE_NS;
    if (syscall(SYS_sched_setattr, 0, &a, 0U) != 0)
        return NULL;
    p->honoured = get_attr(0, &a) == 0 && a.sched_runtime == HWT_WORKER_SLICE_NS;
    return NULL;
}

static struct probe probe_kernel(void)
{
    struct probe p = {false, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, probe_main, &p), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    return p;
}

#define REQUIRE_CUSTOM_SLICES(probe)                                                               \
    do {                                                                                           \
        if (!(probe).honoured) {                                                                   \
            print_message("the kernel ignores sched_runtime for SCHED_OTHER (before 6.12): "       \
                          "skipped\n");                                                            \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- the worker */

/* The id of this process's thread named `name`, or -1. */
static pid_t tid_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    pid_t found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(comm, sizeof comm, f) != NULL) {
            comm[strcspn(comm, "\n")] = '\0';
            if (strcmp(comm, name) == 0)
                found = (pid_t)atoi(e->d_name);
        }
        fclose(f);
    }
    closedir(d);
    return found;
}

static hwtt_log tlog;

/* A timer whose worker will be named `name` (attr may be NULL); tracked. */
static hwt_timer *make_timer(const char *name, const pthread_attr_t *attr)
{
    memset(&tlog, 0, sizeof tlog);
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = 1;
    o.tick_unit = HWT_MILLISECONDS;
    o.thread_name = name;
    o.thread_attr = attr;
    o.log = hwtt_log_cb;
    o.log_ctx = &tlog;
    return hwtt_track(hwtt_timer_opts(&o));
}

/* The scheduling attributes of the started worker named `name`. The worker
 * asks for its slice before it reports started, so they are final. */
static void read_worker(const char *name, struct attr *out)
{
    pid_t tid = -1;
    assert_true(hwtt_wait_until((tid = tid_named(name)) > 0, hwtt_slack_ms(5000)));
    assert_int_equal(get_attr(tid, out), 0);
}

static hwt_timer *start_and_read(const char *name, const pthread_attr_t *attr, struct attr *out)
{
    hwt_timer *timer = make_timer(name, attr);
    assert_int_equal(hwt_timer_start(timer), 0);
    read_worker(name, out);
    return timer;
}

static void test_worker_gets_short_slice(void **state)
{
    (void)state;
    struct probe p = probe_kernel();
    REQUIRE_CUSTOM_SLICES(p);
    struct attr mine, w;
    assert_int_equal(get_attr(0, &mine), 0);
    hwt_timer *timer = start_and_read("hwtt-slice", NULL, &w);
    assert_int_equal(w.sched_policy, SCHED_OTHER);
    assert_int_equal(w.sched_runtime, HWT_WORKER_SLICE_NS);
    assert_int_equal(w.sched_nice, mine.sched_nice); /* inherited, unchanged */
    assert_int_equal(atomic_load(&tlog.count[HWT_LOG_WARN]), 0);
    assert_int_equal(atomic_load(&tlog.count[HWT_LOG_ERROR]), 0);
    hwtt_destroy(timer);
}

/* Starts r->timer from a new thread whose nice value (and, if batch, policy)
 * was changed first: the worker inherits them. The thread makes no cmocka
 * assertion (they belong to the test's thread); it reports what happened. */
struct start_run {
    hwt_timer *timer;
    int nice;
    bool batch;
    int set_result, start_result;
};

static void *start_main(void *arg)
{
    struct start_run *r = arg;
    r->set_result = setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), r->nice);
    if (r->set_result == 0 && r->batch) {
        struct sched_param param = {.sched_priority = 0};
        r->set_result = sched_setscheduler(0, SCHED_BATCH, &param);
    }
    if (r->set_result == 0)
        r->start_result = hwt_timer_start(r->timer);
    return NULL;
}

static void start_from_thread(struct start_run *r)
{
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, start_main, r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(r->set_result, 0); /* raising nice, SCHED_BATCH: no privilege needed */
    assert_int_equal(r->start_result, 0);
}

/* A nice value above the default is not lowered back by the slice request. */
static void test_worker_keeps_nice(void **state)
{
    (void)state;
    struct probe p = probe_kernel();
    REQUIRE_CUSTOM_SLICES(p);
    struct attr mine;
    assert_int_equal(get_attr(0, &mine), 0);
    if (mine.sched_nice >= 19)
        skip();
    struct start_run r = {.timer = make_timer("hwtt-slice-nice", NULL),
                          .nice = mine.sched_nice + 3 > 19 ? 19 : mine.sched_nice + 3};
    start_from_thread(&r);
    struct attr w;
    read_worker("hwtt-slice-nice", &w);
    assert_int_equal(w.sched_policy, SCHED_OTHER);
    assert_int_equal(w.sched_nice, r.nice);
    assert_int_equal(w.sched_runtime, HWT_WORKER_SLICE_NS);
    hwtt_destroy(r.timer);
}

/* A SCHED_BATCH worker (inherited here; glibc's pthread_attr_setschedpolicy
 * takes only OTHER, FIFO and RR) keeps its policy and the default slice, and
 * the library says why at debug level only. */
static void test_batch_worker_left_alone(void **state)
{
    (void)state;
    struct probe p = probe_kernel();
    REQUIRE_CUSTOM_SLICES(p);
    struct attr mine;
    assert_int_equal(get_attr(0, &mine), 0);
    struct start_run r = {
        .timer = make_timer("hwtt-slice-bat", NULL), .nice = mine.sched_nice, .batch = true};
    start_from_thread(&r);
    struct attr w;
    read_worker("hwtt-slice-bat", &w);
    assert_int_equal(w.sched_policy, SCHED_BATCH);
    assert_int_equal(w.sched_runtime, p.default_runtime);
    assert_true(atomic_load(&tlog.count[HWT_LOG_DEBUG]) >= 1);
    assert_int_equal(atomic_load(&tlog.count[HWT_LOG_WARN]), 0);
    assert_int_equal(atomic_load(&tlog.count[HWT_LOG_ERROR]), 0);
    hwtt_destroy(r.timer);
}

/* An explicit real-time policy through thread_attr is kept too (needs the
 * privilege to create such a thread; skipped without it). */
static void test_fifo_attr_left_alone(void **state)
{
    (void)state;
    struct probe p = probe_kernel();
    REQUIRE_CUSTOM_SLICES(p);
    pthread_attr_t attr;
    struct sched_param param = {.sched_priority = 1};
    assert_int_equal(pthread_attr_init(&attr), 0);
    assert_int_equal(pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED), 0);
    assert_int_equal(pthread_attr_setschedpolicy(&attr, SCHED_FIFO), 0);
    assert_int_equal(pthread_attr_setschedparam(&attr, &param), 0);
    hwt_timer *timer = make_timer("hwtt-slice-fifo", &attr);
    int rc = hwt_timer_start(timer);
    if (rc == HWT_ESYS) { /* EPERM: no CAP_SYS_NICE, no RLIMIT_RTPRIO */
        pthread_attr_destroy(&attr);
        hwtt_destroy(timer);
        print_message("cannot create a SCHED_FIFO thread here: skipped\n");
        skip();
    }
    assert_int_equal(rc, 0);
    pthread_attr_destroy(&attr);
    struct attr w;
    read_worker("hwtt-slice-fifo", &w);
    assert_int_equal(w.sched_policy, SCHED_FIFO);
    assert_int_equal(w.sched_priority, 1);
    assert_int_equal(atomic_load(&tlog.count[HWT_LOG_WARN]), 0);
    hwtt_destroy(timer);
}

int main(void)
{
    hwtt_watchdog(60);
    hwtt_apply_filters();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_worker_gets_short_slice, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_worker_keeps_nice, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_batch_worker_left_alone, hwtt_teardown_timers),
        cmocka_unit_test_teardown(test_fifo_attr_left_alone, hwtt_teardown_timers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void)
{
    puts("no SYS_sched_setattr: nothing to test");
    return 0;
}

#endif

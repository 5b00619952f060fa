/* helpers.c - see helpers.h. */
#define _GNU_SOURCE
#include "helpers.h"

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t hwtt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void hwtt_sleep_us(int64_t us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

void hwtt_sleep_ms(int64_t ms)
{
    hwtt_sleep_us(ms * 1000);
}

static void watchdog_fired(int sig)
{
    (void)sig;
    static const char msg[] = "hwtt watchdog: test took too long, aborting\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(99);
}

void hwtt_watchdog(unsigned seconds)
{
    /* A sanitizer build runs the same work several times slower, and a
     * host that steals CPU time slows it again: a plain build's limit
     * would fail a suite that is only slow. */
    int64_t s = (int64_t)seconds * hwtt_slowdown();
    signal(SIGALRM, watchdog_fired);
    /* A child forked on a timer's worker inherits its mask, which blocks
     * every signal: the alarm would never end it. (sigprocmask: the child
     * has one thread, and main() has one when it calls this.) */
    sigset_t alarm_only;
    sigemptyset(&alarm_only);
    sigaddset(&alarm_only, SIGALRM);
    sigprocmask(SIG_UNBLOCK, &alarm_only, NULL);
    alarm((unsigned)(s > HWTT_WATCHDOG_MAX_S ? HWTT_WATCHDOG_MAX_S : s));
}

hwt_timer *hwtt_timer_opts(const hwt_options *options)
{
    hwt_timer *timer = NULL;
    int rc = hwt_timer_create(&timer, options);
    assert_int_equal(rc, 0);
    assert_non_null(timer);
    return timer;
}

hwt_timer *hwtt_timer(uint64_t tick, hwt_unit unit, uint32_t ticks_per_wheel)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = tick;
    o.tick_unit = unit;
    o.ticks_per_wheel = ticks_per_wheel;
    return hwtt_timer_opts(&o);
}

void hwtt_log_cb(void *ctx, hwt_log_level level, const char *message)
{
    hwtt_log *log = ctx;
    if ((int)level >= 0 && (int)level < 4)
        atomic_fetch_add(&log->count[level], 1);
    /* Threads may log at once (a producer and the starting worker). */
    static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&last_lock);
    snprintf(log->last, sizeof log->last, "%s", message);
    pthread_mutex_unlock(&last_lock);
}

int hwtt_run_in_child(int (*fn)(void *), void *arg, int64_t timeout_ms)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fn(arg));
    int status = 0;
    if (!hwtt_wait_until(waitpid(pid, &status, WNOHANG) == pid, timeout_ms)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return HWTT_CHILD_HUNG;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void hwtt_count_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* ---- time-bound scaling and timer cleanup ---- */

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HWTT_TSAN 1
#endif
#if __has_feature(address_sanitizer)
#define HWTT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(HWTT_TSAN)
#define HWTT_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(HWTT_ASAN)
#define HWTT_ASAN 1
#endif

bool hwtt_under_valgrind(void)
{
    const char *preload = getenv("LD_PRELOAD");
    return preload != NULL && strstr(preload, "vgpreload") != NULL; /* its preloaded .so */
}

bool hwtt_under_emulator(void)
{
    const char *emulator = getenv("HWT_TEST_EMULATOR");
    return emulator != NULL && emulator[0] != '\0';
}

int64_t hwtt_slowdown(void)
{
    static int64_t cached;
    if (cached > 0)
        return cached;
    int64_t factor = 1;
    const char *env = getenv("HWT_TEST_SLOWDOWN");
    if (env != NULL && atoll(env) >= 1)
        factor = atoll(env);
    else if (hwtt_under_valgrind())
        factor = 20;
    else if (hwtt_under_emulator())
        factor = 5; /* qemu-user: a translated instruction stream, ~3-10x slower */
    else {
#if defined(HWTT_TSAN)
        factor = 10;
#elif defined(HWTT_ASAN)
        factor = 4;
#endif
    }
    cached = factor;
    return factor;
}

int64_t hwtt_slack_ms(int64_t ms)
{
    return ms * hwtt_slowdown();
}

#define HWTT_MAX_TRACKED 64
static hwt_timer *hwtt_tracked[HWTT_MAX_TRACKED];

hwt_timer *hwtt_track(hwt_timer *timer)
{
    for (int i = 0; i < HWTT_MAX_TRACKED; i++) {
        if (hwtt_tracked[i] == NULL) {
            hwtt_tracked[i] = timer;
            return timer;
        }
    }
    fail_msg("hwtt_track: more than %d timers tracked", HWTT_MAX_TRACKED);
    return timer;
}

void hwtt_destroy(hwt_timer *timer)
{
    for (int i = 0; i < HWTT_MAX_TRACKED; i++)
        if (hwtt_tracked[i] == timer)
            hwtt_tracked[i] = NULL;
    hwt_timer_destroy(timer);
}

int hwtt_teardown_timers(void **state)
{
    (void)state;
    for (int i = 0; i < HWTT_MAX_TRACKED; i++) {
        if (hwtt_tracked[i] != NULL) {
            hwt_timer_destroy(hwtt_tracked[i]);
            hwtt_tracked[i] = NULL;
        }
    }
    return 0;
}

/* The number of this process's threads named `name` (-1: /proc unreadable),
 * and the id of one of them in *tid. */
static int scan_threads_named(const char *name, pid_t *tid)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof comm, f)) {
            comm[strcspn(comm, "\n")] = '\0';
            if (strcmp(comm, name) == 0) {
                n++;
                *tid = (pid_t)atoi(e->d_name);
            }
        }
        fclose(f);
    }
    closedir(d);
    return n;
}

int hwtt_threads_named(const char *name)
{
    pid_t tid;
    return scan_threads_named(name, &tid);
}

pid_t hwtt_thread_named(const char *name)
{
    pid_t tid = -1;
    return scan_threads_named(name, &tid) == 1 ? tid : -1;
}

int hwtt_read_task_file(pid_t tid, const char *file, const char *key, char *buf, size_t n)
{
    char path[128], line[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        if (key == NULL || strncmp(line, key, strlen(key)) == 0) {
            line[strcspn(line, "\n")] = '\0';
            const char *src = key ? line + strlen(key) : line;
            size_t len = strlen(src) < n ? strlen(src) : n - 1;
            memcpy(buf, src, len);
            buf[len] = '\0';
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

void hwtt_apply_filters(void)
{
    if (getenv("HWTT_FILTER"))
        cmocka_set_test_filter(getenv("HWTT_FILTER"));
    if (getenv("HWTT_SKIP"))
        cmocka_set_skip_filter(getenv("HWTT_SKIP"));
}

void hwtt_rec_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((hwtt_rec *)arg)->ran, 1);
}

void hwtt_rec_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    atomic_fetch_add(&((hwtt_rec *)arg)->cb, 1);
}

const hwt_task hwtt_rec_task = {.run = hwtt_rec_run, .cancelled = hwtt_rec_cancelled};

/*
 * timerfd.c - hwt-bench-timerfd, the kernel's own timers as a baseline: one
 * timerfd per timeout, all registered (level-triggered) in one epoll
 * instance that a worker thread waits on. A timeout is armed, cancelled and
 * re-armed with one timerfd_settime() from any thread; the worker reads the
 * fd that fired (which clears it) and runs the task. The fds are created
 * and registered in advance, as a server creates one per connection.
 *
 * The kernel keeps the timers (hrtimers: they fire at the deadline, not at a
 * tick's end) and the memory: a struct file, the timerfd context, an epoll
 * item per timeout, and the fd table. The memory workload counts the
 * machine's Slab and VmallocUsed growth (/proc/meminfo) besides the RSS.
 *
 * The process's file descriptor limit caps n: RLIMIT_NOFILE is raised to
 * the hard limit, and as root the hard limit to fs.nr_open; each line says
 * what the limit was (fd_limit=) and the largest n it allows (max_n=).
 *
 * A cancel that disarms a timer which has fired but not yet been read makes
 * the worker's read fail with EAGAIN: the task does not run, and the cancel
 * returns 0 (its old value reads as disarmed). The workloads here never
 * cancel a timeout that is due.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#define STOP_KEY UINT64_MAX
#define HOUR_KEY (UINT64_MAX - 1)
#define EVENTS 256
/* fds the harness opens while the timeouts exist (/proc files) */
#define HEADROOM 8

struct timer {
    int ep, stop_fd, hour_fd;
    int *fds;
    size_t n;
    enum bench_task task;
    pthread_t thread;
};

static long fd_limit;

/* Raises the file descriptor limit as far as this process may. */
static void raise_fd_limit(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        bench_die("getrlimit: %s", strerror(errno));
    long nr_open = 0;
    FILE *f = fopen("/proc/sys/fs/nr_open", "r");
    if (f != NULL) {
        if (fscanf(f, "%ld", &nr_open) != 1)
            nr_open = 0;
        fclose(f);
    }
    if (nr_open > 0 && (rlim_t)nr_open > r.rlim_max) {
        struct rlimit up = {(rlim_t)nr_open, (rlim_t)nr_open};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0) /* needs CAP_SYS_RESOURCE */
            r = up;
    }
    if (r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
    getrlimit(RLIMIT_NOFILE, &r);
    fd_limit = (long)r.rlim_cur;
}

static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    long count = -1; /* the directory's own fd */
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            count++;
    closedir(d);
    return count;
}

static void set_timer(int fd, int64_t delay_ns, struct itimerspec *old)
{
    if (delay_ns <= 0)
        delay_ns = 1; /* a zero it_value disarms */
    struct itimerspec its = {{0, 0},
                             {(time_t)(delay_ns / 1000000000), (long)(delay_ns % 1000000000)}};
    if (timerfd_settime(fd, 0, &its, old) != 0)
        bench_die("timerfd_settime: %s", strerror(errno));
}

static int was_armed(const struct itimerspec *old)
{
    return old->it_value.tv_sec != 0 || old->it_value.tv_nsec != 0;
}

static void watch(int ep, int fd, uint64_t key)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = key};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
        bench_die("epoll_ctl: %s (fs.epoll.max_user_watches?)", strerror(errno));
}

static void *worker(void *p)
{
    struct timer *t = p;
    bench_worker_named();
    struct epoll_event ev[EVENTS];
    for (;;) {
        int k = epoll_wait(t->ep, ev, EVENTS, -1);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            bench_die("epoll_wait: %s", strerror(errno));
        }
        for (int j = 0; j < k; j++) {
            uint64_t key = ev[j].data.u64, expirations;
            if (key == STOP_KEY)
                return NULL;
            int fd = key == HOUR_KEY ? t->hour_fd : t->fds[key];
            /* A re-arm clears an unread expiration, but not one read just
             * before it: this thread, preempted between the read and the
             * record, would judge the replaced arm's run by the new arm's
             * bound. */
            uint32_t seq = key == HOUR_KEY ? 0 : bench_task_seq((size_t)key);
            if (read(fd, &expirations, sizeof expirations) != sizeof expirations)
                continue; /* disarmed after it fired */
            if (key != HOUR_KEY && t->task == BENCH_RECORD)
                bench_task_ran_since((size_t)key, seq);
        }
    }
}

static void *tf_create(const struct bench_config *c)
{
    (void)c;
    raise_fd_limit();
    struct timer *t = bench_xmalloc(sizeof *t);
    memset(t, 0, sizeof *t);
    t->ep = epoll_create1(EPOLL_CLOEXEC);
    t->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    t->hour_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (t->ep < 0 || t->stop_fd < 0 || t->hour_fd < 0)
        bench_die("epoll_create1 / eventfd / timerfd_create: %s", strerror(errno));
    watch(t->ep, t->stop_fd, STOP_KEY);
    watch(t->ep, t->hour_fd, HOUR_KEY);
    set_timer(t->hour_fd, INT64_C(3600000000000), NULL);
    if (pthread_create(&t->thread, NULL, worker, t) != 0)
        bench_die("pthread_create");
    return t;
}

static void tf_slots(void *p, size_t n, enum bench_task task)
{
    struct timer *t = p;
    long in_use = open_fds();
    long max_n = fd_limit - in_use - HEADROOM;
    bench_note(" fd_limit=%ld max_n=%ld", fd_limit, max_n);
    if ((long)n > max_n)
        bench_die("n=%zu needs more file descriptors than RLIMIT_NOFILE allows (%ld, %ld in use): "
                  "at most n=%ld here",
                  n, fd_limit, in_use, max_n);
    t->task = task;
    t->fds = bench_xmalloc(n * sizeof *t->fds);
    for (size_t i = 0; i < n; i++) {
        t->fds[i] = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (t->fds[i] < 0)
            bench_die("timerfd_create (timeout %zu of %zu): %s", i, n, strerror(errno));
        watch(t->ep, t->fds[i], i);
        t->n = i + 1;
    }
}

static void tf_arm(void *p, size_t i, int64_t delay_ns)
{
    struct timer *t = p;
    set_timer(t->fds[i], delay_ns, NULL);
}

static int tf_cancel(void *p, size_t i)
{
    struct timer *t = p;
    struct itimerspec off = {{0, 0}, {0, 0}}, old;
    if (timerfd_settime(t->fds[i], 0, &off, &old) != 0)
        bench_die("timerfd_settime: %s", strerror(errno));
    return was_armed(&old);
}

/* One call: setting a new value replaces the pending one. */
static int tf_rearm(void *p, size_t i, int64_t delay_ns)
{
    struct timer *t = p;
    struct itimerspec old;
    set_timer(t->fds[i], delay_ns, &old);
    return was_armed(&old);
}

static void tf_destroy(void *p)
{
    struct timer *t = p;
    uint64_t one = 1;
    if (write(t->stop_fd, &one, sizeof one) != sizeof one)
        bench_die("write(eventfd): %s", strerror(errno));
    pthread_join(t->thread, NULL);
    for (size_t i = 0; i < t->n; i++)
        close(t->fds[i]);
    close(t->hour_fd);
    close(t->stop_fd);
    close(t->ep);
    free(t->fds);
    free(t);
}

/* The kernel's release, and how many timeouts the fd limit allows (what
 * bench/compare-peers caps n at). */
static const char *tf_version(void)
{
    static char v[200];
    struct utsname u;
    uname(&u);
    raise_fd_limit();
    /* the epoll fd, the eventfd and the 1-hour timer's fd come on top */
    snprintf(v, sizeof v, "version=%s fd_limit=%ld max_n=%ld", u.release, fd_limit,
             fd_limit - open_fds() - 3 - HEADROOM);
    return v;
}

static struct bench_peer timerfd_peer = {
    .name = "timerfd",
    .version = tf_version,
    .create = tf_create,
    .slots = tf_slots,
    .arm = tf_arm,
    .cancel = tf_cancel,
    .rearm = tf_rearm,
    .destroy = tf_destroy,
    .kernel_memory = 1,
};

int main(int argc, char **argv)
{
    return bench_main(&timerfd_peer, argc, argv);
}

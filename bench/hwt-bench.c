/*
 * hwt-bench.c - the libhwtimer side of the side-by-side benchmark against
 * Netty's HashedWheelTimer (its twin is bench/netty/HwtBench.java).
 *
 *   hwt-bench WORKLOAD [key=value ...]
 *   hwt-bench version
 *
 * Workloads (issue 3): schedule, cancel, churn, expire, precision, idle,
 * hold, memory; and jitter (a hold plus a heartbeat task, see w_jitter).
 * Beside them, for the peers (bench/peers/, issue 19): schedule_warm (the
 * same threads schedule n, cancel and release them, let the worker reclaim
 * them, then schedule n again, timed: the pool's memory reused) and
 * cancel_own (each thread cancels the timeouts it scheduled itself; in
 * cancel, other threads do). touch and touch_early (issue 17): each thread
 * moves the deadlines of a ring of pending timeouts with
 * hwt_timeout_reschedule (see touch_ring).
 * Each run prints exactly one line on stdout,
 *
 *   hwtimer WORKLOAD key=value key=value ...
 *
 * the parameters first, then the figures. Diagnostics go to stderr; any
 * failure of the library exits with status 1.
 *
 * Keys (defaults in brackets; every workload takes every key, most use few):
 *   n=         timeouts                        [1000000; precision 10000]
 *   threads=   producer / canceller threads    [2]
 *   tick_us=   tick in microseconds            [1000; precision 100]
 *   wheel=     ticks per wheel                 [512]
 *   seconds=   measuring window, idle and hold [5]
 *   span_ms=   delays uniform in [0, span_ms), expire and precision
 *                                              [expire 2000; precision 1000]
 *   settle_ms= wait before measuring, hold and memory [hold 1000; memory 1500]
 *   wait_ms=   wait between scheduling and cancelling, cancel [200]
 *   ring=      handles per thread, churn       [1000]
 *   quiet_ms=  how long the worker's CPU clock must stand still before its
 *              work is taken as done (cpu_ns_per_op, below)
 *                                              [3 x max(tick, 100 ms): the
 *              worker may leave queued work for one cancel latency,
 *              and a loaded machine may wake it late]
 *   seed=      seed of the delays (splitmix64, same sequence as the Java twin) [42]
 *   dump=FILE  expire/precision: write every task's lateness in microseconds,
 *              sorted ascending, one per line (for bench/plot.gnuplot)
 *
 * In every workload the worker is started first with one 1-hour timeout, so
 * start-up is never measured (it is also the "1" in "pending <= 1" and in
 * list = n + 1). The worker thread is named "hwt-bench"; its CPU time is read
 * through its thread CPU clock (found by name in /proc/self/task/, + /comm),
 * falling back to utime + stime from /proc/self/task/TID/stat.
 *
 * cpu_ns_per_op (schedule, schedule_warm, cancel, cancel_own, churn, expire,
 * precision, touch, touch_early): the CPU time of the whole process, every thread and the
 * worker included (CLOCK_PROCESS_CPUTIME_ID), from the start of the timed
 * phase until the work it left to the worker is done, per operation. Done:
 * the workload's own condition holds (expire: every task ran) and the
 * worker's CPU clock has not moved for quiet_ms; the process's CPU time is
 * the one read at the first sample that saw the worker's final CPU time, so
 * the quiet wait is not counted. drain_ms says when that was, after the
 * timed phase ended. In schedule, the stop (stop_ms) comes after it, with
 * every timeout in the wheel.
 *
 * Delays are drawn before anything is timed, into a preallocated array, so
 * that the random number generator is not measured; arrays written by tasks
 * are pre-faulted so that a task never takes a page fault.
 */
#define _GNU_SOURCE
#include <hwtimer.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WORKER_NAME "hwt-bench"
#define MS_NS INT64_C(1000000)
#define S_NS INT64_C(1000000000)

/* --------------------------------------------------------------- helpers */

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hwt-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void check(int rc, const char *what)
{
    if (rc != 0)
        die("%s: %s (%d)", what, hwt_strerror(rc), rc);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * S_NS + ts.tv_nsec;
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / S_NS), (long)(ns % S_NS)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *xmalloc(size_t size)
{
    void *p = malloc(size == 0 ? 1 : size);
    if (p == NULL)
        die("out of memory (%zu bytes)", size);
    return p;
}

/* Writes every page so that later writes (from a task) do not fault. A plain
 * memset(0) after malloc may be turned into calloc, which does not. */
static void prefault(void *p, size_t size)
{
    volatile char *c = p;
    long page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < size; i += (size_t)page)
        c[i] = 1;
    memset(p, 0, size);
    if (size > 0)
        c[0] = 0;
}

/* splitmix64: the Java twin uses the same generator and the same mapping,
 * so both sides schedule the same delays for the same seed. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* n delays in nanoseconds, uniform in [lo, hi). */
static int64_t *uniform_delays(size_t n, int64_t lo, int64_t hi, uint64_t seed)
{
    int64_t *d = xmalloc(n * sizeof *d);
    uint64_t state = seed;
    uint64_t range = (uint64_t)(hi - lo);
    for (size_t i = 0; i < n; i++)
        d[i] = lo + (int64_t)((splitmix64(&state) >> 1) % (range == 0 ? 1 : range));
    return d;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array. */
static int64_t percentile(const int64_t *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    double rank = p / 100.0 * (double)n;
    size_t idx = (size_t)rank;
    if ((double)idx < rank)
        idx++;
    if (idx == 0)
        idx = 1;
    if (idx > n)
        idx = n;
    return sorted[idx - 1];
}

/* ------------------------------------------------------ the output line */

static char line[2048];
static size_t line_len;

static void put(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (line_len < sizeof line - 1) {
        int w = vsnprintf(line + line_len, sizeof line - line_len, fmt, ap);
        if (w > 0)
            line_len += (size_t)w;
        if (line_len > sizeof line - 1)
            line_len = sizeof line - 1;
    }
    va_end(ap);
}

/* -------------------------------------------------------- configuration */

struct config {
    const char *workload;
    long n, threads, tick_us, wheel, span_ms, settle_ms, wait_ms, ring, quiet_ms;
    double seconds;
    uint64_t seed;
    const char *dump;
};

static long parse_long(const char *key, const char *v, long min)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < min)
        die("bad value for %s: '%s' (an integer >= %ld)", key, v, min);
    return x;
}

static void parse_args(struct config *c, int argc, char **argv)
{
    c->n = c->tick_us = c->span_ms = c->settle_ms = c->quiet_ms = -1;
    c->threads = 2;
    c->wheel = 512;
    c->wait_ms = 200;
    c->ring = 1000;
    c->seconds = 5.0;
    c->seed = 42;
    c->dump = NULL;
    for (int i = 2; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (eq == NULL)
            die("expected key=value, got '%s'", argv[i]);
        *eq = '\0';
        const char *k = argv[i], *v = eq + 1;
        if (strcmp(k, "n") == 0)
            c->n = parse_long(k, v, 1);
        else if (strcmp(k, "threads") == 0)
            c->threads = parse_long(k, v, 1);
        else if (strcmp(k, "tick_us") == 0)
            c->tick_us = parse_long(k, v, 1);
        else if (strcmp(k, "wheel") == 0)
            c->wheel = parse_long(k, v, 1);
        else if (strcmp(k, "span_ms") == 0)
            c->span_ms = parse_long(k, v, 1);
        else if (strcmp(k, "settle_ms") == 0)
            c->settle_ms = parse_long(k, v, 0);
        else if (strcmp(k, "wait_ms") == 0)
            c->wait_ms = parse_long(k, v, 0);
        else if (strcmp(k, "ring") == 0)
            c->ring = parse_long(k, v, 1);
        else if (strcmp(k, "quiet_ms") == 0)
            c->quiet_ms = parse_long(k, v, 1);
        else if (strcmp(k, "seed") == 0)
            c->seed = (uint64_t)parse_long(k, v, 0);
        else if (strcmp(k, "dump") == 0)
            c->dump = v;
        else if (strcmp(k, "seconds") == 0) {
            char *end;
            c->seconds = strtod(v, &end);
            if (end == v || *end != '\0' || !(c->seconds > 0) || c->seconds > 86400)
                die("bad value for seconds: '%s'", v);
        } else
            die("unknown key '%s'", k);
    }
    int precision = strcmp(c->workload, "precision") == 0;
    if (c->n < 0)
        c->n = precision ? 10000 : 1000000;
    if (c->tick_us < 0)
        c->tick_us = precision ? 100 : 1000;
    if (c->span_ms < 0)
        c->span_ms = precision ? 1000 : 2000;
    if (c->settle_ms < 0)
        c->settle_ms = strcmp(c->workload, "memory") == 0 ? 1500 : 1000;
    if (c->quiet_ms < 0)
        c->quiet_ms = 3 * (c->tick_us / 1000 > 100 ? c->tick_us / 1000 : 100);
    if (c->wheel > (1L << 30))
        die("wheel must be <= 2^30");
}

static void put_params(const struct config *c)
{
    put("hwtimer %s n=%ld threads=%ld tick_us=%ld wheel=%ld", c->workload, c->n, c->threads,
        c->tick_us, c->wheel);
}

/* --------------------------------------------------- timer and worker */

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* Creates the timer and starts its worker with one 1-hour timeout. */
static hwt_timer *start_timer(const struct config *c)
{
    hwt_options o;
    hwt_options_init(&o);
    o.tick_duration = (uint64_t)c->tick_us;
    o.tick_unit = HWT_MICROSECONDS;
    o.ticks_per_wheel = (uint32_t)c->wheel;
    o.thread_name = WORKER_NAME;
    hwt_timer *timer;
    check(hwt_timer_create(&timer, &o), "hwt_timer_create");
    check(hwt_new_timeout(timer, noop, NULL, 1, HWT_HOURS, NULL), "hwt_new_timeout (1 hour)");
    return timer;
}

/* The worker's thread id, found by name in /proc/self/task/TID/comm. */
static pid_t worker_tid(void)
{
    for (int attempt = 0; attempt < 1000; attempt++) {
        DIR *dir = opendir("/proc/self/task");
        if (dir == NULL)
            return -1;
        struct dirent *e;
        pid_t found = -1;
        while ((e = readdir(dir)) != NULL) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9')
                continue;
            char path[300], comm[32] = "";
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
            FILE *f = fopen(path, "r");
            if (f == NULL)
                continue;
            if (fgets(comm, sizeof comm, f) != NULL) {
                comm[strcspn(comm, "\n")] = '\0';
                if (strcmp(comm, WORKER_NAME) == 0)
                    found = (pid_t)atoi(e->d_name);
            }
            fclose(f);
        }
        closedir(dir);
        if (found > 0)
            return found;
        sleep_ns(MS_NS); /* the worker names itself when it starts */
    }
    return -1;
}

/* CPU time of thread `tid` of this process, in nanoseconds: its thread CPU
 * clock (what pthread_getcpuclockid gives: the kernel's encoding of a
 * per-thread CPUCLOCK_SCHED clock), else utime + stime from /proc (in clock
 * ticks, coarse). -1 if neither works. */
static int64_t thread_cpu_ns(pid_t tid)
{
    clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6u);
    struct timespec ts;
    if (clock_gettime(clock, &ts) == 0)
        return (int64_t)ts.tv_sec * S_NS + ts.tv_nsec;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *p = strrchr(buf, ')'); /* comm may hold spaces */
    if (p == NULL)
        return -1;
    unsigned long long utime = 0, stime = 0;
    /* after ")": state(3) ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime(14) stime(15) */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
        2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return (int64_t)((utime + stime) * (unsigned long long)(S_NS / (hz > 0 ? hz : 100)));
}

/* Voluntary + involuntary context switches of thread `tid` (-1 if unknown). */
static void thread_ctxsw(pid_t tid, long long *vol, long long *invol)
{
    char path[64], buf[256];
    *vol = *invol = -1;
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(buf, sizeof buf, f) != NULL) {
        if (strncmp(buf, "voluntary_ctxt_switches:", 24) == 0)
            *vol = atoll(buf + 24);
        else if (strncmp(buf, "nonvoluntary_ctxt_switches:", 27) == 0)
            *invol = atoll(buf + 27);
    }
    fclose(f);
}

/* CPU time of the whole process: every thread, those that exited too. */
static int64_t proc_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * S_NS + ts.tv_nsec;
}

static int64_t self_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * S_NS + ts.tv_nsec;
}

/* Resident set size of the process in bytes. */
static int64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        die("cannot open /proc/self/statm");
    long long size, resident;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2)
        die("cannot parse /proc/self/statm");
    fclose(f);
    return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

/* ------------------------------------------------------ parallel phases */

struct phase;
typedef void (*phase_fn)(struct phase *ph, size_t self);

/* P threads released together by a barrier; thread `self` handles indices
 * self, self + P, ... of n. Wall time = last end - first start. */
struct phase {
    phase_fn fn;
    size_t n, threads;
    hwt_timer *timer;
    const struct config *cfg;
    const int64_t *delays;
    hwt_timeout **handles;
    int64_t *sched_at; /* expire: when each was scheduled */
    pthread_barrier_t barrier;
    int64_t *start, *end;
    _Atomic uint64_t ok; /* successful operations (cancel: true results) */
    struct team *team;   /* its threads, when they run several phases */
};

struct phase_arg {
    struct phase *ph;
    size_t self;
};

static void *phase_thread(void *p)
{
    struct phase_arg *a = p;
    pthread_barrier_wait(&a->ph->barrier);
    a->ph->start[a->self] = now_ns();
    a->ph->fn(a->ph, a->self);
    a->ph->end[a->self] = now_ns();
    return NULL;
}

/* Runs fn on ph->threads threads; returns the wall time in ns. */
static int64_t run_phase(struct phase *ph, phase_fn fn)
{
    size_t p = ph->threads;
    ph->fn = fn;
    atomic_store(&ph->ok, 0);
    ph->start = xmalloc(p * sizeof *ph->start);
    ph->end = xmalloc(p * sizeof *ph->end);
    pthread_t *tid = xmalloc(p * sizeof *tid);
    struct phase_arg *args = xmalloc(p * sizeof *args);
    if (pthread_barrier_init(&ph->barrier, NULL, (unsigned)p) != 0)
        die("pthread_barrier_init");
    for (size_t i = 0; i < p; i++) {
        args[i] = (struct phase_arg){ph, i};
        if (pthread_create(&tid[i], NULL, phase_thread, &args[i]) != 0)
            die("pthread_create");
    }
    for (size_t i = 0; i < p; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&ph->barrier);
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t i = 0; i < p; i++) {
        if (ph->start[i] < first)
            first = ph->start[i];
        if (ph->end[i] > last)
            last = ph->end[i];
    }
    free(ph->start);
    free(ph->end);
    free(tid);
    free(args);
    return last - first;
}

static void init_phase(struct phase *ph, const struct config *c, hwt_timer *timer)
{
    memset(ph, 0, sizeof *ph);
    ph->n = (size_t)c->n;
    ph->threads = (size_t)c->threads;
    ph->timer = timer;
    ph->cfg = c;
}

/* P threads that run several phases (schedule_warm, cancel_own): each
 * starts when all of them and the main thread are at `go`, and ends at
 * `done`, so a thread's later phases work on what it scheduled itself. */
struct team {
    struct phase *ph;
    pthread_t *tid;
    struct phase_arg *args;
    pthread_barrier_t go, done;
};

static void *team_thread(void *p)
{
    struct phase_arg *a = p;
    struct phase *ph = a->ph;
    struct team *tm = ph->team;
    for (;;) {
        pthread_barrier_wait(&tm->go);
        phase_fn fn = ph->fn;
        if (fn == NULL)
            return NULL;
        ph->start[a->self] = now_ns();
        fn(ph, a->self);
        ph->end[a->self] = now_ns();
        pthread_barrier_wait(&tm->done);
    }
}

static void team_start(struct team *tm, struct phase *ph)
{
    size_t p = ph->threads;
    tm->ph = ph;
    ph->team = tm;
    tm->tid = xmalloc(p * sizeof *tm->tid);
    tm->args = xmalloc(p * sizeof *tm->args);
    ph->start = xmalloc(p * sizeof *ph->start);
    ph->end = xmalloc(p * sizeof *ph->end);
    if (pthread_barrier_init(&tm->go, NULL, (unsigned)p + 1) != 0 ||
        pthread_barrier_init(&tm->done, NULL, (unsigned)p + 1) != 0)
        die("pthread_barrier_init");
    for (size_t i = 0; i < p; i++) {
        tm->args[i] = (struct phase_arg){ph, i};
        if (pthread_create(&tm->tid[i], NULL, team_thread, &tm->args[i]) != 0)
            die("pthread_create");
    }
}

/* Runs fn on every thread of the team; returns the wall time in ns. */
static int64_t team_phase(struct team *tm, phase_fn fn)
{
    struct phase *ph = tm->ph;
    ph->fn = fn;
    pthread_barrier_wait(&tm->go);
    pthread_barrier_wait(&tm->done);
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t i = 0; i < ph->threads; i++) {
        if (ph->start[i] < first)
            first = ph->start[i];
        if (ph->end[i] > last)
            last = ph->end[i];
    }
    return last - first;
}

static void team_stop(struct team *tm)
{
    struct phase *ph = tm->ph;
    ph->fn = NULL;
    pthread_barrier_wait(&tm->go);
    for (size_t i = 0; i < ph->threads; i++)
        pthread_join(tm->tid[i], NULL);
    pthread_barrier_destroy(&tm->go);
    pthread_barrier_destroy(&tm->done);
    free(tm->tid);
    free(tm->args);
    free(ph->start);
    free(ph->end);
    ph->team = NULL;
}

/* Schedules delays[i] (ns) with the no-op task and no handle. */
static void schedule_noop(struct phase *ph, size_t self)
{
    for (size_t i = self; i < ph->n; i += ph->threads)
        check(hwt_new_timeout(ph->timer, noop, NULL, ph->delays[i], HWT_NANOSECONDS, NULL),
              "hwt_new_timeout");
}

/* Schedules delays[i] (ns) with the no-op task, keeping handles[i]. */
static void schedule_handles(struct phase *ph, size_t self)
{
    for (size_t i = self; i < ph->n; i += ph->threads)
        check(
            hwt_new_timeout(ph->timer, noop, NULL, ph->delays[i], HWT_NANOSECONDS, &ph->handles[i]),
            "hwt_new_timeout");
}

/* Releases handles[i], those this thread cancelled. */
static void release_handles(struct phase *ph, size_t self)
{
    for (size_t i = self; i < ph->n; i += ph->threads)
        hwt_timeout_release(ph->handles[i]);
}

static void cancel_handles(struct phase *ph, size_t self)
{
    uint64_t ok = 0;
    for (size_t i = self; i < ph->n; i += ph->threads)
        ok += hwt_timeout_cancel(ph->handles[i]);
    atomic_fetch_add(&ph->ok, ok);
}

/* churn: a ring of handles per thread; cancel + release the slot's old
 * handle, schedule a 30 s timeout into the slot. */
static void churn_ring(struct phase *ph, size_t self)
{
    size_t ring = (size_t)ph->cfg->ring;
    size_t iters = ph->n / ph->threads;
    hwt_timeout **slots = &ph->handles[self * ring];
    uint64_t ok = 0;
    for (size_t k = 0, s = 0; k < iters; k++) {
        if (slots[s] != NULL) {
            ok += hwt_timeout_cancel(slots[s]);
            hwt_timeout_release(slots[s]);
        }
        check(hwt_new_timeout(ph->timer, noop, NULL, 30, HWT_SECONDS, &slots[s]),
              "hwt_new_timeout");
        if (++s == ring)
            s = 0;
    }
    atomic_fetch_add(&ph->ok, ok);
}

/* touch and touch_early: each of P threads owns a ring of `ring` handles,
 * scheduled 30 s ahead before the timed phase (slot ids self * ring + s);
 * n/P times it moves the slot's deadline with hwt_timeout_reschedule
 * (s = k mod ring): touch to 30 s from now; touch_early alternately to 10 ms
 * and to 30 s, so that every other call moves a deadline earlier.
 *
 * Never early: a thread reads the clock once per pass over its ring (not
 * per call, which would double what is measured); a call's deadline is at
 * least that reading + its delay, stored per slot (touch.lb): before the
 * call when it moves the deadline earlier, after it when later, so that a
 * task racing the call never reads a bound above the deadline it ran for.
 * A task compares the time it runs with its slot's bound. Only a
 * 10 ms deadline can come due during the phase (a producer descheduled for
 * 10 ms); its task is then already taken to run and the next call on the
 * slot returns false: the thread waits for the task to have been counted,
 * then schedules a fresh timeout into the slot, as a server would, and
 * counts it (renewed). */
static struct {
    int early_mode;
    size_t ring;
    int64_t setup_ns;        /* when the rings were scheduled */
    _Atomic int64_t *lb;     /* per slot: lower bound of its deadline */
    _Atomic int64_t *ran_at; /* per slot: when its task last ran */
    _Atomic uint32_t *runs;  /* per slot: how many times its task ran */
    uint32_t *renewals;      /* per slot: timeouts scheduled anew (its thread's) */
    _Atomic uint64_t early, renewed, failed;
} touch;

static int64_t touch_delay(size_t pass, size_t s)
{
    return touch.early_mode && ((pass + s) & 1) != 0 ? 10 * MS_NS : 30 * S_NS;
}

static void touch_ran(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    size_t slot = (uintptr_t)arg;
    int64_t now = now_ns();
    if (now < atomic_load_explicit(&touch.lb[slot], memory_order_acquire))
        atomic_fetch_add(&touch.early, 1);
    atomic_store_explicit(&touch.ran_at[slot], now, memory_order_relaxed);
    atomic_fetch_add_explicit(&touch.runs[slot], 1, memory_order_release);
}

static void touch_ring(struct phase *ph, size_t self)
{
    size_t ring = touch.ring, iters = ph->n / ph->threads, base = self * ring;
    hwt_timeout **slots = &ph->handles[base];
    int64_t t = 0;
    uint64_t renewed = 0, failed = 0;
    for (size_t k = 0, s = 0, pass = 0; k < iters; k++) {
        if (s == 0)
            t = now_ns();
        int64_t d = touch_delay(pass, s);
        int earlier = d < 30 * S_NS;
        if (earlier)
            atomic_store_explicit(&touch.lb[base + s], t + d, memory_order_release);
        if (!hwt_timeout_reschedule(slots[s], d, HWT_NANOSECONDS)) {
            /* Expired during the phase (see above): wait until its task
             * has been counted, so that it is checked against the bound of
             * the deadline it ran for, then schedule the slot anew. */
            failed++;
            int64_t until = now_ns() + 10 * S_NS;
            while (atomic_load_explicit(&touch.runs[base + s], memory_order_acquire) <=
                   touch.renewals[base + s]) {
                if (now_ns() > until)
                    die("touch: reschedule returned false but the task did not run");
                sched_yield();
            }
            hwt_timeout_release(slots[s]);
            t = now_ns();
            check(hwt_new_timeout(ph->timer, touch_ran, (void *)(uintptr_t)(base + s), d,
                                  HWT_NANOSECONDS, &slots[s]),
                  "hwt_new_timeout (renew)");
            touch.renewals[base + s]++;
            renewed++;
            atomic_store_explicit(&touch.lb[base + s], t + d, memory_order_release);
        } else if (!earlier) {
            atomic_store_explicit(&touch.lb[base + s], t + d, memory_order_release);
        }
        if (++s == ring) {
            s = 0;
            pass++;
        }
    }
    atomic_fetch_add(&touch.renewed, renewed);
    atomic_fetch_add(&touch.failed, failed);
}

/* expire / precision: each task records when it ran. */
static int64_t *ran_at;
static _Atomic size_t ran_count;

static void record_run(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    ran_at[(uintptr_t)arg] = now_ns();
    atomic_fetch_add_explicit(&ran_count, 1, memory_order_release);
}

static void schedule_recorded(struct phase *ph, size_t self)
{
    for (size_t i = self; i < ph->n; i += ph->threads) {
        ph->sched_at[i] = now_ns();
        check(hwt_new_timeout(ph->timer, record_run, (void *)(uintptr_t)i, ph->delays[i],
                              HWT_NANOSECONDS, NULL),
              "hwt_new_timeout");
    }
}

/* ---------------------------------------------------- the worker's work */

struct settled {
    int64_t cpu_ns; /* process CPU time when the worker was done */
    int64_t at_ns;  /* and when */
};

/* Waits until `ran_target` tasks ran, pending <= pending_max, and the
 * worker's CPU clock has stood still for quiet_ms (it leaves queued work for
 * one cancel latency at most, max(tick, 100 ms)); gives the process's CPU
 * time at the first sample that saw the worker's final CPU time. The
 * worker's clock is read before the process's, so the latter covers all the
 * worker did up to the former. The CPU time this thread spends polling is
 * taken off: it is the measurement's, not the timer's. */
static struct settled settle(const struct config *c, hwt_timer *timer, pid_t wtid,
                             size_t ran_target, int64_t pending_max)
{
    if (wtid < 0)
        die("worker thread '%s' not found in /proc/self/task", WORKER_NAME);
    int64_t quiet = c->quiet_ms * MS_NS, deadline = now_ns() + 120 * S_NS;
    int64_t last_worker = -2, quiet_since = 0, self0 = self_cpu_ns();
    struct settled s = {0, 0};
    for (;;) {
        int64_t wc = thread_cpu_ns(wtid);
        int64_t pc = proc_cpu_ns() - (self_cpu_ns() - self0);
        int64_t now = now_ns();
        int done = atomic_load_explicit(&ran_count, memory_order_acquire) >= ran_target &&
                   hwt_pending_timeouts(timer) <= pending_max;
        if (!done || wc != last_worker) {
            last_worker = wc;
            quiet_since = now;
            s = (struct settled){pc, now};
        } else if (now - quiet_since >= quiet) {
            return s;
        }
        if (now > deadline)
            die("%s: the worker did not settle within 120 s", c->workload);
        sleep_ns(MS_NS);
    }
}

static double per(int64_t ns, size_t n)
{
    return (double)ns / (double)(n ? n : 1);
}

/* ------------------------------------------------------------ workloads */

static void w_schedule(const struct config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    pid_t wtid = worker_tid();
    int64_t cpu0 = proc_cpu_ns();
    int64_t wall = run_phase(&ph, schedule_noop);
    int64_t end = now_ns();
    struct settled done = settle(c, timer, wtid, 0, INT64_MAX);

    hwt_timeout **list;
    size_t count;
    int64_t t0 = now_ns();
    check(hwt_stop(timer, &list, &count), "hwt_stop");
    int64_t stop = now_ns() - t0;
    t0 = now_ns();
    hwt_timeouts_release(list, count);
    int64_t release = now_ns() - t0;
    hwt_timer_destroy(timer);
    free(delays);

    put_params(c);
    put(" ns_per_op=%.1f stop_ms=%.1f list=%zu release_ms=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f",
        (double)wall / (double)ph.n, (double)stop / 1e6, count, (double)release / 1e6,
        per(done.cpu_ns - cpu0, ph.n), (double)(done.at_ns - end) / 1e6);
}

/* schedule_warm: the same threads schedule n (handles kept), cancel and
 * release them, and the worker reclaims them (untimed); then the threads
 * schedule n again, without handles, from the memory the first round left
 * in the pool (timed). */
static void w_schedule_warm(const struct config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    ph.handles = xmalloc(ph.n * sizeof *ph.handles);
    prefault(ph.handles, ph.n * sizeof *ph.handles);
    pid_t wtid = worker_tid();
    struct team tm;
    team_start(&tm, &ph);
    team_phase(&tm, schedule_handles);
    team_phase(&tm, cancel_handles);
    team_phase(&tm, release_handles);
    settle(c, timer, wtid, 0, 1);

    int64_t cpu0 = proc_cpu_ns();
    int64_t wall = team_phase(&tm, schedule_noop);
    int64_t end = now_ns();
    struct settled done = settle(c, timer, wtid, 0, INT64_MAX);
    team_stop(&tm);
    int64_t pending = hwt_pending_timeouts(timer);
    hwt_timer_destroy(timer);
    free(ph.handles);
    free(delays);

    put_params(c);
    put(" ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f pending=%" PRId64, per(wall, ph.n),
        per(done.cpu_ns - cpu0, ph.n), (double)(done.at_ns - end) / 1e6, pending);
}

/* cancel: P threads schedule, P other threads cancel (thread i the
 * timeouts i, i + P, ...); cancel_own (own = 1): each of P threads cancels
 * the timeouts it scheduled itself. */
static void cancel_common(const struct config *c, int own)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = xmalloc(ph.n * sizeof *delays);
    for (size_t i = 0; i < ph.n; i++)
        delays[i] = 10 * S_NS + (int64_t)(i % 60000) * MS_NS;
    ph.delays = delays;
    ph.handles = xmalloc(ph.n * sizeof *ph.handles);
    prefault(ph.handles, ph.n * sizeof *ph.handles);
    pid_t wtid = worker_tid();
    struct team tm;
    if (own) {
        team_start(&tm, &ph);
        team_phase(&tm, schedule_handles);
    } else {
        run_phase(&ph, schedule_handles);
    }
    sleep_ns(c->wait_ms * MS_NS);

    int64_t cpu0 = proc_cpu_ns();
    int64_t wall = own ? team_phase(&tm, cancel_handles) : run_phase(&ph, cancel_handles);
    int64_t done = now_ns();
    uint64_t cancelled = atomic_load(&ph.ok);
    int64_t deadline = done + 60 * S_NS;
    int64_t self0 = self_cpu_ns(); /* this wait is the measurement's: not counted */
    while (hwt_pending_timeouts(timer) > 1 && now_ns() < deadline)
        sleep_ns(50 * 1000);
    int64_t pending_ns = now_ns() - done;
    int64_t pending = hwt_pending_timeouts(timer);
    cpu0 += self_cpu_ns() - self0;
    struct settled drained = settle(c, timer, wtid, 0, 1);
    if (own)
        team_stop(&tm);

    int64_t t0 = now_ns();
    for (size_t i = 0; i < ph.n; i++)
        hwt_timeout_release(ph.handles[i]);
    int64_t release = now_ns() - t0;
    hwt_timer_destroy(timer);
    free(ph.handles);
    free(delays);

    put_params(c);
    put(" ns_per_op=%.1f pending_ms=%.2f cancelled=%" PRIu64 " pending=%" PRId64
        " release_ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f",
        (double)wall / (double)ph.n, (double)pending_ns / 1e6, cancelled, pending,
        (double)release / (double)ph.n, per(drained.cpu_ns - cpu0, ph.n),
        (double)(drained.at_ns - done) / 1e6);
}

static void w_cancel(const struct config *c)
{
    cancel_common(c, 0);
}

static void w_cancel_own(const struct config *c)
{
    cancel_common(c, 1);
}

static void w_churn(const struct config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    size_t slots = ph.threads * (size_t)c->ring;
    ph.handles = xmalloc(slots * sizeof *ph.handles);
    memset(ph.handles, 0, slots * sizeof *ph.handles);
    pid_t wtid = worker_tid();
    int64_t cpu0 = proc_cpu_ns();
    int64_t wall = run_phase(&ph, churn_ring);
    int64_t end = now_ns();
    struct settled done = settle(c, timer, wtid, 0, INT64_MAX);
    size_t pairs = (ph.n / ph.threads) * ph.threads;
    uint64_t cancelled = atomic_load(&ph.ok);
    for (size_t i = 0; i < slots; i++) {
        if (ph.handles[i] != NULL) {
            hwt_timeout_cancel(ph.handles[i]);
            hwt_timeout_release(ph.handles[i]);
        }
    }
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    hwt_timer_destroy(timer);
    free(ph.handles);

    put_params(c);
    put(" ring=%ld ns_per_op=%.1f pairs=%zu cancelled=%" PRIu64 " wakeups=%" PRIu64
        " cpu_ns_per_op=%.1f drain_ms=%.2f",
        c->ring, (double)wall / (double)(pairs ? pairs : 1), pairs, cancelled, st.wakeups,
        per(done.cpu_ns - cpu0, pairs), (double)(done.at_ns - end) / 1e6);
}

/* touch / touch_early (see touch_ring): calls = (n / P) * P. After the
 * phase, waits until every slot whose last call set 10 ms has run for it
 * (up to 10 s after its deadline), then for the worker as the others do.
 * ran counts every task that ran (touch: none should), early those that ran
 * before their slot's bound; the run stops on a 10 ms deadline that did not
 * run, and stops the timer with the list: its size must be the slots still
 * pending + the 1-hour timeout. */
static void touch_common(const struct config *c, int early_mode)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    size_t ring = (size_t)c->ring, slots = ph.threads * ring;
    size_t iters = ph.n / ph.threads, calls = iters * ph.threads;
    memset(&touch, 0, sizeof touch);
    touch.early_mode = early_mode;
    touch.ring = ring;
    touch.lb = xmalloc(slots * sizeof *touch.lb);
    touch.ran_at = xmalloc(slots * sizeof *touch.ran_at);
    touch.runs = xmalloc(slots * sizeof *touch.runs);
    touch.renewals = xmalloc(slots * sizeof *touch.renewals);
    ph.handles = xmalloc(slots * sizeof *ph.handles);
    touch.setup_ns = now_ns();
    for (size_t i = 0; i < slots; i++) {
        atomic_init(&touch.lb[i], touch.setup_ns + 30 * S_NS);
        atomic_init(&touch.ran_at[i], 0);
        atomic_init(&touch.runs[i], 0);
        touch.renewals[i] = 0;
        check(hwt_new_timeout(timer, touch_ran, (void *)(uintptr_t)i, 30, HWT_SECONDS,
                              &ph.handles[i]),
              "hwt_new_timeout (ring)");
    }
    pid_t wtid = worker_tid();
    settle(c, timer, wtid, 0, INT64_MAX); /* the rings are in the wheel */

    int64_t cpu0 = proc_cpu_ns();
    int64_t wall = run_phase(&ph, touch_ring);
    int64_t end = now_ns();

    /* The last call on each slot: the deadline it is left with. */
    size_t due10 = 0;
    int64_t last_due = 0;
    for (size_t i = 0; i < slots; i++) {
        size_t s = i % ring;
        if (iters > s && touch_delay((iters - 1 - s) / ring, s) < 30 * S_NS) {
            due10++;
            int64_t lb = atomic_load(&touch.lb[i]);
            last_due = lb > last_due ? lb : last_due;
        }
    }
    int64_t self0 = self_cpu_ns(); /* this wait is the measurement's: not counted */
    int64_t deadline = last_due + 10 * S_NS;
    for (;;) {
        size_t missing = 0;
        for (size_t i = 0; i < slots; i++) {
            size_t s = i % ring;
            if (iters > s && touch_delay((iters - 1 - s) / ring, s) < 30 * S_NS &&
                atomic_load_explicit(&touch.ran_at[i], memory_order_acquire) <
                    atomic_load(&touch.lb[i]))
                missing++;
        }
        if (missing == 0)
            break;
        if (now_ns() > deadline)
            die("%s: %zu of %zu timeouts left at 10 ms did not run within 10 s of their deadline",
                c->workload, missing, due10);
        sleep_ns(MS_NS);
    }
    cpu0 += self_cpu_ns() - self0;
    struct settled done = settle(c, timer, wtid, 0, INT64_MAX);

    uint64_t ran = 0;
    for (size_t i = 0; i < slots; i++)
        ran += atomic_load(&touch.runs[i]);
    hwt_timeout **list;
    size_t count;
    check(hwt_stop(timer, &list, &count), "hwt_stop");
    hwt_timeouts_release(list, count);
    size_t expected_list = slots - due10 + 1;
    for (size_t i = 0; i < slots; i++)
        hwt_timeout_release(ph.handles[i]);
    hwt_timer_destroy(timer);
    uint64_t early = atomic_load(&touch.early);

    put_params(c);
    put(" ring=%zu ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f calls=%zu ran=%" PRIu64
        " left_at_10ms=%zu ran_in_phase=%" PRIu64 " renewed=%" PRIu64 " early=%" PRIu64 " list=%zu",
        ring, per(wall, calls), per(done.cpu_ns - cpu0, calls), (double)(done.at_ns - end) / 1e6,
        calls, ran, due10, atomic_load(&touch.failed), atomic_load(&touch.renewed), early, count);
    free((void *)touch.lb);
    free((void *)touch.ran_at);
    free((void *)touch.runs);
    free(touch.renewals);
    free(ph.handles);
    if (early > 0 || count != expected_list)
        fprintf(stderr, "%s\n", line);
    if (early > 0)
        die("%s: %" PRIu64 " timeouts ran before their deadline", c->workload, early);
    if (count != expected_list)
        die("%s: stop listed %zu timeouts, expected %zu (pending slots + the 1-hour timeout)",
            c->workload, count, expected_list);
}

static void w_touch(const struct config *c)
{
    touch_common(c, 0);
}

static void w_touch_early(const struct config *c)
{
    touch_common(c, 1);
}

static void write_dump(const char *path, const int64_t *sorted, size_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        die("cannot write %s: %s", path, strerror(errno));
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.3f\n", (double)sorted[i] / 1e3);
    if (fclose(f) != 0)
        die("cannot write %s", path);
}

/* expire and precision: n timeouts uniform in [0, span_ms); lateness =
 * run - (time scheduled + delay). */
static void w_expire(const struct config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = uniform_delays(ph.n, 0, c->span_ms * MS_NS, c->seed);
    ph.delays = delays;
    ph.sched_at = xmalloc(ph.n * sizeof *ph.sched_at);
    ran_at = xmalloc(ph.n * sizeof *ran_at);
    prefault(ph.sched_at, ph.n * sizeof *ph.sched_at);
    prefault(ran_at, ph.n * sizeof *ran_at);
    atomic_store(&ran_count, 0);
    pid_t wtid = worker_tid();
    int64_t cpu0 = thread_cpu_ns(wtid);
    long long vol0, invol0, vol1, invol1;
    thread_ctxsw(wtid, &vol0, &invol0);

    int64_t pcpu0 = proc_cpu_ns();
    int64_t t0 = now_ns();
    int64_t wall = run_phase(&ph, schedule_recorded);
    int64_t deadline = now_ns() + c->span_ms * MS_NS + 60 * S_NS;
    int64_t self0 = self_cpu_ns(); /* this wait is the measurement's: not counted */
    while (atomic_load_explicit(&ran_count, memory_order_acquire) < ph.n) {
        if (now_ns() > deadline)
            die("%s: only %zu of %zu tasks ran", c->workload, atomic_load(&ran_count), ph.n);
        sleep_ns(MS_NS);
    }
    int64_t cpu1 = thread_cpu_ns(wtid);
    thread_ctxsw(wtid, &vol1, &invol1);
    pcpu0 += self_cpu_ns() - self0;
    struct settled done = settle(c, timer, wtid, ph.n, INT64_MAX);
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    hwt_timer_destroy(timer);

    int64_t last = INT64_MIN;
    size_t early = 0;
    int64_t *late = xmalloc(ph.n * sizeof *late);
    double sum = 0;
    size_t worst = 0;
    for (size_t i = 0; i < ph.n; i++) {
        if (ran_at[i] > last)
            last = ran_at[i];
        late[i] = ran_at[i] - (ph.sched_at[i] + delays[i]);
        early += late[i] < 0;
        if (late[i] > late[worst])
            worst = i;
        sum += (double)late[i];
    }
    /* When the worst one was due, from the first schedule: in the burst of
     * scheduling (CPU share) or later (a stall). */
    int64_t worst_due = ph.sched_at[worst] + delays[worst] - t0;
    qsort(late, ph.n, sizeof *late, cmp_i64);
    if (c->dump != NULL)
        write_dump(c->dump, late, ph.n);

    put_params(c);
    put(" span_ms=%ld total_ms=%.1f sched_ns_per_op=%.1f p50_us=%.1f p90_us=%.1f p99_us=%.1f "
        "p999_us=%.1f max_us=%.1f max_due_ms=%.1f mean_us=%.1f early=%zu stats_late_max_us=%.1f "
        "wakeups=%" PRIu64 " worker_cpu_ms=%.1f worker_ivcsw=%lld cpu_ns_per_op=%.1f",
        c->span_ms, (double)(last - t0) / 1e6, (double)wall / (double)ph.n,
        (double)percentile(late, ph.n, 50) / 1e3, (double)percentile(late, ph.n, 90) / 1e3,
        (double)percentile(late, ph.n, 99) / 1e3, (double)percentile(late, ph.n, 99.9) / 1e3,
        (double)late[ph.n - 1] / 1e3, (double)worst_due / 1e6, sum / (double)ph.n / 1e3, early,
        (double)st.late_max_ns / 1e3, st.wakeups,
        cpu0 >= 0 && cpu1 >= 0 ? (double)(cpu1 - cpu0) / 1e6 : -1.0,
        invol0 >= 0 && invol1 >= 0 ? invol1 - invol0 : -1LL, per(done.cpu_ns - pcpu0, ph.n));
    free(late);
    free(ran_at);
    free(ph.sched_at);
    free(delays);
}

struct worker_sample {
    int64_t at, cpu_ns;
    long long vol, invol;
    hwt_stats st;
};

static void sample_worker(hwt_timer *timer, pid_t tid, struct worker_sample *s)
{
    s->at = now_ns();
    s->cpu_ns = thread_cpu_ns(tid);
    thread_ctxsw(tid, &s->vol, &s->invol);
    hwt_timer_stats(timer, &s->st);
}

/* Worker CPU, wake-ups and context switches between two samples. */
static void put_worker_delta(const struct worker_sample *a, const struct worker_sample *b)
{
    put(" window_s=%.2f cpu_ms=%.3f wakeups=%" PRIu64 " vcsw=%lld ivcsw=%lld ticks=%" PRIu64
        " worker_cpu_total_ms=%.3f",
        (double)(b->at - a->at) / 1e9, (double)(b->cpu_ns - a->cpu_ns) / 1e6,
        b->st.wakeups - a->st.wakeups, b->vol - a->vol, b->invol - a->invol,
        b->st.ticks - a->st.ticks, (double)b->cpu_ns / 1e6);
}

static void w_idle(const struct config *c)
{
    hwt_timer *timer = start_timer(c);
    pid_t tid = worker_tid();
    if (tid < 0)
        die("worker thread '%s' not found in /proc/self/task", WORKER_NAME);
    sleep_ns(50 * MS_NS); /* let the start-up settle */
    struct worker_sample a, b;
    sample_worker(timer, tid, &a);
    sleep_ns((int64_t)(c->seconds * 1e9));
    sample_worker(timer, tid, &b);
    hwt_timer_destroy(timer);
    put_params(c);
    put_worker_delta(&a, &b);
}

static void w_hold(const struct config *c)
{
    hwt_timer *timer = start_timer(c);
    pid_t tid = worker_tid();
    if (tid < 0)
        die("worker thread '%s' not found in /proc/self/task", WORKER_NAME);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    int64_t wall = run_phase(&ph, schedule_noop);
    sleep_ns(c->settle_ms * MS_NS);
    struct worker_sample a, b;
    sample_worker(timer, tid, &a);
    sleep_ns((int64_t)(c->seconds * 1e9));
    sample_worker(timer, tid, &b);
    int64_t pending = hwt_pending_timeouts(timer);
    hwt_timer_destroy(timer);
    free(delays);
    put_params(c);
    put(" settle_ms=%ld sched_ns_per_op=%.1f pending=%" PRId64, c->settle_ms,
        (double)wall / (double)ph.n, pending);
    put_worker_delta(&a, &b);
}

static void w_memory(const struct config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    sleep_ns(50 * MS_NS);
    int64_t before = rss_bytes();
    run_phase(&ph, schedule_noop);
    sleep_ns(c->settle_ms * MS_NS); /* the worker moves them into the wheel */
    int64_t after = rss_bytes();
    int64_t pending = hwt_pending_timeouts(timer);
    hwt_timer_destroy(timer);
    free(delays);
    put_params(c);
    put(" settle_ms=%ld bytes_per_timeout=%.1f rss_before_kb=%" PRId64 " rss_after_kb=%" PRId64
        " pending=%" PRId64,
        c->settle_ms, (double)(after - before) / (double)ph.n, before / 1024, after / 1024,
        pending);
}

/* jitter: a hold plus a heartbeat - a task re-arming itself every tick on the
 * same timer - measuring how late the beat runs: what a long-lived server with
 * many idle-connection timeouts sees when the wheel moves far timeouts down
 * (cascades). Use seconds=36 to cross the 32.8 s level-2 boundary. */
static struct {
    int64_t interval, due, t0, worst, worst_at;
    int64_t *late;
    size_t n, cap;
    atomic_int stop;
} beat;

static void beat_task(hwt_timeout *timeout, void *arg)
{
    int64_t now = now_ns(), late = now - beat.due;
    if (beat.n < beat.cap)
        beat.late[beat.n++] = late;
    if (late > beat.worst) {
        beat.worst = late;
        beat.worst_at = now - beat.t0;
    }
    if (atomic_load(&beat.stop))
        return;
    beat.due = now + beat.interval;
    check(hwt_new_timeout(hwt_timeout_timer(timeout), beat_task, arg, beat.interval,
                          HWT_NANOSECONDS, NULL),
          "hwt_new_timeout (beat)");
}

static void w_jitter(const struct config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    run_phase(&ph, schedule_noop);
    sleep_ns(c->settle_ms * MS_NS);

    beat.interval = c->tick_us * 1000;
    beat.cap = (size_t)(c->seconds * 1e9 / (double)beat.interval) + 16;
    beat.late = xmalloc(beat.cap * sizeof *beat.late);
    prefault(beat.late, beat.cap * sizeof *beat.late);
    beat.t0 = now_ns();
    beat.due = beat.t0 + beat.interval;
    check(hwt_new_timeout(timer, beat_task, NULL, beat.interval, HWT_NANOSECONDS, NULL),
          "hwt_new_timeout (beat)");
    sleep_ns((int64_t)(c->seconds * 1e9));
    atomic_store(&beat.stop, 1);
    hwt_timer_destroy(timer); /* joins the worker: beat.* are final */
    free(delays);

    qsort(beat.late, beat.n, sizeof *beat.late, cmp_i64);
    put_params(c);
    put(" settle_ms=%ld beats=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f max_at_s=%.3f", c->settle_ms,
        beat.n, (double)percentile(beat.late, beat.n, 50) / 1e3,
        (double)percentile(beat.late, beat.n, 99) / 1e3, (double)beat.worst / 1e3,
        (double)(beat.worst_at + (int64_t)c->settle_ms * MS_NS) / 1e9);
    free(beat.late);
}

/* ------------------------------------------------------------------ main */

static const struct {
    const char *name;
    void (*fn)(const struct config *);
} workloads[] = {
    {"schedule", w_schedule},
    {"cancel", w_cancel},
    {"churn", w_churn},
    {"expire", w_expire},
    {"precision", w_expire},
    {"idle", w_idle},
    {"hold", w_hold},
    {"memory", w_memory},
    {"jitter", w_jitter},
    {"schedule_warm", w_schedule_warm},
    {"cancel_own", w_cancel_own},
    {"touch", w_touch},
    {"touch_early", w_touch_early},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hwt-bench WORKLOAD [key=value ...]   (or: hwt-bench version)\n"
            "workloads: schedule schedule_warm cancel cancel_own churn expire precision idle\n"
            "           hold memory jitter touch touch_early\n"
            "keys: n threads tick_us wheel seconds span_ms settle_ms wait_ms ring quiet_ms seed\n"
            "      dump\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "version") == 0) {
        printf("hwtimer version=%s\n", hwt_version());
        return 0;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++) {
        if (strcmp(argv[1], workloads[i].name) == 0) {
            struct config c;
            c.workload = workloads[i].name;
            parse_args(&c, argc, argv);
            workloads[i].fn(&c);
            printf("%s\n", line);
            fflush(stdout);
            return 0;
        }
    }
    fprintf(stderr, "hwt-bench: unknown workload '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

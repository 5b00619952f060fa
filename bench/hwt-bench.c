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
 * them, then schedule n again, timed: a second burst) and
 * cancel_own (each thread cancels the timeouts it scheduled itself; in
 * cancel, other threads do). touch and touch_early (issue 17): each thread
 * moves the deadlines of a ring of pending timeouts with
 * hwt_timeout_reschedule (see touch_ring). release_shuffled: threads
 * release a burst's ended handles in random order, then stay idle (what
 * their caches keep mapped; see w_release_shuffled). schedule_two_timers:
 * as schedule, each thread alternating between two timers.
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
 *   settle_ms= wait before measuring, hold, memory and release_shuffled
 *                                              [1000; memory 1500]
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

#include "common.h"

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
#define MS_NS BENCH_MS_NS
#define S_NS BENCH_S_NS

/* --------------------------------------------------------------- helpers */

static void check(int rc, const char *what)
{
    if (rc != 0)
        bench_die("%s: %s (%d)", what, hwt_strerror(rc), rc);
}

/* --------------------------------------------------- timer and worker */

static void noop(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* Creates the timer and starts its worker with one 1-hour timeout. */
static hwt_timer *start_timer(const struct bench_config *c)
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

/* The worker's thread id, found by name; -1 if not found. */
static pid_t worker_tid(void)
{
    return bench_worker_tid(WORKER_NAME);
}

/* CPU time of thread `tid`: its thread CPU clock, else utime + stime from
 * /proc (coarse); -1 if neither works. */
static int64_t thread_cpu_ns(pid_t tid)
{
    int64_t ns = bench_thread_cpu_ns(tid);
    return ns >= 0 ? ns : bench_thread_stat_cpu_ns(tid);
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

/* ------------------------------------------------------ parallel phases */

struct phase;
typedef void (*phase_fn)(struct phase *ph, size_t self);

/* P threads released together by a barrier; thread `self` handles indices
 * self, self + P, ... of n. Wall time = last end - first start. */
struct phase {
    phase_fn fn;
    size_t n, threads;
    hwt_timer *timer;
    const struct bench_config *cfg;
    const int64_t *delays;
    hwt_timeout **handles;
    int64_t *sched_at; /* expire: when each was scheduled */
    pthread_barrier_t barrier;
    struct bench_start_line *line;
    int64_t *start, *end;
    _Atomic uint64_t ok; /* successful operations (cancel: true results) */
};

struct phase_arg {
    struct phase *ph;
    size_t self;
};

static void *phase_thread(void *p)
{
    struct phase_arg *a = p;
    pthread_barrier_wait(&a->ph->barrier);
    bench_start_line_wait(a->ph->line, a->self);
    a->ph->start[a->self] = bench_now_ns();
    a->ph->fn(a->ph, a->self);
    a->ph->end[a->self] = bench_now_ns();
    return NULL;
}

/* Runs fn on ph->threads threads; returns the wall time in ns. */
static int64_t run_phase(struct phase *ph, phase_fn fn)
{
    size_t p = ph->threads;
    ph->fn = fn;
    atomic_store(&ph->ok, 0);
    ph->start = bench_xmalloc(p * sizeof *ph->start);
    ph->end = bench_xmalloc(p * sizeof *ph->end);
    pthread_t *tid = bench_xmalloc(p * sizeof *tid);
    struct phase_arg *args = bench_xmalloc(p * sizeof *args);
    if (pthread_barrier_init(&ph->barrier, NULL, (unsigned)p) != 0)
        bench_die("pthread_barrier_init");
    ph->line = bench_start_line_new(p);
    for (size_t i = 0; i < p; i++) {
        args[i] = (struct phase_arg){ph, i};
        if (pthread_create(&tid[i], NULL, phase_thread, &args[i]) != 0)
            bench_die("pthread_create");
    }
    for (size_t i = 0; i < p; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&ph->barrier);
    bench_start_line_free(ph->line);
    int64_t wall = bench_wall(ph->start, ph->end, p);
    free(ph->start);
    free(ph->end);
    free(tid);
    free(args);
    return wall;
}

static void init_phase(struct phase *ph, const struct bench_config *c, hwt_timer *timer)
{
    memset(ph, 0, sizeof *ph);
    ph->n = (size_t)c->n;
    ph->threads = (size_t)c->threads;
    ph->timer = timer;
    ph->cfg = c;
}

/* P threads that run several phases (schedule_warm, cancel_own), so that
 * a thread's later phases work on what it scheduled itself (common.h's
 * team; ph->fn is the phase its step runs). */
static void team_call(void *p, size_t self)
{
    struct phase *ph = p;
    ph->fn(ph, self);
}

static void team_start(struct bench_team *tm, struct phase *ph)
{
    bench_team_start(tm, ph->threads, team_call, ph);
}

/* Runs fn on every thread of the team; returns the wall time in ns. */
static int64_t team_phase(struct bench_team *tm, phase_fn fn)
{
    struct phase *ph = tm->ctx;
    ph->fn = fn;
    return bench_team_step(tm);
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
    return bench_touch_delay(touch.early_mode, pass, s);
}

static void touch_ran(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    size_t slot = (uintptr_t)arg;
    int64_t now = bench_now_ns();
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
            t = bench_now_ns();
        int64_t d = touch_delay(pass, s);
        int earlier = d < 30 * S_NS;
        if (earlier)
            atomic_store_explicit(&touch.lb[base + s], t + d, memory_order_release);
        if (!hwt_timeout_reschedule(slots[s], d, HWT_NANOSECONDS)) {
            /* Expired during the phase (see above): wait until its task
             * has been counted, so that it is checked against the bound of
             * the deadline it ran for, then schedule the slot anew. */
            failed++;
            int64_t until = bench_now_ns() + 10 * S_NS;
            while (atomic_load_explicit(&touch.runs[base + s], memory_order_acquire) <=
                   touch.renewals[base + s]) {
                if (bench_now_ns() > until)
                    bench_die("touch: reschedule returned false but the task did not run");
                sched_yield();
            }
            hwt_timeout_release(slots[s]);
            t = bench_now_ns();
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
    ran_at[(uintptr_t)arg] = bench_now_ns();
    atomic_fetch_add_explicit(&ran_count, 1, memory_order_release);
}

static void schedule_recorded(struct phase *ph, size_t self)
{
    for (size_t i = self; i < ph->n; i += ph->threads) {
        ph->sched_at[i] = bench_now_ns();
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
 * worker's CPU clock has stood still for quiet_ms; gives the process's CPU
 * time at the first sample that saw the worker's final CPU time. The
 * worker's clock is read before the process's, so the latter covers all the
 * worker did up to the former. The CPU time this thread spends polling is
 * taken off: it is the measurement's, not the timer's.
 *
 * First it schedules one timeout due now, which wakes the worker: it then
 * takes every queue whole and moves what they hold. Otherwise timeouts
 * queued after its last look, due after its planned wake-up, could wait
 * for it (seconds, for deadlines 10 s away) and their moving would fall
 * outside the CPU figure. Cancels are processed within max(tick, 100 ms). */
static struct settled settle(const struct bench_config *c, hwt_timer *timer, pid_t wtid,
                             size_t ran_target, int64_t pending_max)
{
    if (wtid < 0)
        bench_die("worker thread '%s' not found in /proc/self/task", WORKER_NAME);
    check(hwt_new_timeout(timer, noop, NULL, 0, HWT_MILLISECONDS, NULL), "hwt_new_timeout (wake)");
    int64_t quiet = c->quiet_ms * MS_NS, deadline = bench_now_ns() + 120 * S_NS;
    int64_t last_worker = -2, quiet_since = 0, self0 = bench_self_cpu_ns();
    struct settled s = {0, 0};
    for (;;) {
        int64_t wc = thread_cpu_ns(wtid);
        int64_t pc = bench_proc_cpu_ns() - (bench_self_cpu_ns() - self0);
        int64_t now = bench_now_ns();
        int done = atomic_load_explicit(&ran_count, memory_order_acquire) >= ran_target &&
                   hwt_pending_timeouts(timer) <= pending_max;
        if (!done || wc != last_worker) {
            last_worker = wc;
            quiet_since = now;
            s = (struct settled){pc, now};
        } else if (now - quiet_since >= quiet) {
            bench_timed_extend(s.at_ns); /* the CPU figures run to here */
            return s;
        }
        if (now > deadline)
            bench_die("%s: the worker did not settle within 120 s", c->workload);
        bench_sleep_ns(MS_NS);
    }
}

static double per(int64_t ns, size_t n)
{
    return (double)ns / (double)(n ? n : 1);
}

/* The worker's CPU per operation between two readings of its clock
 * (thread_cpu_ns: -1 when it could not be read, then -1). */
static double worker_per(int64_t wcpu0, int64_t wcpu1, size_t n)
{
    return wcpu0 >= 0 && wcpu1 >= 0 ? per(wcpu1 - wcpu0, n) : -1.0;
}

/* ------------------------------------------------------------ workloads */

static void w_schedule(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    pid_t wtid = worker_tid();
    int64_t cpu0 = bench_proc_cpu_ns(), wcpu0 = thread_cpu_ns(wtid);
    int64_t wall = run_phase(&ph, schedule_noop);
    int64_t end = bench_now_ns();
    struct settled done = settle(c, timer, wtid, 0, INT64_MAX);
    int64_t wcpu1 = thread_cpu_ns(wtid);

    hwt_timeout **list;
    size_t count;
    int64_t t0 = bench_now_ns();
    check(hwt_stop(timer, &list, &count), "hwt_stop");
    int64_t stop = bench_now_ns() - t0;
    t0 = bench_now_ns();
    hwt_timeouts_release(list, count);
    int64_t release = bench_now_ns() - t0;
    hwt_timer_destroy(timer);
    free(delays);

    bench_put_params("hwtimer", c);
    bench_put(
        " ns_per_op=%.1f stop_ms=%.1f list=%zu release_ms=%.1f cpu_ns_per_op=%.1f"
        " worker_cpu_ns_per_op=%.1f drain_ms=%.2f",
        (double)wall / (double)ph.n, (double)stop / 1e6, count, (double)release / 1e6,
        per(done.cpu_ns - cpu0, ph.n), worker_per(wcpu0, wcpu1, ph.n),
        (double)(done.at_ns - end) / 1e6);
}

/* schedule_warm: the same threads schedule n (handles kept), cancel and
 * release them, and the worker reclaims them (untimed); then the threads
 * schedule n again, without handles (timed). By then the pool has given
 * back all but its reserve (it trims once threads have not taken from it
 * for 50 ms), so the second round maps most of its memory again, as a
 * server's next burst would. */
static void w_schedule_warm(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    ph.handles = bench_xmalloc(ph.n * sizeof *ph.handles);
    bench_prefault(ph.handles, ph.n * sizeof *ph.handles);
    pid_t wtid = worker_tid();
    struct bench_team tm;
    team_start(&tm, &ph);
    team_phase(&tm, schedule_handles);
    team_phase(&tm, cancel_handles);
    team_phase(&tm, release_handles);
    settle(c, timer, wtid, 0, 1);

    int64_t cpu0 = bench_proc_cpu_ns(), wcpu0 = thread_cpu_ns(wtid);
    int64_t wall = team_phase(&tm, schedule_noop);
    int64_t end = bench_now_ns();
    struct settled done = settle(c, timer, wtid, 0, INT64_MAX);
    int64_t wcpu1 = thread_cpu_ns(wtid);
    bench_team_stop(&tm);
    int64_t pending = hwt_pending_timeouts(timer);
    hwt_timer_destroy(timer);
    free(ph.handles);
    free(delays);

    bench_put_params("hwtimer", c);
    bench_put(" ns_per_op=%.1f cpu_ns_per_op=%.1f worker_cpu_ns_per_op=%.1f drain_ms=%.2f"
              " pending=%" PRId64,
              per(wall, ph.n), per(done.cpu_ns - cpu0, ph.n),
              worker_per(wcpu0, wcpu1, ph.n),
              (double)(done.at_ns - end) / 1e6, pending);
}

/* schedule_two_timers: as schedule, but each thread alternates between two
 * timers (a server with one timer for request timeouts and another for
 * idle connections, say): what a thread pays for using more than one.
 * Wall time, and the process's CPU time during the phase only (the
 * workers' moving is not waited for: phase_cpu_ns_per_op). */
static hwt_timer *second_timer;

static void schedule_noop_two_timers(struct phase *ph, size_t self)
{
    size_t k = 0;
    for (size_t i = self; i < ph->n; i += ph->threads, k++)
        check(hwt_new_timeout(k & 1 ? second_timer : ph->timer, noop, NULL, ph->delays[i],
                              HWT_NANOSECONDS, NULL),
              "hwt_new_timeout");
}

static void w_schedule_two_timers(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    second_timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t wall = run_phase(&ph, schedule_noop_two_timers);
    int64_t cpu1 = bench_proc_cpu_ns();
    hwt_timer_destroy(timer);
    hwt_timer_destroy(second_timer);
    free(delays);

    bench_put_params("hwtimer", c);
    bench_put(" ns_per_op=%.1f phase_cpu_ns_per_op=%.1f", per(wall, ph.n), per(cpu1 - cpu0, ph.n));
}

/* release_shuffled: the same threads schedule n (handles kept) and cancel
 * them; once the worker has let go of them (the handles then hold the
 * last references, so the releases free on the releasing threads), each
 * thread releases its handles in random order, timed (connections that
 * close in any order). Then the threads stay alive and idle while the
 * resident memory is read, settle_ms later: what their caches keep. */
static void w_release_shuffled(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_xmalloc(ph.n * sizeof *delays);
    for (size_t i = 0; i < ph.n; i++)
        delays[i] = 3600 * S_NS;
    ph.delays = delays;
    ph.handles = bench_xmalloc(ph.n * sizeof *ph.handles);
    bench_prefault(ph.handles, ph.n * sizeof *ph.handles);
    pid_t wtid = worker_tid();
    struct bench_team tm;
    team_start(&tm, &ph);
    int64_t rss0 = bench_rss_bytes();
    team_phase(&tm, schedule_handles);
    team_phase(&tm, cancel_handles);
    settle(c, timer, wtid, 0, 1);
    /* Each thread's handles (i = self mod threads) shuffled among themselves. */
    uint64_t x = (uint64_t)c->seed * 0x9e3779b97f4a7c15u + 1;
    for (size_t self = 0; self < ph.threads; self++) {
        size_t k = (ph.n - self + ph.threads - 1) / ph.threads;
        for (size_t i = k - 1; i > 0; i--) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t j = x % (i + 1);
            hwt_timeout **a = &ph.handles[self + i * ph.threads];
            hwt_timeout **b = &ph.handles[self + j * ph.threads];
            hwt_timeout *t = *a;
            *a = *b;
            *b = t;
        }
    }

    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t wall = team_phase(&tm, release_handles);
    int64_t cpu1 = bench_proc_cpu_ns();
    bench_sleep_ns(c->settle_ms * MS_NS);
    int64_t rss1 = bench_rss_bytes();
    bench_team_stop(&tm);
    hwt_timer_destroy(timer);
    free(ph.handles);
    free(delays);

    bench_put_params("hwtimer", c);
    bench_put(" ns_per_op=%.1f cpu_ns_per_op=%.1f rss_kept_kb=%" PRId64, per(wall, ph.n),
              per(cpu1 - cpu0, ph.n), (rss1 - rss0) / 1024);
}

/* cancel: P threads schedule, P other threads cancel (thread i the
 * timeouts i, i + P, ...); cancel_own (own = 1): each of P threads cancels
 * the timeouts it scheduled itself. */
static void cancel_common(const struct bench_config *c, int own)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_xmalloc(ph.n * sizeof *delays);
    for (size_t i = 0; i < ph.n; i++)
        delays[i] = 10 * S_NS + (int64_t)(i % 60000) * MS_NS;
    ph.delays = delays;
    ph.handles = bench_xmalloc(ph.n * sizeof *ph.handles);
    bench_prefault(ph.handles, ph.n * sizeof *ph.handles);
    pid_t wtid = worker_tid();
    struct bench_team tm;
    if (own) {
        team_start(&tm, &ph);
        team_phase(&tm, schedule_handles);
    } else {
        run_phase(&ph, schedule_handles);
    }
    bench_sleep_ns(c->wait_ms * MS_NS);

    int64_t cpu0 = bench_proc_cpu_ns(), wcpu0 = thread_cpu_ns(wtid);
    int64_t wall = own ? team_phase(&tm, cancel_handles) : run_phase(&ph, cancel_handles);
    int64_t done = bench_now_ns();
    uint64_t cancelled = atomic_load(&ph.ok);
    int64_t deadline = done + 60 * S_NS;
    int64_t self0 = bench_self_cpu_ns(); /* this wait is the measurement's: not counted */
    while (hwt_pending_timeouts(timer) > 1 && bench_now_ns() < deadline)
        bench_sleep_ns(50 * 1000);
    int64_t pending_ns = bench_now_ns() - done;
    int64_t pending = hwt_pending_timeouts(timer);
    cpu0 += bench_self_cpu_ns() - self0;
    struct settled drained = settle(c, timer, wtid, 0, 1);
    int64_t wcpu1 = thread_cpu_ns(wtid);
    if (own)
        bench_team_stop(&tm);

    int64_t t0 = bench_now_ns();
    for (size_t i = 0; i < ph.n; i++)
        hwt_timeout_release(ph.handles[i]);
    int64_t release = bench_now_ns() - t0;
    hwt_timer_destroy(timer);
    free(ph.handles);
    free(delays);

    bench_put_params("hwtimer", c);
    bench_put(" ns_per_op=%.1f pending_ms=%.2f cancelled=%" PRIu64 " pending=%" PRId64
              " release_ns_per_op=%.1f cpu_ns_per_op=%.1f worker_cpu_ns_per_op=%.1f drain_ms=%.2f",
              (double)wall / (double)ph.n, (double)pending_ns / 1e6, cancelled, pending,
              (double)release / (double)ph.n, per(drained.cpu_ns - cpu0, ph.n),
              worker_per(wcpu0, wcpu1, ph.n),
              (double)(drained.at_ns - done) / 1e6);
}

static void w_cancel(const struct bench_config *c)
{
    cancel_common(c, 0);
}

static void w_cancel_own(const struct bench_config *c)
{
    cancel_common(c, 1);
}

static void w_churn(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    size_t slots = ph.threads * (size_t)c->ring;
    ph.handles = bench_xmalloc(slots * sizeof *ph.handles);
    memset(ph.handles, 0, slots * sizeof *ph.handles);
    pid_t wtid = worker_tid();
    int64_t cpu0 = bench_proc_cpu_ns(), wcpu0 = thread_cpu_ns(wtid);
    int64_t wall = run_phase(&ph, churn_ring);
    int64_t end = bench_now_ns();
    struct settled done = settle(c, timer, wtid, 0, INT64_MAX);
    int64_t wcpu1 = thread_cpu_ns(wtid);
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

    bench_put_params("hwtimer", c);
    bench_put(" ring=%ld ns_per_op=%.1f pairs=%zu cancelled=%" PRIu64 " wakeups=%" PRIu64
              " cpu_ns_per_op=%.1f worker_cpu_ns_per_op=%.1f drain_ms=%.2f",
              c->ring, (double)wall / (double)(pairs ? pairs : 1), pairs, cancelled, st.wakeups,
              per(done.cpu_ns - cpu0, pairs),
              worker_per(wcpu0, wcpu1, pairs),
              (double)(done.at_ns - end) / 1e6);
}

/* touch / touch_early (see touch_ring): calls = (n / P) * P. After the
 * phase, waits until every slot whose last call set 10 ms has run for it
 * (up to 10 s after its deadline), then for the worker as the others do.
 * ran counts every task that ran (touch: none should), early those that ran
 * before their slot's bound; the run stops on a 10 ms deadline that did not
 * run, and stops the timer with the list: its size must be the slots still
 * pending + the 1-hour timeout. */
static void touch_common(const struct bench_config *c, int early_mode)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    size_t ring = (size_t)c->ring, slots = ph.threads * ring;
    size_t iters = ph.n / ph.threads, calls = iters * ph.threads;
    memset(&touch, 0, sizeof touch);
    touch.early_mode = early_mode;
    touch.ring = ring;
    touch.lb = bench_xmalloc(slots * sizeof *touch.lb);
    touch.ran_at = bench_xmalloc(slots * sizeof *touch.ran_at);
    touch.runs = bench_xmalloc(slots * sizeof *touch.runs);
    touch.renewals = bench_xmalloc(slots * sizeof *touch.renewals);
    ph.handles = bench_xmalloc(slots * sizeof *ph.handles);
    touch.setup_ns = bench_now_ns();
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

    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t wall = run_phase(&ph, touch_ring);
    int64_t end = bench_now_ns();

    /* Slack 0: libhwtimer promises never early, so each must run at or
     * after its last bound. */
    size_t due10 = bench_touch_wait_10ms(c->workload, early_mode, iters, ring, slots, touch.lb,
                                         touch.ran_at, 0, &cpu0);
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

    bench_put_params("hwtimer", c);
    bench_put(
        " ring=%zu ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f calls=%zu ran=%" PRIu64
        " left_at_10ms=%zu ran_in_phase=%" PRIu64 " renewed=%" PRIu64 " early=%" PRIu64 " list=%zu",
        ring, per(wall, calls), per(done.cpu_ns - cpu0, calls), (double)(done.at_ns - end) / 1e6,
        calls, ran, due10, atomic_load(&touch.failed), atomic_load(&touch.renewed), early, count);
    free((void *)touch.lb);
    free((void *)touch.ran_at);
    free((void *)touch.runs);
    free(touch.renewals);
    free(ph.handles);
    if (early > 0 || count != expected_list)
        fprintf(stderr, "%s\n", bench_line.text);
    if (early > 0)
        bench_die("%s: %" PRIu64 " timeouts ran before their deadline", c->workload, early);
    if (count != expected_list)
        bench_die("%s: stop listed %zu timeouts, expected %zu (pending slots + the 1-hour timeout)",
                  c->workload, count, expected_list);
}

static void w_touch(const struct bench_config *c)
{
    touch_common(c, 0);
}

static void w_touch_early(const struct bench_config *c)
{
    touch_common(c, 1);
}

/* expire and precision: n timeouts uniform in [0, span_ms); lateness =
 * run - (time scheduled + delay). */
static void w_expire(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_uniform_delays(ph.n, 0, c->span_ms * MS_NS, c->seed);
    ph.delays = delays;
    ph.sched_at = bench_xmalloc(ph.n * sizeof *ph.sched_at);
    ran_at = bench_xmalloc(ph.n * sizeof *ran_at);
    bench_prefault(ph.sched_at, ph.n * sizeof *ph.sched_at);
    bench_prefault(ran_at, ph.n * sizeof *ran_at);
    atomic_store(&ran_count, 0);
    pid_t wtid = worker_tid();
    int64_t cpu0 = thread_cpu_ns(wtid);
    long long vol0, invol0, vol1, invol1;
    thread_ctxsw(wtid, &vol0, &invol0);

    int64_t pcpu0 = bench_proc_cpu_ns();
    int64_t t0 = bench_now_ns();
    int64_t wall = run_phase(&ph, schedule_recorded);
    int64_t deadline = bench_now_ns() + c->span_ms * MS_NS + 60 * S_NS;
    int64_t self0 = bench_self_cpu_ns(); /* this wait is the measurement's: not counted */
    while (atomic_load_explicit(&ran_count, memory_order_acquire) < ph.n) {
        if (bench_now_ns() > deadline)
            bench_die("%s: only %zu of %zu tasks ran", c->workload, atomic_load(&ran_count), ph.n);
        bench_sleep_ns(MS_NS);
    }
    int64_t cpu1 = thread_cpu_ns(wtid);
    thread_ctxsw(wtid, &vol1, &invol1);
    pcpu0 += bench_self_cpu_ns() - self0;
    struct settled done = settle(c, timer, wtid, ph.n, INT64_MAX);
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    hwt_timer_destroy(timer);

    struct bench_lateness l;
    bench_lateness(&l, ph.n, ran_at, ph.sched_at, delays, t0, c->dump);

    bench_put_params("hwtimer", c);
    bench_put(" span_ms=%ld total_ms=%.1f sched_ns_per_op=%.1f", c->span_ms,
              (double)(l.last_run - t0) / 1e6, (double)wall / (double)ph.n);
    bench_put_lateness(&l);
    bench_put(" stats_late_max_us=%.1f wakeups=%" PRIu64
              " worker_cpu_ms=%.1f worker_ivcsw=%lld cpu_ns_per_op=%.1f",
              (double)st.late_max_ns / 1e3, st.wakeups,
              cpu0 >= 0 && cpu1 >= 0 ? (double)(cpu1 - cpu0) / 1e6 : -1.0,
              invol0 >= 0 && invol1 >= 0 ? invol1 - invol0 : -1LL, per(done.cpu_ns - pcpu0, ph.n));
    free(l.sorted);
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
    s->at = bench_now_ns();
    s->cpu_ns = thread_cpu_ns(tid);
    thread_ctxsw(tid, &s->vol, &s->invol);
    hwt_timer_stats(timer, &s->st);
}

/* Worker CPU, wake-ups and context switches between two samples. */
static void put_worker_delta(const struct worker_sample *a, const struct worker_sample *b)
{
    bench_put(" window_s=%.2f cpu_ms=%.3f wakeups=%" PRIu64 " vcsw=%lld ivcsw=%lld ticks=%" PRIu64
              " worker_cpu_total_ms=%.3f",
              (double)(b->at - a->at) / 1e9, (double)(b->cpu_ns - a->cpu_ns) / 1e6,
              b->st.wakeups - a->st.wakeups, b->vol - a->vol, b->invol - a->invol,
              b->st.ticks - a->st.ticks, (double)b->cpu_ns / 1e6);
}

static void w_idle(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    pid_t tid = worker_tid();
    if (tid < 0)
        bench_die("worker thread '%s' not found in /proc/self/task", WORKER_NAME);
    bench_sleep_ns(50 * MS_NS); /* let the start-up settle */
    struct worker_sample a, b;
    sample_worker(timer, tid, &a);
    bench_sleep_ns((int64_t)(c->seconds * 1e9));
    sample_worker(timer, tid, &b);
    hwt_timer_destroy(timer);
    bench_put_params("hwtimer", c);
    put_worker_delta(&a, &b);
}

static void w_hold(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    pid_t tid = worker_tid();
    if (tid < 0)
        bench_die("worker thread '%s' not found in /proc/self/task", WORKER_NAME);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    int64_t wall = run_phase(&ph, schedule_noop);
    bench_sleep_ns(c->settle_ms * MS_NS);
    struct worker_sample a, b;
    sample_worker(timer, tid, &a);
    bench_sleep_ns((int64_t)(c->seconds * 1e9));
    sample_worker(timer, tid, &b);
    int64_t pending = hwt_pending_timeouts(timer);
    hwt_timer_destroy(timer);
    free(delays);
    bench_put_params("hwtimer", c);
    bench_put(" settle_ms=%ld sched_ns_per_op=%.1f pending=%" PRId64, c->settle_ms,
              (double)wall / (double)ph.n, pending);
    put_worker_delta(&a, &b);
}

static void w_memory(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    bench_sleep_ns(50 * MS_NS);
    int64_t before = bench_rss_bytes();
    run_phase(&ph, schedule_noop);
    bench_sleep_ns(c->settle_ms * MS_NS); /* the worker moves them into the wheel */
    int64_t after = bench_rss_bytes();
    int64_t pending = hwt_pending_timeouts(timer);
    hwt_timer_destroy(timer);
    free(delays);
    bench_put_params("hwtimer", c);
    bench_put(" settle_ms=%ld bytes_per_timeout=%.1f rss_before_kb=%" PRId64
              " rss_after_kb=%" PRId64 " pending=%" PRId64,
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
    int64_t now = bench_now_ns(), late = now - beat.due;
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

static void w_jitter(const struct bench_config *c)
{
    hwt_timer *timer = start_timer(c);
    struct phase ph;
    init_phase(&ph, c, timer);
    int64_t *delays = bench_uniform_delays(ph.n, 10 * S_NS, 70 * S_NS, c->seed);
    ph.delays = delays;
    run_phase(&ph, schedule_noop);
    bench_sleep_ns(c->settle_ms * MS_NS);

    beat.interval = c->tick_us * 1000;
    beat.cap = (size_t)(c->seconds * 1e9 / (double)beat.interval) + 16;
    beat.late = bench_xmalloc(beat.cap * sizeof *beat.late);
    bench_prefault(beat.late, beat.cap * sizeof *beat.late);
    beat.t0 = bench_now_ns();
    beat.due = beat.t0 + beat.interval;
    check(hwt_new_timeout(timer, beat_task, NULL, beat.interval, HWT_NANOSECONDS, NULL),
          "hwt_new_timeout (beat)");
    bench_sleep_ns((int64_t)(c->seconds * 1e9));
    atomic_store(&beat.stop, 1);
    hwt_timer_destroy(timer); /* joins the worker: beat.* are final */
    free(delays);

    qsort(beat.late, beat.n, sizeof *beat.late, bench_cmp_i64);
    bench_put_params("hwtimer", c);
    bench_put(" settle_ms=%ld beats=%zu p50_us=%.1f p99_us=%.1f max_us=%.1f max_at_s=%.3f",
              c->settle_ms, beat.n, (double)bench_percentile(beat.late, beat.n, 50) / 1e3,
              (double)bench_percentile(beat.late, beat.n, 99) / 1e3, (double)beat.worst / 1e3,
              (double)(beat.worst_at + (int64_t)c->settle_ms * MS_NS) / 1e9);
    free(beat.late);
}

/* ------------------------------------------------------------------ main */

static const struct {
    const char *name;
    void (*fn)(const struct bench_config *);
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
    {"release_shuffled", w_release_shuffled},
    {"schedule_two_timers", w_schedule_two_timers},
    {"cancel_own", w_cancel_own},
    {"touch", w_touch},
    {"touch_early", w_touch_early},
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hwt-bench WORKLOAD [key=value ...]   (or: hwt-bench version)\n"
            "workloads: schedule schedule_warm cancel cancel_own churn expire precision idle\n"
            "           hold memory jitter touch touch_early release_shuffled\n"
            "           schedule_two_timers\n"
            "keys: n threads tick_us wheel seconds span_ms settle_ms wait_ms ring quiet_ms seed\n"
            "      dump\n");
}

int main(int argc, char **argv)
{
    static const char *const name = "hwt-bench";
    bench_set_name(&name);
    /* The line is cut at 2047 characters here (its lines are far shorter);
     * the peers' lines end with their notes, hence common.h's 4095. */
    bench_line.size = 2048;
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
            struct bench_config c;
            c.workload = workloads[i].name;
            bench_parse_args(&c, argc, argv, NULL);
            if (c.wheel > (1L << 30))
                bench_die("wheel must be <= 2^30");
            workloads[i].fn(&c);
            bench_put_timed();
            printf("%s\n", bench_line.text);
            fflush(stdout);
            return 0;
        }
    }
    fprintf(stderr, "hwt-bench: unknown workload '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}

/*
 * harness.c - hwt-bench's workloads for a peer (harness.h): the same
 * parameters, the same delays (splitmix64), the same phases and the same
 * output keys as bench/hwt-bench.c, so that a line of either can be read the
 * same way.
 *
 * Workloads: schedule, schedule_warm, cancel, cancel_own, churn, expire,
 * precision, memory, touch, touch_early (hwt-bench's idle, hold and jitter measure libhwtimer's
 * worker alone and have no twin here). Every workload except memory reports,
 * beside wall time per operation, cpu_ns_per_op: the CPU time of the whole
 * process (every thread, the worker included, CLOCK_PROCESS_CPUTIME_ID) from
 * the start of the timed phase until the work it left to the worker is done,
 * per operation. "Done" is what settle() waits for: the peer says so
 * (settled()), and the worker's CPU clock has stood still for quiet_ms; the
 * CPU time is taken at the first sample that saw the worker's final CPU time,
 * so the quiet window itself is not counted.
 *
 * Threads: the timed phases run on P threads released together; thread
 * `self` handles slots self, self + P, ... (wall = last end - first start).
 * cancel uses other threads than the ones that scheduled (as hwt-bench's
 * cancel); cancel_own and schedule_warm keep the same threads for every
 * phase (a thread cancels, or schedules again, only what it scheduled).
 */
#define _GNU_SOURCE
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MS_NS BENCH_MS_NS
#define S_NS BENCH_S_NS

static struct bench_peer *peer;

/* touch and touch_early (see step_touch): per slot, the lower bounds of its
 * last two deadlines, when its task last ran and how many times, and a
 * sequence number its thread makes odd while it writes the bounds and even
 * again after (bench_task_seq). */
static struct {
    int early_mode;
    size_t ring;
    _Atomic int64_t *lb, *lb_prev, *ran_at;
    _Atomic uint32_t *runs, *seq;
    _Atomic uint64_t early;
} touch;

/* --------------------------------------------------------------- helpers */

void bench_worker_named(void)
{
    prctl(PR_SET_NAME, BENCH_WORKER_NAME, 0, 0, 0);
}

/* ------------------------------------------------- CPU, memory, threads */

/* The worker's thread id, found by name (it names itself when it starts). */
static pid_t worker_tid(void)
{
    pid_t tid = bench_worker_tid(BENCH_WORKER_NAME);
    if (tid < 0)
        bench_die("worker thread '%s' not found in /proc/self/task", BENCH_WORKER_NAME);
    return tid;
}

/* Kernel memory, machine-wide, from /proc/meminfo (kB). */
struct kmem {
    int64_t slab_kb, sunreclaim_kb, vmalloc_kb;
};

static void kernel_memory(struct kmem *k)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        bench_die("cannot open /proc/meminfo");
    char buf[256];
    k->slab_kb = k->sunreclaim_kb = k->vmalloc_kb = 0;
    while (fgets(buf, sizeof buf, f) != NULL) {
        long long v;
        if (sscanf(buf, "Slab: %lld", &v) == 1)
            k->slab_kb = v;
        else if (sscanf(buf, "SUnreclaim: %lld", &v) == 1)
            k->sunreclaim_kb = v;
        else if (sscanf(buf, "VmallocUsed: %lld", &v) == 1)
            k->vmalloc_kb = v;
    }
    fclose(f);
}

/* ------------------------------------------------------ the output line */

static char notes_text[512];
static struct bench_buf notes = {notes_text, sizeof notes_text, 0};

void bench_note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bench_vappend(&notes, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------ the phases */

struct work;
typedef void (*step_fn)(struct work *w, size_t self);

struct work {
    const struct bench_config *c;
    void *t;
    size_t n, threads;
    const int64_t *delays;
    int64_t *sched_at;
    _Atomic uint64_t ok; /* cancels and re-arms that returned 1, all phases */
    step_fn fn;          /* the step the team runs */
};

/* P threads that run steps together (common.h's team); w->fn is the step
 * they run. */
static void team_call(void *p, size_t self)
{
    struct work *w = p;
    w->fn(w, self);
}

static void team_start(struct bench_team *tm, struct work *w)
{
    bench_team_start(tm, w->threads, team_call, w);
}

/* Runs fn on every thread of the team; returns the wall time in ns. */
static int64_t team_step(struct bench_team *tm, step_fn fn)
{
    struct work *w = tm->ctx;
    w->fn = fn;
    return bench_team_step(tm);
}

/* One step on fresh threads. */
static int64_t run_phase(struct work *w, step_fn fn)
{
    struct bench_team tm;
    team_start(&tm, w);
    int64_t wall = team_step(&tm, fn);
    bench_team_stop(&tm);
    return wall;
}

static void step_arm(struct work *w, size_t self)
{
    for (size_t i = self; i < w->n; i += w->threads)
        peer->arm(w->t, i, w->delays[i]);
}

static void step_arm_recorded(struct work *w, size_t self)
{
    for (size_t i = self; i < w->n; i += w->threads) {
        w->sched_at[i] = bench_now_ns();
        peer->arm(w->t, i, w->delays[i]);
    }
}

static void step_cancel(struct work *w, size_t self)
{
    uint64_t ok = 0;
    for (size_t i = self; i < w->n; i += w->threads)
        ok += (uint64_t)peer->cancel(w->t, i);
    atomic_fetch_add(&w->ok, ok);
}

/* churn: thread self owns slots [self * ring, (self + 1) * ring); n / P
 * times it re-arms the next one for 30 s. */
static void step_churn(struct work *w, size_t self)
{
    size_t ring = (size_t)w->c->ring, iters = w->n / w->threads;
    size_t base = self * ring;
    uint64_t ok = 0;
    for (size_t k = 0, s = 0; k < iters; k++) {
        ok += (uint64_t)peer->rearm(w->t, base + s, 30 * S_NS);
        if (++s == ring)
            s = 0;
    }
    atomic_fetch_add(&w->ok, ok);
}

/* touch / touch_early: thread self owns slots [self * ring, (self + 1) *
 * ring), armed 30 s ahead before the phase; n / P times it re-arms the next
 * one with the peer's rearm() - to 30 s (touch), or alternately to 10 ms
 * and to 30 s (touch_early: every other call moves a deadline earlier).
 * Never early: the thread reads the clock once per pass over its ring (not
 * per call, which would double what is measured); a call's deadline is at
 * least that reading + its delay, stored per slot before the call when it
 * moves the deadline earlier, after it when later. A peer re-arms a timer
 * whose 10 ms deadline came due during the phase (its producer descheduled
 * for 10 ms), and the task may run while the next call re-arms it: a task
 * is early if it runs before the lower of its slot's last two bounds. */
static int64_t touch_delay(size_t pass, size_t s)
{
    return bench_touch_delay(touch.early_mode, pass, s);
}

static void touch_bound(size_t i, int64_t lb)
{
    uint32_t seq = atomic_load_explicit(&touch.seq[i], memory_order_relaxed);
    atomic_store_explicit(&touch.seq[i], seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&touch.lb_prev[i],
                          atomic_load_explicit(&touch.lb[i], memory_order_relaxed),
                          memory_order_release);
    atomic_store_explicit(&touch.lb[i], lb, memory_order_release);
    atomic_store_explicit(&touch.seq[i], seq + 2, memory_order_release);
}

static void step_touch(struct work *w, size_t self)
{
    size_t ring = touch.ring, iters = w->n / w->threads, base = self * ring;
    uint64_t ok = 0;
    int64_t t = 0;
    for (size_t k = 0, s = 0, pass = 0; k < iters; k++) {
        if (s == 0)
            t = bench_now_ns();
        int64_t d = touch_delay(pass, s);
        if (d < 30 * S_NS) {
            touch_bound(base + s, t + d);
            ok += (uint64_t)peer->rearm(w->t, base + s, d);
        } else {
            ok += (uint64_t)peer->rearm(w->t, base + s, d);
            touch_bound(base + s, t + d);
        }
        if (++s == ring) {
            s = 0;
            pass++;
        }
    }
    atomic_fetch_add(&w->ok, ok);
}

/* ---------------------------------------------------------- settle */

static int64_t *ran_at;
static _Atomic size_t ran_count;

/* `seq`: the slot's sequence number before the peer learnt the task was
 * due (UINT32_MAX: judge it anyway). */
static void task_ran(size_t i, uint32_t seq)
{
    int64_t now = bench_now_ns();
    if (touch.lb != NULL) {
        int64_t lb = atomic_load_explicit(&touch.lb[i], memory_order_acquire);
        int64_t prev = atomic_load_explicit(&touch.lb_prev[i], memory_order_acquire);
        atomic_thread_fence(memory_order_acquire);
        bool settled = seq == UINT32_MAX ||
                       (seq % 2 == 0 && atomic_load_explicit(&touch.seq[i], memory_order_relaxed) == seq);
        if (settled && now < (prev < lb ? prev : lb))
            atomic_fetch_add(&touch.early, 1);
        atomic_store_explicit(&touch.ran_at[i], now, memory_order_relaxed);
        atomic_fetch_add_explicit(&touch.runs[i], 1, memory_order_release);
    } else {
        ran_at[i] = now;
    }
    atomic_fetch_add_explicit(&ran_count, 1, memory_order_release);
}

void bench_task_ran(size_t i)
{
    task_ran(i, UINT32_MAX);
}

uint32_t bench_task_seq(size_t i)
{
    return touch.seq != NULL ? atomic_load_explicit(&touch.seq[i], memory_order_acquire) : 0;
}

void bench_task_ran_since(size_t i, uint32_t seq)
{
    task_ran(i, seq);
}

struct settled {
    int64_t cpu_ns;    /* process CPU time when the worker was done */
    int64_t at_ns;     /* and when */
    int64_t worker_ns; /* the worker's CPU clock then */
};

/* Waits until the peer says its worker has nothing left (and, for expire,
 * until `target` tasks ran), and the worker's CPU clock has not moved for
 * quiet_ms; gives the process CPU time at the first sample that saw the
 * worker's final CPU time. The worker's clock is read before the process's,
 * so the latter covers all the worker did up to the former. The CPU time
 * this thread spends polling is taken off: it is the measurement's, not the
 * peer's. */
static struct settled settle(struct work *w, pid_t wtid, size_t target)
{
    int64_t quiet = w->c->quiet_ms * MS_NS;
    int64_t deadline = bench_now_ns() + 120 * S_NS;
    int64_t last_worker = -2, quiet_since = 0, self0 = bench_self_cpu_ns();
    struct settled s = {0, 0, 0};
    for (;;) {
        int64_t wc = bench_thread_cpu_ns(wtid);
        int64_t pc = bench_proc_cpu_ns() - (bench_self_cpu_ns() - self0);
        int64_t now = bench_now_ns();
        int done = (peer->settled == NULL || peer->settled(w->t, atomic_load(&w->ok))) &&
                   atomic_load_explicit(&ran_count, memory_order_acquire) >= target;
        if (!done || wc != last_worker) {
            last_worker = wc;
            quiet_since = now;
            s = (struct settled){pc, now, wc};
        } else if (now - quiet_since >= quiet) {
            bench_timed_extend(s.at_ns); /* the CPU figures run to here */
            return s;
        }
        if (now > deadline)
            bench_die("%s: the worker did not settle within 120 s (%zu of %zu tasks ran)",
                      w->c->workload, atomic_load(&ran_count), target);
        bench_sleep_ns(MS_NS);
    }
}

/* ------------------------------------------------------------ workloads */

static void init_work(struct work *w, const struct bench_config *c, void *t)
{
    memset(w, 0, sizeof *w);
    w->c = c;
    w->t = t;
    w->n = (size_t)c->n;
    w->threads = (size_t)c->threads;
    atomic_store(&ran_count, 0);
}

static double per(int64_t ns, size_t n)
{
    return (double)ns / (double)(n ? n : 1);
}

static void w_schedule(const struct bench_config *c)
{
    void *t = peer->create(c);
    struct work w;
    init_work(&w, c, t);
    peer->slots(t, w.n, BENCH_NOOP);
    int64_t *delays = bench_uniform_delays(w.n, 10 * S_NS, 70 * S_NS, c->seed);
    w.delays = delays;
    pid_t wtid = worker_tid();

    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t wall = run_phase(&w, step_arm);
    int64_t end = bench_now_ns();
    struct settled s = settle(&w, wtid, 0);

    int64_t t0 = bench_now_ns();
    peer->destroy(t);
    int64_t destroy = bench_now_ns() - t0;
    free(delays);
    bench_put_params(peer->name, c);
    bench_put(" ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f destroy_ms=%.1f", per(wall, w.n),
              per(s.cpu_ns - cpu0, w.n), (double)(s.at_ns - end) / 1e6, (double)destroy / 1e6);
}

/* schedule_warm: the same threads schedule n, cancel them all and let the
 * worker settle (untimed), then schedule the same slots again (timed). */
static void w_schedule_warm(const struct bench_config *c)
{
    void *t = peer->create(c);
    struct work w;
    init_work(&w, c, t);
    peer->slots(t, w.n, BENCH_NOOP);
    int64_t *delays = bench_uniform_delays(w.n, 10 * S_NS, 70 * S_NS, c->seed);
    w.delays = delays;
    pid_t wtid = worker_tid();
    struct bench_team tm;
    team_start(&tm, &w);
    team_step(&tm, step_arm);
    team_step(&tm, step_cancel);
    settle(&w, wtid, 0);

    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t wall = team_step(&tm, step_arm);
    int64_t end = bench_now_ns();
    struct settled s = settle(&w, wtid, 0);
    bench_team_stop(&tm);
    peer->destroy(t);
    free(delays);
    bench_put_params(peer->name, c);
    bench_put(" ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f", per(wall, w.n),
              per(s.cpu_ns - cpu0, w.n), (double)(s.at_ns - end) / 1e6);
}

/* cancel (other threads cancel, interleaved) and cancel_own (each thread
 * cancels what it scheduled itself). */
static void cancel_common(const struct bench_config *c, int own)
{
    void *t = peer->create(c);
    struct work w;
    init_work(&w, c, t);
    peer->slots(t, w.n, BENCH_NOOP);
    int64_t *delays = bench_xmalloc(w.n * sizeof *delays);
    for (size_t i = 0; i < w.n; i++)
        delays[i] = 10 * S_NS + (int64_t)(i % 60000) * MS_NS;
    w.delays = delays;
    pid_t wtid = worker_tid();

    struct bench_team tm;
    team_start(&tm, &w);
    team_step(&tm, step_arm);
    if (!own) {
        bench_team_stop(&tm);
        team_start(&tm, &w);
    }
    bench_sleep_ns(c->wait_ms * MS_NS);
    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t wall = team_step(&tm, step_cancel);
    int64_t end = bench_now_ns();
    struct settled s = settle(&w, wtid, 0);
    bench_team_stop(&tm);
    uint64_t cancelled = atomic_load(&w.ok);
    peer->destroy(t);
    free(delays);
    bench_put_params(peer->name, c);
    bench_put(" ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f cancelled=%" PRIu64, per(wall, w.n),
              per(s.cpu_ns - cpu0, w.n), (double)(s.at_ns - end) / 1e6, cancelled);
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
    void *t = peer->create(c);
    struct work w;
    init_work(&w, c, t);
    size_t slots = w.threads * (size_t)c->ring;
    peer->slots(t, slots, BENCH_NOOP);
    pid_t wtid = worker_tid();
    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t wall = run_phase(&w, step_churn);
    int64_t end = bench_now_ns();
    struct settled s = settle(&w, wtid, 0);
    peer->destroy(t);
    size_t pairs = (w.n / w.threads) * w.threads;
    /* Every re-arm after a slot's first replaces a pending 30 s timeout. */
    size_t cancelled = pairs > slots ? pairs - slots : 0;
    bench_put_params(peer->name, c);
    bench_put(" ring=%ld ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f pairs=%zu cancelled=%zu",
              c->ring, per(wall, pairs), per(s.cpu_ns - cpu0, pairs), (double)(s.at_ns - end) / 1e6,
              pairs, cancelled);
}

/* touch / touch_early (step_touch): calls = (n / P) * P. After the phase,
 * waits until every slot left at 10 ms has run since its last pass began
 * (early or not; up to 10 s after its deadline), then for the worker. ran counts every task that
 * ran (touch: none should), early those that ran before their bound (reported, as expire reports
 * them: a peer's own behaviour); the run stops if a 10 ms deadline did not run. Asio: a re-arm of a
 * pending wait calls its handler with operation_aborted (counted by the peer, waited for by
 * settled(), not counted as a run). */
static void touch_common(const struct bench_config *c, int early_mode)
{
    void *t = peer->create(c);
    struct work w;
    init_work(&w, c, t);
    size_t ring = (size_t)c->ring, slots = w.threads * ring;
    size_t iters = w.n / w.threads, calls = iters * w.threads;
    memset(&touch, 0, sizeof touch);
    touch.early_mode = early_mode;
    touch.ring = ring;
    touch.lb = bench_xmalloc(slots * sizeof *touch.lb);
    touch.lb_prev = bench_xmalloc(slots * sizeof *touch.lb_prev);
    touch.ran_at = bench_xmalloc(slots * sizeof *touch.ran_at);
    touch.runs = bench_xmalloc(slots * sizeof *touch.runs);
    touch.seq = bench_xmalloc(slots * sizeof *touch.seq);
    peer->slots(t, slots, BENCH_RECORD);
    int64_t setup = bench_now_ns();
    for (size_t i = 0; i < slots; i++) {
        atomic_init(&touch.lb[i], setup + 30 * S_NS);
        atomic_init(&touch.lb_prev[i], setup + 30 * S_NS);
        atomic_init(&touch.ran_at[i], 0);
        atomic_init(&touch.runs[i], 0);
        atomic_init(&touch.seq[i], 0);
        peer->arm(t, i, 30 * S_NS);
    }
    pid_t wtid = worker_tid();
    settle(&w, wtid, 0);

    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t wall = run_phase(&w, step_touch);
    int64_t end = bench_now_ns();

    /* Slack 10 ms: a slot counts once it ran since its last pass began,
     * early or not (early runs are reported, not waited out). */
    size_t due10 = bench_touch_wait_10ms(c->workload, early_mode, iters, ring, slots, touch.lb,
                                         touch.ran_at, 10 * MS_NS, &cpu0);
    struct settled st = settle(&w, wtid, 0);
    peer->destroy(t);
    uint64_t ran = 0;
    for (size_t i = 0; i < slots; i++)
        ran += atomic_load(&touch.runs[i]);
    uint64_t early = atomic_load(&touch.early);
    free((void *)touch.lb);
    free((void *)touch.lb_prev);
    free((void *)touch.ran_at);
    free((void *)touch.runs);
    free((void *)touch.seq);
    touch.lb = NULL;
    touch.seq = NULL;
    bench_put_params(peer->name, c);
    bench_put(" ring=%zu ns_per_op=%.1f cpu_ns_per_op=%.1f drain_ms=%.2f calls=%zu ran=%" PRIu64
              " left_at_10ms=%zu early=%" PRIu64 " replaced=%" PRIu64,
              ring, per(wall, calls), per(st.cpu_ns - cpu0, calls), (double)(st.at_ns - end) / 1e6,
              calls, ran, due10, early, atomic_load(&w.ok));
    if (early > 0) /* the peer's own behaviour: reported (compare-peers marks it), as in expire */
        fprintf(stderr, "%s: %s: %" PRIu64 " timeouts ran before their deadline\n", peer->name,
                c->workload, early);
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
    void *t = peer->create(c);
    struct work w;
    init_work(&w, c, t);
    int64_t *delays = bench_uniform_delays(w.n, 0, c->span_ms * MS_NS, c->seed);
    w.delays = delays;
    w.sched_at = bench_xmalloc(w.n * sizeof *w.sched_at);
    ran_at = bench_xmalloc(w.n * sizeof *ran_at);
    bench_prefault(w.sched_at, w.n * sizeof *w.sched_at);
    bench_prefault(ran_at, w.n * sizeof *ran_at);
    peer->slots(t, w.n, BENCH_RECORD);
    pid_t wtid = worker_tid();
    int64_t wcpu0 = bench_thread_cpu_ns(wtid);

    int64_t cpu0 = bench_proc_cpu_ns();
    int64_t t0 = bench_now_ns();
    int64_t wall = run_phase(&w, step_arm_recorded);
    struct settled s = settle(&w, wtid, w.n);
    peer->destroy(t);

    struct bench_lateness l;
    bench_lateness(&l, w.n, ran_at, w.sched_at, delays, t0, c->dump);

    bench_put_params(peer->name, c);
    bench_put(" span_ms=%ld total_ms=%.1f sched_ns_per_op=%.1f", c->span_ms,
              (double)(l.last_run - t0) / 1e6, per(wall, w.n));
    bench_put_lateness(&l);
    bench_put(" worker_cpu_ms=%.1f cpu_ns_per_op=%.1f", (double)(s.worker_ns - wcpu0) / 1e6,
              per(s.cpu_ns - cpu0, w.n));
    free(l.sorted);
    free(ran_at);
    ran_at = NULL;
    free(w.sched_at);
    free(delays);
}

/* memory: growth per pending timeout, the timer objects included (they are
 * created after the first sample), measured settle_ms after scheduling. */
static void w_memory(const struct bench_config *c)
{
    void *t = peer->create(c);
    struct work w;
    init_work(&w, c, t);
    int64_t *delays = bench_uniform_delays(w.n, 10 * S_NS, 70 * S_NS, c->seed);
    w.delays = delays;
    bench_sleep_ns(50 * MS_NS);
    struct kmem k0, k1;
    int64_t rss0 = bench_rss_bytes();
    kernel_memory(&k0);
    peer->slots(t, w.n, BENCH_NOOP);
    run_phase(&w, step_arm);
    bench_sleep_ns(c->settle_ms * MS_NS);
    int64_t rss1 = bench_rss_bytes();
    kernel_memory(&k1);
    peer->destroy(t);
    free(delays);
    double n = (double)w.n;
    double rss = (double)(rss1 - rss0) / n;
    double slab = (double)(k1.slab_kb - k0.slab_kb) * 1024 / n;
    double unrecl = (double)(k1.sunreclaim_kb - k0.sunreclaim_kb) * 1024 / n;
    double vmalloc = (double)(k1.vmalloc_kb - k0.vmalloc_kb) * 1024 / n;
    bench_put_params(peer->name, c);
    bench_put(" settle_ms=%ld bytes_per_timeout=%.1f rss_before_kb=%" PRId64
              " rss_after_kb=%" PRId64 " rss_bytes_per_timeout=%.1f slab_bytes_per_timeout=%.1f "
              "sunreclaim_bytes_per_timeout=%.1f vmalloc_bytes_per_timeout=%.1f",
              c->settle_ms, peer->kernel_memory ? rss + slab + vmalloc : rss, rss0 / 1024,
              rss1 / 1024, rss, slab, unrecl, vmalloc);
}

/* ------------------------------------------------------------------ main */

static const struct {
    const char *name;
    void (*fn)(const struct bench_config *);
} workloads[] = {
    {"schedule", w_schedule}, {"schedule_warm", w_schedule_warm},
    {"cancel", w_cancel},     {"cancel_own", w_cancel_own},
    {"churn", w_churn},       {"expire", w_expire},
    {"precision", w_expire},  {"memory", w_memory},
    {"touch", w_touch},       {"touch_early", w_touch_early},
};

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s WORKLOAD [key=value ...]   (or: %s version)\n"
            "workloads: schedule schedule_warm cancel cancel_own churn expire precision memory\n"
            "           touch touch_early\n"
            "keys: n threads tick_us wheel span_ms settle_ms wait_ms ring quiet_ms seed dump\n",
            prog, prog);
}

int bench_main(struct bench_peer *p, int argc, char **argv)
{
    peer = p;
    bench_set_name(&peer->name);
    if (argc < 2) {
        usage(stderr, argv[0]);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout, argv[0]);
        return 0;
    }
    int version = strcmp(argv[1], "version") == 0;
    for (size_t i = 0; i < sizeof workloads / sizeof workloads[0] || version; i++) {
        if (version || strcmp(argv[1], workloads[i].name) == 0) {
            struct bench_config c;
            c.workload = version ? "version" : workloads[i].name;
            bench_parse_args(&c, argc, argv, peer->key);
            if (version) {
                printf("%s %s\n", peer->name, peer->version());
                return 0;
            }
            workloads[i].fn(&c);
            bench_put_timed();
            printf("%s%s\n", bench_line.text, notes.text);
            fflush(stdout);
            return 0;
        }
    }
    fprintf(stderr, "%s: unknown workload '%s'\n", peer->name, argv[1]);
    usage(stderr, argv[0]);
    return 2;
}

/*
 * common.h - what hwt-bench (bench/hwt-bench.c) and the peers' harness
 * (bench/peers/harness.c) share, so that both measure the same way and
 * print the same keys: the key=value arguments and their defaults, the
 * splitmix64 delays, percentiles, the team of producer threads, the CPU
 * clocks and memory readers, and the output line.
 *
 * Where the two programs differ, the difference is a parameter here (the
 * name errors are reported under, the worker's thread name, the peer's own
 * keys), not a second copy.
 *
 * Usable from C and C++ (the Asio twin includes it through harness.h).
 */
#ifndef HWT_BENCH_COMMON_H
#define HWT_BENCH_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BENCH_MS_NS INT64_C(1000000)
#define BENCH_S_NS INT64_C(1000000000)

/* --------------------------------------------------------------- helpers */

/* Errors are reported as "NAME: message", NAME read through *name when the
 * error happens (a peer's key may rename it); "bench" until this is called. */
void bench_set_name(const char *const *name);

/* Prints "NAME: message" on stderr and exits 1. */
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* CLOCK_MONOTONIC in nanoseconds (the clock every lateness is measured on).
 * Inline: tasks call it on the worker's thread while it is measured. */
static inline int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * BENCH_S_NS + ts.tv_nsec;
}

/* Sleeps ns nanoseconds, across signals. */
void bench_sleep_ns(int64_t ns);

/* malloc that dies on failure. */
void *bench_xmalloc(size_t size);

/* Writes every page so that later writes (from a task) do not fault. A plain
 * memset(0) after malloc may be turned into calloc, which does not. */
void bench_prefault(void *p, size_t size);

/* splitmix64: the Java twin (bench/netty/HwtBench.java) uses the same
 * generator and the same mapping, so every side schedules the same delays
 * for the same seed. */
uint64_t bench_splitmix64(uint64_t *state);

/* n delays in nanoseconds, uniform in [lo, hi). */
int64_t *bench_uniform_delays(size_t n, int64_t lo, int64_t hi, uint64_t seed);

/* qsort comparator for int64_t. */
int bench_cmp_i64(const void *a, const void *b);

/* Nearest-rank percentile of a sorted array (0 if n is 0). */
int64_t bench_percentile(const int64_t *sorted, size_t n, double p);

/* Writes sorted lateness values (ns) in microseconds, one per line, to path
 * (dump=, for bench/plot.gnuplot). */
void bench_write_dump(const char *path, const int64_t *sorted, size_t n);

/* The expire and precision workloads' lateness, every side alike: timeout i
 * was scheduled at sched_at[i] with delays[i] and ran at ran_at[i] (ns; t0:
 * the phase's start). */
struct bench_lateness {
    int64_t *sorted;   /* run - (scheduled + delay), ascending; free() it */
    size_t n;
    int64_t last_run;  /* the last run, ns */
    int64_t worst_due; /* when the latest one was due, ns after t0 */
    double mean;       /* ns */
    size_t early;      /* ran before its deadline */
};

/* Computes it, and writes the sorted values to `dump` if it is not NULL. */
void bench_lateness(struct bench_lateness *l, size_t n, const int64_t *ran_at,
                    const int64_t *sched_at, const int64_t *delays, int64_t t0, const char *dump);

/* Appends p50_us, p90_us, p99_us, p999_us, max_us, max_due_ms, mean_us and
 * early to the result line. */
void bench_put_lateness(const struct bench_lateness *l);

/* -------------------------------------------------------- configuration */

struct bench_config {
    const char *workload;
    long n, threads, tick_us, wheel, span_ms, settle_ms, wait_ms, ring, quiet_ms;
    double seconds;
    uint64_t seed;
    const char *dump;
};

/* Parses argv[2..] (key=value) into c, c->workload already set, and fills
 * in the defaults (hwt-bench.c's top comment lists them). A key this does
 * not know goes to `key` (the peer's own keys), which returns 0 if it does
 * not know it either; key may be NULL. */
void bench_parse_args(struct bench_config *c, int argc, char **argv,
                      int (*key)(const char *k, const char *v));

/* ------------------------------------------------------ the output line */

/* A bounded text that appends are cut at (never overflows). */
struct bench_buf {
    char *text;
    size_t size, len;
};

void bench_vappend(struct bench_buf *b, const char *fmt, va_list ap);

/* The one output line, 4096 bytes unless its size is set lower before the
 * first bench_put. */
extern struct bench_buf bench_line;

/* Appends to bench_line. */
void bench_put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "NAME WORKLOAD n= threads= tick_us= wheel=", the start of every line. */
void bench_put_params(const char *name, const struct bench_config *c);

/* ------------------------------------------------- CPU, memory, threads */

/* CPU time the harness spent at start lines (bench_start_line_wait), which
 * no workload's figures count. */
int64_t bench_uncounted_cpu_ns(void);

/* CPU time of the whole process: every thread, those that exited too, but
 * not the time spent at start lines. */
static inline int64_t bench_proc_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * BENCH_S_NS + ts.tv_nsec - bench_uncounted_cpu_ns();
}

/* CPU time of the calling thread. */
static inline int64_t bench_self_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * BENCH_S_NS + ts.tv_nsec;
}

/* The CPU clock of thread `tid` of this process (the kernel's encoding of a
 * per-thread CPUCLOCK_SCHED clock, as pthread_getcpuclockid gives); -1 if it
 * cannot be read. */
int64_t bench_thread_cpu_ns(pid_t tid);

/* utime + stime of thread `tid` from /proc/self/task/TID/stat, in ns (clock
 * ticks, coarse); -1 if it cannot be read. */
int64_t bench_thread_stat_cpu_ns(pid_t tid);

/* The id of the thread named `name`, found in /proc/self/task/TID/comm,
 * waiting up to about a second for it to name itself; -1 if not found. */
pid_t bench_worker_tid(const char *name);

/* Resident set size of the process in bytes. */
int64_t bench_rss_bytes(void);

/* ------------------------------------------------------ the start line */

/* Where the threads of a timed phase wait, spinning, until they run at the
 * same time on different CPUs, before each takes its start time. Threads
 * released together from a barrier can be woken onto one CPU; the kernel
 * moves one of them away at a load-balancing tick (4 ms at HZ=250), and a
 * phase of a few milliseconds run that way measures the scheduler rather
 * than the timer. A thread passes once it has seen every other thread's
 * counter move 1000 times in a row with no gap over 50 us, which threads
 * that take turns on one CPU cannot do. With more threads than CPUs, or
 * after 200 ms (a busy machine), they start without it. The spin's CPU time
 * goes to bench_uncounted_cpu_ns. */
struct bench_start_line;

struct bench_start_line *bench_start_line_new(size_t threads);

/* Makes it ready for the next phase; call while no thread is at it. */
void bench_start_line_reset(struct bench_start_line *s);

/* Thread `self` (0 .. threads-1) waits at the start line. */
void bench_start_line_wait(struct bench_start_line *s, size_t self);

void bench_start_line_free(struct bench_start_line *s);

/* ------------------------------------------------------------ the team */

/* P threads that run steps together: each step starts when all of them and
 * the main thread are at `go` (and then at the start line) and ends at
 * `done`, so a thread's later steps work on what it did in earlier ones. A
 * step calls call(ctx, self) on thread self (0 .. P-1). */
struct bench_team;

struct bench_team_arg {
    struct bench_team *team;
    size_t self;
};

struct bench_team {
    size_t threads;
    void (*call)(void *ctx, size_t self);
    void *ctx;
    int stopping;
    pthread_t *tid;
    struct bench_team_arg *args;
    pthread_barrier_t go, done;
    struct bench_start_line *line;
    int64_t *start, *end;
};

void bench_team_start(struct bench_team *tm, size_t threads, void (*call)(void *ctx, size_t self),
                      void *ctx);

/* Runs one step on every thread of the team; returns the wall time in ns
 * (last end - first start). */
int64_t bench_team_step(struct bench_team *tm);

void bench_team_stop(struct bench_team *tm);

/* Last end - first start of p threads' [start, end] stamps. Also makes
 * that span the run's timed window (below): the last phase measured is the
 * one the figures come from. */
int64_t bench_wall(const int64_t *start, const int64_t *end, size_t p);

/* The run's timed window (CLOCK_MONOTONIC ns; from = 0: none yet): the last
 * phase bench_wall measured, stretched to what its figures wait for after
 * it (the worker settling, for the CPU figures; expire's last task). Every
 * twin prints it as timed_from_ns and timed_to_ns, so that bench/with-steal
 * can tell how much of it fell in one of the machine's slow spells
 * (hwt-canary, bench/README.md). */
struct bench_window {
    int64_t from, to;
};
extern struct bench_window bench_timed;

/* Stretches the timed window to `to` (nothing if there is no window yet). */
void bench_timed_extend(int64_t to);

/* Appends timed_from_ns and timed_to_ns to the result line, if a window was
 * measured. */
void bench_put_timed(void);

/* ------------------------------------------------ touch and touch_early */

/* The delay of a thread's call on slot s of its ring in pass `pass`: 30 s;
 * touch_early (early_mode) alternately 10 ms and 30 s, so that every other
 * call moves a deadline earlier. Inline: it is called inside the timed loop. */
static inline int64_t bench_touch_delay(int early_mode, size_t pass, size_t s)
{
    return early_mode && ((pass + s) & 1) != 0 ? 10 * BENCH_MS_NS : 30 * BENCH_S_NS;
}

#ifndef __cplusplus
/* After the timed phase (iters calls per thread over rings of `ring`
 * slots, slots in all): waits until every slot whose last call left it at
 * 10 ms has run at or after its bound lb[i] - slack_ns (ran_at[i]); dies
 * naming `workload` if one has not 10 s after the last such bound. Returns
 * how many slots were left at 10 ms. The CPU time this thread spends
 * waiting is added to *cpu0: it is the measurement's, not the timer's. */
size_t bench_touch_wait_10ms(const char *workload, int early_mode, size_t iters, size_t ring,
                             size_t slots, _Atomic int64_t *lb, _Atomic int64_t *ran_at,
                             int64_t slack_ns, int64_t *cpu0);
#endif

#ifdef __cplusplus
}
#endif

#endif

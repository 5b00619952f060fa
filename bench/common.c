/*
 * common.c - the plumbing hwt-bench and the peers' harness share (common.h).
 */
#define _GNU_SOURCE
#include "common.h"

#include <dirent.h>
#include <stdatomic.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --------------------------------------------------------------- helpers */

static const char *const *die_name;

void bench_set_name(const char *const *name)
{
    die_name = name;
}

void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", die_name != NULL && *die_name != NULL ? *die_name : "bench");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void bench_sleep_ns(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / BENCH_S_NS), (long)(ns % BENCH_S_NS)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void *bench_xmalloc(size_t size)
{
    void *p = malloc(size == 0 ? 1 : size);
    if (p == NULL)
        bench_die("out of memory (%zu bytes)", size);
    return p;
}

void bench_prefault(void *p, size_t size)
{
    volatile char *c = p;
    long page = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < size; i += (size_t)page)
        c[i] = 1;
    memset(p, 0, size);
    if (size > 0)
        c[0] = 0;
}

uint64_t bench_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

int64_t *bench_uniform_delays(size_t n, int64_t lo, int64_t hi, uint64_t seed)
{
    int64_t *d = bench_xmalloc(n * sizeof *d);
    uint64_t state = seed;
    uint64_t range = (uint64_t)(hi - lo);
    for (size_t i = 0; i < n; i++)
        d[i] = lo + (int64_t)((bench_splitmix64(&state) >> 1) % (range == 0 ? 1 : range));
    return d;
}

int bench_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t bench_percentile(const int64_t *sorted, size_t n, double p)
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

void bench_write_dump(const char *path, const int64_t *sorted, size_t n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        bench_die("cannot write %s: %s", path, strerror(errno));
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.3f\n", (double)sorted[i] / 1e3);
    if (fclose(f) != 0)
        bench_die("cannot write %s", path);
}

void bench_lateness(struct bench_lateness *l, size_t n, const int64_t *ran_at,
                    const int64_t *sched_at, const int64_t *delays, int64_t t0, const char *dump)
{
    int64_t *late = bench_xmalloc((n ? n : 1) * sizeof *late);
    int64_t last = INT64_MIN;
    size_t early = 0, worst = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (ran_at[i] > last)
            last = ran_at[i];
        late[i] = ran_at[i] - (sched_at[i] + delays[i]);
        early += late[i] < 0;
        if (late[i] > late[worst])
            worst = i;
        sum += (double)late[i];
    }
    /* When the worst one was due, from the first schedule: in the burst of
     * scheduling (CPU share) or later (a stall). */
    int64_t worst_due = n ? sched_at[worst] + delays[worst] - t0 : 0;
    qsort(late, n, sizeof *late, bench_cmp_i64);
    if (dump != NULL)
        bench_write_dump(dump, late, n);
    *l = (struct bench_lateness){late, n, last, worst_due, n ? sum / (double)n : 0, early};
    bench_timed_extend(last);
}

void bench_put_lateness(const struct bench_lateness *l)
{
    size_t n = l->n;
    bench_put(" p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f",
              (double)bench_percentile(l->sorted, n, 50) / 1e3,
              (double)bench_percentile(l->sorted, n, 90) / 1e3,
              (double)bench_percentile(l->sorted, n, 99) / 1e3,
              (double)bench_percentile(l->sorted, n, 99.9) / 1e3,
              n ? (double)l->sorted[n - 1] / 1e3 : 0.0);
    bench_put(" max_due_ms=%.1f mean_us=%.1f early=%zu", (double)l->worst_due / 1e6,
              l->mean / 1e3, l->early);
}

/* -------------------------------------------------------- configuration */

static long parse_long(const char *key, const char *v, long min)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < min)
        bench_die("bad value for %s: '%s' (an integer >= %ld)", key, v, min);
    return x;
}

void bench_parse_args(struct bench_config *c, int argc, char **argv,
                      int (*key)(const char *k, const char *v))
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
            bench_die("expected key=value, got '%s'", argv[i]);
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
                bench_die("bad value for seconds: '%s'", v);
        } else if (key == NULL || !key(k, v))
            bench_die("unknown key '%s'", k);
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
    /* 3 x max(tick, 100 ms): libhwtimer's worker may leave queued work for
     * one cancel latency, and a loaded machine may wake it late. */
    if (c->quiet_ms < 0)
        c->quiet_ms = 3 * (c->tick_us / 1000 > 100 ? c->tick_us / 1000 : 100);
}

/* ------------------------------------------------------ the output line */

void bench_vappend(struct bench_buf *b, const char *fmt, va_list ap)
{
    if (b->len < b->size - 1) {
        int w = vsnprintf(b->text + b->len, b->size - b->len, fmt, ap);
        if (w > 0)
            b->len += (size_t)w;
        if (b->len > b->size - 1)
            b->len = b->size - 1;
    }
}

static char line_text[4096];
struct bench_buf bench_line = {line_text, sizeof line_text, 0};

void bench_put(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bench_vappend(&bench_line, fmt, ap);
    va_end(ap);
}

void bench_put_params(const char *name, const struct bench_config *c)
{
    bench_put("%s %s n=%ld threads=%ld tick_us=%ld wheel=%ld", name, c->workload, c->n, c->threads,
              c->tick_us, c->wheel);
}

/* ------------------------------------------------- CPU, memory, threads */

int64_t bench_thread_cpu_ns(pid_t tid)
{
    clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6u);
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return -1;
    return (int64_t)ts.tv_sec * BENCH_S_NS + ts.tv_nsec;
}

int64_t bench_thread_stat_cpu_ns(pid_t tid)
{
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
    return (int64_t)((utime + stime) * (unsigned long long)(BENCH_S_NS / (hz > 0 ? hz : 100)));
}

pid_t bench_worker_tid(const char *name)
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
                if (strcmp(comm, name) == 0)
                    found = (pid_t)atoi(e->d_name);
            }
            fclose(f);
        }
        closedir(dir);
        if (found > 0)
            return found;
        bench_sleep_ns(BENCH_MS_NS); /* the worker names itself when it starts */
    }
    return -1;
}

int64_t bench_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        bench_die("cannot open /proc/self/statm");
    long long size, resident;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2)
        bench_die("cannot parse /proc/self/statm");
    fclose(f);
    return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

/* ------------------------------------------------------ the start line */

static _Atomic int64_t uncounted_cpu_ns;

int64_t bench_uncounted_cpu_ns(void)
{
    return atomic_load_explicit(&uncounted_cpu_ns, memory_order_relaxed);
}

#define LINE_STREAK 1000
#define LINE_GAP_NS (50 * 1000)
#define LINE_GIVE_UP_NS (200 * 1000 * 1000)

struct bench_beat {
    _Alignas(64) _Atomic uint64_t count;
};

struct bench_start_line {
    size_t threads;
    int needed; /* no more threads than CPUs */
    _Atomic size_t passed;
    struct bench_beat *beats;
};

struct bench_start_line *bench_start_line_new(size_t threads)
{
    struct bench_start_line *s = bench_xmalloc(sizeof *s);
    s->threads = threads;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    s->needed = threads > 1 && cpus > 0 && threads <= (size_t)cpus;
    s->beats = aligned_alloc(64, threads * sizeof *s->beats);
    if (s->beats == NULL)
        bench_die("out of memory");
    for (size_t i = 0; i < threads; i++)
        atomic_init(&s->beats[i].count, 0);
    atomic_init(&s->passed, 0);
    return s;
}

void bench_start_line_reset(struct bench_start_line *s)
{
    atomic_store(&s->passed, 0);
}

void bench_start_line_wait(struct bench_start_line *s, size_t self)
{
    if (!s->needed)
        return;
    size_t p = s->threads;
    uint64_t *seen = bench_xmalloc(p * sizeof *seen);
    int64_t *moved_at = bench_xmalloc(p * sizeof *moved_at);
    int *streak = bench_xmalloc(p * sizeof *streak);
    int64_t cpu0 = bench_self_cpu_ns(), now = bench_now_ns(), give_up = now + LINE_GIVE_UP_NS;
    for (size_t j = 0; j < p; j++) {
        seen[j] = atomic_load_explicit(&s->beats[j].count, memory_order_relaxed);
        moved_at[j] = now;
        streak[j] = 0;
    }
    int passed = 0;
    while (atomic_load_explicit(&s->passed, memory_order_acquire) < p && now < give_up) {
        atomic_fetch_add_explicit(&s->beats[self].count, 1, memory_order_relaxed);
        now = bench_now_ns();
        if (passed)
            continue;
        int all = 1;
        for (size_t j = 0; j < p; j++) {
            if (j == self)
                continue;
            uint64_t v = atomic_load_explicit(&s->beats[j].count, memory_order_relaxed);
            if (v != seen[j]) {
                streak[j] = now - moved_at[j] > LINE_GAP_NS ? 1 : streak[j] + 1;
                seen[j] = v;
                moved_at[j] = now;
            }
            all &= streak[j] >= LINE_STREAK;
        }
        if (all) {
            passed = 1;
            atomic_fetch_add_explicit(&s->passed, 1, memory_order_release);
        }
    }
    atomic_fetch_add_explicit(&uncounted_cpu_ns, bench_self_cpu_ns() - cpu0, memory_order_relaxed);
    free(seen);
    free(moved_at);
    free(streak);
}

void bench_start_line_free(struct bench_start_line *s)
{
    free(s->beats);
    free(s);
}

/* ------------------------------------------------------------ the team */

static void *team_thread(void *p)
{
    struct bench_team_arg *a = p;
    struct bench_team *tm = a->team;
    for (;;) {
        pthread_barrier_wait(&tm->go);
        if (tm->stopping)
            return NULL;
        bench_start_line_wait(tm->line, a->self);
        tm->start[a->self] = bench_now_ns();
        tm->call(tm->ctx, a->self);
        tm->end[a->self] = bench_now_ns();
        pthread_barrier_wait(&tm->done);
    }
}

void bench_team_start(struct bench_team *tm, size_t threads, void (*call)(void *ctx, size_t self),
                      void *ctx)
{
    size_t p = threads;
    tm->threads = p;
    tm->call = call;
    tm->ctx = ctx;
    tm->stopping = 0;
    tm->tid = bench_xmalloc(p * sizeof *tm->tid);
    tm->args = bench_xmalloc(p * sizeof *tm->args);
    tm->start = bench_xmalloc(p * sizeof *tm->start);
    tm->end = bench_xmalloc(p * sizeof *tm->end);
    tm->line = bench_start_line_new(p);
    if (pthread_barrier_init(&tm->go, NULL, (unsigned)p + 1) != 0 ||
        pthread_barrier_init(&tm->done, NULL, (unsigned)p + 1) != 0)
        bench_die("pthread_barrier_init");
    for (size_t i = 0; i < p; i++) {
        tm->args[i] = (struct bench_team_arg){tm, i};
        if (pthread_create(&tm->tid[i], NULL, team_thread, &tm->args[i]) != 0)
            bench_die("pthread_create");
    }
}

struct bench_window bench_timed;

int64_t bench_wall(const int64_t *start, const int64_t *end, size_t p)
{
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (size_t i = 0; i < p; i++) {
        if (start[i] < first)
            first = start[i];
        if (end[i] > last)
            last = end[i];
    }
    bench_timed = (struct bench_window){first, last};
    return last - first;
}

void bench_timed_extend(int64_t to)
{
    if (bench_timed.from != 0 && to > bench_timed.to)
        bench_timed.to = to;
}

void bench_put_timed(void)
{
    if (bench_timed.from != 0)
        bench_put(" timed_from_ns=%" PRId64 " timed_to_ns=%" PRId64, bench_timed.from,
                  bench_timed.to);
}

int64_t bench_team_step(struct bench_team *tm)
{
    bench_start_line_reset(tm->line);
    pthread_barrier_wait(&tm->go);
    pthread_barrier_wait(&tm->done);
    return bench_wall(tm->start, tm->end, tm->threads);
}

void bench_team_stop(struct bench_team *tm)
{
    tm->stopping = 1;
    pthread_barrier_wait(&tm->go);
    for (size_t i = 0; i < tm->threads; i++)
        pthread_join(tm->tid[i], NULL);
    pthread_barrier_destroy(&tm->go);
    pthread_barrier_destroy(&tm->done);
    bench_start_line_free(tm->line);
    free(tm->tid);
    free(tm->args);
    free(tm->start);
    free(tm->end);
}

/* ------------------------------------------------ touch and touch_early */

/* 1 if the last of `iters` calls of slot i's thread left slot i at 10 ms. */
static int left_at_10ms(int early_mode, size_t iters, size_t ring, size_t i)
{
    size_t s = i % ring;
    return iters > s && bench_touch_delay(early_mode, (iters - 1 - s) / ring, s) < 30 * BENCH_S_NS;
}

size_t bench_touch_wait_10ms(const char *workload, int early_mode, size_t iters, size_t ring,
                             size_t slots, _Atomic int64_t *lb, _Atomic int64_t *ran_at,
                             int64_t slack_ns, int64_t *cpu0)
{
    /* The last call on each slot: the deadline it is left with. */
    size_t due10 = 0;
    int64_t last_due = 0;
    for (size_t i = 0; i < slots; i++) {
        if (left_at_10ms(early_mode, iters, ring, i)) {
            due10++;
            int64_t b = atomic_load(&lb[i]);
            last_due = b > last_due ? b : last_due;
        }
    }
    int64_t self0 = bench_self_cpu_ns();
    int64_t deadline = last_due + 10 * BENCH_S_NS;
    for (;;) {
        size_t missing = 0;
        for (size_t i = 0; i < slots; i++)
            if (left_at_10ms(early_mode, iters, ring, i) &&
                atomic_load_explicit(&ran_at[i], memory_order_acquire) <
                    atomic_load(&lb[i]) - slack_ns)
                missing++;
        if (missing == 0)
            break;
        if (bench_now_ns() > deadline)
            bench_die(
                "%s: %zu of %zu timeouts left at 10 ms did not run within 10 s of their deadline",
                workload, missing, due10);
        bench_sleep_ns(BENCH_MS_NS);
    }
    *cpu0 += bench_self_cpu_ns() - self0;
    return due10;
}

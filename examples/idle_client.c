/*
 * idle_client.c - drives idle_server and checks, from the client side, that
 * its hwt_timer closes idle connections on time and never an active one.
 *
 *   idle_client --port N [--connections C] [--active-pct P] [--interval-ms X]
 *               [--duration-ms D] [--ramp-ms M] [--slack-ms S] [--server-pid PID]
 *               [--progress-ms P] [--shutdown-wait-ms W] [--seed N]
 *
 * It learns the server's idle timeout T, tick and request timeout R from a
 * "CONFIG" on a monitor connection, then opens C connections (default 2000;
 * it raises RLIMIT_NOFILE as needed), started evenly over M ms (default T/2),
 * of three kinds, interleaved:
 *   active      (P%, default 25): a request every X ms (default T/4), for the
 *               whole run; 1 in 10 needs R/2 of "work" (answer OK after it),
 *               1 in 10 needs 2R (answer TIMEOUT: the request timeout fires);
 *   idle        half of the others: "HELLO" once connected, then silence;
 *   idle later  the other half: 1 to 4 requests, then silence.
 * Every idle connection must be closed by the server ("BYE idle") between T
 * and T + tick + S (slack, default 500 ms) after the last data the client
 * sent on it (timestamps taken just before the send); no active connection
 * may be closed by the server; every answer must be the expected one, and no
 * request timeout may fire early or later than R + tick + S. The lateness of a close is measured
 * where the client sees it (its epoll loop reading the BYE or the EOF); the
 * server also stamps its close time (CLOCK_MONOTONIC is one clock for all
 * processes), which is reported beside it and used for the "never early" check.
 * The server pushes an idle timeout back with hwt_timeout_reschedule on every
 * read that brings data; its STATS count those reschedules and the ones that
 * returned false (the timeout had just fired), which the summary reports.
 * Every connection sends data, so fewer reschedules than connections fail.
 *
 * With --server-pid it finally sends SIGTERM to the server and checks that
 * every connection still open is closed with "BYE shutdown"; without it, it
 * closes its connections itself.
 *
 * It prints a progress line every P ms (default 1000) with its own counts and
 * the server's (from the server's hwt_timer_stats, via "STATS"), and a summary.
 * Exit status: 0 PASS, 1 FAIL, 2 could not run.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MS ((int64_t)1000000) /* ns */

/* ---------------------------------------------------------------- config */

struct config {
    int port;
    int connections;
    int active_pct;
    int interval_ms;
    int duration_ms;
    int ramp_ms;
    int slack_ms;
    long server_pid;
    int progress_ms;
    int shutdown_wait_ms;
    unsigned seed;
};

/* What the server told us ("CONFIG"). */
static int64_t idle_ns, tick_ns, request_timeout_ns;
static int heartbeat_ms;
static int64_t interval_ns; /* between two requests of a connection */

/* ----------------------------------------------------------- connections */

enum kind { ACTIVE, IDLE, IDLE_LATER };
enum state { UNUSED, CONNECTING, OPEN, CLOSED };
enum reason { R_NONE, R_IDLE, R_SHUTDOWN, R_EOF, R_RESET, R_CONNECT_FAILED, R_BY_US };
enum req_type { FAST, MEDIUM, SLOW };

struct cc {
    int fd;
    unsigned char kind, state, reason, req_type;
    bool in_flight, send_when_answered, in_queue;
    int sends_left; /* IDLE_LATER: requests still to send; ACTIVE: -1 */
    uint64_t next_id, req_id;
    int64_t req_sent_ns;
    int64_t req_work_ns;     /* the work asked for (whole ms, as sent) */
    int64_t connect_ns;      /* just before connect() */
    int64_t last_send_ns;    /* just before the last send() (or connect()) */
    int64_t seen_close_ns;   /* when we read the BYE or the EOF, whichever first */
    int64_t server_close_ns; /* the server's stamp in "BYE idle <ns>" */
    int64_t due_ns;          /* next request (ACTIVE, IDLE_LATER) */
    int qnext;
    unsigned in_len;
    char in[128];
};

static struct cc *conns;
static int nconns;
static int epfd;

/* Requests due, in due order: every due time is now + X when it is queued,
 * so a FIFO is sorted. */
static int qhead = -1, qtail = -1;

/* Counters. */
static long n_open, n_connect_failed, n_idle_total, n_idle_closed, n_active_total;
static long n_sent, n_answered, n_timeouts, n_wrong, n_early_answers;
static long n_active_closed_bug, n_active_closed_stall, n_unexpected_close;
static int64_t *idle_late, *idle_late_server, *req_late; /* ns, for percentiles */
static long n_idle_late, n_req_late, req_late_cap;
static int64_t loop_busy_max_ns, loop_oversleep_max_ns;
static bool shutting_down;
static char wrong_example[160];

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("idle_client: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void wrong(struct cc *c, const char *fmt, ...)
{
    n_wrong++;
    if (wrong_example[0] == '\0') {
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(wrong_example, sizeof wrong_example, "connection %d: ", (int)(c - conns));
        vsnprintf(wrong_example + n, sizeof wrong_example - (size_t)n, fmt, ap);
        va_end(ap);
    }
}

static void queue_push(struct cc *c, int64_t due)
{
    int i = (int)(c - conns);
    c->due_ns = due;
    c->qnext = -1;
    c->in_queue = true;
    if (qtail >= 0)
        conns[qtail].qnext = i;
    else
        qhead = i;
    qtail = i;
}

static struct cc *queue_pop(void)
{
    struct cc *c = &conns[qhead];
    qhead = c->qnext;
    if (qhead < 0)
        qtail = -1;
    c->in_queue = false;
    return c;
}

static bool send_line(struct cc *c, const char *line)
{
    size_t len = strlen(line);
    c->last_send_ns = now_ns(); /* before the send: the server gets it later */
    ssize_t w = send(c->fd, line, len, MSG_NOSIGNAL);
    return w == (ssize_t)len; /* a few bytes on a fresh socket: all or an error */
}

static void send_request(struct cc *c)
{
    uint64_t n = c->next_id++;
    int idx = (int)(c - conns);
    enum req_type t = FAST;
    bool ordered = request_timeout_ns >= 4 * tick_ns; /* R/2 at least 2 ticks */
    if (c->kind == ACTIVE && ordered)
        t = (n + (uint64_t)idx) % 10 == 3 ? SLOW : (n + (uint64_t)idx) % 10 == 7 ? MEDIUM : FAST;
    int64_t work_ms = t == SLOW     ? 2 * request_timeout_ns / MS
                      : t == MEDIUM ? request_timeout_ns / 2 / MS
                                    : 0;
    char line[64];
    snprintf(line, sizeof line, "REQ %" PRIu64 " %" PRId64 "\n", n, work_ms);
    c->req_type = (unsigned char)t;
    c->req_work_ns = work_ms * MS;
    c->req_id = n;
    c->in_flight = true;
    c->req_sent_ns = now_ns();
    if (!send_line(c, line))
        return; /* the read side will see why */
    n_sent++;
    if (c->sends_left > 0)
        c->sends_left--;
}

/* The request of c is due: send it now, or as soon as the answer is in. */
static void request_due(struct cc *c)
{
    if (c->state != OPEN || shutting_down)
        return;
    if (c->in_flight) {
        c->send_when_answered = true;
        return;
    }
    send_request(c);
    if (c->sends_left != 0)
        queue_push(c, now_ns() + interval_ns);
}

static void conn_closed(struct cc *c, enum reason why, int64_t now)
{
    if (c->state == OPEN)
        n_open--;
    c->state = CLOSED;
    close(c->fd);
    c->fd = -1;
    if (c->reason == R_NONE)
        c->reason = (unsigned char)why;
    if (c->seen_close_ns == 0)
        c->seen_close_ns = now;
    if (shutting_down || why == R_BY_US)
        return;
    /* Judged now, so that the progress line can count them. */
    if (c->kind == ACTIVE) {
        if (c->reason == R_IDLE && c->server_close_ns - c->last_send_ns >= idle_ns)
            n_active_closed_stall++; /* we went quiet for T ourselves */
        else if (c->reason == R_IDLE)
            n_active_closed_bug++;
        else
            n_unexpected_close++;
        return;
    }
    if (c->reason != R_IDLE) {
        n_unexpected_close++;
        return;
    }
    n_idle_closed++;
    int64_t deadline = c->last_send_ns + idle_ns;
    idle_late[n_idle_late] = c->seen_close_ns - deadline;
    idle_late_server[n_idle_late] = c->server_close_ns - deadline;
    n_idle_late++;
}

static void on_line(struct cc *c, char *line, int64_t now)
{
    uint64_t id;
    long long stamp;
    char word[16];
    if (strncmp(line, "BYE ", 4) == 0) {
        if (c->seen_close_ns == 0)
            c->seen_close_ns = now;
        if (sscanf(line, "BYE idle %lld", &stamp) == 1) {
            c->reason = R_IDLE;
            c->server_close_ns = stamp;
        } else if (strcmp(line, "BYE shutdown") == 0) {
            c->reason = R_SHUTDOWN;
        } else {
            wrong(c, "unexpected \"%s\"", line);
        }
        return;
    }
    if (shutting_down)
        return;
    if (sscanf(line, "%15s %" SCNu64, word, &id) != 2 || !c->in_flight || id != c->req_id) {
        wrong(c, "unexpected \"%s\"", line);
        return;
    }
    bool timed_out = strcmp(word, "TIMEOUT") == 0;
    if (!timed_out && strcmp(word, "OK") != 0) {
        wrong(c, "unexpected \"%s\"", line);
        return;
    }
    c->in_flight = false;
    n_answered++;
    int64_t took = now - c->req_sent_ns;
    switch (c->req_type) {
    case FAST:
        if (timed_out)
            wrong(c, "request %" PRIu64 " (no work) answered TIMEOUT", id);
        break;
    case MEDIUM:
        if (timed_out)
            wrong(c, "request %" PRIu64 " (work R/2) answered TIMEOUT", id);
        else if (took < c->req_work_ns) /* the work's timeout fired early */
            n_early_answers++;
        break;
    case SLOW:
        if (!timed_out) {
            wrong(c, "request %" PRIu64 " (work 2R) answered OK", id);
            break;
        }
        n_timeouts++;
        if (took < request_timeout_ns)
            n_early_answers++;
        if (n_req_late == req_late_cap) {
            req_late_cap = req_late_cap ? 2 * req_late_cap : 4096;
            req_late = realloc(req_late, (size_t)req_late_cap * sizeof *req_late);
            if (req_late == NULL)
                die("out of memory");
        }
        req_late[n_req_late++] = took - request_timeout_ns;
        break;
    }
    if (c->send_when_answered) { /* it was due while this one was in flight */
        c->send_when_answered = false;
        request_due(c);
    }
}

static void on_readable(struct cc *c, int64_t now)
{
    ssize_t r;
    do
        r = read(c->fd, c->in + c->in_len, sizeof c->in - 1 - c->in_len);
    while (r < 0 && errno == EINTR);
    if (r < 0 && errno == EAGAIN)
        return;
    if (r <= 0) {
        conn_closed(c, r == 0 ? R_EOF : R_RESET, now);
        return;
    }
    c->in_len += (unsigned)r;
    c->in[c->in_len] = '\0';
    char *start = c->in, *nl;
    while ((nl = strchr(start, '\n')) != NULL) {
        *nl = '\0';
        on_line(c, start, now);
        start = nl + 1;
    }
    c->in_len -= (unsigned)(start - c->in);
    memmove(c->in, start, c->in_len);
    if (c->in_len == sizeof c->in - 1) {
        wrong(c, "line too long");
        c->in_len = 0;
    }
}

static void on_connected(struct cc *c)
{
    c->state = OPEN;
    n_open++;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)(c - conns)};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    if (c->kind == IDLE) {
        send_line(c, "HELLO\n");
    } else {
        send_request(c);
        if (c->sends_left != 0)
            queue_push(c, now_ns() + interval_ns);
    }
}

static void start_connect(struct cc *c, const struct sockaddr_in *addr)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        die("socket: %s (connection %d)", strerror(errno), (int)(c - conns));
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->state = CONNECTING;
    c->connect_ns = c->last_send_ns = now_ns();
    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)(c - conns)};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0)
        die("epoll_ctl: %s", strerror(errno));
    if (connect(c->fd, (const struct sockaddr *)addr, sizeof *addr) != 0 && errno != EINPROGRESS) {
        n_connect_failed++;
        c->state = CLOSED;
        c->reason = R_CONNECT_FAILED;
        close(c->fd);
        c->fd = -1;
    }
}

/* ------------------------------------------------------- the monitor link */

static int ctl_fd = -1;
static char ctl_buf[1024];
static size_t ctl_len;

/* One line from the monitor connection (blocking, with SO_RCVTIMEO). */
static bool ctl_read_line(char *out, size_t size)
{
    for (;;) {
        char *nl = memchr(ctl_buf, '\n', ctl_len);
        if (nl != NULL) {
            size_t n = (size_t)(nl - ctl_buf);
            snprintf(out, size, "%.*s", (int)n, ctl_buf);
            ctl_len -= n + 1;
            memmove(ctl_buf, nl + 1, ctl_len);
            return true;
        }
        if (ctl_len == sizeof ctl_buf)
            return false;
        ssize_t r = read(ctl_fd, ctl_buf + ctl_len, sizeof ctl_buf - ctl_len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        ctl_len += (size_t)r;
    }
}

static bool ctl_ask(const char *cmd, const char *prefix, char *out, size_t size)
{
    size_t len = strlen(cmd);
    if (write(ctl_fd, cmd, len) != (ssize_t)len)
        return false;
    while (ctl_read_line(out, size))
        if (strncmp(out, prefix, strlen(prefix)) == 0)
            return true;
    return false;
}

/* The value of key=N in a "STATS"/"CONFIG" line, or -1. */
static long long stat_get(const char *line, const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = line; (p = strstr(p, key)) != NULL; p += klen)
        if ((p == line || p[-1] == ' ') && p[klen] == '=')
            return strtoll(p + klen + 1, NULL, 10);
    return -1;
}

static int connect_blocking(const struct sockaddr_in *addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (const struct sockaddr *)addr, sizeof *addr) != 0)
        die("cannot connect to 127.0.0.1:%d: %s", ntohs(addr->sin_port), strerror(errno));
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* -------------------------------------------------------------- reporting */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double pct_ms(const int64_t *sorted, long n, double p)
{
    if (n == 0)
        return 0;
    long i = (long)(p * (double)(n - 1) + 0.5);
    return (double)sorted[i] / 1e6;
}

static void progress(int64_t t0)
{
    char st[1024];
    bool have = ctl_ask("STATS\n", "STATS ", st, sizeof st);
    printf("idle_client [%5.1fs] open %ld  closed by idle timeout %ld/%ld  requests %ld"
           " (timed out %ld)",
           (double)(now_ns() - t0) / 1e9, n_open, n_idle_closed, n_idle_total, n_sent, n_timeouts);
    if (have)
        printf("  | server: open %lld pending %lld wakeups %lld ticks %lld", stat_get(st, "open"),
               stat_get(st, "pending"), stat_get(st, "wakeups"), stat_get(st, "ticks"));
    printf("\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------ main */

static void usage(void)
{
    fputs("usage: idle_client --port N [--connections C] [--active-pct P] [--interval-ms X]\n"
          "                   [--duration-ms D] [--ramp-ms M] [--slack-ms S] [--server-pid PID]\n"
          "                   [--progress-ms P] [--shutdown-wait-ms W] [--seed N]\n",
          stderr);
    exit(2);
}

static long long int_arg(const char *name, const char *value, long long min, long long max)
{
    char *end;
    errno = 0;
    long long v = value ? strtoll(value, &end, 10) : 0;
    if (value == NULL || errno != 0 || *end != '\0' || v < min || v > max)
        die("%s wants an integer in %lld..%lld", name, min, max);
    return v;
}

static void parse_args(int argc, char **argv, struct config *cfg)
{
    *cfg = (struct config){.port = -1,
                           .connections = 2000,
                           .active_pct = 25,
                           .interval_ms = -1,
                           .duration_ms = -1,
                           .ramp_ms = -1,
                           .slack_ms = 500,
                           .progress_ms = 1000,
                           .shutdown_wait_ms = 30000,
                           .seed = 1};
    for (int i = 1; i < argc; i += 2) { /* --option value pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--port") == 0)
            cfg->port = (int)int_arg(a, v, 1, 65535);
        else if (strcmp(a, "--connections") == 0)
            cfg->connections = (int)int_arg(a, v, 1, 1000000);
        else if (strcmp(a, "--active-pct") == 0)
            cfg->active_pct = (int)int_arg(a, v, 0, 100);
        else if (strcmp(a, "--interval-ms") == 0)
            cfg->interval_ms = (int)int_arg(a, v, 1, 3600000);
        else if (strcmp(a, "--duration-ms") == 0)
            cfg->duration_ms = (int)int_arg(a, v, 0, 36000000);
        else if (strcmp(a, "--ramp-ms") == 0)
            cfg->ramp_ms = (int)int_arg(a, v, 0, 3600000);
        else if (strcmp(a, "--slack-ms") == 0)
            cfg->slack_ms = (int)int_arg(a, v, 0, 3600000);
        else if (strcmp(a, "--server-pid") == 0)
            cfg->server_pid = (long)int_arg(a, v, 1, INT32_MAX);
        else if (strcmp(a, "--progress-ms") == 0)
            cfg->progress_ms = (int)int_arg(a, v, 10, 3600000);
        else if (strcmp(a, "--shutdown-wait-ms") == 0)
            cfg->shutdown_wait_ms = (int)int_arg(a, v, 1, 3600000);
        else if (strcmp(a, "--seed") == 0)
            cfg->seed = (unsigned)int_arg(a, v, 0, UINT32_MAX);
        else
            usage();
    }
    if (cfg->port < 0)
        usage();
}

static void raise_nofile(int need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        die("getrlimit: %s", strerror(errno));
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= (rlim_t)need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)need) {
        struct rlimit more = {(rlim_t)need, (rlim_t)need}; /* works as root */
        if (setrlimit(RLIMIT_NOFILE, &more) == 0)
            return;
        die("%d connections need %d file descriptors; the hard limit is %llu "
            "(raise it, or use --connections)",
            nconns, need, (unsigned long long)rl.rlim_max);
    }
    rl.rlim_cur = (rlim_t)need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        die("setrlimit(RLIMIT_NOFILE, %d): %s", need, strerror(errno));
}

int main(int argc, char **argv)
{
    struct config cfg;
    parse_args(argc, argv, &cfg);
    signal(SIGPIPE, SIG_IGN);
    nconns = cfg.connections;
    raise_nofile(nconns + 64);

    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg.port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    /* The monitor connection: no idle timeout; tells us the server's settings. */
    ctl_fd = connect_blocking(&addr);
    char line[1024];
    if (!ctl_ask("MONITOR\nCONFIG\n", "CONFIG ", line, sizeof line))
        die("no CONFIG answer from the server");
    idle_ns = stat_get(line, "idle_ms") * MS;
    tick_ns = stat_get(line, "tick_ms") * MS;
    request_timeout_ns = stat_get(line, "request_timeout_ms") * MS;
    heartbeat_ms = (int)stat_get(line, "heartbeat_ms");
    if (idle_ns <= 0 || tick_ns <= 0 || request_timeout_ns <= 0 || heartbeat_ms <= 0)
        die("cannot read the server's CONFIG line: %s", line);
    interval_ns = cfg.interval_ms > 0 ? cfg.interval_ms * MS : idle_ns / 4;
    if (interval_ns < MS)
        interval_ns = MS;
    int64_t duration_ns = cfg.duration_ms >= 0 ? cfg.duration_ms * MS : 3 * idle_ns;
    int64_t ramp_ns = cfg.ramp_ms >= 0 ? cfg.ramp_ms * MS : idle_ns / 2;
    int64_t slack_ns = cfg.slack_ms * MS;
    int64_t limit_ns = tick_ns + slack_ns; /* allowed lateness */
    if (request_timeout_ns >= idle_ns - interval_ns)
        fprintf(stderr,
                "idle_client: warning: request timeout %" PRId64 " ms + interval %" PRId64
                " ms >= idle timeout: active connections may go idle\n",
                request_timeout_ns / MS, interval_ns / MS);

    conns = calloc((size_t)nconns, sizeof *conns);
    idle_late = calloc((size_t)nconns, sizeof *idle_late);
    idle_late_server = calloc((size_t)nconns, sizeof *idle_late_server);
    if (conns == NULL || idle_late == NULL || idle_late_server == NULL)
        die("out of memory");

    srand(cfg.seed);
    long n_idle_later = 0;
    for (int i = 0; i < nconns; i++) {
        struct cc *c = &conns[i];
        c->fd = -1;
        c->next_id = 1;
        /* Spread the active ones evenly (P of every 100), the idle ones alternate. */
        bool active = (long)(i + 1) * cfg.active_pct / 100 > (long)i * cfg.active_pct / 100;
        if (active) {
            c->kind = ACTIVE;
            c->sends_left = -1;
            n_active_total++;
        } else if (n_idle_total++ % 2 == 0) {
            c->kind = IDLE;
        } else {
            c->kind = IDLE_LATER;
            c->sends_left = 1 + rand() % 4;
            n_idle_later++;
        }
    }

    printf("idle_client: %d connections to 127.0.0.1:%d: %ld active (a request every %" PRId64
           " ms), %ld idle (%ld silent once connected, %ld after 1-4 requests)\n",
           nconns, cfg.port, n_active_total, interval_ns / MS, n_idle_total,
           n_idle_total - n_idle_later, n_idle_later);
    printf("idle_client: server: idle timeout T %" PRId64 " ms, tick %" PRId64
           " ms, request timeout R %" PRId64 " ms; pass window for an idle close: "
           "T .. T + tick + slack = %" PRId64 " .. %" PRId64 " ms after its last data\n",
           idle_ns / MS, tick_ns / MS, request_timeout_ns / MS, idle_ns / MS,
           (idle_ns + limit_ns) / MS);
    fflush(stdout);

    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        die("epoll_create1: %s", strerror(errno));

    const int max_connecting = 128;
    int next_connect = 0, connecting = 0;
    int64_t t0 = now_ns(), next_progress = t0 + cfg.progress_ms * MS;
    int64_t all_connected_ns = 0, last_wait_end = 0;
    struct epoll_event events[256];

    /* ------------------------------------------------ the run */
    for (;;) {
        /* Connections arrive over the ramp, as they would at a real server. */
        int64_t next_connect_ns = 0;
        while (connecting < max_connecting && next_connect < nconns) {
            next_connect_ns = t0 + ramp_ns * next_connect / nconns;
            if (next_connect_ns > now_ns())
                break;
            start_connect(&conns[next_connect++], &addr);
            connecting++;
            next_connect_ns = 0;
        }
        if (next_connect == nconns && connecting == 0 && all_connected_ns == 0)
            all_connected_ns = now_ns();

        int64_t now = now_ns();
        while (qhead >= 0 && conns[qhead].due_ns <= now)
            request_due(queue_pop());
        if (now >= next_progress) {
            progress(t0);
            next_progress += cfg.progress_ms * MS;
            if (next_progress < now)
                next_progress = now + cfg.progress_ms * MS;
        }

        /* Done when every idle connection is closed or past its window, and
         * the active ones have been kept busy for the whole duration. */
        if (all_connected_ns != 0 && now - all_connected_ns >= duration_ns) {
            bool idle_done = true;
            for (int i = 0; i < nconns && idle_done; i++) {
                struct cc *c = &conns[i];
                if (c->kind != ACTIVE && c->state == OPEN &&
                    (c->sends_left > 0 || now <= c->last_send_ns + idle_ns + limit_ns))
                    idle_done = false;
            }
            if (idle_done)
                break;
        }

        int64_t wake = next_progress;
        if (qhead >= 0 && conns[qhead].due_ns < wake)
            wake = conns[qhead].due_ns;
        if (next_connect_ns != 0 && next_connect_ns < wake)
            wake = next_connect_ns;
        if (wake > now + 100 * MS)
            wake = now + 100 * MS;
        int timeout_ms = wake > now ? (int)((wake - now + MS - 1) / MS) : 0;
        if (last_wait_end != 0 && now - last_wait_end > loop_busy_max_ns)
            loop_busy_max_ns = now - last_wait_end;
        int n = epoll_wait(epfd, events, 256, timeout_ms);
        int64_t woke = now_ns();
        if (woke - now - timeout_ms * MS > loop_oversleep_max_ns)
            loop_oversleep_max_ns = woke - now - timeout_ms * MS;
        last_wait_end = woke;
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            struct cc *c = &conns[events[i].data.u32];
            if (c->state == CONNECTING) {
                connecting--;
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err != 0) {
                    if (n_connect_failed++ == 0)
                        fprintf(stderr, "idle_client: connect: %s\n", strerror(err));
                    c->state = CLOSED;
                    c->reason = R_CONNECT_FAILED;
                    close(c->fd);
                    c->fd = -1;
                    continue;
                }
                on_connected(c);
            } else if (c->state == OPEN) {
                on_readable(c, woke);
            }
        }
    }
    int64_t run_end = now_ns();
    long idle_missing = 0; /* idle and still open after their window */
    for (int i = 0; i < nconns; i++)
        if (conns[i].kind != ACTIVE && conns[i].state == OPEN)
            idle_missing++;

    /* ------------------------------------------------ shutdown */
    char final_stats[1024] = "";
    bool have_stats = ctl_ask("STATS\n", "STATS ", final_stats, sizeof final_stats);
    shutting_down = true;
    long open_at_shutdown = 0, bye_shutdown = 0, closed_at_shutdown = 0;
    int64_t shutdown_ms = -1;
    for (int i = 0; i < nconns; i++)
        if (conns[i].state == OPEN || conns[i].state == CONNECTING)
            open_at_shutdown++;
    if (cfg.server_pid > 0) {
        /* The monitor connection is closed too: watch it like the others. */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = UINT32_MAX};
        epoll_ctl(epfd, EPOLL_CTL_ADD, ctl_fd, &ev);
        bool ctl_open = true, ctl_bye = ctl_len > 0 && strstr(ctl_buf, "BYE shutdown");
        int64_t sig_ns = now_ns();
        if (kill((pid_t)cfg.server_pid, SIGTERM) != 0)
            die("kill(%ld, SIGTERM): %s", cfg.server_pid, strerror(errno));
        int64_t give_up = sig_ns + cfg.shutdown_wait_ms * MS;
        while ((n_open > 0 || ctl_open) && now_ns() < give_up) {
            int n = epoll_wait(epfd, events, 256, 100);
            int64_t woke = now_ns();
            for (int i = 0; i < n; i++) {
                if (events[i].data.u32 == UINT32_MAX) {
                    ssize_t r = read(ctl_fd, ctl_buf, sizeof ctl_buf - 1);
                    if (r > 0) {
                        ctl_buf[r] = '\0';
                        if (strstr(ctl_buf, "BYE shutdown"))
                            ctl_bye = true;
                    } else if (r == 0 || errno != EAGAIN) {
                        ctl_open = false;
                        epoll_ctl(epfd, EPOLL_CTL_DEL, ctl_fd, NULL);
                    }
                    continue;
                }
                struct cc *c = &conns[events[i].data.u32];
                if (c->state == OPEN)
                    on_readable(c, woke);
                else if (c->state == CONNECTING)
                    conn_closed(c, R_CONNECT_FAILED, woke);
            }
        }
        shutdown_ms = (now_ns() - sig_ns) / MS;
        for (int i = 0; i < nconns; i++) {
            struct cc *c = &conns[i];
            if (c->seen_close_ns >= sig_ns && c->state == CLOSED) {
                closed_at_shutdown++;
                if (c->reason == R_SHUTDOWN)
                    bye_shutdown++;
            }
        }
        if (!ctl_open) {
            closed_at_shutdown++;
            open_at_shutdown++;
            if (ctl_bye)
                bye_shutdown++;
        } else {
            open_at_shutdown++;
        }
    }
    for (int i = 0; i < nconns; i++)
        if (conns[i].state == OPEN || conns[i].state == CONNECTING)
            conn_closed(&conns[i], R_BY_US, now_ns());
    close(ctl_fd);
    close(epfd);

    /* ------------------------------------------------ verdict */
    long idle_early = 0, idle_early_server = 0, idle_late_count = 0;
    for (long i = 0; i < n_idle_late; i++) {
        if (idle_late[i] < 0)
            idle_early++;
        if (idle_late_server[i] < 0)
            idle_early_server++;
        if (idle_late[i] > limit_ns)
            idle_late_count++;
    }
    long req_late_count = 0;
    for (long i = 0; i < n_req_late; i++)
        if (req_late[i] > limit_ns)
            req_late_count++;
    qsort(idle_late, (size_t)n_idle_late, sizeof *idle_late, cmp_i64);
    qsort(idle_late_server, (size_t)n_idle_late, sizeof *idle_late_server, cmp_i64);
    qsort(req_late, (size_t)n_req_late, sizeof *req_late, cmp_i64);

    /* Expected: one TIMEOUT per answered slow request; 1 in 10 of the active requests. */
    /* The heartbeat re-arms itself when it runs, so its period is H plus its
     * lateness: never more beats than uptime / H, and the last one recent. */
    long uptime_ms = have_stats ? (long)stat_get(final_stats, "uptime_ms") : 0;
    long hb = have_stats ? (long)stat_get(final_stats, "heartbeats") : -1;
    long hb_age_ms = have_stats ? (long)stat_get(final_stats, "heartbeat_age_ms") : -1;
    bool hb_ok = !have_stats || (hb >= 1 && hb <= uptime_ms / heartbeat_ms + 1 && hb_age_ms >= 0 &&
                                 hb_age_ms <= heartbeat_ms + limit_ns / MS);
    /* Every connection (the monitor too) sends data once connected, and the
     * server pushes the idle timeout back on each read that brings data: at
     * least one reschedule (true or false) per connection, or the server is
     * not using hwt_timeout_reschedule. */
    long resch = have_stats ? (long)stat_get(final_stats, "idle_reschedules") : -1;
    long resch_false = have_stats ? (long)stat_get(final_stats, "idle_reschedules_false") : -1;
    long idle_timeouts = have_stats ? (long)stat_get(final_stats, "idle_timeouts") : -1;
    bool resch_ok = !have_stats || (resch >= 0 && resch_false >= 0 &&
                                    resch + resch_false >= nconns - n_connect_failed + 1);
    bool shutdown_ok = cfg.server_pid <= 0 ||
                       (bye_shutdown == open_at_shutdown && closed_at_shutdown == open_at_shutdown);

    bool pass = n_connect_failed == 0 && n_idle_closed == n_idle_total && idle_early == 0 &&
                idle_early_server == 0 && idle_late_count == 0 && idle_missing == 0 &&
                n_active_closed_bug == 0 && n_unexpected_close == 0 && n_wrong == 0 &&
                n_early_answers == 0 && req_late_count == 0 && hb_ok && resch_ok && shutdown_ok &&
                have_stats;

    printf("\nidle_client: summary\n");
    printf("  connections   %d opened over %.2f s (%ld active, %ld idle), %ld failed to connect\n",
           nconns, (double)((all_connected_ns ? all_connected_ns : run_end) - t0) / 1e9,
           n_active_total, n_idle_total, n_connect_failed);
    printf("  idle closes   %ld/%ld closed by the server's idle timeout; %ld early, %ld late,"
           " %ld never closed, %ld closed otherwise\n",
           n_idle_closed, n_idle_total, idle_early + idle_early_server, idle_late_count,
           idle_missing, n_unexpected_close);
    printf("  lateness      p50 %.1f ms  p99 %.1f ms  max %.1f ms  (seen by the client, after "
           "T = %" PRId64 " ms; allowed 0 .. tick + slack = %" PRId64 " ms)\n",
           pct_ms(idle_late, n_idle_late, 0.5), pct_ms(idle_late, n_idle_late, 0.99),
           pct_ms(idle_late, n_idle_late, 1.0), idle_ns / MS, limit_ns / MS);
    printf("                p50 %.1f ms  p99 %.1f ms  max %.1f ms  (the server's close stamps)\n",
           pct_ms(idle_late_server, n_idle_late, 0.5), pct_ms(idle_late_server, n_idle_late, 0.99),
           pct_ms(idle_late_server, n_idle_late, 1.0));
    printf("  active        %ld/%ld kept open for %.1f s, %ld closed by the server while active",
           n_active_total - n_active_closed_bug - n_active_closed_stall, n_active_total,
           (double)(run_end - (all_connected_ns ? all_connected_ns : t0)) / 1e9,
           n_active_closed_bug);
    if (n_active_closed_stall > 0)
        printf(" (+%ld the client let go quiet for T: its loop stalled, not a server error)",
               n_active_closed_stall);
    printf("\n");
    printf(
        "  requests      %ld sent, %ld answered, %ld request timeouts fired as expected "
        "(R = %" PRId64 " ms, lateness p99 %.1f ms, max %.1f ms); %ld wrong answers, %ld early\n",
        n_sent, n_answered, n_timeouts, request_timeout_ns / MS, pct_ms(req_late, n_req_late, 0.99),
        pct_ms(req_late, n_req_late, 1.0), n_wrong, n_early_answers);
    if (wrong_example[0] != '\0')
        printf("                first wrong: %s\n", wrong_example);
    if (have_stats)
        printf("  idle resets   %ld reads pushed an idle timeout back with hwt_timeout_reschedule"
               " (no cancel + new timeout), %ld returned false (it had just fired: the server "
               "scheduled a new one); %ld idle timeouts scheduled in all%s\n",
               resch, resch_false, idle_timeouts,
               resch_ok ? "" : " - fewer reschedules than connections: NOT as expected");
    if (have_stats)
        printf("  server timer  pending %lld, scheduled %lld, expired %lld, cancelled %lld, "
               "ticks %lld, wakeups %lld, worst task lateness %.1f ms; heartbeat ran %ld times "
               "in %.1f s (every %d ms, last %ld ms ago)%s\n",
               stat_get(final_stats, "pending"), stat_get(final_stats, "scheduled"),
               stat_get(final_stats, "expired"), stat_get(final_stats, "cancelled"),
               stat_get(final_stats, "ticks"), stat_get(final_stats, "wakeups"),
               (double)stat_get(final_stats, "late_max_us") / 1e3, hb, (double)uptime_ms / 1e3,
               heartbeat_ms, hb_age_ms, hb_ok ? "" : " - NOT as expected");
    else
        printf("  server timer  no STATS answer\n");
    if (cfg.server_pid > 0)
        printf("  shutdown      SIGTERM: %ld/%ld open connections closed by the server with "
               "\"BYE shutdown\" in %" PRId64 " ms\n",
               bye_shutdown, open_at_shutdown, shutdown_ms);
    printf("  client loop   longest busy stretch %.1f ms, worst oversleep %.1f ms\n",
           (double)loop_busy_max_ns / 1e6, (double)loop_oversleep_max_ns / 1e6);
    printf("  result        %s\n", pass ? "PASS" : "FAIL");

    free(conns);
    free(idle_late);
    free(idle_late_server);
    free(req_late);
    return pass ? 0 : 1;
}

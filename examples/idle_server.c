/*
 * idle_server.c - a TCP server whose epoll event threads share ONE hwt_timer.
 *
 *   idle_server [--port N] [--threads N] [--idle-ms T] [--tick-ms T]
 *               [--request-timeout-ms R] [--heartbeat-ms H] [--port-file FILE]
 *               [--progress]
 *
 * It listens on 127.0.0.1 and shows the three ways a server uses a timer:
 *
 *   1. Idle timeout per connection (Netty's IdleStateHandler, reader idle):
 *      every read that brings data pushes the connection's idle timeout back
 *      to T from now with hwt_timeout_reschedule - the same timeout, msg and
 *      handle, no cancel + new timeout per read (see conn_touch). When it
 *      fires, the connection is closed with "BYE idle <CLOCK_MONOTONIC ns>\n".
 *   2. Request timeout per request: "REQ <id> <work_ms>\n" schedules a timeout
 *      of R ms; work_ms 0 is answered at once ("OK <id>"), otherwise the
 *      answer is produced by a second timeout after work_ms (standing in for
 *      a slow backend). Writing the answer cancels the request timeout; if the
 *      request timeout fires first the answer is "TIMEOUT <id>" and the work
 *      is cancelled instead.
 *   3. A heartbeat that re-arms itself from inside its own task (the pattern
 *      of Dubbo's HeartbeatTimerTask): hwt_new_timeout(hwt_timeout_timer(t), ...).
 *
 * Other commands: "HELLO" (activity only), "MONITOR" (this connection has no
 * idle timeout), "CONFIG" and "STATS" (one line each, key=value pairs).
 * SIGINT or SIGTERM stops it cleanly; it exits 0 if nothing leaked.
 *
 * Threads and ownership - the part worth copying
 * -----------------------------------------------
 * A connection belongs to the event thread that accepted it: only that thread
 * reads, writes, closes it or touches its fields. Timer tasks run on the
 * timer's worker thread, so they never touch a connection. Each timeout's
 * argument is a `struct msg` that holds one reference on its connection. The
 * task (on_fire) only appends the msg to its event thread's queue (a mutex-
 * protected list plus an eventfd); the event thread then decides what to do,
 * on its own thread, and drops the msg.
 *
 * The event thread checks that the message is still current before acting:
 * an idle message carries the generation of the idle timeout that sent it
 * and is ignored if a newer one replaced it (data arrived just after it fired:
 * the reschedule returned false and a new one was scheduled); a request
 * message carries the request id (its cancel can lose the race against a
 * timeout that is already running). A connection that was closed meanwhile
 * is only kept alive by the reference, and the message is ignored.
 *
 * Every msg ends exactly one way, like the timeout that carries it:
 *   - the timeout ran: on_fire queued the msg, the event thread frees it;
 *   - hwt_timeout_cancel() returned true: on_cancelled (on the worker) frees it;
 *   - hwt_stop() handed the timeout back: main frees it (see shutdown()).
 * A connection is freed when its last reference goes, on whichever thread.
 *
 * Shutdown order: hwt_stop() first (after it returns no task runs and new
 * timeouts fail with HWT_ESTOPPED, which the event threads accept quietly),
 * free the handed-back msgs, then stop the event threads (each closes its
 * connections with "BYE shutdown" and frees what is left in its queue), join
 * them and destroy the timer. Live connections and msgs are counted; both
 * must be 0 at the end.
 */
#define _GNU_SOURCE
#include <hwtimer.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- config */

struct config {
    int port;
    int threads;
    int idle_ms;
    int tick_ms;
    int request_timeout_ms;
    int heartbeat_ms;
    const char *port_file;
    bool progress;
};

/* ----------------------------------------------------------------- types */

struct loop;

enum msg_kind { MSG_IDLE, MSG_REQUEST_TIMEOUT, MSG_WORK_DONE };

/* The argument of every connection timeout; see the top of the file. */
struct msg {
    struct msg *next;
    enum msg_kind kind;
    struct conn *conn; /* one reference */
    uint64_t seq;      /* MSG_IDLE: conn->idle_gen; otherwise the request id */
};

struct conn {
    atomic_int refs;   /* the loop's (while open) + one per msg */
    struct loop *loop; /* immutable: the owner thread */
    /* Everything below belongs to the owner thread. */
    int fd;
    bool closed;
    bool monitor;             /* no idle timeout */
    struct conn *prev, *next; /* the loop's open connections */
    struct conn *zombie_next; /* closed during this epoll batch */
    uint64_t idle_gen;        /* the current idle timeout's: +1 per new one, not per move */
    hwt_timeout *idle;        /* our handle on the idle timeout, or NULL */
    bool busy;                /* a request is in flight */
    uint64_t req_id;
    hwt_timeout *request_timeout; /* handles on the in-flight request's timeouts */
    hwt_timeout *work;
    size_t in_len;
    char in[512];
};

struct server;

struct loop {
    struct server *server;
    pthread_t thread;
    int index;
    int epfd;
    int wakefd;              /* eventfd: "the queue is not empty" or "stop" */
    pthread_mutex_t lock;    /* protects head/tail */
    struct msg *head, *tail; /* messages from timer tasks */
    atomic_bool stopping;
    /* Owner thread only: */
    struct conn *conns; /* open connections */
    struct conn *zombies;
};

struct server {
    struct config cfg;
    hwt_timer *timer;
    int listen_fd;
    struct loop *loops;
    int64_t start_ns;
    int64_t next_progress_ns; /* the heartbeat task's own */
    /* Counters, any thread. */
    atomic_long open;
    atomic_ulong accepted, closed_idle, closed_peer, closed_error, closed_shutdown;
    atomic_ulong requests, answered, request_timeouts, heartbeats;
    /* Idle timeouts: created (one per connection, plus one per false
     * reschedule), pushed back by a read, and reschedules that returned false. */
    atomic_ulong idle_timeouts, idle_reschedules, idle_reschedules_false;
    _Atomic int64_t last_heartbeat_ns;
};

/* Objects alive, for the leak check at exit. */
static atomic_long conns_live, msgs_live;

/* Sentinels stored in epoll_event.data.ptr. */
static char listen_tag, wake_tag;

/* --------------------------------------------------------------- helpers */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("idle_server: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void log_timer_error(const char *what, int rc)
{
    fprintf(stderr, "idle_server: %s: %s\n", what, hwt_strerror(rc));
}

static void conn_unref(struct conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        free(c);
        atomic_fetch_sub(&conns_live, 1);
    }
}

static struct msg *msg_new(enum msg_kind kind, struct conn *c, uint64_t seq)
{
    struct msg *m = malloc(sizeof *m);
    if (m == NULL)
        return NULL;
    m->next = NULL;
    m->kind = kind;
    m->conn = c;
    m->seq = seq;
    atomic_fetch_add(&c->refs, 1);
    atomic_fetch_add(&msgs_live, 1);
    return m;
}

static void msg_free(struct msg *m)
{
    conn_unref(m->conn);
    free(m);
    atomic_fetch_sub(&msgs_live, 1);
}

/* ------------------------------------------- timer tasks (worker thread) */

/* Hands the msg to the connection's event thread; never touches the
 * connection itself (conn->loop is immutable). */
static void loop_post(struct loop *l, struct msg *m)
{
    pthread_mutex_lock(&l->lock);
    bool was_empty = l->head == NULL;
    if (was_empty)
        l->head = m;
    else
        l->tail->next = m;
    l->tail = m;
    pthread_mutex_unlock(&l->lock);
    if (was_empty) { /* the consumer empties the queue after reading the eventfd */
        uint64_t one = 1;
        ssize_t r = write(l->wakefd, &one, sizeof one);
        (void)r; /* cannot fail short of a counter overflow */
    }
}

static void on_fire(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    struct msg *m = arg;
    loop_post(m->conn->loop, m);
}

static void on_cancelled(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    msg_free(arg);
}

static const hwt_task conn_task = {.run = on_fire, .cancelled = on_cancelled};

static void print_stats_line(FILE *out, struct server *s, bool progress);

/* Re-arms itself from inside the task, as Dubbo's heartbeat does. */
static void heartbeat(hwt_timeout *timeout, void *arg)
{
    struct server *s = arg;
    atomic_fetch_add(&s->heartbeats, 1);
    atomic_store(&s->last_heartbeat_ns, now_ns());
    if (s->cfg.progress && now_ns() >= s->next_progress_ns) { /* about once a second */
        s->next_progress_ns = now_ns() + 1000000000;
        print_stats_line(stderr, s, true);
    }
    int rc = hwt_new_timeout(hwt_timeout_timer(timeout), heartbeat, s, s->cfg.heartbeat_ms,
                             HWT_MILLISECONDS, NULL);
    if (rc != 0 && rc != HWT_ESTOPPED) /* ESTOPPED: we are shutting down */
        log_timer_error("heartbeat: hwt_new_timeout", rc);
}

/* ---------------------------------------------- connections (event thread) */

/* Schedules a timeout whose msg goes back to c's thread; NULL if the timer is
 * stopped (shutdown) or out of memory. */
static hwt_timeout *conn_schedule(struct conn *c, enum msg_kind kind, uint64_t seq, int64_t ms)
{
    struct msg *m = msg_new(kind, c, seq);
    if (m == NULL)
        return NULL;
    hwt_timeout *t;
    int rc = hwt_new_timeout_task(c->loop->server->timer, &conn_task, m, ms, HWT_MILLISECONDS, &t);
    if (rc != 0) {
        msg_free(m); /* not scheduled: the msg is still ours */
        if (rc != HWT_ESTOPPED)
            log_timer_error("hwt_new_timeout_task", rc);
        return NULL;
    }
    return t;
}

/* Cancels (if still pending) and lets go of our handle. If the cancel wins,
 * on_cancelled frees the msg; if the task already ran, the msg is in our
 * queue and will be found stale; if hwt_stop handed it back, main frees it. */
static void timeout_drop(hwt_timeout **t)
{
    if (*t != NULL) {
        hwt_timeout_cancel(*t);
        hwt_timeout_release(*t);
        *t = NULL;
    }
}

/* A new idle timeout of a new generation: a msg of an older one is stale. */
static void conn_idle_schedule(struct conn *c)
{
    struct server *s = c->loop->server;
    c->idle_gen++;
    c->idle = conn_schedule(c, MSG_IDLE, c->idle_gen, s->cfg.idle_ms);
    if (c->idle != NULL)
        atomic_fetch_add(&s->idle_timeouts, 1);
}

/* Data arrived: the connection is not idle, its deadline moves to T from now.
 *
 * hwt_timeout_reschedule moves the pending timeout itself: a clock read and
 * a compare-and-swap, no allocation, no new handle, nothing queued for the
 * worker (which files the timeout again when its old slot comes due). Its
 * msg, and the msg's reference on the connection, stay as they are. The
 * cancel + new timeout it replaces cost an allocation, a new handle and two
 * hand-offs to the worker on every read.
 *
 * False means nothing was pending to move: the timeout fired just before
 * this read (the connection had been quiet for T; its msg is in our queue or
 * on its way) or the timer is stopped (shutdown). The peer has just proved
 * it is alive and may be waiting for an answer to what it sent, so rather
 * than close, give it a new idle timeout; its new generation makes the fired
 * one's msg stale (conn_message ignores it). When the timer is stopped the
 * new timeout fails quietly and the shutdown closes the connection. */
static void conn_touch(struct conn *c)
{
    struct server *s = c->loop->server;
    if (c->monitor)
        return;
    if (c->idle != NULL) {
        if (hwt_timeout_reschedule(c->idle, s->cfg.idle_ms, HWT_MILLISECONDS)) {
            atomic_fetch_add(&s->idle_reschedules, 1);
            return;
        }
        atomic_fetch_add(&s->idle_reschedules_false, 1);
        hwt_timeout_release(c->idle); /* it ended: the handle is all we hold */
        c->idle = NULL;
    }
    conn_idle_schedule(c); /* also when an earlier one could not be scheduled */
}

enum close_reason { CLOSE_IDLE, CLOSE_PEER, CLOSE_ERROR, CLOSE_SHUTDOWN };

static void conn_close(struct conn *c, enum close_reason why)
{
    struct server *s = c->loop->server;
    c->closed = true;
    timeout_drop(&c->idle);
    timeout_drop(&c->request_timeout);
    timeout_drop(&c->work);
    close(c->fd); /* also removes it from the epoll set */
    c->fd = -1;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        c->loop->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    /* Events for c may still be in this epoll batch: free it after the batch. */
    c->zombie_next = c->loop->zombies;
    c->loop->zombies = c;
    atomic_fetch_sub(&s->open, 1);
    switch (why) {
    case CLOSE_IDLE: atomic_fetch_add(&s->closed_idle, 1); break;
    case CLOSE_PEER: atomic_fetch_add(&s->closed_peer, 1); break;
    case CLOSE_ERROR: atomic_fetch_add(&s->closed_error, 1); break;
    case CLOSE_SHUTDOWN: atomic_fetch_add(&s->closed_shutdown, 1); break;
    }
}

/* Replies are a few dozen bytes and the peer reads them: a short write means
 * a peer that does not read, which this server simply closes. */
static bool conn_write(struct conn *c, const char *fmt, ...)
{
    char buf[1024]; /* the STATS line is the longest */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = (int)sizeof buf - 1;
    ssize_t w;
    do
        w = send(c->fd, buf, (size_t)n, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w != n) {
        conn_close(c, CLOSE_ERROR);
        return false;
    }
    return true;
}

/* Writes the answer of the in-flight request; writing it cancels its timeouts. */
static void conn_answer(struct conn *c, const char *word)
{
    struct server *s = c->loop->server;
    uint64_t id = c->req_id;
    c->busy = false;
    timeout_drop(&c->request_timeout);
    timeout_drop(&c->work);
    atomic_fetch_add(&s->answered, 1);
    conn_write(c, "%s %" PRIu64 "\n", word, id);
}

static void conn_request(struct conn *c, uint64_t id, long work_ms)
{
    struct server *s = c->loop->server;
    if (c->busy) {
        conn_write(c, "ERR busy %" PRIu64 "\n", id);
        return;
    }
    atomic_fetch_add(&s->requests, 1);
    c->busy = true;
    c->req_id = id;
    c->request_timeout = conn_schedule(c, MSG_REQUEST_TIMEOUT, id, s->cfg.request_timeout_ms);
    if (work_ms <= 0)
        conn_answer(c, "OK");
    else
        c->work = conn_schedule(c, MSG_WORK_DONE, id, work_ms);
}

static void format_stats(struct server *s, char *buf, size_t size)
{
    hwt_stats st;
    hwt_timer_stats(s->timer, &st);
    int64_t now = now_ns(), last_beat = atomic_load(&s->last_heartbeat_ns);
    snprintf(buf, size,
             "STATS uptime_ms=%" PRId64 " open=%ld accepted=%lu closed_idle=%lu"
             " closed_peer=%lu closed_error=%lu requests=%lu answered=%lu"
             " request_timeouts=%lu heartbeats=%lu heartbeat_age_ms=%" PRId64 " pending=%" PRId64
             " scheduled=%" PRIu64 " expired=%" PRIu64 " cancelled=%" PRIu64 " ticks=%" PRIu64
             " wakeups=%" PRIu64 " late_max_us=%" PRIu64
             " idle_timeouts=%lu idle_reschedules=%lu idle_reschedules_false=%lu",
             (now - s->start_ns) / 1000000, atomic_load(&s->open), atomic_load(&s->accepted),
             atomic_load(&s->closed_idle), atomic_load(&s->closed_peer),
             atomic_load(&s->closed_error), atomic_load(&s->requests), atomic_load(&s->answered),
             atomic_load(&s->request_timeouts), atomic_load(&s->heartbeats),
             (now - (last_beat ? last_beat : s->start_ns)) / 1000000, st.pending, st.scheduled,
             st.expired, st.cancelled, st.ticks, st.wakeups, st.late_max_ns / 1000,
             atomic_load(&s->idle_timeouts), atomic_load(&s->idle_reschedules),
             atomic_load(&s->idle_reschedules_false));
}

static void print_stats_line(FILE *out, struct server *s, bool progress)
{
    hwt_stats st;
    hwt_timer_stats(s->timer, &st);
    fprintf(out,
            "idle_server%s [%6.1fs] open %ld  closed by idle timeout %lu  idle reschedules %lu"
            " (false %lu)  requests %lu (timed out %lu)  timer: pending %" PRId64
            " wakeups %" PRIu64 " ticks %" PRIu64 " late_max %.1f ms\n",
            progress ? "" : ":", (double)(now_ns() - s->start_ns) / 1e9, atomic_load(&s->open),
            atomic_load(&s->closed_idle), atomic_load(&s->idle_reschedules),
            atomic_load(&s->idle_reschedules_false), atomic_load(&s->requests),
            atomic_load(&s->request_timeouts), st.pending, st.wakeups, st.ticks,
            (double)st.late_max_ns / 1e6);
    fflush(out);
}

static void conn_line(struct conn *c, char *line)
{
    struct server *s = c->loop->server;
    uint64_t id;
    long work_ms;
    if (sscanf(line, "REQ %" SCNu64 " %ld", &id, &work_ms) == 2) {
        conn_request(c, id, work_ms);
    } else if (strcmp(line, "HELLO") == 0) {
        /* activity only */
    } else if (strcmp(line, "MONITOR") == 0) {
        c->monitor = true;
        timeout_drop(&c->idle);
    } else if (strcmp(line, "CONFIG") == 0) {
        conn_write(c,
                   "CONFIG idle_ms=%d tick_ms=%d request_timeout_ms=%d heartbeat_ms=%d"
                   " threads=%d pid=%ld\n",
                   s->cfg.idle_ms, s->cfg.tick_ms, s->cfg.request_timeout_ms, s->cfg.heartbeat_ms,
                   s->cfg.threads, (long)getpid());
    } else if (strcmp(line, "STATS") == 0) {
        char buf[900]; /* the client reads lines of up to 1023 bytes */
        format_stats(s, buf, sizeof buf);
        conn_write(c, "%s\n", buf);
    } else {
        conn_write(c, "ERR unknown command\n");
    }
}

static void conn_readable(struct conn *c)
{
    ssize_t r;
    do
        r = read(c->fd, c->in + c->in_len, sizeof c->in - 1 - c->in_len);
    while (r < 0 && errno == EINTR);
    if (r == 0 || (r < 0 && errno != EAGAIN)) {
        conn_close(c, r == 0 ? CLOSE_PEER : CLOSE_ERROR);
        return;
    }
    if (r < 0)
        return;
    conn_touch(c); /* data arrived: push the idle timeout back (IdleStateHandler) */
    c->in_len += (size_t)r;
    c->in[c->in_len] = '\0';
    char *start = c->in, *nl;
    while (!c->closed && (nl = strchr(start, '\n')) != NULL) {
        *nl = '\0';
        if (nl > start && nl[-1] == '\r')
            nl[-1] = '\0';
        conn_line(c, start);
        start = nl + 1;
    }
    if (c->closed)
        return;
    c->in_len -= (size_t)(start - c->in);
    memmove(c->in, start, c->in_len);
    if (c->in_len == sizeof c->in - 1) /* a line longer than the buffer */
        conn_close(c, CLOSE_ERROR);
}

static void conn_message(struct msg *m)
{
    struct conn *c = m->conn;
    struct server *s = c->loop->server;
    if (c->closed)
        return;
    switch (m->kind) {
    case MSG_IDLE:
        /* The current idle timeout: every read since pushed it back, so the
         * connection has been quiet for T. */
        if (m->seq == c->idle_gen && !c->monitor) {
            if (conn_write(c, "BYE idle %" PRId64 "\n", now_ns()))
                conn_close(c, CLOSE_IDLE);
        }
        break;
    case MSG_REQUEST_TIMEOUT:
        if (c->busy && c->req_id == m->seq) {
            atomic_fetch_add(&s->request_timeouts, 1);
            conn_answer(c, "TIMEOUT"); /* cancels the work */
        }
        break;
    case MSG_WORK_DONE:
        if (c->busy && c->req_id == m->seq)
            conn_answer(c, "OK"); /* cancels the request timeout */
        break;
    }
}

static void loop_drain(struct loop *l)
{
    uint64_t value;
    ssize_t r = read(l->wakefd, &value, sizeof value); /* first: see loop_post */
    (void)r;
    pthread_mutex_lock(&l->lock);
    struct msg *m = l->head;
    l->head = l->tail = NULL;
    pthread_mutex_unlock(&l->lock);
    while (m != NULL) {
        struct msg *next = m->next;
        conn_message(m);
        msg_free(m);
        m = next;
    }
}

static void loop_accept(struct loop *l)
{
    struct server *s = l->server;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                fprintf(stderr, "idle_server: accept: %s\n", strerror(errno));
            return; /* EAGAIN: another event thread took it */
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct conn *c = calloc(1, sizeof *c);
        if (c == NULL) {
            close(fd);
            continue;
        }
        atomic_init(&c->refs, 1);
        atomic_fetch_add(&conns_live, 1);
        c->loop = l;
        c->fd = fd;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            conn_unref(c);
            continue;
        }
        c->next = l->conns;
        if (l->conns != NULL)
            l->conns->prev = c;
        l->conns = c;
        atomic_fetch_add(&s->open, 1);
        atomic_fetch_add(&s->accepted, 1);
        conn_idle_schedule(c);
    }
}

static void loop_free_zombies(struct loop *l)
{
    while (l->zombies != NULL) {
        struct conn *c = l->zombies;
        l->zombies = c->zombie_next;
        conn_unref(c); /* the loop's reference */
    }
}

static void *loop_main(void *arg)
{
    struct loop *l = arg;
    struct epoll_event events[128];
    while (!atomic_load(&l->stopping)) {
        int n = epoll_wait(l->epfd, events, 128, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fail("epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            void *p = events[i].data.ptr;
            if (p == &wake_tag) {
                loop_drain(l);
            } else if (p == &listen_tag) {
                loop_accept(l);
            } else {
                struct conn *c = p;
                if (!c->closed)
                    conn_readable(c); /* reads 0 on EPOLLRDHUP/EPOLLHUP/EPOLLERR */
            }
        }
        loop_free_zombies(l);
    }
    /* Shutdown: the timer is stopped already, so nothing is posted any more. */
    while (l->conns != NULL) {
        struct conn *c = l->conns;
        conn_write(c, "BYE shutdown\n"); /* closes it itself if that fails */
        if (!c->closed)
            conn_close(c, CLOSE_SHUTDOWN);
    }
    loop_drain(l);
    loop_free_zombies(l);
    return NULL;
}

/* ------------------------------------------------------------------ main */

static void usage(void)
{
    fputs("usage: idle_server [--port N] [--threads N] [--idle-ms T] [--tick-ms T]\n"
          "                   [--request-timeout-ms R] [--heartbeat-ms H]\n"
          "                   [--port-file FILE] [--progress]\n",
          stderr);
    exit(2);
}

static int int_arg(const char *name, const char *value, long min, long max)
{
    char *end;
    errno = 0;
    long v = value ? strtol(value, &end, 10) : 0;
    if (value == NULL || errno != 0 || *end != '\0' || v < min || v > max)
        fail("%s wants an integer in %ld..%ld", name, min, max);
    return (int)v;
}

static void parse_args(int argc, char **argv, struct config *cfg)
{
    *cfg = (struct config){.port = 0,
                           .threads = 4,
                           .idle_ms = 1000,
                           .tick_ms = 10,
                           .request_timeout_ms = -1,
                           .heartbeat_ms = 1000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--port") == 0)
            cfg->port = int_arg(a, v, 0, 65535), i++;
        else if (strcmp(a, "--threads") == 0)
            cfg->threads = int_arg(a, v, 1, 64), i++;
        else if (strcmp(a, "--idle-ms") == 0)
            cfg->idle_ms = int_arg(a, v, 1, 3600000), i++;
        else if (strcmp(a, "--tick-ms") == 0)
            cfg->tick_ms = int_arg(a, v, 1, 60000), i++;
        else if (strcmp(a, "--request-timeout-ms") == 0)
            cfg->request_timeout_ms = int_arg(a, v, 1, 3600000), i++;
        else if (strcmp(a, "--heartbeat-ms") == 0)
            cfg->heartbeat_ms = int_arg(a, v, 1, 3600000), i++;
        else if (strcmp(a, "--port-file") == 0 && v != NULL)
            cfg->port_file = v, i++;
        else if (strcmp(a, "--progress") == 0)
            cfg->progress = true;
        else
            usage();
    }
    if (cfg->request_timeout_ms < 0)
        cfg->request_timeout_ms = cfg->idle_ms / 4 > 0 ? cfg->idle_ms / 4 : 1;
}

/* Room for many connections: up to 65536 descriptors if the hard limit (or,
 * as root, raising it) allows. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = 65536;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
        struct rlimit more = {want, want};
        if (setrlimit(RLIMIT_NOFILE, &more) == 0)
            return;
        want = rl.rlim_max;
    }
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = want;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static int listen_loopback(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fail("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        fail("bind 127.0.0.1:%d: %s", port, strerror(errno));
    if (listen(fd, 4096) != 0)
        fail("listen: %s", strerror(errno));
    return fd;
}

static int bound_port(int fd)
{
    struct sockaddr_in addr;
    socklen_t len = sizeof addr;
    if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0)
        fail("getsockname: %s", strerror(errno));
    return ntohs(addr.sin_port);
}

/* Stops the timer, then the event threads; returns the number of timeouts
 * hwt_stop handed back. */
static size_t shutdown_server(struct server *s)
{
    hwt_timeout **left;
    size_t count;
    int rc = hwt_stop(s->timer, &left, &count);
    if (rc != 0) {
        log_timer_error("hwt_stop", rc);
        count = 0;
        left = NULL;
    }
    /* Handed back: their callbacks were not called, so their arguments are
     * ours to free: the msgs of our connection timeouts, the heartbeat's
     * server (nothing to free). */
    for (size_t i = 0; i < count; i++)
        if (hwt_timeout_task(left[i]) == on_fire)
            msg_free(hwt_timeout_arg(left[i]));
    hwt_timeouts_release(left, count);

    for (int i = 0; i < s->cfg.threads; i++) {
        atomic_store(&s->loops[i].stopping, true);
        uint64_t one = 1;
        ssize_t r = write(s->loops[i].wakefd, &one, sizeof one);
        (void)r;
    }
    for (int i = 0; i < s->cfg.threads; i++) {
        struct loop *l = &s->loops[i];
        pthread_join(l->thread, NULL);
        close(l->epfd);
        close(l->wakefd);
        pthread_mutex_destroy(&l->lock);
    }
    close(s->listen_fd);
    return count;
}

int main(int argc, char **argv)
{
    struct server s = {0};
    parse_args(argc, argv, &s.cfg);
    setvbuf(stdout, NULL, _IOLBF, 0);
    raise_nofile();

    /* SIGINT/SIGTERM are taken by sigwait() in main: block them before any
     * thread exists so that every thread inherits the mask. Reset their
     * disposition first: a background job of a shell may start with SIGINT
     * ignored. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

    hwt_options opt;
    hwt_options_init(&opt);
    opt.tick_duration = (uint64_t)s.cfg.tick_ms;
    opt.tick_unit = HWT_MILLISECONDS;
    opt.thread_name = "idle-timer";
    int rc = hwt_timer_create(&s.timer, &opt);
    if (rc != 0)
        fail("hwt_timer_create: %s", hwt_strerror(rc));

    s.start_ns = now_ns();
    s.listen_fd = listen_loopback(s.cfg.port);
    int port = bound_port(s.listen_fd);

    s.loops = calloc((size_t)s.cfg.threads, sizeof *s.loops);
    if (s.loops == NULL)
        fail("out of memory");
    for (int i = 0; i < s.cfg.threads; i++) {
        struct loop *l = &s.loops[i];
        l->server = &s;
        l->index = i;
        pthread_mutex_init(&l->lock, NULL);
        atomic_init(&l->stopping, false);
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        l->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (l->epfd < 0 || l->wakefd < 0)
            fail("epoll/eventfd: %s", strerror(errno));
        struct epoll_event wake = {.events = EPOLLIN, .data.ptr = &wake_tag};
        /* Every thread accepts; EPOLLEXCLUSIVE wakes one of them per connection. */
        struct epoll_event acc = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = &listen_tag};
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wakefd, &wake) != 0 ||
            epoll_ctl(l->epfd, EPOLL_CTL_ADD, s.listen_fd, &acc) != 0)
            fail("epoll_ctl: %s", strerror(errno));
        if (pthread_create(&l->thread, NULL, loop_main, l) != 0)
            fail("pthread_create failed");
    }

    /* The heartbeat's first run; it schedules every later one itself. This
     * first timeout also starts the timer's worker. */
    rc = hwt_new_timeout(s.timer, heartbeat, &s, s.cfg.heartbeat_ms, HWT_MILLISECONDS, NULL);
    if (rc != 0)
        fail("hwt_new_timeout: %s", hwt_strerror(rc));

    if (s.cfg.port_file != NULL) { /* written in full, then renamed: never half-read */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", s.cfg.port_file);
        FILE *f = fopen(tmp, "w");
        if (f == NULL || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 ||
            rename(tmp, s.cfg.port_file) != 0)
            fail("cannot write %s: %s", s.cfg.port_file, strerror(errno));
    }
    printf("idle_server: listening on 127.0.0.1:%d (pid %ld): %d event threads, one hwt_timer "
           "(libhwtimer %s, tick %d ms), idle timeout %d ms, request timeout %d ms, heartbeat "
           "%d ms\n",
           port, (long)getpid(), s.cfg.threads, hwt_version(), s.cfg.tick_ms, s.cfg.idle_ms,
           s.cfg.request_timeout_ms, s.cfg.heartbeat_ms);

    int sig;
    while (sigwait(&stop_signals, &sig) != 0)
        ;
    int64_t t0 = now_ns();
    long open_before = atomic_load(&s.open);
    print_stats_line(stdout, &s, false);
    size_t handed_back = shutdown_server(&s);
    hwt_timer_destroy(s.timer);
    free(s.loops);

    long conns_left = atomic_load(&conns_live), msgs_left = atomic_load(&msgs_live);
    printf("idle_server: %s: hwt_stop handed back %zu timeouts (freed); closed %ld open "
           "connections with BYE shutdown; %lu closed by idle timeout in all; stopped in %.1f ms\n",
           sig == SIGINT ? "SIGINT" : "SIGTERM", handed_back, open_before,
           atomic_load(&s.closed_idle), (double)(now_ns() - t0) / 1e6);
    printf("idle_server: idle timeouts: %lu scheduled for %lu connections, pushed back %lu times "
           "by hwt_timeout_reschedule; %lu reschedules returned false (it had just fired: a new "
           "one was scheduled)\n",
           atomic_load(&s.idle_timeouts), atomic_load(&s.accepted),
           atomic_load(&s.idle_reschedules), atomic_load(&s.idle_reschedules_false));
    printf("idle_server: leak check: %ld connections, %ld timeout arguments left: %s\n", conns_left,
           msgs_left, conns_left == 0 && msgs_left == 0 ? "clean" : "LEAKED");
    return conns_left == 0 && msgs_left == 0 ? 0 : 1;
}

/*
 * fuzz_api.c - libFuzzer harness: the input is a sequence of API operations
 * against a short-tick timer (create with fuzzed options, schedule with
 * fuzzed delays and units - invalid ones included - cancel, release, stats,
 * executor runs, stop with or without a list, destroy), and the ownership
 * rule of SPEC §2 is checked at the end:
 *
 *   every successful schedule ended exactly once (ran; or cancelled - by a
 *   cancel that returned true, or dropped by the stop - with its cancelled
 *   callback called once; or handed back), a failed one left no trace, a
 *   cancel that returned true never ran, statistics add up, every result
 *   code is one the header allows for that call.
 *
 * Any violation prints what was wrong and abort()s, so libFuzzer keeps the
 * input. Leaks and memory errors are ASan's; undefined behaviour UBSan's.
 *
 * Built against the library's sources directly (all of src/, compiled into
 * the fuzzer with include/ and src/ on the include path) by tests/fuzz/run,
 * or by tests/fuzz/CMakeLists.txt with -DHWT_BUILD_FUZZ=ON and clang.
 */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hwtimer.h"

#define MAX_SLOTS 192
#define MAX_OPS 160
#define MAX_LISTS 4

/* ------------------------------------------------------------ input */

static const uint8_t *in_p;
static size_t in_n;

static uint8_t u8(void)
{
    if (in_n == 0)
        return 0;
    in_n--;
    return *in_p++;
}

static uint64_t u64(void)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | u8();
    return v;
}

/* ------------------------------------------------------------ model */

typedef struct slot {
    atomic_int ran, cb, handed, cancel_true;
    int rc;         /* of the scheduling call */
    bool used;      /* a scheduling call was made for it */
    bool has_cb;    /* scheduled with a cancelled callback */
    bool nested;    /* its run schedules a child */
    hwt_timeout *h; /* handle while held */
    bool had_handle;
    int final_state; /* at a release after the stop: 1 expired, 2 cancelled, 3 both,
                        4 neither; 0 released before */
} slot;

static slot slots[MAX_SLOTS];
static atomic_int next_slot;
static hwt_timer *timer;
static bool stopped, destroyed;
static atomic_int violations;
static atomic_int exec_mode; /* 0 none, 1 deferred, 2 inline */

static void violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_api: ownership violation: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    atomic_fetch_add(&violations, 1);
}

/* ------------------------------------------------------------ executor */

static pthread_mutex_t xq_mu = PTHREAD_MUTEX_INITIALIZER;
static hwt_timeout *xq[4096];
static size_t xq_head, xq_tail;
static atomic_int xq_overflow;

static void exec_cb(void *ctx, hwt_timeout *t)
{
    (void)ctx;
    if (atomic_load(&exec_mode) == 2) { /* inline, on the worker */
        hwt_timeout_run(t);
        return;
    }
    pthread_mutex_lock(&xq_mu);
    if (xq_tail - xq_head < sizeof xq / sizeof xq[0]) {
        xq[xq_tail++ % (sizeof xq / sizeof xq[0])] = t;
        pthread_mutex_unlock(&xq_mu);
    } else {
        pthread_mutex_unlock(&xq_mu);
        atomic_fetch_add(&xq_overflow, 1);
        hwt_timeout_run(t); /* never happens with MAX_SLOTS timeouts */
    }
}

/* Runs up to n queued hand-overs on this thread; returns how many. */
static size_t exec_run(size_t n)
{
    size_t done = 0;
    while (done < n) {
        pthread_mutex_lock(&xq_mu);
        if (xq_head == xq_tail) {
            pthread_mutex_unlock(&xq_mu);
            break;
        }
        hwt_timeout *t = xq[xq_head++ % (sizeof xq / sizeof xq[0])];
        pthread_mutex_unlock(&xq_mu);
        slot *s = hwt_timeout_arg(t);
        bool held = s->h == t; /* this thread holds a handle: t stays valid */
        hwt_timeout_run(t);
        if (held) {
            int r = atomic_load(&s->ran);
            hwt_timeout_run(t); /* a second call does nothing */
            if (atomic_load(&s->ran) != r)
                violation("slot %d: hwt_timeout_run ran it twice", (int)(s - slots));
        }
        done++;
    }
    return done;
}

/* ------------------------------------------------------------ tasks */

static int schedule_slot(int i, bool with_cb, bool want_handle, int64_t delay, int unit,
                         bool nested);

static void on_run(hwt_timeout *timeout, void *arg)
{
    slot *s = arg;
    atomic_fetch_add(&s->ran, 1);
    if (!hwt_timeout_is_expired(timeout) || hwt_timeout_is_cancelled(timeout) ||
        hwt_timeout_arg(timeout) != arg)
        violation("slot %d: its task sees the wrong state", (int)(s - slots));
    if (atomic_load(&exec_mode) != 1) { /* on the worker */
        if (hwt_stop(timer, NULL, NULL) != HWT_EDEADLK)
            violation("hwt_stop from a task did not give HWT_EDEADLK");
    }
    if (s->nested) {
        int j = atomic_fetch_add(&next_slot, 1);
        if (j < MAX_SLOTS) {
            int rc = schedule_slot(j, true, false, 0, HWT_MICROSECONDS, false);
            if (rc != 0 && rc != HWT_ESTOPPED && rc != HWT_EREJECTED)
                violation("schedule from a task: %d", rc);
        }
    }
}

static void on_cancelled(hwt_timeout *timeout, void *arg)
{
    slot *s = arg;
    atomic_fetch_add(&s->cb, 1);
    if (!hwt_timeout_is_cancelled(timeout) || hwt_timeout_is_expired(timeout))
        violation("slot %d: its cancelled callback sees the wrong state", (int)(s - slots));
}

static const hwt_task cb_task = {.run = on_run, .cancelled = on_cancelled};

static bool unit_valid(int unit)
{
    return unit >= HWT_NANOSECONDS && unit <= HWT_DAYS;
}

static int schedule_slot(int i, bool with_cb, bool want_handle, int64_t delay, int unit,
                         bool nested)
{
    slot *s = &slots[i];
    s->used = true;
    s->has_cb = with_cb;
    s->nested = nested;
    hwt_timeout *h = (hwt_timeout *)&slots[0]; /* sentinel */
    hwt_timeout **out = want_handle ? &h : NULL;
    int rc = with_cb ? hwt_new_timeout_task(timer, &cb_task, s, delay, (hwt_unit)unit, out)
                     : hwt_new_timeout(timer, on_run, s, delay, (hwt_unit)unit, out);
    s->rc = rc;
    if (rc == 0 && want_handle) {
        s->h = h;
        s->had_handle = true;
    } else if (want_handle && h != (hwt_timeout *)&slots[0]) {
        violation("slot %d: failed schedule (%d) wrote the out-pointer", i, rc);
    }
    if (!unit_valid(unit) && rc != HWT_EINVAL)
        violation("slot %d: invalid unit %d gave %d", i, unit, rc);
    if (unit_valid(unit) && rc != 0 && rc != HWT_ESTOPPED && rc != HWT_EREJECTED)
        violation("slot %d: unexpected result %d", i, rc);
    return rc;
}

/* ------------------------------------------------------------ helpers */

static void release_slot(slot *s)
{
    if (s->h == NULL)
        return;
    /* Released while the timer runs, a timeout may still be pending (the
     * release ends the handle, not the timeout): record its final state only
     * once nothing can change it any more. */
    bool e = hwt_timeout_is_expired(s->h), c = hwt_timeout_is_cancelled(s->h);
    s->final_state = !stopped ? 0 : e && c ? 3 : e ? 1 : c ? 2 : 4;
    hwt_timeout_release(s->h);
    s->h = NULL;
}

static hwt_timeout **lists[MAX_LISTS];
static size_t list_n[MAX_LISTS];
static int nlists;

static void take_list(hwt_timeout **l, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        slot *s = hwt_timeout_arg(l[k]);
        if (s < slots || s >= slots + MAX_SLOTS) {
            violation("stop list holds a foreign timeout");
            continue;
        }
        atomic_fetch_add(&s->handed, 1);
        if (!hwt_timeout_is_cancelled(l[k]) || hwt_timeout_is_expired(l[k]))
            violation("handed-back timeout not in the cancelled state");
        hwt_timeout_run(l[k]); /* does nothing */
    }
    if (nlists < MAX_LISTS && n > 0 && (n & 1)) { /* keep some past the destroy */
        lists[nlists] = l;
        list_n[nlists++] = n;
    } else {
        hwt_timeouts_release(l, n);
    }
}

static void do_stop(bool with_list)
{
    if (with_list) {
        hwt_timeout **l = (hwt_timeout **)&slots[1];
        size_t n = 12345;
        int rc = hwt_stop(timer, &l, &n);
        if (rc != 0)
            violation("hwt_stop with a list: %d", rc);
        if (stopped && (l != NULL || n != 0))
            violation("second stop returned %zu timeouts", n);
        if (rc == 0)
            take_list(l, n);
    } else {
        int rc = hwt_stop(timer, NULL, NULL);
        if (rc != 0)
            violation("hwt_stop(NULL, NULL): %d", rc);
    }
    stopped = true;
    if (hwt_pending_timeouts(timer) != 0)
        violation("pending %lld after a stop", (long long)hwt_pending_timeouts(timer));
}

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static hwt_stats last_stats;

static void check_stats(void)
{
    hwt_stats s;
    hwt_timer_stats(timer, &s);
    if (s.pending < 0 || s.scheduled < last_stats.scheduled || s.expired < last_stats.expired ||
        s.cancelled < last_stats.cancelled || s.rejected < last_stats.rejected ||
        s.wakeups < last_stats.wakeups)
        violation("stats went backwards or negative");
    if (s.expired + s.cancelled > s.scheduled)
        violation("more timeouts ended (%llu + %llu) than scheduled (%llu)",
                  (unsigned long long)s.expired, (unsigned long long)s.cancelled,
                  (unsigned long long)s.scheduled);
    last_stats = s;
}

static void null_log(void *ctx, hwt_log_level level, const char *message)
{
    (void)ctx;
    (void)level;
    (void)message;
}

/* ------------------------------------------------------------ one input */

static int pick_slot(void)
{
    int n = atomic_load(&next_slot);
    if (n > MAX_SLOTS)
        n = MAX_SLOTS;
    return n == 0 ? -1 : (int)(u8() % n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    in_p = data;
    in_n = size;
    memset(slots, 0, sizeof slots);
    atomic_store(&next_slot, 0);
    atomic_store(&violations, 0);
    atomic_store(&xq_overflow, 0);
    xq_head = xq_tail = 0;
    stopped = destroyed = false;
    nlists = 0;
    memset(&last_stats, 0, sizeof last_stats);

    /* ---- options */
    hwt_options o;
    hwt_options_init(&o);
    uint8_t b0 = u8(), b1 = u8(), b2 = u8(), b3 = u8();
    static const uint64_t ticks_us[8] = {50, 100, 200, 500, 1000, 1000, 2000, 3000};
    o.tick_duration = ticks_us[b0 & 7];
    o.tick_unit = HWT_MICROSECONDS;
    o.sleep_mode = (hwt_sleep_mode)((b0 >> 3) & 3);
    o.ticks_per_wheel = 1u << (b1 & 7); /* 1 .. 128 */
    if (b1 & 8)
        o.ticks_per_wheel += 1; /* rounded up */
    o.max_pending_timeouts = (b1 & 0x30) == 0x30 ? 1 + (b2 & 15) : -(int64_t)(b2 & 1);
    o.max_transfers_per_tick = (b2 & 0x40) ? 1 + (b2 >> 4 & 3) : 100000;
    atomic_store(&exec_mode, b3 % 3);
    if (atomic_load(&exec_mode) != 0)
        o.executor = exec_cb;
    o.log = null_log;
    o.thread_name = "hwt-fuzz";
    bool invalid = (b3 & 0xF8) == 0xF8; /* ~3%: an invalid option must be rejected */
    if (invalid) {
        switch ((b3 >> 1) & 3) {
        case 0: o.tick_duration = 0; break;
        case 1: o.ticks_per_wheel = (b2 & 1) ? 0 : (1u << 30) + 1 + b2; break;
        case 2: o.tick_unit = (hwt_unit)(7 + b2); break;
        case 3: o.max_transfers_per_tick = 0; break;
        }
    }
    hwt_timer *t = (hwt_timer *)&slots[2];
    int rc = hwt_timer_create(&t, &o);
    if (invalid) {
        if (rc != HWT_EINVAL || t != (hwt_timer *)&slots[2])
            violation("invalid options gave %d", rc);
        goto out;
    }
    if (rc != 0) {
        violation("valid options gave %d", rc);
        goto out;
    }
    timer = t;

    /* ---- operations */
    for (int op = 0; op < MAX_OPS && in_n > 0; op++) {
        uint8_t code = u8();
        switch (code % 15) {
        case 0:
        case 1:
        case 2: { /* schedule */
            uint8_t f = u8();
            int64_t delay;
            int unit;
            switch ((f >> 3) & 3) {
            case 0:
                delay = u8();
                unit = HWT_MICROSECONDS;
                break; /* 0-255 us */
            case 1:
                delay = (int8_t)u8();
                unit = HWT_MILLISECONDS;
                break; /* -128..127 ms */
            case 2:
                delay = (int64_t)u64();
                unit = u8() % 9;
                break; /* anything, units 7-8 invalid */
            default:
                delay = (int64_t)u64();
                unit = (int)(int8_t)u8();
                break; /* any unit byte */
            }
            int i = atomic_fetch_add(&next_slot, 1);
            if (i >= MAX_SLOTS)
                break;
            schedule_slot(i, f & 1, f & 2, delay, unit, (f & 0x60) == 0x60);
            break;
        }
        case 3: { /* cancel */
            int i = pick_slot();
            if (i >= 0 && slots[i].h != NULL) {
                bool expired_before = hwt_timeout_is_expired(slots[i].h);
                if (hwt_timeout_cancel(slots[i].h)) {
                    atomic_fetch_add(&slots[i].cancel_true, 1);
                    if (expired_before)
                        violation("slot %d: cancel true after expiry", i);
                    if (!hwt_timeout_is_cancelled(slots[i].h))
                        violation("slot %d: cancel true, not cancelled", i);
                }
            }
            break;
        }
        case 4: { /* release */
            int i = pick_slot();
            if (i >= 0)
                release_slot(&slots[i]);
            break;
        }
        case 5: check_stats(); break;
        case 6: sleep_us(20 + 40 * (u8() & 7)); break;
        case 7: exec_run(1 + (u8() & 15)); break;
        case 8: { /* hwt_timeout_run on a handle: nothing unless handed to an executor */
            int i = pick_slot();
            /* (the worker may run it meanwhile: a run from here would show
             * at the end as a second run, or a run after a cancel) */
            if (i >= 0 && slots[i].h != NULL && atomic_load(&exec_mode) == 0)
                hwt_timeout_run(slots[i].h);
            break;
        }
        case 9: { /* state through the handle */
            int i = pick_slot();
            if (i >= 0 && slots[i].h != NULL) {
                /* What happened first, then the state: a task may run between
                 * two reads, and its timeout is expired before it starts. */
                bool ran = atomic_load(&slots[i].ran) > 0;
                bool cancel_true = atomic_load(&slots[i].cancel_true) > 0;
                bool e = hwt_timeout_is_expired(slots[i].h);
                bool c = hwt_timeout_is_cancelled(slots[i].h);
                if (e && c)
                    violation("slot %d: both expired and cancelled", i);
                if (ran && !e)
                    violation("slot %d: ran but not expired", i);
                if (cancel_true && !c)
                    violation("slot %d: cancelled but not is_cancelled", i);
                if (hwt_timeout_timer(slots[i].h) != timer ||
                    hwt_timeout_arg(slots[i].h) != &slots[i] ||
                    hwt_timeout_task(slots[i].h) != on_run)
                    violation("slot %d: accessors", i);
            }
            break;
        }
        case 10: {
            int r = hwt_timer_start(timer);
            if (r != (stopped ? HWT_ESTOPPED : 0))
                violation("hwt_timer_start: %d", r);
            break;
        }
        case 11: { /* one out-pointer: HWT_EINVAL, nothing changes */
            hwt_timeout **l = (hwt_timeout **)&slots[4];
            size_t n = 3;
            int r = (u8() & 1) ? hwt_stop(timer, &l, NULL) : hwt_stop(timer, NULL, &n);
            if (r != HWT_EINVAL || l != (hwt_timeout **)&slots[4] || n != 3)
                violation("hwt_stop with one out-pointer: %d", r);
            break;
        }
        case 12:
            if ((u8() & 3) == 0) /* stops are rarer than the rest */
                do_stop(code & 0x10);
            break;
        case 14: { /* reschedule: false once ended, for an invalid unit and NULL */
            int i = pick_slot();
            if (i >= 0 && slots[i].h != NULL) {
                uint8_t f = u8();
                int64_t delay = (f & 1) ? (int64_t)u64() : (int8_t)u8();
                int unit = (f & 2) ? (int)(int8_t)u8() : HWT_MILLISECONDS;
                bool ended_before = atomic_load(&slots[i].cancel_true) > 0 ||
                                    hwt_timeout_is_expired(slots[i].h) ||
                                    hwt_timeout_is_cancelled(slots[i].h);
                bool r = hwt_timeout_reschedule(slots[i].h, delay, (hwt_unit)unit);
                if (r && (ended_before || unit < HWT_NANOSECONDS || unit > HWT_DAYS))
                    violation("slot %d: reschedule true after its end or for unit %d", i, unit);
            }
            if (hwt_timeout_reschedule(NULL, 1, HWT_MILLISECONDS))
                violation("reschedule(NULL) true");
            break;
        }
        case 13: { /* pending is never negative and 0 once stopped */
            int64_t p = hwt_pending_timeouts(timer);
            if (p < 0 || (stopped && p != 0))
                violation("pending %lld", (long long)p);
            break;
        }
        }
    }

    /* ---- the end: stop (list or not) unless done, executor drain, destroy */
    if (!stopped)
        do_stop(u8() & 1);
    hwt_stats st;
    hwt_timer_stats(timer, &st);
    int cb_at_stop = 0;
    for (int i = 0; i < MAX_SLOTS; i++)
        cb_at_stop += atomic_load(&slots[i].cb);
    exec_run(SIZE_MAX);
    {
        /* a second stop: empty */
        hwt_timeout **l = (hwt_timeout **)&slots[3];
        size_t n = 7;
        if (hwt_stop(timer, &l, &n) != 0 || l != NULL || n != 0)
            violation("a second stop was not empty");
    }
    /* release half of the handles before the destroy, the rest after */
    for (int i = 0; i < MAX_SLOTS; i += 2)
        release_slot(&slots[i]);
    hwt_timer_destroy(timer);
    destroyed = true;
    for (int i = 0; i < MAX_SLOTS; i++)
        release_slot(&slots[i]);
    for (int k = 0; k < nlists; k++)
        hwt_timeouts_release(lists[k], list_n[k]);

    /* ---- the ownership check */
    int n_slots = atomic_load(&next_slot);
    if (n_slots > MAX_SLOTS)
        n_slots = MAX_SLOTS;
    uint64_t ok = 0, ran = 0, handed = 0, cancel_true = 0, dropped_cb = 0, plain_unended = 0,
             plain_cancel_true = 0;
    int cb_total = 0;
    for (int i = 0; i < n_slots; i++) {
        slot *s = &slots[i];
        int r = atomic_load(&s->ran), c = atomic_load(&s->cb), h = atomic_load(&s->handed);
        int ct = atomic_load(&s->cancel_true);
        cb_total += c;
        if (!s->used)
            continue;
        if (s->rc != 0) {
            if (r || c || h || ct || s->had_handle)
                violation("slot %d: failed schedule (%d) left a trace", i, s->rc);
            continue;
        }
        ok++;
        ran += (uint64_t)r;
        handed += (uint64_t)h;
        cancel_true += (uint64_t)ct;
        if (r > 1 || c > 1 || h > 1 || ct > 1)
            violation("slot %d: ran %d cb %d handed %d cancel_true %d", i, r, c, h, ct);
        if (ct && (r || h))
            violation("slot %d: cancel returned true but it ran %d / was handed back %d", i, r, h);
        if (s->has_cb) {
            if (r + c + h != 1)
                violation("slot %d: ended %d times (ran %d cb %d handed %d)", i, r + c + h, r, c,
                          h);
            if (ct && c != 1)
                violation("slot %d: cancel true but no cancelled callback", i);
            if (c && !ct)
                dropped_cb++;
        } else {
            if (c)
                violation("slot %d: a cancelled callback it does not have", i);
            if (r + h > 1)
                violation("slot %d: ran and handed back", i);
            if (r + h == 0) {
                plain_unended++;
                plain_cancel_true += (uint64_t)ct;
            }
        }
        if (s->had_handle && s->final_state != 0) {
            int want = r ? 1 : 2;
            if (s->final_state != want)
                violation("slot %d: handle state %d at release, ran %d", i, s->final_state, r);
        }
    }
    if (cb_total != cb_at_stop)
        violation("%d cancelled callbacks after the stop returned", cb_total - cb_at_stop);
    if (st.pending != 0)
        violation("stats.pending %lld after the stop", (long long)st.pending);
    if (st.scheduled != ok)
        violation("stats.scheduled %llu, successful schedules %llu",
                  (unsigned long long)st.scheduled, (unsigned long long)ok);
    if (st.expired != ran)
        violation("stats.expired %llu, runs %llu", (unsigned long long)st.expired,
                  (unsigned long long)ran);
    /* cancelled = cancel-true + handed back + dropped; a plain timeout that
     * neither ran nor came back was cancelled by a cancel or dropped */
    uint64_t dropped_plain = plain_unended - plain_cancel_true;
    if (st.cancelled != cancel_true + handed + dropped_cb + dropped_plain)
        violation("stats.cancelled %llu != cancel-true %llu + handed %llu + dropped %llu",
                  (unsigned long long)st.cancelled, (unsigned long long)cancel_true,
                  (unsigned long long)handed, (unsigned long long)(dropped_cb + dropped_plain));
    if (atomic_load(&xq_overflow) != 0)
        violation("executor queue overflow");

out:
    if (atomic_load(&violations) != 0) {
        fprintf(stderr, "fuzz_api: %d violation(s)\n", atomic_load(&violations));
        abort();
    }
    return 0;
}

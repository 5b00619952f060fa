/*
 * deadline_clock.c - the time a schedule call computes its deadline from:
 * never behind CLOCK_MONOTONIC, at most a few microseconds ahead of it, and
 * cheap. Any thread.
 *
 * Why: a schedule read CLOCK_MONOTONIC through the vDSO, ~25 ns on a 2-vCPU
 * KVM guest (kvm-clock: a fenced TSC read plus the pvclock arithmetic)
 * against ~11 ns for a plain TSC read; inside `hwt-bench schedule` the
 * difference was larger still: 73 -> 56 ns of wall time per schedule with 2
 * threads (churn 44 -> 36 ns per pair; 8 interleaved runs, 2026-11-24).
 *
 * How, where the TSC is invariant (x86-64, CPUID 0x80000007 EDX bit 8):
 * each thread keeps an anchor, a TSC value t and a CLOCK_MONOTONIC value b
 * read just after it (so b >= the true time at t), renewed every ~250 us of
 * TSC time. The time at a later TSC value T is estimated as
 *     b + (T - t) * rate + MARGIN_NS
 * with `rate` an upper bound of nanoseconds per TSC tick: measured over at
 * least 10 ms between two anchors read as (a, t, b) with b - a < 1 us, as
 * (b1 - a0) / (t1 - t0) (an upper bound of the mean rate), plus 1000 ppm
 * for CLOCK_MONOTONIC changing its rate meanwhile (NTP slews it by at most
 * 500 ppm). The estimate is thus late, never early, by at most ~1-3 us.
 * Every renewal checks the old anchor's estimate against the clock: one
 * that fell behind it (a TSC that changed its rate, a bad measurement)
 * switches this clock off for the process. Until the rate is known, and
 * wherever there is no invariant TSC, it is CLOCK_MONOTONIC itself.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "clock.h"

#if defined(__x86_64__) && !defined(HWT_NO_TSC)
#include <cpuid.h>
#include <x86intrin.h>
#define HWT_HAVE_TSC 1
#endif

#ifdef HWT_HAVE_TSC

#define MARGIN_NS 250           /* a TSC read done a little early (it is not ordered) */
#define WINDOW_NS 250000        /* an anchor's life */
#define BRACKET_MAX_NS 1000     /* a, t, b read within this, or no anchor */
#define CALIBRATION_NS 10000000 /* the rate is measured over at least this */
#define SAMPLE_EVERY_NS 1000000 /* while calibrating, a thread samples this often */
#define RATE_MARGIN_PPM 1000
#define CHECK_TOLERANCE_NS 100000 /* an estimate this far ahead is as wrong as one behind */

enum { TSC_CALIBRATING, TSC_ON, TSC_OFF };

static _Atomic int tsc_state = TSC_CALIBRATING;
static _Atomic uint64_t tsc_mult;   /* upper bound of ns per tick, << 32 */
static _Atomic uint64_t tsc_window; /* WINDOW_NS in ticks */
static pthread_mutex_t calibration_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t calibration_tsc; /* under calibration_lock: the first anchor */
static int64_t calibration_mono; /* its lower bound, a */
static pthread_once_t cpu_checked = PTHREAD_ONCE_INIT;

/* Initial-exec, as the library's other thread-locals (internal.h). */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct anchor {
    uint64_t tsc;        /* t */
    int64_t mono;        /* b */
    uint64_t mult;       /* tsc_mult when it was taken */
    uint64_t window;     /* ticks it lives; 0 while calibrating: no estimates */
    int64_t next_sample; /* while calibrating: when this thread samples again */
} anchor;

static void check_cpu(void)
{
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 8)))
        atomic_store(&tsc_state, TSC_OFF);
}

/* The TSC, read after every earlier instruction has executed. */
static uint64_t tsc_ordered(void)
{
    _mm_lfence();
    return __rdtsc();
}

static int64_t estimate(const struct anchor *an, uint64_t tsc)
{
    return an->mono + (int64_t)(((tsc - an->tsc) * an->mult) >> 32) + MARGIN_NS;
}

/* With the calibration lock: starts the measurement, or ends it with the
 * rate once CALIBRATION_NS have passed since it started. */
static void calibrate(int64_t a, uint64_t t, int64_t b)
{
    if (calibration_tsc == 0) {
        calibration_tsc = t;
        calibration_mono = a;
        return;
    }
    int64_t elapsed = b - calibration_mono;
    if (elapsed < CALIBRATION_NS || t <= calibration_tsc)
        return;
    double ns_per_tick = (double)elapsed / (double)(t - calibration_tsc);
    ns_per_tick *= 1.0 + RATE_MARGIN_PPM / 1e6;
    /* A TSC between 100 MHz and 20 GHz, or none of it. */
    if (ns_per_tick > 10.0 || ns_per_tick < 0.05) {
        atomic_store(&tsc_state, TSC_OFF);
        return;
    }
    atomic_store(&tsc_mult, (uint64_t)(ns_per_tick * 4294967296.0) + 1);
    atomic_store(&tsc_window, (uint64_t)(WINDOW_NS / ns_per_tick));
    atomic_store(&tsc_state, TSC_ON);
}

/* A new anchor for this thread; the clock's value now. */
static int64_t renew(void)
{
    pthread_once(&cpu_checked, check_cpu);
    int state = atomic_load(&tsc_state);
    if (state == TSC_OFF)
        return hwt__now_ns();
    int64_t a = hwt__now_ns();
    if (state == TSC_CALIBRATING && a < anchor.next_sample)
        return a;
    uint64_t t = tsc_ordered();
    int64_t b = hwt__now_ns();
    if (anchor.window != 0 && t - anchor.tsc < 16 * anchor.window) {
        int64_t was = estimate(&anchor, t);
        if (was < a || was > b + CHECK_TOLERANCE_NS) {
            atomic_store(&tsc_state, TSC_OFF);
            anchor.window = 0;
            return b;
        }
    }
    if (b - a > BRACKET_MAX_NS) /* preempted in between: next call */
        return b;
    if (state == TSC_CALIBRATING) {
        anchor.next_sample = b + SAMPLE_EVERY_NS;
        if (pthread_mutex_trylock(&calibration_lock) == 0) {
            calibrate(a, t, b);
            pthread_mutex_unlock(&calibration_lock);
            state = atomic_load(&tsc_state);
        }
    }
    anchor.tsc = t;
    anchor.mono = b;
    anchor.mult = atomic_load(&tsc_mult);
    anchor.window = state == TSC_ON ? atomic_load(&tsc_window) : 0;
    return b;
}

int64_t hwt__deadline_now_ns(void)
{
    uint64_t t = __rdtsc();
    if (t - anchor.tsc < anchor.window) /* unsigned: a TSC behind the anchor renews it */
        return estimate(&anchor, t);
    return renew();
}

bool hwt__deadline_clock_uses_tsc(void)
{
    return atomic_load(&tsc_state) == TSC_ON;
}

#else

int64_t hwt__deadline_now_ns(void)
{
    return hwt__now_ns();
}

bool hwt__deadline_clock_uses_tsc(void)
{
    return false;
}

#endif

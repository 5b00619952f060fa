/*
 * fences.c - asymmetric fences: the store-load ordering a schedule call
 * needs against a stop, paid by the (rare) stop instead of every schedule.
 *
 * A schedule counts itself in its stripe's `started`, then reads the timer's
 * state; the stop stores SHUTDOWN, then the worker reads `started` to wait
 * for the calls in flight (timeout.c, worker.c). Each side's store must be
 * ordered before its load, or both can miss each other and a timeout lands
 * behind the final drain. A locked add gives the schedule that order for
 * ~3 ns of a ~40 ns call (`hwt-bench schedule` and `churn`, 8 interleaved
 * runs each, 2026-11-24). Instead, where the system offers a process-wide
 * barrier (Linux's membarrier, os.h), the worker issues it after it sees
 * SHUTDOWN: every thread of the process then runs a full fence, so a
 * schedule whose `started` store was not yet visible reads SHUTDOWN, and a
 * compiler barrier is all it needs (the pattern of liburcu and folly's
 * asymmetric fences).
 *
 * The process registers once, at the first timer's creation; where the
 * system, the kernel or a seccomp filter refuses, hwt__light_fences stays
 * false and schedules keep the locked add.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "internal.h"
#include "os.h"

atomic_bool hwt__light_fences;

static pthread_once_t registered = PTHREAD_ONCE_INIT;

static void register_process(void)
{
    if (hwt__os_membarrier_register())
        atomic_store(&hwt__light_fences, true);
}

void hwt__fences_init(void)
{
    pthread_once(&registered, register_process);
}

void hwt__heavy_fence(void)
{
    /* Registered before any timer existed, so before this worker started. */
    if (atomic_load_explicit(&hwt__light_fences, memory_order_relaxed))
        hwt__os_membarrier();
}

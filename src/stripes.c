/*
 * stripes.c - which stripe of every timer a thread uses (internal.h).
 *
 * Threads are dealt the stripes round-robin as they first schedule or
 * cancel, and keep theirs for life: a thread's timeouts then sit on one
 * stack, in its order, and up to HWT_STRIPES threads never share a cache
 * line of queue heads or counters. Any thread; no shared state but the
 * dealer's counter.
 */
#include <limits.h>

#include "internal.h"

static atomic_uint next_stripe;

HWT_THREAD_LOCAL unsigned hwt__stripe_of_thread = UINT_MAX;

unsigned hwt__stripe_assign(void)
{
    hwt__stripe_of_thread =
        atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % HWT_STRIPES;
    return hwt__stripe_of_thread;
}

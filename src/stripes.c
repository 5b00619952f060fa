/*
 * stripes.c - which stripe of every timer a thread uses (internal.h).
 *
 * The first HWT_OWNED_STRIPES threads to schedule or cancel each own one
 * stripe, alone, until they exit: they are its counters' only writer, so
 * they count with a load and a store instead of a locked add (`hwt-bench
 * cancel`: ~2.5 ns of ~14 per cancel). Further threads share the other
 * stripes round-robin, with locked adds. A thread keeps its stripe for life,
 * so its timeouts keep their order; only one that schedules from its own
 * thread-exit destructors, after giving its stripe back, moves to a shared
 * one.
 */
#include <limits.h>
#include <pthread.h>

#include "internal.h"

_Static_assert(HWT_OWNED_STRIPES <= 32 && HWT_OWNED_STRIPES < HWT_STRIPES,
               "owned stripes fit the mask and leave shared ones");

static _Atomic uint32_t owned_mask; /* bit i: stripe i has an owner */
static atomic_uint next_shared;
static pthread_key_t release_key;
static pthread_once_t release_key_once = PTHREAD_ONCE_INIT;

HWT_THREAD_LOCAL unsigned hwt__stripe_of_thread = UINT_MAX;
HWT_THREAD_LOCAL bool hwt__stripe_owned;

static unsigned take_shared(void)
{
    unsigned shared = HWT_STRIPES - HWT_OWNED_STRIPES;
    return HWT_OWNED_STRIPES +
           atomic_fetch_add_explicit(&next_shared, 1, memory_order_relaxed) % shared;
}

/* At thread exit: the stripe goes back (release: the next owner's plain
 * counting continues from our last stores). */
static void give_back(void *arg)
{
    (void)arg;
    unsigned mine = hwt__stripe_of_thread;
    hwt__stripe_owned = false;
    hwt__stripe_of_thread = take_shared();
    atomic_fetch_and_explicit(&owned_mask, ~(UINT32_C(1) << mine), memory_order_release);
}

static bool have_release_key;

static void make_key(void)
{
    have_release_key = pthread_key_create(&release_key, give_back) == 0;
}

/* Claims a free owned stripe, or returns UINT_MAX. */
static unsigned claim(void)
{
    uint32_t mask = atomic_load_explicit(&owned_mask, memory_order_relaxed);
    for (;;) {
        uint32_t free_bits = ~mask & ((UINT32_C(1) << HWT_OWNED_STRIPES) - 1);
        if (free_bits == 0)
            return UINT_MAX;
        unsigned i = (unsigned)__builtin_ctz(free_bits);
        if (atomic_compare_exchange_weak_explicit(&owned_mask, &mask, mask | (UINT32_C(1) << i),
                                                  memory_order_acquire, memory_order_relaxed))
            return i;
    }
}

unsigned hwt__stripe_assign(void)
{
    unsigned i = claim();
    if (i != UINT_MAX) {
        /* Without a key of its own (none to be had) a thread shares a
         * stripe: setting an uncreated key would take over another's. */
        if (pthread_once(&release_key_once, make_key) == 0 && have_release_key &&
            pthread_setspecific(release_key, &owned_mask) == 0) { /* arms give_back */
            hwt__stripe_owned = true;
            hwt__stripe_of_thread = i;
            return i;
        }
        atomic_fetch_and_explicit(&owned_mask, ~(UINT32_C(1) << i), memory_order_relaxed);
    }
    hwt__stripe_of_thread = take_shared();
    return hwt__stripe_of_thread;
}

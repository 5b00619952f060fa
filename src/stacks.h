/*
 * stacks.h - the lock-free stacks that carry timeouts between threads, all
 * ConcurrencyKit's ck_stack (intrusive: the link lives in the timeout), and
 * the sanitizer annotations they need (kept here, and only here). The
 * wrappers keep ck's names for who may call them concurrently: upmc = any
 * number of pushers at once with any number of takers.
 *
 *   new-timeout queue  ck_stack, intrusive (the timeout's queue_link):
 *                      producers push (upmc: one CAS), the worker takes the
 *                      whole stack at once (batch pop: one exchange) and
 *                      reverses it, which restores each producer's order.
 *   cancel stack       the same, through the timeout's stack_link.
 *   moved stack        the same, for timeouts rescheduled earlier.
 *
 * The new-timeout queue and the cancel stack count their pushes in the
 * ck_stack's second word, `generation` (which only ck's mpmc pops use, and
 * we never pop one entry): a push changes head and count together with one
 * double-width CAS, as ck's own mpmc pop does. A schedule and a cancel must
 * be counted at once (the pending count and the stop's drain read the
 * counts), and a separate counter on the same line would cost each one more
 * locked operation; the take-all still exchanges only the head.
 *
 * Why not ck_fifo_mpmc for new timeouts: its dequeue hands back the
 * *previous* node as garbage and a producer may still touch that through a
 * stale tail, so a fifo entry cannot live inside the timeout it carries:
 * every schedule would pay for an entry from a pool and two double-width
 * CAS, and every transfer for one more. A upmc
 * push only writes its own node and the stack head, and the worker never
 * pops single nodes, so the node can be embedded and there is no ABA.
 *
 * ThreadSanitizer cannot see ck's inline-asm atomics. We tell it about the
 * happens-before edges the stacks provide: release on the stack's address
 * before publishing, acquire after taking. The plain store a push makes
 * into its node before its CAS is ignored.
 */
#ifndef HWT_STACKS_H
#define HWT_STACKS_H

#include <ck_stack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ck's fences follow the memory model its ck_md.h names, which is per
 * architecture. A cross build that finds the host's x86-64 ck_md.h (TSO)
 * gets an arm64 ck whose store and load fences are no instructions at
 * all: pushes no longer publish what the producer wrote (cmake/ and
 * tests/arm64 give the target's headers; this catches any build that
 * does not). */
#if defined(__aarch64__) && !defined(CK_MD_RMO)
#error "ck_md.h is not arm64's (CK_MD_RMO): build against the target's ConcurrencyKit headers"
#endif

#if defined(__SANITIZE_THREAD__)
#define HWT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HWT_TSAN 1
#endif
#endif

#ifdef HWT_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
#define HWT_TSAN_RELEASE(p) __tsan_release((void *)(p))
#define HWT_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#define HWT_TSAN_IGNORE_BEGIN()                                                                    \
    do {                                                                                           \
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);                                              \
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);                                             \
    } while (0)
#define HWT_TSAN_IGNORE_END()                                                                      \
    do {                                                                                           \
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);                                               \
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);                                                \
    } while (0)
#else
#define HWT_TSAN_RELEASE(p) ((void)0)
#define HWT_TSAN_ACQUIRE(p) ((void)0)
#define HWT_TSAN_IGNORE_BEGIN() ((void)0)
#define HWT_TSAN_IGNORE_END() ((void)0)
#endif

/* ---- stacks */

/* Pushes one entry (one CAS). Any thread, concurrently with other pushes
 * and takes; the entry must not be on a stack. */
static inline void hwt__stack_push_upmc(ck_stack_t *stack, ck_stack_entry_t *entry)
{
    HWT_TSAN_RELEASE(stack);
    HWT_TSAN_IGNORE_BEGIN();
    ck_stack_push_upmc(stack, entry);
    HWT_TSAN_IGNORE_END();
}

/* Pushes one entry and counts it (one double-width CAS: the head and the
 * count change together). Any thread, as hwt__stack_push_upmc; the stack
 * must be 16-byte aligned. The push is ordered before the caller's later
 * loads, as a full barrier: a producer pushes, then reads whether the worker
 * plans to sleep (the other side stores its plan, fences, then reads the
 * stacks), so each side must see the other's write. x86-64's locked CAS is
 * such a barrier already (ck's fence is then only the compiler's); arm64's
 * exclusive pair (ck's ldxp/stxp, no acquire or release) is not, and needs
 * the fence. Returns the count with this push: how many were ever pushed. */
static inline uint64_t hwt__stack_push_counted(ck_stack_t *stack, ck_stack_entry_t *entry)
{
    ck_stack_t seen, next;
    HWT_TSAN_RELEASE(stack);
    HWT_TSAN_IGNORE_BEGIN();
    seen.generation = ck_pr_load_ptr(&stack->generation);
    seen.head = ck_pr_load_ptr(&stack->head);
    do {
        entry->next = seen.head;
        next.head = entry;
        next.generation = (char *)((uintptr_t)seen.generation + 1);
        ck_pr_fence_store(); /* the entry's link before the entry */
    } while (!ck_pr_cas_ptr_2_value(stack, &seen, &next, &seen));
    ck_pr_fence_atomic_load();
    HWT_TSAN_IGNORE_END();
    return (uint64_t)(uintptr_t)next.generation;
}

/* How many entries were ever pushed with hwt__stack_push_counted: a load,
 * ordered before the caller's later loads (as an acquire). Any thread. */
static inline uint64_t hwt__stack_pushes(ck_stack_t *stack)
{
    uint64_t pushes = (uint64_t)(uintptr_t)ck_pr_load_ptr(&stack->generation);
    ck_pr_fence_load();
    return pushes;
}

/* Takes every entry at once (one exchange), newest first (linked through
 * ->next). Any thread, concurrently with pushes; in the library only the
 * worker takes (the stacks are MPSC queues). */
static inline ck_stack_entry_t *hwt__stack_take_all_upmc(ck_stack_t *stack)
{
    ck_stack_entry_t *all = ck_stack_batch_pop_upmc(stack);
    if (all != NULL)
        HWT_TSAN_ACQUIRE(stack);
    return all;
}

/* Reverses a list taken with hwt__stack_take_all_upmc: oldest first. The
 * taker's, on its own list. */
static inline ck_stack_entry_t *hwt__stack_reverse(ck_stack_entry_t *newest_first)
{
    ck_stack_entry_t *oldest_first = NULL;
    while (newest_first != NULL) {
        ck_stack_entry_t *next = newest_first->next;
        newest_first->next = oldest_first;
        oldest_first = newest_first;
        newest_first = next;
    }
    return oldest_first;
}

/* A snapshot (a load, no write: the stack's line stays shared). Any thread. */
static inline bool hwt__stack_is_empty(ck_stack_t *stack)
{
    return ck_pr_load_ptr(&stack->head) == NULL;
}

#endif

/*
 * mpsc.h - the lock-free queues, all from ConcurrencyKit, and the sanitizer
 * annotations they need (kept here, and only here).
 *
 *   new-timeout queue  ck_fifo_mpmc, many producers, one consumer (the worker,
 *                      or the destroying thread once the worker has ended).
 *   cancel stack       ck_stack: cancellers push (upmc), the worker takes the
 *                      whole stack at once (batch pop) - no ABA, no allocation.
 *   pools              ck_stack: anyone pushes, producers pop (mpmc, with a
 *                      generation counter against ABA; memory is type-stable).
 *
 * Entry lifetime (see notes/ck-and-cmocka.md): ck_fifo_mpmc_dequeue returns the
 * node *after* the stub and hands back the previous stub as garbage, and a
 * producer may still touch that garbage through a stale tail. So an entry is
 * never embedded in the timeout it carries, is never freed while producers may
 * run, and is only ever reused as a fifo entry (the timer's entry pool). Only
 * the blocking ck_fifo_mpmc_enqueue is used on recycled entries.
 *
 * ThreadSanitizer cannot see ck's inline-asm atomics. We tell it about the
 * happens-before edges the queues provide: release on the queue's address
 * before publishing, acquire after taking. The plain stores ck makes into a
 * recycled entry (and the plain `next` reads of ck_stack_pop_mpmc through a
 * stale head) are ignored; tests/tsan.supp covers what remains in ck_fifo.h.
 */
#ifndef HWT_MPSC_H
#define HWT_MPSC_H

#include <ck_fifo.h>
#include <ck_stack.h>
#include <stdbool.h>
#include <stddef.h>

#ifndef CK_F_FIFO_MPMC
#error "libhwtimer needs ck_fifo_mpmc (a double-width CAS: x86_64 cmpxchg16b or arm64)"
#endif
#ifndef CK_F_STACK_POP_MPMC
#error "libhwtimer needs ck_stack_pop_mpmc (a double-width CAS)"
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

/* While free, the first object of a magazine (a chain of free objects, see
 * pool.c) links the magazine into its pool's depot and counts the chain. */
struct hwt__mag_head {
    ck_stack_entry_t depot_link;
    size_t count;
};

/* A fifo entry, from the timer's entry pool. The pool's links are separate
 * from the fifo fields because a producer may still touch those through a
 * stale tail. */
struct hwt__qentry {
    ck_fifo_mpmc_entry_t fifo;
    ck_stack_entry_t pool_link; /* the next free one in a magazine */
    struct hwt__mag_head mag;
};

/* ---- fifo: any thread enqueues; one consumer at a time dequeues. */

static inline void hwt__fifo_init(ck_fifo_mpmc_t *fifo, struct hwt__qentry *stub)
{
    ck_fifo_mpmc_init(fifo, &stub->fifo);
}

static inline void hwt__fifo_push(ck_fifo_mpmc_t *fifo, struct hwt__qentry *entry, void *value)
{
    HWT_TSAN_RELEASE(fifo);
    HWT_TSAN_IGNORE_BEGIN();
    ck_fifo_mpmc_enqueue(fifo, &entry->fifo, value);
    HWT_TSAN_IGNORE_END();
}

/* Returns the oldest value or NULL; *garbage gets the entry now free for reuse. */
static inline void *hwt__fifo_pop(ck_fifo_mpmc_t *fifo, struct hwt__qentry **garbage)
{
    void *value;
    ck_fifo_mpmc_entry_t *old;
    if (!ck_fifo_mpmc_dequeue(fifo, &value, &old))
        return NULL;
    HWT_TSAN_ACQUIRE(fifo);
    *garbage = (struct hwt__qentry *)((char *)old - offsetof(struct hwt__qentry, fifo));
    return value;
}

/* Consumer only: true if nothing is queued (the stub has no successor). */
static inline bool hwt__fifo_is_empty(ck_fifo_mpmc_t *fifo)
{
    ck_fifo_mpmc_entry_t *head = ck_pr_load_ptr(&fifo->head.pointer);
    return ck_pr_load_ptr(&head->next.pointer) == NULL;
}

/* ---- stacks */

/* Any thread. */
static inline void hwt__stack_push(ck_stack_t *stack, ck_stack_entry_t *entry)
{
    HWT_TSAN_RELEASE(stack);
    HWT_TSAN_IGNORE_BEGIN();
    ck_stack_push_upmc(stack, entry);
    HWT_TSAN_IGNORE_END();
}

/* Any thread (mpmc pop). NULL when empty. */
static inline ck_stack_entry_t *hwt__stack_pop(ck_stack_t *stack)
{
    HWT_TSAN_IGNORE_BEGIN();
    ck_stack_entry_t *entry = ck_stack_pop_mpmc(stack);
    HWT_TSAN_IGNORE_END();
    if (entry != NULL)
        HWT_TSAN_ACQUIRE(stack);
    return entry;
}

/* Takes every entry at once, newest first (linked through ->next). */
static inline ck_stack_entry_t *hwt__stack_take_all(ck_stack_t *stack)
{
    ck_stack_entry_t *all = ck_stack_batch_pop_upmc(stack);
    if (all != NULL)
        HWT_TSAN_ACQUIRE(stack);
    return all;
}

static inline bool hwt__stack_is_empty(ck_stack_t *stack)
{
    return ck_pr_load_ptr(&stack->head) == NULL;
}

#endif

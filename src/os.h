/*
 * os.h - what the library needs from the operating system beyond C11 and
 * POSIX threads, one function per need. os_linux.c implements it for Linux;
 * a port to another system writes os_<system>.c and changes nothing else in
 * src/ (docs/platforms.md says what each function maps to on FreeBSD and
 * macOS). CMakeLists.txt picks the file by testing for the features it uses.
 *
 * Any thread, unless a function says otherwise. No state.
 */
#ifndef HWT_OS_H
#define HWT_OS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------- waiting on a word */

/*
 * Sleeps while *word equals `expected` (compared atomically with going to
 * sleep, so a hwt__os_wake after the change is never missed), until the
 * absolute CLOCK_MONOTONIC time `until_ns` (INT64_MAX: no time limit) or
 * until woken. May return early (spurious wake-up, signal): the caller
 * re-checks.
 */
void hwt__os_wait_until(_Atomic uint32_t *word, uint32_t expected, int64_t until_ns);

/* The same with a relative time limit of `rel_ns` (> 0) nanoseconds: the
 * millisecond sleep modes sleep as Netty's Thread.sleep does, relatively. */
void hwt__os_wait_for(_Atomic uint32_t *word, uint32_t expected, int64_t rel_ns);

/* Wakes one thread sleeping on `word` (the caller changed *word first). */
void hwt__os_wake(_Atomic uint32_t *word);

/* ------------------------------------------------ the worker thread */

/* Names the calling thread `name`, truncated to what the system keeps (15
 * bytes on Linux). Best effort. */
void hwt__os_name_thread(const char *name);

/* Makes the calling thread's timed sleeps end on time instead of being
 * deferred to coalesce wake-ups (Linux's timer slack: 50 us by default,
 * set to 1 ns), and its wake-ups take a CPU at once instead of waiting for
 * a busy thread's turn to end (short turns on the CPU, where the scheduler
 * offers them). Best effort: true if the wake-ups now take a CPU at once. */
bool hwt__os_precise_sleeps(void);

/* --------------------------------------------------------- memory */

/* The size of the pages that back a whole-page-aligned mapping in one TLB
 * entry where the system has them (Linux's transparent huge pages: 2 MiB on
 * x86-64, and on arm64 with 4 KiB pages). */
#define HWT_OS_LARGE_PAGE_BYTES (UINT64_C(2) << 20)

/* Asks that [p, p + size), a fresh private anonymous mapping aligned to
 * HWT_OS_LARGE_PAGE_BYTES, be backed by large pages. Before its pages are
 * faulted in. Best effort: where the system has none, or its administrator
 * turned them off, the mapping keeps small pages. */
void hwt__os_prefer_large_pages(void *p, size_t size);

/* Faults in the pages of [p, p + size), a fresh private anonymous mapping,
 * for writing, in one call where the system can. Best effort: otherwise
 * each page faults on its first write, as it would anyway. */
void hwt__os_populate(void *p, size_t size);

#endif

/*
 * test_tasks.c - the timer's table of interned (run, cancelled) pairs
 * (tasks.c): each pair gets one index, kept for the timer's lifetime, and a
 * full table fails a schedule with HWT_ENOMEM and changes nothing.
 */
#include <stdint.h>

#include "helpers.h"
#include "internal.h"

static void other_task(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

/* Distinct function pointers that are never called (never scheduled). */
static hwt_task_fn fake_fn(size_t i)
{
    return (hwt_task_fn)(uintptr_t)(0x100000 + 16 * i);
}

static void test_a_full_table_fails_a_schedule_and_changes_nothing(void **state)
{
    (void)state;
    static atomic_int ran;
    atomic_store(&ran, 0);
    hwt_timer *t = hwtt_timer(1, HWT_MILLISECONDS, 64);
    assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &ran, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&ran) == 1, 5000));

    /* Index 0 is hwtt_count_task's; fill the rest, every pair new. */
    uint16_t index;
    for (size_t i = 1; i < HWT_MAX_TASKS; i++) {
        hwt_task_fn cancelled = i % 2 ? NULL : fake_fn(i + HWT_MAX_TASKS);
        assert_true(hwt__task_intern(t, fake_fn(i), cancelled, &index));
        assert_int_equal(index, i);
    }
    /* Known pairs keep their index (looked up, not cached: the thread's last
     * pair was another); a new one does not fit. */
    assert_true(hwt__task_intern(t, fake_fn(7), NULL, &index));
    assert_int_equal(index, 7);
    assert_true(hwt__task_intern(t, fake_fn(8), fake_fn(8 + HWT_MAX_TASKS), &index));
    assert_int_equal(index, 8);
    assert_false(hwt__task_intern(t, fake_fn(8), NULL, &index));
    assert_false(hwt__task_intern(t, other_task, NULL, &index));

    hwt_stats before, after;
    hwt_timer_stats(t, &before);
    hwt_timeout *h = (hwt_timeout *)&index; /* must stay untouched */
    assert_int_equal(hwt_new_timeout(t, other_task, NULL, 0, HWT_MILLISECONDS, &h), HWT_ENOMEM);
    assert_ptr_equal(h, (hwt_timeout *)&index);
    hwt_timer_stats(t, &after);
    assert_int_equal(after.pending, 0);
    assert_int_equal(after.scheduled, before.scheduled);
    assert_int_equal(after.rejected, before.rejected);

    /* A known task still schedules. */
    assert_int_equal(hwt_new_timeout(t, hwtt_count_task, &ran, 0, HWT_MILLISECONDS, NULL), 0);
    assert_true(hwtt_wait_until(atomic_load(&ran) == 2, 5000));
    hwt_timer_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_full_table_fails_a_schedule_and_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

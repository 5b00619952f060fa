/*
 * test_arena.c - the arena behind 32-bit refs (arena.c): maps are aligned to
 * their size up to a large page, zeroed, reachable by ref both ways, and
 * their addresses are reused once given back; a failed map changes nothing;
 * a low address-space limit leaves a smaller range, not none, and the
 * smallest one fills up.
 */
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include "helpers.h"
#include "internal.h"

static size_t expected_alignment(size_t size)
{
    size_t a = HWT_ARENA_BLOCK_BYTES;
    while (a < size && a < HWT_ARENA_SLOT_BYTES)
        a *= 2;
    return a;
}

static void check_map(char *p, size_t size)
{
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % expected_alignment(size), 0);
    assert_true(p > hwt__arena_base);
    assert_true((size_t)(p - hwt__arena_base) + size <= hwt__arena_bytes());
    for (size_t off = 0; off < size; off += 4096)
        assert_int_equal(p[off], 0);
    assert_int_equal(p[size - 1], 0);
    /* A ref names an 8-byte unit: every one of the map's comes back. */
    size_t step =
        size / 8 < HWT_ARENA_UNIT ? HWT_ARENA_UNIT : size / 8 / HWT_ARENA_UNIT * HWT_ARENA_UNIT;
    for (size_t off = 0; off < size; off += step) {
        hwt__ref r = hwt__arena_ref(p + off);
        assert_int_not_equal(r, 0);
        assert_ptr_equal(hwt__arena_at(r), p + off);
    }
    memset(p, 0xa5, size);
}

static void test_maps_are_aligned_zeroed_and_reachable_by_ref(void **state)
{
    (void)state;
    static const size_t sizes[] = {1,      8192,   16384,   20000,         32768,   65536,  131072,
                                   262144, 524288, 1 << 20, (1 << 20) + 1, 2 << 20, 5 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    char *maps[N];
    for (size_t i = 0; i < N; i++) {
        maps[i] = hwt__arena_map(HWT_SITE_WHEEL, sizes[i], i % 2 == 0);
        check_map(maps[i], sizes[i]);
    }
    for (size_t i = 0; i < N; i++)
        for (size_t j = i + 1; j < N; j++) /* disjoint */
            assert_true(maps[i] + sizes[i] <= maps[j] || maps[j] + sizes[j] <= maps[i]);
    for (size_t i = 0; i < N; i++)
        hwt__arena_unmap(maps[i], sizes[i]);
}

static void test_given_back_addresses_are_reused_zeroed(void **state)
{
    (void)state;
    for (size_t size = HWT_ARENA_BLOCK_BYTES; size <= 2 * HWT_ARENA_SLOT_BYTES; size *= 2) {
        char *a = hwt__arena_map(HWT_SITE_WHEEL, size, true);
        check_map(a, size); /* and writes to it */
        hwt__arena_unmap(a, size);
        char *b = hwt__arena_map(HWT_SITE_WHEEL, size, true);
        assert_ptr_equal(b, a); /* the first free place of its size */
        check_map(b, size);     /* zeroed again */
        hwt__arena_unmap(b, size);
    }
    /* A slot cut into pieces is whole again once they are all back: 128
     * pieces of 16 KiB fill one; given back, a 2 MiB map can take it. */
    enum { PIECES = HWT_ARENA_SLOT_BYTES / HWT_ARENA_BLOCK_BYTES };
    char *pieces[PIECES];
    char *lowest = NULL;
    for (size_t i = 0; i < PIECES; i++) {
        pieces[i] = hwt__arena_map(HWT_SITE_WHEEL, HWT_ARENA_BLOCK_BYTES, false);
        assert_non_null(pieces[i]);
        if (lowest == NULL || pieces[i] < lowest)
            lowest = pieces[i];
    }
    assert_int_equal((uintptr_t)lowest % HWT_ARENA_SLOT_BYTES, 0);
    for (size_t i = 0; i < PIECES; i++)
        hwt__arena_unmap(pieces[i], HWT_ARENA_BLOCK_BYTES);
    char *slot = hwt__arena_map(HWT_SITE_WHEEL, HWT_ARENA_SLOT_BYTES, false);
    assert_ptr_equal(slot, lowest);
    hwt__arena_unmap(slot, HWT_ARENA_SLOT_BYTES);
}

static int fail_wheel_site(hwt__alloc_site site)
{
    return site == HWT_SITE_WHEEL;
}

static void test_a_failed_map_changes_nothing(void **state)
{
    (void)state;
    char *before = hwt__arena_map(HWT_SITE_WHEEL, HWT_ARENA_BLOCK_BYTES, false);
    hwt__arena_unmap(before, HWT_ARENA_BLOCK_BYTES);
    hwt__set_alloc_fail_hook(fail_wheel_site);
    assert_null(hwt__arena_map(HWT_SITE_WHEEL, HWT_ARENA_BLOCK_BYTES, false));
    hwt__set_alloc_fail_hook(NULL);
    char *after = hwt__arena_map(HWT_SITE_WHEEL, HWT_ARENA_BLOCK_BYTES, false);
    assert_ptr_equal(after, before);
    hwt__arena_unmap(after, HWT_ARENA_BLOCK_BYTES);
    /* More than the whole arena: refused. */
    assert_null(hwt__arena_map(HWT_SITE_WHEEL, hwt__arena_bytes() + 1, false));
}

/* Under `ulimit -v` below 2 GiB an eighth of the limit was below the
 * smallest range the arena would take (256 MiB then), so no timer could be
 * created at all, though the process had over a GiB of address space free.
 * In a child (the range is reserved once per process): 1.5 GiB. */
static void nothing(hwt_timeout *timeout, void *arg)
{
    (void)timeout;
    (void)arg;
}

static int under_a_low_address_space_limit(void *arg)
{
    (void)arg;
    if (hwt__arena_bytes() != 0)
        return 90; /* reserved before the fork: nothing to see */
    struct rlimit lim;
    if (getrlimit(RLIMIT_AS, &lim) != 0)
        return 91;
    lim.rlim_cur = (rlim_t)1536 << 20;
    if (setrlimit(RLIMIT_AS, &lim) != 0)
        return 92;
    hwt_timer *t = NULL;
    if (hwt_timer_create(&t, NULL) != 0)
        return 1;
    int rc = hwt_new_timeout(t, nothing, NULL, 1, HWT_SECONDS, NULL);
    hwt_timer_destroy(t);
    if (rc != 0)
        return 2;
    return hwt__arena_bytes() <= ((size_t)1536 << 20) / 8 ? 0 : 3;
}

static void test_a_low_address_space_limit_leaves_a_smaller_range(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip(); /* the sanitizers' shadow memory does not fit under such a limit */
#endif
    if (hwtt_slowdown() > 1)
        skip(); /* valgrind, qemu: their own address space */
    int rc = hwtt_run_in_child(under_a_low_address_space_limit, NULL, hwtt_slack_ms(10000));
    if (rc >= 90)
        skip();
    assert_int_equal(rc, 0);
}

/* The smallest range (RLIMIT_AS of 128 MiB: an eighth is 16 MiB) has 7
 * usable slots. A thread's regions double from 16 KiB to 1 MiB, each size
 * of piece cutting a slot of its own, then asked for 2 MiB, a whole slot:
 * none was left, and the thread got HWT_ENOMEM at ~52 000 timeouts with
 * most of the range free. It now maps a smaller region where the range has
 * no room for the size it wants. */
enum { SMALLEST_RANGE_HOLDS = 300000 };

static int in_the_smallest_range(void *arg)
{
    (void)arg;
    if (hwt__arena_bytes() != 0)
        return 90;
    struct rlimit lim;
    if (getrlimit(RLIMIT_AS, &lim) != 0)
        return 91;
    lim.rlim_cur = (rlim_t)128 << 20;
    if (setrlimit(RLIMIT_AS, &lim) != 0)
        return 92;
    hwt_timer *t = NULL;
    if (hwt_timer_create(&t, NULL) != 0)
        return 93;
    long n = 0;
    while (n < SMALLEST_RANGE_HOLDS && hwt_new_timeout(t, nothing, NULL, 1, HWT_HOURS, NULL) == 0)
        n++;
    hwt_timer_destroy(t);
    if (hwt__arena_bytes() != HWT_ARENA_MIN_BYTES)
        return 94; /* not the smallest range: nothing to see */
    return n >= SMALLEST_RANGE_HOLDS ? 0 : 1;
}

static void test_the_smallest_range_is_filled(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip();
#endif
    if (hwtt_slowdown() > 1)
        skip();
    int rc = hwtt_run_in_child(in_the_smallest_range, NULL, hwtt_slack_ms(20000));
    if (rc >= 90)
        skip();
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* First: before anything reserves this process's range. */
        cmocka_unit_test(test_a_low_address_space_limit_leaves_a_smaller_range),
        cmocka_unit_test(test_the_smallest_range_is_filled),
        cmocka_unit_test(test_maps_are_aligned_zeroed_and_reachable_by_ref),
        cmocka_unit_test(test_given_back_addresses_are_reused_zeroed),
        cmocka_unit_test(test_a_failed_map_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

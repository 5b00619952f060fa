/*
 * test_static_tls.c - the library's thread-local variables take a few
 * hundred bytes at most. They are initial-exec (src/internal.h: read on
 * every schedule without a call), so a program that loads the library with
 * dlopen takes them from glibc's static TLS reserve, which is small (some
 * 1.5 KB left here) and shared with every other library loaded so: a
 * library that needs more makes a later dlopen fail ("cannot allocate
 * memory in static TLS block"). The per-thread timeout caches live in the
 * heap for that reason (src/pool.c); kept in TLS, four of them took 704
 * bytes.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <string.h>

#include "helpers.h"

#define MOST_TLS_BYTES 256

struct found {
    size_t tls_bytes;
    int objects; /* named libhwtimer.so* */
};

static int look(struct dl_phdr_info *info, size_t size, void *p)
{
    (void)size;
    struct found *f = p;
    const char *slash = strrchr(info->dlpi_name, '/');
    const char *base = slash != NULL ? slash + 1 : info->dlpi_name;
    if (strncmp(base, "libhwtimer.so", strlen("libhwtimer.so")) != 0)
        return 0;
    f->objects++;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS)
            f->tls_bytes += info->dlpi_phdr[i].p_memsz;
    return 0;
}

static void test_the_library_needs_little_static_tls(void **state)
{
    (void)state;
    /* Linked, not loaded on demand: make sure it is in by calling it. */
    assert_non_null(hwt_version());
    struct found f = {0, 0};
    dl_iterate_phdr(look, &f);
    print_message("  libhwtimer's thread-local variables: %zu bytes (at most %d)\n", f.tls_bytes,
                  MOST_TLS_BYTES);
    assert_int_equal(f.objects, 1);
    assert_true(f.tls_bytes > 0);
    assert_true(f.tls_bytes <= MOST_TLS_BYTES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_library_needs_little_static_tls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

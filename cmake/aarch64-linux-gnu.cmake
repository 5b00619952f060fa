# cmake/aarch64-linux-gnu.cmake - cross-compiles for arm64 Linux with Debian's
# gcc-aarch64-linux-gnu, and runs what it builds (the CTest suite, the demo)
# under qemu user-mode emulation through CMAKE_CROSSCOMPILING_EMULATOR.
#
#   cmake -S . -B build/arm64 --toolchain cmake/aarch64-linux-gnu.cmake \
#         -DHWT_CROSS_DEPS=DIR
#   cmake --build build/arm64 -j2 && ctest --test-dir build/arm64
#
# Debian's multi-arch packages (libc6-dev:arm64, libcmocka-dev:arm64) install
# beside the host's and are found through their .pc files. libck-dev:arm64
# cannot be co-installed with the host's (both own /usr/include/ck_md.h, which
# differs per architecture), so its packages are unpacked into HWT_CROSS_DEPS
# (dpkg-deb -x), with ck.pc's prefix rewritten to point there; that directory
# is searched first. tests/arm64 does all of this.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(hwt_cross_triplet aarch64-linux-gnu)

find_program(CMAKE_C_COMPILER NAMES ${hwt_cross_triplet}-gcc REQUIRED)

# qemu through a wrapper that caps its address space (cmake/qemu-aarch64).
set(CMAKE_CROSSCOMPILING_EMULATOR "${CMAKE_CURRENT_LIST_DIR}/qemu-aarch64")

# Passed on to the try_compile projects, which read this file again.
set(HWT_CROSS_DEPS "" CACHE PATH "Directory holding unpacked arm64 packages (usr/...), searched first")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES HWT_CROSS_DEPS)

# Only the target's .pc files: never the host's (the host ck.pc would give
# x86-64 flags and headers).
set(hwt_pc_dirs /usr/lib/${hwt_cross_triplet}/pkgconfig /usr/share/pkgconfig)
if(HWT_CROSS_DEPS)
    list(PREPEND hwt_pc_dirs "${HWT_CROSS_DEPS}/usr/lib/${hwt_cross_triplet}/pkgconfig")
endif()
string(REPLACE ";" ":" hwt_pc_libdir "${hwt_pc_dirs}")
set(ENV{PKG_CONFIG_LIBDIR} "${hwt_pc_libdir}")
set(ENV{PKG_CONFIG_PATH} "")

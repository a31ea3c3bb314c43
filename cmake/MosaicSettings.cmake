# Settings every Mosaic target shares, carried by one INTERFACE target rather than global flags.
add_library(mosaic_settings INTERFACE)
add_library(Mosaic::settings ALIAS mosaic_settings)
target_compile_features(mosaic_settings INTERFACE cxx_std_20)
# QT_NO_KEYWORDS: LibTorch and Qt clash on `slots` in one translation unit.
target_compile_definitions(mosaic_settings INTERFACE QT_NO_KEYWORDS QT_NO_CAST_FROM_ASCII)
# -fvisibility-inlines-hidden: LibTorch brings Qt 5 into the process (libopencv_highgui), and Qt 5 and
# Qt 6 mangle alike. An inline Qt 6 function left out of line (any -O0 build) was exported from the
# executable, and Qt 5's libraries bound their own calls of that name to it: the workbench died
# before main (2026-11-27, QByteArray::append). Hidden, each copy binds inside its own binary.
target_compile_options(mosaic_settings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -fvisibility-inlines-hidden>)

# Sanitizer builds (presets `asan`, `tsan`): -DMOSAIC_SANITIZE=address,undefined or thread.
set(MOSAIC_SANITIZE "" CACHE STRING "Comma-separated -fsanitize= list (empty: none)")
# Checks to leave out of that list. The `asan` preset leaves out UBSan's pointer checks (vptr, null,
# alignment, object-size, pointer-overflow): together they took a third of its compile time (tst_cli.cpp
# 45 s → 31 s), a null dereference still faults under ASan, and the fuzz build, whose inputs are the
# files where misaligned or wild pointers would come from, keeps every check.
set(MOSAIC_SANITIZE_SKIP "" CACHE STRING "Comma-separated -fno-sanitize= list (empty: none)")
if(MOSAIC_SANITIZE)
  target_compile_options(mosaic_settings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${MOSAIC_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  if(MOSAIC_SANITIZE_SKIP)
    target_compile_options(mosaic_settings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize=${MOSAIC_SANITIZE_SKIP}>)
  endif()
  target_link_options(mosaic_settings INTERFACE -fsanitize=${MOSAIC_SANITIZE})
endif()

# Code whose own speed no test waits on may take another optimization level than core and the
# kernels, which keep the build type's. Most of its compile time was the optimizer on JSON, Qt and
# QTest templates (serving_args.cpp under ASan: 31 s at -O1, 17 s at -O0, on the 2-core AMD host of
# 2026-11-27), while the suites spend their time in core.
# - MOSAIC_TEST_OPT: the suites (every preset gives -O0);
# - MOSAIC_COLD_OPT: the CLI's commands and the workbench (-O0 in the sanitizer presets only: the
#   default preset's are what a user installs).
# Each is an INTERFACE target its users link PRIVATE.
set(MOSAIC_TEST_OPT "" CACHE STRING "Optimization flag for the test suites' own code (empty: the build type's)")
set(MOSAIC_COLD_OPT "" CACHE STRING "Optimization flag for the CLI's and the workbench's own code (empty: the build type's)")
foreach(kind test cold)
  string(TOUPPER "${kind}" upper)
  add_library(mosaic_${kind}_opt INTERFACE)
  add_library(Mosaic::${kind}_opt ALIAS mosaic_${kind}_opt)
  if(MOSAIC_${upper}_OPT)
    target_compile_options(mosaic_${kind}_opt INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${MOSAIC_${upper}_OPT}>)
  endif()
endforeach()

# Unity builds: each target's sources compiled 8 to a translation unit, so that the headers every file
# includes (nlohmann JSON, LibTorch, Qt) and the templates they instantiate are compiled once per 8 files
# instead of once per file. The presets turn it on (CI, the README's build): see docs/benchmarks.md,
# "CI's time on the slower host". A plain configure (the device recipe; an edit-compile loop, where
# one edit would recompile its 7 neighbours) leaves it off. So names in anonymous namespaces must be
# unique within a target. The fuzz preset keeps it off: the parsers compile one by one there, so a
# source that leans on a neighbour's includes still fails to build somewhere in CI.
option(MOSAIC_UNITY_BUILD "Compile each target's sources 8 to a translation unit" OFF)
if(MOSAIC_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE 8)
endif()

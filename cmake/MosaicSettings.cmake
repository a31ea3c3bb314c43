# Settings every Mosaic target shares, carried by one INTERFACE target rather than global flags.
add_library(mosaic_settings INTERFACE)
add_library(Mosaic::settings ALIAS mosaic_settings)
target_compile_features(mosaic_settings INTERFACE cxx_std_20)
# QT_NO_KEYWORDS: LibTorch and Qt clash on `slots` in one translation unit.
target_compile_definitions(mosaic_settings INTERFACE QT_NO_KEYWORDS QT_NO_CAST_FROM_ASCII)
target_compile_options(mosaic_settings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)

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

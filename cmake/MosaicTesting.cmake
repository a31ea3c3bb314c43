# mosaic_add_test(NAME SOURCES … [LIBS …] [LABELS …])
# One Qt Test executable per suite, registered with CTest. A suite labelled `gpu` exits 77 when
# no device is present, which CTest reports as skipped.
# Suites run two at a time on two cores: OpenMP threads that spin while they wait for work steal the
# other suite's cores, and a step that takes 10 ms alone can then take seconds (a workbench test
# waited past its 60 s). Waiting threads sleep instead; ctest -j2 takes 70 s instead of 100–110.
set(MOSAIC_TEST_OMP "OMP_WAIT_POLICY=PASSIVE")

function(mosaic_add_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  set_target_properties(${name} PROPERTIES AUTOMOC ON)
  # mosaic_test_support (tests/CMakeLists.txt) brings core, Qt Test, JSON and MOSAIC_TEST_DATA.
  target_link_libraries(${name} PRIVATE Mosaic::settings Mosaic::test_opt mosaic_test_support ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES
    LABELS "${T_LABELS}" SKIP_RETURN_CODE 77 TIMEOUT 600
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;${MOSAIC_TEST_OMP}")
endfunction()

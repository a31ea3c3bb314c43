# cmake -DIN=kernel.cu -DOUT=kernel.cpp -P rewrite_launches.cmake
# A kernel source as simt compiles it (simt.h says what simt is): each launch `k<<<cfg>>>(args)`
# becomes `::simt::launcher("k", k, cfg)(args)`, and `extern __shared__ T name[];` the launch's
# dynamic shared memory. Nothing else changes and no line moves, so diagnostics name the .cu's lines.
file(READ "${IN}" src)
string(REGEX REPLACE "extern __shared__ ([A-Za-z_0-9:]+) ([A-Za-z_0-9]+)\\[\\];" "\\1* \\2 = ::simt::dynamic_shared<\\1>();" src "${src}")
string(REGEX REPLACE "([A-Za-z_][A-Za-z_0-9]*(<[^<>;()]*>)?)<<<" "::simt::launcher(\"\\1\", \\1, " src "${src}")
string(REPLACE ">>>(" ")(" src "${src}")
if(src MATCHES "<<<|>>>|extern __shared__")
  message(FATAL_ERROR "${IN}: a launch or a shared declaration simt could not rewrite")
endif()
file(WRITE "${OUT}" "#line 1 \"${IN}\"\n${src}")

#pragma once
// Stands in for the CUDA runtime's header in simt builds (tests/simt/simt.h says what simt is).
#include "simt/simt.h"

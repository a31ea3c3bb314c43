#pragma once
// A family's analysis as a command needs it: what its cache could not keep said on stderr as a
// warning (the analysis still stands).
#include "analysis/family_analysis.h"

namespace mosaic::cli {

Outcome<FamilyAnalysis> analyzed(const Family& family, const AnalysisOptions& options);

}  // namespace mosaic::cli

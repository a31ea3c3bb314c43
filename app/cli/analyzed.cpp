#include "cli/analyzed.h"

#include <iostream>

namespace mosaic::cli {

Outcome<FamilyAnalysis> analyzed(const Family& family, const AnalysisOptions& options) {
  auto r = analyze_family(family, options);
  if (r.ok())
    for (const std::string& w : r->warnings) std::cerr << "warning: " << w << "\n";
  return r;
}

}  // namespace mosaic::cli

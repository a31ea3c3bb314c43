#pragma once
// Where the files Mosaic ships live — sample_configs/ and resources/sample-family/, laid out under
// one folder as in the source tree — wherever the programs were installed or built.
#include <filesystem>

namespace mosaic {

// $MOSAIC_DATA_DIR when set; else <prefix>/share/mosaic when the running program is <prefix>/bin/…
// and that folder holds sample_configs/ (an installed package); else the source tree this build was
// configured from. Empty when none of them holds sample_configs/.
std::filesystem::path shipped_data_dir();

}  // namespace mosaic

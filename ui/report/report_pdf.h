#pragma once
// The report as an A4 PDF that reads like pages of a paper: the setup that was run, numbered figures
// drawn as vectors (never rasterized), and tables sized to their contents so that no word breaks,
// their header repeated when a table runs onto the next page.
#include <filesystem>

namespace mosaic::ui {

struct ReportContent;

// Throws IoError when the file cannot be written.
void write_report_pdf(const ReportContent& content, const std::filesystem::path& file);

}  // namespace mosaic::ui

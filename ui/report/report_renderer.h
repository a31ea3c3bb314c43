#pragma once
// Renders a QoS report: charts drawn with QCustomPlot off screen into PNG, SVG and PDF, an HTML page
// with the paper's figures and tables, and the same page as a PDF. Needs a QApplication (the
// offscreen platform is enough); no engine logic — the numbers come from core/store's ReportData.
#include <filesystem>
#include <vector>

#include "store/report_data.h"

namespace mosaic::ui {

// Writes throughput / ttft / turnaround / hit_rates charts (.png .svg .pdf), report.html and
// report.pdf into `dir`; returns the files written. Throws IoError when a file cannot be written.
std::vector<std::filesystem::path> render_report(const ReportData& data, const std::filesystem::path& dir);

}  // namespace mosaic::ui

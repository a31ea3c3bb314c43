#pragma once
// What a QoS report says, built once from ReportData and drawn twice (report.html and report.pdf):
// the setup that was run, the charts as data, and the tables as text. Times are in ms, rates in
// requests per minute or second as each label says.
#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>
#include <vector>

#include "store/report_data.h"

class QCustomPlot;

namespace mosaic::ui {

struct ChartSeries {
  QString name;
  QVector<double> x, y;
  QVector<double> error;  // per point, ± one standard deviation over its repeats (NaN: one run); empty: none at all
};

struct ChartSpec {
  QString stem, title, caption, xlabel, ylabel;
  std::vector<ChartSeries> series;
  bool diagonal = false;   // the y = x line: throughput can never exceed the arrival rate
  bool integer_x = false;  // layers
};

struct ReportTable {
  QString caption;
  QStringList header;
  QList<QStringList> rows;
  QVector<bool> left;  // per column: text left-aligned (names), else numbers right-aligned
  int key_columns = 1;  // the leading columns that name a row: repeated in each part of a table too wide for a page
};

struct ReportContent {
  QString title, subtitle;
  QList<QPair<QString, QString>> setup;  // (what, value): family, strategies, clock, durations, machine…
  QString throughput_definition;
  std::vector<ChartSpec> charts;         // throughput, ttft, turnaround, hit_rates
  std::vector<ReportTable> tables;       // latency per strategy, hit rate per layer, layer latency by hits, runs
};

ReportContent report_content(const ReportData& data);

// What the report's CSV and JSON files are and how their columns say units, for the last line of
// both pages.
QString tables_note();

// Draws `chart` into `plot`: each series with its own colour, marker and dash so that series lying
// on one another stay told apart, and the legend below the axes, never over the data, in as many
// columns as fit in `width`.
void draw_chart(QCustomPlot& plot, const ChartSpec& chart, int width);

}  // namespace mosaic::ui

#include "workbench/runs_panel.h"
#include "workbench/file_dialogs.h"
#include "workbench/flow_layout.h"

#include <QDateTime>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QTabWidget>
#include <QSpinBox>
#include <QPushButton>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTableView>
#include <QTextEdit>
#include <QVBoxLayout>

#include <cmath>

#include "report/plot_export.h"
#include "report/qcustomplot_include.h"
#include "workbench/chart.h"
#include "report/report_renderer.h"
#include "workbench/expert_trace.h"
#include "workbench/layout_grid.h"

namespace mosaic::ui {

namespace {

const ReportRun* find_run(const ReportData& d, qint64 id) {
  for (const ReportRun& r : d.runs)
    if (r.info.id == id) return &r;
  return nullptr;
}

QStandardItem* number(double v, int decimals) {
  auto* item = new QStandardItem(std::isnan(v) ? QStringLiteral("–") : QString::number(v, 'f', decimals));
  item->setData(v, Qt::UserRole);
  item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
  return item;
}

}  // namespace

RunsPanel::RunsPanel(QWidget* parent) : QWidget(parent), model_(new QStandardItemModel(this)) {
  auto* open = new QPushButton(tr("Open runs database…"));
  auto* reload = new QPushButton(tr("Reload"));
  auto* exportButton = new QPushButton(tr("Export report of selected…"));
  status_ = new QLabel(tr("No database open."));
  status_->setWordWrap(true);
  table_ = new QTableView;
  table_->setModel(model_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->verticalHeader()->hide();
  table_->setSortingEnabled(true);
  plot_ = new Chart(tr("Hit rate per layer of two runs"), tr("layer"), tr("hit rate"));
  plot_->setMinimumHeight(160);
  plot_->setPlaceholder(tr("Select two runs in the table to compare their hit rates per layer"));
  connect(plot_, &Chart::exported, status_, &QLabel::setText);
  details_ = new QTextEdit;
  details_->setReadOnly(true);
  trace_ = new ExpertTraceModel(this);
  auto* traceView = new QTableView;
  traceView->setModel(trace_);
  traceView->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  request_ = new QSpinBox;
  request_->setPrefix(tr("request "));
  request_->setRange(0, 1 << 30);
  request_->setToolTip(tr("Its index in the run's workload, from 0"));
  auto* traceButton = new QPushButton(tr("Show expert trace"));
  traceButton->setToolTip(tr("Of the selected run's request: every token's router choices per layer (runs recorded with expert traces)"));
  trace_title_ = new QLabel(tr("Select a run recorded with expert traces, choose a request, and show its trace."));
  trace_title_->setWordWrap(true);
  auto* tracePage = new QWidget;
  auto* traceRow = new QHBoxLayout;
  traceRow->addWidget(request_);
  traceRow->addWidget(traceButton);
  traceRow->addStretch();
  auto* traceLayout = new QVBoxLayout(tracePage);
  traceLayout->setContentsMargins(0, 0, 0, 0);
  traceLayout->addLayout(traceRow);
  traceLayout->addWidget(trace_title_);
  traceLayout->addWidget(traceView, 1);
  auto* detailTabs = new QTabWidget;
  detailTabs->addTab(details_, tr("Comparison"));
  detailTabs->addTab(tracePage, tr("Expert trace"));
  connect(traceButton, &QPushButton::clicked, this, &RunsPanel::showTraceOfSelected);

  auto* buttons = new FlowLayout;
  buttons->addWidget(open);
  buttons->addWidget(reload);
  buttons->addWidget(exportButton);
  auto* compareRow = new QSplitter(Qt::Horizontal);
  compareRow->addWidget(plot_);
  compareRow->addWidget(detailTabs);
  // The chart and its text share the row (setSizes gives proportions: the splitter scales them to
  // the room it gets), and the row takes more of the height than the table, which scrolls.
  compareRow->setSizes({1000, 1000});
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(table_);
  split->addWidget(compareRow);
  split->setSizes({2000, 3000});
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(buttons);
  layout->addWidget(status_);
  layout->addWidget(split, 1);

  connect(open, &QPushButton::clicked, this, [this] {
    const QString f = remembered(QFileDialog::getOpenFileName(this, tr("Open a runs database"), startFolder(), tr("SQLite (*.sqlite *.db);;All files (*)")));
    if (!f.isEmpty()) openDatabase(f);
  });
  connect(reload, &QPushButton::clicked, this, [this] {
    if (!database_.isEmpty()) openDatabase(database_);
  });
  connect(exportButton, &QPushButton::clicked, this, [this] {
    // A new folder by default (named for now, so that reports do not overwrite each other); any
    // name typed that does not exist yet is made. An existing folder is opened in the dialog, as
    // save dialogs do; a file is refused.
    const QString suggested = QStringLiteral("mosaic-report-%1").arg(QDateTime::currentDateTime().toString(QStringLiteral("yyyy-MM-dd-HHmm")));
    const QString dir = remembered(QFileDialog::getSaveFileName(this, tr("Export the report into a new folder"), inStartFolder(suggested), QString(),
                                                                nullptr, QFileDialog::DontConfirmOverwrite));
    if (dir.isEmpty()) return;
    if (QFileInfo(dir).exists() && !QFileInfo(dir).isDir()) return showError(tr("%1 is a file: give a folder to write the report into").arg(dir));
    exportSelected(dir);
  });
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &RunsPanel::compare);
}

void RunsPanel::showTraceOfSelected() {
  const QList<qint64> ids = selectedRuns();
  if (ids.size() != 1) return showError(tr("Select one run to show a request's expert trace."));
  Q_EMIT traceRequested(database_, ids.front(), request_->value());
}

void RunsPanel::showTrace(const QString& title, const QString& target, int layers, const QStringList& labels,
                          const QVector<ExpertRoute>& routes) {
  trace_->setTrace(target, layers, labels, routes);
  trace_title_->setText(title);
  status_->setStyleSheet(QString());
  status_->setText(tr("Expert trace: %1").arg(title));
}

void RunsPanel::openDatabase(const QString& file) {
  database_ = file;
  status_->setStyleSheet(QString());
  status_->setText(tr("Reading %1…").arg(file));
  Q_EMIT loadRequested(file);
}

void RunsPanel::showRuns(const ReportData& d) {
  data_ = d;
  model_->clear();
  model_->setHorizontalHeaderLabels({tr("Run"), tr("Strategy"), tr("Rate (req/s)"), tr("Repeat"), tr("Status"), tr("Requests"),
                                     tr("req/min"), tr("tok/s"), tr("TTFT mean (ms)"), tr("TTFT p90 (ms)"),
                                     tr("Turnaround mean (ms)"), tr("Hit %"), tr("Swaps"), tr("Started")});
  for (const ReportRun& r : d.runs) {
    const RunSummary& s = r.summary;
    QList<QStandardItem*> row{number(static_cast<double>(r.info.id), 0), new QStandardItem(QString::fromStdString(r.info.strategy)),
                              number(r.rate, 2), number(r.repeat, 0), new QStandardItem(QString::fromStdString(r.info.status)),
                              number(static_cast<double>(s.requests), 0), number(s.requests_per_minute, 1), number(s.tokens_per_second, 1),
                              number(s.ttft.mean * 1e3, 2), number(s.ttft.p90 * 1e3, 2), number(s.turnaround.mean * 1e3, 2),
                              number(100.0 * s.hit_rate, 1), number(static_cast<double>(s.swaps), 0),
                              new QStandardItem(QString::fromStdString(r.info.started_at))};
    model_->appendRow(row);
  }
  table_->resizeColumnsToContents();
  status_->setText(tr("%1: %2 runs of %3 strategies. Select two to compare.").arg(QString::fromStdString(d.database)).arg(d.runs.size()).arg(d.strategies.size()));
}

QList<qint64> RunsPanel::selectedRuns() const {
  QList<qint64> ids;
  for (const QModelIndex& i : table_->selectionModel()->selectedRows(0)) ids << static_cast<qint64>(model_->data(i, Qt::UserRole).toDouble());
  std::sort(ids.begin(), ids.end());
  return ids;
}

QString RunsPanel::comparison() const { return details_->toPlainText(); }
QString RunsPanel::statusText() const { return status_->text(); }

void RunsPanel::compare() {
  plot_->clearPlottables();
  const QList<qint64> ids = selectedRuns();
  if (ids.size() != 2) {
    details_->setPlainText(ids.size() < 2 ? tr("Select two runs to compare them.") : tr("Select exactly two runs."));
    plot_->layOutLegend();
    plot_->replot();
    return;
  }
  const ReportRun* a = find_run(data_, ids[0]);
  const ReportRun* b = find_run(data_, ids[1]);
  if (!a || !b) return;
  // Per-layer hit rates as grouped bars.
  int colour = 0;
  for (const auto& [run, offset] : {std::pair{a, -0.2}, std::pair{b, 0.2}}) {
    auto* bars = new QCPBars(plot_->xAxis, plot_->yAxis);
    bars->setName(tr("run %1: %2 @ %3 req/s").arg(run->info.id).arg(QString::fromStdString(run->info.strategy)).arg(run->rate));
    bars->setWidth(0.38);
    bars->setBrush(variantColor(colour++));
    bars->setPen(Qt::NoPen);
    for (std::size_t l = 0; l < run->summary.hit_rate_per_layer.size(); ++l) {
      const double v = run->summary.hit_rate_per_layer[l];
      if (!std::isnan(v)) bars->addData(static_cast<double>(l) + offset, v);
    }
  }
  plot_->xAxis->setRange(-0.6, static_cast<double>(std::max(a->summary.hit_rate_per_layer.size(), b->summary.hit_rate_per_layer.size())) - 0.4);
  plot_->yAxis->setRange(0, 1.05);
  plot_->layOutLegend();
  plot_->replot();
  auto line = [&](const QString& name, double x, double y, int decimals) {
    const bool comparable = std::abs(x) > 1e-9 && !std::isnan(x) && !std::isnan(y);
    return QStringLiteral("<tr><td>%1</td><td align=right>%2</td><td align=right>%3</td><td align=right>%4</td></tr>")
        .arg(name).arg(x, 0, 'f', decimals).arg(y, 0, 'f', decimals)
        .arg(comparable ? QString::number(y / x, 'f', 2) + QStringLiteral("×") : QStringLiteral("–"));
  };
  const RunSummary& x = a->summary;
  const RunSummary& y = b->summary;
  QString t = tr("<table cellspacing=0 cellpadding=3><tr><th align=left>metric</th><th>run %1 (%2)</th><th>run %3 (%4)</th><th>B / A</th></tr>")
                  .arg(a->info.id).arg(QString::fromStdString(a->info.strategy)).arg(b->info.id).arg(QString::fromStdString(b->info.strategy));
  t += line(tr("requests/min"), x.requests_per_minute, y.requests_per_minute, 1);
  t += line(tr("tokens/s"), x.tokens_per_second, y.tokens_per_second, 1);
  t += line(tr("TTFT mean ms"), x.ttft.mean * 1e3, y.ttft.mean * 1e3, 2);
  t += line(tr("TTFT p90 ms"), x.ttft.p90 * 1e3, y.ttft.p90 * 1e3, 2);
  t += line(tr("turnaround mean ms"), x.turnaround.mean * 1e3, y.turnaround.mean * 1e3, 2);
  t += line(tr("turnaround p90 ms"), x.turnaround.p90 * 1e3, y.turnaround.p90 * 1e3, 2);
  t += line(tr("hit rate"), x.hit_rate, y.hit_rate, 3);
  t += line(tr("swaps"), static_cast<double>(x.swaps), static_cast<double>(y.swaps), 0);
  t += line(tr("swap s"), x.swap_seconds, y.swap_seconds, 3);
  details_->setHtml(t + QStringLiteral("</table>"));
}

void RunsPanel::exportSelected(const QString& dir) {
  if (database_.isEmpty()) return showError(tr("Open a runs database first."));
  status_->setText(tr("Writing the report into %1…").arg(dir));
  Q_EMIT exportRequested(database_, selectedRuns(), dir);  // none selected: every run
}

void RunsPanel::writeReport(const ReportData& data, const QString& dir) {
  try {
    const auto files = render_report(data, dir.toStdString());
    status_->setStyleSheet(QString());
    status_->setText(tr("Wrote the report of %1 runs into %2 (tables, %3 chart and page files).").arg(data.runs.size()).arg(dir).arg(files.size()));
  } catch (const std::exception& e) {
    showError(QString::fromUtf8(e.what()));
  }
}

void RunsPanel::showError(const QString& message) {
  status_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  status_->setText(message);
}

}  // namespace mosaic::ui

#include "workbench/family_panel.h"
#include "workbench/file_dialogs.h"
#include "workbench/flow_layout.h"

#include "workbench/byte_size_box.h"

#include <QComboBox>
#include <QDir>
#include <QStandardItemModel>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QListView>
#include <QMimeData>
#include <QTreeView>
#include <QUrl>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QTableView>
#include <QVBoxLayout>

#include "common/byte_size.h"

namespace mosaic::ui {

// IEC units, as everywhere in Mosaic (the CLI, the reports).
QString formatBytes(qint64 bytes) { return QString::fromStdString(format_bytes(static_cast<std::uint64_t>(std::max<qint64>(bytes, 0)))); }

namespace {
// 2823296 → "2.82 M", as a narrow column shows it.
QString compactCount(qint64 n) {
  if (n >= 1'000'000'000) return QStringLiteral("%1 B").arg(static_cast<double>(n) / 1e9, 0, 'f', 2);
  if (n >= 1'000'000) return QStringLiteral("%1 M").arg(static_cast<double>(n) / 1e6, 0, 'f', 2);
  if (n >= 1'000) return QStringLiteral("%1 k").arg(static_cast<double>(n) / 1e3, 0, 'f', 1);
  return QString::number(n);
}
enum Column { Name, Kind, Parameters, Bytes, NonExpert, DTypes, Folder, ColumnCount };
}

void FamilyModel::setFamily(const FamilyInfo& family) {
  beginResetModel();
  family_ = family;
  endResetModel();
}

int FamilyModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(family_.variants.size()); }
int FamilyModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant FamilyModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= family_.variants.size()) return {};
  const VariantInfo& v = family_.variants[index.row()];
  if (role == Qt::ToolTipRole)
    return v.architecture + QStringLiteral("\n") + v.dir + tr("\n%L1 parameters, %L2 active per token").arg(v.parameters).arg(v.active_parameters);
  if (role == Qt::TextAlignmentRole && (index.column() == Parameters || index.column() == Bytes || index.column() == NonExpert))
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Name: return v.name;
    case Kind:
      if (v.adapter_experts > 0) return tr("ESFT adapter (%1 experts)").arg(v.adapter_experts);
      return v.delta.isEmpty() ? tr("full checkpoint") : tr("delta folder (%1)").arg(v.delta);
    case Parameters: return tr("%1 (%2 active)").arg(compactCount(v.parameters), compactCount(v.active_parameters));  // exact in the tooltip
    case Bytes: return formatBytes(v.bytes);
    case NonExpert: return formatBytes(v.non_expert_bytes);
    case DTypes: return v.dtypes;
    case Folder: return v.dir;
  }
  return {};
}

QVariant FamilyModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"Variant", "Kind", "Parameters", "Bytes", "Non-expert", "Dtypes", "Folder"};
  return tr(names[section]);
}

FamilyPanel::FamilyPanel(QWidget* parent) : QWidget(parent), model_(new FamilyModel(this)) {
  auto* open = new QPushButton(tr("Open family folder…"));
  auto* add = new QPushButton(tr("Add variant folders…"));
  add->setToolTip(tr("Add checkpoints to the open family (select several with Ctrl or Shift), or drop folders here"));
  remove_ = new QPushButton(tr("Remove"));
  remove_->setToolTip(tr("Remove the selected variants from the family"));
  remove_->setEnabled(false);
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setEnabled(false);
  cancel_->hide();  // the bar and Cancel show only while a family opens
  progress_ = new QProgressBar;
  progress_->setTextVisible(true);
  progress_->hide();
  status_ = new QLabel(tr("No family open."));
  status_->setWordWrap(true);  // a long summary wraps in a narrow dock
  error_ = new QLabel;
  error_->setWordWrap(true);
  error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  error_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; }"));
  error_->hide();
  table_ = new QTableView;
  table_->setModel(model_);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->hide();
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  // A short dock scrolls before the table shows fewer than three variants (its own scroll is for the rest).
  table_->setMinimumHeight(table_->horizontalHeader()->sizeHint().height() + 3 * table_->verticalHeader()->defaultSectionSize() +
                           2 * table_->frameWidth() + table_->horizontalScrollBar()->sizeHint().height());
  device_ = new QComboBox;
  device_->addItem(tr("CPU"), QStringLiteral("cpu"));
  device_->addItem(tr("CUDA GPU"), QStringLiteral("cuda"));
  device_->setToolTip(tr("Where the family is served: chat, comparisons, the HTTP server and engine sweeps. The CPU backend "
                         "computes in fp32 and is the reference; the CUDA backend keeps bf16 weights on the GPU"));
  showDevices(QString(), tr("looking for a GPU…"));
  auto* deviceLabel = new QLabel(tr("Serve on"));
  deviceLabel->setBuddy(device_);
  cpu_weights_ = new QComboBox;
  cpu_weights_->addItem(tr("as stored"), QStringLiteral("stored"));
  cpu_weights_->addItem(tr("read in place"), QStringLiteral("mapped"));
  cpu_weights_->addItem(tr("in fp32"), QStringLiteral("fp32"));
  cpu_weights_->setToolTip(tr("How the CPU backend holds weights (the GPU keeps bf16); every choice computes the same numbers. As stored: bf16 weights stay "
                              "bf16 in its slots and sets, copied from the files as a GPU would copy them. Read in place: no copies at "
                              "all, the files are held once (for a model near the size of RAM; loads and swaps then move nothing; not "
                              "with a host budget). In fp32: every weight widened when loaded, twice the memory"));
  auto* weightsLabel = new QLabel(tr("CPU weights"));
  weightsLabel->setBuddy(cpu_weights_);
  host_budget_ = new ByteSizeBox;
  host_budget_->setMinimum(0);
  host_budget_->setSpecialValueText(tr("all"));
  host_budget_->setValue(0);
  host_budget_->setToolTip(tr("Host RAM the family's weights may hold (each distinct tensor once): the most recently used stay, the "
                              "rest are read from disk when a miss needs them. \"all\": every weight in RAM. Type a size (16GiB) or all; "
                              "the family opens again under it"));
  auto* hostLabel = new QLabel(tr("Host budget"));
  hostLabel->setBuddy(host_budget_);

  // Rows that wrap: the dock is narrow at 1366×768.
  auto* buttons = new FlowLayout;
  buttons->addWidget(open);
  buttons->addWidget(add);
  buttons->addWidget(remove_);
  auto* deviceRow = new FlowLayout;
  deviceRow->addWidget(FlowLayout::group({deviceLabel, device_}));
  deviceRow->addWidget(FlowLayout::group({hostLabel, host_budget_}));
  auto* bar = new QHBoxLayout;
  bar->addWidget(progress_, 1);
  bar->addWidget(cancel_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(buttons);
  layout->addLayout(deviceRow);
  // A row of its own: beside the device and the host budget it would widen the dock at 1366×768.
  auto* weightsRow = new FlowLayout;
  weightsRow->addWidget(FlowLayout::group({weightsLabel, cpu_weights_}));
  layout->addLayout(weightsRow);
  layout->addWidget(status_);
  layout->addWidget(error_);
  layout->addWidget(table_, 1);
  layout->addLayout(bar);

  connect(open, &QPushButton::clicked, this, [this] {
    // A folder of variant folders (its variants are found as everywhere: model/variant_folders.h).
    const QString root = remembered(QFileDialog::getExistingDirectory(this, tr("Open a family folder"), startFolder()));
    if (!root.isEmpty()) Q_EMIT openRequested({root});
  });
  connect(host_budget_, &QAbstractSpinBox::editingFinished, this, [this] {
    if (host_budget_->bytes() != host_budget_shown_) Q_EMIT hostBudgetRequested(host_budget_->bytes());
  });
  connect(add, &QPushButton::clicked, this, &FamilyPanel::chooseFolders);
  connect(remove_, &QPushButton::clicked, this, &FamilyPanel::removeSelected);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    remove_->setEnabled(table_->selectionModel()->hasSelection());
  });
  setAcceptDrops(true);
  connect(cancel_, &QPushButton::clicked, this, &FamilyPanel::cancelRequested);
  // Asked of the engine; the box shows what it serves on once it answers (showDevice).
  connect(device_, &QComboBox::activated, this, [this](int index) { Q_EMIT deviceRequested(device_->itemData(index).toString()); });
  connect(cpu_weights_, &QComboBox::activated, this, [this](int index) { Q_EMIT cpuWeightsRequested(cpu_weights_->itemData(index).toString()); });
}

QString FamilyPanel::device() const { return device_->currentData().toString(); }
QString FamilyPanel::cpuWeights() const { return cpu_weights_->currentData().toString(); }

void FamilyPanel::showCpuWeights(const QString& weights) {
  const QSignalBlocker quiet(cpu_weights_);
  cpu_weights_->setCurrentIndex(std::max(0, cpu_weights_->findData(weights)));
}

void FamilyPanel::showDevices(const QString& cudaDescription, const QString& cudaUnavailable) {
  auto* items = qobject_cast<QStandardItemModel*>(device_->model());
  QStandardItem* cuda = items->item(device_->findData(QStringLiteral("cuda")));
  const bool usable = !cudaDescription.isEmpty();
  cuda->setEnabled(usable);
  cuda->setText(usable ? tr("CUDA: %1").arg(cudaDescription) : tr("CUDA GPU (none here)"));
  cuda->setToolTip(usable ? tr("bf16 weights on %1").arg(cudaDescription) : tr("Cannot be used here: %1").arg(cudaUnavailable));
}

void FamilyPanel::showDevice(const QString& device) {
  const QSignalBlocker quiet(device_);
  device_->setCurrentIndex(std::max(0, device_->findData(device)));
  cpu_weights_->setEnabled(device == QStringLiteral("cpu"));  // the CUDA backend holds bf16 on the GPU
}

void FamilyPanel::chooseFolders() {
  QFileDialog dialog(this, tr("Add variant folders"));
  dialog.setFileMode(QFileDialog::Directory);
  // Native folder pickers select one folder; Qt's own dialog selects several once its views allow it.
  dialog.setOption(QFileDialog::DontUseNativeDialog, true);
  for (QAbstractItemView* view : dialog.findChildren<QListView*>()) view->setSelectionMode(QAbstractItemView::ExtendedSelection);
  for (QAbstractItemView* view : dialog.findChildren<QTreeView*>()) view->setSelectionMode(QAbstractItemView::ExtendedSelection);
  if (dialog.exec() == QDialog::Accepted) addFolders(dialog.selectedFiles());
}

QStringList FamilyPanel::variantDirs() const {
  QStringList dirs;
  for (const VariantInfo& v : model_->family().variants) dirs << v.dir;
  return dirs;
}

void FamilyPanel::addFolders(const QStringList& dirs) {
  QStringList all = variantDirs();
  for (const QString& d : dirs)
    if (!all.contains(QDir::cleanPath(d))) all << QDir::cleanPath(d);
  if (all.size() > variantDirs().size()) Q_EMIT openRequested(all);
}

void FamilyPanel::removeSelected() {
  QStringList keep;
  const QStringList dirs = variantDirs();
  for (int row = 0; row < dirs.size(); ++row)
    if (!table_->selectionModel()->isRowSelected(row, {})) keep << dirs[row];
  if (keep.isEmpty()) {
    showError(tr("Remove"), tr("a family needs at least one variant: open another family instead"));
    return;
  }
  if (keep.size() < dirs.size()) Q_EMIT openRequested(keep);
}

namespace {
QStringList droppedFolders(const QMimeData* mime) {
  QStringList dirs;
  if (mime == nullptr) return dirs;
  for (const QUrl& url : mime->urls())
    if (url.isLocalFile() && QFileInfo(url.toLocalFile()).isDir()) dirs << url.toLocalFile();
  return dirs;
}
}  // namespace

void FamilyPanel::dragEnterEvent(QDragEnterEvent* event) {
  if (!droppedFolders(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void FamilyPanel::dropEvent(QDropEvent* event) {
  const QStringList dirs = droppedFolders(event->mimeData());
  if (dirs.isEmpty()) return;
  event->acceptProposedAction();
  addFolders(dirs);
}

QString FamilyPanel::errorText() const { return error_->isVisible() ? error_->text() : QString(); }

void FamilyPanel::showProgress(const QString& stage, int done, int total) {
  error_->hide();
  status_->setText(stage);
  progress_->setRange(0, std::max(total, 1));
  progress_->setValue(done);
  cancel_->setEnabled(done < total);
  progress_->setVisible(done < total);
  cancel_->setVisible(done < total);
}

void FamilyPanel::showFamily(const FamilyInfo& family) {
  model_->setFamily(family);
  table_->resizeColumnsToContents();
  cancel_->setEnabled(false);
  progress_->hide();
  cancel_->hide();
  setHostBudget(family.host_budget);
  const QString host = family.host_budget > 0 && family.host_budget < family.host_bytes
                           ? tr("%1 distinct, at most %2 in RAM, the rest read from disk").arg(formatBytes(family.host_bytes), formatBytes(family.host_budget))
                           : tr("%1 distinct, all in RAM").arg(formatBytes(family.host_bytes));
  status_->setText(tr("%1 variants · %2 layers × %3 experts, top-%4 · %5 per expert · %6%7")
                       .arg(family.variants.size())
                       .arg(family.layers)
                       .arg(family.experts)
                       .arg(family.top_k)
                       .arg(formatBytes(family.bytes_per_expert))
                       .arg(host)
                       .arg(family.distances_from_cache ? tr(" · distances from cache") : QString()));
}

qint64 FamilyPanel::hostBudget() const { return host_budget_->bytes(); }

void FamilyPanel::setHostBudget(qint64 bytes) {
  host_budget_shown_ = bytes;
  host_budget_->setBytes(bytes);
}

void FamilyPanel::showError(const QString& what, const QString& message) {
  cancel_->setEnabled(false);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->hide();
  cancel_->hide();
  error_->setText(what + QStringLiteral(": ") + message);
  error_->show();
}

}  // namespace mosaic::ui

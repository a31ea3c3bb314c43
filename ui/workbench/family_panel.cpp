#include "workbench/family_panel.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

#include "common/byte_size.h"

namespace mosaic::ui {

// IEC units, as everywhere in Mosaic (the CLI, the reports).
QString formatBytes(qint64 bytes) { return QString::fromStdString(format_bytes(static_cast<std::uint64_t>(std::max<qint64>(bytes, 0)))); }

namespace {
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
  if (role == Qt::ToolTipRole) return v.architecture + QStringLiteral("\n") + v.dir;
  if (role == Qt::TextAlignmentRole && (index.column() == Parameters || index.column() == Bytes || index.column() == NonExpert))
    return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Name: return v.name;
    case Kind: return v.adapter_experts > 0 ? tr("ESFT adapter (%1 experts)").arg(v.adapter_experts) : tr("full checkpoint");
    case Parameters: return tr("%L1 (%L2 active)").arg(v.parameters).arg(v.active_parameters);
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
  auto* add = new QPushButton(tr("Choose variant folders…"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setEnabled(false);
  progress_ = new QProgressBar;
  progress_->setTextVisible(true);
  status_ = new QLabel(tr("No family open."));
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

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(open);
  buttons->addWidget(add);
  buttons->addStretch();
  auto* bar = new QHBoxLayout;
  bar->addWidget(progress_, 1);
  bar->addWidget(cancel_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(buttons);
  layout->addWidget(status_);
  layout->addWidget(error_);
  layout->addWidget(table_, 1);
  layout->addLayout(bar);

  connect(open, &QPushButton::clicked, this, [this] {
    // A folder of variant folders (its variants are found as everywhere: model/variant_folders.h).
    const QString root = QFileDialog::getExistingDirectory(this, tr("Open a family folder"));
    if (!root.isEmpty()) Q_EMIT openRequested({root});
  });
  connect(add, &QPushButton::clicked, this, &FamilyPanel::chooseFolders);
  connect(cancel_, &QPushButton::clicked, this, &FamilyPanel::cancelRequested);
}

void FamilyPanel::chooseFolders() {
  QFileDialog dialog(this, tr("Choose variant folders"));
  dialog.setFileMode(QFileDialog::Directory);
  dialog.setOption(QFileDialog::DontUseNativeDialog, true);  // the native one picks a single folder
  if (dialog.exec() == QDialog::Accepted) Q_EMIT openRequested(dialog.selectedFiles());
}

QString FamilyPanel::errorText() const { return error_->isVisible() ? error_->text() : QString(); }

void FamilyPanel::showProgress(const QString& stage, int done, int total) {
  error_->hide();
  status_->setText(stage);
  progress_->setRange(0, std::max(total, 1));
  progress_->setValue(done);
  cancel_->setEnabled(done < total);
}

void FamilyPanel::showFamily(const FamilyInfo& family) {
  model_->setFamily(family);
  table_->resizeColumnsToContents();
  cancel_->setEnabled(false);
  status_->setText(tr("%1 variants · %2 layers × %3 experts, top-%4 · %5 per expert%6")
                       .arg(family.variants.size())
                       .arg(family.layers)
                       .arg(family.experts)
                       .arg(family.top_k)
                       .arg(formatBytes(family.bytes_per_expert))
                       .arg(family.distances_from_cache ? tr(" · distances from cache") : QString()));
}

void FamilyPanel::showError(const QString& what, const QString& message) {
  cancel_->setEnabled(false);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  error_->setText(what + QStringLiteral(": ") + message);
  error_->show();
}

}  // namespace mosaic::ui

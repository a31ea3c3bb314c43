#include "workbench/expert_trace.h"

#include <QBrush>
#include <QColor>

namespace mosaic::ui {

void ExpertTraceModel::start(const QString& target) {
  beginResetModel();
  target_ = target;
  layers_ = 0;
  quoted_ = true;
  text_.clear();
  routes_.clear();
  endResetModel();
}

void ExpertTraceModel::add(const TokenTrace& token) {
  if (layers_ == 0 && !token.hits.isEmpty()) {  // the first token tells how many layers there are
    beginResetModel();
    layers_ = static_cast<int>(token.hits.size());
    endResetModel();
  }
  if (layers_ == 0) return;
  const int before = static_cast<int>(text_.size());
  QStringList text = text_;
  for (int i = 0; i < token.prompt.size(); ++i) {
    if (text.size() <= i) text.resize(i + 1);
    text[i] = token.prompt[i];
  }
  if (token.position >= 0) {
    if (text.size() <= token.position) text.resize(token.position + 1);
    text[token.position] = token.text;
  }
  for (const ExpertRoute& r : token.routes) {
    routes_[r.position * layers_ + r.layer].push_back(r);
    if (text.size() <= r.position) text.resize(r.position + 1);
  }
  if (text.size() > before) {
    beginInsertRows({}, before, static_cast<int>(text.size()) - 1);
    text_ = text;
    endInsertRows();
  } else {
    text_ = text;
  }
  if (before > 0) Q_EMIT dataChanged(index(0, 0), index(before - 1, layers_ - 1));  // routes arrive a step after their token
}

void ExpertTraceModel::setTrace(const QString& target, int layers, const QStringList& labels, const QVector<ExpertRoute>& routes) {
  beginResetModel();
  target_ = target;
  layers_ = layers;
  text_ = labels;
  quoted_ = false;
  routes_.clear();
  for (const ExpertRoute& r : routes) {
    if (r.layer >= layers_) continue;
    routes_[r.position * layers_ + r.layer].push_back(r);
    if (text_.size() <= r.position) text_.resize(r.position + 1);
  }
  endResetModel();
}

int ExpertTraceModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(text_.size()); }
int ExpertTraceModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : layers_; }

QVector<ExpertRoute> ExpertTraceModel::routes(int row, int layer) const { return routes_.value(row * layers_ + layer); }

QVariant ExpertTraceModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const QVector<ExpertRoute> rs = routes(index.row(), index.column());
  if (rs.isEmpty()) {
    if (role == Qt::ToolTipRole)
      return index.row() + 1 == rowCount() ? tr("The last token is not fed back: nothing routed it yet.") : tr("No experts in this layer (dense).");
    return {};
  }
  int hits = 0, misses = 0;
  for (const ExpertRoute& r : rs) {
    if (r.outcome == ExpertRoute::Outcome::Hit) ++hits;
    if (r.outcome == ExpertRoute::Outcome::Miss) ++misses;
  }
  switch (role) {
    case Qt::DisplayRole: {
      // "3 5": the experts chosen; "3←bible": served by another variant's copy.
      QStringList parts;
      for (const ExpertRoute& r : rs) {
        QString p = QString::number(r.expert);
        if (r.outcome == ExpertRoute::Outcome::Dropped) p += QStringLiteral("∅");
        else if (r.served_by != target_) p += QStringLiteral("←") + r.served_by;
        parts << p;
      }
      return parts.join(QStringLiteral("  "));
    }
    case Qt::BackgroundRole:
      return QBrush(misses == 0 ? (hits > 0 ? QColor(0xd4, 0xef, 0xd4) : QColor(0xee, 0xee, 0xee))
                                : (hits == 0 ? QColor(0xf6, 0xd0, 0xd0) : QColor(0xfd, 0xe3, 0xc4)));
    case Qt::ToolTipRole: {
      QString tip = tr("“%1” (position %2), layer %3:").arg(text_.value(index.row()).toHtmlEscaped()).arg(index.row()).arg(index.column());
      for (const ExpertRoute& r : rs) {
        const QString outcome = r.outcome == ExpertRoute::Outcome::Hit    ? tr("hit")
                                : r.outcome == ExpertRoute::Outcome::Miss ? tr("miss, loaded on demand")
                                                                          : tr("dropped (no slot under masked gating)");
        tip += tr("\nexpert %1: %2").arg(r.expert).arg(outcome);
        if (!r.served_by.isEmpty()) tip += tr(", served by %1's expert %2").arg(r.served_by).arg(r.served_expert);
      }
      return tip;
    }
    default: return {};
  }
}

QVariant ExpertTraceModel::headerData(int section, Qt::Orientation o, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (o == Qt::Horizontal) return tr("layer %1").arg(section);
  QString text = text_.value(section);
  text.replace(QLatin1Char('\n'), QStringLiteral("⏎"));
  if (!quoted_) return text;
  return QStringLiteral("%1  %2").arg(section).arg(text.isEmpty() ? QStringLiteral("·") : QStringLiteral("“%1”").arg(text));
}

}  // namespace mosaic::ui

#pragma once
// The expert trace of a chat answer or a recorded request: a token × layer table of the experts each token's router
// chose, coloured by hit (green), miss (red) or both (orange), with whose copy served each choice —
// the variant's own or, where the layout consolidated it away, another variant's.
#include <QAbstractTableModel>
#include <QMap>
#include <QStringList>
#include <QVector>

#include "workbench/engine_types.h"

namespace mosaic::ui {

class ExpertTraceModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  // A new answer of `target`.
  void start(const QString& target);
  // A streamed token: its text (at its position) and its step's routes; the first brings the prompt.
  void add(const TokenTrace& token);
  // A whole trace at once (a recorded request's): `labels` name the positions.
  void setTrace(const QString& target, int layers, const QStringList& labels, const QVector<ExpertRoute>& routes);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;
  // The routes of position `row` in `layer`, in the router's order.
  QVector<ExpertRoute> routes(int row, int layer) const;

 private:
  QString target_;
  int layers_ = 0;
  QStringList text_;                          // per position
  bool quoted_ = true;                        // text_ is the tokens' text (else labels)
  QMap<int, QVector<ExpertRoute>> routes_;    // position * layers + layer → its choices
};

}  // namespace mosaic::ui

#pragma once
// The workbench window: the chat in the middle, the family and the layout in docks whose
// arrangement, the window geometry, the budget and the recent families persist (QSettings).
#include <QMainWindow>
#include <QStringList>

namespace mosaic::ui {

class AnalysisPanel;
class ChatPane;
class ComparePane;
class EngineHost;
class FamilyPanel;
class LayoutPanel;
class RunsPanel;
class ServingPanel;
class UsagePanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // Variant folders, or family folders whose subfolders holding config.json are the variants. False
  // when none holds a variant (said in the family panel); the engine's open reports later.
  bool openFamily(const QStringList& dirs);
  static QStringList expandFamilyFolders(const QStringList& dirs);
  // A mosaic.session/1 file: reopens its family, budget or layout, serving settings and chat. False
  // when the file itself is refused (said in the family panel); the family's own open reports later.
  bool openSession(const QString& file);
  bool saveSession(const QString& file);

  EngineHost* engine() const { return engine_; }
  FamilyPanel* familyPanel() const { return family_; }
  LayoutPanel* layoutPanel() const { return layout_; }
  AnalysisPanel* analysisPanel() const { return analysis_; }
  RunsPanel* runsPanel() const { return runs_; }
  ServingPanel* servingPanel() const { return serving_; }
  ChatPane* chatPane() const { return chat_; }
  UsagePanel* usagePanel() const { return usage_; }
  ComparePane* comparePane() const { return compare_; }
  // View → Reset layout: every dock back where a first start puts it, shown.
  void resetLayout();
  // Help → Documentation: the README found beside the installed program or in the source tree ("" if none).
  static QString documentationPath();

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void rememberFamily(const QStringList& dirs);
  void rebuildRecentMenu();
  EngineHost* engine_;
  FamilyPanel* family_;
  LayoutPanel* layout_;
  AnalysisPanel* analysis_;
  RunsPanel* runs_;
  ServingPanel* serving_;
  ChatPane* chat_;
  UsagePanel* usage_;
  ComparePane* compare_;
  QMenu* recent_ = nullptr;
  QByteArray default_state_;  // the docks as arranged before any saved state was restored
  QString family_key_;  // where this family's budget is remembered
  // What is being opened: becomes the family (Recent, budget key, title) only once it has opened.
  QStringList opening_;
  QString opening_title_;
  QString device_error_;  // the device asked for that could not serve, until a family has opened
  QString pending_serving_;  // a session's serving settings, applied once its family is open
};

}  // namespace mosaic::ui

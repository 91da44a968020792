#pragma once
// Experiment designer: a form over an experiment file (experiments/README.md) — device preset,
// allocator options, model, training and sequence lengths — with the micro-batch sequence-length
// histogram redrawn on every edit and a live preview that re-simulates the first two steps in
// the background (a newer edit supersedes the running preview). Run executes every point of the
// experiment off the GUI thread, with progress and Cancel, and stores each as a run.
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTimer>
#include <QWidget>
#include <functional>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "gui/job_tracker.h"
#include "gui/metatypes.h"
#include "storage/db/run_store.h"

class QCustomPlot;
class QProgressBar;

namespace fragscope::gui {

// The document a fresh designer starts from: a small GPT on variable-length batches.
nlohmann::json defaultExperiment();

// Peaks of the preview simulation (the first point, at most two optimizer steps).
struct PreviewResult {
  bool oom = false;
  Bytes peakAllocated = 0;
  Bytes peakReserved = 0;
  int steps = 0;
};

class DesignerPage : public QWidget {
  Q_OBJECT
 public:
  explicit DesignerPage(QWidget* parent = nullptr);
  void setDatabase(const QString& databasePath);
  // Keeps the document in QSettings under `settingsKey` from now on (every edit), starting from
  // the one kept there by an earlier session when it is a JSON object; the window does this, a
  // bare page (tests) starts from defaultExperiment() and keeps nothing.
  void rememberDocument(const QString& settingsKey);
  // Starts over from defaultExperiment() (File ▸ New Experiment, the New button).
  void newDocument();
  QPushButton* newButton() const { return m_newButton; }

  // Replaces the whole document (File ▸ open of an experiment, tests) and refreshes the form.
  void setDocument(const nlohmann::json& document);
  const nlohmann::json& document() const { return m_document; }
  bool loadFile(const QString& path, QString* error);
  bool saveFile(const QString& path, QString* error) const;
  // The validation error of the current document; empty when it parses.
  QString validationError() const { return m_validationError; }
  const std::vector<int>& histogramLengths() const { return m_lengths; }
  // The variants and sweep as JSON ({"variants": [...], "sweep": {...}}), edited in place.
  QPlainTextEdit* pointsEditor() const { return m_pointsEditor; }
  QCustomPlot* histogram() const { return m_histogram; }
  QPushButton* runButton() const { return m_runButton; }
  const std::optional<PreviewResult>& preview() const { return m_preview; }

  void runExperiment();
  void cancelRun();
  bool running() const { return m_runJob.busy(); }
  bool busy() const { return m_runJob.busy() || m_previewJob.busy() || m_previewTimer.isActive(); }

 signals:
  void previewReady();
  void experimentStored(const std::vector<fragscope::storage::RunId>& runs);
  void errorOccurred(const QString& message);

 private:
  struct Binding {
    std::string pointer;  // JSON pointer into the document
    std::function<nlohmann::json()> read;
    std::function<void(const nlohmann::json&)> write;
  };
  void bindText(QLineEdit* edit, const std::string& pointer);
  void bindInt(QSpinBox* box, const std::string& pointer);
  void bindDouble(QDoubleSpinBox* box, const std::string& pointer);
  void bindChoice(QComboBox* box, const std::string& pointer);
  // A JSON boolean; a value that is an object (compile's per-part form) is kept while checked.
  void bindCheck(QCheckBox* box, const std::string& pointer);
  // Only the keys of the chosen sequence-length kind stay in the document, and only their
  // fields are enabled (a fixed length is one "Length", not a minimum).
  void applySeqKind();
  // The variants/sweep editor's JSON into the document; false (status says why) when invalid.
  bool applyPointsEditor();
  void onFormEdited();
  void refreshForm();
  void revalidate();
  void startPreview();

  QString m_databasePath;
  QString m_settingsKey;  // empty: the document is not kept between sessions
  nlohmann::json m_document;
  std::vector<Binding> m_bindings;
  bool m_updatingForm = false;
  QString m_validationError;
  std::vector<int> m_lengths;
  std::optional<PreviewResult> m_preview;

  QLabel* m_status;
  QPlainTextEdit* m_pointsEditor;
  QTimer m_pointsTimer;
  std::map<std::string, QWidget*> m_seqFields;  // seq_len key -> its field
  // What a field shows when the document lacks its key: the experiment format's default, so an
  // edit elsewhere never writes another value for it (hold_logits is true unless said otherwise).
  std::map<std::string, nlohmann::json> m_defaults;
  QLabel* m_previewLabel;
  QCustomPlot* m_histogram;
  QPushButton* m_runButton;
  QPushButton* m_newButton;
  QPushButton* m_cancelButton;
  QProgressBar* m_progress;
  QTimer m_previewTimer;
  JobTracker m_previewJob{this};
  JobTracker m_runJob{this};
};

}  // namespace fragscope::gui

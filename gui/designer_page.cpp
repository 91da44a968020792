#include "gui/designer_page.h"

#include <QFile>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QProgressBar>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QVBoxLayout>
#include <algorithm>
#include <chrono>
#include <map>

#include "engine/core/error.h"
#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "gui/file_dialogs.h"
#include "gui/format.h"
#include "gui/plot_style.h"
#include "storage/db/run_store.h"
#include "usecases/simulate.h"

namespace fragscope::gui {

namespace {
constexpr int kPreviewSteps = 2;
constexpr int kHistogramBins = 32;
}  // namespace

nlohmann::json defaultExperiment() {
  return nlohmann::json::parse(R"({
    "name": "designer",
    "description": "Designed in FragScope",
    "device": {"preset": "A100-40GB"},
    "allocator": {"alloc_conf": ""},
    "model": {"kind": "gpt", "layers": 4, "hidden": 512, "heads": 8, "ffn_mult": 4, "vocab": 8192},
    "training": {"batch_size": 4, "steps": 6, "grad_accum": 1, "precision": "bf16-autocast",
                 "seq_len": {"kind": "lognormal", "median": 400, "sigma": 0.6, "min": 32,
                             "max": 1024, "seed": 7},
                 "optimizer": "adamw"}
  })");
}

DesignerPage::DesignerPage(QWidget* parent)
    : QWidget(parent),
      m_status(new QLabel(this)),
      m_pointsEditor(new QPlainTextEdit(this)),
      m_previewLabel(new QLabel(this)),
      m_histogram(new QCustomPlot(this)),
      m_runButton(new QPushButton(tr("Run Experiment"), this)),
      m_newButton(new QPushButton(tr("New"), this)),
      m_cancelButton(new QPushButton(tr("Cancel"), this)),
      m_progress(new QProgressBar(this)) {
  auto* name = new QLineEdit(this);
  auto* device = new QComboBox(this);
  for (const workload::DevicePreset& preset : workload::device_presets())
    device->addItem(
        QString::fromStdString(preset.name),
        QStringLiteral("%1").arg(formatBytes(static_cast<double>(preset.total_memory))));
  auto* allocConf = new QLineEdit(this);
  allocConf->setPlaceholderText(tr("PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True"));
  auto spin = [this](int min, int max) {
    auto* box = new QSpinBox(this);
    box->setRange(min, max);
    return box;
  };
  auto* layers = spin(1, 256);
  auto* hidden = spin(64, 32768);
  hidden->setSingleStep(64);
  auto* heads = spin(1, 256);
  auto* vocab = spin(256, 1'000'000);
  auto* batch = spin(1, 4096);
  auto* steps = spin(1, 100000);
  auto* accum = spin(1, 1024);
  auto* precision = new QComboBox(this);
  for (const char* p : {"fp32", "bf16-autocast", "fp16-autocast", "bf16"})
    precision->addItem(QString::fromLatin1(p));
  auto* seqKind = new QComboBox(this);
  for (const char* k : {"fixed", "uniform", "lognormal"})
    seqKind->addItem(QString::fromLatin1(k));
  auto* seqMin = spin(1, 1'000'000);
  auto* seqMax = spin(1, 1'000'000);
  auto* seqMedian = new QDoubleSpinBox(this);
  seqMedian->setRange(1, 1e6);
  auto* seqSigma = new QDoubleSpinBox(this);
  seqSigma->setRange(0, 10);
  seqSigma->setSingleStep(0.1);
  auto* seqSeed = spin(0, 1'000'000);
  auto* seqValue = spin(1, 1'000'000);
  auto* checkpointing = new QComboBox(this);
  for (const char* c : {"none", "blocks", "ffn"})
    checkpointing->addItem(QString::fromLatin1(c));
  checkpointing->setToolTip(
      tr("blocks: checkpoint(block), non-reentrant; ffn: LayerNorm 2 + MLP "
         "of every block (GPT only)"));
  auto* optimizer = new QComboBox(this);
  for (const char* o : {"adamw", "adam", "sgd"})
    optimizer->addItem(QString::fromLatin1(o));
  auto* compile = new QCheckBox(tr("torch.compile LayerNorms and MLPs"), this);
  auto* holdLogits = new QCheckBox(tr("keep logits alive through backward"), this);
  m_seqFields = {{"value", seqValue},   {"min", seqMin},     {"max", seqMax},
                 {"median", seqMedian}, {"sigma", seqSigma}, {"seed", seqSeed}};

  bindText(name, "/name");
  bindChoice(device, "/device/preset");
  bindText(allocConf, "/allocator/alloc_conf");
  bindInt(layers, "/model/layers");
  bindInt(hidden, "/model/hidden");
  bindInt(heads, "/model/heads");
  bindInt(vocab, "/model/vocab");
  bindInt(batch, "/training/batch_size");
  bindInt(steps, "/training/steps");
  bindInt(accum, "/training/grad_accum");
  bindChoice(precision, "/training/precision");
  bindChoice(seqKind, "/training/seq_len/kind");
  bindInt(seqMin, "/training/seq_len/min");
  bindInt(seqMax, "/training/seq_len/max");
  bindDouble(seqMedian, "/training/seq_len/median");
  bindDouble(seqSigma, "/training/seq_len/sigma");
  bindInt(seqSeed, "/training/seq_len/seed");
  bindInt(seqValue, "/training/seq_len/value");
  bindChoice(checkpointing, "/training/checkpointing");
  bindChoice(optimizer, "/training/optimizer");
  bindCheck(compile, "/training/compile");
  bindCheck(holdLogits, "/training/hold_logits");
  m_defaults = {{"/training/checkpointing", "none"},
                {"/training/optimizer", "adamw"},
                {"/training/compile", false},
                {"/training/hold_logits", true}};

  auto* experimentBox = new QGroupBox(tr("Experiment"), this);
  auto* experimentForm = new QFormLayout(experimentBox);
  experimentForm->addRow(tr("Name"), name);
  experimentForm->addRow(tr("Device preset"), device);
  experimentForm->addRow(tr("Allocator config"), allocConf);
  auto* modelBox = new QGroupBox(tr("Model (GPT)"), this);
  auto* modelForm = new QFormLayout(modelBox);
  modelForm->addRow(tr("Layers"), layers);
  modelForm->addRow(tr("Hidden size"), hidden);
  modelForm->addRow(tr("Heads"), heads);
  modelForm->addRow(tr("Vocabulary"), vocab);
  auto* trainingBox = new QGroupBox(tr("Training"), this);
  auto* trainingForm = new QFormLayout(trainingBox);
  trainingForm->addRow(tr("Micro-batch size"), batch);
  trainingForm->addRow(tr("Optimizer steps"), steps);
  trainingForm->addRow(tr("Gradient accumulation"), accum);
  trainingForm->addRow(tr("Precision"), precision);
  trainingForm->addRow(tr("Checkpointing"), checkpointing);
  trainingForm->addRow(tr("Optimizer"), optimizer);
  trainingForm->addRow(tr("Compile"), compile);
  trainingForm->addRow(tr("Logits"), holdLogits);
  auto* seqBox = new QGroupBox(tr("Sequence lengths"), this);
  auto* seqForm = new QFormLayout(seqBox);
  seqForm->addRow(tr("Distribution"), seqKind);
  seqForm->addRow(tr("Length (fixed)"), seqValue);
  seqForm->addRow(tr("Minimum"), seqMin);
  seqForm->addRow(tr("Maximum"), seqMax);
  seqForm->addRow(tr("Median (lognormal)"), seqMedian);
  seqForm->addRow(tr("Sigma (lognormal)"), seqSigma);
  seqForm->addRow(tr("Seed"), seqSeed);

  auto* openButton = new QPushButton(tr("Open…"), this);
  auto* saveButton = new QPushButton(tr("Save As…"), this);
  connect(openButton, &QPushButton::clicked, this, [this] {
    const QString path =
        openFileName(this, tr("Open Experiment"), QString(), tr("Experiments (*.json)"));
    QString error;
    if (!path.isEmpty() && !loadFile(path, &error))
      emit errorOccurred(error);
  });
  connect(saveButton, &QPushButton::clicked, this, [this] {
    const QString path = saveFileName(
        this, tr("Save Experiment"), QStringLiteral("experiment.json"), tr("Experiments (*.json)"));
    QString error;
    if (!path.isEmpty() && !saveFile(path, &error))
      emit errorOccurred(error);
  });

  setUpMemoryPlot(m_histogram);
  m_histogram->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
  m_histogram->xAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
  m_histogram->xAxis->setLabel(tr("padded sequence length of the micro-batch"));
  m_histogram->yAxis->setLabel(tr("micro-batches"));
  m_histogram->legend->setVisible(false);
  m_histogram->setMinimumHeight(180);

  m_status->setWordWrap(true);
  m_status->setTextFormat(Qt::RichText);
  m_previewLabel->setWordWrap(true);
  m_previewLabel->setTextFormat(Qt::RichText);
  m_progress->setRange(0, 1000);
  m_progress->hide();
  m_cancelButton->hide();
  connect(m_runButton, &QPushButton::clicked, this, &DesignerPage::runExperiment);
  connect(m_cancelButton, &QPushButton::clicked, this, &DesignerPage::cancelRun);

  // The form scrolls: with every training control and the points editor it is taller than a
  // laptop screen, and it must not set the window's minimum height.
  auto* formArea = new QScrollArea(this);
  auto* formWidget = new QWidget(formArea);
  auto* left = new QVBoxLayout(formWidget);
  left->setContentsMargins(0, 0, 0, 0);
  left->addWidget(experimentBox);
  left->addWidget(modelBox);
  left->addWidget(trainingBox);
  left->addWidget(seqBox);
  auto* pointsBox = new QGroupBox(tr("Variants and sweep (JSON)"), this);
  auto* pointsLayout = new QVBoxLayout(pointsBox);
  m_pointsEditor->setObjectName(QStringLiteral("pointsEditor"));
  m_pointsEditor->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_pointsEditor->setPlaceholderText(
      tr("{\"variants\": [{\"name\": \"bs16\", \"set\": {\"training.batch_size\": 16}}],\n"
         " \"sweep\": {\"training.batch_size\": [4, 8, 16]}}"));
  m_pointsEditor->setToolTip(
      tr("Each variant is the form's configuration with its \"set\" overrides (dotted keys); a "
         "sweep adds every combination of its keys' values. Empty: one point, the form."));
  m_pointsEditor->setMinimumHeight(90);
  pointsLayout->addWidget(m_pointsEditor);
  left->addWidget(pointsBox);
  m_pointsTimer.setSingleShot(true);
  m_pointsTimer.setInterval(300);
  connect(m_pointsEditor, &QPlainTextEdit::textChanged, this, [this] {
    if (!m_updatingForm)
      m_pointsTimer.start();
  });
  connect(&m_pointsTimer, &QTimer::timeout, this, [this] {
    if (applyPointsEditor())
      revalidate();
  });
  auto* fileButtons = new QHBoxLayout;
  m_newButton->setObjectName(QStringLiteral("designerNew"));
  m_newButton->setToolTip(tr("Start over from the default experiment"));
  connect(m_newButton, &QPushButton::clicked, this, &DesignerPage::newDocument);
  fileButtons->addWidget(m_newButton);
  fileButtons->addWidget(openButton);
  fileButtons->addWidget(saveButton);
  left->addLayout(fileButtons);
  left->addStretch(1);
  auto* right = new QVBoxLayout;
  right->addWidget(m_status);
  right->addWidget(m_histogram, 1);
  right->addWidget(m_previewLabel);
  auto* runRow = new QHBoxLayout;
  runRow->addWidget(m_runButton);
  runRow->addWidget(m_progress, 1);
  runRow->addWidget(m_cancelButton);
  right->addLayout(runRow);
  auto* layout = new QHBoxLayout(this);
  formArea->setWidget(formWidget);
  formArea->setWidgetResizable(true);
  formArea->setFrameShape(QFrame::NoFrame);
  formArea->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  formArea->setMinimumWidth(formWidget->sizeHint().width() + 24);
  layout->addWidget(formArea);
  layout->addLayout(right, 1);

  m_previewTimer.setSingleShot(true);
  m_previewTimer.setInterval(250);
  connect(&m_previewTimer, &QTimer::timeout, this, &DesignerPage::startPreview);
  setDocument(defaultExperiment());
}

void DesignerPage::setDatabase(const QString& databasePath) {
  m_databasePath = databasePath;
}

void DesignerPage::rememberDocument(const QString& settingsKey) {
  m_settingsKey = settingsKey;
  const QString saved = QSettings().value(settingsKey).toString();
  if (saved.isEmpty())
    return;
  // A document an older release wrote may not parse any more: it still loads (the status line
  // says what is wrong); only text that is not a JSON object is dropped.
  nlohmann::json document = nlohmann::json::parse(saved.toStdString(), nullptr, false);
  if (document.is_object())
    setDocument(document);
}

void DesignerPage::newDocument() {
  setDocument(defaultExperiment());
}

void DesignerPage::bindText(QLineEdit* edit, const std::string& pointer) {
  m_bindings.push_back({pointer, [edit] { return nlohmann::json(edit->text().toStdString()); },
                        [edit](const nlohmann::json& v) {
                          edit->setText(v.is_string() ? QString::fromStdString(v.get<std::string>())
                                                      : QString());
                        }});
  connect(edit, &QLineEdit::textEdited, this, &DesignerPage::onFormEdited);
}

void DesignerPage::bindInt(QSpinBox* box, const std::string& pointer) {
  m_bindings.push_back({pointer, [box] { return nlohmann::json(box->value()); },
                        [box](const nlohmann::json& v) {
                          if (v.is_number())
                            box->setValue(v.get<int>());
                        }});
  connect(box, &QSpinBox::valueChanged, this, &DesignerPage::onFormEdited);
}

void DesignerPage::bindDouble(QDoubleSpinBox* box, const std::string& pointer) {
  m_bindings.push_back({pointer, [box] { return nlohmann::json(box->value()); },
                        [box](const nlohmann::json& v) {
                          if (v.is_number())
                            box->setValue(v.get<double>());
                        }});
  connect(box, &QDoubleSpinBox::valueChanged, this, &DesignerPage::onFormEdited);
}

void DesignerPage::bindChoice(QComboBox* box, const std::string& pointer) {
  m_bindings.push_back({pointer, [box] { return nlohmann::json(box->currentText().toStdString()); },
                        [box](const nlohmann::json& v) {
                          if (v.is_string()) {
                            const int index =
                                box->findText(QString::fromStdString(v.get<std::string>()));
                            if (index >= 0)
                              box->setCurrentIndex(index);
                          }
                        }});
  connect(box, &QComboBox::currentIndexChanged, this, &DesignerPage::onFormEdited);
}

void DesignerPage::bindCheck(QCheckBox* box, const std::string& pointer) {
  m_bindings.push_back({pointer,
                        [this, box, pointer] {
                          const nlohmann::json::json_pointer at(pointer);
                          if (box->isChecked() && m_document.contains(at) &&
                              m_document.at(at).is_object())
                            return m_document.at(at);
                          return nlohmann::json(box->isChecked());
                        },
                        [box](const nlohmann::json& v) {
                          if (v.is_boolean())
                            box->setChecked(v.get<bool>());
                          else if (v.is_object())
                            box->setChecked(true);
                        }});
  connect(box, &QCheckBox::toggled, this, &DesignerPage::onFormEdited);
}

void DesignerPage::applySeqKind() {
  static const std::map<std::string, std::vector<std::string>> keysOf{
      {"fixed", {"value"}},
      {"uniform", {"min", "max", "seed"}},
      {"lognormal", {"median", "sigma", "min", "max", "seed"}}};
  auto& seq = m_document["training"]["seq_len"];
  const std::string kind = seq.value("kind", std::string("fixed"));
  const auto found = keysOf.find(kind);
  for (const auto& [key, field] : m_seqFields) {
    const bool used = found != keysOf.end() && std::find(found->second.begin(), found->second.end(),
                                                         key) != found->second.end();
    field->setEnabled(used);
    if (!used && seq.is_object())
      seq.erase(key);
  }
}

bool DesignerPage::applyPointsEditor() {
  const QString text = m_pointsEditor->toPlainText().trimmed();
  nlohmann::json points = nlohmann::json::object();
  if (!text.isEmpty()) {
    try {
      points = nlohmann::json::parse(text.toStdString());
    } catch (const nlohmann::json::parse_error& error) {
      m_status->setText(
          tr("<span style='color:%1'><b>Variants and sweep:</b> %2</span>")
              .arg(colors::oom.name(), QString::fromUtf8(error.what()).toHtmlEscaped()));
      m_runButton->setEnabled(false);
      return false;
    }
    if (!points.is_object()) {
      m_status->setText(tr("<span style='color:%1'><b>Variants and sweep:</b> expected an object "
                           "with \"variants\" and/or \"sweep\"</span>")
                            .arg(colors::oom.name()));
      m_runButton->setEnabled(false);
      return false;
    }
  }
  // Unknown keys go into the document too: the experiment parser names them.
  m_document.erase("variants");
  m_document.erase("sweep");
  for (const auto& [key, value] : points.items())
    m_document[key] = value;
  return true;
}

void DesignerPage::setDocument(const nlohmann::json& document) {
  m_document = document;
  refreshForm();
  revalidate();
}

void DesignerPage::refreshForm() {
  m_updatingForm = true;
  for (const Binding& binding : m_bindings) {
    const nlohmann::json::json_pointer pointer(binding.pointer);
    if (m_document.contains(pointer))
      binding.write(m_document.at(pointer));
    else if (const auto fallback = m_defaults.find(binding.pointer); fallback != m_defaults.end())
      binding.write(fallback->second);
  }
  nlohmann::json points = nlohmann::json::object();
  for (const char* key : {"variants", "sweep"})
    if (m_document.contains(key))
      points[key] = m_document.at(key);
  m_pointsEditor->setPlainText(points.empty() ? QString() : QString::fromStdString(points.dump(2)));
  applySeqKind();
  m_updatingForm = false;
}

void DesignerPage::onFormEdited() {
  if (m_updatingForm)
    return;
  for (const Binding& binding : m_bindings)
    m_document[nlohmann::json::json_pointer(binding.pointer)] = binding.read();
  applySeqKind();
  revalidate();
}

void DesignerPage::revalidate() {
  if (!m_settingsKey.isEmpty())
    QSettings().setValue(m_settingsKey, QString::fromStdString(m_document.dump()));
  m_lengths.clear();
  try {
    const workload::Experiment experiment = workload::parse_experiment(m_document, "designer");
    m_validationError.clear();
    QString text = tr("<b>%n point(s)</b>", nullptr, static_cast<int>(experiment.points.size()));
    if (!experiment.points.empty()) {
      const workload::ExperimentPoint& first = experiment.points.front();
      for (const workload::MicroBatch& batch : workload::micro_batches(first.workload.training))
        m_lengths.push_back(batch.seq_len);
      text += tr(" · %1 parameters · device %2 (%3 for the allocator)")
                  .arg(formatCount(workload::parameter_count(first.workload.model)),
                       QString::fromStdString(first.device.name),
                       formatBytes(static_cast<double>(first.device.capacity)));
    }
    m_status->setText(text);
    m_runButton->setEnabled(!running());
  } catch (const std::exception& error) {
    m_validationError = QString::fromUtf8(error.what());
    m_status->setText(tr("<span style='color:%1'><b>Invalid:</b> %2</span>")
                          .arg(colors::oom.name(), m_validationError.toHtmlEscaped()));
    m_runButton->setEnabled(false);
  }
  // The histogram of padded lengths, redrawn on every edit.
  m_histogram->clearPlottables();
  if (!m_lengths.empty()) {
    const auto [lo, hi] = std::minmax_element(m_lengths.begin(), m_lengths.end());
    // One length (a fixed length): one bar in the middle of an axis around it, not a sliver.
    const double width = *lo == *hi
                             ? std::max(1.0, *lo * 0.04)
                             : std::max(1.0, static_cast<double>(*hi - *lo + 1) / kHistogramBins);
    std::map<int, double> bins;
    for (int length : m_lengths)
      bins[static_cast<int>((length - *lo) / width)] += 1;
    QVector<double> keys, counts;
    for (const auto& [bin, count] : bins) {
      keys.push_back(*lo == *hi ? *lo : *lo + (bin + 0.5) * width);
      counts.push_back(count);
    }
    auto* bars = new QCPBars(m_histogram->xAxis, m_histogram->yAxis);
    bars->setWidth(width * 0.9);
    bars->setPen(Qt::NoPen);
    bars->setBrush(colors::allocated);
    bars->setData(keys, counts, true);
    if (*lo == *hi)
      m_histogram->xAxis->setRange(std::max(0.0, *lo * 0.5), *lo * 1.5);
    else
      m_histogram->xAxis->setRange(*lo - width, *hi + width);
    m_histogram->yAxis->setRange(0, *std::max_element(counts.begin(), counts.end()) * 1.15);
  }
  m_histogram->replot(QCustomPlot::rpQueuedReplot);
  if (m_validationError.isEmpty())
    m_previewTimer.start();
  else
    m_previewJob.cancel();
}

void DesignerPage::startPreview() {
  nlohmann::json document = m_document;
  document.erase("sweep");
  document.erase("variants");
  auto& training = document["training"];
  const int steps = training.value("steps", 1);
  training["steps"] = std::min(steps, kPreviewSteps);
  m_previewLabel->setText(
      tr("<i>Previewing the first %n step(s)…</i>", nullptr, std::min(steps, kPreviewSteps)));
  m_previewJob.start(
      [document](const JobContext& job) {
        const workload::Experiment experiment = workload::parse_experiment(document, "preview");
        const workload::PointResult result =
            workload::run_point(experiment.points.front(), false, job.workControl().cancel);
        return PreviewResult{result.oom, result.peak_allocated, result.peak_reserved,
                             result.steps_completed};
      },
      [this](PreviewResult preview) {
        m_preview = preview;
        m_previewLabel->setText(
            tr("Preview (%n step(s)): peak allocated <b>%1</b>, peak reserved <b>%2</b>%3", nullptr,
               preview.steps)
                .arg(formatBytes(static_cast<double>(preview.peakAllocated)),
                     formatBytes(static_cast<double>(preview.peakReserved)),
                     preview.oom ? tr(" — <b style='color:%1'>runs out of memory</b>")
                                       .arg(colors::oom.name())
                                 : QString()));
        emit previewReady();
      },
      [this](const QString& message) {
        m_previewLabel->setText(tr("<b>Preview failed:</b> %1").arg(message.toHtmlEscaped()));
      });
}

void DesignerPage::runExperiment() {
  if (!m_validationError.isEmpty() || m_databasePath.isEmpty())
    return;
  const nlohmann::json document = m_document;
  const QString path = m_databasePath;
  m_runButton->setEnabled(false);
  m_progress->setValue(0);
  m_progress->show();
  m_cancelButton->show();
  m_runJob.start(
      [document, path](const JobContext& job) {
        const workload::Experiment experiment = workload::parse_experiment(document, "designer");
        storage::RunStore store(path.toStdString());
        // Incomplete until the last point is stored: a cancel or a failure leaves it visibly so.
        return usecases::simulate_and_store(store, experiment, document, job.workControl()).runs;
      },
      [this](std::vector<storage::RunId> runs) {
        m_progress->hide();
        m_cancelButton->hide();
        m_runButton->setEnabled(true);
        emit experimentStored(runs);
      },
      [this](const QString& message) {
        m_progress->hide();
        m_cancelButton->hide();
        m_runButton->setEnabled(true);
        emit errorOccurred(message);
      },
      [this](double fraction) { m_progress->setValue(static_cast<int>(fraction * 1000)); });
}

void DesignerPage::cancelRun() {
  m_runJob.cancel();
  m_progress->hide();
  m_cancelButton->hide();
  m_runButton->setEnabled(m_validationError.isEmpty());
}

bool DesignerPage::loadFile(const QString& path, QString* error) {
  QFile file(path);
  if (!file.open(QIODevice::ReadOnly)) {
    if (error)
      *error = tr("Cannot read %1: %2").arg(path, file.errorString());
    return false;
  }
  try {
    setDocument(nlohmann::json::parse(file.readAll().toStdString()));
  } catch (const nlohmann::json::exception& failure) {
    if (error)
      *error = tr("%1 is not valid JSON: %2").arg(path, QString::fromUtf8(failure.what()));
    return false;
  }
  return true;
}

bool DesignerPage::saveFile(const QString& path, QString* error) const {
  QSaveFile file(path);
  const QByteArray bytes = QByteArray::fromStdString(m_document.dump(2) + "\n");
  if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit()) {
    if (error)
      *error = tr("Cannot write %1: %2").arg(path, file.errorString());
    return false;
  }
  return true;
}

}  // namespace fragscope::gui

// The experiment designer's form: training controls (checkpointing, optimizer, compile,
// hold_logits), a fixed sequence length as one "Length" with a histogram around it, and the
// variants/sweep editor feeding the experiment's points.
#include <QCheckBox>
#include <QComboBox>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTest>

#include "gui/designer_page.h"
#include "gui/plot_style.h"
#include "gui_test_util.h"

using namespace fragscope;
using namespace fragscope::gui;

class TestDesigner : public QObject {
  Q_OBJECT
 private:
  static QComboBox* comboWith(DesignerPage& page, const QString& item) {
    for (QComboBox* box : page.findChildren<QComboBox*>())
      if (box->findText(item) >= 0)
        return box;
    return nullptr;
  }
  static QCheckBox* check(DesignerPage& page, const QString& text) {
    for (QCheckBox* box : page.findChildren<QCheckBox*>())
      if (box->text().contains(text))
        return box;
    return nullptr;
  }

 private slots:
  void trainingControlsWriteTheDocument() {
    DesignerPage page;
    QComboBox* checkpointing = comboWith(page, QStringLiteral("blocks"));
    QComboBox* optimizer = comboWith(page, QStringLiteral("sgd"));
    QCheckBox* compile = check(page, QStringLiteral("torch.compile"));
    QCheckBox* logits = check(page, QStringLiteral("logits"));
    QVERIFY(checkpointing && optimizer && compile && logits);
    // The default document says nothing of hold_logits: the box shows the format's default (true).
    QVERIFY(!defaultExperiment().at("training").contains("hold_logits"));
    QVERIFY(logits->isChecked());
    checkpointing->setCurrentIndex(checkpointing->findText(QStringLiteral("blocks")));
    optimizer->setCurrentIndex(optimizer->findText(QStringLiteral("sgd")));
    compile->setChecked(true);
    logits->setChecked(false);
    const auto& training = page.document().at("training");
    QCOMPARE(training.at("checkpointing").get<std::string>(), std::string("blocks"));
    QCOMPARE(training.at("optimizer").get<std::string>(), std::string("sgd"));
    QCOMPARE(training.at("compile"), nlohmann::json(true));
    QCOMPARE(training.at("hold_logits"), nlohmann::json(false));
    QVERIFY2(page.validationError().isEmpty(), qPrintable(page.validationError()));

    // compile's per-part object survives an edit elsewhere while the box stays checked.
    nlohmann::json document = page.document();
    document["training"]["compile"] = {{"loss", true}};
    page.setDocument(document);
    QVERIFY(compile->isChecked());
    optimizer->setCurrentIndex(optimizer->findText(QStringLiteral("adam")));
    QCOMPARE(page.document().at("training").at("compile"), (nlohmann::json{{"loss", true}}));
  }

  void fixedLengthIsOneLengthWithAnAxisAroundIt() {
    DesignerPage page;
    nlohmann::json document = defaultExperiment();
    document["training"]["seq_len"] = {{"kind", "fixed"}, {"value", 512}};
    page.setDocument(document);
    QVERIFY2(page.validationError().isEmpty(), qPrintable(page.validationError()));
    QSpinBox* value = nullptr;
    QSpinBox* minimum = nullptr;
    for (QSpinBox* box : page.findChildren<QSpinBox*>()) {
      if (box->value() == 512)
        value = box;
      else if (box->value() == 32)
        minimum = box;  // the default document's lognormal minimum, unused now
    }
    QVERIFY(value && value->isEnabled());
    QVERIFY(minimum && !minimum->isEnabled());
    value->setValue(640);
    QCOMPARE(page.document().at("training").at("seq_len"),
             (nlohmann::json{{"kind", "fixed"}, {"value", 640}}));
    QVERIFY(!page.histogramLengths().empty());
    const QCPRange range = page.histogram()->xAxis->range();
    QVERIFY(range.lower < 640 && range.upper > 640);
    QVERIFY(range.size() >= 320);  // an axis around the length, not a 3-wide sliver
  }

  void variantsAndSweepMakePoints() {
    DesignerPage page;
    page.pointsEditor()->setPlainText(QStringLiteral(
        R"({"variants": [{"name": "bs8", "set": {"training.batch_size": 8}}],
            "sweep": {"training.grad_accum": [1, 2]}})"));
    QVERIFY(test::waitFor([&] { return page.document().contains("sweep"); }, 5000));
    QVERIFY2(page.validationError().isEmpty(), qPrintable(page.validationError()));
    QCOMPARE(page.document().at("variants").size(), std::size_t{1});
    page.pointsEditor()->setPlainText(QStringLiteral("{\"variants\": ["));
    QTest::qWait(500);
    // Invalid JSON keeps the last good points and disables Run.
    QVERIFY(page.document().contains("variants"));
    QVERIFY(page.runButton() && !page.runButton()->isEnabled());
    page.pointsEditor()->clear();
    QVERIFY(test::waitFor([&] { return !page.document().contains("sweep"); }, 5000));
    QVERIFY(!page.document().contains("variants"));
  }

  // The window's designer keeps its document between launches (QSettings, written on every edit
  // and read by the next page that remembers the same key); New starts over from the default.
  void documentIsKeptBetweenLaunchesAndNewStartsOver() {
    QCoreApplication::setOrganizationName(QStringLiteral("FragScopeTest"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_designer"));
    const QString key = QStringLiteral("designer/test-document");
    QSettings().remove(key);
    {
      DesignerPage first;
      first.rememberDocument(key);
      QCOMPARE(first.document(), defaultExperiment());
      QComboBox* optimizer = comboWith(first, QStringLiteral("sgd"));
      QVERIFY(optimizer);
      optimizer->setCurrentIndex(optimizer->findText(QStringLiteral("sgd")));
      first.pointsEditor()->setPlainText(
          QStringLiteral(R"({"variants": [{"name": "bs8", "set": {"training.batch_size": 8}}]})"));
      QVERIFY(test::waitFor([&] { return first.document().contains("variants"); }, 5000));
    }
    DesignerPage second;
    QCOMPARE(second.document(), defaultExperiment());  // a page that keeps nothing reads nothing
    second.rememberDocument(key);
    QCOMPARE(second.document().at("training").at("optimizer").get<std::string>(),
             std::string("sgd"));
    QCOMPARE(second.document().at("variants").size(), std::size_t{1});
    QVERIFY(second.pointsEditor()->toPlainText().contains(QStringLiteral("bs8")));

    second.newButton()->click();
    QCOMPARE(second.document(), defaultExperiment());
    QVERIFY(second.pointsEditor()->toPlainText().isEmpty());
    DesignerPage third;
    third.rememberDocument(key);
    QCOMPARE(third.document(), defaultExperiment());

    // Text that is not a JSON object (a damaged settings file) is ignored, not a crash.
    QSettings().setValue(key, QStringLiteral("{not json"));
    DesignerPage fourth;
    fourth.rememberDocument(key);
    QCOMPARE(fourth.document(), defaultExperiment());
    QSettings().remove(key);
  }
};

QTEST_MAIN(TestDesigner)
#include "tst_designer.moc"

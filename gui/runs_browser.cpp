#include "gui/runs_browser.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QMenu>
#include <QMessageBox>
#include <QVBoxLayout>

namespace fragscope::gui {

RunsBrowser::RunsBrowser(QWidget* parent)
    : QWidget(parent),
      m_model(new RunsModel(this)),
      m_filter(new RunsFilterModel(this)),
      m_view(new QTableView(this)),
      m_filterEdit(new QLineEdit(this)),
      m_statusFilter(new QComboBox(this)),
      m_compareButton(new QPushButton(tr("Compare"), this)),
      m_deleteButton(new QPushButton(tr("Delete"), this)),
      m_renameButton(new QPushButton(tr("Rename"), this)) {
  m_filter->setSourceModel(m_model);
  m_view->setModel(m_filter);
  m_view->setSortingEnabled(true);
  m_view->sortByColumn(RunsModel::CreatedColumn, Qt::DescendingOrder);
  m_view->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_view->setSelectionMode(QAbstractItemView::ExtendedSelection);
  m_view->setEditTriggers(QAbstractItemView::EditKeyPressed | QAbstractItemView::SelectedClicked);
  m_view->setAlternatingRowColors(true);
  m_view->verticalHeader()->hide();
  m_view->verticalHeader()->setDefaultSectionSize(22);
  m_view->horizontalHeader()->setStretchLastSection(true);
  m_view->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  // Name, outcome and both peaks fit the dock's default width, each column as wide as its
  // header's longest line and a typical value.
  m_view->setColumnWidth(RunsModel::NameColumn, 160);
  const QFontMetrics cells = m_view->fontMetrics();
  const QFontMetrics headers = m_view->horizontalHeader()->fontMetrics();
  for (const auto& [column, widestValue] :
       {std::pair{RunsModel::StatusColumn, QStringLiteral("oom · mid-run")},
        std::pair{RunsModel::PeakAllocatedColumn, QStringLiteral("888 GiB")},
        std::pair{RunsModel::PeakReservedColumn, QStringLiteral("888 GiB")}}) {
    int width = cells.horizontalAdvance(widestValue);
    for (const QString& line :
         m_model->headerData(column, Qt::Horizontal).toString().split(QLatin1Char('\n')))
      width = std::max(width, headers.horizontalAdvance(line));
    m_view->setColumnWidth(column, width + 14);
  }
  m_view->setContextMenuPolicy(Qt::CustomContextMenu);

  m_filterEdit->setPlaceholderText(tr("Filter runs (name, source, outcome, config)…"));
  m_filterEdit->setClearButtonEnabled(true);
  m_statusFilter->addItem(tr("Any outcome"), QString());
  for (auto status : {storage::RunStatus::ok, storage::RunStatus::oom,
                      storage::RunStatus::cancelled, storage::RunStatus::failed}) {
    const QString name = QString::fromLatin1(to_string(status));
    m_statusFilter->addItem(name, name);
  }

  auto* filters = new QHBoxLayout;
  filters->addWidget(m_filterEdit, 1);
  filters->addWidget(m_statusFilter);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(m_compareButton);
  buttons->addWidget(m_renameButton);
  buttons->addWidget(m_deleteButton);
  buttons->addStretch(1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(filters);
  layout->addWidget(m_view, 1);
  layout->addLayout(buttons);

  m_compareButton->setToolTip(tr("Compare the selected runs (select two or more)"));
  connect(m_filterEdit, &QLineEdit::textChanged, m_filter, &RunsFilterModel::setFilterWords);
  connect(m_statusFilter, &QComboBox::currentIndexChanged, this,
          [this] { m_filter->setStatusFilter(m_statusFilter->currentData().toString()); });
  connect(m_view->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &RunsBrowser::onSelectionChanged);
  connect(m_model, &RunsModel::renameRequested, this, &RunsBrowser::renameRequested);
  connect(m_compareButton, &QPushButton::clicked, this,
          [this] { emit compareRequested(selectedRuns()); });
  connect(m_deleteButton, &QPushButton::clicked, this, &RunsBrowser::confirmDelete);
  connect(m_renameButton, &QPushButton::clicked, this, [this] {
    const QModelIndex current = m_view->currentIndex();
    if (current.isValid())
      m_view->edit(current.siblingAtColumn(RunsModel::NameColumn));
  });
  connect(m_view, &QWidget::customContextMenuRequested, this, [this](const QPoint& position) {
    QMenu menu(this);
    menu.addAction(tr("Compare Selected"), this, [this] { emit compareRequested(selectedRuns()); })
        ->setEnabled(selectedRuns().size() >= 2);
    menu.addAction(tr("Rename"), m_renameButton, &QPushButton::click);
    menu.addAction(tr("Delete…"), this, &RunsBrowser::confirmDelete);
    menu.exec(m_view->viewport()->mapToGlobal(position));
  });
  onSelectionChanged();
}

void RunsBrowser::setRuns(
    std::vector<storage::RunRecord> runs,
    std::map<storage::ExperimentId, storage::ExperimentProgress> experiments) {
  const auto selected = selectedRuns();
  m_model->resetData(std::move(runs), std::move(experiments));
  selectRuns(selected);
  onSelectionChanged();
}

std::vector<storage::RunId> RunsBrowser::selectedRuns() const {
  std::vector<storage::RunId> runs;
  for (const QModelIndex& index : m_view->selectionModel()->selectedRows())
    runs.push_back(index.data(RunsModel::RunIdRole).value<storage::RunId>());
  std::sort(runs.begin(), runs.end());
  return runs;
}

void RunsBrowser::selectRuns(const std::vector<storage::RunId>& runs) {
  QItemSelection selection;
  for (storage::RunId run : runs) {
    const int row = m_model->rowOf(run);
    if (row < 0)
      continue;
    const QModelIndex index = m_filter->mapFromSource(m_model->index(row, 0));
    if (index.isValid())
      selection.select(index, index.siblingAtColumn(RunsModel::ColumnCount - 1));
  }
  m_view->selectionModel()->select(selection, QItemSelectionModel::ClearAndSelect);
  if (!selection.isEmpty())
    m_view->scrollTo(selection.indexes().constFirst());
}

void RunsBrowser::onSelectionChanged() {
  const auto runs = selectedRuns();
  m_compareButton->setEnabled(runs.size() >= 2);
  m_deleteButton->setEnabled(!runs.empty());
  m_renameButton->setEnabled(runs.size() == 1);
  if (runs.size() == 1)
    emit runActivated(runs.front());
}

QString RunsBrowser::deleteQuestion(const std::vector<storage::RunId>& runs) const {
  constexpr std::size_t kNamed = 10;
  QString list;
  for (std::size_t i = 0; i < std::min(runs.size(), kNamed); ++i) {
    const int row = m_model->rowOf(runs[i]);
    const storage::RunRecord* record = m_model->runAt(row);
    list += QStringLiteral("<li>%1 (#%2)</li>")
                .arg(record ? QString::fromStdString(record->name).toHtmlEscaped() : tr("unknown"))
                .arg(runs[i].value);
  }
  if (runs.size() > kNamed)
    list += tr("<li>and %n more</li>", nullptr, static_cast<int>(runs.size() - kNamed));
  return tr("Delete %n run(s) and all their events from the database? This cannot be undone."
            "<ul>%1</ul>",
            nullptr, static_cast<int>(runs.size()))
      .arg(list);
}

void RunsBrowser::confirmDelete() {
  const auto runs = selectedRuns();
  if (runs.empty())
    return;
  const auto answer = QMessageBox::question(this, tr("Delete runs"), deleteQuestion(runs));
  if (answer == QMessageBox::Yes)
    emit deleteRequested(runs);
}

}  // namespace fragscope::gui

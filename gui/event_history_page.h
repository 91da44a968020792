#pragma once
// Allocator State History: every event of the run as a list beside the segment map (memory_viz's
// "Allocator State History"). Rows are read from the store a page at a time as they scroll into
// view; a click moves the run's cursor to the state after that event (for an OOM, the state it
// failed in, so the map explains it). The find bar goes to event N, to the next or previous OOM,
// to the peak, and finds allocations by size ("> 100 MiB", "= 2 GiB") or by a frame's text, the
// search running off the GUI thread.
#include <QAbstractTableModel>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTableView>
#include <QWidget>
#include <map>
#include <memory>
#include <optional>
#include <variant>

#include "gui/job_tracker.h"
#include "gui/segment_map_page.h"
#include "storage/db/run_store.h"

namespace fragscope::gui {

class EventListModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    EventColumn,
    ActionColumn,
    SizeColumn,
    AddressColumn,
    StreamColumn,
    TimeColumn,
    FrameColumn,
    ColumnCount
  };

  explicit EventListModel(QObject* parent = nullptr);
  // Opens its own reader on the database; eventCount rows.
  void setRun(const QString& databasePath, storage::RunId run, std::uint64_t eventCount,
              std::shared_ptr<const FrameStacks> stacks);
  void clear();
  std::optional<TraceEvent> event(std::uint64_t index) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  const std::vector<TraceEvent>* page(std::uint64_t pageIndex) const;

  std::unique_ptr<storage::RunStore> m_store;
  storage::RunId m_run{};
  std::uint64_t m_eventCount = 0;
  std::int64_t m_firstTimeUs = 0;
  std::shared_ptr<const FrameStacks> m_stacks;
  // Pages of events read so far (a few hundred rows each); dropped when too many are kept.
  mutable std::map<std::uint64_t, std::vector<TraceEvent>> m_pages;
};

// What the find bar's text asks for.
struct SizeQuery {
  enum class Compare { at_least, at_most, equal } compare = Compare::at_least;
  Bytes bytes = 0;
};
struct FrameQuery {
  QString text;
};
using EventQuery = std::variant<std::uint64_t, SizeQuery, FrameQuery>;
// "123456" or "#123456": event N; "> 1 GiB", "<= 512 KiB", "= 2097152": an allocation by size
// (units B, KiB, MiB, GiB, also KB/MB/GB as binary); anything else: text in a frame. nullopt for
// an empty text.
std::optional<EventQuery> parseEventQuery(const QString& text);
// The first alloc event from `start` in `direction` (+1 / -1) that matches; reads `stacks` for a
// frame query. nullopt when none (or cancelled).
std::optional<std::uint64_t> findEvent(const QString& databasePath, storage::RunId run,
                                       const EventQuery& query, std::uint64_t start, int direction,
                                       const FrameStacks* stacks, const JobContext* job = nullptr);

class EventHistoryPage : public QWidget {
  Q_OBJECT
 public:
  explicit EventHistoryPage(QWidget* parent = nullptr);

  void setDatabase(const QString& databasePath);
  // The run, its OOM events and its peak cursor (from the timeline's overview).
  void setRun(storage::RunId run, std::uint64_t eventCount, std::vector<std::uint64_t> oomEvents,
              std::uint64_t peakCursor);
  // The run's stacks (the Where column, frame search); setRun loads them in a job.
  void setStacks(std::shared_ptr<const FrameStacks> stacks);
  void clear();

  EventListModel* model() const { return m_model; }
  QTableView* view() const { return m_view; }
  QLineEdit* findField() const { return m_find; }
  QLabel* status() const { return m_status; }
  bool busy() const { return m_findJob.busy() || m_stacksJob.busy(); }
  // The cursor the page last moved to or was told about.
  std::uint64_t cursor() const { return m_cursor; }

  // The actions of the find bar's buttons.
  void find(int direction);
  void nextOom(int direction);
  void goToPeak();
  // Selects event `index` and moves the cursor to it.
  void goToEvent(std::uint64_t index);

 public slots:
  // Follows the run's cursor (set elsewhere): selects the event just applied.
  void setCursorEvent(std::uint64_t cursor);

 signals:
  void cursorEventChanged(std::uint64_t cursor);

 private:
  void selectRow(std::uint64_t index);
  void followCursor();

  QString m_databasePath;
  std::optional<storage::RunId> m_run;
  std::uint64_t m_eventCount = 0;
  std::vector<std::uint64_t> m_oomEvents;
  std::uint64_t m_peakCursor = 0;
  std::uint64_t m_cursor = 0;
  std::shared_ptr<const FrameStacks> m_stacks;
  EventListModel* m_model;
  QTableView* m_view;
  QLineEdit* m_find;
  QLabel* m_status;
  JobTracker m_findJob{this};
  JobTracker m_stacksJob{this};
  bool m_following = false;
};

}  // namespace fragscope::gui

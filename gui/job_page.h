#pragma once
// Jobs: the ranks of one multi-rank job (DDP, FSDP, ZeRO) side by side — every rank's allocated
// and reserved over time as small multiples on one shared scale, aligned by time since each
// rank's first event (or by share of its events), and the imbalance table (peak allocated, peak
// reserved, fragmentation, OOM per rank) with the worst rank highlighted. Activating a rank opens
// its timeline, segment map and post-mortem. The figures come from storage::job_balance, the
// same computation as `fragscope-cli job`.
#include <QAbstractTableModel>
#include <QComboBox>
#include <QGridLayout>
#include <QImage>
#include <QLabel>
#include <QTableView>
#include <QWidget>
#include <vector>

#include "engine/analysis/job_balance.h"
#include "gui/job_tracker.h"
#include "gui/metatypes.h"
#include "storage/db/jobs.h"

class QCustomPlot;

namespace fragscope::gui {

struct JobRankView {
  int rank = 0;
  storage::RunRecord record;
  std::vector<storage::TimelineBucket> timeline;
  // End of every optimizer step in the trace's clock (µs since the epoch), as fragscope-record
  // wrote it into the stats file; empty when the run was recorded without it.
  std::vector<std::uint64_t> stepEndsUs;
};

struct JobViewData {
  storage::JobRecord job;
  analysis::JobBalance balance;
  std::vector<JobRankView> ranks;  // by rank, as balance.ranks
};

std::vector<storage::JobRecord> listJobs(const QString& databasePath);
JobViewData loadJobView(const QString& databasePath, storage::JobId job, std::size_t buckets,
                        const JobContext* context = nullptr);

// How the ranks' x axes line up: seconds since each rank's first event, share of its events, or
// training step (step k spans the end of step k - 1 to its own end; the first from the rank's
// first event).
enum class JobAlignment { time, share, step };

// Where the time `timeUs` falls in steps: k + the fraction of step k gone by. After the last
// recorded end, the last step's length continues the scale. `firstUs` is the rank's first event.
double stepCoordinate(const std::vector<std::uint64_t>& stepEndsUs, double firstUs, double timeUs);

// The scale every rank's small multiple shares, so the imbalance is visible by eye.
struct JobPlotScale {
  double top = 0;      // highest reserved bucket of any rank
  double longest = 0;  // longest rank, in seconds
  double steps = 0;    // most recorded steps of any rank
};
JobPlotScale jobPlotScale(const JobViewData& data);
// Rank `index`'s reserved (solid) and allocated (dashed) on `plot` (set up by the caller's
// setUpMemoryPlot), titled with its rank and whether it is the worst. The Jobs page and reports
// draw with it.
void drawRankPlot(QCustomPlot* plot, const JobRankView& rank, int index, bool worst,
                  JobAlignment alignment, JobPlotScale scale);
// The job's small multiples as one image, `width` pixels wide (reports). GUI thread only.
QImage renderJobMultiples(const JobViewData& data, JobAlignment alignment, int width);

// One row per rank.
class JobBalanceModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    RankColumn,
    RunColumn,
    AllocatedColumn,
    ReservedColumn,
    FragmentationColumn,
    OomColumn,
    ColumnCount
  };
  enum Role { WorstRole = Qt::UserRole, RunIdRole, SortRole };
  explicit JobBalanceModel(QObject* parent = nullptr);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;
  void resetData(const analysis::JobBalance& balance);
  const analysis::JobBalance& balance() const { return m_balance; }
  // The row of the worst rank; -1 without one.
  int worstRow() const;

 private:
  analysis::JobBalance m_balance;
};

class JobPage : public QWidget {
  Q_OBJECT
 public:
  using Alignment = JobAlignment;
  explicit JobPage(QWidget* parent = nullptr);
  void setDatabase(const QString& databasePath);
  // Re-reads the list of jobs (after an import), keeping the shown job when it still exists.
  void refreshJobs();
  void showJob(storage::JobId job);
  void setAlignment(Alignment alignment);
  void clear();
  const JobViewData& data() const { return m_data; }
  JobBalanceModel* model() const { return m_model; }
  QTableView* table() const { return m_table; }
  QComboBox* jobChoice() const { return m_jobs; }
  QWidget* multiples() const { return m_multiples; }
  bool busy() const { return m_job.busy(); }

 signals:
  void dataReady();
  // The user activated a rank's row or plot: open its run.
  void rankActivated(fragscope::storage::RunId run);
  void errorOccurred(const QString& message);

 private:
  void showData(JobViewData data);
  void plotMultiples();

  QString m_databasePath;
  JobViewData m_data;
  Alignment m_alignment = Alignment::time;
  QComboBox* m_jobs;
  QComboBox* m_align;
  QLabel* m_header;
  QWidget* m_multiples;
  QGridLayout* m_multiplesLayout;
  JobBalanceModel* m_model;
  QTableView* m_table;
  JobTracker m_job{this};
};

}  // namespace fragscope::gui

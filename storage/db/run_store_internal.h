#pragma once
// Private to the three concerns of a store: RunCatalog (run_catalog.cpp), RunWriter
// (run_writer.cpp) and RunReader (run_reader.cpp), with memory by category (run_categories.cpp)
// and the recorded environment (run_environment.cpp). What those files share lives here.
#include <algorithm>
#include <array>
#include <deque>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/db/run_catalog.h"
#include "storage/db/run_writer.h"

namespace fragscope::storage::run_store_detail {

// Stores a level pyramid's rows in `table` (timeline_levels, category_levels: the same columns),
// each row's buckets encoded by `encode`.
template <typename Rows, typename Encode>
void insert_level_rows(Database& db, const char* table, RunId run, const Rows& rows,
                       Encode encode) {
  if (rows.empty())
    return;
  auto insert = db.prepare(std::string("INSERT INTO ") + table +
                           "(run_id, level, first_bucket, bucket_count, data) "
                           "VALUES (?, ?, ?, ?, ?)");
  for (const auto& row : rows) {
    insert.bind_int(1, run.value)
        .bind_int(2, row.level)
        .bind_int(3, static_cast<std::int64_t>(row.first_bucket))
        .bind_int(4, static_cast<std::int64_t>(row.buckets.size()))
        .bind_blob(5, encode(row.buckets));
    insert.run();
    insert.reset();
  }
}

inline constexpr std::array<std::string_view, 7> kCategoryNames = {
    "unknown", "parameter", "gradient", "optimizer_state", "activation", "temporary", "input"};

std::string now_iso8601();
// Throws DatabaseError naming the id when `db` has no such run.
void require_run(Database& db, RunId id);
Category category_from_string(std::string_view text);
// `what` names the row in the DatabaseError a corrupt value gives.
nlohmann::json parse_json(const std::string& text, const std::string& what);

}  // namespace fragscope::storage::run_store_detail

namespace fragscope::storage {

// The state of the run being written: its transaction, the chunk being filled, the segment map
// and series after the last event, and the timeline levels being built.
struct RunWriter::Ingest {
  RunId run{};
  Transaction transaction;
  std::uint64_t flushed = 0;  // events already written as chunks
  EventChunk buffer;          // the chunk being filled; buffer.start = series before it
  SeriesPoint current;        // the series after the last event
  SeriesPoint peak;
  SegmentMap segments;  // after the last flushed chunk; the worker's while a chunk is pending
  TimelineBuilder timeline;
  Statement insert_chunk;
  Statement insert_keyframe;
  Statement insert_category_chunk;

  // Memory by category, built as events come (run_categories.cpp).
  std::vector<Category> category_of_label;  // set_labels' table: LabelId -> Category
  bool labelled_events = false;             // an event with a label was appended
  CategoryTracker categories;
  CategoryChunk category_buffer;  // the categories of `buffer`'s events
  CategoryPyramidBuilder category_levels;

  // What opening the run needs without decoding its chunks (RunReader::event_overview).
  std::vector<std::uint64_t> oom_events;  // indices of TraceAction::oom events
  std::int64_t first_time_us = 0;         // of the first event with a time; 0 = none
  std::int64_t last_time_us = 0;

  Ingest(Database& db, RunId id)
      : run(id),
        transaction(db),
        insert_chunk(db,
                     "INSERT INTO event_chunks(run_id, first_event, event_count, first_time_us, "
                     "last_time_us, data) VALUES (?, ?, ?, ?, ?, ?)"),
        insert_keyframe(db,
                        "INSERT OR REPLACE INTO segment_keyframes(run_id, event_index, data) "
                        "VALUES (?, ?, ?)"),
        insert_category_chunk(
            db, "INSERT INTO category_chunks(run_id, first_event, data) VALUES (?, ?, ?)") {}

  std::uint64_t event_count() const { return flushed + buffer.events.size(); }

  // A full chunk and what the worker derives from it: the compressed events, the compressed
  // categories and the segment keyframe after the chunk. Recycled once its rows are written: the
  // next chunk fills the same vectors and encodes into the same buffers, where a fresh chunk
  // (~5 MB of events and series for 64k events) and fresh encoder buffers were pages to fault
  // in for every chunk.
  struct ChunkWork {
    EventChunk chunk;
    CategoryChunk categories;  // of the chunk's events
    ChunkEncoder encoder;
    std::vector<std::uint8_t> category_blob;
    std::vector<std::uint8_t> keyframe;  // `segments` after the chunk's events
  };
  // Chunks being compressed in the background, oldest first.
  struct PendingChunk {
    std::uint64_t first_event = 0;
    std::uint64_t count = 0;
    std::int64_t first_time_us = 0;
    std::int64_t last_time_us = 0;
    std::unique_ptr<ChunkWork> work;  // before `blob`: the future, destroyed first, waits for it
    std::future<std::span<const std::uint8_t>> blob;  // in work->encoder
  };
  std::deque<PendingChunk> pending;
  std::vector<std::unique_ptr<ChunkWork>> spare_work;  // written chunks, emptied
  // One chunk in the worker while this thread fills the next keeps both cores of a small machine
  // busy; a second one in flight gained no time and held another 5.5 MB of events and series.
  // With one at most, the worker also owns `segments` while it runs: chunks reach it in order.
  static constexpr std::size_t kMaxPending = 1;

  // Writes pending chunks, oldest first, until at most `keep` remain.
  void write_pending_chunks(std::size_t keep) {
    while (pending.size() > keep) {
      PendingChunk& oldest = pending.front();
      const auto blob = oldest.blob.get();
      insert_chunk.bind_int(1, run.value)
          .bind_int(2, static_cast<std::int64_t>(oldest.first_event))
          .bind_int(3, static_cast<std::int64_t>(oldest.count))
          .bind_int(4, oldest.first_time_us)
          .bind_int(5, oldest.last_time_us)
          .bind_blob(6, blob);
      insert_chunk.run();
      insert_chunk.reset();
      std::unique_ptr<ChunkWork> work = std::move(oldest.work);
      if (work->categories.size() != 0) {
        insert_category_chunk.bind_int(1, run.value)
            .bind_int(2, static_cast<std::int64_t>(oldest.first_event))
            .bind_blob(3, work->category_blob);
        insert_category_chunk.run();
        insert_category_chunk.reset();
      }
      write_keyframe(oldest.first_event + oldest.count, work->keyframe);
      pending.pop_front();
      work->chunk.events.clear();
      work->chunk.series.clear();
      work->chunk.labels.clear();
      work->categories.clear({});
      spare_work.push_back(std::move(work));
    }
  }

  void write_keyframe(std::uint64_t event_index, std::span<const std::uint8_t> blob) {
    insert_keyframe.bind_int(1, run.value)
        .bind_int(2, static_cast<std::int64_t>(event_index))
        .bind_blob(3, blob);
    insert_keyframe.run();
    insert_keyframe.reset();
  }
};

}  // namespace fragscope::storage

#pragma once
// Private to the three concerns of a store: RunCatalog (run_catalog.cpp), RunWriter
// (run_writer.cpp) and RunReader (run_reader.cpp), with memory by category (run_categories.cpp)
// and the recorded environment (run_environment.cpp). What those files share lives here.
#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/db/event_chunk.h"
#include "storage/db/run_catalog.h"
#include "storage/db/run_writer.h"
#include "storage/db/serial_worker.h"

namespace fragscope::storage::run_store_detail {

// Stores a level pyramid's rows in `table` (timeline_levels, category_levels: the same columns),
// each row's buckets encoded by `encode`.
inline Statement prepare_level_row_insert(Database& db, const char* table) {
  return db.prepare(std::string("INSERT INTO ") + table +
                    "(run_id, level, first_bucket, bucket_count, data) VALUES (?, ?, ?, ?, ?)");
}
// Stores one row through prepare_level_row_insert's statement, its buckets already encoded.
template <typename Row>
void insert_level_row(Statement& insert, RunId run, const Row& row,
                      std::span<const std::uint8_t> data) {
  insert.bind_int(1, run.value)
      .bind_int(2, row.level)
      .bind_int(3, static_cast<std::int64_t>(row.first_bucket))
      .bind_int(4, static_cast<std::int64_t>(row.buckets.size()))
      .bind_blob(5, data);
  insert.run();
  insert.reset();
}
template <typename Rows, typename Encode>
void insert_level_rows(Database& db, const char* table, RunId run, const Rows& rows,
                       Encode encode) {
  if (rows.empty())
    return;
  auto insert = prepare_level_row_insert(db, table);
  for (const auto& row : rows)
    insert_level_row(insert, run, row, encode(row.buckets));
}

// The chunks of `table` (event_chunks, category_chunks: the same key columns) that hold events
// [first, end) of a run, as rows (first_event, data) in order. Chunks start at multiples of
// kEventsPerChunk, so the first is the one holding `first`.
inline Statement chunks_covering(Database& db, const char* table, RunId run, std::uint64_t first,
                                 std::uint64_t end) {
  auto query = db.prepare(std::string("SELECT first_event, data FROM ") + table +
                          " WHERE run_id = ? AND first_event >= ? AND first_event < ? "
                          "ORDER BY first_event");
  query.bind_int(1, run.value)
      .bind_int(2, static_cast<std::int64_t>(first - first % kEventsPerChunk))
      .bind_int(3, static_cast<std::int64_t>(end));
  return query;
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
  // Events go to the workers a part at a time (kEventsPerPart), and a chunk of the store is
  // kEventsPerChunk of them: `worker` packs each part into the chunk's columns as it comes.
  std::uint64_t flushed = 0;             // events handed to the workers
  std::uint64_t chunk_first = 0;         // the first event of the chunk being built
  std::int64_t chunk_first_time_us = 0;  // the chunk's first and last event's
  std::int64_t chunk_last_time_us = 0;
  EventChunk buffer;  // the part being filled (its `start` unused: the chunk's is chunk_start)
  // derived while every event in `buffer` came without producer series.
  ChunkEncoder::SeriesSource buffer_series_source = ChunkEncoder::SeriesSource::derived;
  SeriesPoint chunk_start;  // the series before the chunk being built
  SeriesPoint current;      // the series after the last event
  SeriesPoint peak;
  SegmentMap segments;  // after the last flushed part; keyframe_worker's while a part is pending
  // The chunk being built, packed; the worker's while a part is pending.
  ChunkEncoder encoder;
  TimelineBuilder timeline;
  Statement insert_chunk;
  Statement insert_keyframe;
  Statement insert_category_chunk;
  Statement insert_timeline_row;
  Statement insert_category_row;

  // Memory by category, built as events come (run_categories.cpp), for a run given a label table
  // (before its first event: set_labels). Only a run with labels is read for it (its category
  // plot, the post-mortem's categories at an OOM): an imported snapshot's memory is all of
  // category unknown, and building it for nothing was a fifth to a quarter of such an ingest's
  // bytes and of its time.
  std::vector<Category> category_of_label;  // set_labels' table: LabelId -> Category; empty: none
  CategoryTracker categories;
  PackedCategoryChunk category_buffer;  // the categories of the chunk's events so far
  CategoryPyramidBuilder category_levels;
  // Level rows filled since the last part went to the worker: they go with the next part, whose
  // worker encodes and compresses them (a fifth of this thread's instructions when it did), and
  // are written after that part's rows, in the order they filled.
  std::vector<TimelineBuilder::Row> timeline_rows;
  std::vector<CategoryPyramidBuilder::Row> category_rows;

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
            db, "INSERT INTO category_chunks(run_id, first_event, data) VALUES (?, ?, ?)"),
        insert_timeline_row(run_store_detail::prepare_level_row_insert(db, "timeline_levels")),
        insert_category_row(run_store_detail::prepare_level_row_insert(db, "category_levels")) {}

  std::uint64_t event_count() const { return flushed + buffer.events.size(); }
  std::uint64_t chunk_events() const { return event_count() - chunk_first; }

  // A part of a chunk's events, and when it ends the chunk, what the workers derive from the
  // whole chunk: the compressed categories and the segment keyframe after it (the compressed
  // events are in `encoder`). Recycled once its rows are written: the next part fills the same
  // vectors, where fresh ones were pages to fault in for every part.
  struct PartWork {
    EventChunk part;
    // Where part.series came from.
    ChunkEncoder::SeriesSource series_source = ChunkEncoder::SeriesSource::producer;
    PackedCategoryChunk categories;  // of the chunk's events, when the part ends it
    std::vector<std::uint8_t> category_blob;
    std::vector<std::uint8_t> keyframe;  // `segments` after the chunk's events
    // The level rows that came with the part, and their encoded buckets (encode_level_rows).
    std::vector<TimelineBuilder::Row> timeline_rows;
    std::vector<std::vector<std::uint8_t>> timeline_data;
    std::vector<CategoryPyramidBuilder::Row> category_rows;
    std::vector<std::vector<std::uint8_t>> category_data;

    void encode_level_rows() {
      for (const auto& row : timeline_rows)
        timeline_data.push_back(encode_buckets(row.buckets));
      for (const auto& row : category_rows)
        category_data.push_back(encode_category_buckets(row.buckets));
    }
  };
  // A part in the workers, with the chunk it ends if it does.
  struct PendingPart {
    bool ends_chunk = false;
    std::uint64_t first_event = 0;  // of the chunk
    std::uint64_t count = 0;        // the chunk's events
    std::int64_t first_time_us = 0;
    std::int64_t last_time_us = 0;
    std::unique_ptr<PartWork> work;
    std::future<std::span<const std::uint8_t>> blob;  // in `encoder` when the part ends a chunk
    std::future<void> keyframe;                       // work->keyframe, when the part ends a chunk
  };
  std::deque<PendingPart> pending;
  std::vector<std::unique_ptr<PartWork>> spare_work;  // written parts, emptied
  // One part in the workers while this thread fills the next keeps the cores busy (a second one
  // gained no time when parts were whole chunks). While a part is pending, `keyframe_worker` owns
  // `segments` and `worker` owns `encoder`: each runs parts one at a time, in order.
  static constexpr std::size_t kMaxPending = 1;
  // A quarter of a chunk: the events and series held unpacked are two parts (~2.4 MB), not two
  // chunks (~9.4 MB), whatever the trace's length; and the part that ends a chunk, which
  // `worker` compresses, still takes this thread longer to fill than the worker takes.
  static constexpr std::size_t kEventsPerPart = kEventsPerChunk / 4;
  static_assert(kEventsPerChunk % kEventsPerPart == 0);

  // Writes the rows of pending parts, oldest first, until at most `keep` remain.
  void write_pending_chunks(std::size_t keep) {
    while (pending.size() > keep) {
      PendingPart& oldest = pending.front();
      // The part leaves `pending` only once both its tasks are done: when one throws, the part
      // stays there for the other, and outlives it (the workers stop first).
      const auto blob = oldest.blob.get();
      oldest.keyframe.get();
      std::unique_ptr<PartWork> work = std::move(oldest.work);
      if (oldest.ends_chunk) {
        insert_chunk.bind_int(1, run.value)
            .bind_int(2, static_cast<std::int64_t>(oldest.first_event))
            .bind_int(3, static_cast<std::int64_t>(oldest.count))
            .bind_int(4, oldest.first_time_us)
            .bind_int(5, oldest.last_time_us)
            .bind_blob(6, blob);
        insert_chunk.run();
        insert_chunk.reset();
        if (work->categories.size() != 0) {
          insert_category_chunk.bind_int(1, run.value)
              .bind_int(2, static_cast<std::int64_t>(oldest.first_event))
              .bind_blob(3, work->category_blob);
          insert_category_chunk.run();
          insert_category_chunk.reset();
        }
        write_keyframe(oldest.first_event + oldest.count, work->keyframe);
      }
      for (std::size_t i = 0; i < work->timeline_rows.size(); ++i)
        run_store_detail::insert_level_row(insert_timeline_row, run, work->timeline_rows[i],
                                           work->timeline_data[i]);
      for (std::size_t i = 0; i < work->category_rows.size(); ++i)
        run_store_detail::insert_level_row(insert_category_row, run, work->category_rows[i],
                                           work->category_data[i]);
      pending.pop_front();
      work->timeline_rows.clear();
      work->timeline_data.clear();
      work->category_rows.clear();
      work->category_data.clear();
      work->part.events.clear();
      work->part.series.clear();
      work->part.labels.clear();
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

  // Run the parts' work: `worker` packs and compresses, `keyframe_worker` applies them to
  // `segments`. Last: destroyed first, they finish the parts running before the segments,
  // encoder and parts those use go.
  SerialWorker worker;
  SerialWorker keyframe_worker;
};

}  // namespace fragscope::storage

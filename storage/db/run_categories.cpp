// Memory by category: the category chunks and pyramid RunWriter writes at ingest, and
// RunReader::category_timeline() answered from them (a query whatever the zoom, not a replay).
#include <algorithm>
#include <string>

#include "storage/db/run_reader.h"
#include "storage/db/run_store_internal.h"
#include "storage/db/run_writer.h"

namespace fragscope::storage {

using run_store_detail::category_from_string;

// --- Ingest ---

void RunWriter::track_categories(Ingest& ingest, std::uint64_t index, const TraceEvent& event,
                                 LabelId label) {
  Category category = Category::unknown;
  if (label.value != 0 && label.value < ingest.category_of_label.size())
    category = ingest.category_of_label[label.value];
  const auto change = ingest.categories.apply(event, category);
  ingest.category_buffer.push_back(event.time_us, change.category, change.delta);
  ingest.category_levels.add(index, event.time_us, ingest.categories);
}

void RunWriter::write_category_rows(RunId run,
                                    const std::vector<CategoryPyramidBuilder::Row>& rows) {
  run_store_detail::insert_level_rows(db_, "category_levels", run, rows, [](const auto& buckets) {
    return encode_category_buckets(buckets);
  });
}

// --- Reading ---

std::vector<CategoryBucket> RunReader::category_singles(RunId run, std::uint64_t first,
                                                        std::uint64_t end,
                                                        const CancelToken& cancel) {
  std::vector<CategoryBucket> out;
  if (end <= first)
    return out;
  auto query = run_store_detail::chunks_covering(db_, "category_chunks", run, first, end);
  while (query.step()) {
    cancel.throw_if_cancelled();
    const auto chunk_first = static_cast<std::uint64_t>(query.column_int(0));
    const CategoryChunk chunk = decode_category_chunk(
        query.column_blob(1), db_.path() + ": run " + std::to_string(run.value) +
                                  ", categories from event " + std::to_string(chunk_first));
    const auto part = chunk.singles(chunk_first, first, end);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<CategoryBucket> RunReader::category_level(RunId run, int level,
                                                      std::uint64_t first_bucket,
                                                      std::uint64_t end_bucket,
                                                      const CancelToken& cancel) {
  std::vector<CategoryBucket> out;
  if (end_bucket <= first_bucket)
    return out;
  auto query = db_.prepare(
      "SELECT first_bucket, data FROM category_levels WHERE run_id = ? AND level = ? AND "
      "first_bucket < ? AND first_bucket + bucket_count > ? ORDER BY first_bucket");
  query.bind_int(1, run.value)
      .bind_int(2, level)
      .bind_int(3, static_cast<std::int64_t>(end_bucket))
      .bind_int(4, static_cast<std::int64_t>(first_bucket));
  while (query.step()) {
    cancel.throw_if_cancelled();
    const auto row_first = static_cast<std::uint64_t>(query.column_int(0));
    const auto row = decode_category_buckets(
        query.column_blob(1), db_.path() + ": run " + std::to_string(run.value) +
                                  ", category level " + std::to_string(level) + " from bucket " +
                                  std::to_string(row_first));
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (row_first + i >= first_bucket && row_first + i < end_bucket)
        out.push_back(row[i]);
    }
  }
  if (out.size() != end_bucket - first_bucket)
    throw DatabaseError(db_.path() + ": run " + std::to_string(run.value) + ": category level " +
                        std::to_string(level) + " lacks buckets " + std::to_string(first_bucket) +
                        ".." + std::to_string(end_bucket));
  return out;
}

std::vector<CategoryBucket> RunReader::category_timeline(RunId run, std::uint64_t first,
                                                         std::uint64_t end, std::size_t buckets,
                                                         const CancelToken& cancel,
                                                         const Progress& progress) {
  constexpr std::string_view kStage = kCategoryTimelineStages[0].name;
  end = std::min(end, event_count(run));
  if (end <= first || buckets == 0) {
    progress.report(kStage, 1, 1);
    return {};
  }
  auto stored = db_.prepare("SELECT max(level) FROM category_levels WHERE run_id = ?");
  stored.bind_int(1, run.value);
  if (!stored.step() || stored.column_is_null(0))
    return category_timeline_by_replay(run, first, end, buckets, cancel, progress);
  const int top_level = static_cast<int>(stored.column_int(0));

  const std::uint64_t width = (end - first) / buckets;
  int level = 0;
  while (width >= kLevel0Events && level < top_level && level_bucket_events(level + 1) <= width)
    ++level;

  // [first, end) as aligned pyramid buckets no wider than `level`'s: single events up to the
  // first level-0 boundary, then ever coarser buckets up to each next boundary, `level`'s
  // buckets, and ever finer ones down to `end`. Each output bucket then covers exactly its
  // events, and at most a few dozen events are read one by one. Narrower buckets than level 0's
  // are read as single events.
  struct Piece {
    int level = -1;  // -1: single events [first, end); else buckets [first, end) of that level
    std::uint64_t first = 0;
    std::uint64_t end = 0;
  };
  std::vector<Piece> pieces;
  if (width < kLevel0Events) {
    pieces.push_back({-1, first, end});
  } else {
    std::uint64_t pos = first;
    const auto align_up = [](std::uint64_t value, std::uint64_t size) {
      return (value + size - 1) / size * size;
    };
    const std::uint64_t head_end = std::min(end, align_up(pos, kLevel0Events));
    pieces.push_back({-1, pos, head_end});
    pos = head_end;
    int climbed = 0;
    while (climbed < level) {
      const std::uint64_t size = level_bucket_events(climbed);
      const std::uint64_t boundary = align_up(pos, level_bucket_events(climbed + 1));
      const std::uint64_t stop = std::max(pos, std::min(boundary, end / size * size));
      pieces.push_back({climbed, pos / size, stop / size});
      pos = stop;
      if (pos != boundary)
        break;  // `end` comes before the next coarser boundary: descend from here
      ++climbed;
    }
    for (int l = climbed; l >= 0; --l) {
      const std::uint64_t size = level_bucket_events(l);
      const std::uint64_t stop = std::max(pos, end / size * size);
      pieces.push_back({l, pos / size, stop / size});
      pos = stop;
    }
    pieces.push_back({-1, pos, end});
  }

  // Progress by piece read; the last unit is the regrouping.
  const std::uint64_t units = pieces.size() + 1;
  progress.report(kStage, 0, units);
  std::vector<CategoryBucket> source;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    const auto part = piece.level < 0
                          ? category_singles(run, piece.first, piece.end, cancel)
                          : category_level(run, piece.level, piece.first, piece.end, cancel);
    source.insert(source.end(), part.begin(), part.end());
    progress.report(kStage, i + 1, units);
    cancel.throw_if_cancelled();
  }
  auto out = regroup_level_buckets<CategoryBucket>(source, first, end, buckets);
  progress.report(kStage, units, units);
  return out;
}

// Runs without category rows (stored before the pyramid existed, or without labels): replay the
// events from the first one.
std::vector<CategoryBucket> RunReader::category_timeline_by_replay(RunId run, std::uint64_t first,
                                                                   std::uint64_t end,
                                                                   std::size_t buckets,
                                                                   const CancelToken& cancel,
                                                                   const Progress& progress) {
  constexpr std::string_view kStage = kCategoryTimelineStages[0].name;
  progress.report(kStage, 0, end);
  std::vector<CategoryBucket> out;
  std::vector<Category> category_of_label;
  for (const auto& label : labels(run)) {
    if (category_of_label.size() <= label.id.value)
      category_of_label.resize(label.id.value + 1, Category::unknown);
    category_of_label[label.id.value] = label.label.category;
  }
  CategoryTracker tracker;
  // Blocks already live when the run's events begin (an imported, truncated trace).
  // Keep the state alive for the loop: ranging over a member of a temporary would dangle.
  const SegmentStateAt initial = segment_state(run, 0);
  for (const auto& [addr, block] : initial.state.blocks())
    tracker.add_initial(addr, static_cast<std::int64_t>(block.size));

  // Regrouped as the events come, so memory stays one bucket per output bucket.
  std::vector<CategoryBucket> pending;
  std::uint64_t index = 0;
  auto query = db_.prepare(
      "SELECT first_event FROM event_chunks WHERE run_id = ? AND first_event < ? "
      "ORDER BY first_event");
  query.bind_int(1, run.value).bind_int(2, static_cast<std::int64_t>(end));
  while (query.step()) {
    cancel.throw_if_cancelled();
    const EventChunk chunk = load_chunk(run, static_cast<std::uint64_t>(query.column_int(0)));
    pending.clear();
    for (std::size_t i = 0; i < chunk.events.size() && index < end; ++i, ++index) {
      const TraceEvent& event = chunk.events[i];
      const std::uint32_t label = chunk.labels.empty() ? 0 : chunk.labels[i].value;
      tracker.apply(
          event, label < category_of_label.size() ? category_of_label[label] : Category::unknown);
      if (index >= first)
        pending.push_back(
            CategoryBucket{index, index + 1, event.time_us, event.time_us, index, tracker.bytes()});
    }
    if (pending.empty())
      continue;
    // Output buckets so far plus this chunk's events, regrouped: the last output bucket may
    // continue into this chunk.
    pending.insert(pending.begin(), out.begin(), out.end());
    out = regroup_level_buckets<CategoryBucket>(pending, first, end, buckets);
    if (index < end)
      progress.report(kStage, index, end);
  }
  progress.report(kStage, end, end);
  return out;
}

}  // namespace fragscope::storage

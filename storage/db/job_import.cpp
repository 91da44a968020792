#include "storage/db/job_import.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/input_file.h"
#include "engine/snapshot/recording_stats.h"
#include "engine/snapshot/snapshot.h"

namespace fragscope::storage {
namespace {

namespace fs = std::filesystem;

bool is_snapshot_file(const fs::path& path) {
  const std::string name = path.filename().string();
  for (const char* suffix : {".pickle", ".pickle.gz", ".pkl", ".pkl.gz"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return true;
  }
  return false;
}

std::optional<int> rank_in_name(const std::string& file) {
  static const std::regex pattern(R"((?:^|[^a-z])rank[_-]?([0-9]{1,6})(?:[^0-9]|$))",
                                  std::regex::icase);
  std::smatch match;
  const std::string name = fs::path(file).filename().string();
  if (std::regex_search(name, match, pattern))
    return std::stoi(match[1].str());
  return std::nullopt;
}

const nlohmann::json& require(const nlohmann::json& object, const std::string& key,
                              const std::string& where) {
  auto it = object.find(key);
  if (it == object.end())
    throw InputError(where + ": missing \"" + key + "\"");
  return *it;
}

int require_int(const nlohmann::json& object, const std::string& key, const std::string& where,
                int minimum) {
  const nlohmann::json& value = require(object, key, where);
  if (!value.is_number_integer() || value.get<std::int64_t>() < minimum ||
      value.get<std::int64_t>() > 1'000'000)
    throw InputError(where + ": \"" + key + "\" must be an integer >= " + std::to_string(minimum) +
                     ", got " + value.dump());
  return value.get<int>();
}

std::string optional_path(const nlohmann::json& object, const std::string& key,
                          const std::string& where, const fs::path& base) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null())
    return {};
  if (!it->is_string() || it->get<std::string>().empty())
    throw InputError(where + ": \"" + key + "\" must be a file name, got " + it->dump());
  const fs::path path = it->get<std::string>();
  return (path.is_absolute() ? path : base / path).string();
}

void check_ranks(const JobSource& source, const std::string& where) {
  std::set<int> seen;
  for (const RankFile& rank : source.ranks) {
    if (!seen.insert(rank.rank).second)
      throw InputError(where + ": rank " + std::to_string(rank.rank) + " is given twice");
    if (source.world_size > 0 && rank.rank >= source.world_size)
      throw InputError(where + ": rank " + std::to_string(rank.rank) + " is not below " +
                       "world_size " + std::to_string(source.world_size));
  }
}

JobSource from_files(std::vector<std::string> files, const std::string& origin) {
  if (files.empty())
    throw InputError(origin + ": no snapshot files (.pickle, .pickle.gz, .pkl, .pkl.gz)");
  std::size_t named = 0;
  for (const std::string& file : files)
    named += rank_in_name(file).has_value();
  if (named != 0 && named != files.size()) {
    for (const std::string& file : files) {
      if (!rank_in_name(file))
        throw InputError(file +
                         ": no rank in its name (e.g. rank3), although other files of "
                         "the job have one; name every rank, or none");
    }
  }
  JobSource source;
  source.origin = origin;
  for (std::size_t i = 0; i < files.size(); ++i) {
    RankFile rank;
    rank.rank = named ? *rank_in_name(files[i]) : static_cast<int>(i);
    rank.snapshot = files[i];
    source.ranks.push_back(rank);
  }
  std::sort(source.ranks.begin(), source.ranks.end(),
            [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  check_ranks(source, origin);
  return source;
}

}  // namespace

JobSource read_job_manifest(const std::string& path) {
  // Regular files only, bounded size and nesting, 1e400 refused (engine/core/input_file.h).
  const nlohmann::json manifest = read_json_file(path, "job manifest");
  if (!manifest.is_object())
    throw InputError(path + ": a job manifest is a JSON object");
  const nlohmann::json& format = require(manifest, "format", path);
  if (!format.is_string() || format.get<std::string>().rfind("fragscope-job/", 0) != 0)
    throw InputError(path + ": \"format\" must be \"fragscope-job/1\", got " + format.dump());
  JobSource source;
  source.origin = path;
  const nlohmann::json& job = require(manifest, "job", path);
  if (!job.is_string())
    throw InputError(path + ": \"job\" must be a string, got " + job.dump());
  source.name = job.get<std::string>();
  if (manifest.contains("world_size"))
    source.world_size = require_int(manifest, "world_size", path, 1);
  const nlohmann::json& ranks = require(manifest, "ranks", path);
  if (!ranks.is_array() || ranks.empty())
    throw InputError(path + ": \"ranks\" must be a non-empty array");
  const fs::path base = fs::path(path).parent_path();
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string where = path + ": ranks[" + std::to_string(i) + "]";
    if (!ranks[i].is_object())
      throw InputError(where + ": expected an object");
    RankFile rank;
    rank.rank = require_int(ranks[i], "rank", where, 0);
    if (ranks[i].contains("local_rank") && !ranks[i]["local_rank"].is_null())
      rank.local_rank = require_int(ranks[i], "local_rank", where, 0);
    rank.snapshot = optional_path(ranks[i], "snapshot", where, base);
    if (rank.snapshot.empty())
      throw InputError(where + ": missing \"snapshot\"");
    rank.stats = optional_path(ranks[i], "stats", where, base);
    rank.env = optional_path(ranks[i], "env", where, base);
    source.ranks.push_back(rank);
  }
  std::sort(source.ranks.begin(), source.ranks.end(),
            [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  check_ranks(source, path);
  return source;
}

JobSource job_source_of(const std::vector<std::string>& paths) {
  if (paths.empty())
    throw InputError("a job needs snapshot files, a directory or a " +
                     std::string(kJobManifestName));
  if (paths.size() == 1) {
    const fs::path path = paths.front();
    std::error_code error;
    if (fs::is_directory(path, error)) {
      const fs::path manifest = path / kJobManifestName;
      if (fs::exists(manifest, error))
        return read_job_manifest(manifest.string());
      std::vector<std::string> files;
      for (const auto& entry : fs::directory_iterator(path, error)) {
        if (entry.is_regular_file() && is_snapshot_file(entry.path()))
          files.push_back(entry.path().string());
      }
      if (error)
        throw InputError(path.string() + ": cannot list the directory: " + error.message());
      std::sort(files.begin(), files.end());
      return from_files(std::move(files), path.string());
    }
    if (path.extension() == ".json")
      return read_job_manifest(path.string());
  }
  return from_files(paths, "files");
}

bool looks_like_job(const std::vector<std::string>& paths) {
  if (paths.size() == 1)
    return fs::path(paths.front()).extension() == ".json";
  if (paths.size() < 2)
    return false;
  return std::all_of(paths.begin(), paths.end(),
                     [](const std::string& path) { return rank_in_name(path).has_value(); });
}

std::string unused_job_name(RunStore& store, const JobSource& source) {
  std::string base = source.name;
  if (base.empty() && !source.ranks.empty()) {
    static const std::regex rank(R"([_\-. ]?rank[_-]?[0-9]{1,6})", std::regex::icase);
    base = std::regex_replace(run_name_for(source.ranks.front().snapshot), rank, "");
  }
  if (base.empty())
    base = "job";
  std::string name = base;
  for (int n = 2; find_job(store, name); ++n)
    name = base + " (" + std::to_string(n) + ")";
  return name;
}

JobImportResult import_job(RunStore& store, const JobSource& source,
                           const JobImportOptions& options) {
  const std::string name = options.job_name.empty() ? source.name : options.job_name;
  if (name.empty())
    throw InputError(source.origin + ": the job needs a name (--job NAME)");
  if (source.ranks.empty())
    throw InputError(source.origin + ": the job has no ranks");
  if (find_job(store, name))
    throw InputError("job \"" + name + "\" already exists in " + store.database().path() +
                     " (delete it first, or import under another --job name)");

  // Read everything first (the slow part, one rank per thread), so a bad file writes nothing.
  const std::size_t count = source.ranks.size();
  std::vector<std::optional<snapshot::Snapshot>> snapshots(count);
  std::vector<std::optional<nlohmann::json>> stats(count);
  std::vector<std::optional<nlohmann::json>> environments(count);  // NAME.env.json per rank
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex progress_mutex;
  auto worker = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      if (options.control.cancel.cancelled())
        return;
      try {
        const RankFile& rank = source.ranks[i];
        snapshots[i] = snapshot::read_snapshot_spooled(rank.snapshot);
        stats[i] = rank.stats.empty() ? read_companion_stats(rank.snapshot)
                                      : std::optional(snapshot::read_recording_stats(rank.stats));
        environments[i] = rank.env.empty() ? read_companion_environment(rank.snapshot)
                                           : std::optional(read_recording_environment(rank.env));
      } catch (...) {
        errors[i] = std::current_exception();
      }
      std::lock_guard lock(progress_mutex);
      options.control.progress.report("reading", ++done, count);
    }
  };
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t threads =
      std::min<std::size_t>(count, options.threads ? options.threads : hardware);
  {
    std::vector<std::jthread> pool;
    for (std::size_t t = 1; t < threads; ++t)
      pool.emplace_back(worker);
    worker();
  }
  options.control.check();
  for (const auto& error : errors) {
    if (error)
      std::rethrow_exception(error);
  }

  JobImportResult result;
  std::vector<RunId> stored;
  try {
    for (std::size_t i = 0; i < count; ++i) {
      options.control.check();
      const RankFile& rank = source.ranks[i];
      ImportOptions import;
      import.name = name + " rank " + std::to_string(rank.rank);
      import.source_file = rank.snapshot;
      import.recorded_stats = stats[i];
      import.recorded_environment = environments[i];
      if (environments[i])
        import.recorded_environment_file =
            rank.env.empty() ? companion_environment_path(rank.snapshot) : rank.env;
      const ImportResult imported = import_snapshot(store, *snapshots[i], import);
      stored.push_back(imported.run);
      result.ranks.push_back({rank.rank, rank.snapshot, imported});
      snapshots[i].reset();  // the stored run replaces it; keep peak memory at one job's worth
      options.control.progress.report("storing", i + 1, count);
    }
    Transaction transaction(store.database());
    result.job =
        create_job(store, name, source.world_size ? source.world_size : static_cast<int>(count),
                   source.origin);
    for (std::size_t i = 0; i < count; ++i)
      add_job_rank(store, result.job,
                   {source.ranks[i].rank, source.ranks[i].local_rank, result.ranks[i].result.run});
    transaction.commit();
  } catch (...) {
    for (const RunId run : stored) {
      try {
        store.delete_run(run);
      } catch (...) {  // keep the first error: it says why
      }
    }
    throw;
  }
  return result;
}

}  // namespace fragscope::storage

#include "storage/db/sweep.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "storage/db/schema.h"

namespace fragscope::storage {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSweepFormat = "fragscope-sweep/1";
// Tables that link runs to other things rather than holding a run's own data: not copied.
const std::set<std::string> kLinkTables = {"comparison_runs", "job_ranks", "sweep_tasks"};

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'')
      quoted += "'\\''";
    else
      quoted += c;
  }
  return quoted + "'";
}

// Slurm job names and #SBATCH values: no spaces or quotes.
std::string slurm_word(const std::string& text) {
  std::string word;
  for (char c : text)
    word += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
             c == ':')
                ? c
                : '_';
  return word;
}

std::string now_utc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void write_text(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out)
      throw InputError(path.string() + ": cannot write");
  }
  fs::rename(tmp, path);
}

std::optional<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string tail_lines(const std::string& text, std::size_t lines) {
  std::deque<std::string> kept;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    kept.push_back(line);
    if (kept.size() > lines)
      kept.pop_front();
  }
  std::string out;
  for (const std::string& line : kept)
    out += line + "\n";
  return out;
}

bool still_waiting(const std::string& slurm_state) {
  for (const char* state :
       {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED",
        "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD", "REQUEUE_FED"}) {
    if (slurm_state.rfind(state, 0) == 0)
      return true;
  }
  return false;
}

struct Column {
  std::string name;
  bool rowid_alias = false;
};

std::vector<Column> columns_of(Database& db, const std::string& table) {
  auto info = db.prepare("SELECT name, type, pk FROM pragma_table_info(?)");
  info.bind_text(1, table);
  std::vector<Column> columns;
  int pk_columns = 0;
  while (info.step()) {
    columns.push_back(
        {info.column_text(0), info.column_int(2) == 1 && info.column_text(1) == "INTEGER"});
    pk_columns += info.column_int(2) > 0;
  }
  if (pk_columns != 1) {
    for (Column& c : columns)
      c.rowid_alias = false;
  }
  return columns;
}

std::vector<std::string> run_tables(Database& db) {
  std::vector<std::string> tables;
  auto query = db.prepare(
      "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
      "ORDER BY name");
  while (query.step())
    tables.push_back(query.column_text(0));
  std::vector<std::string> with_run_id;
  for (const std::string& table : tables) {
    if (table == "runs" || kLinkTables.count(table))
      continue;
    for (const Column& c : columns_of(db, table)) {
      if (c.name == "run_id")
        with_run_id.push_back(table);
    }
  }
  return with_run_id;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items)
    out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

std::string_view to_string(TaskState state) {
  switch (state) {
    case TaskState::collected:
      return "collected";
    case TaskState::already_collected:
      return "already_collected";
    case TaskState::waiting:
      return "waiting";
    case TaskState::failed:
      return "failed";
  }
  return "unknown";
}

std::size_t CollectReport::count(TaskState state) const {
  return static_cast<std::size_t>(std::count_if(
      tasks.begin(), tasks.end(), [&](const TaskReport& t) { return t.state == state; }));
}

void check_sweep_dir(const fs::path& dir) {
  // #SBATCH --output=... cannot quote: a folder with blanks or quotes would split the option.
  for (char c : dir.string()) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '\'' || c == '"' || c == '%')
      throw InputError(dir.string() +
                       ": a sweep folder's path may not hold blanks, quotes or "
                       "'%' (Slurm's --output cannot quote them); choose --out");
  }
}

std::string batch_script(const SweepSpec& spec) {
  check_sweep_dir(spec.dir);
  const bool torch = spec.kind == SweepKind::torch;
  const std::string dir = spec.dir.string();
  const std::size_t n = spec.points.size();
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# FragScope sweep \"" << spec.name << "\": " << n << " point(s), one Slurm array task each"
    << (torch ? ", each a real PyTorch training run on its own GPU" : ", simulated") << ".\n"
    << "# Written by fragscope-cli " << (torch ? "torch-run" : "run") << " --slurm on " << now_utc()
    << ". Edit freely, then resubmit with\n"
    << "#   sbatch " << shell_quote(dir + "/" + kSweepScriptName) << "\n"
    << "# Import finished tasks (safe while others still run; imports each task once):\n"
    << "#   fragscope-cli collect " << shell_quote(dir) << "\n"
    << "# Tasks (SLURM_ARRAY_TASK_ID: point):\n";
  for (std::size_t i = 0; i < n; ++i)
    s << "#   " << i << ": " << spec.points[i] << "\n";
  s << "#SBATCH --job-name=" << slurm_word("fragscope-" + spec.name) << "\n"
    << "#SBATCH --array=0-" << (n == 0 ? 0 : n - 1) << "\n"
    << "#SBATCH --ntasks=1\n"
    << "#SBATCH --cpus-per-task=" << spec.slurm.cpus_per_task << "\n";
  if (torch)
    s << "#SBATCH --gpus-per-task=" << spec.slurm.gpus_per_task << "\n";
  s << "#SBATCH --output=" << dir << "/logs/task-%a.out\n";
  if (!spec.slurm.partition.empty())
    s << "#SBATCH --partition=" << slurm_word(spec.slurm.partition) << "\n";
  if (!spec.slurm.account.empty())
    s << "#SBATCH --account=" << slurm_word(spec.slurm.account) << "\n";
  if (!spec.slurm.time.empty())
    s << "#SBATCH --time=" << slurm_word(spec.slurm.time) << "\n";
  s << "\nset -u\n"
    << "SWEEP_DIR=" << shell_quote(dir) << "\n"
    << "FRAGSCOPE_CLI=" << shell_quote(spec.cli.string()) << "\n"
    << "TASK=\"${SLURM_ARRAY_TASK_ID:?submit this script with sbatch: it is a job array}\"\n"
    << "OUT=\"$SWEEP_DIR/tasks/$TASK\"\n"
    << "# A requeued or resubmitted task starts clean; result.json is written last.\n"
    << "rm -rf \"$OUT\" && mkdir -p \"$OUT\" || exit 1\n"
    << "echo \"${SLURM_ARRAY_JOB_ID:-} ${SLURM_JOB_ID:-} $(hostname)\" > \"$OUT/slurm\"\n";
  if (torch) {
    s << "\"$FRAGSCOPE_CLI\" torch-run \"$SWEEP_DIR/experiment.json\" --point \"$TASK\" \\\n"
      << "    --python " << shell_quote(spec.python) << " --runner "
      << shell_quote(spec.runner.string()) << (spec.stacks ? " --stacks" : "") << " \\\n"
      << "    --out \"$OUT\" --db \"$OUT/task.db\" --json \"$OUT/result.json\"\n";
  } else {
    s << "\"$FRAGSCOPE_CLI\" run \"$SWEEP_DIR/experiment.json\" --point \"$TASK\" --threads "
      << spec.slurm.cpus_per_task << " \\\n"
      << "    --db \"$OUT/task.db\" --json \"$OUT/result.json\"\n";
  }
  s << "status=$?\n"
    << "echo \"$status\" > \"$OUT/exit_status\"\n"
    << "exit \"$status\"\n";
  return s.str();
}

fs::path write_sweep(SweepSpec& spec, const json& experiment_definition) {
  spec.dir = fs::absolute(spec.dir).lexically_normal();
  if (spec.dir.has_filename() == false)
    spec.dir = spec.dir.parent_path();
  check_sweep_dir(spec.dir);
  std::error_code error;
  if (fs::exists(spec.dir / "sweep.json", error))
    throw InputError(spec.dir.string() +
                     ": already holds a sweep (sweep.json); give another "
                     "--out folder, or collect this one");
  fs::create_directories(spec.dir / "logs", error);
  fs::create_directories(spec.dir / "tasks", error);
  if (error)
    throw InputError(spec.dir.string() + ": cannot create the sweep folder: " + error.message());
  write_text(spec.dir / "experiment.json", experiment_definition.dump(1) + "\n");
  json points = json::array();
  for (std::size_t i = 0; i < spec.points.size(); ++i)
    points.push_back({{"task", i}, {"name", spec.points[i]}});
  const json sweep = {{"format", kSweepFormat},
                      {"kind", spec.kind == SweepKind::torch ? "torch" : "simulated"},
                      {"experiment", spec.name},
                      {"points", points},
                      {"created_at", now_utc()},
                      {"slurm",
                       {{"partition", spec.slurm.partition},
                        {"account", spec.slurm.account},
                        {"time", spec.slurm.time},
                        {"gpus_per_task", spec.slurm.gpus_per_task}}}};
  write_text(spec.dir / "sweep.json", sweep.dump(1) + "\n");
  const fs::path script = spec.dir / kSweepScriptName;
  write_text(script, batch_script(spec));
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add,
                  error);
  return script;
}

json read_sweep(const fs::path& dir) {
  const fs::path file = dir / "sweep.json";
  const auto text = read_text(file);
  if (!text)
    throw InputError(dir.string() + ": not a FragScope sweep folder (no sweep.json)");
  json sweep;
  try {
    sweep = json::parse(*text);
  } catch (const json::parse_error& e) {
    throw InputError(file.string() + ": not JSON (" + e.what() + ")");
  }
  if (!sweep.is_object() || !sweep.contains("points") || !sweep["points"].is_array() ||
      sweep.value("format", std::string()).rfind("fragscope-sweep/", 0) != 0)
    throw InputError(file.string() + ": expected {\"format\": \"" + kSweepFormat +
                     "\", \"points\": [...]}");
  return sweep;
}

std::vector<RunId> copy_runs(RunStore& store, const fs::path& source_path,
                             std::optional<ExperimentId> experiment,
                             const std::function<void(const std::vector<RunId>&)>& after_copy) {
  {
    // Bring the task's database to this build's schema, so both sides have the same columns.
    RunStore source(source_path.string(), OpenMode::read_write);
  }
  Database& db = store.database();
  {
    auto attach = db.prepare("ATTACH DATABASE ? AS task");
    attach.bind_text(1, source_path.string());
    attach.run();
  }
  std::vector<RunId> copied;
  try {
    Transaction transaction(db);
    std::vector<std::string> run_columns;
    for (const Column& c : columns_of(db, "runs")) {
      if (!c.rowid_alias)
        run_columns.push_back(c.name);
    }
    std::map<std::int64_t, std::int64_t> new_id;
    std::vector<std::int64_t> source_ids;
    {
      auto ids = db.prepare("SELECT id FROM task.runs ORDER BY id");
      while (ids.step())
        source_ids.push_back(ids.column_int(0));
    }
    const std::string columns = joined(run_columns);
    auto insert_run = db.prepare("INSERT INTO main.runs(" + columns + ") SELECT " + columns +
                                 " FROM task.runs WHERE id = ?");
    auto relink =
        db.prepare("UPDATE main.runs SET experiment_id = ?, twin_run = NULL WHERE id = ?");
    for (const std::int64_t id : source_ids) {
      insert_run.bind_int(1, id);
      insert_run.run();
      insert_run.reset();
      const std::int64_t created = db.last_insert_rowid();
      new_id[id] = created;
      if (experiment)
        relink.bind_int(1, experiment->value);
      else
        relink.bind_null(1);
      relink.bind_int(2, created);
      relink.run();
      relink.reset();
      copied.push_back(RunId{created});
    }
    for (const std::string& table : run_tables(db)) {
      std::vector<std::string> target, source;
      for (const Column& c : columns_of(db, table)) {
        if (c.rowid_alias)
          continue;
        target.push_back(c.name);
        source.push_back(c.name == "run_id" ? "?1" : c.name);
      }
      auto copy = db.prepare("INSERT INTO main." + table + "(" + joined(target) + ") SELECT " +
                             joined(source) + " FROM task." + table + " WHERE run_id = ?2");
      for (const auto& [from, to] : new_id) {
        copy.bind_int(1, to).bind_int(2, from);
        copy.run();
        copy.reset();
      }
    }
    // Twin links between copied runs, and the summary's "twin_of".
    auto twins = db.prepare("SELECT id, twin_run FROM task.runs WHERE twin_run IS NOT NULL");
    auto set_twin = db.prepare("UPDATE main.runs SET twin_run = ? WHERE id = ?");
    while (twins.step()) {
      const auto from = new_id.find(twins.column_int(0));
      const auto to = new_id.find(twins.column_int(1));
      if (from != new_id.end() && to != new_id.end()) {
        set_twin.bind_int(1, to->second).bind_int(2, from->second);
        set_twin.run();
        set_twin.reset();
      }
    }
    for (const auto& [from, to] : new_id) {
      RunRecord record = store.run(RunId{to});
      auto twin_of = record.summary.find("twin_of");
      if (twin_of != record.summary.end() && twin_of->is_number_integer()) {
        const auto it = new_id.find(twin_of->get<std::int64_t>());
        *twin_of = it == new_id.end() ? json(nullptr) : json(it->second);
        store.update_summary(RunId{to}, record.summary);
      }
    }
    if (after_copy)
      after_copy(copied);
    transaction.commit();
  } catch (...) {
    try {
      db.exec("DETACH DATABASE task");
    } catch (...) {  // keep the first error
    }
    throw;
  }
  db.exec("DETACH DATABASE task");
  return copied;
}

CollectReport collect_sweep(RunStore& store, const fs::path& dir_in,
                            const SlurmStateQuery& slurm_state, std::size_t log_lines) {
  const fs::path dir = fs::weakly_canonical(fs::absolute(dir_in));
  const json sweep = read_sweep(dir);
  CollectReport report;
  report.dir = dir;
  report.sweep = sweep.value("experiment", std::string("sweep"));
  const bool torch = sweep.value("kind", std::string()) == "torch";
  std::string job_id;
  if (const auto id = read_text(dir / "slurm_job_id"))
    job_id = tail_lines(*id, 1).substr(0, tail_lines(*id, 1).find_first_of(" \n"));
  Database& db = store.database();

  // The experiment an earlier collect of this folder made, else one made with the first task.
  {
    auto existing = db.prepare(
        "SELECT r.experiment_id FROM sweep_tasks s JOIN runs r ON r.id = s.run_id "
        "WHERE s.sweep_dir = ? AND r.experiment_id IS NOT NULL LIMIT 1");
    existing.bind_text(1, dir.string());
    if (existing.step())
      report.experiment = ExperimentId{existing.column_int(0)};
  }
  auto collected_runs = [&](int task) {
    auto query = db.prepare(
        "SELECT run_id FROM sweep_tasks WHERE sweep_dir = ? AND task = ? ORDER BY run_id");
    query.bind_text(1, dir.string()).bind_int(2, task);
    std::vector<RunId> runs;
    while (query.step())
      runs.push_back(RunId{query.column_int(0)});
    return runs;
  };

  for (const json& point : sweep["points"]) {
    TaskReport task;
    task.task = point.value("task", 0);
    task.point = point.value("name", std::string());
    const fs::path out = dir / "tasks" / std::to_string(task.task);
    if (const auto status = read_text(out / "exit_status")) {
      try {
        task.exit_status = std::stoi(*status);
      } catch (const std::exception&) {
      }
    }
    std::string task_job = job_id;
    if (const auto slurm = read_text(out / "slurm");
        slurm && !slurm->empty() && std::isdigit(static_cast<unsigned char>((*slurm)[0])))
      task_job = slurm->substr(0, slurm->find_first_of(" \n"));

    task.runs = collected_runs(task.task);
    const bool finished = fs::exists(out / "result.json") && fs::exists(out / "task.db") &&
                          task.exit_status.value_or(0) == 0;
    if (!task.runs.empty()) {
      task.state = TaskState::already_collected;
    } else if (finished) {
      if (!report.experiment) {
        json definition = json::object();
        if (const auto text = read_text(dir / "experiment.json")) {
          try {
            definition = json::parse(*text);
          } catch (const json::parse_error&) {
          }
        }
        // Incomplete until every task's runs are in: a `run` task stores its point's run, a
        // `torch-run` task the recording and its simulated twin (experiment_status.h).
        const std::uint64_t runs_per_task = torch ? 2 : 1;
        report.experiment =
            begin_experiment(store, report.sweep + (torch ? " (PyTorch, Slurm)" : " (Slurm)"),
                             definition, runs_per_task * sweep["points"].size());
      }
      task.runs =
          copy_runs(store, out / "task.db", report.experiment, [&](const std::vector<RunId>& runs) {
            auto mark = db.prepare(
                "INSERT INTO sweep_tasks(sweep_dir, task, run_id, collected_at) "
                "VALUES (?, ?, ?, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))");
            for (const RunId run : runs) {
              mark.bind_text(1, dir.string()).bind_int(2, task.task);
              mark.bind_int(3, run.value);
              mark.run();
              mark.reset();
            }
          });
      task.state = TaskState::collected;
    } else {
      task.slurm_state = slurm_state ? slurm_state(task_job, task.task) : std::string();
      if (task.exit_status && *task.exit_status != 0) {
        task.state = TaskState::failed;
      } else if (task.slurm_state.empty() || still_waiting(task.slurm_state)) {
        // Queued, running, or unknown to the scheduler we can reach (e.g. collect runs where
        // squeue does not): nothing says it failed.
        task.state = TaskState::waiting;
      } else {
        task.state = TaskState::failed;  // COMPLETED without a result, FAILED, TIMEOUT, ...
      }
      if (task.state == TaskState::failed) {
        const fs::path log = dir / "logs" / ("task-" + std::to_string(task.task) + ".out");
        const auto text = read_text(log);
        task.log_tail = text ? tail_lines(*text, log_lines) : "(no log at " + log.string() + ")\n";
      }
    }
    report.tasks.push_back(std::move(task));
  }
  if (report.experiment) {
    if (report.count(TaskState::collected) + report.count(TaskState::already_collected) ==
        report.tasks.size())
      finish_experiment(store, *report.experiment);
    report.progress = experiment_progress(store).at(*report.experiment);
  }
  return report;
}

json to_json(const CollectReport& report) {
  json tasks = json::array();
  for (const TaskReport& t : report.tasks) {
    json runs = json::array();
    for (const RunId run : t.runs)
      runs.push_back(run.value);
    json entry = {
        {"task", t.task}, {"point", t.point}, {"state", to_string(t.state)}, {"run_ids", runs}};
    if (!t.slurm_state.empty())
      entry["slurm_state"] = t.slurm_state;
    if (t.exit_status)
      entry["exit_status"] = *t.exit_status;
    if (t.state == TaskState::failed)
      entry["log_tail"] = t.log_tail;
    tasks.push_back(std::move(entry));
  }
  return {{"sweep", report.sweep},
          {"dir", report.dir.string()},
          {"experiment_id", report.experiment ? json(report.experiment->value) : json(nullptr)},
          {"experiment_complete", report.experiment && report.progress.complete},
          {"collected", report.count(TaskState::collected)},
          {"already_collected", report.count(TaskState::already_collected)},
          {"waiting", report.count(TaskState::waiting)},
          {"failed", report.count(TaskState::failed)},
          {"tasks", tasks}};
}

}  // namespace fragscope::storage

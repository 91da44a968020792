// The post-mortem of a simulated run that ran out of memory at capacity lists the program changes
// that could fit it (issue #17): a smaller micro-batch with accumulation, activation checkpointing
// and torch.compile, each row's figures from running that change, and each change as the
// experiment document that runs it (the GUI's "Open in Designer").
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/analysis/what_if.h"
#include "engine/workload/experiment.h"
#include "engine/workload/runner.h"
#include "storage/db/simulated_run.h"
#include "usecases/post_mortem.h"

namespace fragscope::usecases {
namespace {

// The recorder's GPT (eager attention with dropout, biases, no positions, no final LayerNorm,
// untied head), whose torch.compile(model) the workload model has Inductor's plans for, under
// `attention`, on a device of `capacity` bytes.
nlohmann::json small_gpt(const std::string& attention, Bytes capacity) {
  nlohmann::json document = nlohmann::json::parse(R"({"name": "compile-row",
      "allocator": {"alloc_conf": ""},
      "model": {"kind": "gpt", "layers": 4, "hidden": 512, "heads": 8, "ffn_mult": 4,
                "vocab": 8192, "tied_embeddings": false, "bias": true, "dropout": 0.1,
                "residual_dropout": false, "positions": 0, "final_layernorm": false},
      "training": {"batch_size": 8, "steps": 2, "grad_accum": 1, "precision": "bf16-autocast",
                   "seq_len": {"kind": "fixed", "value": 512}, "checkpointing": "none",
                   "compile": false, "optimizer": "adamw"}})");
  document["model"]["attention"] = attention;
  document["device"] = {{"capacity_bytes", capacity}};
  return document;
}

struct StoredRun {
  storage::RunStore store{":memory:"};
  storage::RunId run;
};

// Stores the experiment's one point as the GUI's designer does (events recorded).
void store_point(StoredRun& stored, const nlohmann::json& document) {
  const workload::Experiment experiment = workload::parse_experiment(document, "test");
  ASSERT_EQ(experiment.points.size(), 1u);
  const storage::ExperimentId id =
      stored.store.create_experiment(experiment.name, experiment.definition);
  const workload::ExperimentPoint& point = experiment.points.front();
  stored.run =
      storage::store_simulated_run(stored.store, id, point, workload::run_point(point, true));
}

// The unconstrained run's peak allocated bytes: a device 3/4 of it runs out at capacity.
Bytes peak_allocated_of(const nlohmann::json& document) {
  const workload::Experiment experiment = workload::parse_experiment(document, "test");
  return workload::run_point(experiment.points.front(), false).peak_allocated;
}

const analysis::WhatIfRow* row_named(const analysis::WhatIfTable& table, const std::string& name) {
  const auto it = std::find_if(table.rows.begin(), table.rows.end(),
                               [&](const analysis::WhatIfRow& row) { return row.name == name; });
  return it == table.rows.end() ? nullptr : &*it;
}

// The row's figures are those of running its own document: the same outcome, peaks and ideal
// peak as workload::run_point of the point the document parses to, not the baseline's.
void expect_row_is_its_document(const StoredPostMortem& pm, const std::string& name,
                                const nlohmann::json& compile) {
  ASSERT_TRUE(pm.what_if.has_value()) << pm.what_if_error;
  const analysis::WhatIfRow* row = row_named(*pm.what_if, name);
  ASSERT_NE(row, nullptr) << "no \"" << name << "\" row";
  ASSERT_TRUE(row->error.empty()) << row->error;
  ASSERT_TRUE(pm.workload_changes.count(name)) << "no document for \"" << name << "\"";
  const nlohmann::json& document = pm.workload_changes.at(name);
  EXPECT_EQ(document["training"]["compile"], compile);
  const workload::Experiment experiment = workload::parse_experiment(document, name);
  ASSERT_EQ(experiment.points.size(), 1u);
  const workload::ExperimentPoint& point = experiment.points.front();
  EXPECT_TRUE(point.workload.training.compile.any());
  const workload::PointResult result = workload::run_point(point, false);
  EXPECT_EQ(row->ok, !result.oom);
  EXPECT_EQ(row->peak_allocated, result.peak_allocated);
  EXPECT_EQ(row->peak_reserved, result.peak_reserved);
  EXPECT_EQ(row->ideal_peak, analysis::ideal_peak(workload::generate(point.workload)));
  const analysis::WhatIfRow* baseline = pm.what_if->baseline();
  ASSERT_NE(baseline, nullptr);
  EXPECT_NE(row->ideal_peak, baseline->ideal_peak);
  EXPECT_LT(row->step_time_ratio, 1.0);  // compiled kernels are faster
}

TEST(WorkloadChanges, ACapacityOomListsTorchCompileOfTheWholeModelComputedByRunningIt) {
  const Bytes peak = peak_allocated_of(small_gpt("eager", 64ull << 30));
  StoredRun stored;
  store_point(stored, small_gpt("eager", peak / 4 * 3));
  const StoredPostMortem pm = post_mortem_of(stored.store, stored.run);
  ASSERT_FALSE(pm.post_mortems.empty());
  EXPECT_EQ(pm.post_mortems.front().cause, analysis::OomCause::capacity);
  for (const char* other : {"micro-batch 4 x accumulation 2", "activation checkpointing"})
    EXPECT_TRUE(pm.workload_changes.count(other)) << other;
  expect_row_is_its_document(pm, "torch.compile (whole model)", {{"scope", "model"}});
  EXPECT_FALSE(pm.workload_changes.count("torch.compile (LayerNorms, MLPs)"));
}

// SDPA attention has no recorded Inductor plan of the whole model: the row compiles the
// LayerNorms and MLPs (the case study's "compile": true).
TEST(WorkloadChanges, WithoutPlansOfTheWholeModelTheRowCompilesLayerNormsAndMlps) {
  const Bytes peak = peak_allocated_of(small_gpt("sdpa", 64ull << 30));
  StoredRun stored;
  store_point(stored, small_gpt("sdpa", peak / 4 * 3));
  const StoredPostMortem pm = post_mortem_of(stored.store, stored.run);
  ASSERT_FALSE(pm.post_mortems.empty());
  EXPECT_EQ(pm.post_mortems.front().cause, analysis::OomCause::capacity);
  expect_row_is_its_document(pm, "torch.compile (LayerNorms, MLPs)", true);
  EXPECT_FALSE(pm.workload_changes.count("torch.compile (whole model)"));
}

// A point compiled already gets no compile row; one checkpointed under torch.compile(model),
// which the model refuses, gets no checkpointing row instead of no table.
TEST(WorkloadChanges, AChangeThePointHasOrTheModelRefusesIsNoRow) {
  nlohmann::json document = small_gpt("eager", 64ull << 30);
  document["training"]["compile"] = {{"scope", "model"}};
  const workload::Experiment experiment = workload::parse_experiment(document, "test");
  std::vector<std::string> refused;
  const auto changes = analysis::program_changes(experiment.points.front(), &refused);
  std::vector<std::string> names;
  for (const analysis::ProgramChange& change : changes)
    names.push_back(change.name);
  EXPECT_EQ(names, std::vector<std::string>{"micro-batch 4 x accumulation 2"});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused.front().find("activation checkpointing"), std::string::npos) << refused.front();
}

}  // namespace
}  // namespace fragscope::usecases

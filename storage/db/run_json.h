#pragma once
// JSON forms of stored records, shared by the CLI's --json output and the GUI's exports, so both
// spell every field the same way.
#include <nlohmann/json.hpp>

#include "storage/db/run_store.h"

namespace fragscope::storage {

// {"id","experiment_id","name","source","status","alloc_conf","capacity","device_name",
//  "created_at","wall_seconds","environment":{...},"twin_run","event_count","summary"}
nlohmann::json to_json(const RunRecord& run);
// {"first_event","end_event","t0","t1","allocated_max","allocated_min","reserved_max",
//  "reserved_min","active_max","active_min","requested_max","requested_min"}
nlohmann::json to_json(const TimelineBucket& bucket);

}  // namespace fragscope::storage

#pragma once
// A list of run ids as a user types it ("3,7" or "3, 7, 12"), read once for every front-end:
// `fragscope-cli compare --runs` and the GUI's --run / --runs / --compare.
#include <string_view>
#include <vector>

#include "storage/db/run_store.h"

namespace fragscope::storage {

// Positive integers separated by commas, spaces around each allowed. Anything else (an empty
// item, a word, 0, a sign, a number past int64) is an InputError quoting the item; an empty list
// is one too.
std::vector<RunId> parse_run_list(std::string_view text);

}  // namespace fragscope::storage

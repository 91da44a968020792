#include "engine/allocator/profile_choice.h"

namespace fragscope::alloc {

std::string_view to_string(ProfileSource source) {
  switch (source) {
    case ProfileSource::snapshot_format:
      return "snapshot format";
    case ProfileSource::user:
      return "--torch-version";
    case ProfileSource::assumed:
      return "assumed";
  }
  return "assumed";
}

std::string ProfileChoice::describe() const {
  const std::string rules = "PyTorch " + version.to_string() + "'s allocator rules";
  switch (source) {
    case ProfileSource::user:
      return rules + " (given with --torch-version" +
             (evidence.empty() ? std::string() : "; " + evidence) + ")";
    case ProfileSource::snapshot_format: {
      const bool one_release = range == version.to_string();
      return rules + " (the snapshot's format " + (one_release ? "is " : "fits ") + range +
             (evidence.empty() ? std::string() : ": " + evidence) +
             (one_release ? std::string() : "; the newest of them assumed") + ")";
    }
    case ProfileSource::assumed:
      break;
  }
  return rules + " (assumed: " + (evidence.empty() ? "nothing says which release" : evidence) + ")";
}

}  // namespace fragscope::alloc

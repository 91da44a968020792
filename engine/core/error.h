#pragma once
// Errors on bad input name the file, the place and what was expected. One exception type carries
// that, so the CLI can print one line and exit 2, and the GUI can show it in a dialog.
#include <stdexcept>
#include <string>

namespace fragscope {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace fragscope

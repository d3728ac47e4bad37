// Fuzzes Layout::from_string. Property: whatever parses prints to a text that parses back to the
// same layout and prints the same.
#include <string>

#include "fuzz/harness.h"
#include "layout/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtensor;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::accept_dtensor_errors([&] {
    const Layout layout = Layout::from_string(text);
    const std::string printed = layout.to_string();
    Layout back = layout;
    try {
      back = Layout::from_string(printed);
    } catch (const Error& e) {
      fuzz::finding("the printed form '" + printed + "' does not parse: " + e.what());
    }
    if (back != layout || back.to_string() != printed) {
      fuzz::finding("'" + printed + "' parses to a different layout: '" + back.to_string() + "'");
    }
  });
  return 0;
}

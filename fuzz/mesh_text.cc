// Fuzzes Mesh::from_string. Property: whatever parses prints to a text that parses back to the
// same mesh and prints the same (the textual form round-trips, as error messages rely on).
#include <string>

#include "fuzz/harness.h"
#include "mesh/mesh.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dtensor;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::accept_dtensor_errors([&] {
    const Mesh mesh = Mesh::from_string(text);
    const std::string printed = mesh.to_string();
    Mesh back = mesh;
    try {
      back = Mesh::from_string(printed);
    } catch (const Error& e) {
      fuzz::finding("the printed form '" + printed + "' does not parse: " + e.what());
    }
    if (back != mesh || back.to_string() != printed) {
      fuzz::finding("'" + printed + "' parses to a different mesh: '" + back.to_string() + "'");
    }
  });
  return 0;
}

#include "train/capture/collective_summary.h"

#include <algorithm>
#include <tuple>

#include "fmt/format.h"

namespace dtensor {

CollectiveSummary CollectiveSummary::of(const std::vector<CollectiveRecord>& records) {
  CollectiveSummary s;
  for (const CollectiveRecord& r : records) {
    auto it = std::find_if(s.rows.begin(), s.rows.end(), [&](const Row& row) {
      return row.kind == r.kind && row.dims == r.dims;
    });
    if (it == s.rows.end()) it = s.rows.insert(s.rows.end(), Row{r.kind, r.dims, 0, 0});
    ++it->calls;
    it->bytes += r.bytes;
  }
  std::sort(s.rows.begin(), s.rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.kind, a.dims) < std::tie(b.kind, b.dims);
  });
  return s;
}

int64_t CollectiveSummary::calls(CollectiveKind kind, const std::string& dims) const {
  for (const Row& r : rows) {
    if (r.kind == kind && r.dims == dims) return r.calls;
  }
  return 0;
}

int64_t CollectiveSummary::bytes(CollectiveKind kind, const std::string& dims) const {
  for (const Row& r : rows) {
    if (r.kind == kind && r.dims == dims) return r.bytes;
  }
  return 0;
}

int64_t CollectiveSummary::total_calls() const {
  int64_t n = 0;
  for (const Row& r : rows) n += r.calls;
  return n;
}

int64_t CollectiveSummary::total_bytes() const {
  int64_t n = 0;
  for (const Row& r : rows) n += r.bytes;
  return n;
}

std::string CollectiveSummary::to_string() const {
  std::string s;
  for (const Row& r : rows) {
    s += fmt::format("{} over {}: {} calls, {} bytes\n", collective_kind_name(r.kind), r.dims,
                     r.calls, r.bytes);
  }
  return s + fmt::format("total: {} calls, {} bytes\n", total_calls(), total_bytes());
}

}  // namespace dtensor

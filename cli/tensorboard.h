// Scalars in TensorBoard's event-file format, for `tensorboard --logdir <dir>`.
//
//   cli::EventWriter events("/tmp/logs/run1");     // writes events.out.tfevents.<time>.<host>
//   events.scalar("loss/train", 0.31, /*step=*/1);
//
// The file is a sequence of TFRecords (length, masked CRC-32C of the length, an Event proto,
// masked CRC-32C of it), the first Event holding file_version "brain.Event:2". Each scalar is an
// Event with a Summary value (tag, simple_value) at its step and wall time. Records are flushed
// as they are written, so TensorBoard sees them during training.
//
// Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dtensor::cli {

class EventWriter {
 public:
  // Creates `dir` if needed and a new event file in it; IoError if either cannot be written.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

struct ScalarEvent {
  std::string tag;
  float value = 0;
  int64_t step = 0;
  double wall_time = 0;
};

// Reads an event file back, checking every record's framing and both CRCs; returns its
// scalars in order and the file_version in `version`. IoError naming the path and the offset of
// a truncated or corrupt record.
std::vector<ScalarEvent> read_scalar_events(const std::string& path,
                                            std::string* version = nullptr);

// TFRecord's masked CRC-32C: rotated right by 15 bits plus 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

}  // namespace dtensor::cli

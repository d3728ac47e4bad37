#include "cli/tensorboard.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli/event.pb.h"
#include "runtime/crc32c.h"
#include "runtime/error.h"

namespace dtensor::cli {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

template <typename T>
void append_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <typename T>
T read_le(const char* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = checkpoint_internal::crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_error<IoError>("EventWriter", "cannot create folder '{}': {}", dir, ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) +
          "." + host + "." + std::to_string(getpid());
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    throw_error<IoError>("EventWriter", "cannot write '{}': {}", path_, std::strerror(errno));
  }
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_file_version("brain.Event:2");
  write_record(event.SerializeAsString());
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventWriter::scalar(const std::string& tag, double value, int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_record(event.SerializeAsString());
}

void EventWriter::write_record(const std::string& data) {
  std::string record;
  append_le<uint64_t>(record, data.size());
  append_le<uint32_t>(record, masked_crc32c(record.data(), 8));
  record += data;
  append_le<uint32_t>(record, masked_crc32c(data.data(), data.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    throw_error<IoError>("EventWriter", "cannot write '{}': {}", path_, std::strerror(errno));
  }
}

std::vector<ScalarEvent> read_scalar_events(const std::string& path, std::string* version) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error<IoError>("read_scalar_events", "cannot read '{}'", path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<ScalarEvent> out;
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 12) {
      throw_error<IoError>("read_scalar_events", "'{}': truncated record header at offset {}", path,
                           pos);
    }
    const uint64_t length = read_le<uint64_t>(&bytes[pos]);
    if (read_le<uint32_t>(&bytes[pos + 8]) != masked_crc32c(&bytes[pos], 8)) {
      throw_error<IoError>("read_scalar_events", "'{}': bad length CRC at offset {}", path, pos);
    }
    if (bytes.size() - pos - 12 < length + 4) {
      throw_error<IoError>("read_scalar_events", "'{}': truncated record at offset {}", path, pos);
    }
    const char* data = &bytes[pos + 12];
    if (read_le<uint32_t>(data + length) != masked_crc32c(data, length)) {
      throw_error<IoError>("read_scalar_events", "'{}': bad data CRC at offset {}", path, pos);
    }
    tensorboard::Event event;
    if (!event.ParseFromArray(data, static_cast<int>(length))) {
      throw_error<IoError>("read_scalar_events", "'{}': no Event proto at offset {}", path, pos);
    }
    if (event.has_file_version() && version != nullptr) *version = event.file_version();
    for (const auto& v : event.summary().value()) {
      out.push_back({v.tag(), v.simple_value(), event.step(), event.wall_time()});
    }
    pos += 12 + length + 4;
  }
  return out;
}

}  // namespace dtensor::cli

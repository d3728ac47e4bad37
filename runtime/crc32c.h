// CRC-32C (Castagnoli, the iSCSI / ext4 / Google crc32c checksum): the checksum of checkpoint
// files.
//
// Standard parameters: reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF,
// so crc32c("123456789") == 0xE3069283 and Python's `crc32c.crc32c(data)` (or google_crc32c)
// gives the same values. On x86-64 with SSE4.2 the CPU's crc32 instruction runs three independent
// streams at once (about 20 GB/s per core); elsewhere a table-driven loop (slicing by 8).
//
// Pure functions: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtensor::checkpoint_internal {

// The CRC of the bytes whose CRC is `crc` followed by `data[0, n)`; extend(0, ...) starts afresh,
// so crc32c_extend(crc32c(a), b) == crc32c(a || b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// crc32c(a || b) from crc32c(a), crc32c(b) and the length of b, without the bytes.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

// The portable implementation, exposed so that tests can compare it with the hardware one.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);

}  // namespace dtensor::checkpoint_internal

// Philox4x32-10 as a host-and-device function: the same rounds and constants as the CPU's
// (runtime/cpu/random.cc; Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), so
// that the CUDA fills draw the CPU's bits. random_test-style checks compare the two on the host
// (philox_test.cc runs this header's host version against kernels::philox4x32_10).
#pragma once

#include <cstdint>

#include "kernels/cuda/strided_index.h"  // DTENSOR_HOST_DEVICE

namespace dtensor::kernels::cuda_launch {

struct PhiloxBlock {
  uint32_t v[4];
};
struct PhiloxKey {
  uint32_t k[2];
};

DTENSOR_HOST_DEVICE inline PhiloxBlock philox4x32_10(PhiloxBlock c, PhiloxKey key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = key.k[0], k1 = key.k[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kM0} * c.v[0];
    const uint64_t p1 = uint64_t{kM1} * c.v[2];
    c = PhiloxBlock{{static_cast<uint32_t>(p1 >> 32) ^ c.v[1] ^ k0, static_cast<uint32_t>(p1),
                     static_cast<uint32_t>(p0 >> 32) ^ c.v[3] ^ k1, static_cast<uint32_t>(p0)}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

}  // namespace dtensor::kernels::cuda_launch

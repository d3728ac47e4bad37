#include "runtime/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace dtensor::checkpoint_internal {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli, reflected

// Polynomials over GF(2) modulo kPoly, reflected: bit 31 is x^0, bit 0 is x^31.
uint32_t multiply_mod_poly(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> slice;  // slicing-by-8
  std::array<uint32_t, 64> x_pow_2k;               // x^(2^k) mod P

  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t r = i;
      for (int k = 0; k < 8; ++k) r = (r & 1) ? (r >> 1) ^ kPoly : r >> 1;
      slice[0][i] = r;
    }
    for (int t = 1; t < 8; ++t) {
      for (int i = 0; i < 256; ++i) {
        uint32_t prev = slice[t - 1][i];
        slice[t][i] = (prev >> 8) ^ slice[0][prev & 0xff];
      }
    }
    x_pow_2k[0] = 1u << 30;  // x^1
    for (size_t k = 1; k < x_pow_2k.size(); ++k) {
      x_pow_2k[k] = multiply_mod_poly(x_pow_2k[k - 1], x_pow_2k[k - 1]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

// x^(8 * n) mod P: the operator that moves a CRC register past n zero bytes.
uint32_t shift_operator(uint64_t n) {
  const Tables& t = tables();
  uint32_t p = 1u << 31;  // x^0
  for (size_t k = 3; n != 0; n >>= 1, ++k) {
    if (n & 1) p = multiply_mod_poly(t.x_pow_2k[k], p);
  }
  return p;
}

// The raw register (no pre/post inversion) after `data`, slicing by 8.
uint32_t extend_raw_portable(uint32_t r, const uint8_t* p, size_t n) {
  const auto& s = tables().slice;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    if constexpr (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__) {
      lo = __builtin_bswap32(lo);
      hi = __builtin_bswap32(hi);
    }
    lo ^= r;
    r = s[7][lo & 0xff] ^ s[6][(lo >> 8) & 0xff] ^ s[5][(lo >> 16) & 0xff] ^ s[4][lo >> 24] ^
        s[3][hi & 0xff] ^ s[2][(hi >> 8) & 0xff] ^ s[1][(hi >> 16) & 0xff] ^ s[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) r = (r >> 8) ^ s[0][(r ^ *p++) & 0xff];
  return r;
}

#if defined(__x86_64__)

// Three streams of kStride bytes run at once (the crc32 instruction has a latency of three
// cycles and a throughput of one), then are joined: reg(a||b) = shift(reg(a), |b|) ^ reg0(b).
constexpr size_t kStride = 8192;

// Shifting a register by kStride bytes is linear in its bits: four byte-indexed tables.
struct StrideShift {
  std::array<std::array<uint32_t, 256>, 4> t;
  StrideShift() {
    const uint32_t op = shift_operator(kStride);
    for (int b = 0; b < 4; ++b) {
      for (uint32_t i = 0; i < 256; ++i) t[b][i] = multiply_mod_poly(op, i << (8 * b));
    }
  }
  uint32_t operator()(uint32_t r) const {
    return t[0][r & 0xff] ^ t[1][(r >> 8) & 0xff] ^ t[2][(r >> 16) & 0xff] ^ t[3][r >> 24];
  }
};

const StrideShift& stride_shift() {
  static const StrideShift s;
  return s;
}

__attribute__((target("sse4.2"))) uint32_t extend_raw_sse42(uint32_t r32, const uint8_t* p,
                                                            size_t n) {
  uint64_t r = r32;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    r = _mm_crc32_u8(static_cast<uint32_t>(r), *p++);
    --n;
  }
  if (n >= 3 * kStride) {
    const StrideShift& shift = stride_shift();
    do {
      uint64_t r1 = 0, r2 = 0;
      const uint8_t* p1 = p + kStride;
      const uint8_t* p2 = p + 2 * kStride;
      for (size_t i = 0; i < kStride; i += 8) {
        uint64_t w0, w1, w2;
        std::memcpy(&w0, p + i, 8);
        std::memcpy(&w1, p1 + i, 8);
        std::memcpy(&w2, p2 + i, 8);
        r = _mm_crc32_u64(r, w0);
        r1 = _mm_crc32_u64(r1, w1);
        r2 = _mm_crc32_u64(r2, w2);
      }
      uint32_t joined = shift(static_cast<uint32_t>(r)) ^ static_cast<uint32_t>(r1);
      r = shift(joined) ^ static_cast<uint32_t>(r2);
      p += 3 * kStride;
      n -= 3 * kStride;
    } while (n >= 3 * kStride);
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    r = _mm_crc32_u64(r, w);
    p += 8;
    n -= 8;
  }
  while (n-- > 0) r = _mm_crc32_u8(static_cast<uint32_t>(r), *p++);
  return static_cast<uint32_t>(r);
}

bool have_sse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}

#endif

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n) {
  return ~extend_raw_portable(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (have_sse42()) return ~extend_raw_sse42(~crc, static_cast<const uint8_t*>(data), n);
#endif
  return crc32c_extend_portable(crc, data, n);
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
  return multiply_mod_poly(shift_operator(length_b), crc_a) ^ crc_b;
}

}  // namespace dtensor::checkpoint_internal

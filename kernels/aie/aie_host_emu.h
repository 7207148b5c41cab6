// Host emulation of the AIE2P vector types and intrinsics that xcorr.cc uses, so the very same
// kernel source compiles with g++ and runs under test on x86 (docs/design.md, "NPU dataflow plan").
//
// Only what the kernel uses is provided, with the semantics of llvm-aie's aie2p headers as
// recorded in the published design's sources:
//   v64int8 / v64acc32      64 lanes of int8 / int32 (one 8x8 block, row-major)
//   v64acc32 x = {}         zero
//   *p, *p++, p[i] = v      512-bit loads and stores (plain copies here)
//   mac_8x8_8x8(A, B, acc)  acc[i*8+j] += sum_k A[i*8+k] * B[k*8+j]   (int8 x int8 -> int32)
//   msc_8x8_8x8(A, B, acc)  acc[i*8+j] -= sum_k A[i*8+k] * B[k*8+j]
//   shuffle(w, w, T8_8x8)   out[r*8+c] = w[c*8+r]   (8x8 int8 transpose; T8_8x8 == 35)
//   event0(), event1()      trace markers; counted here so a test can see them
// and, for the ci4 entry points:
//   v64int4                 64 lanes of int4 in 32 bytes (256 bits), *p / *p++ 256-bit loads
//   unpack(v64int4)         -> v64int8, each lane sign-extended (the signed overload: llvm-aie
//                           clang/lib/Headers/aie2p/aie2p_ldst.h, `v64int8 unpack(v64int4 v)
//                           { return unpack(v, __SIGN_SIGNED); }`; AI Engine-ML Intrinsics
//                           User Guide UG1583, "Pack/Unpack"). Lane i is bits 4i..4i+3 of the
//                           256-bit value, so byte k holds lane 2k in its low nibble and lane
//                           2k+1 in its high one: LLVM's layout of a vector of i4 on a
//                           little-endian target, which llvm-aie lowers this type to.
//   shuffle(a, b, T8_64x2_lo / T8_64x2_hi)
//                           the 128 int8 lanes of a then b seen as a 64 x 2 matrix, transposed
//                           to 2 x 64: _lo is its first row (lanes 0, 2, ..., 126), _hi the
//                           second (1, 3, ..., 127): UG1583, "Shuffle", the 8-bit 64x2 -> 2x64
//                           deinterleave ("extract low" / "extract high"); mode values 0 and 1
//                           from llvm-aie aie2p_enums.h (also named DINTLV_lo_8o16 / _hi_8o16).
// Anything else aborts: an emulation that silently guessed would make the tests meaningless.
//
// Accumulation wraps modulo 2^32 like the hardware's 32-bit accumulator lanes (computed in
// uint32_t so that wrapping is defined behaviour in C++); the geometry's P bound keeps every
// real sum exact, so wrapping never happens for legal inputs.

#ifndef XCORR_AIE_HOST_EMU_H
#define XCORR_AIE_HOST_EMU_H

#include <cstdint>
#include <cstdlib>
#include <cstring>

struct v64int8 {
  int8_t lane[64];
};

struct v64acc32 {
  int32_t lane[64];
};

struct v64int4 {
  uint8_t byte[32];  // lane 2k: low nibble of byte k; lane 2k + 1: its high nibble
};

// Shuffle modes the kernel uses (their values in the aie2p headers).
enum aie_host_shuffle_mode : unsigned { T8_64x2_lo = 0, T8_64x2_hi = 1, T8_8x8 = 35 };

// Trace-marker counts (event0, event1), readable through the kernel's host-only C ABI.
inline unsigned long long aie_host_event_count[2] = {0, 0};

static inline void event0() { ++aie_host_event_count[0]; }
static inline void event1() { ++aie_host_event_count[1]; }

static inline v64int8 shuffle(v64int8 a, v64int8 b, unsigned mode) {
  v64int8 out;
  if (mode == T8_64x2_lo || mode == T8_64x2_hi) {
    const unsigned first = mode == T8_64x2_hi ? 1 : 0;
    for (unsigned i = 0; i < 64; ++i) {
      const unsigned lane = 2 * i + first;  // of the 128 lanes a[0..63], b[0..63]
      out.lane[i] = lane < 64 ? a.lane[lane] : b.lane[lane - 64];
    }
    return out;
  }
  // T8_8x8 is used only to transpose one block with itself, shuffle(w, w, T8_8x8); how it
  // reads a second, different operand is not modelled here.
  if (mode != T8_8x8 || std::memcmp(a.lane, b.lane, sizeof a.lane) != 0) {
    std::abort();
  }
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 8; ++c) {
      out.lane[r * 8 + c] = a.lane[c * 8 + r];
    }
  }
  return out;
}

static inline v64int8 unpack(v64int4 v) {
  v64int8 out;
  for (int i = 0; i < 64; ++i) {
    const int nibble = (v.byte[i / 2] >> (4 * (i % 2))) & 0xF;
    out.lane[i] = static_cast<int8_t>(nibble >= 8 ? nibble - 16 : nibble);
  }
  return out;
}

static inline v64acc32 aie_host_matmul_8x8(v64int8 a, v64int8 b, v64acc32 acc, bool subtract) {
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      uint32_t sum = 0;
      for (int k = 0; k < 8; ++k) {
        sum += static_cast<uint32_t>(int32_t(a.lane[i * 8 + k]) * int32_t(b.lane[k * 8 + j]));
      }
      uint32_t lane = static_cast<uint32_t>(acc.lane[i * 8 + j]);
      lane = subtract ? lane - sum : lane + sum;
      acc.lane[i * 8 + j] = static_cast<int32_t>(lane);
    }
  }
  return acc;
}

static inline v64acc32 mac_8x8_8x8(v64int8 a, v64int8 b, v64acc32 acc) {
  return aie_host_matmul_8x8(a, b, acc, false);
}

static inline v64acc32 msc_8x8_8x8(v64int8 a, v64int8 b, v64acc32 acc) {
  return aie_host_matmul_8x8(a, b, acc, true);
}

#endif  // XCORR_AIE_HOST_EMU_H

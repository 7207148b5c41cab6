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

// Shuffle modes: only the 8x8 int8 transpose exists here (its value in the aie2p headers).
enum aie_host_shuffle_mode : unsigned { T8_8x8 = 35 };

// Trace-marker counts (event0, event1), readable through the kernel's host-only C ABI.
inline unsigned long long aie_host_event_count[2] = {0, 0};

static inline void event0() { ++aie_host_event_count[0]; }
static inline void event1() { ++aie_host_event_count[1]; }

static inline v64int8 shuffle(v64int8 a, v64int8 b, unsigned mode) {
  // The kernel only transposes one block with itself: shuffle(w, w, T8_8x8). A two-operand
  // shuffle would read lanes of both inputs, which this header does not model.
  if (mode != T8_8x8 || std::memcmp(a.lane, b.lane, sizeof a.lane) != 0) {
    std::abort();
  }
  v64int8 out;
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 8; ++c) {
      out.lane[r * 8 + c] = a.lane[c * 8 + r];
    }
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

// X-engine compute-tile kernel for AIE2P: C += A * B^H on complex int8, exact int32 sums.
//
// One call correlates 8T samples of 8N "A" streams with 8T samples of 8M "B" streams:
//   a   : N x T x 2 x 8 x 8 int8      (stream block, sample block, re/im, [stream][sample])
//   b   : M x T x 2 x 8 x 8 int8      (same layout)
//   acc : N x M x 2 x 8 x 8 int32     (A block, B block, re/im, [A stream][B stream])
// For a = z and b = w: re += z_re w_re^T + z_im w_im^T, im += z_im w_re^T - z_re w_im^T,
// i.e. K[j,k] += x_j conj(x_k) (docs/design.md, "Sign and conjugation"). mac_8x8_8x8 multiplies [stream][sample]
// by [sample][stream], so each B block is transposed in-register by shuffle(w, w, T8_8x8); the
// shuffle issues on a different unit than the MACs and costs no cycles in the inner loop.
//
// Why two rows of A per iteration: with one row the loop has 4 loads for 4 MACs and the
// compiler cannot keep one MAC per cycle; with two rows it is 6 loads for 8 MAC/MSC, the loads
// fit the slots beside the MACs and at most one 512-bit load issues per cycle (no bank
// conflicts between the two load units). Hence N must be even.
//
// ci4 (4-bit samples, one byte per complex sample, sent packed through every DMA):
//   a   : N x T x 8 x 8 bytes         (stream block, sample block, [stream][sample])
//   b   : M x T x 8 x 8 bytes
//   ua  : N x T x 2 x 8 x 8 int8      (a unpacked: the layout above)
//   ub  : M x T x 2 x 8 x 8 int8
// xcorr_kernel_ci4_re_high / _re_low first unpack a into ua and b into ub (the real part in the
// high / low nibble of each byte), then run the same MAC loop on them. Per 64-byte block: two
// unpack(v64int4) (32 bytes -> 64 sign-extended nibbles, the low nibble of byte k at element
// 2k), two shuffles that split even and odd elements (T8_64x2_lo / _hi) into the low-nibble and
// high-nibble planes, two 512-bit stores. Unpacking once per call, not in the MAC loop, keeps
// that loop as it is: in it every A block would be unpacked M times and every B block N/2 times.
//
// Build:
//   AIE2P : Peano clang++ --target=aie2p-none-unknown-elf -O2 -std=c++20 -I<mlir-aie include>
//           [-DN=8 -DM=4 -DT=15] -c xcorr.cc
//   host  : g++ -std=c++20 -O2 -DXCORR_HOST_EMU -I . [-DN=.. -DM=.. -DT=..]
//           -shared -fPIC xcorr.cc   (xengine_block/npu/host/hostkernel.py does this)
// The defaults are the published design (N=8, M=4, T=15).

// Capture the dimension macros before any header is included: a macro literally named N, M or
// T would otherwise rewrite template parameters of the same name inside the toolchain headers.
#ifdef N
static constexpr int kXcorrN = N;
#undef N
#else
static constexpr int kXcorrN = 8;
#endif
#ifdef M
static constexpr int kXcorrM = M;
#undef M
#else
static constexpr int kXcorrM = 4;
#endif
#ifdef T
static constexpr int kXcorrT = T;
#undef T
#else
static constexpr int kXcorrT = 15;
#endif

#if defined(XCORR_HOST_EMU)
#include "aie_host_emu.h"
#elif defined(__AIE_ARCH__)
#include <aie_api/aie.hpp>
#else
#error "compile with Peano for AIE2P, or define XCORR_HOST_EMU to use aie_host_emu.h"
#endif

static_assert(kXcorrN > 0 && kXcorrM > 0 && kXcorrT > 0, "N, M, T must be positive");
static_assert(kXcorrN % 2 == 0, "N must be even: the kernel handles two rows of A at once");

template <int N, int M, int T>
  requires(N % 2 == 0)
static inline void xcorr_accumulate(const v64int8 *__restrict a, const v64int8 *__restrict b,
                                    v64acc32 *__restrict acc) {
  // Rows n and n+1 of A against every column m of B; acc advances in (re, im) pairs.
  for (int n = 0; n < N; n += 2) {
    const v64int8 *__restrict pb = b;
    v64acc32 *__restrict row0 = acc + (n * M) * 2;
    v64acc32 *__restrict row1 = row0 + 2 * M;
    for (int m = 0; m < M; ++m) {
      v64acc32 re0 = row0[2 * m];
      v64acc32 im0 = row0[2 * m + 1];
      v64acc32 re1 = row1[2 * m];
      v64acc32 im1 = row1[2 * m + 1];
      const v64int8 *__restrict pa0 = a + n * 2 * T;
      const v64int8 *__restrict pa1 = pa0 + 2 * T;
      for (int t = 0; t < T; ++t) {
        v64int8 z0_re = *pa0++;
        v64int8 z0_im = *pa0++;
        v64int8 z1_re = *pa1++;
        v64int8 z1_im = *pa1++;
        v64int8 w_re = *pb++;
        v64int8 w_im = *pb++;
        w_re = shuffle(w_re, w_re, T8_8x8);  // [stream][sample] -> [sample][stream]
        w_im = shuffle(w_im, w_im, T8_8x8);
        re0 = mac_8x8_8x8(z0_im, w_im, mac_8x8_8x8(z0_re, w_re, re0));
        im0 = mac_8x8_8x8(z0_im, w_re, msc_8x8_8x8(z0_re, w_im, im0));
        re1 = mac_8x8_8x8(z1_im, w_im, mac_8x8_8x8(z1_re, w_re, re1));
        im1 = mac_8x8_8x8(z1_im, w_re, msc_8x8_8x8(z1_re, w_im, im1));
      }
      row0[2 * m] = re0;
      row0[2 * m + 1] = im0;
      row1[2 * m] = re1;
      row1[2 * m + 1] = im1;
    }
  }
}

// The MAC loop once in the object, whichever entry points call it (program memory is 16 KiB).
__attribute__((noinline)) static void xcorr_mac(const v64int8 *__restrict a,
                                                const v64int8 *__restrict b,
                                                v64acc32 *__restrict acc) {
  xcorr_accumulate<kXcorrN, kXcorrM, kXcorrT>(a, b, acc);
}

// NB ci4 blocks of 64 bytes -> NB (re, im) pairs of int8 blocks. kReHigh: the real part is the
// high nibble. Element i of unpack(v64int4) is nibble i of the 32 bytes, low nibble first, so
// even elements are low nibbles and odd elements high ones, in sample order.
template <int NB, bool kReHigh>
static inline void xcorr_unpack_ci4(const v64int4 *__restrict src, v64int8 *__restrict dst) {
  for (int i = 0; i < NB; ++i) {
    v64int8 u0 = unpack(*src++);  // samples 0..31 of the block: (low, high) nibble pairs
    v64int8 u1 = unpack(*src++);  // samples 32..63
    v64int8 low = shuffle(u0, u1, T8_64x2_lo);
    v64int8 high = shuffle(u0, u1, T8_64x2_hi);
    *dst++ = kReHigh ? high : low;  // real parts
    *dst++ = kReHigh ? low : high;  // imaginary parts
  }
}

template <bool kReHigh>
static inline void xcorr_ci4(const v64int4 *__restrict a, const v64int4 *__restrict b,
                             v64acc32 *__restrict acc, v64int8 *__restrict ua,
                             v64int8 *__restrict ub) {
  event0();
  xcorr_unpack_ci4<kXcorrN * kXcorrT, kReHigh>(a, ua);
  xcorr_unpack_ci4<kXcorrM * kXcorrT, kReHigh>(b, ub);
  xcorr_mac(ua, ub, acc);
  event1();
}

template <int N, int M>
static inline void xcorr_zero(v64acc32 *__restrict acc) {
  for (int i = 0; i < 2 * N * M; ++i) {  // 2: re and im blocks
    *acc++ = {};
  }
}

extern "C" {

// Entry points named in the NPU plan (xengine_block/npu/design/plan.py: KERNEL_FUNC, KERNEL_FUNC_CI4,
// ZERO_FUNC).
void xcorr_kernel(v64int8 *__restrict a, v64int8 *__restrict b, v64acc32 *__restrict acc) {
  event0();
  xcorr_mac(a, b, acc);
  event1();
}

void xcorr_kernel_ci4_re_high(v64int4 *__restrict a, v64int4 *__restrict b,
                              v64acc32 *__restrict acc, v64int8 *__restrict ua,
                              v64int8 *__restrict ub) {
  xcorr_ci4<true>(a, b, acc, ua, ub);
}

void xcorr_kernel_ci4_re_low(v64int4 *__restrict a, v64int4 *__restrict b,
                             v64acc32 *__restrict acc, v64int8 *__restrict ua,
                             v64int8 *__restrict ub) {
  xcorr_ci4<false>(a, b, acc, ua, ub);
}

void xcorr_acc_zero(v64acc32 *__restrict acc) { xcorr_zero<kXcorrN, kXcorrM>(acc); }

#if defined(XCORR_HOST_EMU)
// Host-only helpers for the ctypes wrapper: the compiled dimensions and trace-marker counts.
void xcorr_host_dims(int *n, int *m, int *t) {
  *n = kXcorrN;
  *m = kXcorrM;
  *t = kXcorrT;
}

void xcorr_host_events(unsigned long long *e0, unsigned long long *e1) {
  *e0 = aie_host_event_count[0];
  *e1 = aie_host_event_count[1];
}
#endif

}  // extern "C"

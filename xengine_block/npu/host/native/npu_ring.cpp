// C interface of the native NPU ring (npu_ring.hpp) for ctypes, over XRT's C++ API or, with
// -DNPU_RING_FAKE, over a fake device used by the tests (xengine_block/npu/nativering.py).
//
// The XRT calls are those of mlir-aie's host test programs: xrt::device(index),
// xrt::xclbin(path), device.register_xclbin, xrt::hw_context(device, uuid),
// xrt::kernel(context, name), xrt::bo(device, size, flags, kernel.group_id(k)),
// bo.map<T*>(), bo.sync(XCL_BO_SYNC_BO_TO_DEVICE / _FROM_DEVICE),
// kernel(opcode 3, instr_bo, n_words, a, b, out) -> xrt::run, run.state().
// NOT VERIFIED: no XRT was available where this was written; only the fake build was compiled
// and tested.
#include "npu_ring.hpp"

#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>

#ifdef NPU_RING_FAKE
#include <atomic>
#include <cstdlib>

namespace {
// A fake device: one device thread per run (runs are serialised by the ring), modelled times,
// and a "kernel" whose output is checkable: out[0] = sum of A as int8, out[1] = sum of B,
// out[2] = run number. Configured by the xclbin argument: "kernel_us=N,sync_us=N,hang=0|1".
struct FakeApi {
  struct Bo {
    std::shared_ptr<std::vector<uint8_t>> host, dev;
  };
  struct RunState {
    std::atomic<int> state{0};
  };
  struct Run {
    std::shared_ptr<RunState> s;
  };
  // What a run thread touches: shared, so a run the ring gave up on stays harmless.
  struct Device {
    unsigned kernel_us = 0;
    bool hang = false;
    std::vector<uint8_t> out_dev;
    std::atomic<int> running{0};
    std::atomic<long> runs{0};
  };

  std::shared_ptr<Device> dev = std::make_shared<Device>();
  unsigned sync_us = 0;
  size_t nout;
  std::vector<uint8_t> out_host;
  std::atomic<long> syncs{0}, syncs_during_run{0};

  FakeApi(const std::string &config, size_t out_bytes) : nout(out_bytes), out_host(out_bytes) {
    int hang = 0;
    std::sscanf(config.c_str(), "kernel_us=%u,sync_us=%u,hang=%d", &dev->kernel_us, &sync_us,
                &hang);
    dev->hang = hang != 0;
    dev->out_dev.resize(out_bytes);
  }

  Bo alloc_input(size_t n) {
    return {std::make_shared<std::vector<uint8_t>>(n), std::make_shared<std::vector<uint8_t>>(n)};
  }
  uint8_t *map(Bo &b) { return b.host->data(); }
  void sync_to_device(Bo &b) {
    if (dev->running.load())
      ++syncs_during_run;
    std::this_thread::sleep_for(std::chrono::microseconds(sync_us));
    *b.dev = *b.host;
    ++syncs;
  }
  Run start(Bo &a, Bo &b) {
    Run r{std::make_shared<RunState>()};
    auto s = r.s;
    auto d = dev;
    auto da = a.dev, db = b.dev;
    long n = ++d->runs;
    d->running.fetch_add(1);
    std::thread([s, d, da, db, n] {
      std::this_thread::sleep_for(std::chrono::microseconds(d->kernel_us));
      if (d->hang)
        return; // never completes ("running" stays raised)
      int32_t sums[3] = {0, 0, static_cast<int32_t>(n)};
      for (uint8_t x : *da)
        sums[0] += static_cast<int8_t>(x);
      for (uint8_t x : *db)
        sums[1] += static_cast<int8_t>(x);
      std::memcpy(d->out_dev.data(), sums, std::min(sizeof sums, d->out_dev.size()));
      d->running.fetch_sub(1);
      s->state = 1;
    }).detach();
    return r;
  }
  int poll(Run &r) { return r.s->state.load(); }
  std::string state_text(Run &r) { return r.s->state.load() ? "COMPLETED" : "SUBMITTED"; }
  void sync_out() { out_host = dev->out_dev; }
  const uint8_t *out_map() { return out_host.data(); }
  size_t out_bytes() { return nout; }
};
using Api = FakeApi;

Api *make_api(const char *xclbin, const char *, const char *, unsigned, size_t out_bytes) {
  return new FakeApi(xclbin, out_bytes);
}
} // namespace

#else
#include "xrt/xrt_bo.h"
#include "xrt/xrt_device.h"
#include "xrt/xrt_kernel.h"
#if __has_include("xrt/xrt_hw_context.h")
#include "xrt/xrt_hw_context.h"
#endif
#if __has_include("xrt/experimental/xrt_xclbin.h")
#include "xrt/experimental/xrt_xclbin.h"
#endif

namespace {
std::vector<char> read_insts(const char *path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty() || bytes.size() % 4)
    throw std::runtime_error(std::string("bad instruction file ") + path);
  return bytes;
}

xrt::hw_context registered(xrt::device &device, const xrt::xclbin &xclbin) {
  device.register_xclbin(xclbin);
  return xrt::hw_context(device, xclbin.get_uuid());
}

struct XrtApi {
  using Bo = xrt::bo;
  using Run = xrt::run;

  xrt::device device;
  xrt::xclbin xclbin;
  xrt::hw_context context;
  xrt::kernel kernel;
  std::vector<char> insts;
  xrt::bo instr, out;
  size_t ninstr, nout;
  uint8_t *out_host;

  XrtApi(const char *xclbin_path, const char *insts_path, const char *kernel_name,
         unsigned device_index, size_t out_bytes)
      : device(device_index), xclbin(std::string(xclbin_path)),
        context(registered(device, xclbin)), kernel(context, kernel_name),
        insts(read_insts(insts_path)),
        instr(device, insts.size(), XCL_BO_FLAGS_CACHEABLE, kernel.group_id(1)),
        out(device, out_bytes, XRT_BO_FLAGS_HOST_ONLY, kernel.group_id(5)),
        ninstr(insts.size() / 4), nout(out_bytes), out_host(out.map<uint8_t *>()) {
    std::memcpy(instr.map<void *>(), insts.data(), insts.size());
    instr.sync(XCL_BO_SYNC_BO_TO_DEVICE);
  }
  Bo alloc_input(size_t n) {
    return xrt::bo(device, n, XRT_BO_FLAGS_HOST_ONLY, kernel.group_id(3));
  }
  uint8_t *map(Bo &b) { return b.map<uint8_t *>(); }
  void sync_to_device(Bo &b) { b.sync(XCL_BO_SYNC_BO_TO_DEVICE); }
  Run start(Bo &a, Bo &b) {
    unsigned int opcode = 3;
    return kernel(opcode, instr, ninstr, a, b, out);
  }
  int poll(Run &r) {
    switch (r.state()) {
    case ERT_CMD_STATE_COMPLETED:
      return 1;
    case ERT_CMD_STATE_ERROR:
    case ERT_CMD_STATE_ABORT:
    case ERT_CMD_STATE_TIMEOUT:
    case ERT_CMD_STATE_NORESPONSE:
    case ERT_CMD_STATE_SKERROR:
    case ERT_CMD_STATE_SKCRASHED:
      return 2;
    default:
      return 0;
    }
  }
  std::string state_text(Run &r) { return std::to_string(static_cast<int>(r.state())); }
  void sync_out() { out.sync(XCL_BO_SYNC_BO_FROM_DEVICE); }
  const uint8_t *out_map() { return out_host; }
  size_t out_bytes() { return nout; }
};
using Api = XrtApi;

Api *make_api(const char *xclbin, const char *insts, const char *kernel, unsigned device,
              size_t out_bytes) {
  return new XrtApi(xclbin, insts, kernel, device, out_bytes);
}
} // namespace
#endif

namespace {
struct Handle {
  std::unique_ptr<Api> api;
  std::unique_ptr<npuring::Ring<Api>> ring;
};

void put(char *buf, size_t len, const std::string &text) {
  if (buf && len) {
    std::snprintf(buf, len, "%s", text.c_str());
  }
}
} // namespace

extern "C" {

void *npu_ring_open(const char *xclbin, const char *insts, const char *kernel,
                    unsigned device, size_t in_bytes, size_t out_bytes, int nblock, int nring,
                    unsigned timeout_ms, char *err, size_t errlen) {
  try {
    auto h = std::make_unique<Handle>();
    h->api.reset(make_api(xclbin, insts, kernel, device, out_bytes));
    h->ring = std::make_unique<npuring::Ring<Api>>(*h->api, in_bytes, nblock, nring, timeout_ms);
    return h.release();
  } catch (const std::exception &e) {
    put(err, errlen, e.what());
    return nullptr;
  }
}

void npu_ring_close(void *h) { delete static_cast<Handle *>(h); }

uint8_t *npu_ring_input(void *h, int entry, int block) {
  return static_cast<Handle *>(h)->ring->input(entry, block);
}

int npu_ring_acquire(void *h, unsigned timeout_ms) {
  return static_cast<Handle *>(h)->ring->acquire(timeout_ms);
}

long npu_ring_submit(void *h, int entry, const int32_t *pairs, int npairs, uint8_t *out) {
  return static_cast<Handle *>(h)->ring->submit(entry, pairs, npairs, out);
}

int npu_ring_wait(void *h, long job, unsigned timeout_ms, char *err, size_t errlen) {
  std::string error;
  int status = static_cast<Handle *>(h)->ring->wait(job, timeout_ms, error);
  put(err, errlen, error);
  return status;
}

long npu_ring_counter(void *h, const char *name) {
#ifdef NPU_RING_FAKE
  Api &api = *static_cast<Handle *>(h)->api;
  std::string n(name);
  if (n == "runs")
    return api.dev->runs.load();
  if (n == "syncs")
    return api.syncs.load();
  if (n == "syncs_during_run")
    return api.syncs_during_run.load();
#else
  (void)h;
  (void)name;
#endif
  return -1;
}
}

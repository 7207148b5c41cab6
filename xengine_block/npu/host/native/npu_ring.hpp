// The NPU host loop in native code: a ring of input buffer objects, a sync thread and a launch
// thread, with a timeout on every run. Why native: pyxrt keeps Python's GIL for the whole of
// bo.sync / run.wait / kernel(...) (XRT src/python/pybind11/src/pyxrt.cpp), so in Python the
// input sync of entry k+1 can never overlap other Python work. Here no GIL is involved; Python
// calls in through ctypes, which releases the GIL for the duration of each call.
//
// The ring is generic over the device API (`Api`): npu_ring.cpp instantiates it with XRT's C++
// API (xrt::bo, xrt::run; compiled only where XRT's headers exist) or with a fake device for the
// tests (-DNPU_RING_FAKE), which is how its logic is tested without an NPU.
//
// Api provides: Bo alloc_input(size_t); uint8_t *map(Bo &); void sync_to_device(Bo &);
// Run start(Bo &a, Bo &b); int poll(Run &) (0 running, 1 completed, 2 failed, with a state
// text from state_text(Run &)); void sync_out(); const uint8_t *out_map(); size_t out_bytes().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace npuring {

enum Status : int { OK = 0, HUNG = 1, FAILED = 2, PENDING = 3 };

template <class Api> class Ring {
public:
  using Bo = typename Api::Bo;

  Ring(Api &api, size_t in_bytes, int nblock, int nring, unsigned timeout_ms)
      : api_(api), timeout_(timeout_ms) {
    for (int e = 0; e < nring; ++e) {
      Entry entry;
      for (int b = 0; b < nblock; ++b) {
        entry.bos.push_back(api_.alloc_input(in_bytes));
        entry.maps.push_back(api_.map(entry.bos.back()));
      }
      entries_.push_back(std::move(entry));
      free_.push_back(e);
    }
    sync_thread_ = std::thread([this] { sync_loop(); });
    launch_thread_ = std::thread([this] { launch_loop(); });
  }

  ~Ring() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    sync_thread_.join();
    launch_thread_.join();
  }

  uint8_t *input(int entry, int block) {
    return entries_.at(entry).maps.at(block);
  }

  // A free entry, -1 if none within timeout_ms, -2 if the ring is broken (a run hung).
  int acquire(unsigned timeout_ms) {
    std::unique_lock<std::mutex> lock(m_);
    bool got = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                            [this] { return !free_.empty() || !broken_.empty(); });
    if (!broken_.empty())
      return -2;
    if (!got)
      return -1;
    int e = free_.front();
    free_.pop_front();
    return e;
  }

  // Queue entry's block pairs (pairs[2k], pairs[2k+1]) = (A block, B block); each run's output
  // is copied to out + k * out_bytes. Returns a job id, or -2 if the ring is broken.
  long submit(int entry, const int32_t *pairs, int npairs, uint8_t *out) {
    std::lock_guard<std::mutex> lock(m_);
    if (!broken_.empty())
      return -2;
    long id = next_job_++;
    Job &job = jobs_[id];
    job.entry = entry;
    job.pairs.assign(pairs, pairs + 2 * npairs);
    job.out = out;
    to_sync_.push_back(id);
    cv_.notify_all();
    return id;
  }

  // Status of job id after waiting up to timeout_ms; a finished job is forgotten.
  Status wait(long id, unsigned timeout_ms, std::string &error) {
    std::unique_lock<std::mutex> lock(m_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      error = "unknown job " + std::to_string(id);
      return FAILED;
    }
    if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [&] { return it->second.done; }))
      return PENDING;
    Status s = it->second.status;
    error = it->second.error;
    jobs_.erase(it);
    return s;
  }

  std::string broken() {
    std::lock_guard<std::mutex> lock(m_);
    return broken_;
  }

private:
  struct Entry {
    std::vector<Bo> bos;
    std::vector<uint8_t *> maps;
  };
  struct Job {
    int entry = 0;
    std::vector<int32_t> pairs;
    uint8_t *out = nullptr;
    bool done = false;
    Status status = OK;
    std::string error;
  };

  // Pop the next job id from q (nullopt-like -1 when stopping).
  long pop(std::deque<long> &q) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return stop_ || !q.empty(); });
    if (q.empty())
      return -1;
    long id = q.front();
    q.pop_front();
    return id;
  }

  void finish(long id, Status status, const std::string &error) {
    std::lock_guard<std::mutex> lock(m_);
    Job &job = jobs_[id];
    job.status = status;
    job.error = error;
    job.done = true;
    free_.push_back(job.entry);
    cv_.notify_all();
  }

  void sync_loop() {
    for (long id; (id = pop(to_sync_)) >= 0;) {
      int entry;
      bool skip;
      {
        std::lock_guard<std::mutex> lock(m_);
        entry = jobs_[id].entry;
        skip = !broken_.empty();
      }
      if (!skip)
        for (Bo &bo : entries_[entry].bos)
          api_.sync_to_device(bo); // the expensive part; overlaps the running kernel
      std::lock_guard<std::mutex> lock(m_);
      to_launch_.push_back(id);
      cv_.notify_all();
    }
  }

  void launch_loop() {
    for (long id; (id = pop(to_launch_)) >= 0;) {
      Job job;
      std::string broken;
      {
        std::lock_guard<std::mutex> lock(m_);
        job = jobs_[id];
        broken = broken_;
      }
      if (!broken.empty()) {
        finish(id, HUNG, broken);
        continue;
      }
      Status status = OK;
      std::string error;
      Entry &entry = entries_[job.entry];
      size_t npairs = job.pairs.size() / 2;
      for (size_t k = 0; k < npairs && status == OK; ++k) {
        int i = job.pairs[2 * k], j = job.pairs[2 * k + 1];
        auto run = api_.start(entry.bos.at(i), entry.bos.at(j));
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_);
        int state;
        while ((state = api_.poll(run)) == 0) {
          if (std::chrono::steady_clock::now() > deadline) {
            status = HUNG;
            error = "NPU run of block pair (" + std::to_string(i) + ", " + std::to_string(j) +
                    ") not complete after " + std::to_string(timeout_) + " ms (state " +
                    api_.state_text(run) + "): the NPU looks hung";
            std::lock_guard<std::mutex> lock(m_);
            broken_ = error;
            break;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        if (status == OK && state != 1) {
          status = FAILED;
          error = "NPU run of block pair (" + std::to_string(i) + ", " + std::to_string(j) +
                  ") ended in state " + api_.state_text(run);
        }
        if (status == OK) {
          api_.sync_out();
          std::memcpy(job.out + k * api_.out_bytes(), api_.out_map(), api_.out_bytes());
        }
      }
      finish(id, status, error);
    }
  }

  Api &api_;
  unsigned timeout_;
  std::vector<Entry> entries_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<int> free_;
  std::deque<long> to_sync_, to_launch_;
  std::map<long, Job> jobs_;
  long next_job_ = 0;
  std::string broken_;
  bool stop_ = false;
  std::thread sync_thread_, launch_thread_;
};

} // namespace npuring

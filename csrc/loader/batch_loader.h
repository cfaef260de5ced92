#pragma once
// Prefetches training batches on a background thread into a ring of reusable host buffers.
//
// Batch k is [batch_size, seq_len + 1] int32: row i is window sampler.window(k*B*W + r*B + i)
// of the token file (see sampler.h), where B = batch_size, W = world and r = rank: rank r's
// rows [r*B, (r+1)*B) of global batch k, whose B*W rows are the batch one rank of batch B*W
// would get (world 1, rank 0: the whole batch). The consumer takes batches in order with next(); each comes as
// a Batch that keeps its buffer ("slot") out of reuse while it lives. A slot is refilled only
// when (a) no Batch refers to it and (b) two later batches have been taken, so a batch stays
// valid for an asynchronous host-to-device copy until the consumer draws batch k + 2 even if
// the Python array was dropped. With the default 4 slots the thread runs two batches ahead. If
// the consumer keeps more batches alive than the ring holds, the ring grows instead of
// blocking forever.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loader/pinned.h"
#include "loader/sampler.h"
#include "loader/token_file.h"

namespace parallax::loader {

struct LoaderOptions {
  uint64_t batch_size = 0;
  uint64_t seq_len = 0;
  uint64_t seed = 0;
  uint64_t start_batch = 0;  // resume: the first batch next() returns
  uint64_t rank = 0;         // this rank's slice of each global batch ...
  uint64_t world = 1;        // ... of `world` equal slices of batch_size rows
  size_t slots = 4;          // at least 3: two protected batches plus one being filled
  bool pin = true;           // page-lock slots where the CUDA driver is present
};

struct LoaderInfo {
  uint64_t n_tokens = 0;
  uint64_t n_windows = 0;
  size_t slots = 0;
  size_t pinned_slots = 0;    // slots whose cuMemHostRegister succeeded
  size_t verified_slots = 0;  // slots the driver reports page-locked now (HostPinner::page_locked)
  size_t slot_bytes = 0;
  uint64_t batches_taken = 0;
  std::string pin_status;
};

class Ring;  // shared state, kept alive by the loader and by every outstanding Batch

class Batch {
 public:
  Batch(std::shared_ptr<Ring> ring, size_t slot, int32_t* data, uint64_t index);
  ~Batch();
  Batch(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  Batch& operator=(Batch&&) = delete;

  int32_t* data() const { return data_; }
  uint64_t index() const { return index_; }
  size_t slot() const { return slot_; }

 private:
  std::shared_ptr<Ring> ring_;
  size_t slot_;
  int32_t* data_;
  uint64_t index_;
};

class BatchLoader {
 public:
  // Opens `path` and starts the prefetch thread; throws LoaderError for bad arguments or files.
  BatchLoader(const std::string& path, const LoaderOptions& options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Blocks until the next batch is ready. Rethrows an error of the prefetch thread; throws
  // LoaderError("closed") after close().
  Batch next();
  // Stops and joins the prefetch thread; outstanding Batches stay valid. Idempotent.
  void close();
  bool closed() const;
  LoaderInfo info() const;
  // Whether the driver reports [ptr, ptr + bytes) as page-locked (see HostPinner::page_locked).
  bool page_locked(const void* ptr, size_t bytes) const;
  const LoaderOptions& options() const { return options_; }

 private:
  LoaderOptions options_;
  std::shared_ptr<Ring> ring_;
  std::thread thread_;
};

}  // namespace parallax::loader

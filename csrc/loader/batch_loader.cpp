#include "loader/batch_loader.h"

#include <cstdlib>

namespace parallax::loader {

namespace {
constexpr size_t kPage = 4096;       // page alignment lets cuMemHostRegister lock whole pages
constexpr uint64_t kProtected = 2;   // a taken batch is kept until this many more are taken
constexpr uint64_t kNone = UINT64_MAX;
}  // namespace

struct Slot {
  enum class State { Free, Filling, Ready, Taken };
  int32_t* data = nullptr;
  State state = State::Free;
  uint64_t batch = kNone;
  int leases = 0;
  bool pinned = false;
};

class Ring {
 public:
  Ring(const std::string& path, const LoaderOptions& o)
      : file(path), sampler(file.num_windows(o.seq_len), o.seed), pinner(o.pin),
        batch_size(o.batch_size), seq_len(o.seq_len), global_rows(o.batch_size * o.world),
        row_offset(o.rank * o.batch_size), slot_bytes(round_up(o.batch_size * (o.seq_len + 1) * 4)),
        next_fill(o.start_batch), next_take(o.start_batch) {}

  ~Ring() {
    for (auto& s : slots) {
      if (s->pinned) pinner.unpin(s->data);
      std::free(s->data);
    }
  }

  static size_t round_up(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

  void add_slot() {  // called with `mutex` held, or before the thread starts
    auto s = std::make_unique<Slot>();
    s->data = static_cast<int32_t*>(std::aligned_alloc(kPage, slot_bytes));
    if (s->data == nullptr) throw LoaderError("cannot allocate a " + std::to_string(slot_bytes) + "-byte batch buffer");
    s->pinned = pinner.pin(s->data, slot_bytes);
    slots.push_back(std::move(s));
  }

  bool reusable(const Slot& s) const {
    if (s.state == Slot::State::Free) return true;
    return s.state == Slot::State::Taken && s.leases == 0 && s.batch + kProtected < next_take;
  }

  // The least recently filled reusable slot: keeps the ring cyclic and leaves every slot
  // untouched for as long as possible after its batch was taken.
  Slot* find_reusable() {
    Slot* best = nullptr;
    for (auto& s : slots) {
      if (s->state == Slot::State::Free) return s.get();
      if (reusable(*s) && (best == nullptr || s->batch < best->batch)) best = s.get();
    }
    return best;
  }

  Slot* find_ready(uint64_t batch) {
    for (auto& s : slots)
      if (s->state == Slot::State::Ready && s->batch == batch) return s.get();
    return nullptr;
  }

  void fill(int32_t* out, uint64_t batch) {
    const uint64_t row = seq_len + 1;
    for (uint64_t i = 0; i < batch_size; ++i)
      file.copy_window(sampler.window(batch * global_rows + row_offset + i), seq_len, out + i * row);
  }

  void produce() {
    for (;;) {
      Slot* slot = nullptr;
      uint64_t batch = 0;
      {
        std::unique_lock<std::mutex> lock(mutex);
        for (;;) {
          if (stop) return;
          slot = find_reusable();
          if (slot != nullptr) break;
          // The consumer waits for a batch we cannot start: it holds every slot. Grow.
          if (consumer_waiting && next_fill == next_take) {
            try {
              add_slot();
            } catch (...) {
              error = std::current_exception();
              changed.notify_all();
              return;
            }
            slot = slots.back().get();
            break;
          }
          changed.wait(lock);
        }
        slot->state = Slot::State::Filling;
        slot->batch = kNone;
        batch = next_fill++;
      }
      try {
        fill(slot->data, batch);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        error = std::current_exception();
        changed.notify_all();
        return;
      }
      std::lock_guard<std::mutex> lock(mutex);
      slot->state = Slot::State::Ready;
      slot->batch = batch;
      changed.notify_all();
    }
  }

  TokenFile file;
  WindowSampler sampler;  // used by the prefetch thread only
  HostPinner pinner;
  const uint64_t batch_size, seq_len;
  const uint64_t global_rows, row_offset;  // rows of a global batch; this rank's first row in it
  const size_t slot_bytes;

  mutable std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::unique_ptr<Slot>> slots;  // unique_ptr: slots keep their address as the ring grows
  uint64_t next_fill, next_take;
  bool stop = false;
  bool consumer_waiting = false;
  std::exception_ptr error;
};

Batch::Batch(std::shared_ptr<Ring> ring, size_t slot, int32_t* data, uint64_t index)
    : ring_(std::move(ring)), slot_(slot), data_(data), index_(index) {}

Batch::Batch(Batch&& other) noexcept
    : ring_(std::move(other.ring_)), slot_(other.slot_), data_(other.data_), index_(other.index_) {}

Batch::~Batch() {
  if (!ring_) return;
  std::lock_guard<std::mutex> lock(ring_->mutex);
  ring_->slots[slot_]->leases -= 1;
  ring_->changed.notify_all();
}

BatchLoader::BatchLoader(const std::string& path, const LoaderOptions& options) : options_(options) {
  if (options.batch_size == 0 || options.seq_len == 0)
    throw LoaderError("batch_size and seq_len must be positive");
  if (options.world == 0 || options.rank >= options.world)
    throw LoaderError("rank " + std::to_string(options.rank) + " is not one of " + std::to_string(options.world) +
                      " ranks");
  if (options.slots < 3) throw LoaderError("the ring needs at least 3 slots, got " + std::to_string(options.slots));
  ring_ = std::make_shared<Ring>(path, options);
  const uint64_t windows = ring_->sampler.n_windows();
  if (windows == 0)
    throw LoaderError("token file " + path + ": " + std::to_string(ring_->file.n_tokens()) +
                      " tokens hold no window of seq_len + 1 = " + std::to_string(options.seq_len + 1) + " tokens");
  for (size_t i = 0; i < options.slots; ++i) ring_->add_slot();
  thread_ = std::thread([ring = ring_] { ring->produce(); });
}

BatchLoader::~BatchLoader() { close(); }

Batch BatchLoader::next() {
  Ring& r = *ring_;
  std::unique_lock<std::mutex> lock(r.mutex);
  r.consumer_waiting = true;
  r.changed.notify_all();
  Slot* slot = nullptr;
  // Batches filled before an error of the thread are still handed out, in order.
  r.changed.wait(lock, [&] { return r.stop || (slot = r.find_ready(r.next_take)) != nullptr || r.error; });
  r.consumer_waiting = false;
  if (r.stop) throw LoaderError("the batch loader is closed");
  if (slot == nullptr) std::rethrow_exception(r.error);
  slot->state = Slot::State::Taken;
  slot->leases = 1;
  const uint64_t index = r.next_take++;
  r.changed.notify_all();  // taking a batch may release an older slot for refilling
  size_t position = 0;
  while (r.slots[position].get() != slot) ++position;
  return Batch(ring_, position, slot->data, index);
}

void BatchLoader::close() {
  {
    std::lock_guard<std::mutex> lock(ring_->mutex);
    ring_->stop = true;
    ring_->changed.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

bool BatchLoader::closed() const {
  std::lock_guard<std::mutex> lock(ring_->mutex);
  return ring_->stop;
}

LoaderInfo BatchLoader::info() const {
  std::lock_guard<std::mutex> lock(ring_->mutex);
  LoaderInfo info;
  info.n_tokens = ring_->file.n_tokens();
  info.n_windows = ring_->sampler.n_windows();
  info.slots = ring_->slots.size();
  for (const auto& s : ring_->slots) {
    info.pinned_slots += s->pinned ? 1 : 0;
    info.verified_slots += ring_->pinner.page_locked(s->data, ring_->slot_bytes) ? 1 : 0;
  }
  info.slot_bytes = ring_->slot_bytes;
  info.batches_taken = ring_->next_take - options_.start_batch;
  info.pin_status = ring_->pinner.status();
  return info;
}

bool BatchLoader::page_locked(const void* ptr, size_t bytes) const { return ring_->pinner.page_locked(ptr, bytes); }

}  // namespace parallax::loader

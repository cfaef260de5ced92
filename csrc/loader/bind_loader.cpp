// parallax._native loader bindings: token files, the window order, and the prefetching
// batch loader whose batches reach Python as NumPy arrays over the ring's own memory.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <optional>

#include "loader/batch_loader.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace parallax::loader;

namespace {

template <typename T>
nb::ndarray<nb::numpy, T> owned_array(T* data, std::initializer_list<size_t> shape) {
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::ndarray<nb::numpy, T>(data, shape, owner);
}

// The array's owner is the Batch itself: while NumPy (or a torch/JAX array made from it)
// holds the array, the ring slot is not refilled.
nb::ndarray<nb::numpy, int32_t> batch_array(Batch&& batch, const LoaderOptions& o) {
  auto* held = new Batch(std::move(batch));
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<Batch*>(p); });
  return nb::ndarray<nb::numpy, int32_t>(held->data(), {o.batch_size, o.seq_len + 1}, owner);
}

nb::object next_batch(BatchLoader& loader) {
  std::optional<Batch> batch;
  {
    nb::gil_scoped_release unlocked;  // the wait may be long; the thread never needs the GIL
    batch.emplace(loader.next());
  }
  return nb::cast(batch_array(std::move(*batch), loader.options()));
}

nb::ndarray<nb::numpy, int32_t> gather(const TokenFile& file, nb::ndarray<const int64_t, nb::ndim<1>> windows,
                                       uint64_t seq_len) {
  const size_t n = windows.shape(0);
  const uint64_t available = file.num_windows(seq_len);
  auto* out = new int32_t[n * (seq_len + 1)];
  try {
    for (size_t i = 0; i < n; ++i) {
      const int64_t w = windows(i);
      if (w < 0 || static_cast<uint64_t>(w) >= available)
        throw LoaderError("window " + std::to_string(w) + " is outside [0, " + std::to_string(available) + ") of " +
                          file.path());
      file.copy_window(static_cast<uint64_t>(w), seq_len, out + i * (seq_len + 1));
    }
  } catch (...) {
    delete[] out;
    throw;
  }
  return owned_array(out, {n, seq_len + 1});
}

}  // namespace

void bind_loader(nb::module_& m) {
  nb::exception<LoaderError>(m, "LoaderError", PyExc_RuntimeError);

  nb::class_<TokenFile>(m, "TokenFile", "A prepared token file, memory-mapped read-only (header checked).")
      .def(nb::init<const std::string&>(), "path"_a)
      .def_prop_ro("path", &TokenFile::path)
      .def_prop_ro("n_tokens", &TokenFile::n_tokens)
      .def_prop_ro("vocab_size", &TokenFile::vocab_size)
      .def_prop_ro("eos_id", &TokenFile::eos_id)
      .def("num_windows", &TokenFile::num_windows, "seq_len"_a)
      .def(
          "tokens",
          [](const TokenFile& f) {
            return nb::ndarray<nb::numpy, const uint16_t, nb::ndim<1>>(f.tokens(), {f.n_tokens()}, nb::handle());
          },
          nb::rv_policy::reference_internal, "A read-only uint16 view of every token (no copy).")
      .def("gather", &gather, "windows"_a, "seq_len"_a,
           "Windows (int64 indices) as a new [n, seq_len + 1] int32 array.");

  m.def(
      "window_order",
      [](uint64_t n, uint64_t seed, uint64_t epoch) {
        std::vector<uint64_t> order = window_order(n, seed, epoch);
        auto* out = new uint64_t[n];
        if (n != 0) std::memcpy(out, order.data(), n * sizeof(uint64_t));
        return owned_array(out, {static_cast<size_t>(n)});
      },
      "n"_a, "seed"_a, "epoch"_a, "The seeded permutation of [0, n) that orders one epoch (docs/data.md).");

  nb::class_<BatchLoader>(m, "BatchLoader", "Prefetches [batch_size, seq_len + 1] int32 batches on a thread.")
      .def(
          "__init__",
          [](BatchLoader* self, const std::string& path, uint64_t batch_size, uint64_t seq_len, uint64_t seed,
             uint64_t start_batch, size_t slots, bool pin, uint64_t rank, uint64_t world) {
            LoaderOptions o;
            o.batch_size = batch_size;
            o.seq_len = seq_len;
            o.seed = seed;
            o.start_batch = start_batch;
            o.slots = slots;
            o.pin = pin;
            o.rank = rank;
            o.world = world;
            new (self) BatchLoader(path, o);
          },
          "path"_a, "batch_size"_a, "seq_len"_a, "seed"_a, "start_batch"_a = 0, "slots"_a = 4, "pin"_a = true,
          "rank"_a = 0, "world"_a = 1)
      .def_prop_ro("rank", [](const BatchLoader& l) { return l.options().rank; })
      .def_prop_ro("world", [](const BatchLoader& l) { return l.options().world; })
      .def("next", &next_batch, "The next batch; blocks until the thread has it.")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__",
           [](BatchLoader& loader) {
             if (loader.closed()) throw nb::stop_iteration();
             return next_batch(loader);
           })
      .def(
          "close", [](BatchLoader& loader) { loader.close(); }, nb::call_guard<nb::gil_scoped_release>(),
          "Stop the thread; arrays already handed out stay valid.")
      .def_prop_ro("closed", &BatchLoader::closed)
      .def(
          "page_locked",
          [](const BatchLoader& loader, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> array) {
            return loader.page_locked(array.data(), array.nbytes());
          },
          "array"_a.noconvert(),
          "Whether the CUDA driver reports the array's memory (first and last byte) as page-locked host "
          "memory; False without a driver. A batch's array answers True when its slot is pinned.")
      .def("info", [](const BatchLoader& loader) {
        const LoaderInfo i = loader.info();
        nb::dict d;
        d["n_tokens"] = i.n_tokens;
        d["n_windows"] = i.n_windows;
        d["slots"] = i.slots;
        d["pinned_slots"] = i.pinned_slots;
        d["verified_slots"] = i.verified_slots;
        // The driver's own word, not torch's is_pinned() (False until torch initialises CUDA).
        d["pinned_verified"] = i.slots > 0 && i.verified_slots == i.slots;
        d["slot_bytes"] = i.slot_bytes;
        d["batches_taken"] = i.batches_taken;
        d["pin_status"] = i.pin_status;
        return d;
      });
}

// Loader throughput on the CPU: tokens/s that the native loader hands out, to compare with
// what training consumes (~700k tokens/s for llama-100m on one H200; the target is 50x that).
//   cmake -S . -B build/bench -G Ninja -DPARALLAX_BUILD_PYTHON=OFF -DPARALLAX_BUILD_BENCH=ON \
//         -DCMAKE_BUILD_TYPE=Release && cmake --build build/bench && build/bench/csrc/bench/parallax_bench
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "loader/batch_loader.h"

using namespace parallax::loader;

namespace {

constexpr uint64_t kTokens = 32ULL << 20;  // 64 MiB of uint16: stays in the page cache

// One token file for every benchmark, removed at exit.
const std::string& token_file() {
  static const std::string path = [] {
    std::string p = "/tmp/parallax_bench_" + std::to_string(::getpid()) + ".bin";
    std::vector<uint16_t> tokens(kTokens);
    uint64_t x = 1;
    for (auto& t : tokens) t = static_cast<uint16_t>((x = x * 6364136223846793005ULL + 1) >> 50) % 10000;
    write_token_file(p, tokens.data(), tokens.size(), 10000, 0);
    std::atexit([] { std::remove(("/tmp/parallax_bench_" + std::to_string(::getpid()) + ".bin").c_str()); });
    return p;
  }();
  return path;
}

// Batches handed to the consumer, which drops each one (the loop of a training step).
void BM_LoaderNext(benchmark::State& state) {
  LoaderOptions o;
  o.batch_size = static_cast<uint64_t>(state.range(0));
  o.seq_len = static_cast<uint64_t>(state.range(1));
  o.seed = 0;
  o.pin = false;
  BatchLoader loader(token_file(), o);
  for (auto _ : state) {
    Batch b = loader.next();
    benchmark::DoNotOptimize(b.data()[0]);
  }
  // Tokens a training step consumes (B x S); the +1 target column is not counted.
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(o.batch_size * o.seq_len));
}
BENCHMARK(BM_LoaderNext)->Args({32, 1024})->Args({8, 1024})->Args({64, 128})->UseRealTime();

// One window widened to int32 and checked against the vocabulary: the inner loop of a fill.
void BM_CopyWindow(benchmark::State& state) {
  TokenFile file(token_file());
  const uint64_t seq = 1024, n = file.num_windows(seq);
  std::vector<int32_t> out(seq + 1);
  uint64_t w = 0;
  for (auto _ : state) {
    file.copy_window(w, seq, out.data());
    benchmark::DoNotOptimize(out.data());
    w = (w + 7919) % n;
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(seq));
}
BENCHMARK(BM_CopyWindow);

// An epoch's permutation: full TinyStories at seq_len 1024 is about 460k windows.
void BM_WindowOrder(benchmark::State& state) {
  uint64_t epoch = 0;
  for (auto _ : state) benchmark::DoNotOptimize(window_order(static_cast<uint64_t>(state.range(0)), 0, epoch++));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_WindowOrder)->Arg(460000)->Unit(benchmark::kMillisecond);

}  // namespace

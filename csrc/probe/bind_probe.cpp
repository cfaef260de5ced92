// Python face of the GPU probe and GEMM ceilings (parallax._native); parallax.gpu wraps it.
// Results cross as plain dicts with None for what is unknown, so they go straight into JSON.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <tuple>

#include "common/dynlib.h"
#include "probe/copy_bandwidth.h"
#include "probe/gemm.h"
#include "probe/gemm_shapes.h"
#include "probe/probe.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <class T>
nb::object optional(const std::optional<T>& value) {
  return value ? nb::cast(*value) : nb::none();
}

nb::object text_or_none(const std::string& text) { return text.empty() ? nb::none() : nb::cast(text); }

nb::object nvlink_dict(const std::optional<parallax::NvLinkInfo>& info) {
  if (!info) return nb::none();
  nb::list peers;
  for (const auto& p : info->peers) {
    nb::dict peer;
    peer["link"] = p.link;
    peer["remote_pci_bus_id"] = optional(p.remote_pci_bus_id);
    peer["remote_type"] = p.remote_type ? nb::cast(parallax::nvlink_device_type_name(*p.remote_type)) : nb::none();
    peers.append(peer);
  }
  nb::dict out;
  out["links"] = info->links;
  out["active"] = info->active;
  out["to_nvswitch"] = info->to_nvswitch;
  out["peers"] = peers;
  out["error"] = text_or_none(info->error);
  return out;
}

nb::dict topology_dict(const parallax::TopologyStatus& t) {
  nb::list pairs;
  for (const auto& p : t.pairs) {
    nb::dict pair;
    pair["a"] = p.a;
    pair["b"] = p.b;
    pair["connection"] = parallax::connection_code(p);
    pair["nvlinks"] = p.nvlinks;
    pair["via_nvswitch"] = p.via_nvswitch;
    pair["p2p_nvlink"] = optional(p.p2p_nvlink);
    pair["common_ancestor"] = optional(p.common_ancestor);
    pair["common_ancestor_name"] =
        p.common_ancestor ? nb::cast(parallax::topology_level_name(*p.common_ancestor)) : nb::none();
    pair["pcie_path"] = p.common_ancestor ? nb::cast(parallax::pcie_path_code(*p.common_ancestor)) : nb::none();
    pair["error"] = text_or_none(p.error);
    pairs.append(pair);
  }
  nb::dict out;
  out["available"] = t.available;
  out["error"] = text_or_none(t.error);
  out["pairs"] = pairs;
  return out;
}

nb::dict device_dict(const parallax::DeviceInfo& d) {
  nb::dict out;
  out["index"] = d.index;
  out["name"] = optional(d.name);
  out["uuid"] = optional(d.uuid);
  out["pci_bus_id"] = optional(d.pci_bus_id);
  const bool have_cc = d.cc_major && d.cc_minor;
  out["compute_capability"] =
      have_cc ? nb::cast(std::to_string(*d.cc_major) + "." + std::to_string(*d.cc_minor)) : nb::none();
  out["cc_major"] = optional(d.cc_major);
  out["cc_minor"] = optional(d.cc_minor);
  out["sm_count"] = optional(d.sm_count);
  out["clock_sm_mhz"] = optional(d.clock_sm_mhz);
  out["clock_sm_max_mhz"] = optional(d.clock_sm_max_mhz);
  out["clock_mem_mhz"] = optional(d.clock_mem_mhz);
  out["clock_mem_max_mhz"] = optional(d.clock_mem_max_mhz);
  out["memory_total_bytes"] = optional(d.memory_total_bytes);
  out["memory_free_bytes"] = optional(d.memory_free_bytes);
  out["power_limit_w"] = optional(d.power_limit_w);
  out["nvlink"] = nvlink_dict(d.nvlink);
  return out;
}

nb::dict probe_dict(const parallax::ProbeResult& r) {
  nb::dict driver;
  driver["available"] = r.driver.available;
  driver["error"] = text_or_none(r.driver.error);
  driver["library"] = text_or_none(r.driver.library);
  driver["version"] = optional(r.driver.version);
  driver["version_str"] =
      r.driver.version ? nb::cast(parallax::cuda::version_string(*r.driver.version)) : nb::none();
  nb::dict nvml;
  nvml["available"] = r.nvml.available;
  nvml["error"] = text_or_none(r.nvml.error);
  nvml["library"] = text_or_none(r.nvml.library);
  nvml["driver_version"] = optional(r.nvml.driver_version);
  nb::list devices;
  for (const auto& d : r.devices) devices.append(device_dict(d));
  nb::dict out;
  out["driver"] = driver;
  out["nvml"] = nvml;
  out["devices"] = devices;
  out["topology"] = topology_dict(r.topology);
  return out;
}

nb::dict shape_dict(const parallax::GemmShape& s) {
  nb::dict out;
  out["name"] = s.name;
  out["linear"] = s.linear;
  out["pass"] = s.pass;
  out["m"] = s.m;
  out["n"] = s.n;
  out["k"] = s.k;
  out["count"] = s.count;
  out["flops"] = s.flops();
  return out;
}

nb::dict gemm_dict(const parallax::GemmResult& r) {
  nb::dict out;
  out["precision"] = r.precision;
  out["m"] = r.m;
  out["n"] = r.n;
  out["k"] = r.k;
  out["flops"] = r.flops;
  out["warmup"] = r.warmup;
  out["iters"] = r.iters;
  out["tune_warmup"] = r.tune_warmup;
  out["tune_iters"] = r.tune_iters;
  out["rest_ms"] = r.rest_ms;
  out["median_ms"] = optional(r.median_ms);
  out["min_ms"] = optional(r.min_ms);
  out["max_ms"] = optional(r.max_ms);
  out["tflops"] = optional(r.tflops);
  out["tflops_best"] = optional(r.tflops_best);
  out["algo_count"] = r.algo_count;
  out["algo_index"] = optional(r.algo_index);
  out["algos_tried"] = r.algos_tried;
  nb::list trials;
  for (const auto& t : r.algo_trials) {
    nb::dict trial;
    trial["index"] = t.index;
    trial["median_ms"] = optional(t.median_ms);
    trial["error"] = text_or_none(t.error);
    trials.append(trial);
  }
  out["algo_trials"] = trials;
  out["layout"] = "TN";
  out["cublaslt_version"] = optional(r.cublaslt_version);
  out["library"] = text_or_none(r.library);
  out["error"] = text_or_none(r.error);
  return out;
}

}  // namespace

void bind_probe(nb::module_& m) {
  m.def("set_library_dirs", &parallax::set_library_dirs, "dirs"_a,
        "Directories searched, in order, before the system loader path for libcuda, NVML and cuBLASLt.");
  m.def("library_dirs", &parallax::library_dirs, "The directories set by set_library_dirs().");

  m.def(
      "probe",
      [] {
        parallax::ProbeResult result;
        {
          nb::gil_scoped_release release;
          result = parallax::probe_gpus();
        }
        return probe_dict(result);
      },
      "GPUs, CUDA driver, NVML status and the GPUs' interconnect as a dict; never raises for missing libraries or GPUs.");

  m.def(
      "model_gemm_shapes",
      [](int64_t d_model, int64_t n_layers, int64_t n_heads, int64_t head_dim, int64_t d_ff, int64_t vocab,
         int64_t tokens) {
        nb::list out;
        for (const auto& s : parallax::model_gemm_shapes({d_model, n_layers, n_heads, head_dim, d_ff, vocab}, tokens))
          out.append(shape_dict(s));
        return out;
      },
      "d_model"_a, "n_layers"_a, "n_heads"_a, "head_dim"_a, "d_ff"_a, "vocab"_a, "tokens"_a,
      "The forward, dgrad and wgrad GEMMs of one training step, with counts per step.");

  m.def(
      "measure_gemm",
      [](int device, const std::string& precision, int64_t m, int64_t n, int64_t k, int warmup, int iters,
         int tune_warmup, int tune_iters, int rest_ms) {
        parallax::GemmResult result;
        {
          nb::gil_scoped_release release;
          result = parallax::measure_gemm({device, precision, m, n, k, warmup, iters, tune_warmup, tune_iters, rest_ms});
        }
        return gemm_dict(result);
      },
      "device"_a, "precision"_a, "m"_a, "n"_a, "k"_a, "warmup"_a = 10, "iters"_a = 50, "tune_warmup"_a = 3,
      "tune_iters"_a = 5, "rest_ms"_a = 0,
      "Time D[m,n] = X[m,k]·W[n,k]ᵀ with cuBLASLt, after timing each algorithm the heuristic offers "
      "(tune_iters=0: its first, untimed); errors are reported in the result's 'error'.");

  m.def(
      "model_shape_ceiling",
      [](const std::vector<std::tuple<double, int64_t, double>>& gemms) {
        std::vector<parallax::TimedGemm> timed;
        for (const auto& [flops, count, ms] : gemms) timed.push_back({flops, count, ms});
        return parallax::model_shape_ceiling_tflops(timed);
      },
      "gemms"_a, "TFLOP/s over (flops, count, ms) triples: sum(flops*count) / sum(ms*count).");

  m.def("gemm_precisions", &parallax::gemm_precisions, "Precisions measure_gemm knows.");

  m.def(
      "measure_copy",
      [](int device, int64_t bytes, int warmup, int iters) {
        parallax::CopyResult r;
        {
          nb::gil_scoped_release release;
          r = parallax::measure_copy({device, bytes, warmup, iters});
        }
        nb::dict out;
        out["bytes"] = r.bytes;
        out["warmup"] = r.warmup;
        out["iters"] = r.iters;
        out["median_ms"] = optional(r.median_ms);
        out["min_ms"] = optional(r.min_ms);
        out["max_ms"] = optional(r.max_ms);
        out["bytes_per_s"] = optional(r.bytes_per_s);
        out["bytes_per_s_best"] = optional(r.bytes_per_s_best);
        out["error"] = text_or_none(r.error);
        return out;
      },
      "device"_a, "bytes"_a = int64_t{2} << 30, "warmup"_a = 3, "iters"_a = 10,
      "Time device-to-device copies of `bytes` between CUDA events: the HBM bandwidth a copy reaches "
      "(2*bytes / median time); errors are reported in the result's 'error'.");
}

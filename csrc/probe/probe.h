#pragma once
// What GPUs this machine has, read through NVML and the CUDA driver API (no torch, no JAX).
//
// The driver gives the CUDA view (ordinals as torch/JAX number them, compute capability,
// SM count); NVML gives what the driver does not (clocks, free memory, power limit, driver
// version string). The two are matched by PCI bus id, since NVML and CUDA may order devices
// differently. Either library alone still yields what it knows; unknown fields stay empty.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "probe/cuda_api.h"
#include "probe/nvml_api.h"
#include "probe/topology.h"

namespace parallax {

struct DriverStatus {
  bool available = false;       // libcuda loaded and cuInit and cuDeviceGetCount succeeded
  std::string error;            // empty when available
  std::string library;          // the file that loaded; empty when none did
  std::optional<int> version;   // cuDriverGetVersion, e.g. 13000
};

struct NvmlStatus {
  bool available = false;  // libnvidia-ml loaded and nvmlInit and nvmlDeviceGetCount succeeded
  std::string error;
  std::string library;
  std::optional<std::string> driver_version;  // e.g. "580.95.05"
};

struct DeviceInfo {
  int index = 0;  // CUDA ordinal when the driver answered, else NVML index
  std::optional<std::string> name, uuid, pci_bus_id;
  std::optional<int> cc_major, cc_minor, sm_count;
  std::optional<unsigned> clock_sm_mhz, clock_sm_max_mhz, clock_mem_mhz, clock_mem_max_mhz;
  std::optional<uint64_t> memory_total_bytes, memory_free_bytes;  // NVML's when it answers, else the driver's total
  std::optional<double> power_limit_w;
  std::optional<NvLinkInfo> nvlink;  // NVML's; empty when NVML did not answer
};

struct ProbeResult {
  DriverStatus driver;
  NvmlStatus nvml;
  std::vector<DeviceInfo> devices;
  TopologyStatus topology;  // pairs of ``devices``, by their ``index``
};

struct PciAddress {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  bool operator==(const PciAddress& o) const {
    return domain == o.domain && bus == o.bus && device == o.device && function == o.function;
  }
};

// Parses "0000:19:00.0" (CUDA) and "00000000:19:00.0" (NVML); nullopt for anything else.
std::optional<PciAddress> parse_pci_bus_id(const std::string& text);
// One spelling for both sources: "0000:19:00.0" (the CUDA form, hex upper case).
std::string format_pci_bus_id(const PciAddress& address);
// "GPU-" + 8-4-4-4-12 lower-case hex groups, as NVML and nvidia-smi print it.
std::string format_uuid(const unsigned char bytes[16]);

ProbeResult probe_gpus(const LoadedApi<cuda::Api>& driver, const LoadedApi<nvml::Api>& nvml);
// Opens the real libraries (set_library_dirs() first to search pip's nvidia-* directories).
ProbeResult probe_gpus();

}  // namespace parallax

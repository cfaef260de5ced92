#include "probe/probe.h"

#include <algorithm>
#include <cstdio>

namespace parallax {

std::optional<PciAddress> parse_pci_bus_id(const std::string& text) {
  PciAddress a;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x%n", &a.domain, &a.bus, &a.device, &a.function, &consumed) != 4 ||
      static_cast<size_t>(consumed) != text.size())
    return std::nullopt;
  return a;
}

std::string format_pci_bus_id(const PciAddress& a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04X:%02X:%02X.%X", a.domain, a.bus, a.device, a.function);
  return buf;
}

std::string format_uuid(const unsigned char b[16]) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

namespace {

std::optional<std::string> canonical_pci(const char* text) {
  auto address = parse_pci_bus_id(text);
  if (!address) return std::nullopt;
  return format_pci_bus_id(*address);
}

std::optional<int> attribute(const cuda::Api& api, int attr, cuda::CUdevice dev) {
  int value = 0;
  if (api.cuDeviceGetAttribute(&value, attr, dev) != cuda::CUDA_SUCCESS) return std::nullopt;
  return value;
}

// One CUDA device; a field whose call fails stays empty (the probe reports, never throws).
DeviceInfo read_cuda_device(const cuda::Api& api, int ordinal) {
  DeviceInfo info;
  info.index = ordinal;
  cuda::CUdevice dev = 0;
  if (api.cuDeviceGet(&dev, ordinal) != cuda::CUDA_SUCCESS) return info;
  char text[256] = {};
  if (api.cuDeviceGetName(text, sizeof text, dev) == cuda::CUDA_SUCCESS) info.name = text;
  cuda::CUuuid uuid{};
  if (api.cuDeviceGetUuid(&uuid, dev) == cuda::CUDA_SUCCESS) info.uuid = format_uuid(uuid.bytes);
  char bus[64] = {};
  if (api.cuDeviceGetPCIBusId(bus, sizeof bus, dev) == cuda::CUDA_SUCCESS) info.pci_bus_id = canonical_pci(bus);
  info.cc_major = attribute(api, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  info.cc_minor = attribute(api, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  info.sm_count = attribute(api, cuda::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  size_t total = 0;
  if (api.cuDeviceTotalMem(&total, dev) == cuda::CUDA_SUCCESS) info.memory_total_bytes = total;
  return info;
}

std::optional<unsigned> clock(const nvml::Api& api, nvml::nvmlDevice_t dev, int type, bool max) {
  unsigned mhz = 0;
  auto fn = max ? api.nvmlDeviceGetMaxClockInfo : api.nvmlDeviceGetClockInfo;
  if (fn(dev, type, &mhz) != nvml::NVML_SUCCESS) return std::nullopt;
  return mhz;
}

DeviceInfo read_nvml_device(const nvml::Api& api, unsigned index, nvml::nvmlDevice_t& dev) {
  DeviceInfo info;
  info.index = static_cast<int>(index);
  dev = nullptr;
  if (api.nvmlDeviceGetHandleByIndex(index, &dev) != nvml::NVML_SUCCESS) return info;
  char text[nvml::NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (api.nvmlDeviceGetName(dev, text, sizeof text) == nvml::NVML_SUCCESS) info.name = text;
  char uuid[nvml::NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (api.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) == nvml::NVML_SUCCESS) info.uuid = uuid;
  nvml::nvmlPciInfo_t pci{};
  if (api.nvmlDeviceGetPciInfo(dev, &pci) == nvml::NVML_SUCCESS) info.pci_bus_id = canonical_pci(pci.busId);
  int major = 0, minor = 0;
  if (api.nvmlDeviceGetCudaComputeCapability(dev, &major, &minor) == nvml::NVML_SUCCESS) {
    info.cc_major = major;
    info.cc_minor = minor;
  }
  info.clock_sm_mhz = clock(api, dev, nvml::NVML_CLOCK_SM, false);
  info.clock_sm_max_mhz = clock(api, dev, nvml::NVML_CLOCK_SM, true);
  info.clock_mem_mhz = clock(api, dev, nvml::NVML_CLOCK_MEM, false);
  info.clock_mem_max_mhz = clock(api, dev, nvml::NVML_CLOCK_MEM, true);
  nvml::nvmlMemory_t memory{};
  if (api.nvmlDeviceGetMemoryInfo(dev, &memory) == nvml::NVML_SUCCESS) {
    info.memory_total_bytes = memory.total;
    info.memory_free_bytes = memory.free;
  }
  unsigned milliwatts = 0;
  if (api.nvmlDeviceGetEnforcedPowerLimit(dev, &milliwatts) == nvml::NVML_SUCCESS)
    info.power_limit_w = milliwatts / 1000.0;
  return info;
}

template <class T>
void fill(std::optional<T>& field, const std::optional<T>& other) {
  if (!field) field = other;
}

// The CUDA device keeps what the driver said; NVML adds what only it knows. Memory comes from
// NVML whole: its total (what nvidia-smi shows) exceeds cuDeviceTotalMem by the driver's
// reservation, so an idle GPU's NVML free could exceed the driver's total.
void merge_nvml(DeviceInfo& cuda_dev, const DeviceInfo& n) {
  fill(cuda_dev.name, n.name);
  fill(cuda_dev.uuid, n.uuid);
  fill(cuda_dev.cc_major, n.cc_major);
  fill(cuda_dev.cc_minor, n.cc_minor);
  if (n.memory_total_bytes) cuda_dev.memory_total_bytes = n.memory_total_bytes;
  cuda_dev.clock_sm_mhz = n.clock_sm_mhz;
  cuda_dev.clock_sm_max_mhz = n.clock_sm_max_mhz;
  cuda_dev.clock_mem_mhz = n.clock_mem_mhz;
  cuda_dev.clock_mem_max_mhz = n.clock_mem_max_mhz;
  cuda_dev.memory_free_bytes = n.memory_free_bytes;
  cuda_dev.power_limit_w = n.power_limit_w;
  cuda_dev.nvlink = n.nvlink;
}

// Fills status; returns the CUDA devices (empty unless the driver is available).
std::vector<DeviceInfo> probe_driver(const LoadedApi<cuda::Api>& loaded, DriverStatus& status) {
  status.library = loaded.library;
  status.error = loaded.error;
  std::vector<DeviceInfo> devices;
  if (loaded.api == nullptr) return devices;
  const cuda::Api& api = *loaded.api;
  int version = 0;
  if (api.cuDriverGetVersion(&version) == cuda::CUDA_SUCCESS) status.version = version;
  cuda::CUresult rc = api.cuInit(0);
  if (rc != cuda::CUDA_SUCCESS) {
    status.error = cuda::call_error(api, "cuInit", rc);
    return devices;
  }
  int count = 0;
  rc = api.cuDeviceGetCount(&count);
  if (rc != cuda::CUDA_SUCCESS) {
    status.error = cuda::call_error(api, "cuDeviceGetCount", rc);
    return devices;
  }
  status.available = true;
  for (int i = 0; i < count; ++i) devices.push_back(read_cuda_device(api, i));
  return devices;
}

// Each device's NVLinks, and every pair of devices by NVML index (handles still valid).
void read_topology(const nvml::Api& api, const std::string& library, const std::vector<nvml::nvmlDevice_t>& handles,
                   std::vector<DeviceInfo>& devices, TopologyStatus& topology) {
  std::vector<std::optional<std::string>> buses;
  std::vector<std::optional<NvLinkInfo>> links;
  for (size_t i = 0; i < devices.size(); ++i) {
    buses.push_back(devices[i].pci_bus_id);
    links.push_back(read_nvlink(api, handles[i]));
  }
  count_switch_links(links, buses);
  for (size_t i = 0; i < devices.size(); ++i) devices[i].nvlink = links[i];
  if (api.nvmlDeviceGetTopologyCommonAncestor == nullptr) {
    topology.error = library + " lacks nvmlDeviceGetTopologyCommonAncestor";
    return;
  }
  topology.available = true;
  topology.pairs = read_pairs(api, handles, buses, links);
}

std::vector<DeviceInfo> probe_nvml(const LoadedApi<nvml::Api>& loaded, NvmlStatus& status, TopologyStatus& topology) {
  status.library = loaded.library;
  status.error = loaded.error;
  topology.error = loaded.error;
  std::vector<DeviceInfo> devices;
  if (loaded.api == nullptr) return devices;
  const nvml::Api& api = *loaded.api;
  nvml::nvmlReturn_t rc = api.nvmlInit();
  if (rc != nvml::NVML_SUCCESS) {
    status.error = topology.error = nvml::call_error(api, "nvmlInit_v2", rc);
    return devices;
  }
  char version[nvml::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (api.nvmlSystemGetDriverVersion(version, sizeof version) == nvml::NVML_SUCCESS) status.driver_version = version;
  unsigned count = 0;
  rc = api.nvmlDeviceGetCount(&count);
  if (rc != nvml::NVML_SUCCESS) {
    status.error = topology.error = nvml::call_error(api, "nvmlDeviceGetCount_v2", rc);
  } else {
    status.available = true;
    std::vector<nvml::nvmlDevice_t> handles(count, nullptr);
    for (unsigned i = 0; i < count; ++i) devices.push_back(read_nvml_device(api, i, handles[i]));
    topology.error.clear();
    read_topology(api, status.library, handles, devices, topology);
  }
  api.nvmlShutdown();
  return devices;
}

}  // namespace

ProbeResult probe_gpus(const LoadedApi<cuda::Api>& driver, const LoadedApi<nvml::Api>& nvml) {
  ProbeResult result;
  auto cuda_devices = probe_driver(driver, result.driver);
  auto nvml_devices = probe_nvml(nvml, result.nvml, result.topology);
  if (!result.driver.available) {
    // Without the driver NVML's list is all there is (it ignores CUDA_VISIBLE_DEVICES).
    result.devices = nvml_devices;
    return result;
  }
  std::vector<int> cuda_index(nvml_devices.size(), -1);  // NVML index -> CUDA ordinal, -1 when hidden
  for (auto& dev : cuda_devices) {
    for (size_t i = 0; i < nvml_devices.size(); ++i) {
      const auto& n = nvml_devices[i];
      if (dev.pci_bus_id && n.pci_bus_id && *dev.pci_bus_id == *n.pci_bus_id) {
        merge_nvml(dev, n);
        cuda_index[i] = dev.index;
        break;
      }
    }
  }
  // The pairs CUDA can see, by CUDA ordinal (the order torch and JAX number GPUs in).
  std::vector<GpuPair> visible;
  for (GpuPair pair : result.topology.pairs) {
    const int a = cuda_index[pair.a], b = cuda_index[pair.b];
    if (a < 0 || b < 0) continue;
    pair.a = std::min(a, b);
    pair.b = std::max(a, b);
    visible.push_back(pair);
  }
  std::sort(visible.begin(), visible.end(),
            [](const GpuPair& x, const GpuPair& y) { return x.a != y.a ? x.a < y.a : x.b < y.b; });
  result.topology.pairs = visible;
  result.devices = cuda_devices;
  return result;
}

ProbeResult probe_gpus() { return probe_gpus(cuda::driver(), nvml::library()); }

}  // namespace parallax

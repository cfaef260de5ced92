#include "probe/probe.h"

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

DeviceInfo read_nvml_device(const nvml::Api& api, unsigned index) {
  DeviceInfo info;
  info.index = static_cast<int>(index);
  nvml::nvmlDevice_t dev = nullptr;
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

std::vector<DeviceInfo> probe_nvml(const LoadedApi<nvml::Api>& loaded, NvmlStatus& status) {
  status.library = loaded.library;
  status.error = loaded.error;
  std::vector<DeviceInfo> devices;
  if (loaded.api == nullptr) return devices;
  const nvml::Api& api = *loaded.api;
  nvml::nvmlReturn_t rc = api.nvmlInit();
  if (rc != nvml::NVML_SUCCESS) {
    status.error = nvml::call_error(api, "nvmlInit_v2", rc);
    return devices;
  }
  char version[nvml::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (api.nvmlSystemGetDriverVersion(version, sizeof version) == nvml::NVML_SUCCESS) status.driver_version = version;
  unsigned count = 0;
  rc = api.nvmlDeviceGetCount(&count);
  if (rc != nvml::NVML_SUCCESS) {
    status.error = nvml::call_error(api, "nvmlDeviceGetCount_v2", rc);
  } else {
    status.available = true;
    for (unsigned i = 0; i < count; ++i) devices.push_back(read_nvml_device(api, i));
  }
  api.nvmlShutdown();
  return devices;
}

}  // namespace

ProbeResult probe_gpus(const LoadedApi<cuda::Api>& driver, const LoadedApi<nvml::Api>& nvml) {
  ProbeResult result;
  auto cuda_devices = probe_driver(driver, result.driver);
  auto nvml_devices = probe_nvml(nvml, result.nvml);
  if (!result.driver.available) {
    // Without the driver NVML's list is all there is (it ignores CUDA_VISIBLE_DEVICES).
    result.devices = nvml_devices;
    return result;
  }
  for (auto& dev : cuda_devices) {
    for (const auto& n : nvml_devices) {
      if (dev.pci_bus_id && n.pci_bus_id && *dev.pci_bus_id == *n.pci_bus_id) {
        merge_nvml(dev, n);
        break;
      }
    }
  }
  result.devices = cuda_devices;
  return result;
}

ProbeResult probe_gpus() { return probe_gpus(cuda::driver(), nvml::library()); }

}  // namespace parallax

// The probe against scripted libraries: every combination of driver / NVML present or absent,
// failing initialisation, and no devices, with the exact fields expected.
#include <gtest/gtest.h>

#include "probe/probe.h"
#include "probe/testing/fake_gpu.h"

namespace parallax {
namespace {

using testing::fake;
using testing::FakeDevice;

class ProbeTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::reset_fake(); }
  LoadedApi<cuda::Api> driver() { return {&cuda_api_, "/fake/libcuda.so.1", ""}; }
  LoadedApi<nvml::Api> nvml() { return {&nvml_api_, "/fake/libnvidia-ml.so.1", ""}; }
  static LoadedApi<cuda::Api> no_driver() { return {nullptr, "", "could not load libcuda.so.1: not found"}; }
  static LoadedApi<nvml::Api> no_nvml() { return {nullptr, "", "could not load libnvidia-ml.so.1: not found"}; }

  cuda::Api cuda_api_ = testing::fake_cuda_api();
  nvml::Api nvml_api_ = testing::fake_nvml_api();
};

// Two GPUs whose CUDA order (fastest first) is the reverse of NVML's (PCI order).
void script_two_gpus() {
  FakeDevice a;  // PCI 19: NVML index 0
  FakeDevice b;  // PCI 3B: NVML index 1
  b.uuid[15] = 0x0a;
  b.cuda_bus_id = "0000:3B:00.0";
  b.nvml_bus_id = "00000000:3B:00.0";
  b.clock_sm = 345;
  b.nvml_free_bytes = 7;
  b.power_limit_mw = 650'500;
  fake().cuda_devices = {b, a};
  fake().nvml_devices = {a, b};
}

TEST_F(ProbeTest, BothLibrariesMergeDevicesByPciBusId) {
  script_two_gpus();
  ProbeResult r = probe_gpus(driver(), nvml());
  EXPECT_TRUE(r.driver.available);
  EXPECT_EQ(r.driver.error, "");
  EXPECT_EQ(r.driver.library, "/fake/libcuda.so.1");
  EXPECT_EQ(r.driver.version, 13000);
  EXPECT_TRUE(r.nvml.available);
  EXPECT_EQ(r.nvml.driver_version, "580.95.05");
  EXPECT_EQ(fake().nvml_shutdowns, 1);
  ASSERT_EQ(r.devices.size(), 2u);
  const DeviceInfo& first = r.devices[0];  // CUDA ordinal 0 is the GPU on bus 3B
  EXPECT_EQ(first.index, 0);
  EXPECT_EQ(first.pci_bus_id, "0000:3B:00.0");
  EXPECT_EQ(first.uuid, "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f80a");
  EXPECT_EQ(first.clock_sm_mhz, 345u);
  EXPECT_EQ(first.memory_free_bytes, 7u);
  EXPECT_EQ(first.power_limit_w, 650.5);
  const DeviceInfo& second = r.devices[1];
  EXPECT_EQ(second.index, 1);
  EXPECT_EQ(second.name, "NVIDIA H200");
  EXPECT_EQ(second.uuid, "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809");
  EXPECT_EQ(second.pci_bus_id, "0000:19:00.0");
  EXPECT_EQ(second.cc_major, 9);
  EXPECT_EQ(second.cc_minor, 0);
  EXPECT_EQ(second.sm_count, 132);
  EXPECT_EQ(second.clock_sm_mhz, 1980u);
  EXPECT_EQ(second.clock_sm_max_mhz, 1980u);
  EXPECT_EQ(second.clock_mem_mhz, 3201u);
  EXPECT_EQ(second.clock_mem_max_mhz, 3201u);
  EXPECT_EQ(second.memory_total_bytes, 150'754'820'096u);  // NVML's, beside its free figure
  EXPECT_EQ(second.memory_free_bytes, 150'000'000'000u);
  EXPECT_EQ(second.power_limit_w, 700.0);
}

TEST_F(ProbeTest, NvmlDeviceHiddenFromCudaIsLeftOut) {
  script_two_gpus();
  fake().cuda_devices.pop_back();  // as with CUDA_VISIBLE_DEVICES=0
  ProbeResult r = probe_gpus(driver(), nvml());
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].pci_bus_id, "0000:3B:00.0");
}

TEST_F(ProbeTest, DriverAbsentReportsNvmlDevicesWithoutCudaFields) {
  ProbeResult r = probe_gpus(no_driver(), nvml());
  EXPECT_FALSE(r.driver.available);
  EXPECT_EQ(r.driver.error, "could not load libcuda.so.1: not found");
  EXPECT_EQ(r.driver.library, "");
  EXPECT_EQ(r.driver.version, std::nullopt);
  EXPECT_TRUE(r.nvml.available);
  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceInfo& d = r.devices[0];
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d.name, "NVIDIA H200");
  EXPECT_EQ(d.uuid, "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809");
  EXPECT_EQ(d.pci_bus_id, "0000:19:00.0");
  EXPECT_EQ(d.cc_major, 9);
  EXPECT_EQ(d.cc_minor, 0);
  EXPECT_EQ(d.sm_count, std::nullopt);  // only the driver knows
  EXPECT_EQ(d.memory_total_bytes, 150'754'820'096u);
  EXPECT_EQ(d.memory_free_bytes, 150'000'000'000u);
  EXPECT_EQ(d.clock_mem_max_mhz, 3201u);
  EXPECT_EQ(d.power_limit_w, 700.0);
}

TEST_F(ProbeTest, NvmlAbsentReportsDriverDevicesWithoutNvmlFields) {
  ProbeResult r = probe_gpus(driver(), no_nvml());
  EXPECT_TRUE(r.driver.available);
  EXPECT_FALSE(r.nvml.available);
  EXPECT_EQ(r.nvml.error, "could not load libnvidia-ml.so.1: not found");
  EXPECT_EQ(r.nvml.driver_version, std::nullopt);
  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceInfo& d = r.devices[0];
  EXPECT_EQ(d.name, "NVIDIA H200");
  EXPECT_EQ(d.uuid, "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809");
  EXPECT_EQ(d.sm_count, 132);
  EXPECT_EQ(d.memory_total_bytes, 150'011'707'392u);
  EXPECT_EQ(d.memory_free_bytes, std::nullopt);
  EXPECT_EQ(d.clock_sm_mhz, std::nullopt);
  EXPECT_EQ(d.clock_sm_max_mhz, std::nullopt);
  EXPECT_EQ(d.power_limit_w, std::nullopt);
}

TEST_F(ProbeTest, BothAbsentReportsBothErrorsAndNoDevices) {
  ProbeResult r = probe_gpus(no_driver(), no_nvml());
  EXPECT_FALSE(r.driver.available);
  EXPECT_FALSE(r.nvml.available);
  EXPECT_EQ(r.driver.error, "could not load libcuda.so.1: not found");
  EXPECT_EQ(r.nvml.error, "could not load libnvidia-ml.so.1: not found");
  EXPECT_TRUE(r.devices.empty());
}

TEST_F(ProbeTest, CuInitFailureNamesTheCallAndKeepsTheDriverVersion) {
  fake().init_result = cuda::CUDA_ERROR_NO_DEVICE;
  fake().nvml_devices.clear();
  ProbeResult r = probe_gpus(driver(), nvml());
  EXPECT_FALSE(r.driver.available);
  EXPECT_EQ(r.driver.error, "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
  EXPECT_EQ(r.driver.library, "/fake/libcuda.so.1");
  EXPECT_EQ(r.driver.version, 13000);
  EXPECT_TRUE(r.nvml.available);
  EXPECT_TRUE(r.devices.empty());
}

TEST_F(ProbeTest, ZeroDevicesIsAvailableWithAnEmptyList) {
  fake().cuda_devices.clear();
  fake().nvml_devices.clear();
  ProbeResult r = probe_gpus(driver(), nvml());
  EXPECT_TRUE(r.driver.available);
  EXPECT_EQ(r.driver.error, "");
  EXPECT_TRUE(r.nvml.available);
  EXPECT_TRUE(r.devices.empty());
}

TEST_F(ProbeTest, NvmlInitFailureIsReportedAndNotShutDown) {
  fake().nvml_init_result = nvml::NVML_ERROR_DRIVER_NOT_LOADED;
  ProbeResult r = probe_gpus(driver(), nvml());
  EXPECT_FALSE(r.nvml.available);
  EXPECT_EQ(r.nvml.error, "nvmlInit_v2 failed: Driver Not Loaded");
  EXPECT_EQ(r.nvml.library, "/fake/libnvidia-ml.so.1");
  EXPECT_EQ(fake().nvml_shutdowns, 0);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].clock_sm_mhz, std::nullopt);
}

TEST(ProbeFormat, PciBusIdsFromBothSourcesMeetInOneSpelling) {
  auto cuda_form = parse_pci_bus_id("0000:3b:00.0");
  auto nvml_form = parse_pci_bus_id("00000000:3B:00.0");
  ASSERT_TRUE(cuda_form && nvml_form);
  EXPECT_TRUE(*cuda_form == *nvml_form);
  EXPECT_EQ(format_pci_bus_id(*nvml_form), "0000:3B:00.0");
  EXPECT_EQ(format_pci_bus_id({1, 0xC1, 0x1F, 3}), "0001:C1:1F.3");
  EXPECT_FALSE(parse_pci_bus_id("3B:00.0"));
  EXPECT_FALSE(parse_pci_bus_id("0000:3B:00.0 trailing"));
  EXPECT_FALSE(parse_pci_bus_id(""));
}

TEST(ProbeFormat, UuidAndDriverVersion) {
  const unsigned char bytes[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 255};
  EXPECT_EQ(format_uuid(bytes), "GPU-00010203-0405-0607-0809-0a0b0c0d0eff");
  EXPECT_EQ(cuda::version_string(13000), "13.0");
  EXPECT_EQ(cuda::version_string(12080), "12.8");
  EXPECT_EQ(cuda::version_string(12090), "12.9");
  EXPECT_EQ(cuda::version_string(11040), "11.4");
}

// The real loader: a library without the symbols is refused with the first missing name.
TEST(ProbeLoading, MissingLibraryAndMissingSymbolAreReported) {
  ApiLibrary<cuda::Api> absent({"libparallax_no_such_driver.so.1"}, cuda::bind_api);
  LoadedApi<cuda::Api> a = absent.get();
  EXPECT_EQ(a.api, nullptr);
  EXPECT_EQ(a.library, "");
  EXPECT_EQ(a.error.rfind("could not load libparallax_no_such_driver.so.1", 0), 0u);

  ApiLibrary<cuda::Api> wrong({"libm.so.6"}, cuda::bind_api);
  LoadedApi<cuda::Api> w = wrong.get();
  EXPECT_EQ(w.api, nullptr);
  EXPECT_EQ(w.library, "libm.so.6");
  EXPECT_EQ(w.error, "libm.so.6 lacks cuGetErrorName");
}

}  // namespace
}  // namespace parallax

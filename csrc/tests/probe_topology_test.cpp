// The GPU topology against a scripted NVML: NVSwitch boards, NVLink bridges, PCIe only, links
// down, GPUs hidden from CUDA, an NVML without the topology calls, and failing calls.
#include <gtest/gtest.h>

#include <string>

#include "probe/probe.h"
#include "probe/testing/fake_gpu.h"

namespace parallax {
namespace {

using testing::fake;
using testing::FakeDevice;
using testing::FakeLink;

class TopologyTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::reset_fake(); }
  LoadedApi<cuda::Api> driver() { return {&cuda_api_, "/fake/libcuda.so.1", ""}; }
  LoadedApi<nvml::Api> nvml() { return {&nvml_api_, "/fake/libnvidia-ml.so.1", ""}; }
  static LoadedApi<cuda::Api> no_driver() { return {nullptr, "", "could not load libcuda.so.1: not found"}; }

  cuda::Api cuda_api_ = testing::fake_cuda_api();
  nvml::Api nvml_api_ = testing::fake_nvml_api();
};

std::string bus(int n) {
  char text[32];
  std::snprintf(text, sizeof text, "%02X", n);
  return text;
}

FakeDevice gpu_on_bus(int n) {
  FakeDevice d;
  d.uuid[15] = static_cast<unsigned char>(n);
  d.cuda_bus_id = "0000:" + bus(n) + ":00.0";
  d.nvml_bus_id = "00000000:" + bus(n) + ":00.0";
  return d;
}

std::vector<FakeLink> switch_links(unsigned n, const std::string& switch_bus = "00000000:C0:00.0") {
  return std::vector<FakeLink>(n, FakeLink{true, switch_bus, nvml::NVML_NVLINK_DEVICE_TYPE_SWITCH});
}

// An HGX H200 board cut to four GPUs: 18 links each, all to NVSwitch; GPUs 0-1 under one CPU,
// 2-3 under the other. CUDA numbers them in the reverse order of NVML.
void script_hgx() {
  std::vector<FakeDevice> gpus;
  for (int n : {0x19, 0x3B, 0x9A, 0xBA}) {
    FakeDevice d = gpu_on_bus(n);
    d.nvlinks = switch_links(18);
    gpus.push_back(d);
  }
  fake().nvml_devices = gpus;
  fake().cuda_devices = {gpus[3], gpus[2], gpus[1], gpus[0]};
  fake().ancestors[{gpus[0].nvml_bus_id, gpus[1].nvml_bus_id}] = nvml::NVML_TOPOLOGY_NODE;
  fake().ancestors[{gpus[2].nvml_bus_id, gpus[3].nvml_bus_id}] = nvml::NVML_TOPOLOGY_NODE;
  fake().default_ancestor = nvml::NVML_TOPOLOGY_SYSTEM;
  fake().default_p2p_nvlink = nvml::NVML_P2P_STATUS_OK;
}

const GpuPair& pair_of(const ProbeResult& r, int a, int b) {
  for (const auto& p : r.topology.pairs)
    if (p.a == a && p.b == b) return p;
  throw std::runtime_error("no pair " + std::to_string(a) + "-" + std::to_string(b));
}

TEST_F(TopologyTest, NvSwitchBoardJoinsEveryPairOverAllLinksByCudaOrdinal) {
  script_hgx();
  ProbeResult r = probe_gpus(driver(), nvml());
  EXPECT_TRUE(r.topology.available);
  EXPECT_EQ(r.topology.error, "");
  ASSERT_EQ(r.topology.pairs.size(), 6u);
  const int expected[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  for (int i = 0; i < 6; ++i) {
    const GpuPair& p = r.topology.pairs[i];
    EXPECT_EQ(p.a, expected[i][0]);
    EXPECT_EQ(p.b, expected[i][1]);
    EXPECT_EQ(p.nvlinks, 18u);
    EXPECT_TRUE(p.via_nvswitch);
    EXPECT_EQ(p.p2p_nvlink, true);
    EXPECT_EQ(connection_code(p), "NV18");
    EXPECT_EQ(p.error, "");
  }
  // CUDA 0 and 1 are NVML 3 and 2: the second CPU's pair.
  EXPECT_EQ(pair_of(r, 0, 1).common_ancestor, nvml::NVML_TOPOLOGY_NODE);
  EXPECT_EQ(pair_of(r, 2, 3).common_ancestor, nvml::NVML_TOPOLOGY_NODE);
  EXPECT_EQ(pair_of(r, 1, 2).common_ancestor, nvml::NVML_TOPOLOGY_SYSTEM);
  ASSERT_TRUE(r.devices[0].nvlink.has_value());
  const NvLinkInfo& links = *r.devices[0].nvlink;
  EXPECT_EQ(links.links, 18u);
  EXPECT_EQ(links.active, 18u);
  EXPECT_EQ(links.to_nvswitch, 18u);
  ASSERT_EQ(links.peers.size(), 18u);
  EXPECT_EQ(links.peers[17].link, 17u);
  EXPECT_EQ(links.peers[0].remote_pci_bus_id, "0000:C0:00.0");
  EXPECT_EQ(links.peers[0].remote_type, nvml::NVML_NVLINK_DEVICE_TYPE_SWITCH);
  EXPECT_EQ(links.error, "");
  EXPECT_EQ(fake().nvml_shutdowns, 1);  // the topology is read before NVML is shut down
}

TEST_F(TopologyTest, EveryLinkIsAskedAndNoMore) {
  script_hgx();
  fake().nvml_devices.resize(1);
  fake().cuda_devices = {fake().nvml_devices[0]};
  probe_gpus(driver(), nvml());
  ASSERT_EQ(fake().nvlink_state_calls.size(), nvml::NVML_NVLINK_MAX_LINKS);
  EXPECT_EQ(fake().nvlink_state_calls.back(), nvml::NVML_NVLINK_MAX_LINKS - 1);
}

TEST_F(TopologyTest, GpusHiddenFromCudaLeaveTheirPairsOut) {
  script_hgx();
  fake().cuda_devices = {fake().nvml_devices[2], fake().nvml_devices[0]};  // CUDA_VISIBLE_DEVICES=2,0
  ProbeResult r = probe_gpus(driver(), nvml());
  ASSERT_EQ(r.topology.pairs.size(), 1u);
  const GpuPair& p = r.topology.pairs[0];
  EXPECT_EQ(p.a, 0);
  EXPECT_EQ(p.b, 1);
  EXPECT_EQ(p.common_ancestor, nvml::NVML_TOPOLOGY_SYSTEM);
  EXPECT_EQ(p.nvlinks, 18u);
}

TEST_F(TopologyTest, NvLinkBridgesJoinOnlyTheirOwnPair) {
  // Four H200 NVL cards, bridged in pairs (0-1, 2-3) with 4 links; 0-1 and 2-3 under one PCIe
  // switch each, the two switches under one host bridge.
  std::vector<FakeDevice> gpus;
  for (int n : {0x19, 0x1A, 0x3B, 0x3C}) gpus.push_back(gpu_on_bus(n));
  for (int i = 0; i < 4; ++i) {
    const std::string& other = gpus[i ^ 1].nvml_bus_id;
    gpus[i].nvlinks = std::vector<FakeLink>(4, FakeLink{true, other, nvml::NVML_NVLINK_DEVICE_TYPE_GPU});
  }
  gpus[3].nvlinks[2].active = false;  // one link of GPU 3 down
  fake().nvml_devices = gpus;
  fake().cuda_devices = gpus;
  fake().ancestors[{gpus[0].nvml_bus_id, gpus[1].nvml_bus_id}] = nvml::NVML_TOPOLOGY_SINGLE;
  fake().ancestors[{gpus[2].nvml_bus_id, gpus[3].nvml_bus_id}] = nvml::NVML_TOPOLOGY_SINGLE;
  fake().default_ancestor = nvml::NVML_TOPOLOGY_HOSTBRIDGE;
  fake().p2p_nvlink[{gpus[0].nvml_bus_id, gpus[1].nvml_bus_id}] = nvml::NVML_P2P_STATUS_OK;
  fake().p2p_nvlink[{gpus[2].nvml_bus_id, gpus[3].nvml_bus_id}] = nvml::NVML_P2P_STATUS_OK;

  ProbeResult r = probe_gpus(driver(), nvml());
  ASSERT_EQ(r.topology.pairs.size(), 6u);
  const GpuPair& bridged = pair_of(r, 0, 1);
  EXPECT_EQ(bridged.nvlinks, 4u);
  EXPECT_FALSE(bridged.via_nvswitch);
  EXPECT_EQ(bridged.p2p_nvlink, true);
  EXPECT_EQ(connection_code(bridged), "NV4");
  EXPECT_EQ(pcie_path_code(*bridged.common_ancestor), "PIX");
  EXPECT_EQ(pair_of(r, 2, 3).nvlinks, 4u);  // GPU 2 still has all four to GPU 3
  const GpuPair& across = pair_of(r, 1, 2);
  EXPECT_EQ(across.nvlinks, 0u);
  EXPECT_EQ(across.p2p_nvlink, false);
  EXPECT_EQ(connection_code(across), "PHB");
  EXPECT_EQ(r.devices[3].nvlink->links, 4u);
  EXPECT_EQ(r.devices[3].nvlink->active, 3u);
  EXPECT_EQ(r.devices[3].nvlink->peers.size(), 3u);
  EXPECT_EQ(r.devices[3].nvlink->peers[2].link, 3u);
  EXPECT_EQ(r.devices[3].nvlink->to_nvswitch, 0u);
}

TEST_F(TopologyTest, PcieOnlyGpusHaveNoNvLinkAndSayWhy) {
  FakeDevice a = gpu_on_bus(0x19), b = gpu_on_bus(0x3B);
  fake().nvml_devices = {a, b};
  fake().cuda_devices = {a, b};
  fake().default_ancestor = nvml::NVML_TOPOLOGY_MULTIPLE;
  ProbeResult r = probe_gpus(driver(), nvml());
  ASSERT_EQ(r.topology.pairs.size(), 1u);
  const GpuPair& p = r.topology.pairs[0];
  EXPECT_EQ(p.nvlinks, 0u);
  EXPECT_FALSE(p.via_nvswitch);
  EXPECT_EQ(p.p2p_nvlink, false);
  EXPECT_EQ(connection_code(p), "PXB");
  const NvLinkInfo& links = *r.devices[0].nvlink;
  EXPECT_EQ(links.links, 0u);
  EXPECT_EQ(links.active, 0u);
  EXPECT_TRUE(links.peers.empty());
  EXPECT_EQ(links.error, "nvmlDeviceGetNvLinkState failed: Not Supported");
}

TEST_F(TopologyTest, SwitchLinksWithoutNvLinkPeerAccessDoNotJoinThePair) {
  script_hgx();
  fake().default_p2p_nvlink = nvml::NVML_P2P_STATUS_NOT_SUPPORTED;  // e.g. separate NVLink partitions
  ProbeResult r = probe_gpus(driver(), nvml());
  for (const auto& p : r.topology.pairs) {
    EXPECT_EQ(p.nvlinks, 0u);
    EXPECT_EQ(p.p2p_nvlink, false);
  }
  EXPECT_EQ(connection_code(pair_of(r, 0, 1)), "NODE");
  EXPECT_EQ(connection_code(pair_of(r, 0, 3)), "SYS");
}

TEST_F(TopologyTest, AnOlderNvmlWithoutRemoteTypesInfersSwitchesFromTheBus) {
  script_hgx();
  nvml_api_.nvmlDeviceGetNvLinkRemoteDeviceType = nullptr;
  nvml_api_.nvmlDeviceGetP2PStatus = nullptr;
  ProbeResult r = probe_gpus(driver(), nvml());
  const GpuPair& p = pair_of(r, 0, 1);
  EXPECT_EQ(p.nvlinks, 18u);
  EXPECT_TRUE(p.via_nvswitch);
  EXPECT_EQ(p.p2p_nvlink, std::nullopt);
  EXPECT_EQ(r.devices[0].nvlink->peers[0].remote_type, std::nullopt);
  EXPECT_EQ(r.devices[0].nvlink->to_nvswitch, 18u);
}

TEST_F(TopologyTest, AnNvmlWithoutTheTopologyCallsStillReportsItsDevices) {
  script_hgx();
  nvml_api_.nvmlDeviceGetTopologyCommonAncestor = nullptr;
  nvml_api_.nvmlDeviceGetNvLinkState = nullptr;
  nvml_api_.nvmlDeviceGetNvLinkRemotePciInfo = nullptr;
  ProbeResult r = probe_gpus(driver(), nvml());
  EXPECT_TRUE(r.nvml.available);
  EXPECT_FALSE(r.topology.available);
  EXPECT_EQ(r.topology.error, "/fake/libnvidia-ml.so.1 lacks nvmlDeviceGetTopologyCommonAncestor");
  EXPECT_TRUE(r.topology.pairs.empty());
  ASSERT_EQ(r.devices.size(), 4u);
  EXPECT_EQ(r.devices[0].clock_sm_mhz, 1980u);
  EXPECT_EQ(r.devices[0].nvlink->links, 0u);
  EXPECT_EQ(r.devices[0].nvlink->error, "this NVML lacks nvmlDeviceGetNvLinkState");
}

TEST_F(TopologyTest, AFailingAncestorCallIsNamedAndLeavesTheNvLinksKnown) {
  script_hgx();
  fake().ancestor_result = nvml::NVML_ERROR_NOT_SUPPORTED;
  ProbeResult r = probe_gpus(driver(), nvml());
  EXPECT_TRUE(r.topology.available);
  const GpuPair& p = pair_of(r, 0, 1);
  EXPECT_EQ(p.common_ancestor, std::nullopt);
  EXPECT_EQ(p.error, "nvmlDeviceGetTopologyCommonAncestor failed: Not Supported");
  EXPECT_EQ(connection_code(p), "NV18");
  GpuPair pcie_only;
  pcie_only.error = p.error;
  EXPECT_EQ(connection_code(pcie_only), "?");
}

TEST_F(TopologyTest, OneGpuHasATopologyWithoutPairs) {
  ProbeResult r = probe_gpus(driver(), nvml());
  EXPECT_TRUE(r.topology.available);
  EXPECT_EQ(r.topology.error, "");
  EXPECT_TRUE(r.topology.pairs.empty());
  EXPECT_EQ(r.devices[0].nvlink->error, "nvmlDeviceGetNvLinkState failed: Not Supported");
}

TEST_F(TopologyTest, WithoutTheDriverPairsAreNumberedByNvml) {
  script_hgx();
  ProbeResult r = probe_gpus(no_driver(), nvml());
  ASSERT_EQ(r.topology.pairs.size(), 6u);
  EXPECT_EQ(pair_of(r, 0, 1).common_ancestor, nvml::NVML_TOPOLOGY_NODE);  // NVML 0 and 1
  EXPECT_EQ(pair_of(r, 1, 2).common_ancestor, nvml::NVML_TOPOLOGY_SYSTEM);
  EXPECT_EQ(r.devices[1].pci_bus_id, "0000:3B:00.0");
}

TEST_F(TopologyTest, WithoutNvmlTheTopologyCarriesItsError) {
  ProbeResult r = probe_gpus(driver(), {nullptr, "", "could not load libnvidia-ml.so.1: not found"});
  EXPECT_FALSE(r.topology.available);
  EXPECT_EQ(r.topology.error, "could not load libnvidia-ml.so.1: not found");
  EXPECT_TRUE(r.topology.pairs.empty());
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].nvlink, std::nullopt);

  fake().nvml_init_result = nvml::NVML_ERROR_DRIVER_NOT_LOADED;
  r = probe_gpus(driver(), nvml());
  EXPECT_FALSE(r.topology.available);
  EXPECT_EQ(r.topology.error, "nvmlInit_v2 failed: Driver Not Loaded");
}

TEST(TopologyNames, LevelsCodesAndDeviceTypes) {
  EXPECT_EQ(topology_level_name(nvml::NVML_TOPOLOGY_INTERNAL), "internal");
  EXPECT_EQ(topology_level_name(nvml::NVML_TOPOLOGY_SINGLE), "single");
  EXPECT_EQ(topology_level_name(nvml::NVML_TOPOLOGY_MULTIPLE), "multiple");
  EXPECT_EQ(topology_level_name(nvml::NVML_TOPOLOGY_HOSTBRIDGE), "hostbridge");
  EXPECT_EQ(topology_level_name(nvml::NVML_TOPOLOGY_NODE), "node");
  EXPECT_EQ(topology_level_name(nvml::NVML_TOPOLOGY_SYSTEM), "system");
  EXPECT_EQ(topology_level_name(7), "unknown");
  EXPECT_EQ(pcie_path_code(nvml::NVML_TOPOLOGY_INTERNAL), "BOARD");
  EXPECT_EQ(pcie_path_code(nvml::NVML_TOPOLOGY_SINGLE), "PIX");
  EXPECT_EQ(pcie_path_code(nvml::NVML_TOPOLOGY_MULTIPLE), "PXB");
  EXPECT_EQ(pcie_path_code(nvml::NVML_TOPOLOGY_HOSTBRIDGE), "PHB");
  EXPECT_EQ(pcie_path_code(nvml::NVML_TOPOLOGY_NODE), "NODE");
  EXPECT_EQ(pcie_path_code(nvml::NVML_TOPOLOGY_SYSTEM), "SYS");
  EXPECT_EQ(pcie_path_code(60), "?");
  EXPECT_EQ(nvlink_device_type_name(nvml::NVML_NVLINK_DEVICE_TYPE_GPU), "gpu");
  EXPECT_EQ(nvlink_device_type_name(nvml::NVML_NVLINK_DEVICE_TYPE_SWITCH), "nvswitch");
  EXPECT_EQ(nvlink_device_type_name(nvml::NVML_NVLINK_DEVICE_TYPE_IBMNPU), "ibm-npu");
  EXPECT_EQ(nvlink_device_type_name(nvml::NVML_NVLINK_DEVICE_TYPE_UNKNOWN), "unknown");
}

}  // namespace
}  // namespace parallax

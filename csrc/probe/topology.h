#pragma once
// How the GPUs of one machine are joined, read through NVML: the NVLinks of each GPU and, for
// every pair, what their PCIe paths have in common and how many NVLinks join them.
//
// NVML numbers GPUs its own way and sees those that CUDA_VISIBLE_DEVICES hides, so everything
// here is read over NVML's devices; probe_gpus() then keeps the pairs of the devices CUDA shows
// and renumbers them by CUDA ordinal (matched by PCI bus id, as the rest of the probe is).
//
// Two GPUs are joined by NVLink directly (a link whose far end is the other GPU: NVLink
// bridges, HGX boards before NVSwitch) or through NVSwitch (HGX/DGX H100/H200/B200: every link
// of every GPU ends at a switch, so every pair talks over all of them). nvidia-smi topo -m
// shows both as NV<links>; a pair without NVLink shows its PCIe path (PIX, PXB, PHB, NODE, SYS).
#include <optional>
#include <string>
#include <vector>

#include "probe/nvml_api.h"

namespace parallax {

struct NvLinkPeer {
  unsigned link = 0;
  std::optional<std::string> remote_pci_bus_id;  // "0000:3B:00.0" form; empty when NVML did not say
  std::optional<int> remote_type;                // NVML_NVLINK_DEVICE_TYPE_*; empty when NVML lacks the call
};

struct NvLinkInfo {
  unsigned links = 0;        // links whose state NVML reported (the GPU's NVLink ports)
  unsigned active = 0;       // of those, up
  unsigned to_nvswitch = 0;  // active links whose far end is an NVSwitch
  std::vector<NvLinkPeer> peers;  // one per active link
  std::string error;         // why no link answered (e.g. no NVLink on this GPU); empty otherwise
};

struct GpuPair {
  int a = 0, b = 0;                      // device indices, a < b
  std::optional<int> common_ancestor;    // nvmlGpuTopologyLevel_t; empty when the call failed
  unsigned nvlinks = 0;                  // NVLinks joining the two (direct, or through NVSwitch)
  bool via_nvswitch = false;
  std::optional<bool> p2p_nvlink;        // NVML's P2P status over NVLink is OK; empty when unknown
  std::string error;                     // the failed call, when common_ancestor is empty
};

struct TopologyStatus {
  bool available = false;  // NVML answered and has nvmlDeviceGetTopologyCommonAncestor
  std::string error;       // why not; empty when available
  std::vector<GpuPair> pairs;
};

// The state of every link of one GPU, and what each active link reaches.
NvLinkInfo read_nvlink(const nvml::Api& api, nvml::nvmlDevice_t device);

// Fills each device's ``to_nvswitch``. Where NVML does not say what a link reaches, a link that
// ends at none of ``bus_ids`` (the machine's GPUs) ends at a switch.
void count_switch_links(std::vector<std::optional<NvLinkInfo>>& nvlinks,
                        const std::vector<std::optional<std::string>>& bus_ids);

// Every pair (i < j) of the given NVML devices. ``bus_ids`` and ``nvlinks`` are the devices'
// canonical PCI bus ids and NVLink states (same order as ``handles``, ``to_nvswitch`` counted);
// an empty bus id or NVLink state makes its links unmatched, never an error.
std::vector<GpuPair> read_pairs(const nvml::Api& api, const std::vector<nvml::nvmlDevice_t>& handles,
                                const std::vector<std::optional<std::string>>& bus_ids,
                                const std::vector<std::optional<NvLinkInfo>>& nvlinks);

// NVML's name of a topology level ("internal", "single", "multiple", "hostbridge", "node",
// "system"), "unknown" for any other value.
std::string topology_level_name(int level);
// nvidia-smi topo -m's code of a level: "BOARD" (same board; nvidia-smi has no code), "PIX",
// "PXB", "PHB", "NODE", "SYS"; "?" for an unknown level.
std::string pcie_path_code(int level);
// What nvidia-smi topo -m would show for the pair: "NV<n>" when NVLink joins them, else the
// PCIe path code ("?" when even that is unknown).
std::string connection_code(const GpuPair& pair);
// "gpu", "nvswitch", "ibm-npu", "unknown".
std::string nvlink_device_type_name(int type);

}  // namespace parallax

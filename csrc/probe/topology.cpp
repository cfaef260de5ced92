#include "probe/topology.h"

#include <algorithm>

#include "probe/probe.h"

namespace parallax {

namespace {

std::optional<std::string> canonical(const char* text) {
  auto address = parse_pci_bus_id(text);
  if (!address) return std::nullopt;
  return format_pci_bus_id(*address);
}

// Where the remote type is unknown (an NVML without nvmlDeviceGetNvLinkRemoteDeviceType), a
// link that does not end at one of the machine's GPUs ends at a switch.
bool ends_at_switch(const NvLinkPeer& peer, const std::vector<std::optional<std::string>>& gpu_buses) {
  if (peer.remote_type) return *peer.remote_type == nvml::NVML_NVLINK_DEVICE_TYPE_SWITCH;
  if (!peer.remote_pci_bus_id) return false;
  return std::find(gpu_buses.begin(), gpu_buses.end(), peer.remote_pci_bus_id) == gpu_buses.end();
}

unsigned direct_links(const NvLinkInfo& from, const std::optional<std::string>& to_bus) {
  if (!to_bus) return 0;
  unsigned n = 0;
  for (const auto& peer : from.peers) {
    const bool gpu = !peer.remote_type || *peer.remote_type == nvml::NVML_NVLINK_DEVICE_TYPE_GPU;
    if (gpu && peer.remote_pci_bus_id == to_bus) ++n;
  }
  return n;
}

}  // namespace

NvLinkInfo read_nvlink(const nvml::Api& api, nvml::nvmlDevice_t device) {
  NvLinkInfo info;
  if (api.nvmlDeviceGetNvLinkState == nullptr) {
    info.error = "this NVML lacks nvmlDeviceGetNvLinkState";
    return info;
  }
  nvml::nvmlReturn_t first_error = nvml::NVML_SUCCESS;
  // Links past the GPU's last answer NVML_ERROR_INVALID_ARGUMENT (or NOT_SUPPORTED); a GPU
  // without NVLink answers so for link 0. Every link is asked: a port may be absent mid-range.
  for (unsigned link = 0; link < nvml::NVML_NVLINK_MAX_LINKS; ++link) {
    int state = nvml::NVML_FEATURE_DISABLED;
    nvml::nvmlReturn_t rc = api.nvmlDeviceGetNvLinkState(device, link, &state);
    if (rc != nvml::NVML_SUCCESS) {
      if (first_error == nvml::NVML_SUCCESS) first_error = rc;
      continue;
    }
    ++info.links;
    if (state != nvml::NVML_FEATURE_ENABLED) continue;
    ++info.active;
    NvLinkPeer peer;
    peer.link = link;
    nvml::nvmlPciInfo_t pci{};
    if (api.nvmlDeviceGetNvLinkRemotePciInfo != nullptr &&
        api.nvmlDeviceGetNvLinkRemotePciInfo(device, link, &pci) == nvml::NVML_SUCCESS)
      peer.remote_pci_bus_id = canonical(pci.busId);
    int type = nvml::NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    if (api.nvmlDeviceGetNvLinkRemoteDeviceType != nullptr &&
        api.nvmlDeviceGetNvLinkRemoteDeviceType(device, link, &type) == nvml::NVML_SUCCESS)
      peer.remote_type = type;
    info.peers.push_back(peer);
  }
  if (info.links == 0) info.error = nvml::call_error(api, "nvmlDeviceGetNvLinkState", first_error);
  return info;
}

void count_switch_links(std::vector<std::optional<NvLinkInfo>>& nvlinks,
                        const std::vector<std::optional<std::string>>& bus_ids) {
  for (auto& info : nvlinks) {
    if (!info) continue;
    info->to_nvswitch = 0;
    for (const auto& peer : info->peers) info->to_nvswitch += ends_at_switch(peer, bus_ids) ? 1 : 0;
  }
}

std::vector<GpuPair> read_pairs(const nvml::Api& api, const std::vector<nvml::nvmlDevice_t>& handles,
                                const std::vector<std::optional<std::string>>& bus_ids,
                                const std::vector<std::optional<NvLinkInfo>>& nvlinks) {
  std::vector<GpuPair> pairs;
  const size_t n = handles.size();
  std::vector<unsigned> switch_links(n, 0);
  for (size_t i = 0; i < n; ++i) switch_links[i] = nvlinks[i] ? nvlinks[i]->to_nvswitch : 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      GpuPair pair;
      pair.a = static_cast<int>(i);
      pair.b = static_cast<int>(j);
      int level = 0;
      if (api.nvmlDeviceGetTopologyCommonAncestor == nullptr) {
        pair.error = "this NVML lacks nvmlDeviceGetTopologyCommonAncestor";
      } else if (nvml::nvmlReturn_t rc = api.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j], &level);
                 rc == nvml::NVML_SUCCESS) {
        pair.common_ancestor = level;
      } else {
        pair.error = nvml::call_error(api, "nvmlDeviceGetTopologyCommonAncestor", rc);
      }
      int status = nvml::NVML_P2P_STATUS_NOT_SUPPORTED;
      if (api.nvmlDeviceGetP2PStatus != nullptr &&
          api.nvmlDeviceGetP2PStatus(handles[i], handles[j], nvml::NVML_P2P_CAPS_INDEX_NVLINK, &status) ==
              nvml::NVML_SUCCESS)
        pair.p2p_nvlink = status == nvml::NVML_P2P_STATUS_OK;
      const unsigned direct = nvlinks[i] && nvlinks[j]
                                  ? std::max(direct_links(*nvlinks[i], bus_ids[j]), direct_links(*nvlinks[j], bus_ids[i]))
                                  : 0;
      if (direct > 0) {
        pair.nvlinks = direct;
      } else if (switch_links[i] > 0 && switch_links[j] > 0 && pair.p2p_nvlink.value_or(true)) {
        // Both reach the NVSwitch fabric: each talks to the other over all its switch links,
        // limited by the one with fewer (nvidia-smi shows NV18 between two H100s of an HGX board).
        pair.nvlinks = std::min(switch_links[i], switch_links[j]);
        pair.via_nvswitch = true;
      }
      pairs.push_back(pair);
    }
  }
  return pairs;
}

std::string topology_level_name(int level) {
  switch (level) {
    case nvml::NVML_TOPOLOGY_INTERNAL: return "internal";
    case nvml::NVML_TOPOLOGY_SINGLE: return "single";
    case nvml::NVML_TOPOLOGY_MULTIPLE: return "multiple";
    case nvml::NVML_TOPOLOGY_HOSTBRIDGE: return "hostbridge";
    case nvml::NVML_TOPOLOGY_NODE: return "node";
    case nvml::NVML_TOPOLOGY_SYSTEM: return "system";
    default: return "unknown";
  }
}

std::string pcie_path_code(int level) {
  switch (level) {
    case nvml::NVML_TOPOLOGY_INTERNAL: return "BOARD";
    case nvml::NVML_TOPOLOGY_SINGLE: return "PIX";
    case nvml::NVML_TOPOLOGY_MULTIPLE: return "PXB";
    case nvml::NVML_TOPOLOGY_HOSTBRIDGE: return "PHB";
    case nvml::NVML_TOPOLOGY_NODE: return "NODE";
    case nvml::NVML_TOPOLOGY_SYSTEM: return "SYS";
    default: return "?";
  }
}

std::string connection_code(const GpuPair& pair) {
  if (pair.nvlinks > 0) return "NV" + std::to_string(pair.nvlinks);
  return pair.common_ancestor ? pcie_path_code(*pair.common_ancestor) : "?";
}

std::string nvlink_device_type_name(int type) {
  switch (type) {
    case nvml::NVML_NVLINK_DEVICE_TYPE_GPU: return "gpu";
    case nvml::NVML_NVLINK_DEVICE_TYPE_SWITCH: return "nvswitch";
    case nvml::NVML_NVLINK_DEVICE_TYPE_IBMNPU: return "ibm-npu";
    default: return "unknown";
  }
}

}  // namespace parallax

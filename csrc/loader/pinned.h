#pragma once
// Page-locks host buffers with the CUDA driver (cuMemHostRegister) so that host-to-device
// copies of batches run as DMA without a staging copy. The driver is opened at run time:
// without it (or without a GPU) buffers stay pageable and status() says why.
#include <cstddef>
#include <memory>
#include <string>

namespace parallax::loader {

class HostPinner {
 public:
  // Opens the driver and retains device 0's primary context when `enabled`.
  explicit HostPinner(bool enabled);
  ~HostPinner();
  HostPinner(const HostPinner&) = delete;
  HostPinner& operator=(const HostPinner&) = delete;

  bool available() const;
  // "pinned (cuMemHostRegister)", or why buffers are pageable.
  const std::string& status() const { return status_; }
  // True when the range is now page-locked; false leaves it pageable (status_ says why).
  bool pin(void* ptr, size_t bytes);
  void unpin(void* ptr);

 private:
  struct Driver;
  std::unique_ptr<Driver> driver_;
  std::string status_;
};

}  // namespace parallax::loader

#pragma once
// Page-locks host buffers with the CUDA driver (cuMemHostRegister) so that host-to-device
// copies of batches run as DMA without a staging copy. The driver is opened at run time:
// without it (or without a GPU) buffers stay pageable and status() says why.
//
// The registration is PORTABLE, so every context (torch's and JAX's use device 0's primary
// context, the one retained here) sees the range as page-locked. page_locked() asks the
// driver itself; torch's Tensor.is_pinned() is no such check: it answers False for every
// pointer until torch has initialised CUDA (at::Context::isPinnedPtr, since pytorch#145752).
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
  // True when the driver reports the first and the last byte of the range as page-locked host
  // memory (cuPointerGetAttribute, CU_POINTER_ATTRIBUTE_MEMORY_TYPE == CU_MEMORYTYPE_HOST):
  // registered or allocated pinned by any CUDA user of this process. False without a driver.
  bool page_locked(const void* ptr, size_t bytes) const;

 private:
  struct Driver;
  std::unique_ptr<Driver> driver_;
  std::string status_;
};

}  // namespace parallax::loader

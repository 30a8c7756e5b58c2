// Device memory of the current CUDA device: a grow-only buffer and plain copies. Every runtime
// call is checked (CUDA_CHECK).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace spindle::kernels::cuda {

// A grow-only device allocation (cudaMalloc), freed on destruction. Not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { reserve(bytes); }
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  // Ensures at least `bytes` are allocated (contents are lost when it grows; every growth bumps
  // reallocation_epoch(), unless this buffer was marked outside_graphs()).
  void reserve(size_t bytes);
  // This buffer is never read or written by a captured CUDA graph (e.g. the sampler's): its
  // growth leaves the graphs valid.
  void mark_outside_graphs() { outside_graphs_ = true; }
  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool outside_graphs_ = false;
};

// How many times any DeviceBuffer of the process was (re)allocated. A captured CUDA graph holds
// raw device pointers: it is valid only while the epoch it was captured at holds.
uint64_t reallocation_epoch();

// Synchronous copies (the legacy default stream): host -> device, device -> host.
void copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
// cudaMemset(0) of `bytes` device bytes, synchronous.
void fill_zero(void* device_dst, size_t bytes);
// cudaDeviceSynchronize, checked: surfaces errors of kernels queued earlier.
void synchronize_device();

}  // namespace spindle::kernels::cuda

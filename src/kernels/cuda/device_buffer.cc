#include "kernels/cuda/device_buffer.h"

#include <atomic>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace spindle::kernels::cuda {
namespace {
std::atomic<uint64_t> g_epoch{0};
}  // namespace

uint64_t reallocation_epoch() { return g_epoch.load(std::memory_order_relaxed); }

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);  // no throw from a destructor
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      outside_graphs_(other.outside_graphs_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    outside_graphs_ = other.outside_graphs_;
  }
  return *this;
}

void DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  if (data_ != nullptr) {
    // Work queued earlier may still read the old memory (the overlap schedule queues the next step
    // before the last one finished): growth is rare, so wait for all of it.
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(data_));
    data_ = nullptr;
    bytes_ = 0;
  }
  if (!outside_graphs_) g_epoch.fetch_add(1, std::memory_order_relaxed);
  CUDA_CHECK(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
}

void copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
}

void fill_zero(void* device_dst, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemset(device_dst, 0, bytes));
  CUDA_CHECK(cudaDeviceSynchronize());
}

void synchronize_device() { CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace spindle::kernels::cuda

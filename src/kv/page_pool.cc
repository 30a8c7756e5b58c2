#include "kv/page_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "util/error.h"

#ifdef SPINDLE_WITH_CUDA
#include "kernels/cuda/device_buffer.h"
#endif

namespace spindle::kv {

#ifdef SPINDLE_WITH_CUDA
struct PagePool::DeviceMemory {
  kernels::cuda::DeviceBuffer buffer;
  kernels::cuda::DeviceBuffer scales;  // FP8: k then v scales, [2, num_layers, num_kv_heads] f32
};
#else
struct PagePool::DeviceMemory {};
#endif
namespace {

constexpr uint64_t kArrayAlignment = 4096;

uint64_t round_up(uint64_t n, uint64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

PagePool::PagePool(const KvLayout& layout, int num_pages, int dp_size, attn::Device device)
    : layout_(layout), device_(device), num_pages_(num_pages) {
  layout_.check();
  SPINDLE_CHECK(dp_size >= 1, "--dp-size {} must be at least 1", dp_size);
  SPINDLE_CHECK(num_pages > 0 && num_pages % dp_size == 0,
                "the KV pool needs a positive number of pages that is a multiple of --dp-size {} (got {})", dp_size,
                num_pages);
  array_stride_ = round_up(uint64_t(num_pages) * layout_.bytes_per_layer_page(), kArrayAlignment);
  mapped_bytes_ = static_cast<size_t>(array_stride_ * 2 * uint64_t(layout_.num_layers));
  if (device == attn::Device::kCuda) {
#ifdef SPINDLE_WITH_CUDA
    device_memory_ = std::make_unique<DeviceMemory>();
    try {
      device_memory_->buffer.reserve(mapped_bytes_);
      kernels::cuda::fill_zero(device_memory_->buffer.data(), mapped_bytes_);
    } catch (const Error& e) {
      SPINDLE_FAIL("cannot allocate {} bytes of CUDA memory for the KV cache ({} pages): {}", mapped_bytes_,
                   num_pages, e.what());
    }
    memory_ = device_memory_->buffer.data();
#else
    SPINDLE_FAIL("cannot place the KV cache on a CUDA device: this spindle was built without CUDA");
#endif
  } else {
    void* memory =
        mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    SPINDLE_CHECK(memory != MAP_FAILED, "cannot map {} bytes for the KV cache ({} pages): {}", mapped_bytes_,
                  num_pages, std::strerror(errno));
    memory_ = memory;
  }
  if (layout_.dtype == DType::kF8E4M3) {
    set_kv_scales(KvScales::uniform(layout_.num_layers, layout_.num_kv_heads, 1.0f, "1.0 (default)"));
  }
  for (int r = 0; r < dp_size; ++r) {
    allocators_.push_back(
        std::make_unique<PageAllocator>(rank_page_range(num_pages, dp_size, r).count, layout_.page_size));
    if (device == attn::Device::kCpu) allocators_.back()->set_releaser(this, r);
  }
}

void PagePool::release_page_memory(int rank, std::span<const int32_t> pages) {
  if (device_ != attn::Device::kCpu || pages.empty()) return;
  static const uint64_t os_page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t chunk = layout_.bytes_per_layer_page();
  const int first = first_page(rank);
  // Runs of consecutive ids, each one madvise per K or V array.
  for (size_t i = 0; i < pages.size();) {
    size_t j = i + 1;
    while (j < pages.size() && pages[j] == pages[j - 1] + 1) ++j;
    const uint64_t begin = uint64_t(first + pages[i]) * chunk;
    const uint64_t end = uint64_t(first + pages[j - 1] + 1) * chunk;
    const uint64_t aligned_begin = round_up(begin, os_page);
    const uint64_t aligned_end = end / os_page * os_page;
    if (aligned_end > aligned_begin) {
      for (uint64_t a = 0; a < 2 * uint64_t(layout_.num_layers); ++a) {
        std::byte* base = static_cast<std::byte*>(memory_) + array_stride_ * a;
        // A failure leaves the memory resident (the pages stay correct): counted, never thrown, as
        // this runs from BlockTable::free() in destructors.
        if (madvise(base + aligned_begin, aligned_end - aligned_begin, MADV_DONTNEED) != 0) {
          ++num_release_failures_;
          return;
        }
      }
      num_released_bytes_ += 2 * uint64_t(layout_.num_layers) * (aligned_end - aligned_begin);
    }
    i = j;
  }
}

void PagePool::set_kv_scales(const KvScales& scales) {
  SPINDLE_CHECK(layout_.dtype == DType::kF8E4M3, "KV scales are for an fp8_e4m3 KV cache; this one is {}",
                kv_cache_dtype_name(layout_.dtype));
  const size_t n = size_t(layout_.num_layers) * size_t(layout_.num_kv_heads);
  SPINDLE_CHECK(scales.num_layers == layout_.num_layers && scales.num_kv_heads == layout_.num_kv_heads &&
                    scales.k.size() == n && scales.v.size() == n,
                "KV scales for {} layers x {} KV heads do not fit the KV cache's {} x {}", scales.num_layers,
                scales.num_kv_heads, layout_.num_layers, layout_.num_kv_heads);
  for (size_t i = 0; i < n; ++i) {
    SPINDLE_CHECK(std::isfinite(scales.k[i]) && scales.k[i] > 0.0f && std::isfinite(scales.v[i]) && scales.v[i] > 0.0f,
                  "KV scale of layer {} KV head {} must be positive and finite (k {}, v {})", i / layout_.num_kv_heads,
                  i % layout_.num_kv_heads, scales.k[i], scales.v[i]);
  }
  scales_ = scales;
  host_scales_.assign(scales_.k.begin(), scales_.k.end());
  host_scales_.insert(host_scales_.end(), scales_.v.begin(), scales_.v.end());
  scales_memory_ = host_scales_.data();
  if (device_ == attn::Device::kCuda) {
#ifdef SPINDLE_WITH_CUDA
    device_memory_->scales.reserve(host_scales_.size() * sizeof(float));
    kernels::cuda::copy_to_device(device_memory_->scales.data(), host_scales_.data(), host_scales_.size() * sizeof(float));
    scales_memory_ = static_cast<const float*>(device_memory_->scales.data());
#endif
  }
}

PagePool::~PagePool() {
  if (memory_ != nullptr && !device_memory_) munmap(memory_, mapped_bytes_);
}

int PagePool::first_page(int rank) const {
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "DP rank {} is outside [0, {})", rank, dp_size());
  return rank_page_range(num_pages_, dp_size(), rank).first;
}

KvGeometry PagePool::geometry(int rank) const {
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "DP rank {} is outside [0, {})", rank, dp_size());
  const PageRange range = rank_page_range(num_pages_, dp_size(), rank);
  return {layout_.num_layers, layout_.num_kv_heads, layout_.head_dim, layout_.page_size, layout_.dtype, range.count,
          range.first};
}

uint64_t PagePool::num_bytes() const {
  return 2 * uint64_t(layout_.num_layers) * uint64_t(num_pages_) * layout_.bytes_per_layer_page();
}

PageAllocator& PagePool::allocator(int rank) {
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "DP rank {} is outside [0, {})", rank, dp_size());
  return *allocators_[static_cast<size_t>(rank)];
}

const PageAllocator& PagePool::allocator(int rank) const {
  SPINDLE_CHECK(rank >= 0 && rank < dp_size(), "DP rank {} is outside [0, {})", rank, dp_size());
  return *allocators_[static_cast<size_t>(rank)];
}

std::vector<attn::LayerKvCache> PagePool::layer_caches() const {
  std::vector<attn::LayerKvCache> caches;
  caches.reserve(static_cast<size_t>(layout_.num_layers));
  const KvGeometry pool_geometry{layout_.num_layers, layout_.num_kv_heads, layout_.head_dim, layout_.page_size,
                                 layout_.dtype, num_pages_, 0};  // every rank's pages
  for (int layer = 0; layer < layout_.num_layers; ++layer) {
    attn::LayerKvCache c;
    c.k_pages = array(layer, 0, 0);
    c.v_pages = array(layer, 1, 0);
    c.kv = pool_geometry;
    c.device = device_;
    if (scales_memory_ != nullptr) {
      const size_t per_layer = size_t(layout_.num_kv_heads);
      c.k_scales = scales_memory_ + size_t(layer) * per_layer;
      c.v_scales = scales_memory_ + size_t(layout_.num_layers + layer) * per_layer;
    }
    caches.push_back(c);
  }
  return caches;
}

std::byte* PagePool::array(int layer, int which, int global_page) const {
  SPINDLE_CHECK(layer >= 0 && layer < layout_.num_layers, "layer {} is outside [0, {})", layer, layout_.num_layers);
  SPINDLE_CHECK(global_page >= 0 && global_page < num_pages_, "page {} is outside the pool [0, {})", global_page,
                num_pages_);
  return static_cast<std::byte*>(memory_) + array_stride_ * (2 * uint64_t(layer) + uint64_t(which)) +
         uint64_t(global_page) * layout_.bytes_per_layer_page();
}

std::vector<std::byte> PagePool::copy_pages_to_host(int layer, bool v, int global_page, int num_pages) const {
  SPINDLE_CHECK(num_pages >= 0 && global_page + num_pages <= num_pages_, "pages [{}, {}) are outside the pool [0, {})",
                global_page, global_page + num_pages, num_pages_);
  std::vector<std::byte> out(size_t(num_pages) * layout_.bytes_per_layer_page());
  if (out.empty()) return out;
  const std::byte* src = array(layer, v ? 1 : 0, global_page);
  if (device_ == attn::Device::kCuda) {
#ifdef SPINDLE_WITH_CUDA
    kernels::cuda::copy_to_host(out.data(), src, out.size());
#endif
  } else {
    std::memcpy(out.data(), src, out.size());
  }
  return out;
}

std::byte* PagePool::k_page(int layer, int global_page) const { return array(layer, 0, global_page); }
std::byte* PagePool::v_page(int layer, int global_page) const { return array(layer, 1, global_page); }

}  // namespace spindle::kv

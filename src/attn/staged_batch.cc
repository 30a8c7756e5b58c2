#include "attn/staged_batch.h"

#include <limits>

#include "util/error.h"

#ifdef SPINDLE_WITH_CUDA
#include "kernels/cuda/device_buffer.h"
#endif

namespace spindle::attn {

#ifdef SPINDLE_WITH_CUDA
namespace kcu = kernels::cuda;

struct StagedBatch::DeviceCopies {
  kcu::DeviceBuffer q, k, v, out, k_pages, v_pages, k_scales, v_scales;
};

namespace {

template <typename T>
void upload(kcu::DeviceBuffer& dst, const std::vector<T>& src) {
  dst.reserve(std::max<size_t>(src.size() * sizeof(T), 1));
  kcu::copy_to_device(dst.data(), src.data(), src.size() * sizeof(T));
}

}  // namespace
#else
struct StagedBatch::DeviceCopies {};
#endif

StagedBatch::StagedBatch(RandomBatch& batch, Device device) : batch_(batch), where_(device) {
  host_out_.assign(batch.num_tokens() * batch.q_cols(), std::numeric_limits<float>::quiet_NaN());
  if (device == Device::kCpu) return;
#ifdef SPINDLE_WITH_CUDA
  device_ = std::make_unique<DeviceCopies>();
  upload(device_->q, batch.q);
  upload(device_->k, batch.k);
  upload(device_->v, batch.v);
  upload(device_->out, host_out_);
  upload(device_->k_pages, batch.k_pages);
  upload(device_->v_pages, batch.v_pages);
  upload(device_->k_scales, batch.k_scales);  // (FP8 KV only; empty otherwise)
  upload(device_->v_scales, batch.v_scales);
#else
  SPINDLE_FAIL("this build has no CUDA support: cannot stage a batch on a CUDA device");
#endif
}

StagedBatch::~StagedBatch() = default;

#ifdef SPINDLE_WITH_CUDA
#define SPINDLE_STAGED(host_ptr, device_member, type) \
  (device_ ? device_->device_member.as<type>() : (host_ptr))
#else
#define SPINDLE_STAGED(host_ptr, device_member, type) (host_ptr)
#endif

ConstTensor StagedBatch::q() const {
  return {SPINDLE_STAGED(batch_.q.data(), q, const float), batch_.num_tokens(), batch_.q_cols()};
}
ConstTensor StagedBatch::k() const {
  return {SPINDLE_STAGED(batch_.k.data(), k, const float), batch_.num_tokens(), batch_.kv_cols()};
}
ConstTensor StagedBatch::v() const {
  return {SPINDLE_STAGED(batch_.v.data(), v, const float), batch_.num_tokens(), batch_.kv_cols()};
}
Tensor StagedBatch::out() {
  return {SPINDLE_STAGED(host_out_.data(), out, float), batch_.num_tokens(), batch_.q_cols()};
}

LayerKvCache StagedBatch::layer_cache() const {
  LayerKvCache c = batch_.layer_cache();
  c.device = device_ ? Device::kCuda : Device::kCpu;
#ifdef SPINDLE_WITH_CUDA
  if (device_) {
    c.k_pages = device_->k_pages.data();
    c.v_pages = device_->v_pages.data();
    if (c.k_scales != nullptr) {
      c.k_scales = static_cast<const float*>(device_->k_scales.data());
      c.v_scales = static_cast<const float*>(device_->v_scales.data());
    }
  }
#endif
  return c;
}

#undef SPINDLE_STAGED

void StagedBatch::synchronize() const {
#ifdef SPINDLE_WITH_CUDA
  if (device_) kcu::synchronize_device();
#endif
}

std::vector<float> StagedBatch::read_out() const {
  std::vector<float> out = host_out_;
#ifdef SPINDLE_WITH_CUDA
  if (device_) kcu::copy_to_host(out.data(), device_->out.data(), out.size() * sizeof(float));
#endif
  return out;
}

void StagedBatch::read_pages_back() {
#ifdef SPINDLE_WITH_CUDA
  if (!device_) return;
  kcu::copy_to_host(batch_.k_pages.data(), device_->k_pages.data(), batch_.k_pages.size());
  kcu::copy_to_host(batch_.v_pages.data(), device_->v_pages.data(), batch_.v_pages.size());
#endif
}

}  // namespace spindle::attn

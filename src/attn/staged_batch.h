// A RandomBatch placed where a backend reads it: views of the host batch for CPU backends; for
// CUDA backends, device copies of q/k/v and the pages (on the calling thread's current device),
// uploaded once so repeated forwards time the kernels alone.
#pragma once

#include <memory>
#include <vector>

#include "attn/attention_types.h"
#include "attn/random_batch.h"

namespace spindle::attn {

class StagedBatch {
 public:
  // Throws for kCuda in a build without CUDA. The batch must outlive this object.
  StagedBatch(RandomBatch& batch, Device device);
  ~StagedBatch();
  StagedBatch(const StagedBatch&) = delete;
  StagedBatch& operator=(const StagedBatch&) = delete;

  ConstTensor q() const;
  ConstTensor k() const;
  ConstTensor v() const;
  Tensor out();                 // poisoned with NaN at construction
  LayerKvCache layer_cache() const;

  // Waits for queued device work (no-op on the CPU), surfacing its errors.
  void synchronize() const;
  // out, copied to the host.
  std::vector<float> read_out() const;
  // The staged pages copied back into batch.k_pages / v_pages (no-op on the CPU: they are the same).
  void read_pages_back();

 private:
  struct DeviceCopies;
  RandomBatch& batch_;
  Device where_;
  std::vector<float> host_out_;
  std::unique_ptr<DeviceCopies> device_;  // null on the CPU
};

}  // namespace spindle::attn

// PagedBackend: the host-side work every paged attention backend shares, so each device's
// backend only says how to run one layer.
//
// prepare() keeps the step's StepBatch (the kernels read its sequences and page tables as they
// are); bind_kv_caches() checks each layer's pages against the shape and builds the rank's
// KvGeometry (kernels/kv_geometry.h: its page range by rank_page_range), the one value every
// layer's kernel parameters carry; forward() checks the tensors, acts out injected faults
// (SPINDLE_ATTN_FAULT) and hands run_layer() the kernel parameters for this DP rank's contiguous
// page range, already checked by kernels::cpu::check_paged_attention_params (once per step). Tensor and page
// pointers are in the memory of device(); the sequences and their page tables are host memory.
#pragma once

#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "attn/fault_injection.h"
#include "kernels/cpu/paged_attention.h"

namespace spindle::attn {

class PagedBackend : public AttentionBackend {
 public:
  PagedBackend(std::string name, Device device, const AttentionShape& shape, const DpConfig& dp);

  std::string_view name() const final { return name_; }
  Device device() const final { return device_; }
  const AttentionShape& shape() const final { return shape_; }
  void prepare(const StepBatch& batch, const kernels::cuda::DeviceBatch* uploaded = nullptr) final;
  void bind_kv_caches(std::span<const LayerKvCache> layers) final;
  void forward(int layer, ConstTensor q, ConstTensor k, ConstTensor v, Tensor out, bool kv_written = false) final;

 protected:
  // One layer's work, on this rank's pages. `write` carries the new K/V (k, v), null when the
  // caller wrote them already (forward's kv_written), and `attention` the queries and the output;
  // both point at the pages of the rank's range.
  virtual void run_layer(int layer, const kernels::cpu::KvWriteParams* write,
                         const kernels::cpu::PagedAttentionParams& attention) = 0;
  // Called after the caches were checked and stored.
  virtual void on_bind() {}
  // Called at the end of prepare(), once batch() is the step's batch (e.g. to upload it, when
  // `uploaded` is null).
  virtual void on_prepare(const kernels::cuda::DeviceBatch* /*uploaded*/) {}
  // The `wrong` fault: adds 0.5 to every element of out (host loop; device backends override).
  virtual void corrupt_output(Tensor out);

  // The step's batch given to prepare() (not a copy: the caller keeps it alive for the step).
  const StepBatch& batch() const { return *batch_; }
  bool prepared() const { return batch_ != nullptr; }

  // The rank's KV geometry, built by bind_kv_caches (num_layers 0 before): its pages are
  // [first_page, first_page + num_pages) of each layer's pool (rank_page_range).
  const KvGeometry& kv_geometry() const { return geometry_; }
  // This rank's first K and V page of a layer's pool.
  struct RankPages {
    std::byte* k = nullptr;
    std::byte* v = nullptr;
  };
  RankPages rank_pages(const LayerKvCache& cache) const;
  // The bound cache of `layer` (checked), for a subclass's kv_write_target.
  const LayerKvCache& layer_cache(int layer) const;

 private:
  std::string name_;
  Device device_;
  AttentionShape shape_;
  DpConfig dp_;
  FaultMode fault_;
  const StepBatch* batch_ = nullptr;
  int64_t num_tokens_ = 0;
  std::vector<LayerKvCache> layers_;
  KvGeometry geometry_;
  bool checked_ = false;  // the prepared batch was checked against geometry_
};

}  // namespace spindle::attn

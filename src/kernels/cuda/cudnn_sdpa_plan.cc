#include "kernels/cuda/cudnn_sdpa_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <array>
#include <deque>
#include <limits>
#include <utility>

#include "util/error.h"

namespace spindle::kernels::cuda {
namespace {

using Dims = std::array<int64_t, 4>;

// Builds the operation graph: owns every descriptor, records the operations in order.
class GraphBuilder {
 public:
  GraphBuilder(const CudnnApi& api, bool debug) : api_(api), debug_(debug) {}

  // A finalized device tensor (or, by_value, a host scalar passed in the variant pack).
  const CudnnDescriptor& tensor(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides,
                                const CudnnDescriptor* ragged_offsets = nullptr, bool by_value = false) {
    return make_tensor(uid, type, dims, strides, /*is_virtual=*/false, by_value, ragged_offsets);
  }
  const CudnnDescriptor& scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, nullptr, /*by_value=*/true);
  }
  // An intermediate tensor (never in memory), with the next free uid.
  const CudnnDescriptor& virtual_tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides) {
    return make_tensor(next_virtual_uid_++, type, dims, strides, /*is_virtual=*/true, false, nullptr);
  }

  // y = mode(x[, b][, t]); axis for GEN_INDEX and the index arithmetic (-1: not set).
  void pointwise(const char* name, cudnnPointwiseMode_t mode, cudnnDataType_t math, const CudnnDescriptor& x,
                 const CudnnDescriptor* b, const CudnnDescriptor* t, const CudnnDescriptor& y,
                 int64_t axis = -1) {
    CudnnDescriptor& pw = own(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    pw.set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, math, "pointwise math precision");
    if (axis >= 0) pw.set_int64(CUDNN_ATTR_POINTWISE_AXIS, axis, "pointwise axis");
    pw.finalize(fmt::format("pointwise descriptor {}", name));

    CudnnDescriptor& op = own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise op descriptor");
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
    if (b != nullptr) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b, "pointwise b");
    if (t != nullptr) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t, "pointwise t");
    op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
    const float one = 1.0f;
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha1");
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha2");
    add_op(op, name);
  }

  // c = a . b over the last two dims, batched over the first two (broadcast for GQA).
  void matmul(const char* name, const CudnnDescriptor& a, const CudnnDescriptor& b, const CudnnDescriptor& c,
              const CudnnDescriptor* m_override, const CudnnDescriptor* n_override,
              const CudnnDescriptor* k_override) {
    CudnnDescriptor& mm = own(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    mm.set_data_type(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT, "matmul compute type");
    const double padding = 0.0;
    mm.set(CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, 1, &padding, "matmul padding value");
    mm.finalize(fmt::format("matmul descriptor {}", name));

    CudnnDescriptor& op = own(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul b");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
    op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "matmul descriptor");
    if (m_override != nullptr) {
      op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, *m_override, "matmul M override");
    }
    if (n_override != nullptr) {
      op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, *n_override, "matmul N override");
    }
    if (k_override != nullptr) {
      op.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, *k_override, "matmul K override");
    }
    add_op(op, name);
  }

  // y = reduce(x) over the dims where y has extent 1.
  void reduction(const char* name, cudnnReduceTensorOp_t reduce, const CudnnDescriptor& x,
                 const CudnnDescriptor& y) {
    CudnnDescriptor& red = own(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce, "reduction operator");
    red.set_data_type(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT, "reduction compute type");
    red.finalize(fmt::format("reduction descriptor {}", name));

    CudnnDescriptor& op = own(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
    op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red, "reduction descriptor");
    add_op(op, name);
  }

  // y = the tokens of each sequence gathered from the page container through its page table.
  void paged_load(const char* name, const CudnnDescriptor& container, const CudnnDescriptor& seq_len,
                  const CudnnDescriptor& page_table, const CudnnDescriptor& y) {
    CudnnDescriptor& op = own(CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR);
    op.set_desc(CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, container, "paged load container");
    op.set_desc(CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, page_table, "paged load page table");
    op.set_desc(CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, seq_len, "paged load sequence lengths");
    op.set_desc(CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, y, "paged load y");
    add_op(op, name);
  }

  // The finalized operation graph (appended to the owned descriptors).
  const CudnnDescriptor& operation_graph(cudnnHandle_t handle) {
    CudnnDescriptor& graph = own(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
              ops_.data(), "operation graph ops");
    if (handle != nullptr) {  // null only when checking the graph offline (no device)
      graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph handle");
    }
    graph.finalize(fmt::format("operation graph ({} operations)", ops_.size()));
    if (debug_) spdlog::info("cudnn_sdpa: operation graph finalized ({} operations)", ops_.size());
    return graph;
  }

  std::vector<CudnnDescriptor> take() {
    std::vector<CudnnDescriptor> all;
    all.reserve(owned_.size());
    for (CudnnDescriptor& d : owned_) all.push_back(std::move(d));
    owned_.clear();
    return all;
  }

 private:
  CudnnDescriptor& own(cudnnBackendDescriptorType_t type) { return owned_.emplace_back(api_, type); }

  const CudnnDescriptor& make_tensor(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides,
                                     bool is_virtual, bool by_value, const CudnnDescriptor* ragged_offsets) {
    CudnnDescriptor& t = own(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid, "tensor uid");
    t.set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, type, "tensor data type");
    t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "tensor dimensions");
    t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "tensor strides");
    t.set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16, "tensor alignment");
    t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor is_virtual");
    if (by_value) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor is_by_value");
    if (ragged_offsets != nullptr) {
      t.set_desc(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, *ragged_offsets, "tensor ragged offsets");
    }
    t.finalize(fmt::format("tensor uid {} dims [{}] strides [{}]", uid, fmt::join(dims, ", "),
                           fmt::join(strides, ", ")));
    return t;
  }

  void add_op(CudnnDescriptor& op, const char* name) {
    op.finalize(fmt::format("operation {}", name));
    ops_.push_back(op.get());
    if (debug_) spdlog::info("cudnn_sdpa: graph op {} ({})", ops_.size(), name);
  }

  const CudnnApi& api_;
  bool debug_;
  std::deque<CudnnDescriptor> owned_;  // deque: references stay valid as it grows
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_uid_ = kUidFirstVirtual;
};

// The graph of cudnn_sdpa_plan.h into `g`.
void build_sdpa_graph(GraphBuilder& g, const CudnnSdpaShape& s) {
  const int64_t b = s.batch, h = s.num_heads, hk = s.num_kv_heads, d = s.head_dim;
  const int64_t sq = s.max_q, skv = s.max_kv, t = s.table_width(), ps = s.page_size;
  const cudnnDataType_t io = s.io_type;

  // Inputs and output.
  const CudnnDescriptor* ragged_q = nullptr;
  const CudnnDescriptor* ragged_o = nullptr;
  if (s.ragged) {
    ragged_q = &g.tensor(kUidRaggedQ, CUDNN_DATA_INT32, {b + 1, 1, 1, 1}, {1, 1, 1, 1});
    ragged_o = &g.tensor(kUidRaggedO, CUDNN_DATA_INT32, {b + 1, 1, 1, 1}, {1, 1, 1, 1});
  }
  const Dims row_strides = {sq * h * d, d, h * d, 1};
  const auto& q = g.tensor(kUidQ, io, {b, h, sq, d}, row_strides, ragged_q);
  const auto& o = g.tensor(kUidO, io, {b, h, sq, d}, row_strides, ragged_o);
  const Dims page_dims = {s.num_pages, hk, ps, d};
  const Dims page_strides = {ps * hk * d, d, hk * d, 1};
  const auto& k_pages = g.tensor(kUidK, io, page_dims, page_strides);
  const auto& v_pages = g.tensor(kUidV, io, page_dims, page_strides);
  const auto& seq_q = g.tensor(kUidSeqLenQ, CUDNN_DATA_INT32, {b, 1, 1, 1}, {1, 1, 1, 1});
  const auto& seq_kv = g.tensor(kUidSeqLenKv, CUDNN_DATA_INT32, {b, 1, 1, 1}, {1, 1, 1, 1});
  const auto& table_k = g.tensor(kUidPageTableK, CUDNN_DATA_INT32, {b, 1, t, 1}, {t, t, 1, 1});
  const auto& table_v = g.tensor(kUidPageTableV, CUDNN_DATA_INT32, {b, 1, t, 1}, {t, t, 1, 1});
  const auto& scale = g.scalar(kUidScale);

  // S = scale * Q . K^T, K^T read through the page table.
  const auto& kt = g.virtual_tensor(io, {b, hk, d, skv}, {hk * d * skv, d * skv, 1, d});
  g.paged_load("paged K load", k_pages, seq_kv, table_k, kt);
  const Dims score_dims = {b, h, sq, skv};
  const Dims score_strides = {h * sq * skv, sq * skv, skv, 1};
  const auto& s_raw = g.virtual_tensor(CUDNN_DATA_FLOAT, score_dims, score_strides);
  g.matmul("Q.K^T", q, kt, s_raw, &seq_q, &seq_kv, nullptr);
  const auto& s_scaled = g.virtual_tensor(CUDNN_DATA_FLOAT, score_dims, score_strides);
  g.pointwise("scale", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s_raw, &scale, nullptr, s_scaled);

  // Padding mask: keep row < seq_len_q && col < seq_len_kv.
  const auto& row = g.virtual_tensor(CUDNN_DATA_INT32, score_dims, score_strides);
  g.pointwise("padding row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s_scaled, nullptr, nullptr, row, 2);
  const auto& col = g.virtual_tensor(CUDNN_DATA_INT32, score_dims, score_strides);
  g.pointwise("padding col index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s_scaled, nullptr, nullptr, col, 3);
  const auto& row_ok = g.virtual_tensor(CUDNN_DATA_BOOLEAN, score_dims, score_strides);
  g.pointwise("row < seq_len_q", CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, row, &seq_q, nullptr, row_ok);
  const auto& col_ok = g.virtual_tensor(CUDNN_DATA_BOOLEAN, score_dims, score_strides);
  g.pointwise("col < seq_len_kv", CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, col, &seq_kv, nullptr, col_ok);
  const auto& valid = g.virtual_tensor(CUDNN_DATA_BOOLEAN, score_dims, score_strides);
  g.pointwise("padding and", CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, row_ok, &col_ok, nullptr, valid);
  const auto& neg_inf = g.scalar(kUidNegInfPadding);
  const auto* masked = &g.virtual_tensor(CUDNN_DATA_FLOAT, score_dims, score_strides);
  g.pointwise("padding select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s_scaled, &neg_inf, &valid, *masked);

  // Bottom-right causal mask: keep row + seq_len_kv - seq_len_q >= col.
  if (s.causal) {
    const auto& crow = g.virtual_tensor(CUDNN_DATA_INT32, score_dims, score_strides);
    g.pointwise("causal row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, *masked, nullptr, nullptr, crow, 2);
    const auto& ccol = g.virtual_tensor(CUDNN_DATA_INT32, score_dims, score_strides);
    g.pointwise("causal col index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, *masked, nullptr, nullptr, ccol, 3);
    const auto& plus_kv = g.virtual_tensor(CUDNN_DATA_INT32, score_dims, score_strides);
    g.pointwise("row + seq_len_kv", CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, crow, &seq_kv, nullptr, plus_kv, 3);
    const auto& position = g.virtual_tensor(CUDNN_DATA_INT32, score_dims, score_strides);
    g.pointwise("row + seq_len_kv - seq_len_q", CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, plus_kv, &seq_q, nullptr,
                position, 3);
    const auto& allowed = g.virtual_tensor(CUDNN_DATA_BOOLEAN, score_dims, score_strides);
    g.pointwise("position >= col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, position, &ccol, nullptr, allowed);
    const auto& neg_inf_causal = g.scalar(kUidNegInfCausal);
    const auto& causal = g.virtual_tensor(CUDNN_DATA_FLOAT, score_dims, score_strides);
    g.pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, *masked, &neg_inf_causal, &allowed,
                causal);
    masked = &causal;
  }

  // Softmax over the last dim (the stats branch is part of the fused engine's pattern).
  const Dims stat_dims = {b, h, sq, 1};
  const Dims stat_strides = {h * sq, sq, 1, 1};
  const auto& row_max = g.virtual_tensor(CUDNN_DATA_FLOAT, stat_dims, stat_strides);
  g.reduction("softmax max", CUDNN_REDUCE_TENSOR_MAX, *masked, row_max);
  const auto& centered = g.virtual_tensor(CUDNN_DATA_FLOAT, score_dims, score_strides);
  g.pointwise("softmax sub", CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, *masked, &row_max, nullptr, centered);
  const auto& exps = g.virtual_tensor(CUDNN_DATA_FLOAT, score_dims, score_strides);
  g.pointwise("softmax exp", CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, centered, nullptr, nullptr, exps);
  const auto& row_sum = g.virtual_tensor(CUDNN_DATA_FLOAT, stat_dims, stat_strides);
  g.reduction("softmax sum", CUDNN_REDUCE_TENSOR_ADD, exps, row_sum);
  const auto& log_sum = g.virtual_tensor(CUDNN_DATA_FLOAT, stat_dims, stat_strides);
  g.pointwise("softmax log", CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, row_sum, nullptr, nullptr, log_sum);
  const auto& stats = g.virtual_tensor(CUDNN_DATA_FLOAT, stat_dims, stat_strides);
  g.pointwise("softmax stats", CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, row_max, &log_sum, nullptr, stats);
  const auto& probs = g.virtual_tensor(io, score_dims, score_strides);
  g.pointwise("softmax div", CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, exps, &row_sum, nullptr, probs);

  // O = P . V, V read through the page table.
  const auto& v = g.virtual_tensor(io, {b, hk, skv, d}, {hk * skv * d, skv * d, d, 1});
  g.paged_load("paged V load", v_pages, seq_kv, table_v, v);
  g.matmul("P.V", probs, v, o, &seq_q, nullptr, &seq_kv);
}

const char* io_type_name(cudnnDataType_t type) { return type == CUDNN_DATA_HALF ? "fp16" : "bf16"; }

// cuDNN's global index of the engine behind `config` (-1 when it cannot be read).
int64_t engine_global_index(const CudnnApi& api, const CudnnDescriptor& config) {
  CudnnDescriptor engine(api, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t count = 0;
  if (api.BackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                              &raw) != CUDNN_STATUS_SUCCESS ||
      count != 1) {
    return -1;
  }
  int64_t index = -1;
  if (api.BackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &index) !=
      CUDNN_STATUS_SUCCESS) {
    return -1;
  }
  return index;
}

// The plan as cuDNN's JSON (engine name and knobs), for the debug log; "" when unavailable.
std::string plan_json(const CudnnApi& api, const CudnnDescriptor& plan) {
  int64_t size = 0;
  if (api.BackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &size,
                              nullptr) != CUDNN_STATUS_SUCCESS ||
      size <= 0) {
    return {};
  }
  std::string json(static_cast<size_t>(size), '\0');
  if (api.BackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, size, &size,
                              json.data()) != CUDNN_STATUS_SUCCESS) {
    return {};
  }
  json.resize(static_cast<size_t>(size));
  while (!json.empty() && json.back() == '\0') json.pop_back();
  return json;
}

}  // namespace

std::string CudnnSdpaShape::describe() const {
  return fmt::format("B={} H={} Hkv={} D={} Sq={} Skv={} page_size={} pages={} {} {} {}", batch, num_heads,
                     num_kv_heads, head_dim, max_q, max_kv, page_size, num_pages, io_type_name(io_type),
                     ragged ? "ragged" : "padded", causal ? "causal" : "full");
}

std::vector<CudnnDescriptor> build_cudnn_sdpa_graph(const CudnnApi& api, cudnnHandle_t handle,
                                                    const CudnnSdpaShape& shape, bool debug) {
  if (debug) spdlog::info("cudnn_sdpa: building graph for {}", shape.describe());
  GraphBuilder g(api, debug);
  build_sdpa_graph(g, shape);
  g.operation_graph(handle);
  return g.take();
}

CudnnSdpaPlan::CudnnSdpaPlan(const CudnnApi& api, cudnnHandle_t handle, const CudnnSdpaShape& shape, bool debug)
    : api_(&api), shape_(shape) {
  // Before 9.10 the fused engine expects the lowest float rather than -inf as the mask value.
  negative_infinity_ = api.version < 91000 ? std::numeric_limits<float>::lowest()
                                           : -std::numeric_limits<float>::infinity();
  graph_ = build_cudnn_sdpa_graph(api, handle, shape, debug);
  choose_engine(handle, debug);
}

void CudnnSdpaPlan::choose_engine(cudnnHandle_t handle, bool debug) {
  const CudnnDescriptor& op_graph = graph_.back();
  std::vector<std::string> failures;  // the first few, for the error message
  const auto note = [&](std::string message) {
    if (debug) spdlog::info("cudnn_sdpa: {}", message);
    if (failures.size() < 3) failures.push_back(std::move(message));
  };
  const auto note_failure = [&](cudnnStatus_t status, const std::string& what) {
    note(cudnn_status_message(*api_, status, what));
  };
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "A" : "fallback";
    CudnnDescriptor heuristics(*api_, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heuristics.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph, "heuristics operation graph");
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    if (const cudnnStatus_t st = heuristics.try_finalize(); st != CUDNN_STATUS_SUCCESS) {
      note_failure(st, fmt::format("heuristics (mode {})", mode_name));
      continue;
    }
    int64_t available = 0;
    cudnn_check(*api_,
                api_->BackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr),
                "counting heuristics results");
    std::vector<CudnnDescriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < available; ++i) {
      raw.push_back(configs.emplace_back(*api_, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
    }
    int64_t returned = 0;
    if (available > 0) {
      cudnn_check(*api_,
                  api_->BackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, available, &returned, raw.data()),
                  "reading heuristics results");
    }
    if (debug && returned > 0) spdlog::info("cudnn_sdpa: heuristics mode {}: {} engine configs", mode_name, returned);
    if (returned == 0) {
      const std::string last = cudnn_last_error(*api_);
      note(fmt::format("heuristics mode {} returned no engine config{}{}", mode_name, last.empty() ? "" : ": ", last));
    }
    for (int64_t i = 0; i < returned; ++i) {
      const int64_t engine = engine_global_index(*api_, configs[i]);
      CudnnDescriptor plan(*api_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "plan handle");
      plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i], "plan engine config");
      if (const cudnnStatus_t st = plan.try_finalize(); st != CUDNN_STATUS_SUCCESS) {
        note_failure(st, fmt::format("execution plan (heuristics {} config {} of {}, engine {})", mode_name, i + 1,
                                     returned, engine));
        continue;
      }
      int64_t count = 0;
      cudnn_check(*api_,
                  api_->BackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                            1, &count, &workspace_bytes_),
                  "reading the plan's workspace size");
      engine_index_ = engine;
      if (debug) {
        spdlog::info("cudnn_sdpa: chose heuristics {} config {} of {}: engine {}, workspace {} bytes", mode_name,
                     i + 1, returned, engine, workspace_bytes_);
        if (const std::string json = plan_json(*api_, plan); !json.empty()) spdlog::info("cudnn_sdpa: plan {}", json);
      }
      plan_ = std::move(plan);
      return;
    }
  }
  SPINDLE_FAIL("cuDNN {} has no engine for the SDPA graph ({}): {}", cudnn_version_string(api_->version),
               shape_.describe(), fmt::join(failures, " | "));
}

void CudnnSdpaPlan::execute(cudnnHandle_t handle, const CudnnSdpaBuffers& buffers, float scale) const {
  float scale_value = scale;  // by-value scalars: host pointers, read during cudnnBackendExecute
  float neg_inf_padding = negative_infinity_;
  float neg_inf_causal = negative_infinity_;
  std::vector<int64_t> uids = {kUidQ, kUidK, kUidV, kUidO, kUidSeqLenQ, kUidSeqLenKv, kUidPageTableK,
                               kUidPageTableV, kUidScale, kUidNegInfPadding};
  // In the order of uids.
  std::vector<void*> pointers = {const_cast<void*>(buffers.q),          const_cast<void*>(buffers.k_pages),
                                 const_cast<void*>(buffers.v_pages),    buffers.o,
                                 const_cast<int32_t*>(buffers.seq_len_q), const_cast<int32_t*>(buffers.seq_len_kv),
                                 const_cast<int32_t*>(buffers.page_table), const_cast<int32_t*>(buffers.page_table),
                                 &scale_value,                          &neg_inf_padding};
  if (shape_.causal) {
    uids.push_back(kUidNegInfCausal);
    pointers.push_back(&neg_inf_causal);
  }
  if (shape_.ragged) {
    uids.insert(uids.end(), {kUidRaggedQ, kUidRaggedO});
    pointers.insert(pointers.end(), {const_cast<int32_t*>(buffers.ragged_offsets),
                                     const_cast<int32_t*>(buffers.ragged_offsets)});
  }
  CudnnDescriptor pack(*api_, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data(),
           "variant pack uids");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()),
           pointers.data(), "variant pack pointers");
  void* workspace = buffers.workspace;
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "variant pack workspace");
  pack.finalize("variant pack");
  cudnn_check(*api_, api_->BackendExecute(handle, plan_.get(), pack.get()),
              fmt::format("execute (SDPA {})", shape_.describe()));
}

}  // namespace spindle::kernels::cuda

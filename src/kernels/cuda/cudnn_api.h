// cuDNN loaded at run time: libcudnn is opened with dlopen on first use and every function Spindle
// calls is resolved with dlsym, so the binary never links cuDNN and starts where it is missing.
// The cuDNN headers are used for types and enums only.
//
// Library search: $SPINDLE_CUDNN_LIBRARY when set (a file name or path, nothing else is tried),
// otherwise "libcudnn.so.9" then "libcudnn.so" (the dynamic loader's usual search).
#pragma once

#include <cudnn_graph.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace spindle::kernels::cuda {

// The cuDNN functions Spindle uses, resolved from the loaded library.
struct CudnnApi {
  std::string path;    // what dlopen was given
  size_t version = 0;  // cudnnGetVersion(): major * 10000 + minor * 100 + patch (9.5.0 -> 90500)

  decltype(&cudnnGetVersion) GetVersion = nullptr;
  decltype(&cudnnGetCudartVersion) GetCudartVersion = nullptr;
  decltype(&cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&cudnnGetLastErrorString) GetLastErrorString = nullptr;
  decltype(&cudnnCreate) Create = nullptr;
  decltype(&cudnnDestroy) Destroy = nullptr;
  decltype(&cudnnSetStream) SetStream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) BackendCreateDescriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) BackendDestroyDescriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) BackendSetAttribute = nullptr;
  decltype(&cudnnBackendGetAttribute) BackendGetAttribute = nullptr;
  decltype(&cudnnBackendFinalize) BackendFinalize = nullptr;
  decltype(&cudnnBackendExecute) BackendExecute = nullptr;
};

// The loaded library, or nullptr when it could not be loaded (cudnn_load_error() says why).
// Loads once, thread-safe; a library found but older than needed is still returned (callers
// check version).
const CudnnApi* cudnn_api();
// Why cudnn_api() is null ("" when it is not).
const std::string& cudnn_load_error();

// "9.5.1" from 90501.
std::string cudnn_version_string(size_t version);

// cudnnGetLastErrorString ("" when cuDNN recorded none).
std::string cudnn_last_error(const CudnnApi& api);

// "cuDNN <what> failed: CUDNN_STATUS_X (code)[: cudnnGetLastErrorString]". For error messages.
std::string cudnn_status_message(const CudnnApi& api, cudnnStatus_t status, std::string_view what);

// Throws spindle::Error with cudnn_status_message when status is not CUDNN_STATUS_SUCCESS.
void cudnn_check(const CudnnApi& api, cudnnStatus_t status, std::string_view what);

// One owned backend descriptor (cudnnBackendDestroyDescriptor on destruction). Movable.
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  // Creates a descriptor of `type`; throws on failure.
  CudnnDescriptor(const CudnnApi& api, cudnnBackendDescriptorType_t type);
  ~CudnnDescriptor();
  CudnnDescriptor(CudnnDescriptor&& other) noexcept;
  CudnnDescriptor& operator=(CudnnDescriptor&& other) noexcept;
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }

  // Attribute setters; each throws with the attribute's name in the message.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values, std::string_view what);
  void set_desc(cudnnBackendAttributeName_t name, const CudnnDescriptor& value, std::string_view what);
  void set_int64(cudnnBackendAttributeName_t name, int64_t value, std::string_view what);
  void set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value, std::string_view what);
  // Returns the status instead of throwing (plan finalization may legitimately fail).
  cudnnStatus_t try_finalize();
  void finalize(std::string_view what);

 private:
  void reset();

  const CudnnApi* api_ = nullptr;
  cudnnBackendDescriptor_t desc_ = nullptr;
};

}  // namespace spindle::kernels::cuda

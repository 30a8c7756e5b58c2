#include "kernels/cuda/cudnn_api.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "util/error.h"
#include "util/shared_library.h"
#include "util/switches.h"

namespace spindle::kernels::cuda {
namespace {

struct LoadResult {
  std::unique_ptr<CudnnApi> api;
  std::string error;
};

bool resolve_all(void* handle, CudnnApi& api, std::string& error) {
  return resolve_symbol(handle, "cudnnGetVersion", api.GetVersion, error) &&
         resolve_symbol(handle, "cudnnGetCudartVersion", api.GetCudartVersion, error) &&
         resolve_symbol(handle, "cudnnGetErrorString", api.GetErrorString, error) &&
         resolve_symbol(handle, "cudnnGetLastErrorString", api.GetLastErrorString, error) &&
         resolve_symbol(handle, "cudnnCreate", api.Create, error) &&
         resolve_symbol(handle, "cudnnDestroy", api.Destroy, error) &&
         resolve_symbol(handle, "cudnnSetStream", api.SetStream, error) &&
         resolve_symbol(handle, "cudnnBackendCreateDescriptor", api.BackendCreateDescriptor, error) &&
         resolve_symbol(handle, "cudnnBackendDestroyDescriptor", api.BackendDestroyDescriptor, error) &&
         resolve_symbol(handle, "cudnnBackendSetAttribute", api.BackendSetAttribute, error) &&
         resolve_symbol(handle, "cudnnBackendGetAttribute", api.BackendGetAttribute, error) &&
         resolve_symbol(handle, "cudnnBackendFinalize", api.BackendFinalize, error) &&
         resolve_symbol(handle, "cudnnBackendExecute", api.BackendExecute, error);
}

// The library is never closed: cuDNN keeps global state (and its sub-libraries) for the process.
LoadResult load() {
  std::vector<std::string> candidates;
  if (const std::string& file = switches().cudnn_library; !file.empty()) {
    candidates.emplace_back(file);
  } else {
    candidates = {"libcudnn.so.9", "libcudnn.so"};
  }
  LoadResult result;
  std::string tried;
  for (const std::string& name : candidates) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", why != nullptr ? why : name.c_str());
      continue;
    }
    auto api = std::make_unique<CudnnApi>();
    api->path = name;
    std::string error;
    if (!resolve_all(handle, *api, error)) {
      // An unusable file, e.g. cuDNN 8 (no cudnnGetLastErrorString): name its version if it has one.
      if (api->GetVersion != nullptr) error += fmt::format(", cuDNN {}", cudnn_version_string(api->GetVersion()));
      tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", name, error);
      continue;
    }
    api->version = api->GetVersion();
    result.api = std::move(api);
    return result;
  }
  result.error = fmt::format("cannot load cuDNN ({}); install cuDNN 9 or set SPINDLE_CUDNN_LIBRARY to "
                             "the path of libcudnn.so.9", tried);
  return result;
}

const LoadResult& loaded() {
  static const LoadResult result = load();
  return result;
}

}  // namespace

const CudnnApi* cudnn_api() { return loaded().api.get(); }

const std::string& cudnn_load_error() { return loaded().error; }

std::string cudnn_version_string(size_t version) {
  return fmt::format("{}.{}.{}", version / 10000, version % 10000 / 100, version % 100);
}

std::string cudnn_last_error(const CudnnApi& api) {
  char last[2048] = {};
  api.GetLastErrorString(last, sizeof(last));
  return last;
}

std::string cudnn_status_message(const CudnnApi& api, cudnnStatus_t status, std::string_view what) {
  const std::string last = cudnn_last_error(api);
  const char* name = api.GetErrorString(status);
  return fmt::format("cuDNN {} failed: {} ({}){}{}", what, name != nullptr ? name : "unknown status",
                     static_cast<int>(status), last.empty() ? "" : ": ", last);
}

void cudnn_check(const CudnnApi& api, cudnnStatus_t status, std::string_view what) {
  SPINDLE_CHECK(status == CUDNN_STATUS_SUCCESS, "{}", cudnn_status_message(api, status, what));
}

CudnnDescriptor::CudnnDescriptor(const CudnnApi& api, cudnnBackendDescriptorType_t type) : api_(&api) {
  cudnn_check(api, api.BackendCreateDescriptor(type, &desc_),
              fmt::format("cudnnBackendCreateDescriptor(type {})", static_cast<int>(type)));
}

CudnnDescriptor::~CudnnDescriptor() { reset(); }

CudnnDescriptor::CudnnDescriptor(CudnnDescriptor&& other) noexcept
    : api_(other.api_), desc_(std::exchange(other.desc_, nullptr)) {}

CudnnDescriptor& CudnnDescriptor::operator=(CudnnDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    api_ = other.api_;
    desc_ = std::exchange(other.desc_, nullptr);
  }
  return *this;
}

void CudnnDescriptor::reset() {
  if (desc_ != nullptr) api_->BackendDestroyDescriptor(desc_);
  desc_ = nullptr;
}

void CudnnDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                          int64_t count, const void* values, std::string_view what) {
  const cudnnStatus_t status = api_->BackendSetAttribute(desc_, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS) {
    cudnn_check(*api_, status, fmt::format("setting {} (attribute {})", what, static_cast<int>(name)));
  }
}

void CudnnDescriptor::set_desc(cudnnBackendAttributeName_t name, const CudnnDescriptor& value,
                               std::string_view what) {
  cudnnBackendDescriptor_t d = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, what);
}

void CudnnDescriptor::set_int64(cudnnBackendAttributeName_t name, int64_t value, std::string_view what) {
  set(name, CUDNN_TYPE_INT64, 1, &value, what);
}

void CudnnDescriptor::set_data_type(cudnnBackendAttributeName_t name, cudnnDataType_t value,
                                    std::string_view what) {
  set(name, CUDNN_TYPE_DATA_TYPE, 1, &value, what);
}

cudnnStatus_t CudnnDescriptor::try_finalize() { return api_->BackendFinalize(desc_); }

void CudnnDescriptor::finalize(std::string_view what) {
  cudnn_check(*api_, try_finalize(), fmt::format("finalizing {}", what));
}

}  // namespace spindle::kernels::cuda

// The CUDA tests' skip rule: a usable device 0 with compute capability >= 8.0, or a reason.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "platform/cuda_info.h"

namespace spindle::testing {

// Why CUDA cannot run here ("" when it can): probed once per process.
inline const std::string& no_cuda_device_reason() {
  static const std::string reason = [] {
    const CudaProbe probe = probe_cuda_devices();
    if (probe.devices.empty()) {
      return probe.unavailable_reason.empty() ? std::string("no devices") : probe.unavailable_reason;
    }
    const auto& d = probe.devices.front();
    if (d.cc_major < 8) {
      return "device 0 (" + d.name + ") has compute capability " + std::to_string(d.cc_major) + "." +
             std::to_string(d.cc_minor) + ", needs 8.0";
    }
    return std::string();
  }();
  return reason;
}

}  // namespace spindle::testing

#define SKIP_WITHOUT_CUDA_DEVICE()                                                     \
  do {                                                                                 \
    if (!::spindle::testing::no_cuda_device_reason().empty())                          \
      GTEST_SKIP() << "no CUDA device: " << ::spindle::testing::no_cuda_device_reason(); \
  } while (0)

// What the engine reads from a step's host rows besides sampling, end to end on the CPU: the
// cases of engine/host_rows_cases.h (prompt logprobs and embeddings against a float64 forward and
// HF's logits) on the host path (serving on the CPU) and on the device-sampling path (steps
// launched, rows copied at launch: engine::HostRows), which RunnerOptions::sample_on_host runs
// without a device, with the overlap schedule. tests/cuda/cuda_engine_test.cc runs them on CUDA.
#include "engine/host_rows_cases.h"

namespace spindle::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Cpu, HostRowsEngine,
                         ::testing::Values(HostRowsPath{"host", attn::Device::kCpu, "reference", false, 0, nullptr},
                                           HostRowsPath{"device_sampling", attn::Device::kCpu, "reference", true, 0,
                                                        nullptr}),
                         host_rows_path_name);

}  // namespace
}  // namespace spindle::testing

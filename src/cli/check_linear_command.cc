// spindle __check-linear (hidden): the linear validation child. Runs one registered CPU linear
// kernel on random weights of each --shape against a float64 product, optionally times it, and
// prints one JSON line (kernels::cpu::LinearCheckReport) on stdout.
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "kernels/cpu/select/linear_check.h"

namespace spindle::cli {
namespace {

struct CheckLinearArgs {
  std::string kernel;
  std::vector<std::string> shapes;       // OUTxIN:DTYPE
  std::vector<int64_t> timing_rows;
  bool bf16_activations = false;
};

}  // namespace

void add_check_linear_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CheckLinearArgs>();
  auto* cmd = add_child_command(app, "__check-linear", "linear validation child (internal)", [args, &exit_code] {
    kernels::cpu::LinearCheckRequest request;
    request.kernel = args->kernel;
    for (const std::string& s : args->shapes) request.shapes.push_back(kernels::cpu::parse_linear_shape(s));
    request.timing_rows = args->timing_rows;
    request.allow_bf16_activations = args->bf16_activations;
    exit_code = kernels::cpu::check_linear_child_main(request);
  });
  cmd->add_option("--kernel", args->kernel)->required();
  cmd->add_option("--shape", args->shapes)->required();
  cmd->add_option("--timing-rows", args->timing_rows)->delimiter(',');
  cmd->add_flag("--bf16-activations", args->bf16_activations);
}

}  // namespace spindle::cli

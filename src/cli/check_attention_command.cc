// spindle __check-attention (hidden): the validation child. Runs one backend on random inputs of
// the given shape against `reference` and prints one JSON line (attn::CheckReport) on stdout.
#include <memory>
#include <string>
#include <vector>

#include "attn/select/validation.h"
#include "cli/commands.h"
#include "util/error.h"

namespace spindle::cli {
namespace {

struct CheckArgs {
  std::string backend;
  int heads = 0, kv_heads = 0, head_dim = 0, page_size = 16;
  std::string kv_dtype = "BF16";
  float scale = 0;
  bool timing = false;
  int cuda_device = -1;
};

}  // namespace

void add_check_attention_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CheckArgs>();
  auto* cmd = add_child_command(app, "__check-attention", "validation child (internal)", [args, &exit_code] {
    attn::AttentionShape shape;
    shape.num_heads = args->heads;
    shape.num_kv_heads = args->kv_heads;
    shape.head_dim = args->head_dim;
    shape.scale = args->scale;
    const auto dtype = parse_dtype(args->kv_dtype);
    SPINDLE_CHECK(dtype.has_value(), "unknown KV dtype '{}'", args->kv_dtype);
    shape.kv_dtype = *dtype;
    shape.page_size = args->page_size;
    exit_code = attn::check_attention_child_main(args->backend, shape, args->timing, args->cuda_device);
  });
  cmd->add_option("--backend", args->backend)->required();
  cmd->add_option("--heads", args->heads)->required();
  cmd->add_option("--kv-heads", args->kv_heads)->required();
  cmd->add_option("--head-dim", args->head_dim)->required();
  cmd->add_option("--kv-dtype", args->kv_dtype);
  cmd->add_option("--page-size", args->page_size);
  cmd->add_option("--scale", args->scale)->required();
  cmd->add_flag("--timing", args->timing);
  cmd->add_option("--cuda-device", args->cuda_device);
}

}  // namespace spindle::cli

// swapffn init: writes a model file with deterministic random parameters for a config preset.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "swapffn/config.hpp"
#include "swapffn/file_output.hpp"
#include "swapffn/weights.hpp"

namespace swapffn::cli {

namespace {
struct InitArgs {
  std::string out, preset = "default";
  uint64_t seed = 1;
  std::vector<std::string> sets;
};
}  // namespace

void add_init_command(CLI::App& app) {
  auto a = std::make_shared<InitArgs>();
  auto* cmd = add_command(app, "init", "write a model with random parameters (safetensors)",
                          "swapffn init --out m.safetensors --config default --seed 1");
  cmd->add_option("--out", a->out, "output model file")->required();
  cmd->add_option("--config", a->preset, "config preset: default or tiny")->capture_default_str();
  cmd->add_option("--seed", a->seed, "random seed of the parameters")->capture_default_str();
  cmd->add_option("--set", a->sets, "override one config field: key=value (repeatable)");
  cmd->callback([a] {
    check_writable(a->out);
    Config cfg = Config::preset(a->preset);
    for (const auto& kv : a->sets) cfg.set(kv);
    cfg.validate();
    const Weights w = Weights::random(cfg, a->seed);
    w.save(a->out);
    std::printf("wrote %s: config %s (seed %llu), %.1f MFLOP/token\n", a->out.c_str(),
                cfg.to_json_string().c_str(), static_cast<unsigned long long>(a->seed),
                cfg.flops_per_token() * 1e-6);
  });
}

}  // namespace swapffn::cli

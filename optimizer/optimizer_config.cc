#include "optimizer/optimizer_config.h"

#include "absl/strings/str_cat.h"

namespace mlpo {

const std::vector<ConfigKey>& OptimizerConfigKeys() {
  static const std::vector<ConfigKey>* keys = new std::vector<ConfigKey>{
      {"state_format",
       "`\"fp32\"`, `\"bf16-moments\"` or `\"int8-moments\"`",
       "(the optimizer's option; fp32)", "", "",
       "how the optimizer holds Adam's moments; fixed when the store is "
       "created, a contradicting option is an error"},
      {"write_behind", "`true` or `false`", "true", "", "",
       "a step returns once the parameters hold their new values; its "
       "commits and its index write land during the next forward and "
       "backward, and the next step, checkpoint, state read, flush or "
       "close waits for them"},
      {"read_ahead", "`true`, `false` or a count", "true", "0", "64",
       "once a step's kernels are done, the next step's first subgroups "
       "the DRAM tier does not hold are read into buffers of their own "
       "(`true`: 4, or the prefetch depth when deeper; a count: that "
       "many; each holds a subgroup's state), so the next step starts "
       "with those reads done"},
  };
  return *keys;
}

void RegisterOptimizerConfigKeys() {
  RegisterUpperConfigKeys(OptimizerConfigKeys());
}

namespace {

// Registered before main in every binary that links this file (the
// explicit calls cover a linker that leaves it out).
const bool registered = [] {
  RegisterOptimizerConfigKeys();
  return true;
}();

}  // namespace

absl::StatusOr<OptimizerConfig> ParseOptimizerConfig(
    const std::map<std::string, ConfigValue>& upper) {
  using Kind = ConfigValue::Kind;
  OptimizerConfig c;
  for (const auto& [key, v] : upper) {
    if (key == "state_format") {
      absl::StatusOr<StateFormat> f = ParseStateFormat(v.string);
      if (v.kind != Kind::kString || !f.ok())
        return absl::InvalidArgumentError(
            "config key 'state_format': expected \"fp32\", "
            "\"bf16-moments\" or \"int8-moments\"");
      c.state_format = *f;
    } else if (key == "write_behind") {
      if (v.kind != Kind::kBool)
        return absl::InvalidArgumentError(
            "config key 'write_behind': expected true or false");
      c.write_behind = v.boolean;
    } else if (key == "read_ahead") {
      if (v.kind == Kind::kBool) {
        c.read_ahead = v.boolean ? -1 : 0;
      } else if (v.kind == Kind::kInteger && v.integer >= 0 &&
                 v.integer <= 64) {
        c.read_ahead = static_cast<int>(v.integer);
      } else {
        return absl::InvalidArgumentError(
            "config key 'read_ahead': expected true, false or a count of "
            "subgroups 0..64");
      }
    }
    // (another layer's key: not this one's to check)
  }
  return c;
}

}  // namespace mlpo

// The optimizer's keys of a store config file: one TOML file configures
// the store and the optimizer over it, and the store (store/store_options.h)
// parses only its own keys. These it keeps unparsed for this layer
// (StoreOptions::upper), once RegisterOptimizerConfigKeys has told it their
// names:
//
//   write_behind = true      # a step returns before its commits land;
//                            # the next call that reads the state waits
//   read_ahead = true        # the next step's first reads start as a
//                            # step returns (a count: that many subgroups)
//   state_format = "fp32"    # how the optimizer holds Adam's moments: fp32 |
//                            # bf16-moments | int8-moments (fixed when the
//                            # store is created; kernel/state_codec.h)
//
// Optimizer::Init parses them (ParseOptimizerConfig) and lets the
// OptimizerOptions set in code win. Layers: store, base.
#ifndef MLPO_OPTIMIZER_OPTIMIZER_CONFIG_H_
#define MLPO_OPTIMIZER_OPTIMIZER_CONFIG_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/state_format.h"
#include "store/store_options.h"

namespace mlpo {

struct OptimizerConfig {
  // The state format the config names (unset: the optimizer's own option
  // decides, fp32 by default).
  std::optional<StateFormat> state_format;
  // Write-behind (update_pipeline.h): a step returns once every parameter
  // holds its new value, and its commits drain until the next call that
  // reads or writes the state. On by default (it changes no result).
  bool write_behind = true;
  // Read-ahead (update_pipeline.h): subgroups of the next step checked out
  // as a step returns. -1: 4, or the prefetch depth if more (`true`, the
  // default); 0: off; else that many (0..64).
  int read_ahead = -1;
};

// The optimizer's keys, documented as the store's are (the rows of
// docs/configuration.md after the store's; tests/optimizer/
// optimizer_config_test.cc checks each default and range against the
// parser).
const std::vector<ConfigKey>& OptimizerConfigKeys();

// Tells the store's parser the optimizer's keys (RegisterUpperConfigKeys).
// Idempotent; a binary that links this file registers them before main, and
// the programs that parse configs (the CLI, the bench, the Python module)
// call it as well.
void RegisterOptimizerConfigKeys();

// The optimizer's settings from a parsed config's `upper` values; a bad
// value is InvalidArgument naming the key.
absl::StatusOr<OptimizerConfig> ParseOptimizerConfig(
    const std::map<std::string, ConfigValue>& upper);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_OPTIMIZER_CONFIG_H_

// Pieces the store subcommands share across files (store_cmds.cc,
// tag_copy_cmd.cc, recover_cmd.cc).
#ifndef MLPO_TOOLS_STORE_CMD_UTIL_H_
#define MLPO_TOOLS_STORE_CMD_UTIL_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "store/object_store.h"

namespace mlpo {

// STORE and --json, which every store subcommand takes.
struct CommonArgs {
  std::string store;
  bool json = false;
};
CLI::App* AddStoreSub(CLI::App& app, const std::string& name,
                      const std::string& help, CommonArgs* a);

// `mlpo recover` (recover_cmd.cc), added by AddStoreCommands.
void AddRecoverCommand(CLI::App& app);

// "mlpo CMD: message" on stderr, then the command exits with `code`.
[[noreturn]] void Fail(const std::string& cmd, const absl::Status& s,
                       int code = 1);

// Which of a store's path `roots` `arg` names (its index, or its directory
// however spelt), or -1; `listing` gets "0 = root, 1 = root" for messages.
int PathArg(const std::vector<std::string>& roots, const std::string& arg,
            std::string* listing);

// `mlpo tag STORE NAME --copy-to PATH`: creates the tag unless it exists,
// then gives it a second copy on PATH (a path's directory or index).
void TagCopy(ObjectStore* s, const std::string& tag, const std::string& to,
             bool as_json);

}  // namespace mlpo

#endif  // MLPO_TOOLS_STORE_CMD_UTIL_H_

// Pieces the store subcommands share across files (store_cmds.cc,
// show_cmd.cc, tag_copy_cmd.cc, recover_cmd.cc).
#ifndef MLPO_TOOLS_STORE_CMD_UTIL_H_
#define MLPO_TOOLS_STORE_CMD_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "store/object_store.h"

namespace mlpo {

// STORE and --json, which every store subcommand takes.
struct CommonArgs {
  std::string store;
  bool json = false;
};
CLI::App* AddStoreSub(CLI::App& app, const std::string& name,
                      const std::string& help, CommonArgs* a);

// `mlpo recover` (recover_cmd.cc) and `mlpo show` (show_cmd.cc), added by
// AddStoreCommands.
void AddRecoverCommand(CLI::App& app);
void AddShowCommand(CLI::App& app);

// Opens the store `target` names (a TOML config or a store directory), or
// fails the command `cmd`. Commands that only read open it read-only, so
// they work beside a running job (which holds the writer lock), and say so
// on stderr when one does; the others take the lock.
std::unique_ptr<ObjectStore> OpenTarget(const std::string& cmd,
                                        const std::string& target,
                                        bool read_only = false);

// The optimizer state format the store records (a store from before
// formats, or one no optimizer opened: fp32).
std::string StateFormatOf(const StoreView& s);

// A version's extents (or replica extents) as JSON: path, segment file,
// offset, length, offset in the blob, xxh3.
nlohmann::json ExtentsJson(const StoreView& s,
                           const std::vector<ExtentRef>& list);

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

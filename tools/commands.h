// Subcommands of the mlpo CLI, each in its own file.
#ifndef MLPO_TOOLS_COMMANDS_H_
#define MLPO_TOOLS_COMMANDS_H_

#include "CLI/CLI.hpp"

namespace mlpo {

void AddProfileCommand(CLI::App& app);
void AddStoreCommands(CLI::App& app);  // inspect, ls, show, verify, tag, ...
void AddExportCommand(CLI::App& app);  // export (the adapter's checkpoints)
void AddPlanCommand(CLI::App& app);    // plan (the capacity planner)
void AddRelocateCommand(CLI::App& app);  // relocate (a moved or copied store)
void AddUnshareCommand(CLI::App& app);   // unshare (a hard-linked copy)
void AddCompletionCommand(CLI::App& app);  // completion (bash), last

}  // namespace mlpo

#endif  // MLPO_TOOLS_COMMANDS_H_

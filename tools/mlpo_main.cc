// mlpo: the command-line tool for stores (profile, inspect, verify, tags).
#include <iostream>

#include "CLI/CLI.hpp"
#include "optimizer/optimizer_config.h"
#include "tools/commands.h"
#include "tools/json_errors.h"
#include "tools/ownership.h"

#ifndef MLPO_VERSION
#define MLPO_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  // (a store config may hold the optimizer's keys beside the store's)
  mlpo::RegisterOptimizerConfigKeys();
  mlpo::JsonErrors json_errors(argc, argv);
  CLI::App app{
      "mlpo: inspect and manage tiered optimizer-state stores.\n"
      "STORE arguments name a store's TOML config file, a store directory "
      "(<path>/<store>/rank-<r>), or a directory holding one store (the "
      "adapter's store= path). Every subcommand takes --json."};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  app.set_version_flag("--version", "mlpo " MLPO_VERSION,
                       "Print mlpo's version and exit");
  mlpo::AddProfileCommand(app);
  mlpo::AddStoreCommands(app);
  mlpo::AddExportCommand(app);
  mlpo::AddPlanCommand(app);
  mlpo::AddRelocateCommand(app);
  mlpo::AddUnshareCommand(app);
  mlpo::AddCompletionCommand(app);
  // CLI11 reports a mistyped subcommand as "A subcommand is required":
  // name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->get_name() == argv[1]) known = true;
    if (!known) {
      std::cerr << "mlpo: unknown subcommand '" << argv[1]
                << "'; `mlpo --help` lists them\n";
      return json_errors.Finish(2);
    }
  }
  try {
    app.parse(argc, argv);
    mlpo::GiveFilesToOwners();
  } catch (const CLI::ParseError& e) {
    mlpo::GiveFilesToOwners();  // (a command that failed may have written)
    int rc = app.exit(e);
    // A command's own failure keeps its code; every usage error (a bad
    // option value, a missing argument) exits 2, as the README says.
    if (rc != 0 && dynamic_cast<const CLI::RuntimeError*>(&e) == nullptr)
      rc = 2;
    return json_errors.Finish(rc);
  }
  return 0;
}

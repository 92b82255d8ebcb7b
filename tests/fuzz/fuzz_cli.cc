// libFuzzer: the mlpo CLI's argument handling. The input is split at NUL
// bytes into argv; every subcommand's options, validators and conversions
// run, but no command does: the main app's parse-complete callback (which
// CLI11 runs after parsing and validation, before any subcommand's) stops
// the run, so nothing touches the disk. Parse errors are CLI11 exceptions, which the CLI reports as usage
// errors; anything else escaping is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/commands.h"

namespace {
struct Parsed {
  int unused = 0;
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"mlpo"};
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 24; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  if (!cur.empty()) args.push_back(cur);
  CLI::App app{"mlpo"};
  app.require_subcommand(1);
  mlpo::AddProfileCommand(app);
  mlpo::AddStoreCommands(app);
  mlpo::AddExportCommand(app);
  mlpo::AddPlanCommand(app);
  mlpo::AddRelocateCommand(app);
  mlpo::AddUnshareCommand(app);
  app.parse_complete_callback([] { throw Parsed(); });
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::Error&) {
    // A usage error: the CLI prints it and exits 2.
  } catch (const Parsed&) {
    // Valid arguments: the command would run now.
  }
  return 0;
}

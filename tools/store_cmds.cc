namespace CLI { class App; }
#include "tools/commands.h"
namespace mlpo { void AddStoreCommands(CLI::App&) {} }

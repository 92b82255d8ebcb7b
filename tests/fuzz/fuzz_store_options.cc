// libFuzzer: the TOML store config loader and the STORE descriptor reader.
// Anything parses to an error or to options that pass validation.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "store/store_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto o = mlpo::ParseStoreOptions(text, "/nonexistent-base");
  if (o.ok() && !mlpo::ValidateStoreOptions(*o).ok()) std::abort();
  auto d = mlpo::StoreOptionsFromDescriptor(text);
  (void)d;
  return 0;
}

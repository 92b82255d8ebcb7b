// `mlpo tag --copy-to` and the path arguments of the store subcommands
// (see store_cmd_util.h).
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "store/admin/copy.h"
#include "store/store_target.h"
#include "tools/cli_util.h"
#include "tools/json_errors.h"
#include "tools/store_cmd_util.h"

namespace mlpo {

using json = nlohmann::json;

void Fail(const std::string& cmd, const absl::Status& s, int code) {
  NoteFailureStatus(s.code());
  std::cerr << "mlpo " << cmd << ": " << s.message() << "\n";
  throw CLI::RuntimeError(code);
}

int PathArg(const std::vector<std::string>& roots, const std::string& arg,
            std::string* listing) {
  int index = -1;
  for (size_t i = 0; i < roots.size(); ++i) {
    absl::StrAppend(listing, listing->empty() ? "" : ", ", i, " = ", roots[i]);
    if (arg == std::to_string(i) || arg == roots[i] ||
        SameDirectory(arg, roots[i]))
      index = static_cast<int>(i);
  }
  return index;
}

void TagCopy(ObjectStore* s, const std::string& tag, const std::string& to,
             bool as_json) {
  std::vector<std::string> list;
  for (const StorePathConfig& pc : s->options().paths)
    list.push_back(pc.path.root);
  std::string roots;
  const int index = PathArg(list, to, &roots);
  if (index < 0)
    Fail("tag", absl::InvalidArgumentError(absl::StrCat(
                    "--copy-to ", to, " is not one of the store's paths (",
                    roots, "); add the directory to the store's paths to "
                    "copy a checkpoint there")), 2);
  if (!s->Tags().count(tag)) {
    absl::Status st = s->Tag(tag);
    if (!st.ok()) Fail("tag", st);
  }
  auto rep = CopyTagTo(*s, tag, index, [](uint64_t done, uint64_t total) {
    Progress("copy " + FormatBytes(done) + " / " + FormatBytes(total));
  });
  Progress("");
  if (!rep.ok()) Fail("tag", rep.status());
  const double rate = rep->seconds > 0 ? rep->bytes / rep->seconds : 0;
  json j{{"ok", true},
         {"command", "tag"},
         {"tag", tag},
         {"copy_to", rep->path_root},
         {"copied_versions", rep->copied},
         {"already_there", rep->already},
         {"bytes", rep->bytes},
         {"seconds", rep->seconds},
         {"bytes_per_s", rate},
         {"path_write_bps", rep->path_write_bps},
         {"bandwidth_source", rep->bandwidth_source},
         {"ratio_to_path_bandwidth",
          rep->path_write_bps > 0 ? json(rate / rep->path_write_bps)
                                  : json(nullptr)}};
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (rep->copied == 0) {
    std::printf("tag %s: all %lu versions have a copy on %s already\n",
                tag.c_str(), (unsigned long)rep->already,
                rep->path_root.c_str());
    return;
  }
  std::printf("tag %s copied to %s: %lu versions (%lu had a copy there), %s "
              "in %.2f s = %s",
              tag.c_str(), rep->path_root.c_str(), (unsigned long)rep->copied,
              (unsigned long)rep->already, FormatBytes(rep->bytes).c_str(),
              rep->seconds, FormatRate(rate).c_str());
  if (rep->path_write_bps > 0)
    std::printf(", %.2f of the path's %s write bandwidth (%s)\n",
                rate / rep->path_write_bps,
                FormatRate(rep->path_write_bps).c_str(),
                rep->bandwidth_source == "write_cap" ? "its write_cap"
                                                     : "mlpo profile --store");
  else
    std::printf(" (the path's bandwidth is unknown: `mlpo profile --store "
                "STORE` measures it)\n");
}

}  // namespace mlpo

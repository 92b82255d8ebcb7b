// Store subcommands of the mlpo CLI: inspect, ls, verify, tag, tags,
// restore, drop-tag, gc (show: show_cmd.cc, recover: recover_cmd.cc). Each
// takes STORE (a TOML config or a store directory) and --json.
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "optimizer/kernel/update_rule.h"
#include "store/admin/gc.h"
#include "store/admin/relocate.h"  // CopiedFrom
#include "store/admin/verify.h"
#include "store/object_store.h"
#include "store/store_files.h"
#include "store/store_target.h"
#include "tools/cli_checks.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/ownership.h"
#include "tools/store_cmd_util.h"
#include <sys/stat.h>

namespace mlpo {

namespace fs = std::filesystem;

CLI::App* AddStoreSub(CLI::App& app, const std::string& name,
                      const std::string& help, CommonArgs* a) {
  auto* c = app.add_subcommand(name, help);
  c->add_option("store", a->store,
                "Store TOML config, or a store directory <path>/<store>/rank-<r>")
      ->required();
  c->add_flag("--json", a->json, "Print one JSON object on stdout");
  return c;
}

std::unique_ptr<ObjectStore> OpenTarget(const std::string& cmd,
                                        const std::string& target,
                                        bool read_only) {
  auto o = StoreOptionsForTarget(target);
  if (!o.ok()) Fail(cmd, o.status());
  o->read_only = read_only;
  if (!read_only) WillWrite(*o);  // run as root: the owner keeps the files
  if (read_only) {
    int pid = WriterLock::HolderPid(o->meta_dir);
    if (pid != 0)
      std::cerr << "mlpo " << cmd << ": note: store is open by "
                << (pid > 0 ? "pid " + std::to_string(pid) : "another process")
                << "; showing its index as of now (versions it replaces "
                   "meanwhile may read back as stale)\n";
  }
  auto s = ObjectStore::Open(*o);
  if (!s.ok()) Fail(cmd, s.status());
  return std::move(*s);
}

std::string StateFormatOf(const StoreView& s) {
  auto f = s.GetAttribute(kStateFormatAttribute);
  return f.ok() ? *f : "fp32";
}

// The update rule and its state slots (optimizer/kernel/update_rule.h); a store
// from before rules holds Adam's.
std::string UpdateRuleOf(const StoreView& s) {
  auto r = s.GetAttribute(kUpdateRuleAttribute);
  return r.ok() ? *r : "adam";
}

nlohmann::json ExtentsJson(const StoreView& s,
                           const std::vector<ExtentRef>& list) {
  nlohmann::json ext = nlohmann::json::array();
  for (auto& e : list) {
    const StoragePath* p = &s.path_at(e.path);
    ext.push_back({{"path", p->root()},
                   {"file", p->SegmentFile(e.offset)},
                   {"offset", p->SegmentOffset(e.offset)},
                   {"length", e.length},
                   {"blob_offset", e.blob_offset},
                   {"xxh3", absl::StrFormat("%016x", e.checksum)}});
  }
  return ext;
}

namespace {

using json = nlohmann::json;

// The read-only commands (inspect, ls, tags, verify) see a store only
// through its read-only view.
std::unique_ptr<StoreView> OpenView(const std::string& cmd,
                                    const std::string& target) {
  return OpenTarget(cmd, target, /*read_only=*/true);
}

// The step a tag's versions were committed at: one number when all agree
// (every optimizer tag), else null; "mixed" in text.
json TagStep(const StoreView& s,
             const std::map<std::string, uint64_t>& objs) {
  json step = nullptr;
  for (auto& [obj, v] : objs) {
    auto rec = s.GetVersion(obj, v);
    if (!rec.ok()) return nullptr;
    if (step.is_null()) {
      step = rec->step;
    } else if (step.get<uint64_t>() != rec->step) {
      return "mixed";
    }
  }
  return step;
}

// A store's tags with their versions, in the order their state was written
// (store/store_view.h TagsInWriteOrder).
using TagVersions = std::map<std::string, uint64_t>;
std::vector<std::pair<std::string, TagVersions>> OrderedTags(
    const StoreView& s) {
  auto tags = s.Tags();
  std::vector<std::pair<std::string, TagVersions>> out;
  for (const std::string& t : TagsInWriteOrder(tags))
    out.emplace_back(t, std::move(tags[t]));
  return out;
}

std::string StepText(const json& step) {
  if (step.is_null()) return "-";
  if (step.is_string()) return step.get<std::string>();
  return std::to_string(step.get<uint64_t>());
}

json PathsJson(const StoreStats& st) {
  json paths = json::array();
  for (auto& p : st.paths)
    paths.push_back({{"root", p.root},
                     {"kind", p.kind},
                     {"uuid", p.uuid},
                     {"total_bytes", p.usage.total},
                     {"used_bytes", p.usage.used},
                     {"free_bytes", p.usage.free},
                     {"referenced_bytes", p.referenced_bytes},
                     {"unreferenced_bytes", p.unreferenced_bytes}});
  return paths;
}

// A tag named as the adapter's automatic ones ("step-<t>", "step-<t>.<k>")
// in a store whose keep_checkpoints drops the oldest of those would go with
// them: refused there, before anything is written.
void RefuseRetainedTagName(const ObjectStore& s, const std::string& name) {
  auto digits = [](absl::string_view d) {
    return !d.empty() && absl::c_all_of(d, [](char c) {
      return absl::ascii_isdigit(static_cast<unsigned char>(c));
    });
  };
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, "step-")) return;
  const auto dot = rest.find('.');
  if (!digits(rest.substr(0, dot)) ||
      (dot != rest.npos && !digits(rest.substr(dot + 1))))
    return;
  auto order = s.GetAttribute(kCheckpointOrderAttribute);
  if (!order.ok() || order->empty()) return;
  Fail("tag", absl::InvalidArgumentError(absl::StrCat(
                  "tag '", name, "': names of the form step-<t> are the "
                  "PyTorch adapter's automatic checkpoints in this store, and "
                  "its keep_checkpoints drops the oldest of them, so a tag of "
                  "that name would be dropped with them; nothing was changed: "
                  "pick another name")));
}

// The stores `tag`, `restore` and `drop-tag` act on: every rank of a store
// of several ranks (data parallel: <path>/<store>/rank-<r>) when the target
// is its directory or a path root holding only it, since its shards must
// stay one state; a single rank of such a store is refused, naming the
// store's directory. Otherwise the one store the target names.
std::vector<std::unique_ptr<ObjectStore>> OpenStoreRanks(
    const std::string& cmd, const std::string& target) {
  std::vector<std::unique_ptr<ObjectStore>> out;
  const std::vector<std::string> ranks = RanksOfStoreAt(target);
  for (const std::string& d : ranks) out.push_back(OpenTarget(cmd, d));
  if (!out.empty()) return out;
  std::error_code ec;
  if (fs::is_directory(target, ec)) {
    const std::vector<std::string> dirs = FindStoreDirs(target);
    if (dirs.size() == 1) {
      const std::string store = ParentOfStoreDir(dirs[0]);
      const std::vector<std::string> siblings = RanksOfStoreAt(store);
      if (!siblings.empty())
        Fail(cmd, absl::InvalidArgumentError(absl::StrCat(
                      dirs[0], " is one of the ", siblings.size(),
                      " ranks of store ", store,
                      ", whose shards must stay one state: nothing was "
                      "changed; pass ", store, " to act on every rank")));
    }
  }
  out.push_back(OpenTarget(cmd, target));
  return out;
}

// mlpo inspect
void AddInspectCommand(CLI::App& app) {
  auto a = std::make_shared<CommonArgs>();
  auto* c = AddStoreSub(app, "inspect",
                        "Summary: objects, versions, bytes per path, tags, "
                        "free space", a.get());
  c->callback([a] {
    auto s = OpenView("inspect", a->store);
    StoreStats st = s->Stats();
    auto tags = OrderedTags(*s);
    const auto& o = s->options();
    auto from = s->GetAttribute(kCopiedFromAttribute);
    json copied_from = json::array();
    if (from.ok())
      for (const std::string& u : CopiedFrom(*from)) copied_from.push_back(u);
    json j = {{"store", o.name},
              {"rank", o.rank},
              {"meta_dir", o.meta_dir},
              {"uuid", s->store_uuid()},
              {"copied_from", copied_from},
              {"durability", o.durability == Durability::kStep ? "step" : "tag"},
              {"state_format", StateFormatOf(*s)},
              {"update_rule", UpdateRuleOf(*s)},
              {"objects", st.objects},
              {"objects_with_head", st.objects_with_head},
              {"versions", st.versions},
              {"tags", json::array()},
              {"paths", PathsJson(st)}};
    for (auto& [t, objs] : tags)
      j["tags"].push_back({{"name", t},
                           {"objects", objs.size()},
                           {"step", TagStep(*s, objs)}});
    if (a->json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::printf("store %s rank %d  (index %s, durability %s, state format "
                "%s, update rule %s)\n",
                o.name.c_str(), o.rank, o.meta_dir.c_str(),
                j["durability"].get<std::string>().c_str(),
                j["state_format"].get<std::string>().c_str(),
                j["update_rule"].get<std::string>().c_str());
    std::string lineage;  // newest original first
    for (auto u = copied_from.rbegin(); u != copied_from.rend(); ++u)
      absl::StrAppend(&lineage, lineage.empty() ? ", a copy of store "
                                                : ", itself a copy of ",
                      u->get<std::string>());
    std::printf("identity %s%s\n", s->store_uuid().c_str(),
                lineage.c_str());
    std::printf("objects %lu (%lu with a committed version), version "
                "records %lu, tags %zu\n",
                (unsigned long)st.objects, (unsigned long)st.objects_with_head,
                (unsigned long)st.versions, tags.size());
    std::printf("%-40s %-5s %12s %12s %12s %12s\n", "path", "kind",
                "referenced", "gc-able", "used", "free");
    for (auto& p : st.paths)
      std::printf("%-40s %-5s %12s %12s %12s %12s\n", p.root.c_str(),
                  p.kind.c_str(), FormatBytes(p.referenced_bytes).c_str(),
                  FormatBytes(p.unreferenced_bytes).c_str(),
                  FormatBytes(p.usage.used).c_str(),
                  FormatBytes(p.usage.free).c_str());
    for (auto& t : j["tags"])
      std::printf("tag %s: %zu objects, step %s\n",
                  t["name"].get<std::string>().c_str(),
                  (size_t)t["objects"].get<uint64_t>(),
                  StepText(t["step"]).c_str());
  });
}

// mlpo ls
void AddLsCommand(CLI::App& app) {
  auto a = std::make_shared<CommonArgs>();
  auto* c = AddStoreSub(app, "ls", "List objects with their head (step and "
                                   "sequence number), size and kept "
                                   "versions", a.get());
  c->callback([a] {
    auto s = OpenView("ls", a->store);
    json j = json::array();
    for (auto& i : s->List())
      j.push_back({{"name", i.name},
                   {"head", i.has_head ? json(i.head) : json(nullptr)},
                   {"head_step",
                    i.has_head ? json(i.head_step) : json(nullptr)},
                   {"bytes", i.layout.total_bytes()},
                   {"layout", i.layout.DebugString()},
                   {"versions", i.versions},
                   {"steps", i.steps}});
    if (a->json) {
      std::cout << json{{"objects", j}}.dump(2) << "\n";
      return;
    }
    std::printf("%-32s %8s %8s %8s %12s  %s\n", "object", "step", "version",
                "kept", "bytes", "layout");
    for (auto& o : j)
      std::printf("%-32s %8s %8s %8zu %12s  %s\n",
                  o["name"].get<std::string>().c_str(),
                  StepText(o["head_step"]).c_str(),
                  StepText(o["head"]).c_str(), o["versions"].size(),
                  FormatBytes(o["bytes"].get<double>()).c_str(),
                  o["layout"].get<std::string>().c_str());
  });
}

// mlpo verify
void AddVerifyCommand(CLI::App& app) {
  auto a = std::make_shared<CommonArgs>();
  auto tag = std::make_shared<std::string>();
  auto* c = AddStoreSub(app, "verify",
                        "Read every extent of every head (or of --tag) and "
                        "check its xxh3; exit 0 when all hold, 3 when some "
                        "version reads back only from its replica (tag "
                        "--copy-to: nothing lost, but one copy is bad), 1 "
                        "when something is unreadable or a file of the "
                        "store belongs to another user (FOREIGN OWNER)",
                        a.get());
  c->add_option("--tag", *tag, "Verify this tag's versions instead of heads")
      ->check(NotEmpty());
  auto deep = std::make_shared<bool>(false);
  c->add_flag("--deep", *deep,
              "Also check the index against the data without trusting "
              "either: every extent of every record (heads, tags, records "
              "awaiting gc) inside a segment file that exists and is long "
              "enough, records' extents tiling their blobs, no two "
              "extents overlapping");
  c->callback([a, tag, deep] {
    auto s = OpenView("verify", a->store);
    auto rep = Verify(*s, 
        *tag,
        [](uint64_t done, uint64_t total) {
          Progress("verify " + FormatBytes(done) + " / " +
                   FormatBytes(total));
        },
        *deep);
    Progress("");
    if (!rep.ok()) Fail("verify", rep.status());
    const std::vector<std::string> owner_problems = ForeignOwnedFiles(*s);
    json bad = json::array();
    for (auto& b : rep->bad)
      bad.push_back({{"object", b.object}, {"version", b.version},
                     {"path", b.path}, {"file", b.file},
                     {"offset", b.file_offset}, {"length", b.length},
                     {"error", b.error}});
    json covered = json::array();
    for (auto& b : rep->covered)
      covered.push_back({{"object", b.object}, {"version", b.version},
                         {"path", b.path}, {"file", b.file},
                         {"offset", b.file_offset}, {"length", b.length},
                         {"error", b.error}});
    json superseded = json::array();
    for (auto& b : rep->superseded)
      superseded.push_back({{"object", b.object}, {"version", b.version}});
    // A segment file missing or cut short: the writable open refuses the
    // store (recover --salvage is the way out), so verify never says OK.
    const bool lost = !rep->bad.empty() || !rep->index_problems.empty() ||
                      !rep->missing_segments.empty() ||
                      !rep->short_segments.empty() ||
                      !owner_problems.empty();
    const bool one_copy =
        !rep->covered.empty() || !rep->backup_problems.empty();
    if (a->json) {
      std::cout << json{{"ok", !lost},
                        {"state", lost       ? "bad"
                                  : one_copy ? "replica_only"
                                             : "ok"},
                        {"index_problems", rep->index_problems},
                        {"backup_problems", rep->backup_problems},
                        {"owner_problems", owner_problems},
                        {"objects", rep->objects},
                        {"extents", rep->extents}, {"bytes", rep->bytes},
                        {"replicas", rep->replicas}, {"bad", bad},
                        {"covered_by_replica", covered},
                        {"superseded", superseded},
                        {"missing_segments", rep->missing_segments},
                        {"short_segments", rep->short_segments}}
                       .dump(2)
                << "\n";
    } else {
      for (auto& f : rep->missing_segments)
        std::printf("MISSING segment file %s (`mlpo recover --salvage "
                    "STORE` keeps every tag and head that still reads)\n",
                    f.c_str());
      for (auto& f : rep->short_segments)
        std::printf("SHORT segment file %s (truncated; `mlpo recover "
                    "--salvage STORE` keeps every tag and head that still "
                    "reads)\n", f.c_str());
      for (auto& m : rep->index_problems)
        std::printf("BAD INDEX %s%s\n", m.c_str(),
                    absl::StrContains(m, "mlpo recover")
                        ? ""
                        : "; `mlpo recover STORE` rebuilds it from a backup");
      for (auto& m : owner_problems)
        std::printf("FOREIGN OWNER %s\n", m.c_str());
      for (auto& m : rep->backup_problems)
        std::printf("BAD BACKUP %s (the live index is fine; the next tag "
                    "writes a new backup)\n", m.c_str());
      for (auto& b : rep->superseded)
        std::printf("superseded while reading: object %s version %lu (the "
                    "running job replaced it; not corruption)\n",
                    b.object.c_str(), (unsigned long)b.version);
      for (auto& b : rep->covered)
        std::printf("ONLY THE REPLICA HOLDS object %s version %lu: path %s "
                    "file %s offset %lu length %lu: %s\n",
                    b.object.c_str(), (unsigned long)b.version,
                    b.path.c_str(), b.file.c_str(),
                    (unsigned long)b.file_offset, (unsigned long)b.length,
                    b.error.c_str());
      for (auto& b : rep->bad)
        std::printf("BAD object %s version %lu path %s file %s offset %lu "
                    "length %lu: %s\n",
                    b.object.c_str(), (unsigned long)b.version, b.path.c_str(),
                    b.file.c_str(), (unsigned long)b.file_offset,
                    (unsigned long)b.length, b.error.c_str());
      std::printf("%s: %lu objects (%lu with a replica), %lu extents, %s "
                  "checked, %zu bad, %zu readable from the replica only\n",
                  lost                        ? "FAILED"
                  : !rep->covered.empty()     ? "READABLE ONLY FROM THE REPLICA"
                  : one_copy                  ? "DATA OK, A BACKUP IS BAD"
                                              : "OK",
                  (unsigned long)rep->objects, (unsigned long)rep->replicas,
                  (unsigned long)rep->extents,
                  FormatBytes(rep->bytes).c_str(), rep->bad.size(),
                  rep->covered.size());
    }
    if (lost) throw CLI::RuntimeError(1);
    if (one_copy) throw CLI::RuntimeError(3);
  });
}

// mlpo health
void AddHealthCommand(CLI::App& app) {
  auto a = std::make_shared<CommonArgs>();
  auto* c = AddStoreSub(
      app, "health",
      "One line on a store's health without reading its data (seconds on "
      "any size, beside a running job): the index opens and its blocks "
      "pass their checksums, every segment file is there and long "
      "enough, every version's extents lie inside them without overlap. "
      "Exit 0 healthy, 1 damaged (then `mlpo verify --deep STORE` names "
      "what and `docs/operations.md` says what to do); a store that does "
      "not open says why and exits 1 too",
      a.get());
  c->callback([a] {
    auto s = OpenView("health", a->store);
    std::vector<std::string> problems;
    if (absl::Status st = CheckLiveIndex(*s); !st.ok())
      problems.push_back(absl::StrCat("index: ", st.message()));
    for (size_t p = 0; p < s->num_paths(); ++p) {
      for (auto& f : s->path_at(p).MissingSegments())
        problems.push_back("missing segment file " + f);
      for (auto& f : s->path_at(p).ShortSegments())
        problems.push_back("short segment file " + f);
    }
    for (const BadExtent& b : CheckExtentMap(*s))
      problems.push_back(absl::StrCat("object ", b.object, " version ",
                                      b.version, " in ", b.file, ": ",
                                      b.error));
    uint64_t step = 0, heads = 0;
    for (const ObjectInfo& o : s->List())
      if (o.has_head) {
        ++heads;
        step = std::max(step, o.head_step);
      }
    auto tags = OrderedTags(*s);
    const int pid = WriterLock::HolderPid(s->options().meta_dir);
    const bool ok = problems.empty();
    if (a->json) {
      std::cout << json{{"ok", ok},
                        {"state", ok ? "ok" : "bad"},
                        {"store", s->options().name},
                        {"meta_dir", s->options().meta_dir},
                        {"step", step},
                        {"objects_with_head", heads},
                        {"tags", tags.size()},
                        {"newest_tag",
                         tags.empty() ? json(nullptr)
                                      : json(tags.back().first)},
                        {"held_by_pid", pid > 0 ? json(pid) : json(nullptr)},
                        {"problems", problems}}
                       .dump()
                << "\n";
    } else {
      std::string line = absl::StrCat(
          ok ? "OK" : "DAMAGED", " ", s->options().meta_dir, ": step ",
          step, ", ", heads, heads == 1 ? " object, " : " objects, ",
          tags.size(), tags.size() == 1 ? " tag" : " tags");
      if (!tags.empty())
        absl::StrAppend(&line, " (newest ", tags.back().first, ")");
      if (pid > 0) absl::StrAppend(&line, ", open by pid ", pid);
      if (!ok)
        absl::StrAppend(&line, "; ", problems.size(), " problem",
                        problems.size() == 1 ? "" : "s", ", the first: ",
                        problems.front(),
                        " (`mlpo verify --deep STORE` lists them all)");
      std::printf("%s\n", line.c_str());
    }
    if (!ok) throw CLI::RuntimeError(1);
  });
}

// mlpo tags
void AddTagsCommand(CLI::App& app) {
  auto a = std::make_shared<CommonArgs>();
  auto* c = AddStoreSub(app, "tags",
                        "List tags with their step, in the order their "
                        "state was written (oldest first)", a.get());
  c->callback([a] {
    auto s = OpenView("tags", a->store);
    json j = json::array();
    for (auto& [t, objs] : OrderedTags(*s)) {
      json o = json::object();
      for (auto& [n, v] : objs) o[n] = v;
      j.push_back({{"name", t}, {"objects", o}, {"step", TagStep(*s, objs)}});
    }
    if (a->json) {
      std::cout << json{{"tags", j}}.dump(2) << "\n";
      return;
    }
    for (auto& t : j)
      std::printf("%s (%zu objects, step %s)\n",
                  t["name"].get<std::string>().c_str(), t["objects"].size(),
                  StepText(t["step"]).c_str());
  });
}

// mlpo gc
void AddGcCommand(CLI::App& app) {
  auto a = std::make_shared<CommonArgs>();
  auto* c = AddStoreSub(app, "gc", "Delete versions no head or tag references "
                                   "and free their extents", a.get());
  c->callback([a] {
    auto s = OpenTarget("gc", a->store);
    auto freed = Gc(*s);
    if (!freed.ok()) Fail("gc", freed.status());
    if (a->json)
      std::cout << json{{"freed_bytes", *freed}}.dump(2) << "\n";
    else
      std::printf("gc: freed %s\n", FormatBytes(*freed).c_str());
  });
}

// mlpo tag, restore and drop-tag: one callback, the store's call each
// makes its own.
void AddTagCommands(CLI::App& app) {
  struct TagCmd {
    const char* name;
    const char* help;
    absl::Status (ObjectStore::*fn)(const std::string&);
  };
  for (TagCmd t : {TagCmd{"tag", "Record the current version of every object as a named checkpoint (no data copied); with --copy-to, also give it a second copy on one of the store's paths", &ObjectStore::Tag},
                   TagCmd{"restore", "Move every head back to a tag's versions", &ObjectStore::Restore},
                   TagCmd{"drop-tag", "Delete a tag (its space is freed by gc)", &ObjectStore::DropTag}}) {
    auto a = std::make_shared<CommonArgs>();
    auto name = std::make_shared<std::string>();
    auto copy_to = std::make_shared<std::string>();
    auto* c = AddStoreSub(app, t.name, t.help, a.get());
    c->add_option("name", *name, "Tag name")->required();
    std::string cmd = t.name;
    if (cmd == "tag")
      c->add_option("--copy-to", *copy_to,
                    "Copy the tag's versions to this path of the store (its "
                    "directory, or its index 0, 1, ...) as a second copy, so "
                    "the checkpoint survives the loss of the other paths' "
                    "data; an existing tag is copied without being "
                    "re-created");
    auto fn = t.fn;
    c->callback([a, name, cmd, fn, copy_to] {
      if (!copy_to->empty()) {
        auto s = OpenTarget(cmd, a->store);
        RefuseRetainedTagName(*s, *name);
        TagCopy(s.get(), *name, *copy_to, a->json);
        return;
      }
      // Every rank is checked before any changes: the tag is new in each
      // (tag), or each holds it (restore, drop-tag).
      auto stores = OpenStoreRanks(cmd, a->store);
      for (auto& s : stores) {
        if (cmd == "tag") RefuseRetainedTagName(*s, *name);
        const bool has = s->Tags().count(*name) > 0;
        const std::string where = StoreWhere(s->options());
        if (has && cmd == "tag")
          Fail(cmd, absl::AlreadyExistsError(absl::StrCat(
                        where, " already has tag '", *name,
                        "'; nothing was changed")));
        if (!has && cmd != "tag")
          Fail(cmd, absl::NotFoundError(absl::StrCat(
                        where, " has no tag '", *name,
                        "'; nothing was changed")));
      }
      for (auto& s : stores) {
        absl::Status st = ((*s).*fn)(*name);
        if (!st.ok()) Fail(cmd, st);
      }
      if (a->json)
        std::cout << json{{"ok", true}, {"command", cmd}, {"tag", *name},
                          {"ranks", stores.size()}}.dump(2)
                  << "\n";
      else if (stores.size() > 1)
        std::printf("%s %s: done (%zu ranks)\n", cmd.c_str(), name->c_str(),
                    stores.size());
      else
        std::printf("%s %s: done\n", cmd.c_str(), name->c_str());
    });
  }
}

}  // namespace

void AddStoreCommands(CLI::App& app) {
  AddInspectCommand(app);
  AddLsCommand(app);
  AddShowCommand(app);
  AddVerifyCommand(app);
  AddHealthCommand(app);
  AddTagCommands(app);
  AddTagsCommand(app);
  AddGcCommand(app);
  AddRecoverCommand(app);
}

}  // namespace mlpo

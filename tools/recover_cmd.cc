// `mlpo recover STORE`: a damaged index rolled back or rebuilt, a lost
// path forgotten (--lost-path), a store that lost data salvaged
// (--salvage), or a store's data discarded (--discard).
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "store/admin/recover.h"
#include "store/admin/salvage.h"
#include "store/object_store.h"
#include "store/store_target.h"
#include "tools/cli_checks.h"
#include "tools/cli_util.h"
#include "tools/ownership.h"
#include "tools/store_cmd_util.h"

namespace mlpo {

using json = nlohmann::json;

namespace {

// What RepairIndex did to the index, in words (recover, and salvage's
// first step).
void PrintIndexRepair(const RecoverReport& rep) {
  if (!rep.rebuilt_from.empty())
    std::printf("recover: the index was rebuilt from its backup %s (taken at "
                "the last tag or drop-tag: heads are as they were then; later "
                "commits are lost)%s%s\n",
                rep.rebuilt_from.c_str(),
                rep.damaged_index_kept.empty() ? ""
                                               : "; the damaged index is kept "
                                                 "in ",
                rep.damaged_index_kept.c_str());
  else if (rep.rolled_back)
    std::printf("recover: the index had lost acknowledged writes; rolled back "
                "from sequence %lu to %lu (%lu index writes lost: commits, "
                "tags or drops after that point)\n",
                (unsigned long)rep.acknowledged_sequence,
                (unsigned long)rep.recovered_sequence,
                (unsigned long)(rep.acknowledged_sequence -
                                rep.recovered_sequence));
  else
    std::printf("recover: the index is consistent; nothing lost\n");
}

json IndexRepairJson(const RecoverReport& rep) {
  return json{{"rolled_back", rep.rolled_back},
              {"acknowledged_sequence", rep.acknowledged_sequence},
              {"recovered_sequence", rep.recovered_sequence},
              {"lost_index_writes",
               rep.rolled_back
                   ? rep.acknowledged_sequence - rep.recovered_sequence
                   : 0},
              {"rebuilt_from", rep.rebuilt_from},
              {"damaged_index_kept", rep.damaged_index_kept}};
}

}  // namespace

void AddRecoverCommand(CLI::App& app) {
  {
    auto a = std::make_shared<CommonArgs>();
    auto discard = std::make_shared<bool>(false);
    auto* c = AddStoreSub(
        app, "recover",
        "Make a store whose index is damaged openable again and report what "
        "was lost: an index that lost acknowledged writes (damaged or deleted "
        "WAL) is rolled back to its last consistent point, then every head "
        "and tag is read back and checked. An index that is gone cannot be "
        "rebuilt from segments; --discard then deletes the store's data so it "
        "can start afresh. --salvage keeps what still reads after data was "
        "lost (a deleted or truncated segment file, bad extents)",
        a.get());
    c->add_flag("--discard", *discard,
                "When the index cannot be recovered, delete this store's "
                "segments, descriptors and index (never done otherwise)");
    auto lost = std::make_shared<std::string>();
    c->add_option("--lost-path", *lost,
                  "A path whose data is gone (its index 0, 1, ... or its "
                  "directory; a failed device replaced by an empty one "
                  "mounted at the same place): versions copied elsewhere "
                  "with `tag --copy-to` are kept, the rest are named as "
                  "lost, and the path starts empty")
        ->check(NotEmpty());
    auto salvage = std::make_shared<bool>(false);
    auto* sv = c->add_flag(
        "--salvage", *salvage,
        "After data was lost (a deleted or truncated segment file, extents "
        "that fail their checksum): keep every tag and head that still reads "
        "back whole, drop the rest (a tag whole), and name both; nothing "
        "that still reads is changed (dropped versions wait for `mlpo gc`)");
    sv->excludes("--discard");
    sv->excludes("--lost-path");
    c->callback([a, discard, lost, salvage] {
      auto o = StoreOptionsForTarget(a->store);
      if (!o.ok()) Fail("recover", o.status());
      WillWrite(*o);  // run as root: the owner keeps the files
      if (*salvage) {
        // A damaged index first, as plain recover does (the backup, or a
        // rollback the seal allows): salvage reads through the index, and
        // once refused a store whose index recover would have rebuilt.
        auto index = RepairIndex(*o, /*discard=*/false);
        if (!index.ok()) Fail("recover", index.status());
        if (!a->json && (!index->rebuilt_from.empty() || index->rolled_back))
          PrintIndexRepair(*index);  // (a consistent index: nothing to say)
        auto rep = Salvage(*o, [](uint64_t d, uint64_t t) {
          Progress("salvage: read " + FormatBytes(d) + " / " + FormatBytes(t));
        });
        Progress("");
        if (!rep.ok()) Fail("recover", rep.status());
        json bad = json::array();
        for (auto& b : rep->bad)
          bad.push_back({{"object", b.object}, {"version", b.version},
                         {"step", b.step}, {"file", b.file},
                         {"offset", b.file_offset}, {"error", b.error}});
        if (a->json) {
          std::cout << json{{"salvage", true},
                            {"index", IndexRepairJson(*index)},
                            {"versions_checked", rep->versions_checked},
                            {"bad", bad},
                            {"kept_tags", rep->kept_tags},
                            {"dropped_tags", rep->dropped_tags},
                            {"kept_heads", rep->kept_heads},
                            {"dropped_heads", rep->dropped_heads},
                            {"repaired_segments", rep->repaired_segments}}
                           .dump(2)
                    << "\n";
        } else {
          for (auto& b : rep->bad)
            std::printf("BAD object %s step %lu (version %lu) file %s offset "
                        "%lu: %s\n",
                        b.object.c_str(), (unsigned long)b.step,
                        (unsigned long)b.version, b.file.c_str(),
                        (unsigned long)b.file_offset, b.error.c_str());
          for (auto& t : rep->kept_tags) std::printf("kept tag %s\n", t.c_str());
          for (auto& t : rep->dropped_tags)
            std::printf("DROPPED tag %s (an extent of it is unreadable)\n",
                        t.c_str());
          for (auto& h : rep->dropped_heads)
            std::printf("DROPPED head of %s (no committed version now: "
                        "restore a kept tag)\n",
                        h.c_str());
          for (auto& f : rep->repaired_segments)
            std::printf("segment file %s made whole again (what it lost "
                        "belonged to dropped versions)\n",
                        f.c_str());
          std::printf("salvage: %lu versions checked, %zu bad extents; kept "
                      "%zu tags and %lu heads, dropped %zu tags and %zu "
                      "heads. `mlpo gc STORE` frees what the dropped ones "
                      "held\n",
                      (unsigned long)rep->versions_checked, rep->bad.size(),
                      rep->kept_tags.size(), (unsigned long)rep->kept_heads,
                      rep->dropped_tags.size(), rep->dropped_heads.size());
        }
        return;
      }

      int lost_path = -1;
      if (!lost->empty()) {
        std::vector<std::string> list;
        for (auto& pc : o->paths) list.push_back(pc.path.root);
        std::string roots;
        lost_path = PathArg(list, *lost, &roots);
        if (lost_path < 0)
          Fail("recover", absl::InvalidArgumentError(absl::StrCat(
                              "--lost-path ", *lost, " is not one of the "
                              "store's paths (", roots, ")")), 2);
      }
      auto rep = Recover(*o, *discard, lost_path);
      if (!rep.ok()) Fail("recover", rep.status());
      json tags = json::array();
      bool ok = rep->bad_heads.empty();
      for (auto& t : rep->tags)
        tags.push_back({{"name", t.name}, {"objects", t.objects},
                        {"bad_extents", t.bad_extents}});
      json bad = json::array();
      for (auto& b : rep->bad_heads)
        bad.push_back({{"object", b.object}, {"version", b.version},
                       {"path", b.path}, {"file", b.file},
                       {"offset", b.file_offset}, {"error", b.error}});
      json lost_tags = json::array();
      for (auto& [t, n] : rep->lost_tags)
        lost_tags.push_back({{"name", t}, {"objects_lost", n}});
      if (a->json) {
        std::cout << json{{"meta_dir", rep->meta_dir},
                          {"rolled_back", rep->rolled_back},
                          {"acknowledged_sequence", rep->acknowledged_sequence},
                          {"recovered_sequence", rep->recovered_sequence},
                          {"lost_index_writes",
                           rep->rolled_back ? rep->acknowledged_sequence -
                                                  rep->recovered_sequence
                                            : 0},
                          {"rebuilt_from", rep->rebuilt_from},
                          {"damaged_index_kept", rep->damaged_index_kept},
                          {"discarded", rep->discarded},
                          {"creation_cut_short", rep->creation_cut_short},
                          {"discarded_files", rep->discarded_files},
                          {"discarded_bytes", rep->discarded_bytes},
                          {"lost_path", rep->lost_path},
                          {"promoted_replicas", rep->promoted},
                          {"replicas_dropped", rep->replicas_dropped},
                          {"lost_heads", rep->lost_heads},
                          {"lost_tags", lost_tags},
                          {"objects", rep->objects},
                          {"bad_heads", bad},
                          {"tags", tags}}
                         .dump(2)
                  << "\n";
      } else if (rep->creation_cut_short) {
        std::printf("recover: the store's creation was cut short before it "
                    "stored anything; its leftovers were removed and the next "
                    "open creates it (nothing lost)\n");
      } else if (rep->discarded) {
        std::printf("recover: discarded %lu files (%s); the next open starts "
                    "the store afresh\n",
                    (unsigned long)rep->discarded_files,
                    FormatBytes(rep->discarded_bytes).c_str());
      } else {
        PrintIndexRepair(*rep);
        if (rep->lost_path >= 0) {
          std::printf("recover: path %d (%s) forgotten: %lu versions now read "
                      "from their copy (tag --copy-to), %lu copies there "
                      "dropped; the path starts empty\n",
                      rep->lost_path,
                      o->paths[rep->lost_path].path.root.c_str(),
                      (unsigned long)rep->promoted,
                      (unsigned long)rep->replicas_dropped);
          for (auto& h : rep->lost_heads)
            std::printf("  LOST head %s (no copy off the lost path)\n",
                        h.c_str());
          for (auto& [t, n] : rep->lost_tags)
            std::printf("  LOST tag %s (%lu of its objects had no copy off "
                        "the lost path; the tag is removed, never restored "
                        "in part)\n",
                        t.c_str(), (unsigned long)n);
          if (!rep->lost_heads.empty())
            std::printf("  restore a tag that survived: mlpo restore STORE "
                        "TAG\n");
        }
        std::printf("heads: %lu objects, %zu bad extents\n",
                    (unsigned long)rep->objects, rep->bad_heads.size());
        for (auto& b : rep->bad_heads)
          std::printf("  BAD object %s version %lu: %s\n", b.object.c_str(),
                      (unsigned long)b.version, b.error.c_str());
        for (auto& t : rep->tags)
          std::printf("tag %s: %lu objects, %s\n", t.name.c_str(),
                      (unsigned long)t.objects,
                      t.bad_extents == 0
                          ? "intact"
                          : absl::StrFormat("%lu bad extents",
                                            (unsigned long)t.bad_extents)
                                .c_str());
        if (!ok)
          std::printf("some heads are damaged: `mlpo restore STORE TAG` "
                      "with an intact tag\n");
      }
      if (!ok) throw CLI::RuntimeError(1);
    });
  }
}

}  // namespace mlpo

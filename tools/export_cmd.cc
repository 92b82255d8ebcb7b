// `mlpo export STORE --tag T --format safetensors OUT [--moments]`: the fp32
// master weights of a checkpoint (and with --moments the update rule's state
// under torch.optim's names: Adam's exp_avg and exp_avg_sq, dequantised to fp32 from a compact state format, named in the metadata)
// under the parameter names of the adapter's manifest, in the safetensors
// format, so any checkpoint opens in any tool that reads safetensors.
//
// safetensors: 8 bytes little-endian N, then N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...,
//    "__metadata__": {...strings...}}
// (padded with spaces to a multiple of 8), then the tensors' bytes, offsets
// relative to the end of the header. Written to OUT.tmp, synced, renamed.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "nlohmann/json.hpp"
#include "optimizer/checkpoint_reader.h"
#include "store/fs/file_util.h"
#include "base/status_macros.h"
#include "store/store_target.h"
#include "tools/cli_checks.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/json_errors.h"
#include "tools/output_path.h"
#include "absl/strings/str_cat.h"

namespace mlpo {
namespace {

struct ExportArgs {
  std::string store, tag, format = "safetensors", out;
  bool moments = false, json = false, force = false;
};

[[noreturn]] void Fail(const absl::Status& s) {
  NoteFailureStatus(s.code());
  std::cerr << "mlpo export: " << s.message() << "\n";
  throw CLI::RuntimeError(1);
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  auto* c = app.add_subcommand(
      "export",
      "Write a checkpoint's fp32 master weights (--moments: and the optimizer state) "
      "under the model's parameter names as a safetensors file");
  c->add_option("store", a->store,
                "Store TOML config, a store directory <path>/<store>/rank-<r> "
                "(any rank of the checkpoint), or a data-parallel store's "
                "directory <path>/<store>")
      ->required();
  c->add_option("out", a->out, "Output file")->required();
  c->add_option("--tag", a->tag, "Tag to export (default: the heads)")
      ->check(NotEmpty());
  c->add_option("--format", a->format, "Output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"safetensors"}));
  c->add_flag("--moments", a->moments,
              "Also write the rule's state as <name>.<torch.optim state name> "
              "(Adam: exp_avg, exp_avg_sq)");
  c->add_flag("--json", a->json, "Print a JSON summary on stdout");
  c->add_flag("--force", a->force,
              "Replace OUT when it exists (a path inside any store directory "
              "is refused even then)");
  c->callback([a] {
    absl::Status where = CheckOutputPath(a->out, a->force);
    if (!where.ok()) Fail(where);
    // A data-parallel store's directory: its ranks are read from any one.
    const std::vector<std::string> ranks = RanksOfStoreAt(a->store);
    auto o = StoreOptionsForTarget(ranks.empty() ? a->store : ranks[0]);
    if (!o.ok()) Fail(o.status());
    auto r = CheckpointReader::Open(*o, a->tag);
    if (!r.ok()) Fail(r.status());
    const nlohmann::json& man = (*r)->manifest();
    if (man.value("sharding", "") == "fsdp")
      Fail(absl::UnimplementedError(
          a->store + " holds FSDP's shards of each parameter (rank-major); "
          "export it from Python with mlpo.torch.export_state_dict(opt."
          "state_dict()) or export_state_dict(store, tag=..., name="
          "\"<name>-w<ranks>\"), which puts the shards together, and save "
          "its master_params with safetensors"));
    struct Tensor {
      std::string name;
      std::vector<uint64_t> shape;
      int group;
      uint64_t offset, numel;
      int slot;  // -1 p, else the rule's slot
    };
    const std::vector<StateSlot> slots = (*r)->rule().Slots();
    std::vector<Tensor> tensors;
    try {
      for (auto& p : man.at("params")) {
        Tensor t{p.at("name"), p.at("shape").get<std::vector<uint64_t>>(),
                 p.at("group"), p.at("offset"), p.at("numel"), -1};
        tensors.push_back(t);
        for (size_t k = 0; a->moments && k < slots.size(); ++k) {
          tensors.push_back(t);
          tensors.back().name += std::string(".") + slots[k].torch;
          tensors.back().slot = static_cast<int>(k);
        }
      }
    } catch (const std::exception& e) {
      Fail(absl::DataLossError(std::string("bad manifest: ") + e.what()));
    }
    nlohmann::json header = nlohmann::json::object();
    uint64_t off = 0;
    for (auto& t : tensors) {
      if (header.contains(t.name))
        Fail(absl::FailedPreconditionError("two tensors named " + t.name));
      header[t.name] = {{"dtype", "F32"},
                        {"shape", t.shape},
                        {"data_offsets", {off, off + t.numel * 4}}};
      off += t.numel * 4;
    }
    header["__metadata__"] = {{"format", "pt"},
                              {"mlpo_step", std::to_string((*r)->step())},
                              {"mlpo_tag", a->tag},
                              // The moments as stored (the file holds them
                              // dequantised to fp32).
                              {"mlpo_state_format",
                               StateFormatName((*r)->state_format())},
                              {"mlpo_update_rule", (*r)->rule().Name()}};
    std::string h = header.dump();
    while (h.size() % 8) h += ' ';
    // A name of our own beside OUT: never someone's "OUT.tmp".
    std::string tmp = absl::StrCat(a->out, ".mlpo-export-", ::getpid());
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) Fail(ErrnoStatus(errno, "create " + tmp));
    uint64_t n = h.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    bool ok = std::fwrite(len, 1, 8, f) == 8 &&
              std::fwrite(h.data(), 1, h.size(), f) == h.size();
    std::vector<float> buf;
    uint64_t done = 0;
    for (auto& t : tensors) {
      if (!ok) break;
      buf.resize(t.numel);
      float* dst[kMaxRuleSlots] = {};
      if (t.slot >= 0) dst[t.slot] = buf.data();
      absl::Status st = (*r)->Read(t.group, t.offset, t.numel,
                                   t.slot < 0 ? buf.data() : nullptr, dst);
      if (!st.ok()) {
        std::fclose(f);
        std::remove(tmp.c_str());
        Fail(st);
      }
      ok = std::fwrite(buf.data(), 4, t.numel, f) == t.numel;
      done += t.numel * 4;
      Progress("export " + FormatBytes(done) + " / " + FormatBytes(off));
    }
    Progress("");
    ok = ok && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
    int err = errno;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), a->out.c_str()) != 0) {
      std::remove(tmp.c_str());
      Fail(ErrnoStatus(ok ? errno : err, "write " + a->out));
    }
    if (a->json)
      std::cout << nlohmann::json{{"out", a->out},
                                  {"tensors", tensors.size()},
                                  {"bytes", off},
                                  {"step", (*r)->step()},
                                  {"world", (*r)->world()},
                                  {"state_format",
                                   StateFormatName((*r)->state_format())}}
                       .dump(2)
                << "\n";
    else
      std::printf("export: %zu tensors, %s, step %lu, from %d rank(s) -> %s\n",
                  tensors.size(), FormatBytes(off).c_str(),
                  (unsigned long)(*r)->step(), (*r)->world(), a->out.c_str());
  });
}

}  // namespace mlpo

#include "optimizer/checkpoint_reader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/json_number.h"
#include "base/status_macros.h"

namespace mlpo {

absl::StatusOr<ManifestLayout> ManifestSubgroups(
    const nlohmann::json& manifest) {
  ManifestLayout out;
  try {
    out.world = JsonField<int>(manifest, "world");
    if (out.world < 1 || out.world > 65536)
      return absl::DataLossError(
          absl::StrCat("bad manifest: world ", out.world));
    const nlohmann::json& groups = manifest.at("groups");
    std::vector<uint64_t> shard_start, numel;
    for (const auto& g : groups) {
      // Every number a reader uses later, checked once here.
      JsonField<uint64_t>(g, "flat_numel");
      shard_start.push_back(JsonField<uint64_t>(g, "shard_start"));
      numel.push_back(JsonField<uint64_t>(g, "shard_numel"));
    }
    auto parts = PartitionParams(
        numel, JsonField<uint64_t>(manifest, "subgroup_numel"));
    if (!parts.ok())
      return absl::DataLossError(
          absl::StrCat("bad manifest: ", parts.status().message()));
    out.subgroups = std::move(*parts);
    std::vector<std::vector<uint64_t>> starts(groups.size());
    const nlohmann::json& params = manifest.at("params");
    for (size_t i = 0; i < params.size(); ++i) {
      size_t g = JsonField<size_t>(params[i], "group");
      uint64_t off = JsonField<uint64_t>(params[i], "offset");
      uint64_t n = JsonField<uint64_t>(params[i], "numel");
      uint64_t ss = shard_start.at(g), sn = numel.at(g);
      for (const auto& d : params[i].at("shape"))
        JsonNumber<uint64_t>(d, "a dimension of \"shape\"");
      if (std::max(off, ss) < std::min(off + n, ss + sn)) {
        out.piece_param.push_back(i);
        starts[g].push_back(std::max(off, ss) - ss);
      }
    }
    for (auto& st : starts) std::sort(st.begin(), st.end());
    AssignPieces(&out.subgroups, starts);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("bad manifest: ", e.what()));
  }
  return out;
}

// Long (about 110 lines): one loop over the ranks, each rank's manifest
// checked against the first's (world, step, rule, format, groups) as it is
// read, so that a mismatch names the rank and the field.
absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    const StoreOptions& any_rank, const std::string& tag) {
  std::unique_ptr<CheckpointReader> r(new CheckpointReader());
  int world = 1;
  bool have_step = false;  // step_ is the first object's (0 is a step too)
  for (int k = 0; k < world; ++k) {
    StoreOptions o = any_rank;
    o.rank = k;
    o.read_only = true;
    o.create_if_missing = false;
    o.store_uuid.clear();  // each rank's store has its own identity
    if (k != any_rank.rank) o.meta_dir.clear();  // each rank's default index
    Rank rank;
    auto store = ObjectStore::Open(o);
    if (!store.ok())
      return Annotate(store.status(), absl::StrCat("checkpoint rank ", k));
    rank.store = std::move(*store);
    auto text = rank.store->GetAttribute(kManifestAttribute);
    if (!text.ok())
      return absl::FailedPreconditionError(absl::StrCat(
          "store ", rank.store->options().meta_dir,
          " has no parameter manifest: it was not written by the PyTorch "
          "adapter"));
    try {
      rank.manifest = nlohmann::json::parse(*text);
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat(
          "store ", rank.store->options().meta_dir, ": bad manifest: ",
          e.what()));
    }
    auto layout = ManifestSubgroups(rank.manifest);
    if (!layout.ok())
      return absl::DataLossError(absl::StrCat(
          "store ", rank.store->options().meta_dir, ": ",
          layout.status().message()));
    if (k == 0) {
      world = layout->world;
      r->manifest_ = rank.manifest;
    } else if (layout->world != world) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ranks disagree: rank 0 was one of ", world, ", rank ",
          k, " one of ", layout->world));
    }
    rank.subgroups = std::move(layout->subgroups);
    rank.piece_param = std::move(layout->piece_param);
    std::map<std::string, uint64_t> heads;
    if (tag.empty()) {
      for (const ObjectInfo& i : rank.store->List())
        if (i.has_head) heads[i.name] = i.head;
    } else {
      auto tags = rank.store->Tags();
      auto t = tags.find(tag);
      if (t == tags.end())
        return absl::NotFoundError(absl::StrCat(
            "store ", rank.store->options().meta_dir, " has no tag named ",
            tag));
      heads = t->second;
    }
    for (const Subgroup& s : rank.subgroups) {
      auto it = heads.find(s.object);
      if (it == heads.end())
        return absl::FailedPreconditionError(absl::StrCat(
            "store ", rank.store->options().meta_dir, ": object ", s.object,
            " has no version ", tag.empty() ? "" : "in tag " + tag));
      MLPO_ASSIGN_OR_RETURN(VersionRecord rec,
                            rank.store->GetVersion(s.object, it->second));
      if (!have_step) r->step_ = rec.step, have_step = true;
      if (rec.step != r->step_)
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint holds state from different steps (", r->step_, " and ",
            rec.step, " in ", rank.store->options().meta_dir, ")"));
      rank.versions[s.object] = it->second;
    }
    rank.tag_versions = heads;
    StateFormat format = StateFormat::kF32;
    if (auto f = rank.store->GetAttribute(kStateFormatAttribute); f.ok()) {
      auto parsed = ParseStateFormat(*f);
      if (!parsed.ok())
        return absl::DataLossError(absl::StrCat(
            "store ", rank.store->options().meta_dir, ": ",
            parsed.status().message()));
      format = *parsed;
    }
    RuleSpec rule;  // a store from before rules: adam
    if (auto a = rank.store->GetAttribute(kUpdateRuleAttribute); a.ok()) {
      auto parsed = ParseRuleSpec(*a);
      if (!parsed.ok())
        return absl::DataLossError(absl::StrCat(
            "store ", rank.store->options().meta_dir, ": ",
            parsed.status().message()));
      rule = *parsed;
    }
    if (k == 0) r->rule_ = rule;
    else if (!(rule == r->rule_))
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ranks disagree: rank 0 holds ", r->rule_.Name(),
          " state, rank ", k, " ", rule.Name()));
    if (k == 0) r->format_ = format;
    else if (format != r->format_)
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ranks disagree: rank 0 holds ",
          StateFormatName(r->format_), " state, rank ", k, " ",
          StateFormatName(format)));
    std::string obj = ParamStepsObject(rank.piece_param.size());
    if (auto it = heads.find(obj); it != heads.end()) {
      rank.steps_object = obj;
      rank.steps_version = it->second;
    }
    r->ranks_.push_back(std::move(rank));
  }
  return r;
}

uint64_t CheckpointReader::group_numel(int g) const {
  return manifest_["groups"][g]["flat_numel"].get<uint64_t>();
}

std::vector<std::string> CheckpointReader::store_uuids() const {
  std::vector<std::string> out;
  for (auto& r : ranks_) out.push_back(r.store->store_uuid());
  return out;
}

absl::StatusOr<std::vector<uint64_t>> CheckpointReader::ParamSteps() {
  std::vector<uint64_t> out(manifest_["params"].size(), step_);
  for (Rank& rank : ranks_) {
    if (rank.steps_object.empty()) continue;
    MLPO_ASSIGN_OR_RETURN(Lease l, rank.store->ReadVersion(
                                       rank.steps_object, rank.steps_version));
    MLPO_ASSIGN_OR_RETURN(std::vector<uint64_t> steps,
                          ParamStepsIn(*l, rank.piece_param.size()));
    for (size_t k = 0; k < steps.size(); ++k)
      if (rank.piece_param[k] < out.size()) out[rank.piece_param[k]] = steps[k];
  }
  return out;
}

absl::Status CheckpointReader::Read(int g, uint64_t start, uint64_t n,
                                    float* p, float* m, float* v) {
  float* slots[kMaxRuleSlots] = {};
  int km = rule_.SlotOf("m"), kv = rule_.SlotOf("v");
  if (km >= 0) slots[km] = m;
  else if (m) std::fill(m, m + n, 0.f);
  if (kv >= 0) slots[kv] = v;
  else if (v) std::fill(v, v + n, 0.f);
  return Read(g, start, n, p, slots);
}

absl::Status CheckpointReader::Read(int g, uint64_t start, uint64_t n,
                                    float* p, float* const* slots) {
  if (g < 0 || g >= num_groups() || start + n > group_numel(g) ||
      start + n < start)
    return absl::InvalidArgumentError(absl::StrCat(
        "elements [", start, ", +", n, ") are outside group ", g));
  const int ns = static_cast<int>(rule_.Slots().size());
  bool any_slot = false;
  for (int k = 0; k < ns; ++k) any_slot = any_slot || slots[k] != nullptr;
  uint64_t covered = 0;
  for (Rank& rank : ranks_) {
    const auto& gm = rank.manifest["groups"][g];
    uint64_t shard = gm["shard_start"].get<uint64_t>();
    for (const Subgroup& s : rank.subgroups) {
      if (s.group != g) continue;
      uint64_t lo = shard + s.group_offset, hi = lo + s.numel;
      uint64_t a = std::max(lo, start), b = std::min(hi, start + n);
      if (a >= b) continue;
      MLPO_ASSIGN_OR_RETURN(
          Lease l, rank.store->ReadVersion(s.object, rank.versions[s.object]));
      if (p)
        std::memcpy(p + (a - start), l->Section<float>("p") + (a - lo),
                    (b - a) * sizeof(float));
      if (any_slot) {
        auto want = StateLayout(format_, rule_, s.numel, s.grid.blocks());
        if (!want.ok() || !(l->layout() == *want))
          return absl::DataLossError(absl::StrCat(
              "store ", rank.store->options().meta_dir, ": object ", s.object,
              " is laid out as ", l->layout().DebugString(), ", not as its "
              "manifest, update rule ", rule_.Name(), " and state format ",
              StateFormatName(format_), " say"));
        MLPO_ASSIGN_OR_RETURN(StateRef ref,
                              StateIn(format_, rule_, l.get(), s.grid));
        for (int k = 0; k < ns; ++k)
          if (slots[k]) DecodeSlot(ref, k, a - lo, b - a, slots[k] + (a - start));
      }
      covered += b - a;
    }
  }
  if (covered != n)
    return absl::DataLossError(absl::StrCat(
        "checkpoint: group ", g, " elements [", start, ", +", n,
        ") are not all held by its ranks (", covered, " found)"));
  return absl::OkStatus();
}

}  // namespace mlpo

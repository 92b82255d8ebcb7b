// Reads a training checkpoint written through the PyTorch adapter (or any
// writer that records the same manifest), across every rank's store, as flat
// fp32 state per parameter group. Used by `mlpo export`, by
// `mlpo.torch.export_state_dict` and by resharding restores (a checkpoint of
// W ranks read into W' ranks).
//
// The manifest: store attribute "manifest" of every rank's store, JSON
//   {"format": 1, "world": W, "rank": r, "subgroup_numel": S,
//    "groups": [{"flat_numel": N, "shard_start": a, "shard_numel": n,
//                "lr": .., "betas": [b1, b2], "eps": .., "weight_decay": ..,
//                "mode": "adamw"|"adam"}, ...],
//    "params": [{"name": .., "shape": [..], "dtype": "f32"|"bf16"|"f16",
//                "group": g, "offset": o, "numel": k}, ...]}
// Group g's flat parameters are its params concatenated in order; rank r
// holds [shard_start, shard_start + shard_numel) of them as its optimizer
// group g (one store per rank, "<name>/rank-<r>"), cut into subgroups of
// S elements (optimizer/partition.h).
//
// Thread-compatible.
#ifndef MLPO_OPTIMIZER_CHECKPOINT_READER_H_
#define MLPO_OPTIMIZER_CHECKPOINT_READER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/partition.h"
#include "optimizer/state_layout.h"
#include "store/object_store.h"

namespace mlpo {

inline constexpr char kManifestAttribute[] = "manifest";

// One rank's optimizer state as its manifest lays it out: the subgroups
// (objects), each with its parameters' pieces and int8 block grid, and the
// manifest parameter of each piece of the rank's shard. DataLoss ("bad
// manifest: ...", naming the field) for a manifest that does not parse into
// one; every number a reader uses is checked here.
struct ManifestLayout {
  int world = 0;
  std::vector<Subgroup> subgroups;
  std::vector<size_t> piece_param;
};
absl::StatusOr<ManifestLayout> ManifestSubgroups(
    const nlohmann::json& manifest);

class CheckpointReader {
 public:
  // Opens, read-only, the stores of every rank of the checkpoint that
  // `any_rank` (one rank's store options) belongs to, at `tag` (empty: the
  // heads). NotFound for a missing tag; FailedPrecondition when the ranks
  // disagree (different steps, worlds or manifests) or a rank has no
  // manifest.
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(
      const StoreOptions& any_rank, const std::string& tag);

  const nlohmann::json& manifest() const { return manifest_; }
  int world() const { return static_cast<int>(ranks_.size()); }
  uint64_t step() const { return step_; }
  int num_groups() const { return static_cast<int>(manifest_["groups"].size()); }
  uint64_t group_numel(int g) const;
  // How the stores hold m and v (every rank's agree); Read dequantises.
  StateFormat state_format() const { return format_; }
  // The identity of each rank's store.
  std::vector<std::string> store_uuids() const;
  // What rank `k`'s store holds at the tag read (every object's version;
  // the heads' when no tag was named): versions are never reused, so this
  // tells the tag from a later one that took a dropped one's name.
  const std::map<std::string, uint64_t>& tag_versions(int k) const {
    return ranks_[k].tag_versions;
  }
  // Attribute `key` of rank `k`'s store (ObjectStore::GetAttribute: NotFound
  // when it has none), e.g. kCopiedFromAttribute.
  absl::StatusOr<std::string> attribute(int k, const std::string& key) const {
    return ranks_[k].store->GetAttribute(key);
  }

  // Reads elements [start, start + n) of group g's flat fp32 master
  // parameters and the rule's slots (RuleSpec::Slots() order) into p and
  // slots[k] (each may be null).
  absl::Status Read(int g, uint64_t start, uint64_t n, float* p,
                    float* const* slots);
  // Adam's: the slots named m and v (zeros where the rule has none).
  absl::Status Read(int g, uint64_t start, uint64_t n, float* p, float* m,
                    float* v);
  // The update rule of the stores (every rank's agree).
  const RuleSpec& rule() const { return rule_; }
  // Each manifest parameter's own step count (Optimizer::param_steps: a
  // parameter skipped for want of a gradient counts fewer); step() for all
  // in checkpoints written before step counts were kept.
  absl::StatusOr<std::vector<uint64_t>> ParamSteps();

 private:
  struct Rank {
    std::unique_ptr<ObjectStore> store;
    nlohmann::json manifest;
    std::vector<Subgroup> subgroups;
    std::map<std::string, uint64_t> versions;  // object -> version to read
    std::map<std::string, uint64_t> tag_versions;  // all the tag holds
    // Manifest parameter of each of the rank's optimizer parameters (the
    // pieces of its shard), and the version of its step counts, if kept.
    std::vector<size_t> piece_param;
    std::string steps_object;
    uint64_t steps_version = 0;
  };
  CheckpointReader() = default;
  nlohmann::json manifest_;  // rank 0's
  std::vector<Rank> ranks_;
  uint64_t step_ = 0;
  StateFormat format_ = StateFormat::kF32;
  RuleSpec rule_;
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_CHECKPOINT_READER_H_

// ObjectStore: inspection (tags, statistics, objects, version records,
// one version read back, attributes, per-path traffic).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/object_store.h"

namespace mlpo {

std::map<std::string, std::map<std::string, uint64_t>> ObjectStore::Tags()
    const {
  MutexLock l(&mu_);
  return tags_;
}

std::vector<PathCounters> ObjectStore::PathTraffic() const {
  std::vector<PathCounters> out;
  for (auto& p : paths_) out.push_back(p->Counters());
  return out;
}

absl::Status ObjectStore::SetAttribute(const std::string& key,
                                       const std::string& value) {
  MLPO_RETURN_IF_ERROR(CheckWritable("set attribute"));
  MLPO_RETURN_IF_ERROR(ValidateName("attribute", key));
  MutexLock l(&mu_);
  auto it = attributes_.find(key);
  if (it != attributes_.end() && it->second == value) return absl::OkStatus();
  MetaIndex::Batch b = meta_->NewBatch();
  b.PutAttribute(key, value);
  MLPO_RETURN_IF_ERROR(meta_->Apply(&b, true));
  attributes_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ObjectStore::GetAttribute(
    const std::string& key) const {
  MutexLock l(&mu_);
  auto it = attributes_.find(key);
  if (it == attributes_.end())
    return absl::NotFoundError(absl::StrCat(Where(), " has no attribute ", key));
  return it->second;
}

StoreStats ObjectStore::Stats() const {
  StoreStats s;
  MutexLock l(&mu_);
  s.objects = objects_.size();
  for (auto& [o, st] : objects_) s.objects_with_head += st.has_head;
  s.versions = versions_.size();
  s.tags = tags_.size();
  s.commits = commits_;
  s.checkouts = checkouts_;
  if (cache_) s.cache = cache_->stats();
  for (auto& p : paths_) {
    StorePathStats ps;
    ps.root = p->root();
    ps.kind = PathKindName(p->kind());
    ps.uuid = p->uuid();
    ps.usage = p->Usage();
    ps.counters = p->Counters();
    s.paths.push_back(ps);
  }
  for (auto& [k, vs] : versions_) {
    if (vs.deleted) continue;  // freed when its last reader unpins it
    for (auto& e : vs.rec.AllExtents())
      (vs.refs > 0 ? s.paths[e.path].referenced_bytes
                   : s.paths[e.path].unreferenced_bytes) += e.length;
  }
  return s;
}

std::vector<ObjectInfo> ObjectStore::List() const {
  MutexLock l(&mu_);
  std::vector<ObjectInfo> out;
  for (auto& [name, st] : objects_) {
    ObjectInfo i;
    i.name = name;
    i.layout = st.layout;
    i.has_head = st.has_head;
    i.head = st.head;
    i.head_step = st.head_step;
    for (auto it = versions_.lower_bound({name, 0});
         it != versions_.end() && it->first.first == name; ++it) {
      if (it->second.deleted) continue;  // freed when its reader unpins it
      i.versions.push_back(it->first.second);
      i.steps.push_back(it->second.rec.step);
    }
    out.push_back(std::move(i));
  }
  return out;
}

absl::StatusOr<VersionRecord> ObjectStore::GetVersion(const std::string& object,
                                                      uint64_t version) const {
  MutexLock l(&mu_);
  auto o = objects_.find(object);
  if (o == objects_.end())
    return absl::NotFoundError(absl::StrCat("no object named ", object));
  if (version == 0) {
    if (!o->second.has_head)
      return absl::NotFoundError(
          absl::StrCat("object ", object, " has no committed version"));
    version = o->second.head;
  }
  auto it = versions_.find({object, version});
  // A record gc deleted is gone, though a read in progress keeps its
  // extents until it ends.
  if (it == versions_.end() || it->second.deleted)
    return absl::NotFoundError(
        absl::StrCat("object ", object, " has no version ", version));
  return it->second.rec;
}

absl::StatusOr<Lease> ObjectStore::ReadVersion(const std::string& object,
                                               uint64_t version) {
  VersionRecord rec;
  auto lease = std::make_shared<CheckoutLease>();
  {
    MutexLock l(&mu_);
    auto o = objects_.find(object);
    if (o == objects_.end())
      return absl::NotFoundError(absl::StrCat("no object named ", object));
    if (version == 0) version = o->second.head;
    auto it = versions_.find({object, version});
    if (it == versions_.end())
      return absl::NotFoundError(
          absl::StrCat("object ", object, " has no version ", version));
    ++it->second.pins;
    rec = it->second.rec;
    lease->layout_ = o->second.layout;
  }
  lease->object_ = object;
  lease->version_ = version;
  lease->step_ = rec.step;
  lease->is_new_ = false;
  lease->buf_ = pool_->Get(rec.blob_bytes);
  lease->pool_ = pool_;
  std::vector<BadExtent> bad;
  ReadCopy(object, rec, lease->buf_.data(), &bad);
  Unpin({object, version});
  if (!bad.empty()) return BadExtentStatus(bad.front());
  return lease;
}

}  // namespace mlpo

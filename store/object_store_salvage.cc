// ObjectStore::DropHeads: heads that no longer read back leave the index
// (store/admin/salvage.cc decides which).
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "store/object_store.h"

namespace mlpo {

absl::Status ObjectStore::DropHeads(const std::set<std::string>& objects) {
  MLPO_RETURN_IF_ERROR(CheckWritable("drop heads"));
  if (objects.empty()) return absl::OkStatus();
  MutexLock l(&mu_);
  MetaIndex::Batch b = meta_->NewBatch();
  std::map<VKey, int> dec;
  for (const std::string& obj : objects) {
    auto it = objects_.find(obj);
    if (it == objects_.end() || !it->second.has_head) continue;
    b.DeleteHead(obj);
    dec[{obj, it->second.head}] += 1;
  }
  if (dec.empty()) return absl::OkStatus();
  std::vector<ExtentRef> none;
  MLPO_RETURN_IF_ERROR(
      ApplyRefChanges(&b, dec, /*free_now=*/false, /*sync=*/true, &none));
  for (auto& [key, n] : dec) {
    ObjectState& st = objects_[key.first];
    st.has_head = false;
    st.head = st.head_step = 0;
  }
  return absl::OkStatus();
}

}  // namespace mlpo

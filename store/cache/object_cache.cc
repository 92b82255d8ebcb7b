#include "store/cache/object_cache.h"

#include <utility>

namespace mlpo {

uint64_t ObjectCache::budget() const {
  absl::MutexLock l(&mu_);
  return budget_;
}

void ObjectCache::SetBudget(uint64_t bytes,
                            std::vector<AlignedBuffer>* released) {
  absl::MutexLock l(&mu_);
  budget_ = bytes;
  ShrinkLocked(released);
}

uint64_t ObjectCache::NextUseLocked(const std::string& object) const {
  auto it = next_.find(object);
  return it == next_.end() || it->second.empty() ? kNever : it->second.front();
}

std::map<std::string, ObjectCache::Entry>::iterator ObjectCache::VictimLocked() {
  auto victim = entries_.end();
  uint64_t far = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    uint64_t n = NextUseLocked(it->first);
    if (victim == entries_.end() || n > far ||
        (n == far && it->second.last_use < victim->second.last_use)) {
      victim = it;
      far = n;
    }
  }
  return victim;
}

void ObjectCache::ReleaseLocked(std::map<std::string, Entry>::iterator it,
                                std::vector<AlignedBuffer>* released) {
  used_ -= it->second.bytes;
  released->push_back(std::move(it->second.buf));
  entries_.erase(it);
}

void ObjectCache::ShrinkLocked(std::vector<AlignedBuffer>* released) {
  while (used_ > budget_ && !entries_.empty()) {
    ReleaseLocked(VictimLocked(), released);
    ++stats_.evicted;
  }
}

std::optional<AlignedBuffer> ObjectCache::Take(
    const std::string& object, uint64_t version,
    std::vector<AlignedBuffer>* released) {
  absl::MutexLock l(&mu_);
  auto n = next_.find(object);
  if (n != next_.end() && !n->second.empty()) n->second.pop_front();
  auto it = entries_.find(object);
  if (it == entries_.end() || it->second.version != version) {
    if (it != entries_.end()) ReleaseLocked(it, released);  // stale
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  stats_.hit_bytes += it->second.bytes;
  AlignedBuffer b = std::move(it->second.buf);
  used_ -= it->second.bytes;
  entries_.erase(it);
  return b;
}

void ObjectCache::Offer(const std::string& object, uint64_t version,
                        AlignedBuffer buf,
                        std::vector<AlignedBuffer>* released) {
  absl::MutexLock l(&mu_);
  auto old = entries_.find(object);
  if (old != entries_.end()) ReleaseLocked(old, released);
  uint64_t need = buf.size();  // what the buffer occupies
  if (need > budget_) {
    ++stats_.refused;
    released->push_back(std::move(buf));
    return;
  }
  // Belady: make room only by evicting entries used later than this one;
  // if this one would be the first to go, keep what is there instead.
  const uint64_t mine = NextUseLocked(object);
  while (used_ + need > budget_) {
    auto v = VictimLocked();
    uint64_t theirs = NextUseLocked(v->first);
    // With no declared use either way, the newer entry wins (LRU).
    if (theirs < mine || (theirs == mine && mine != kNever)) {
      ++stats_.refused;
      released->push_back(std::move(buf));
      return;
    }
    ReleaseLocked(v, released);
    ++stats_.evicted;
  }
  Entry& e = entries_[object];
  e.version = version;
  e.bytes = need;
  e.last_use = ++tick_;
  e.buf = std::move(buf);
  used_ += need;
  ++stats_.admitted;
}

void ObjectCache::Invalidate(const std::string& object,
                             std::vector<AlignedBuffer>* released) {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(object);
  if (it != entries_.end()) ReleaseLocked(it, released);
}

void ObjectCache::Clear(std::vector<AlignedBuffer>* released) {
  absl::MutexLock l(&mu_);
  while (!entries_.empty()) ReleaseLocked(entries_.begin(), released);
}

void ObjectCache::DeclareOrder(const std::vector<std::string>& order) {
  absl::MutexLock l(&mu_);
  next_.clear();
  for (uint64_t i = 0; i < order.size(); ++i) next_[order[i]].push_back(i);
}

CacheStats ObjectCache::stats() const {
  absl::MutexLock l(&mu_);
  CacheStats s = stats_;
  s.budget_bytes = budget_;
  s.cached_bytes = used_;
  s.entries = entries_.size();
  return s;
}

bool ObjectCache::Contains(const std::string& object, uint64_t version) const {
  absl::MutexLock l(&mu_);
  auto it = entries_.find(object);
  return it != entries_.end() && it->second.version == version;
}

}  // namespace mlpo

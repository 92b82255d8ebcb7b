#include "store/cache/object_cache.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/parallel_copy.h"

namespace mlpo {

uint64_t ObjectCache::budget() const {
  MutexLock l(&mu_);
  return budget_;
}

void ObjectCache::SetBudget(uint64_t bytes,
                            std::vector<AlignedBuffer>* released) {
  MutexLock l(&mu_);
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
    if (it->second.dirty) continue;
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
  if (it->second.dirty) dirty_ -= it->second.bytes;
  released->push_back(std::move(it->second.buf));
  entries_.erase(it);
}

void ObjectCache::ShrinkLocked(std::vector<AlignedBuffer>* released) {
  while (used_ > budget_) {
    auto v = VictimLocked();
    if (v == entries_.end()) break;  // only dirty ones: they stay
    ReleaseLocked(v, released);
    ++stats_.evicted;
  }
}

std::optional<AlignedBuffer> ObjectCache::Take(
    const std::string& object, uint64_t version,
    std::vector<AlignedBuffer>* released) {
  MutexLock l(&mu_);
  auto n = next_.find(object);
  if (n != next_.end() && !n->second.empty()) n->second.pop_front();
  auto it = entries_.find(object);
  if (it == entries_.end() || it->second.version != version ||
      it->second.dirty || it->second.out) {
    if (it != entries_.end() && !it->second.dirty && !it->second.out)
      ReleaseLocked(it, released);  // stale
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

bool ObjectCache::CopyDirty(const std::string& object, uint64_t version,
                            char* dst, size_t n) {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  if (it == entries_.end() || !it->second.dirty || it->second.out ||
      it->second.version != version || it->second.buf.size() < n)
    return false;
  auto q = next_.find(object);
  if (q != next_.end() && !q->second.empty()) q->second.pop_front();
  ParallelCopy(dst, it->second.buf.data(), n);
  it->second.last_use = ++tick_;
  ++stats_.hits;
  stats_.hit_bytes += n;
  return true;
}

std::optional<AlignedBuffer> ObjectCache::LendDirty(const std::string& object,
                                                    uint64_t version) {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  if (it == entries_.end() || !it->second.dirty || it->second.out ||
      it->second.version != version)
    return std::nullopt;
  auto q = next_.find(object);
  if (q != next_.end() && !q->second.empty()) q->second.pop_front();
  it->second.out = true;
  it->second.last_use = ++tick_;
  ++stats_.hits;
  stats_.hit_bytes += it->second.bytes;
  return std::move(it->second.buf);
}

bool ObjectCache::PutBack(const std::string& object, uint64_t version,
                          AlignedBuffer* buf) {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  if (it == entries_.end() || !it->second.out ||
      it->second.version != version)
    return false;
  it->second.buf = std::move(*buf);
  it->second.out = false;
  return true;
}

bool ObjectCache::IsOut(const std::string& object, uint64_t version) const {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  return it != entries_.end() && it->second.out &&
         it->second.version == version;
}

std::optional<AlignedBuffer> ObjectCache::TakeDirty(const std::string& object,
                                                    uint64_t version) {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  if (it == entries_.end() || !it->second.dirty || it->second.out ||
      it->second.version != version)
    return std::nullopt;
  AlignedBuffer b = std::move(it->second.buf);
  used_ -= it->second.bytes;
  dirty_ -= it->second.bytes;
  entries_.erase(it);
  return b;
}

void ObjectCache::PutDirty(const std::string& object, uint64_t version,
                           AlignedBuffer buf,
                           std::vector<AlignedBuffer>* released) {
  MutexLock l(&mu_);
  auto old = entries_.find(object);
  if (old != entries_.end()) ReleaseLocked(old, released);
  const uint64_t need = buf.size();
  while (used_ + need > budget_) {
    auto v = VictimLocked();
    if (v == entries_.end()) break;  // only dirty ones: this one goes past
    ReleaseLocked(v, released);
    ++stats_.evicted;
  }
  Entry& e = entries_[object];
  e.version = version;
  e.bytes = need;
  e.dirty = true;
  e.out = false;
  e.last_use = ++tick_;
  e.buf = std::move(buf);
  used_ += need;
  dirty_ += need;
}

void ObjectCache::NoteWriteSaved(uint64_t bytes) {
  MutexLock l(&mu_);
  ++stats_.writes_saved;
  stats_.write_bytes_saved += bytes;
}

bool ObjectCache::Offer(const std::string& object, uint64_t version,
                        AlignedBuffer* buf, bool dirty,
                        std::vector<AlignedBuffer>* released) {
  MutexLock l(&mu_);
  const uint64_t need = buf->size();  // what the buffer occupies
  auto old = entries_.find(object);
  uint64_t replaced = 0;  // bytes the old entry frees (it goes either way)
  bool old_dirty = false;
  if (old != entries_.end()) {
    replaced = old->second.bytes;
    old_dirty = old->second.dirty;
  }
  // A dirty entry of an older version may only be replaced by a newer
  // version of the same object (never dropped while it is the only copy).
  if (old_dirty && old->second.version >= version) {
    ++stats_.refused;
    return false;
  }
  if (need > budget_) {
    ++stats_.refused;
    return false;
  }
  // Belady: make room only by evicting clean entries used later than this
  // one; if this one would be the first to go, keep what is there instead.
  const uint64_t mine = NextUseLocked(object);
  uint64_t free_after = budget_ - std::min(budget_, used_ - replaced);
  std::vector<std::map<std::string, Entry>::iterator> victims;
  if (free_after < need) {
    // Candidates, farthest next use first.
    std::vector<std::pair<uint64_t, std::map<std::string, Entry>::iterator>> c;
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (!it->second.dirty && it != old)
        c.push_back({NextUseLocked(it->first), it});
    std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
      if (a.first != b.first) return a.first > b.first;
      return a.second->second.last_use < b.second->second.last_use;
    });
    for (auto& [theirs, it] : c) {
      if (free_after >= need) break;
      // With no declared use either way, the newer entry wins (LRU).
      if (theirs < mine || (theirs == mine && mine != kNever)) break;
      victims.push_back(it);
      free_after += it->second.bytes;
    }
    if (free_after < need) {
      ++stats_.refused;
      return false;
    }
  }
  for (auto it : victims) {
    ReleaseLocked(it, released);
    ++stats_.evicted;
  }
  if (old != entries_.end()) {
    if (old_dirty && dirty) {
      ++stats_.writes_saved;
      stats_.write_bytes_saved += old->second.bytes;
    }
    ReleaseLocked(old, released);
  }
  Entry& e = entries_[object];
  e.version = version;
  e.bytes = need;
  e.dirty = dirty;
  e.out = false;
  e.last_use = ++tick_;
  e.buf = std::move(*buf);
  used_ += need;
  if (dirty) dirty_ += need;
  ++stats_.admitted;
  return true;
}

std::vector<std::pair<std::string, uint64_t>> ObjectCache::DirtyEntries()
    const {
  MutexLock l(&mu_);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [name, e] : entries_)
    if (e.dirty) out.emplace_back(name, e.version);
  return out;
}

bool ObjectCache::CopyForWriteBack(const std::string& object,
                                   uint64_t version, char* dst,
                                   size_t n) const {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  if (it == entries_.end() || !it->second.dirty || it->second.out ||
      it->second.version != version || it->second.buf.size() < n)
    return false;
  ParallelCopy(dst, it->second.buf.data(), n);
  return true;
}

void ObjectCache::MarkClean(const std::string& object, uint64_t version) {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  if (it == entries_.end() || !it->second.dirty ||
      it->second.version != version)
    return;
  it->second.dirty = false;
  dirty_ -= it->second.bytes;
}

void ObjectCache::Invalidate(const std::string& object,
                             std::vector<AlignedBuffer>* released) {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  if (it != entries_.end()) ReleaseLocked(it, released);
}

void ObjectCache::Clear(std::vector<AlignedBuffer>* released) {
  MutexLock l(&mu_);
  while (!entries_.empty()) ReleaseLocked(entries_.begin(), released);
}

void ObjectCache::DeclareOrder(const std::vector<std::string>& order) {
  MutexLock l(&mu_);
  next_.clear();
  for (uint64_t i = 0; i < order.size(); ++i) next_[order[i]].push_back(i);
}

CacheStats ObjectCache::stats() const {
  MutexLock l(&mu_);
  CacheStats s = stats_;
  s.budget_bytes = budget_;
  s.cached_bytes = used_;
  s.entries = entries_.size();
  s.dirty_bytes = dirty_;
  for (auto& [name, e] : entries_) s.dirty_entries += e.dirty;
  return s;
}

bool ObjectCache::Contains(const std::string& object, uint64_t version) const {
  MutexLock l(&mu_);
  auto it = entries_.find(object);
  return it != entries_.end() && it->second.version == version;
}

}  // namespace mlpo

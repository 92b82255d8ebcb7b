// ObjectCache: the DRAM tier. Keeps whole object blobs, one version per
// object, within a byte budget, and evicts the entry whose next use is
// farthest away (Belady's rule) from the access order the update pipeline
// declares; least recently used when nothing is declared.
//
// Entries are clean (the version is on disk: a dropped entry loses nothing)
// or dirty (durability "tag": the version exists only here until the store
// writes it back, at the next tag or on close). Dirty entries are never
// evicted; a dirty version that does not fit is written through instead.
//
// Clean buffers move in and out without copies: Take hands the cached
// buffer to a checkout, Offer takes the buffer of a finished commit. A dirty
// entry is copied out (CopyDirty), or lent (LendDirty) to a checkout that
// will commit a newer version: the entry stays, marked out, until the newer
// version replaces it (Offer) or the buffer comes back unchanged (PutBack).
// While it is out nobody else can read it (CopyDirty, CopyForWriteBack say
// no; IsOut says why). Evicted and replaced buffers go back to the caller
// for its buffer pool.
//
// Thread-safe.
// Layer store/cache: may include base/ only.
#ifndef MLPO_STORE_CACHE_OBJECT_CACHE_H_
#define MLPO_STORE_CACHE_OBJECT_CACHE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "base/aligned_buffer.h"

namespace mlpo {

struct CacheStats {
  uint64_t budget_bytes = 0, cached_bytes = 0, entries = 0;
  uint64_t hits = 0, misses = 0;     // Take
  uint64_t hit_bytes = 0;            // reads saved
  uint64_t admitted = 0, refused = 0, evicted = 0;
  uint64_t dirty_entries = 0, dirty_bytes = 0;
  // Dirty versions replaced by a newer one before they were written back:
  // writes the tier saved.
  uint64_t writes_saved = 0, write_bytes_saved = 0;
};

class ObjectCache {
 public:
  explicit ObjectCache(uint64_t budget_bytes) : budget_(budget_bytes) {}
  ObjectCache(const ObjectCache&) = delete;
  ObjectCache& operator=(const ObjectCache&) = delete;

  uint64_t budget() const;
  // Changes the budget (e.g. a percentage of the state, recomputed as
  // objects are declared); entries past it go to `released`.
  void SetBudget(uint64_t bytes, std::vector<AlignedBuffer>* released);

  // The cached clean blob of `object` at `version`: the entry leaves the
  // cache and its buffer is the caller's. nullopt on a miss (no entry, or
  // another clean version, which is dropped into `released`; a dirty entry
  // is left alone: see CopyDirty). Counts as a use of `object` in the
  // declared order.
  std::optional<AlignedBuffer> Take(const std::string& object,
                                    uint64_t version,
                                    std::vector<AlignedBuffer>* released);
  // Copies the dirty blob of `object` at `version` into `dst` (`n` bytes);
  // the entry stays. False when there is no such dirty entry. Counts as a
  // use, like Take.
  bool CopyDirty(const std::string& object, uint64_t version, char* dst,
                 size_t n);
  // Lends the buffer of the dirty entry of `object` at `version` (nullopt
  // when there is none, or it is out already): the entry stays, out, and
  // keeps its place in the budget. Counts as a use, like Take.
  std::optional<AlignedBuffer> LendDirty(const std::string& object,
                                         uint64_t version);
  // Gives a lent buffer back, unchanged; false (and *buf left) when the
  // entry is gone or holds another version by now.
  bool PutBack(const std::string& object, uint64_t version,
               AlignedBuffer* buf);
  // Whether the dirty entry of `object` at `version` is lent out.
  bool IsOut(const std::string& object, uint64_t version) const;

  // A step's transaction (ObjectStore::BeginTransaction) keeps the dirty
  // version a commit replaces until the step ends, so that an aborted step
  // can put it back: TakeDirty removes the dirty entry of `object` at
  // `version` (not lent out) and returns its buffer, nullopt when there is
  // none; PutDirty puts such a buffer back as the object's dirty entry,
  // replacing whatever entry the object has (into `released`) and
  // evicting clean entries to make room; it stays even past the budget
  // (it is the version's only copy).
  std::optional<AlignedBuffer> TakeDirty(const std::string& object,
                                         uint64_t version);
  void PutDirty(const std::string& object, uint64_t version,
                AlignedBuffer buf, std::vector<AlignedBuffer>* released);
  // A dirty version taken out (TakeDirty) was replaced for good, never
  // written: a write saved (CacheStats::writes_saved).
  void NoteWriteSaved(uint64_t bytes);

  // Offers the blob of `object` at `version` (in `*buf`; what it occupies
  // is buf->size()). Kept (and *buf moved from) when it fits the budget
  // after evicting clean entries used later than it (or, with no declared
  // order, less recently); otherwise refused and *buf left as it is. A
  // `dirty` entry stays until TakeDirty. Replaced and evicted buffers go
  // to `released`.
  bool Offer(const std::string& object, uint64_t version, AlignedBuffer* buf,
             bool dirty, std::vector<AlignedBuffer>* released);

  // The dirty entries (object, version), for writing them back.
  std::vector<std::pair<std::string, uint64_t>> DirtyEntries() const;
  // Copies a dirty entry for its write-back (no use counted; the entry
  // stays dirty until MarkClean, so a failed write-back loses nothing).
  bool CopyForWriteBack(const std::string& object, uint64_t version,
                        char* dst, size_t n) const;
  // The version is on disk now: its entry (if still that version) is clean.
  void MarkClean(const std::string& object, uint64_t version);

  // Drops the entry of `object` / every entry (e.g. after a restore).
  void Invalidate(const std::string& object,
                  std::vector<AlignedBuffer>* released);
  void Clear(std::vector<AlignedBuffer>* released);

  // The coming accesses, in order (this step's rest, then the next step's).
  // Replaces the previous declaration; each Take of an object consumes its
  // first remaining position.
  void DeclareOrder(const std::vector<std::string>& order);

  CacheStats stats() const;
  // Whether `object` at `version` is cached (for tests and reports).
  bool Contains(const std::string& object, uint64_t version) const;

 private:
  static constexpr uint64_t kNever = UINT64_MAX;
  struct Entry {
    uint64_t version = 0;
    uint64_t bytes = 0;
    uint64_t last_use = 0;
    bool dirty = false;
    bool out = false;  // dirty, and its buffer lent to a checkout
    AlignedBuffer buf;
  };
  uint64_t NextUseLocked(const std::string& object) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The clean entry to evict first: farthest next use, then least recently
  // used; end() when every entry is dirty.
  std::map<std::string, Entry>::iterator VictimLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(std::map<std::string, Entry>::iterator it,
                     std::vector<AlignedBuffer>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ShrinkLocked(std::vector<AlignedBuffer>* released)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  uint64_t budget_ ABSL_GUARDED_BY(mu_);
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dirty_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of dirty entries
  uint64_t tick_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Declared positions of each object's coming uses, ascending.
  std::map<std::string, std::deque<uint64_t>> next_ ABSL_GUARDED_BY(mu_);
  CacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mlpo

#endif  // MLPO_STORE_CACHE_OBJECT_CACHE_H_

#include "store/meta_index.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "store/status_macros.h"

namespace mlpo {
namespace {

enum Cf { kObjects = 1, kVersions, kHeads, kTags, kPaths, kMeta };
const char* const kCfNames[] = {"default", "objects", "versions", "heads",
                                "tags",    "paths",   "meta"};

std::string BE64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 7; i >= 0; --i) {
    s[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return s;
}
uint64_t FromBE64(absl::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < s.size(); ++i)
    v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}
std::string Pair(const std::string& a, absl::string_view b) {
  return absl::StrCat(a, absl::string_view("\0", 1), b);
}
absl::Status RocksStatus(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(what, ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError()) return absl::InternalError(msg);
  if (s.IsBusy() || s.IsTryAgain()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetaIndex>> MetaIndex::Open(
    const std::string& dir, bool create, bool read_only) {
  rocksdb::DBOptions opts;
  opts.create_if_missing = create;
  opts.create_missing_column_families = create;
  opts.max_background_jobs = 2;
  opts.info_log_level = rocksdb::WARN_LEVEL;
  opts.keep_log_file_num = 2;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  for (const char* n : kCfNames)
    cfs.emplace_back(n, rocksdb::ColumnFamilyOptions());
  std::unique_ptr<MetaIndex> m(new MetaIndex());
  m->dir_ = dir;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s =
      read_only ? rocksdb::DB::OpenForReadOnly(opts, dir, cfs, &m->cf_, &db)
                : rocksdb::DB::Open(opts, dir, cfs, &m->cf_, &db);
  if (!s.ok()) {
    if (!create && s.IsInvalidArgument())
      return absl::NotFoundError(
          absl::StrCat("no store index in ", dir, ": ", s.ToString()));
    return RocksStatus(s, absl::StrCat("open store index ", dir));
  }
  m->db_.reset(db);
  std::string fmt;
  s = db->Get(rocksdb::ReadOptions(), m->cf_[kMeta], "format", &fmt);
  if (s.IsNotFound() && !read_only) {
    s = db->Put(rocksdb::WriteOptions(), m->cf_[kMeta], "format",
                std::to_string(kStoreFormat));
    if (!s.ok()) return RocksStatus(s, "write format");
  } else if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("store index ", dir, " has no format record"));
  } else if (!s.ok()) {
    return RocksStatus(s, absl::StrCat("read format of ", dir));
  } else if (fmt != std::to_string(kStoreFormat)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "store index ", dir, " has format ", fmt, "; this mlpo reads format ",
        kStoreFormat));
  }
  return m;
}

MetaIndex::~MetaIndex() {
  if (db_) {
    for (auto* h : cf_) db_->DestroyColumnFamilyHandle(h);
    db_->Close();
  }
}

absl::StatusOr<MetaSnapshot> MetaIndex::Load() {
  MetaSnapshot snap;
  auto scan = [&](int cf, auto fn) -> absl::Status {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), cf_[cf]));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      MLPO_RETURN_IF_ERROR(fn(absl::string_view(it->key().data(), it->key().size()),
                              absl::string_view(it->value().data(), it->value().size())));
    }
    return RocksStatus(it->status(), absl::StrCat("scan index ", dir_));
  };
  MLPO_RETURN_IF_ERROR(scan(kObjects, [&](absl::string_view k, absl::string_view v) {
    auto l = ObjectLayout::Decode(v);
    if (!l.ok()) return Annotate(l.status(), absl::StrCat("object ", k));
    snap.objects.emplace(std::string(k), *l);
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kHeads, [&](absl::string_view k, absl::string_view v) {
    snap.heads[std::string(k)] = FromBE64(v);
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kTags, [&](absl::string_view k, absl::string_view v) {
    size_t z = k.find('\0');
    if (z == absl::string_view::npos)
      return absl::DataLossError(absl::StrCat("corrupt tag key in ", dir_));
    snap.tags[std::string(k.substr(0, z))][std::string(k.substr(z + 1))] =
        FromBE64(v);
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kVersions, [&](absl::string_view k, absl::string_view v) {
    size_t z = k.find('\0');
    auto r = VersionRecord::Decode(v);
    if (z == absl::string_view::npos || !r.ok())
      return absl::DataLossError(
          absl::StrCat("corrupt version record in ", dir_));
    snap.versions.emplace(
        std::make_pair(std::string(k.substr(0, z)), FromBE64(k.substr(z + 1))),
        *r);
    return absl::OkStatus();
  }));
  MLPO_RETURN_IF_ERROR(scan(kPaths, [&](absl::string_view k, absl::string_view v) {
    std::vector<std::string> parts = absl::StrSplit(v, '\t');
    if (parts.size() != 3)
      return absl::DataLossError(absl::StrCat("corrupt path record in ", dir_));
    uint64_t id = FromBE64(std::string(4, '\0') + std::string(k));
    if (snap.paths.size() <= id) snap.paths.resize(id + 1);
    snap.paths[id] = {parts[0], parts[1], parts[2]};
    return absl::OkStatus();
  }));
  return snap;
}

void MetaIndex::Batch::PutObject(const std::string& n, const ObjectLayout& l) {
  batch_.Put(m_->cf_[kObjects], n, l.Encode());
}
void MetaIndex::Batch::PutVersion(const std::string& n, const VersionRecord& r) {
  batch_.Put(m_->cf_[kVersions], Pair(n, BE64(r.version)), r.Encode());
}
void MetaIndex::Batch::DeleteVersion(const std::string& n, uint64_t v) {
  batch_.Delete(m_->cf_[kVersions], Pair(n, BE64(v)));
}
void MetaIndex::Batch::PutHead(const std::string& n, uint64_t v) {
  batch_.Put(m_->cf_[kHeads], n, BE64(v));
}
void MetaIndex::Batch::DeleteHead(const std::string& n) {
  batch_.Delete(m_->cf_[kHeads], n);
}
void MetaIndex::Batch::PutTag(const std::string& t, const std::string& n,
                              uint64_t v) {
  batch_.Put(m_->cf_[kTags], Pair(t, n), BE64(v));
}
void MetaIndex::Batch::DeleteTag(const std::string& t, const std::string& n) {
  batch_.Delete(m_->cf_[kTags], Pair(t, n));
}
void MetaIndex::Batch::PutPath(uint32_t id, const PathRecord& p) {
  batch_.Put(m_->cf_[kPaths], BE64(id).substr(4),
             absl::StrCat(p.uuid, "\t", p.root, "\t", p.kind));
}

absl::Status MetaIndex::Apply(Batch* b, bool sync) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return RocksStatus(db_->Write(wo, &b->batch_),
                     absl::StrCat("write store index ", dir_));
}

}  // namespace mlpo

#include "store/store_options.h"


#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <toml++/toml.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "base/json_number.h"
#include "base/size_units.h"
#include "base/status_macros.h"
#include "store/config_sanity.h"
#include "store/fs/file_util.h"

namespace mlpo {

// A cap below this (1 MiB/s) is a typo ("1" for "1G"): a step of a few GB
// would take days, and close() would wait for it.
constexpr uint64_t kMinCapBytesPerS = uint64_t{1} << 20;

namespace fs = std::filesystem;

namespace {

// A size: a non-negative integer, or a string ParseSize reads. Floats are
// refused (1e30 or 0.5 as a TOML float would otherwise wrap or truncate).
absl::StatusOr<uint64_t> SizeValue(const toml::node& n, const std::string& key,
                                   uint64_t lo = 0, uint64_t hi = kMaxSize) {
  absl::StatusOr<uint64_t> v = absl::InvalidArgumentError("");
  if (n.is_integer()) {
    int64_t i = *n.value<int64_t>();
    if (i < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("config key '", key, "': negative size ", i));
    v = static_cast<uint64_t>(i);
  } else if (n.is_string()) {
    v = ParseSize(*n.value<std::string>());
    if (!v.ok()) return Annotate(v.status(), absl::StrCat("config key '", key, "'"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key '", key,
        "': expected a size as an integer or a string (e.g. 4096, \"1M\")"));
  }
  if (*v < lo || *v > hi)
    return absl::InvalidArgumentError(absl::StrCat(
        "config key '", key, "': ", *v, " is out of range ", lo, "..", hi));
  return v;
}

// An integer in [lo, hi], or an error naming the key and the range.
absl::StatusOr<int64_t> IntValue(const toml::node& n, const std::string& key,
                                 int64_t lo, int64_t hi) {
  if (!n.is_integer())
    return absl::InvalidArgumentError(
        absl::StrCat("config key '", key, "': expected an integer"));
  int64_t i = *n.value<int64_t>();
  if (i < lo || i > hi)
    return absl::InvalidArgumentError(absl::StrCat(
        "config key '", key, "': ", i, " is out of range ", lo, "..", hi));
  return i;
}

std::string AbsoluteRoot(const std::string& root) {
  std::string p = fs::absolute(root).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string Resolve(const std::string& base, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute() || base.empty()) return p;
  return (fs::path(base) / p).lexically_normal().string();
}

// A size as a user writes it: the largest binary unit that divides it.
std::string SizeText(uint64_t bytes) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (u < 4 && bytes != 0 && bytes % 1024 == 0) bytes /= 1024, ++u;
  return u == 0 ? std::to_string(bytes)
                : absl::StrCat("\"", bytes, units[u], "\"");
}

}  // namespace

const std::vector<ConfigKey>& StoreConfigKeys() {
  static const std::vector<ConfigKey>* keys = [] {
    const std::string kSize = "size";
    const std::string kInt = "integer";
    return new std::vector<ConfigKey>{
        {"name", "string", "\"mlpo\"", "", "",
         "the store's name: its directory under every path "
         "(`<root>/<name>/rank-<r>`); letters, digits, `._-`"},
        {"rank", kInt, "0", "0", std::to_string(kMaxRank),
         "this process's rank (one store per rank). The PyTorch adapter "
         "takes it from `torch.distributed` (0 in one process) and refuses "
         "a config whose `rank` differs"},
        {"durability", "`\"step\"` or `\"tag\"`", "\"step\"", "", "",
         "`step`: every step durable once its one index write lands (when "
         "`step()` returns, or with write-behind by the next step, flush "
         "or close: a crash loses at most the step in flight); `tag`: only "
         "tags are (fastest; a crash returns to the last tag). The PyTorch "
         "adapter's default is `\"tag\"` (its `durability=` keyword, or "
         "this key in its config, sets it); `mlpo inspect` of a config "
         "without the key shows `step`, the engine's default, which the "
         "adapter does not use"},
        {"meta_dir", "path", "(`<first nvme root>/<name>/rank-<r>/meta`)", "",
         "", "where the RocksDB index lives; relative to the TOML file"},
        {"extent_bytes", kSize, SizeText(uint64_t{1} << 20),
         SizeText(64 << 10), SizeText(64 << 20),
         "largest extent, i.e. one I/O request; a multiple of 4K"},
        {"buffer_pool_bytes", kSize, SizeText(uint64_t{2} << 30), "0",
         SizeText(kMaxSize), "idle checkout buffers kept for reuse (0: none)"},
        {"cache", "size or `\"N%\"`", "0", "0", SizeText(kMaxSize),
         "the DRAM tier: a byte budget or a share of the declared state "
         "(`\"25%\"`, 0..100%); 0 = off. The PyTorch adapter's default (key "
         "left out): the whole state when it fits in half the available "
         "memory (shared by the node's ranks), else that half"},
        {"adaptive", "`true` or `false`",
         "(on unless a path has a `fraction`)", "", "",
         "stripe fractions follow each path's observed rate every step; "
         "`true` also adapts explicit fractions"},
        {"path.root", "path", "(required)", "", "",
         "the path's directory (must exist); relative to the TOML file; "
         "each path a distinct directory"},
        {"path.kind", "`\"nvme\"`, `\"pfs\"` or `\"other\"`", "\"nvme\"", "",
         "", "the index goes on the first nvme path; pfs paths get one "
         "node-wide I/O slot by default"},
        {"path.fraction", "number", "0", "0", "1e18",
         "share of each object striped here (a weight, normalised; all 0: "
         "equal shares, or `mlpo profile --store`'s figures)"},
        {"path.read_cap", kSize, "0", "0", SizeText(kMaxCapBytesPerS),
         "bytes/s read from this path at most; 0 = uncapped, else at "
         "least 1 MiB/s"},
        {"path.write_cap", kSize, "0", "0", SizeText(kMaxCapBytesPerS),
         "bytes/s written to this path at most; 0 = uncapped, else at "
         "least 1 MiB/s"},
        {"path.slots", kInt, "-1", "-1", std::to_string(kMaxSlots),
         "processes of a node that transfer here at once; -1: 1 for pfs, "
         "else no limit; 0: no limit"},
        {"path.slot_turn_ms", kInt, "100", "0", "3600000",
         "a busy rank hands its slot on after this long (0: keeps it until "
         "idle)"},
        {"path.capacity", kSize, "0", "0", SizeText(kMaxSize),
         "most bytes of segment files here; 0 = what the filesystem has"},
        {"path.segment_bytes", kSize, SizeText(uint64_t{256} << 20),
         SizeText(64 << 10), SizeText(kMaxSegmentBytes),
         "size of each preallocated segment file; a multiple of 4K, at "
         "least `extent_bytes`, at most the path's capacity (a new store: "
         "at most the free space of its disk). The PyTorch adapter's "
         "default (key left out): a quarter of the state, 1 MiB to 256 MiB"},
        {"path.queue_depth", kInt, "32", "1", "4096",
         "I/O requests in flight on this path"},
        {"path.engine", "`\"auto\"`, `\"uring\"` or `\"threadpool\"`",
         "\"auto\"", "", "",
         "`auto`: io_uring, else the thread pool (said once on stderr)"},
    };
  }();
  return *keys;
}

namespace {

// The keys registered by the layers above (a function's static: a layer
// may register from its own static initializer, before main).
struct UpperKeys {
  absl::Mutex mu;
  std::vector<ConfigKey> keys ABSL_GUARDED_BY(mu);
};

UpperKeys& Upper() {
  static UpperKeys* u = new UpperKeys;
  return *u;
}

bool HasKey(const std::vector<ConfigKey>& keys, const std::string& key) {
  for (const ConfigKey& k : keys)
    if (k.key == key) return true;
  return false;
}

bool IsUpperKey(const std::string& key) {
  UpperKeys& u = Upper();
  absl::MutexLock l(&u.mu);
  return HasKey(u.keys, key);
}

ConfigValue UpperValue(const toml::node& v) {
  ConfigValue out;
  if (v.is_boolean()) {
    out.kind = ConfigValue::Kind::kBool;
    out.boolean = *v.value<bool>();
  } else if (v.is_integer()) {
    out.kind = ConfigValue::Kind::kInteger;
    out.integer = *v.value<int64_t>();
  } else if (v.is_string()) {
    out.kind = ConfigValue::Kind::kString;
    out.string = *v.value<std::string>();
  }
  return out;
}

}  // namespace

void RegisterUpperConfigKeys(const std::vector<ConfigKey>& keys) {
  UpperKeys& u = Upper();
  absl::MutexLock l(&u.mu);  // (one check-and-add: no key twice)
  for (const ConfigKey& k : keys)
    if (!HasKey(StoreConfigKeys(), k.key) && !HasKey(u.keys, k.key))
      u.keys.push_back(k);
}

std::vector<ConfigKey> UpperConfigKeys() {
  UpperKeys& u = Upper();
  absl::MutexLock l(&u.mu);
  return u.keys;
}

std::string StoreConfigMarkdown() {
  std::string md = "| key | value | default | meaning |\n|---|---|---|---|\n";
  std::vector<ConfigKey> keys = StoreConfigKeys();
  for (ConfigKey& k : UpperConfigKeys()) keys.push_back(std::move(k));
  for (const ConfigKey& k : keys) {
    std::string value = k.takes;
    if (!k.lo.empty()) absl::StrAppend(&value, " ", k.lo, "..", k.hi);
    std::string def = k.default_value[0] == '(' ? k.default_value
                                                : absl::StrCat("`", k.default_value, "`");
    absl::StrAppend(&md, "| `", k.key, "` | ", value, " | ", def, " | ",
                    k.meaning, " |\n");
  }
  return md;
}

namespace {

// "unknown config key 'x'", with the keys there are.
absl::Status UnknownKey(const std::string& key, bool in_path) {
  std::string known;
  std::vector<ConfigKey> keys = StoreConfigKeys();
  for (ConfigKey& k : UpperConfigKeys()) keys.push_back(std::move(k));
  for (const ConfigKey& k : keys) {
    bool path_key = absl::StartsWith(k.key, "path.");
    if (path_key != in_path) continue;
    absl::StrAppend(&known, known.empty() ? "" : ", ",
                    in_path ? k.key.substr(5) : k.key);
  }
  if (!in_path) absl::StrAppend(&known, ", [[path]]");
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown config key '", key, "' (", in_path ? "[[path]] keys" : "keys",
      ": ", known, "; docs/configuration.md)"));
}

}  // namespace

std::string StoreNamespace(const StoreOptions& o) {
  return absl::StrCat(o.name, "/rank-", o.rank);
}

std::string DefaultMetaDir(const StoreOptions& o) {
  std::string root = o.paths.empty() ? "." : o.paths[0].path.root;
  for (auto& p : o.paths)
    if (p.path.kind == PathKind::kNvme) {
      root = p.path.root;
      break;
    }
  return absl::StrCat(root, "/", StoreNamespace(o), "/meta");
}

absl::Status ValidateStoreOptions(const StoreOptions& o) {
  MLPO_RETURN_IF_ERROR(ValidateName("store", o.name));
  if (!(o.cache_percent >= 0 && o.cache_percent <= 100))
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_percent ", o.cache_percent, " is not in 0..100"));
  if (o.rank < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is out of range 0..", kMaxRank));
  if (o.paths.empty())
    return absl::InvalidArgumentError("store options: no paths");
  if (o.extent_bytes < (64 << 10) || o.extent_bytes > (64 << 20) ||
      o.extent_bytes % kIoAlignment)
    return absl::InvalidArgumentError(absl::StrCat(
        "extent_bytes ", o.extent_bytes,
        " must be a multiple of 4096 in 64 KiB..64 MiB"));
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const StorePathConfig& p = o.paths[i];
    if (p.path.root.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("path[", i, "] has no root"));
    if (!std::isfinite(p.fraction) || p.fraction < 0 ||
        p.fraction > kMaxFraction)
      return absl::InvalidArgumentError(absl::StrCat(
          "path[", i, "] ", p.path.root, ": fraction ", p.fraction,
          " must be a finite number in 0..", kMaxFraction));
    if (p.path.segment_bytes < o.extent_bytes ||
        p.path.segment_bytes > kMaxSegmentBytes ||
        p.path.segment_bytes % kIoAlignment)
      return absl::InvalidArgumentError(absl::StrCat(
          "path[", i, "] ", p.path.root, ": segment_bytes ",
          p.path.segment_bytes, " must be a multiple of 4096 in extent_bytes (",
          o.extent_bytes, ")..", kMaxSegmentBytes));
    if (p.path.read_cap > kMaxCapBytesPerS ||
        p.path.write_cap > kMaxCapBytesPerS)
      return absl::InvalidArgumentError(absl::StrCat(
          "path[", i, "] ", p.path.root, ": caps must be at most ",
          kMaxCapBytesPerS, " bytes/s"));
    if (p.path.slots < -1 || p.path.slots > kMaxSlots)
      return absl::InvalidArgumentError(absl::StrCat(
          "path[", i, "] ", p.path.root, ": slots ", p.path.slots,
          " is out of range -1..", kMaxSlots));
    if (p.path.queue_depth < 1 || p.path.queue_depth > 4096)
      return absl::InvalidArgumentError(absl::StrCat(
          "path[", i, "] ", p.path.root, ": queue_depth ", p.path.queue_depth,
          " is out of range 1..4096"));
    // One directory named twice would put two "paths" in one segment file.
    for (size_t j = 0; j < i; ++j)
      if (AbsoluteRoot(o.paths[j].path.root) == AbsoluteRoot(p.path.root))
        return absl::InvalidArgumentError(absl::StrCat(
            "path[", j, "] and path[", i, "] are the same directory ",
            p.path.root, ": each path must be a distinct directory"));
  }
  return absl::OkStatus();
}

absl::Status ParseCacheBudget(absl::string_view text, uint64_t* bytes,
                              double* percent) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (absl::EndsWith(t, "%")) {
    double pc = 0;
    if (!absl::SimpleAtod(t.substr(0, t.size() - 1), &pc) || !(pc >= 0) ||
        pc > 100)
      return absl::InvalidArgumentError(absl::StrCat(
          "cache budget '", text, "': a percentage must be 0..100%"));
    *percent = pc;
    *bytes = 0;
    return absl::OkStatus();
  }
  auto b = ParseSize(t);
  if (!b.ok())
    return absl::InvalidArgumentError(absl::StrCat(
        "cache budget '", text, "': expected a size (\"4G\") or a "
        "percentage of the state (\"25%\"): ", b.status().message()));
  *bytes = *b;
  *percent = 0;
  return absl::OkStatus();
}

// Long (about 155 lines): one branch per config key, each with its own
// type check and message naming the key (StoreConfigKeys documents the
// same keys for --help and the docs).
absl::StatusOr<StoreOptions> ParseStoreOptions(const std::string& text,
                                               const std::string& base) {
  toml::table t;
  try {
    t = toml::parse(text);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: ", std::string(e.description()), " at line ",
        static_cast<uint64_t>(e.source().begin.line)));
  }
  StoreOptions o;
  for (auto& [k, v] : t) {
    std::string key(k.str());
    if (key == "name") {
      if (!v.is_string())
        return absl::InvalidArgumentError("config key 'name': expected a string");
      o.name = *v.value<std::string>();
    } else if (key == "rank") {
      MLPO_ASSIGN_OR_RETURN(int64_t r, IntValue(v, key, 0, kMaxRank));
      o.rank = static_cast<int>(r);
    } else if (key == "durability") {
      auto s = v.value<std::string>();
      if (s && *s == "step") o.durability = Durability::kStep;
      else if (s && *s == "tag") o.durability = Durability::kTag;
      else return absl::InvalidArgumentError(
          "config key 'durability': expected \"step\" or \"tag\"");
    } else if (key == "meta_dir") {
      if (!v.is_string())
        return absl::InvalidArgumentError("config key 'meta_dir': expected a string");
      o.meta_dir = Resolve(base, *v.value<std::string>());
    } else if (key == "extent_bytes") {
      MLPO_ASSIGN_OR_RETURN(o.extent_bytes,
                            SizeValue(v, key, 64 << 10, 64 << 20));
    } else if (key == "adaptive") {
      if (!v.is_boolean())
        return absl::InvalidArgumentError(
            "config key 'adaptive': expected true or false");
      o.adaptive = *v.value<bool>() ? 1 : 0;
    } else if (key == "buffer_pool_bytes") {
      MLPO_ASSIGN_OR_RETURN(o.buffer_pool_bytes, SizeValue(v, key));
    } else if (key == "cache") {
      if (v.is_string()) {
        MLPO_RETURN_IF_ERROR(Annotate(
            ParseCacheBudget(*v.value<std::string>(), &o.cache_bytes,
                             &o.cache_percent),
            "config key 'cache'"));
      } else {
        MLPO_ASSIGN_OR_RETURN(o.cache_bytes, SizeValue(v, key));
        o.cache_percent = 0;
      }
    } else if (key == "path") {
      auto* arr = v.as_array();
      if (arr == nullptr)
        return absl::InvalidArgumentError(
            "config key 'path': expected [[path]] tables");
      int idx = 0;
      for (auto& el : *arr) {
        auto* pt = el.as_table();
        if (pt == nullptr)
          return absl::InvalidArgumentError("config key 'path': expected tables");
        StorePathConfig pc;
        for (auto& [pk, pv] : *pt) {
          std::string key2 = absl::StrCat("path[", idx, "].", std::string(pk.str()));
          std::string n(pk.str());
          if (n == "root") {
            if (!pv.is_string())
              return absl::InvalidArgumentError(
                  absl::StrCat("config key '", key2, "': expected a string"));
            pc.path.root = Resolve(base, *pv.value<std::string>());
          } else if (n == "kind" || n == "engine") {
            auto s = pv.value<std::string>();
            if (!s)
              return absl::InvalidArgumentError(
                  absl::StrCat("config key '", key2, "': expected a string"));
            if (n == "kind") {
              auto k2 = ParsePathKind(*s);
              if (!k2.ok()) return Annotate(k2.status(), "config key '" + key2 + "'");
              pc.path.kind = *k2;
            } else if (*s == "auto") pc.path.engine = IoEngineKind::kAuto;
            else if (*s == "uring") pc.path.engine = IoEngineKind::kUring;
            else if (*s == "threadpool") pc.path.engine = IoEngineKind::kThreadPool;
            else return absl::InvalidArgumentError(absl::StrCat(
                "config key '", key2, "': expected auto, uring or threadpool"));
          } else if (n == "fraction") {
            auto f = pv.value<double>();
            if (!f || !std::isfinite(*f) || *f < 0 || *f > kMaxFraction)
              return absl::InvalidArgumentError(absl::StrCat(
                  "config key '", key2, "': expected a finite number in 0..",
                  kMaxFraction));
            pc.fraction = *f;
          } else if (n == "read_cap") {
            MLPO_ASSIGN_OR_RETURN(pc.path.read_cap,
                                  SizeValue(pv, key2, 0, kMaxCapBytesPerS));
          } else if (n == "write_cap") {
            MLPO_ASSIGN_OR_RETURN(pc.path.write_cap,
                                  SizeValue(pv, key2, 0, kMaxCapBytesPerS));
          } else if (n == "capacity") {
            MLPO_ASSIGN_OR_RETURN(pc.path.capacity, SizeValue(pv, key2));
          } else if (n == "segment_bytes") {
            MLPO_ASSIGN_OR_RETURN(
                pc.path.segment_bytes,
                SizeValue(pv, key2, kIoAlignment, kMaxSegmentBytes));
            if (pc.path.segment_bytes % kIoAlignment)
              return absl::InvalidArgumentError(absl::StrCat(
                  "config key '", key2, "': ", pc.path.segment_bytes,
                  " is not a multiple of 4096"));
          } else if (n == "slots") {
            MLPO_ASSIGN_OR_RETURN(int64_t i, IntValue(pv, key2, -1, kMaxSlots));
            pc.path.slots = static_cast<int>(i);
          } else if (n == "slot_turn_ms") {
            MLPO_ASSIGN_OR_RETURN(int64_t i, IntValue(pv, key2, 0, 3600000));
            pc.path.slot_turn = absl::Milliseconds(i);
          } else if (n == "queue_depth") {
            MLPO_ASSIGN_OR_RETURN(int64_t i, IntValue(pv, key2, 1, 4096));
            pc.path.queue_depth = static_cast<int>(i);
          } else {
            return UnknownKey(key2, true);
          }
        }
        if (pc.path.root.empty())
          return absl::InvalidArgumentError(
              absl::StrCat("config: path[", idx, "] has no root"));
        o.paths.push_back(pc);
        ++idx;
      }
    } else if (IsUpperKey(key)) {
      o.upper[key] = UpperValue(v);
    } else {
      return UnknownKey(key, false);
    }
  }
  MLPO_RETURN_IF_ERROR(ValidateStoreOptions(o));
  MLPO_RETURN_IF_ERROR(CheckConfiguredSizes(o));
  return o;
}

absl::Status CheckConfiguredSizes(const StoreOptions& o) {
  for (size_t i = 0; i < o.paths.size(); ++i) {
    const auto& p = o.paths[i].path;
    for (auto [key, cap] : {std::pair<const char*, uint64_t>{
                                "read_cap", p.read_cap},
                            {"write_cap", p.write_cap}})
      if (cap != 0 && cap < kMinCapBytesPerS)
        return absl::InvalidArgumentError(absl::StrCat(
            "path[", i, "] ", p.root, ": ", key, " ", cap,
            " bytes/s is below 1 MiB/s (a step of a few GB would take "
            "days): write the unit (\"400M\", \"2G\"), or 0 for no cap"));
    if (p.capacity != 0 && p.segment_bytes > p.capacity)
      return absl::InvalidArgumentError(absl::StrCat(
          "path[", i, "] ", p.root, ": segment_bytes ",
          FormatBytes(p.segment_bytes), " is more than its capacity ",
          FormatBytes(p.capacity),
          ": each segment file is preallocated whole"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StoreOptions> LoadStoreOptions(const std::string& file) {
  auto text = ReadSmallFile(file, kMaxConfigBytes);
  if (!text.ok())
    return Annotate(text.status(), absl::StrCat("cannot read config ", file));
  auto o = ParseStoreOptions(
      *text, fs::absolute(file).parent_path().lexically_normal().string());
  if (!o.ok()) return Annotate(o.status(), file);
  return o;
}

std::string StoreDescriptorJson(const StoreOptions& o,
                                const std::string& store_uuid) {
  nlohmann::json j;
  j["store_uuid"] = store_uuid;
  j["name"] = o.name;
  j["rank"] = o.rank;
  j["durability"] = o.durability == Durability::kStep ? "step" : "tag";
  j["meta_dir"] = fs::absolute(o.meta_dir.empty() ? DefaultMetaDir(o)
                                                  : o.meta_dir)
                      .lexically_normal()
                      .string();
  j["extent_bytes"] = o.extent_bytes;
  for (auto& p : o.paths) {
    j["paths"].push_back(
        {{"root", AbsoluteRoot(p.path.root)},
         {"kind", PathKindName(p.path.kind)},
         {"fraction", p.fraction},
         {"read_cap", p.path.read_cap},
         {"write_cap", p.path.write_cap},
         {"slots", p.path.slots},
         {"capacity", p.path.capacity},
         {"segment_bytes", p.path.segment_bytes},
         {"queue_depth", p.path.queue_depth}});
  }
  return j.dump(2);
}

absl::StatusOr<StoreOptions> StoreOptionsFromDescriptor(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    StoreOptions o;
    o.name = j.at("name");
    o.rank = JsonField<int>(j, "rank");
    o.durability = j.at("durability") == "tag" ? Durability::kTag
                                               : Durability::kStep;
    o.meta_dir = j.at("meta_dir");
    o.extent_bytes = JsonField<uint64_t>(j, "extent_bytes");
    o.create_if_missing = false;
    if (j.contains("store_uuid")) o.store_uuid = j.at("store_uuid");
    for (auto& p : j.at("paths")) {
      StorePathConfig pc;
      pc.path.root = p.at("root");
      MLPO_ASSIGN_OR_RETURN(pc.path.kind,
                            ParsePathKind(p.at("kind").get<std::string>()));
      pc.fraction = JsonField<double>(p, "fraction");
      pc.path.read_cap = JsonField<uint64_t>(p, "read_cap");
      pc.path.write_cap = JsonField<uint64_t>(p, "write_cap");
      pc.path.slots = JsonField<int>(p, "slots");
      pc.path.capacity = JsonField<uint64_t>(p, "capacity");
      pc.path.segment_bytes = JsonField<uint64_t>(p, "segment_bytes");
      pc.path.queue_depth = JsonField<int>(p, "queue_depth");
      o.paths.push_back(pc);
    }
    absl::Status valid = ValidateStoreOptions(o);
    if (!valid.ok())
      return absl::DataLossError(absl::StrCat(
          "corrupt store descriptor: ", valid.message(),
          "; nothing was changed. Every path of the store holds a descriptor: name "
          "the store by another path's directory or by its TOML config; the "
          "training job's next open (resume=True) writes them again"));
    return o;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(
        "corrupt store descriptor: ", e.what(),
        "; nothing was changed. Every path of the store holds a descriptor: name "
          "the store by another path's directory or by its TOML config; the "
          "training job's next open (resume=True) writes them again"));
  }
}

}  // namespace mlpo

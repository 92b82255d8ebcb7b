// Options of an ObjectStore, loadable from a TOML file.
//
//   name = "run1"            # store name (namespace under every path)
//   rank = 0                 # this process's rank (0..2^31-1)
//   durability = "step"      # "step" (default) or "tag"
//   meta_dir = "..."         # default: <first nvme path>/<name>/rank-<r>/meta
//   extent_bytes = "1M"      # largest single extent (one I/O request)
//   buffer_pool_bytes = "2G" # idle lease buffers kept for reuse
//   cache = "25%"            # DRAM tier: a size ("4G") or a percentage of
//                            # the declared state; 0 = off (the default)
//   write_behind = true      # keys of the layers above (the optimizer's:
//   read_ahead = true        # optimizer/optimizer_config.h), which the
//   state_format = "fp32"    # store keeps unparsed in StoreOptions::upper
//   [[path]]                 # one table per storage path, in order
//   root = "var/nvme"        # relative paths: relative to the TOML file
//   kind = "nvme"            # nvme | pfs | other
//   fraction = 0.6           # share of every object striped here
//   read_cap = "600MB"       # bytes/s, 0 = uncapped
//   write_cap = "600MB"
//   slots = -1               # node-wide I/O slots (-1: 1 for pfs, else no limit)
//   slot_turn_ms = 100       # a busy rank hands its slot on after this (0: never)
//   capacity = "100G"        # 0 = as much as the filesystem allows
//   segment_bytes = "256M"
//   queue_depth = 32
//   engine = "auto"          # auto | uring | threadpool
//
// Sizes are integers or strings with K/M/G/T (1024) or KB/MB/GB/TB (1000).
// An unknown key or a bad value is an error naming it; a key a layer above
// registered (RegisterUpperConfigKeys) is that layer's to check.
#ifndef MLPO_STORE_STORE_OPTIONS_H_
#define MLPO_STORE_STORE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/meta/layout.h"
#include "store/path/storage_path.h"

namespace mlpo {

enum class Durability {
  kStep,  // every commit's extents and head are durable when it completes
  kTag,   // only tags are durable; a crash returns to the last tag (fastest)
};

struct StorePathConfig {
  PathOptions path;
  // Share of each object striped on this path. Fractions are normalised; all
  // zero means equal shares.
  double fraction = 0;
};

// The value of a config key that a layer above the store owns: the store
// keeps it as the TOML parser read it, for that layer to check and use.
struct ConfigValue {
  enum class Kind { kBool, kInteger, kString, kOther };
  Kind kind = Kind::kOther;  // kOther: a float, an array or a table
  bool boolean = false;
  int64_t integer = 0;
  std::string string;
};

// Fills the blob of an object that has no version yet. Default: zeros.
using ObjectInitializer = std::function<void(
    const std::string& object, const ObjectLayout& layout, char* blob)>;

struct StoreOptions {
  std::string name = "mlpo";
  int rank = 0;
  std::vector<StorePathConfig> paths;
  std::string meta_dir;  // empty: under the first nvme path (else the first)
  Durability durability = Durability::kStep;
  // Largest extent, i.e. one I/O request; objects are cut into extents of at
  // most this size on each path. Multiple of 4 KiB, 64 KiB..64 MiB.
  uint64_t extent_bytes = uint64_t{1} << 20;
  // Idle lease buffers kept for reuse (bytes). Steady-state checkouts then
  // reuse memory instead of faulting in fresh pages; 0 disables.
  uint64_t buffer_pool_bytes = uint64_t{2} << 30;
  // The DRAM tier (store/cache): a byte budget for whole blobs kept between
  // a commit and the next checkout of the same object. cache_bytes when
  // not 0, else cache_percent of the declared objects' bytes; both 0: off.
  // Read-only opens never cache (they read what is on disk).
  uint64_t cache_bytes = 0;
  double cache_percent = 0;
  // Adaptive placement (AdaptPlacement, once a step): stripe fractions
  // follow each path's observed rate. -1 (default): on unless a path has an
  // explicit `fraction` (explicit fractions win); 0: off; 1: on, starting
  // from the explicit fractions. TOML `adaptive = true|false`.
  int adaptive = -1;
  // The config's keys that a layer above registered (the optimizer's
  // write_behind, read_ahead, state_format), unparsed: that layer parses
  // them (optimizer/optimizer_config.h). Not read by the store.
  std::map<std::string, ConfigValue> upper;
  bool create_if_missing = true;
  // Open without the writer lock and without writing anything, e.g. to
  // inspect a store a training job holds. The view is the index as of open;
  // a live writer may replace (and reuse the space of) versions after that,
  // so reads of them can fail their checksum. Mutations return
  // FailedPrecondition.
  bool read_only = false;
  // The store's identity (set from a STORE descriptor): when not empty, an
  // index or directory of another store is refused at open. Not in TOML.
  std::string store_uuid;
  // The file system of the store's files and its index; nullptr = POSIX.
  // Tests pass a FaultInjectionFileSystem. Not owned; not in TOML.
  FileSystem* fs = nullptr;
  ObjectInitializer initializer;  // not in TOML
  // Open although segment files are missing (store/admin/salvage.h sets it;
  // read-only opens always may). Not in TOML.
  bool salvage = false;
};

// Ranges of the options, checked by ValidateStoreOptions and the TOML loader.
inline constexpr int64_t kMaxRank = 0x7fffffff;
inline constexpr int64_t kMaxSlots = 65536;
inline constexpr uint64_t kMaxSegmentBytes = uint64_t{1} << 40;  // 1 TiB
inline constexpr uint64_t kMaxCapBytesPerS = uint64_t{1} << 50;  // 1 PiB/s
inline constexpr double kMaxFraction = 1e18;  // weights, e.g. bytes/s

// One key of the TOML config: the table docs/configuration.md shows (it is
// StoreConfigMarkdown's output, checked by tests/store/store_config_test.cc,
// which also checks each row's default and range against the parser). The
// parser names these keys when it meets an unknown one.
struct ConfigKey {
  std::string key;      // "rank"; a [[path]] key as "path.read_cap"
  std::string takes;    // what a value looks like: "size", "integer", ...
  std::string default_value;  // TOML text, or "(...)" when it has none
  std::string lo, hi;   // the range as TOML values; empty when not numeric
  std::string meaning;
};
const std::vector<ConfigKey>& StoreConfigKeys();
// The keys of the layers above that a store config may hold beside the
// store's own (registered by them: optimizer/optimizer_config.h registers
// the optimizer's once a binary links it). The store's parser keeps their
// values in StoreOptions::upper instead of refusing them as unknown. Keys
// the store has, or registered already, are ignored. Thread-safe.
void RegisterUpperConfigKeys(const std::vector<ConfigKey>& keys);
std::vector<ConfigKey> UpperConfigKeys();
// Every key a config may hold (the store's, then the registered ones) as a
// Markdown table (| key | value | default | meaning |).
std::string StoreConfigMarkdown();

absl::StatusOr<StoreOptions> LoadStoreOptions(const std::string& toml_file);
absl::StatusOr<StoreOptions> ParseStoreOptions(const std::string& toml_text,
                                               const std::string& base_dir);

// A cache budget as users write it: a size ("4G", "512MiB", 1073741824) or a
// percentage of the state ("25%", 0..100). Sets one of the two and zeroes
// the other; an error names what was wrong.
absl::Status ParseCacheBudget(absl::string_view text, uint64_t* bytes,
                              double* percent);

// "<root>/<name>/rank-<r>": a store's directory on one path.
std::string StoreNamespace(const StoreOptions& o);
std::string DefaultMetaDir(const StoreOptions& o);
absl::Status ValidateStoreOptions(const StoreOptions& o);

// The descriptor every store directory holds (file STORE), so that tools can
// open a store from any of its directories.
// `store_uuid` is recorded as the store's identity.
std::string StoreDescriptorJson(const StoreOptions& o,
                                const std::string& store_uuid);
absl::StatusOr<StoreOptions> StoreOptionsFromDescriptor(
    const std::string& json_text);

// Largest config or descriptor file read (a store config is a few KiB).
inline constexpr size_t kMaxConfigBytes = 1 << 20;

}  // namespace mlpo

#endif  // MLPO_STORE_STORE_OPTIONS_H_

// Measures what one path (or file) sustains through an IoEngine: sequential
// reads, sequential writes, and the mixed load of an update step (reads and
// writes in flight together; bytes counted in both directions).
// Used by `mlpo profile`, `mlpo-bench io` and the step benchmark's bound.
#ifndef MLPO_TOOLS_PROBE_BANDWIDTH_PROBE_H_
#define MLPO_TOOLS_PROBE_BANDWIDTH_PROBE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/io/io_engine.h"

namespace mlpo {

enum class ProbeLoad { kRead, kWrite, kMixed };
const char* ProbeLoadName(ProbeLoad l);

struct ProbeOptions {
  ProbeLoad load = ProbeLoad::kRead;
  size_t block = size_t{1} << 20;  // bytes per request, multiple of 4 KiB
  int depth = 32;                  // requests in flight
  uint64_t file_bytes = uint64_t{1} << 30;  // region [0, file_bytes) is used
  // Stop issuing after this long (the region wraps around until then);
  // zero: one pass over the region.
  absl::Duration duration = absl::ZeroDuration();
  IoEngineKind engine = IoEngineKind::kAuto;
  IoAdmission* admission = nullptr;  // e.g. a capped path's; borrowed
  bool register_buffers = true;
  // Transfer buffers on huge pages (see AlignedBuffer; the depth's blocks
  // share one allocation, so blocks under 4 MiB get them too, as a store's
  // requests into its section buffers do). false = ordinary 4 KiB pages,
  // like fio's default buffers. Depth x block bytes are allocated; more than
  // memory holds is ResourceExhausted.
  bool huge_pages = true;
};

struct ProbeResult {
  uint64_t bytes = 0;  // read + written
  double seconds = 0;
  double bytes_per_s() const { return seconds > 0 ? bytes / seconds : 0; }
};

// Runs one load on an existing file of at least file_bytes (O_DIRECT when the
// filesystem allows it). The mixed load alternates reads and writes along one
// sequential cursor, like fio's rw=rw with rwmixread=50.
absl::StatusOr<ProbeResult> RunProbe(const std::string& file,
                                     const ProbeOptions& options);

// One file of a concurrent probe, with its own options and its own caps
// (bytes/s per direction, 0 = none; options.admission is ignored).
struct ProbeJob {
  std::string file;
  ProbeOptions options;
  uint64_t read_cap = 0, write_cap = 0;
  absl::Duration cap_burst = absl::Milliseconds(20);
};

struct ProbeTogetherResult {
  std::vector<ProbeResult> each;  // in job order
  double seconds = 0;             // wall time of the whole run
  // Total bytes over the wall time (right for one pass over each file).
  double bytes_per_s() const;
  // Sum of each file's own rate (right for timed runs of equal length).
  double sum_of_rates() const;
};

// Runs every job at once, one thread each, e.g. several storage paths driven
// together. The first failure is returned, annotated with its file.
absl::StatusOr<ProbeTogetherResult> RunProbesTogether(
    const std::vector<ProbeJob>& jobs);

// Creates (or extends) `file` to `bytes` with real data written, so reads
// measure the device and not holes.
absl::Status PrepareProbeFile(const std::string& file, uint64_t bytes);

// The one definition of a path's bandwidth that `mlpo profile`, the figures
// it stores in an index, and the benchmarks' bounds all use: a temporary
// file of `file_bytes` under the path, `block`-byte requests `depth` deep,
// each load run for `duration` (zero: one pass), with the path's caps.
struct PathProbeOptions {
  uint64_t file_bytes = uint64_t{1} << 30;
  size_t block = size_t{4} << 20;
  int depth = 16;
  absl::Duration duration = absl::Seconds(2);
  IoEngineKind engine = IoEngineKind::kAuto;
  uint64_t read_cap = 0, write_cap = 0;  // bytes/s per direction, 0 = none
  bool read = true, write = true, mixed = true;  // which loads to run
  // Called before each load starts (progress output).
  std::function<void(ProbeLoad)> on_load;
};

struct PathBandwidth {
  double read_bps = 0, write_bps = 0;
  double mixed_bps = 0;  // reads and writes in flight together, both counted
};

// Measures `root` (a directory); the temporary file is removed afterwards.
absl::StatusOr<PathBandwidth> ProbePath(const std::string& root,
                                        const PathProbeOptions& options);

// One load of ProbePath's on `file` (prepared by the caller, of
// options.file_bytes): for a caller that probes a path again and again on
// one file, as `mlpo-bench step` does between its modes.
ProbeJob PathProbeJob(const std::string& file, const PathProbeOptions& options,
                      ProbeLoad load);

}  // namespace mlpo

#endif  // MLPO_TOOLS_PROBE_BANDWIDTH_PROBE_H_

// Trace: a process-wide recorder of Chrome trace events (the JSON format
// PyTorch's profiler exports; chrome://tracing and Perfetto open it). Off by
// default, and then each call is one relaxed atomic load. The store records
// every extent read and write per path, the DRAM tier its hits, the update
// pipeline its read waits, kernel runs and commit waits.
//
// Thread-safe.
#ifndef MLPO_BASE_TRACE_H_
#define MLPO_BASE_TRACE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mlpo {

class Trace {
 public:
  static Trace* Get();

  // Starts recording (dropping anything recorded before). At most
  // `max_events` are kept; later ones are counted as dropped.
  void Start(size_t max_events = 4'000'000);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // A span [start, end) on `track` (one row in the viewer: "path var/nvme",
  // "pipeline", "cache"). `bytes` (when not 0) shows as an argument.
  void Complete(absl::string_view name, absl::string_view category,
                absl::string_view track, absl::Time start, absl::Time end,
                uint64_t bytes = 0);
  // A point in time on `track`.
  void Instant(absl::string_view name, absl::string_view category,
               absl::string_view track, absl::Time at, uint64_t bytes = 0);

  // Stops recording and writes {"traceEvents": [...]} to `file`.
  absl::Status StopAndWrite(const std::string& file);
  size_t events() const;

 private:
  struct Event {
    std::string name;
    const char* phase;  // "X" or "i"
    std::string category;
    int track = 0;
    int64_t ts_us = 0, dur_us = 0;
    uint64_t bytes = 0;
  };
  void Add(absl::string_view name, const char* phase,
           absl::string_view category, absl::string_view track,
           absl::Time start, absl::Duration dur, uint64_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_);

  std::atomic<bool> enabled_{false};
  mutable Mutex mu_;
  absl::Time origin_ ABSL_GUARDED_BY(mu_);
  size_t max_events_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> tracks_ ABSL_GUARDED_BY(mu_);
};

// A span from construction to destruction, recorded when tracing was on at
// construction. The three names must outlive it (string literals).
class TraceSpan {
 public:
  TraceSpan(absl::string_view name, absl::string_view category,
            absl::string_view track, uint64_t bytes = 0)
      : on_(Trace::Get()->enabled()),
        name_(name), category_(category), track_(track), bytes_(bytes) {
    if (on_) start_ = absl::Now();
  }
  ~TraceSpan() {
    if (on_)
      Trace::Get()->Complete(name_, category_, track_, start_, absl::Now(),
                             bytes_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  const bool on_;
  absl::string_view name_, category_, track_;
  uint64_t bytes_;
  absl::Time start_;
};

}  // namespace mlpo

#endif  // MLPO_BASE_TRACE_H_

#include "base/trace.h"

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace mlpo {
namespace {

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

Trace* Trace::Get() {
  static Trace* t = new Trace();
  return t;
}

void Trace::Start(size_t max_events) {
  MutexLock l(&mu_);
  events_.clear();
  tracks_.clear();
  dropped_ = 0;
  max_events_ = max_events;
  origin_ = absl::Now();
  enabled_.store(true, std::memory_order_relaxed);
}

void Trace::Add(absl::string_view name, const char* phase,
                absl::string_view category, absl::string_view track,
                absl::Time start, absl::Duration dur, uint64_t bytes) {
  Event e;
  e.name = std::string(name);
  e.phase = phase;
  e.category = std::string(category);
  e.dur_us = std::max<int64_t>(0, absl::ToInt64Microseconds(dur));
  e.bytes = bytes;
  MutexLock l(&mu_);
  if (!enabled()) return;
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  e.ts_us = absl::ToInt64Microseconds(start - origin_);
  auto it = tracks_.find(std::string(track));
  if (it == tracks_.end())
    it = tracks_.emplace(std::string(track), static_cast<int>(tracks_.size()) + 1)
             .first;
  e.track = it->second;
  events_.push_back(std::move(e));
}

void Trace::Complete(absl::string_view name, absl::string_view category,
                     absl::string_view track, absl::Time start, absl::Time end,
                     uint64_t bytes) {
  if (enabled()) Add(name, "X", category, track, start, end - start, bytes);
}

void Trace::Instant(absl::string_view name, absl::string_view category,
                    absl::string_view track, absl::Time at, uint64_t bytes) {
  if (enabled())
    Add(name, "i", category, track, at, absl::ZeroDuration(), bytes);
}

size_t Trace::events() const {
  MutexLock l(&mu_);
  return events_.size();
}

absl::Status Trace::StopAndWrite(const std::string& file) {
  enabled_.store(false, std::memory_order_relaxed);
  MutexLock l(&mu_);
  std::FILE* f = std::fopen(file.c_str(), "w");
  if (f == nullptr) return ErrnoStatus(errno, absl::StrCat("write trace ", file));
  std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
  bool first = true;
  auto emit = [&](const std::string& line) {
    if (!first) std::fputs(",\n", f);
    first = false;
    std::fputs(line.c_str(), f);
  };
  for (auto& [name, tid] : tracks_)
    emit(absl::StrCat("{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, "
                      "\"tid\": ", tid, ", \"args\": {\"name\": ",
                      JsonString(name), "}}"));
  for (const Event& e : events_) {
    std::string line = absl::StrCat(
        "{\"name\": ", JsonString(e.name), ", \"cat\": ",
        JsonString(e.category), ", \"ph\": \"", e.phase, "\", \"pid\": 1, "
        "\"tid\": ", e.track, ", \"ts\": ", e.ts_us);
    if (e.phase[0] == 'X') absl::StrAppend(&line, ", \"dur\": ", e.dur_us);
    if (e.phase[0] == 'i') absl::StrAppend(&line, ", \"s\": \"t\"");
    if (e.bytes) absl::StrAppend(&line, ", \"args\": {\"bytes\": ", e.bytes, "}");
    emit(line + "}");
  }
  std::fprintf(f, "\n], \"otherData\": {\"dropped_events\": %llu}}\n",
               static_cast<unsigned long long>(dropped_));
  bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok)
    return ErrnoStatus(errno ? errno : EIO, absl::StrCat("write trace ", file));
  return absl::OkStatus();
}

}  // namespace mlpo

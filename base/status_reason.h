// A machine-readable reason on an absl::Status, for the callers that act
// on one kind of failure (the Python adapter opens another namespace when
// a store is held, says which state format a store has, goes back to a
// tag after an interrupted step) instead of matching the message text.
// Carried as a payload, so that Annotate and every copy keep it.
#ifndef MLPO_BASE_STATUS_REASON_H_
#define MLPO_BASE_STATUS_REASON_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace mlpo {

// The reasons: each names one failure a caller tells apart.
inline constexpr absl::string_view kReasonStoreHeld = "store_held";
inline constexpr absl::string_view kReasonLayoutMismatch = "layout_mismatch";
inline constexpr absl::string_view kReasonStateFormat = "state_format";
inline constexpr absl::string_view kReasonStepInterrupted = "step_interrupted";
// An index whose creation was cut short before its column families were
// made: a writable open finishes it.
inline constexpr absl::string_view kReasonCreationCutShort =
    "creation_cut_short";

inline constexpr absl::string_view kReasonUrl = "mlpo.dev/reason";

// `s` with `reason` and its detail (the holder's pid, the store's state
// format: what the caller acts on).
inline absl::Status WithReason(absl::Status s, absl::string_view reason,
                               absl::string_view detail = "") {
  s.SetPayload(kReasonUrl, absl::Cord(absl::StrCat(reason, "\n", detail)));
  return s;
}

// (reason, detail) of `s`, or nullopt.
inline std::optional<std::pair<std::string, std::string>> ReasonOf(
    const absl::Status& s) {
  auto p = s.GetPayload(kReasonUrl);  // (absl::optional in Debian's Abseil)
  if (!p) return std::nullopt;
  std::string text(*p);
  size_t nl = text.find('\n');
  if (nl == std::string::npos) return std::make_pair(text, std::string());
  return std::make_pair(text.substr(0, nl), text.substr(nl + 1));
}

}  // namespace mlpo

#endif  // MLPO_BASE_STATUS_REASON_H_

// Local RETURN_IF_ERROR / ASSIGN_OR_RETURN: the installed Abseil (20220623)
// ships neither. Also the one errno -> absl::Status mapping every module uses.
// Layer base/: includes Abseil and the standard library only.
#ifndef MLPO_BASE_STATUS_MACROS_H_
#define MLPO_BASE_STATUS_MACROS_H_

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MLPO_CONCAT_INNER_(a, b) a##b
#define MLPO_CONCAT_(a, b) MLPO_CONCAT_INNER_(a, b)

#define MLPO_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status mlpo_status_ = (expr);        \
    if (!mlpo_status_.ok()) return mlpo_status_; \
  } while (0)

#define MLPO_ASSIGN_OR_RETURN_IMPL_(var, lhs, expr) \
  auto var = (expr);                                \
  if (!var.ok()) return std::move(var).status();    \
  lhs = std::move(var).value()

#define MLPO_ASSIGN_OR_RETURN(lhs, expr) \
  MLPO_ASSIGN_OR_RETURN_IMPL_(MLPO_CONCAT_(mlpo_sor_, __LINE__), lhs, expr)

namespace mlpo {

// Maps errno to a status code (ENOENT -> NotFound, ENOSPC -> ResourceExhausted,
// EAGAIN -> Unavailable, ...) with a message "<context>: <strerror> (errno N)".
absl::Status ErrnoStatus(int err, absl::string_view context);

// Adds context in front of a status message, keeping its code.
absl::Status Annotate(const absl::Status& s, absl::string_view context);

}  // namespace mlpo

#endif  // MLPO_BASE_STATUS_MACROS_H_

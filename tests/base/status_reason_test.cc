#include "base/status_reason.h"

#include "base/status_macros.h"
#include "gtest/gtest.h"

namespace mlpo {
namespace {

TEST(StatusReasonTest, AReasonAndItsDetailSurviveAnnotationAndCopies) {
  absl::Status s = WithReason(absl::FailedPreconditionError("held"),
                              kReasonStoreHeld, "4242");
  absl::Status annotated = Annotate(Annotate(s, "open"), "resume");
  EXPECT_EQ(annotated.message(), "resume: open: held");
  EXPECT_EQ(annotated.code(), absl::StatusCode::kFailedPrecondition);
  auto r = ReasonOf(annotated);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, kReasonStoreHeld);
  EXPECT_EQ(r->second, "4242");
  absl::Status copy = annotated;
  EXPECT_EQ(ReasonOf(copy)->first, kReasonStoreHeld);
}

TEST(StatusReasonTest, NoReasonIsNoneAndAnEmptyDetailIsEmpty) {
  EXPECT_FALSE(ReasonOf(absl::InternalError("x")).has_value());
  auto r = ReasonOf(WithReason(absl::AbortedError("x"),
                               kReasonStepInterrupted));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, kReasonStepInterrupted);
  EXPECT_EQ(r->second, "");
}

}  // namespace
}  // namespace mlpo

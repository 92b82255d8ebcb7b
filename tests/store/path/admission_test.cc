#include "store/path/admission.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "store/fs/file_system.h"
#include "tools/probe/bandwidth_probe.h"
#include "tests/test_util.h"

// GCC defines __SANITIZE_ADDRESS__; clang (14) only has the feature test.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MLPO_TEST_HAS_ASAN 1
#endif
#endif
#ifndef MLPO_TEST_HAS_ASAN
#define MLPO_TEST_HAS_ASAN 0
#endif

namespace mlpo {
namespace {

TEST(TokenBucketTest, PaysBeforeAdmitting) {
  TokenBucket b(1000, absl::ZeroDuration());  // 1000 B/s
  absl::Time t = absl::FromUnixSeconds(100);
  EXPECT_NEAR(absl::ToDoubleSeconds(b.Take(500, t)), 0.5, 1e-6);
  // Asking early again: still waiting; at the due time: admitted.
  EXPECT_NEAR(absl::ToDoubleSeconds(b.Take(500, t + absl::Milliseconds(100))),
              0.4, 1e-6);
  EXPECT_EQ(b.Take(500, t + absl::Milliseconds(500)), absl::ZeroDuration());
  // The next 500 bytes are due 0.5 s later.
  absl::Duration wait = b.Take(500, t + absl::Milliseconds(500));
  EXPECT_NEAR(absl::ToDoubleSeconds(wait), 0.5, 1e-6);
  EXPECT_EQ(b.Take(500, t + absl::Seconds(1)), absl::ZeroDuration());
  TokenBucket unlimited(0, absl::ZeroDuration());
  EXPECT_EQ(unlimited.Take(1 << 30, t), absl::ZeroDuration());
}

class CapTest : public ::testing::TestWithParam<IoEngineKind> {};

TEST_P(CapTest, CappedTransferTakesAtLeastBytesOverCap) {
  TempDir dir;
  std::string file = dir.path() + "/cap.dat";
  const uint64_t bytes = 24 << 20;
  ASSERT_TRUE(PrepareProbeFile(file, bytes).ok());
  const uint64_t cap = 40 << 20;  // 40 MiB/s -> at least 0.6 s
  for (ProbeLoad load : {ProbeLoad::kRead, ProbeLoad::kWrite}) {
    PathAdmission adm(cap, cap, absl::ZeroDuration(), nullptr);
    ProbeOptions po;
    po.load = load;
    po.block = 1 << 20;
    po.depth = 8;
    po.file_bytes = bytes;
    po.engine = GetParam();
    po.admission = &adm;
    auto r = RunProbe(file, po);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->bytes, bytes);
    EXPECT_GE(r->seconds, static_cast<double>(bytes) / cap * 0.999)
        << ProbeLoadName(load);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CapTest,
                         ::testing::Values(IoEngineKind::kUring,
                                           IoEngineKind::kThreadPool));

// The depth's blocks share one allocation: every block a write probe leaves
// in the file is one slot's whole fill byte (a slot stride other than the
// block would mix two slots' bytes in a block or leave a block unwritten).
TEST(ProbeTest, EachWrittenBlockHoldsOneSlotsBytes) {
  TempDir dir;
  std::string file = dir.path() + "/slots.dat";
  const size_t block = 256 << 10;
  const int depth = 6;
  const uint64_t bytes = 24 * block;
  ASSERT_TRUE(PrepareProbeFile(file, bytes).ok());
  ProbeOptions po;
  po.load = ProbeLoad::kWrite;
  po.block = block;
  po.depth = depth;
  po.file_bytes = bytes;
  auto r = RunProbe(file, po);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bytes, bytes);
  auto read = DefaultFileSystem()->ReadFile(file, bytes);
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string& data = *read;
  ASSERT_EQ(data.size(), bytes);
  for (uint64_t b = 0; b < bytes / block; ++b) {
    const unsigned char first = data[b * block];
    EXPECT_GE(first, 0x5a) << "block " << b;
    EXPECT_LT(first, 0x5a + depth) << "block " << b;
    EXPECT_EQ(data.find_first_not_of(static_cast<char>(first), b * block),
              b == bytes / block - 1 ? std::string::npos : (b + 1) * block)
        << "block " << b;
  }
}

// Bad input: more buffer than the address space holds, or a depth x block
// that overflows, is an error naming depth and block, not a crash, and the
// file is not touched.
TEST(ProbeTest, BuffersBeyondMemoryAreAnErrorNotACrash) {
  TempDir dir;
  std::string file = dir.path() + "/none.dat";
  ProbeOptions po;
  po.block = size_t{1} << 62;
  po.depth = 8;
  po.file_bytes = uint64_t{1} << 62;
  auto r = RunProbe(file, po);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("depth x block"), std::string::npos)
      << r.status();
#if defined(__SANITIZE_ADDRESS__) || MLPO_TEST_HAS_ASAN
  GTEST_SKIP() << "AddressSanitizer aborts on a 4 PiB allocation instead of "
                  "failing it; the overflow case above ran";
#else
  po.block = size_t{1} << 40;  // 4 PiB in all: no address space holds it
  po.depth = 4096;
  po.file_bytes = uint64_t{1} << 40;
  r = RunProbe(file, po);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("depth x block"), std::string::npos)
      << r.status();
  EXPECT_FALSE(std::filesystem::exists(file));
#endif
}

// Child: take the slot, report through the pipe, then hold it until killed
// or for `hold_ms`.
pid_t SpawnHolder(const std::string& dir, int fd_write, int hold_ms) {
  pid_t pid = fork();
  if (pid == 0) {
    auto s = IoSlots::Open(dir, 1);
    while (!(*s)->TryAcquire()) usleep(1000);
    char c = 'x';
    if (write(fd_write, &c, 1) != 1) _exit(3);
    usleep(hold_ms * 1000);
    (*s)->Release();
    _exit(0);
  }
  return pid;
}

// A child holding the slot of `dir` (for `hold_ms`), once it holds it; -1
// if it never reported.
pid_t HoldingChild(const std::string& dir, int hold_ms) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = SpawnHolder(dir, p[1], hold_ms);
  char c;
  bool held = read(p[0], &c, 1) == 1;
  close(p[0]);
  close(p[1]);
  return held ? pid : -1;
}

TEST(IoSlotsTest, OneSlotExcludesAndKilledHolderFreesIt) {
  TempDir dir;
  std::string slots = dir.path() + "/slots";
  pid_t holder = HoldingChild(slots, 60000);
  ASSERT_GT(holder, 0);
  auto mine = IoSlots::Open(slots, 1);
  ASSERT_TRUE(mine.ok());
  EXPECT_FALSE((*mine)->TryAcquire()) << "a held slot was granted twice";
  // A second child contends too: neither it nor we may get in.
  int q[2];
  ASSERT_EQ(pipe(q), 0);
  pid_t contender = SpawnHolder(slots, q[1], 0);
  usleep(100 * 1000);
  int status;
  EXPECT_EQ(waitpid(contender, &status, WNOHANG), 0) << "contender got in";
  kill(holder, SIGKILL);
  waitpid(holder, &status, 0);
  // The contender or we get the slot now; the kernel freed the dead holder's.
  char c;
  ASSERT_EQ(read(q[0], &c, 1), 1);
  waitpid(contender, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE((*mine)->TryAcquire());
  for (int fd : {q[0], q[1]}) close(fd);
}

TEST(IoSlotsTest, TwoSlotsAdmitTwoHolders) {
  TempDir dir;
  auto a = IoSlots::Open(dir.path() + "/s", 2);
  auto b = IoSlots::Open(dir.path() + "/s", 2);
  auto c = IoSlots::Open(dir.path() + "/s", 2);
  EXPECT_TRUE((*a)->TryAcquire());
  EXPECT_TRUE((*b)->TryAcquire());
  EXPECT_FALSE((*c)->TryAcquire());
  (*a)->Release();
  EXPECT_TRUE((*c)->TryAcquire());
}

// Two ranks on a one-slot path, the first busy all the time: with turns the
// second is admitted within a few turns; without, never while the first is
// busy.
TEST(PathAdmissionTest, BusyRanksHandTheSlotOnAfterTheirTurn) {
  for (absl::Duration turn : {absl::Milliseconds(20), absl::ZeroDuration()}) {
    TempDir dir;
    auto sa = IoSlots::Open(dir.path() + "/s", 1);
    auto sb = IoSlots::Open(dir.path() + "/s", 1);
    ASSERT_TRUE(sa.ok() && sb.ok());
    PathAdmission a(0, 0, absl::ZeroDuration(), std::move(*sa), turn);
    PathAdmission b(0, 0, absl::ZeroDuration(), std::move(*sb), turn);
    IoRequest req;
    req.op = IoOp::kWrite;
    req.len = 4096;
    ASSERT_EQ(a.Admit(req), absl::ZeroDuration());  // a holds the slot
    absl::Time start = absl::Now(), a_next = start, b_next = start;
    bool b_in = false;
    while (!b_in && absl::Now() - start < absl::Milliseconds(300)) {
      absl::Time now = absl::Now();
      if (now >= a_next) a_next = now + a.Admit(req);  // a: always busy
      if (now >= b_next) {
        absl::Duration d = b.Admit(req);
        b_in = d == absl::ZeroDuration();
        b_next = now + d;
      }
      absl::SleepFor(absl::Microseconds(200));
    }
    if (turn > absl::ZeroDuration()) {
      EXPECT_TRUE(b_in) << "the second rank never got a turn";
    } else {
      EXPECT_FALSE(b_in) << "without turns the busy holder keeps the slot";
    }
  }
}

// Issue 37: a job suspended (SIGSTOP, a batch scheduler's suspend) while it
// held a path's node-wide slot blocked every other job on that path for as
// long as it stayed suspended, silently. A waiter now looks at the holder
// after kSlotHolderCheck and goes on without the slot while the holder is
// stopped; a running holder is waited for, as before.
TEST(PathAdmissionTest, AStoppedSlotHolderIsPassedOverARunningOneIsNot) {
  TempDir dir;
  std::string slots = dir.path() + "/slots";
  pid_t holder = HoldingChild(slots, 60000);
  ASSERT_GT(holder, 0);
  auto mine = IoSlots::Open(slots, 1);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ((*mine)->Holders(), std::vector<int>{holder});
  PathAdmission adm(0, 0, absl::ZeroDuration(), std::move(*mine));
  IoRequest req;
  req.op = IoOp::kRead;
  req.len = 4096;
  auto wait_for_admission = [&](absl::Duration limit) {
    absl::Time start = absl::Now();
    while (absl::Now() - start < limit) {
      absl::Duration d = adm.Admit(req);
      if (d == absl::ZeroDuration()) return absl::Now() - start;
      absl::SleepFor(d);
    }
    return absl::InfiniteDuration();
  };
  // Running holder: still waited for after the check.
  EXPECT_EQ(wait_for_admission(kSlotHolderCheck + absl::Milliseconds(800)),
            absl::InfiniteDuration())
      << "a running holder's slot was taken";
  ASSERT_EQ(kill(holder, SIGSTOP), 0);
  int status;
  ASSERT_EQ(waitpid(holder, &status, WUNTRACED), holder);
  ASSERT_TRUE(WIFSTOPPED(status));
  EXPECT_TRUE(ProcessStopped(holder));
  EXPECT_FALSE(ProcessStopped(getpid()));
  absl::Duration took = wait_for_admission(absl::Seconds(20));
  EXPECT_LT(took, absl::Seconds(5)) << "a stopped holder blocked the path";
  // Resumed and then gone: the slot is free again and taken normally.
  kill(holder, SIGCONT);
  kill(holder, SIGKILL);
  waitpid(holder, &status, 0);
  auto again = IoSlots::Open(slots, 1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->TryAcquire());
  EXPECT_EQ((*again)->Holders(), std::vector<int>{getpid()});
}

}  // namespace
}  // namespace mlpo

// The same suite runs against both engines (io_uring and the thread pool).
#include "store/io/io_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mlpo {
namespace {

class IoEngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  std::unique_ptr<IoEngine> MakeEngine(int depth,
                                       IoCompletionFilter filter = nullptr) {
    IoEngineOptions o;
    o.kind = GetParam();
    o.queue_depth = depth;
    o.completion_filter = std::move(filter);
    o.name = "test";
    auto e = IoEngine::Create(o);
    EXPECT_TRUE(e.ok()) << e.status();
    EXPECT_STREQ((*e)->KindName(),
                 GetParam() == IoEngineKind::kUring ? "io_uring" : "threadpool");
    return std::move(*e);
  }
  int OpenFile(const std::string& name, bool* direct) {
    file_ = dir_.path() + "/" + name;
    auto fd = OpenForIo(file_, true, true, direct);
    EXPECT_TRUE(fd.ok()) << fd.status();
    fds_.push_back(*fd);
    return *fd;
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }
  absl::Status Transfer(IoEngine* e, IoOp op, int h, uint64_t off, void* buf,
                        size_t len) {
    IoLatch latch;
    latch.Add();
    IoRequest r{op, h, off, buf, len, latch.Callback()};
    e->Submit(std::move(r));
    return latch.Wait();
  }

  TempDir dir_;
  std::string file_;
  std::vector<int> fds_;
};

TEST_P(IoEngineTest, RandomRoundTripsManySizesOffsetsDepths) {
  for (int depth : {1, 4, 32}) {
    auto e = MakeEngine(depth);
    bool direct;
    int fd = OpenFile("rt-" + std::to_string(depth), &direct);
    auto h = e->RegisterFile(fd, file_, direct);
    ASSERT_TRUE(h.ok());
    std::mt19937 rng(depth);
    const int n = 64;
    std::vector<AlignedBuffer> src, dst;
    std::vector<uint64_t> offs;
    uint64_t cursor = 0;
    for (int i = 0; i < n; ++i) {
      size_t len = kIoAlignment * (1 + rng() % 300);  // 4 KiB .. 1.2 MiB
      cursor += kIoAlignment * (rng() % 4);           // gaps
      offs.push_back(cursor);
      src.emplace_back(len);
      dst.emplace_back(len);
      FillRandom(src.back().data(), len, depth * 1000 + i);
      cursor += len;
    }
    IoLatch w;
    w.Add(n);
    std::vector<IoRequest> batch;
    for (int i = 0; i < n; ++i)
      batch.push_back({IoOp::kWrite, *h, offs[i], src[i].data(),
                       src[i].size(), w.Callback()});
    e->Submit(std::move(batch));
    ASSERT_TRUE(w.Wait().ok());
    IoLatch rd;
    rd.Add(n);
    for (int i = n - 1; i >= 0; --i)  // reverse order, one by one
      e->Submit({IoOp::kRead, *h, offs[i], dst[i].data(), dst[i].size(),
                 rd.Callback()});
    ASSERT_TRUE(rd.Wait().ok());
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(0, std::memcmp(src[i].data(), dst[i].data(), src[i].size()))
          << "request " << i << " depth " << depth;
    auto st = e->Stats();
    EXPECT_EQ(st.writes, static_cast<uint64_t>(n));
    EXPECT_EQ(st.reads, static_cast<uint64_t>(n));
  }
}

TEST_P(IoEngineTest, RegisteredBuffersRoundTrip) {
  auto e = MakeEngine(8);
  const size_t len = 1 << 20;
  AlignedBuffer a(len), b(len);
  FillRandom(a.data(), len, 7);
  ASSERT_TRUE(e->RegisterBuffers({{a.data(), len}, {b.data(), len}}).ok());
  bool direct;
  int fd = OpenFile("fixed", &direct);
  auto h = e->RegisterFile(fd, file_, direct);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(Transfer(e.get(), IoOp::kWrite, *h, 8192, a.data(), len).ok());
  // A sub-range of a registered buffer, too.
  ASSERT_TRUE(Transfer(e.get(), IoOp::kRead, *h, 8192, b.data(), len).ok());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), len));
  std::memset(b.data(), 0, len);
  ASSERT_TRUE(
      Transfer(e.get(), IoOp::kRead, *h, 8192 + 4096, b.data() + 4096, 8192)
          .ok());
  EXPECT_EQ(0, std::memcmp(a.data() + 4096, b.data() + 4096, 8192));
}

TEST_P(IoEngineTest, MisalignedRequestsAreRejectedWithDetail) {
  auto e = MakeEngine(4);
  bool direct;
  int fd = OpenFile("mis", &direct);
  if (!direct) GTEST_SKIP() << "filesystem refuses O_DIRECT; no alignment rule";
  auto h = e->RegisterFile(fd, file_, direct);
  AlignedBuffer buf(3 * kIoAlignment);
  auto s = Transfer(e.get(), IoOp::kWrite, *h, 100, buf.data(), kIoAlignment);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("offset 100"), std::string::npos) << s;
  EXPECT_NE(s.message().find(file_), std::string::npos) << s;
  s = Transfer(e.get(), IoOp::kRead, *h, 0, buf.data(), 1000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = Transfer(e.get(), IoOp::kRead, *h, 0, buf.data() + 1, kIoAlignment);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = Transfer(e.get(), IoOp::kRead, 999, 0, buf.data(), kIoAlignment);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(IoEngineTest, InjectedErrorsNamePathOffsetAndErrno) {
  for (int err : {EIO, ENOSPC}) {
    auto e = MakeEngine(4, [err](IoOp op, const std::string&, uint64_t off,
                                 size_t, int res) {
      return (op == IoOp::kWrite && off == 65536) ? -err : res;
    });
    bool direct;
    int fd = OpenFile("err" + std::to_string(err), &direct);
    auto h = e->RegisterFile(fd, file_, direct);
    AlignedBuffer buf(kIoAlignment);
    EXPECT_TRUE(
        Transfer(e.get(), IoOp::kWrite, *h, 0, buf.data(), kIoAlignment).ok());
    auto s =
        Transfer(e.get(), IoOp::kWrite, *h, 65536, buf.data(), kIoAlignment);
    EXPECT_EQ(s.code(), err == ENOSPC ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kInternal)
        << s;
    EXPECT_NE(s.message().find(file_), std::string::npos) << s;
    EXPECT_NE(s.message().find("offset 65536"), std::string::npos) << s;
    EXPECT_NE(s.message().find(std::strerror(err)), std::string::npos) << s;
    EXPECT_EQ(e->Stats().errors, 1u);
  }
}

TEST_P(IoEngineTest, ShortTransfersAndEagainAreResubmitted) {
  std::atomic<int> calls{0};
  // Every first completion is cut to 4 KiB, every 3rd says EAGAIN.
  auto e = MakeEngine(4, [&calls](IoOp, const std::string&, uint64_t, size_t len,
                                  int res) {
    int c = calls++;
    if (res > 0 && c % 3 == 1) return -EAGAIN;
    if (res > static_cast<int>(kIoAlignment) && c % 3 == 0)
      return static_cast<int>(kIoAlignment);
    return res;
  });
  bool direct;
  int fd = OpenFile("short", &direct);
  auto h = e->RegisterFile(fd, file_, direct);
  const size_t len = 64 * kIoAlignment;
  AlignedBuffer a(len), b(len);
  FillRandom(a.data(), len, 11);
  ASSERT_TRUE(Transfer(e.get(), IoOp::kWrite, *h, 0, a.data(), len).ok());
  ASSERT_TRUE(Transfer(e.get(), IoOp::kRead, *h, 0, b.data(), len).ok());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), len));
  EXPECT_GT(e->Stats().short_resubmits, 0u);
  EXPECT_GT(e->Stats().retries, 0u);
}

TEST_P(IoEngineTest, NoProgressAndReadPastEndFailInsteadOfHanging) {
  auto e = MakeEngine(2, [](IoOp op, const std::string&, uint64_t, size_t,
                            int res) { return op == IoOp::kWrite ? 0 : res; });
  bool direct;
  int fd = OpenFile("noprog", &direct);
  auto h = e->RegisterFile(fd, file_, direct);
  AlignedBuffer buf(kIoAlignment);
  auto s = Transfer(e.get(), IoOp::kWrite, *h, 0, buf.data(), kIoAlignment);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no progress"), std::string::npos) << s;
  s = Transfer(e.get(), IoOp::kRead, *h, 1 << 20, buf.data(), kIoAlignment);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("past end"), std::string::npos) << s;
}

TEST_P(IoEngineTest, SubmitAfterCloseFailsCleanly) {
  auto e = MakeEngine(2);
  bool direct;
  int fd = OpenFile("closed", &direct);
  auto h = e->RegisterFile(fd, file_, direct);
  e->Close();
  AlignedBuffer buf(kIoAlignment);
  auto s = Transfer(e.get(), IoOp::kRead, *h, 0, buf.data(), kIoAlignment);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest,
                         ::testing::Values(IoEngineKind::kUring,
                                           IoEngineKind::kThreadPool),
                         [](const auto& info) {
                           return info.param == IoEngineKind::kUring
                                      ? std::string("Uring")
                                      : std::string("ThreadPool");
                         });

TEST(IoEngineOptionsTest, BadQueueDepthIsRejected) {
  IoEngineOptions o;
  o.queue_depth = 0;
  auto e = IoEngine::Create(o);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlpo

#include "tools/probe/bandwidth_probe.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/removed_on_signal.h"
#include "store/path/admission.h"
#include "base/status_macros.h"

namespace mlpo {

const char* ProbeLoadName(ProbeLoad l) {
  switch (l) {
    case ProbeLoad::kRead: return "read";
    case ProbeLoad::kWrite: return "write";
    default: return "mixed";
  }
}

namespace {

struct ProbeRun {
  IoEngine* engine;
  int file;
  ProbeOptions opt;
  // One allocation holding every slot's block back to back, so that small
  // blocks lie on huge pages as a store's section buffers do (AlignedBuffer
  // gives them only to buffers of 4 MiB and more). Slot i: slab + i * block.
  AlignedBuffer slab;
  char* Slot(size_t i) const { return slab.data() + i * opt.block; }
  std::atomic<uint64_t> next{0};  // request sequence number
  std::atomic<uint64_t> bytes{0};
  absl::Time deadline;
  uint64_t blocks;
  IoLatch latch;
  std::mutex err_mu;
  absl::Status first_error;

  // Issues request number `seq` into buffer `slot`, or stops.
  void Issue(size_t slot) {
    uint64_t seq = next.fetch_add(1);
    bool timed = opt.duration > absl::ZeroDuration();
    if ((!timed && seq >= blocks) || (timed && absl::Now() >= deadline)) {
      latch.Done(absl::OkStatus());
      return;
    }
    IoRequest r;
    r.op = opt.load == ProbeLoad::kRead    ? IoOp::kRead
           : opt.load == ProbeLoad::kWrite ? IoOp::kWrite
           : (seq % 2 == 0)                ? IoOp::kRead
                                           : IoOp::kWrite;
    r.file = file;
    r.offset = (seq % blocks) * opt.block;
    r.buf = Slot(slot);
    r.len = opt.block;
    r.done = [this, slot](const absl::Status& s) {
      if (!s.ok()) {
        {
          std::lock_guard<std::mutex> l(err_mu);
          if (first_error.ok()) first_error = s;
        }
        latch.Done(s);
        return;
      }
      bytes.fetch_add(opt.block);
      Issue(slot);
    };
    engine->Submit(std::move(r));
  }
};

}  // namespace

absl::Status PrepareProbeFile(const std::string& file, uint64_t bytes) {
  bool direct;
  MLPO_ASSIGN_OR_RETURN(int fd, OpenForIo(file, true, true, &direct));
  const size_t chunk = size_t{8} << 20;
  AlignedBuffer buf(chunk);
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < chunk / 8; ++i)
    reinterpret_cast<uint64_t*>(buf.data())[i] = rng();
  absl::Status st;
  for (uint64_t off = 0; off < bytes && st.ok(); off += chunk) {
    size_t n = std::min<uint64_t>(chunk, bytes - off);
    n = (n + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
    if (::pwrite(fd, buf.data(), n, off) != static_cast<ssize_t>(n))
      st = ErrnoStatus(errno ? errno : EIO,
                       absl::StrCat("write ", file, " offset ", off));
  }
  if (st.ok() && ::fdatasync(fd) != 0)
    st = ErrnoStatus(errno, absl::StrCat("fdatasync ", file));
  ::close(fd);
  return st;
}

absl::StatusOr<ProbeResult> RunProbe(const std::string& file,
                                     const ProbeOptions& opt) {
  if (opt.block == 0 || opt.block % kIoAlignment)
    return absl::InvalidArgumentError(absl::StrCat(
        "block size ", opt.block, " is not a positive multiple of 4096"));
  if (opt.depth < 1)
    return absl::InvalidArgumentError("depth must be at least 1");
  uint64_t blocks = opt.file_bytes / opt.block;
  if (blocks == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "probe region of ", opt.file_bytes, " bytes is smaller than a block"));
  if (opt.block > std::numeric_limits<size_t>::max() / opt.depth)
    return absl::InvalidArgumentError(absl::StrCat(
        "probe buffers of ", opt.depth, " x ", opt.block,
        " bytes (depth x block) overflow the address space"));
  // Every slot's block in one allocation (see ProbeRun::slab).
  AlignedBuffer slab;
  try {
    slab = AlignedBuffer(opt.block * opt.depth, opt.huge_pages);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "probe buffers of ", opt.depth, " x ", opt.block, " bytes (depth x "
        "block) do not fit in memory; lower the depth or the block size"));
  }
  IoEngineOptions eo;
  eo.kind = opt.engine;
  eo.queue_depth = opt.depth;
  eo.admission = opt.admission;
  eo.name = file;
  MLPO_ASSIGN_OR_RETURN(auto engine, IoEngine::Create(eo));
  bool direct;
  MLPO_ASSIGN_OR_RETURN(int fd, OpenForIo(file, false, true, &direct));
  auto handle = engine->RegisterFile(fd, file, direct);
  if (!handle.ok()) {
    ::close(fd);
    return handle.status();
  }
  ProbeRun run;
  run.engine = engine.get();
  run.file = *handle;
  run.opt = opt;
  run.blocks = blocks;
  run.slab = std::move(slab);
  std::vector<iovec> iov;
  for (int i = 0; i < opt.depth; ++i) {
    std::memset(run.Slot(i), 0x5a + i, opt.block);
    iov.push_back({run.Slot(i), opt.block});
  }
  absl::Status st;
  if (opt.register_buffers) st = engine->RegisterBuffers(iov);
  ProbeResult res;
  if (st.ok()) {
    absl::Time start = absl::Now();
    run.deadline = start + opt.duration;
    run.latch.Add(opt.depth);
    for (int i = 0; i < opt.depth; ++i) run.Issue(i);
    st = run.latch.Wait();
    res.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    res.bytes = run.bytes.load();
  }
  engine->Close();
  ::close(fd);
  if (!st.ok()) return st;
  return res;
}

double ProbeTogetherResult::bytes_per_s() const {
  uint64_t total = 0;
  for (const ProbeResult& r : each) total += r.bytes;
  return seconds > 0 ? total / seconds : 0;
}

double ProbeTogetherResult::sum_of_rates() const {
  double sum = 0;
  for (const ProbeResult& r : each) sum += r.bytes_per_s();
  return sum;
}

absl::StatusOr<ProbeTogetherResult> RunProbesTogether(
    const std::vector<ProbeJob>& jobs) {
  std::vector<std::unique_ptr<PathAdmission>> caps;
  for (const ProbeJob& j : jobs)
    caps.push_back(std::make_unique<PathAdmission>(j.read_cap, j.write_cap,
                                                   j.cap_burst, nullptr));
  std::vector<absl::StatusOr<ProbeResult>> res(jobs.size());
  std::vector<std::thread> threads;
  absl::Time start = absl::Now();
  for (size_t i = 0; i < jobs.size(); ++i)
    threads.emplace_back([&, i] {
      ProbeOptions o = jobs[i].options;
      o.admission = caps[i].get();
      res[i] = RunProbe(jobs[i].file, o);
    });
  for (auto& t : threads) t.join();
  ProbeTogetherResult out;
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!res[i].ok()) return Annotate(res[i].status(), jobs[i].file);
    out.each.push_back(*res[i]);
  }
  return out;
}

ProbeJob PathProbeJob(const std::string& file, const PathProbeOptions& o,
                      ProbeLoad load) {
  ProbeJob job;
  job.file = file;
  job.read_cap = o.read_cap;
  job.write_cap = o.write_cap;
  job.options.load = load;
  job.options.block = o.block;
  job.options.depth = o.depth;
  job.options.file_bytes = o.file_bytes;
  job.options.duration = o.duration;
  job.options.engine = o.engine;
  return job;
}

absl::StatusOr<PathBandwidth> ProbePath(const std::string& root,
                                        const PathProbeOptions& o) {
  std::string file = absl::StrCat(root, "/.mlpo-probe-", getpid(), ".tmp");
  RemovedOnSignal remove_on_signal(file);
  absl::Status st = PrepareProbeFile(file, o.file_bytes);
  PathBandwidth out;
  for (ProbeLoad load : {ProbeLoad::kWrite, ProbeLoad::kRead, ProbeLoad::kMixed}) {
    if (!st.ok()) break;
    if ((load == ProbeLoad::kRead && !o.read) ||
        (load == ProbeLoad::kWrite && !o.write) ||
        (load == ProbeLoad::kMixed && !o.mixed))
      continue;
    if (o.on_load) o.on_load(load);
    auto r = RunProbesTogether({PathProbeJob(file, o, load)});
    if (!r.ok()) {
      st = r.status();
      break;
    }
    double bps = o.duration > absl::ZeroDuration() ? r->sum_of_rates()
                                                   : r->bytes_per_s();
    (load == ProbeLoad::kRead    ? out.read_bps
     : load == ProbeLoad::kWrite ? out.write_bps
                                 : out.mixed_bps) = bps;
  }
  std::error_code ec;
  std::filesystem::remove(file, ec);
  if (!st.ok()) return Annotate(st, absl::StrCat("probe of ", root));
  return out;
}

}  // namespace mlpo

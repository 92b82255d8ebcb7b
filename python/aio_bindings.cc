// _mlpo.AioHandle: whole-tensor file reads and writes at an offset, queued
// on mlpo's own I/O engine (store/io: io_uring, O_DIRECT when the buffer,
// length and offset allow it) and waited for together. The comparison
// bench (bench/vs_deepspeed.py) hands it to DeepSpeed's NVMe swapper on a
// machine whose DeepSpeed has no async-I/O op (its CPU accelerator): the
// calls DeepSpeed's swapper makes of its aio handle (async_pread,
// async_pwrite, wait) with the same meaning.
#include <fcntl.h>
#include <pybind11/pybind11.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/binding_util.h"
#include "store/io/io_engine.h"

namespace mlpo {
namespace {

class AioHandle {
 public:
  AioHandle(size_t block_size, int queue_depth) : block_(block_size) {
    if (block_size == 0 || block_size % kIoAlignment)
      throw py::value_error(absl::StrCat("block_size ", block_size,
                                         " must be a multiple of ",
                                         kIoAlignment));
    IoEngineOptions o;
    o.queue_depth = queue_depth;
    o.name = "aio-handle";
    engine_ = Value(IoEngine::Create(o));
  }
  ~AioHandle() {
    py::gil_scoped_release nogil;
    (void)latch_.Wait();
    CloseFiles();
    engine_->Close();
  }

  // Queues a read of `nbytes` from `path` at `offset` into `buf`; 0 when
  // queued (DeepSpeed's convention), an exception when the file cannot be
  // opened.
  int Pread(uintptr_t buf, size_t nbytes, const std::string& path,
            uint64_t offset) {
    return Queue(IoOp::kRead, buf, nbytes, path, offset);
  }
  int Pwrite(uintptr_t buf, size_t nbytes, const std::string& path,
             uint64_t offset) {
    return Queue(IoOp::kWrite, buf, nbytes, path, offset);
  }
  // Waits for everything queued; the number of calls it completed. The
  // first error, naming the file, as an exception.
  int Wait() {
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = latch_.Wait();
    }
    CloseFiles();
    int n = ops_;
    ops_ = 0;
    Check(st);
    return n;
  }
  std::string kind() const { return engine_->KindName(); }

 private:
  int Queue(IoOp op, uintptr_t buf, size_t nbytes, const std::string& path,
            uint64_t offset) {
    char* p = reinterpret_cast<char*>(buf);
    bool aligned = buf % kIoAlignment == 0 && nbytes % kIoAlignment == 0 &&
                   offset % kIoAlignment == 0;
    bool direct = false;
    int fd = Value(OpenForIo(path, op == IoOp::kWrite, aligned, &direct,
                             op == IoOp::kRead));
    absl::StatusOr<int> h = engine_->RegisterFile(fd, path, direct);
    if (!h.ok()) {
      ::close(fd);
      Check(h.status());
    }
    files_.push_back({fd, *h});
    std::vector<IoRequest> reqs;
    for (size_t at = 0; at < nbytes; at += block_) {
      IoRequest r;
      r.op = op;
      r.file = *h;
      r.offset = offset + at;
      r.buf = p + at;
      r.len = std::min(block_, nbytes - at);
      r.done = latch_.Callback();
      reqs.push_back(std::move(r));
    }
    latch_.Add(static_cast<int>(reqs.size()));
    engine_->Submit(std::move(reqs));
    ++ops_;
    return 0;
  }
  void CloseFiles() {
    for (auto [fd, h] : files_) {
      (void)engine_->UnregisterFile(h);
      ::close(fd);
    }
    files_.clear();
  }

  const size_t block_;
  std::unique_ptr<IoEngine> engine_;
  IoLatch latch_;
  std::vector<std::pair<int, int>> files_;  // (fd, engine handle)
  int ops_ = 0;
};

}  // namespace

void DefineAioBindings(py::module_& m) {
  py::class_<AioHandle>(m, "AioHandle")
      .def(py::init<size_t, int>(), py::arg("block_size") = 1 << 20,
           py::arg("queue_depth") = 32)
      .def("pread", &AioHandle::Pread)
      .def("pwrite", &AioHandle::Pwrite)
      .def("wait", &AioHandle::Wait)
      .def_property_readonly("kind", &AioHandle::kind);
}

}  // namespace mlpo

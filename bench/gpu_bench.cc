// `mlpo-bench gpu`: the device ends of an update step, each against its
// reference in the same run.
//
//  1. Copies: host-to-device and device-to-host bytes/s from the store's own
//     pool buffers (pinned in place by cudaHostRegister through
//     ObjectStore::RegisterHostMemory) against the same copies from
//     cudaHostAlloc memory, interleaved; ratio pool/hostalloc (goal >= 0.9).
//     Unpinned (pageable) memory is measured too, to show what pinning buys.
//  2. Step: one synthetic model stepped twice over, alternating: gradients
//     from and parameters to the device (the backend chosen, CUDA on a GPU)
//     and the same code with the host backend (memcpy ends). The ratio of
//     step times is what the device ends add (goal < 1.10). The two runs'
//     parameters must come out bit-identical. The fused kernel alone on the
//     same threads (mlpo-bench kernel's figure) is measured before, between
//     and after the steps; each side's params/s over its median is the
//     step's share of the kernel's rate. A step moves 34 B of host memory
//     per parameter against the kernel's 28: the gradient into the stage
//     (2 B read and 2 written; on a GPU 2 written by DMA and 2 read for its
//     statistics) and the new parameter out (2 B: written by the host
//     backend from the tile still in cache, read by a GPU's DMA). With
//     every byte at the kernel's bandwidth it reaches 28/34 = 0.82 of it.
//
// Without a GPU both sides run the host backend and the output says so: the
// command still checks the code path, its figures then mean nothing.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/trace.h"
#include "bench/bench_common.h"
#include "bench/kernel_rate.h"
#include "gpu/device_backend.h"
#include "nlohmann/json.hpp"
#include "optimizer/optimizer.h"
#include "optimizer/param_sink.h"
#include "store/object_store.h"

namespace mlpo {
namespace {

[[noreturn]] void Die(const std::string& what, const absl::Status& s) {
  BenchFail("gpu", what, s);
}

template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(what, v.status());
  return std::move(*v);
}

// Best bytes/s of `reps` passes copying `bytes` in `chunk`-sized copies on
// one stream, then one synchronize.
double CopyRate(DeviceBackend* b, void* host, void* dev, size_t bytes,
                size_t chunk, bool to_device, int reps) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    absl::Time t0 = absl::Now();
    for (size_t off = 0; off < bytes; off += chunk) {
      size_t n = std::min(chunk, bytes - off);
      char* h = static_cast<char*>(host) + off;
      char* d = static_cast<char*>(dev) + off;
      absl::Status st = to_device ? b->CopyToDevice(d, h, n, kParamStream)
                                  : b->CopyToHost(h, d, n, kGradStream);
      if (!st.ok()) Die("copy", st);
    }
    absl::Status st = b->Synchronize(to_device ? kParamStream : kGradStream);
    if (!st.ok()) Die("copy", st);
    best = std::max(best, bytes / absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return best;
}

// One side of the step comparison: its own store, gradients and
// parameter destination in `backend`'s memory.
struct Side {
  DeviceBackend* backend = nullptr;
  std::string name;
  void* grads = nullptr;  // f16, on the backend's "device"
  void* params = nullptr;  // bf16, where the sink writes
  std::unique_ptr<DeviceParamSink> sink;
  std::unique_ptr<Optimizer> opt;
  std::vector<double> step_s;
};

void OpenSide(Side* s, const std::string& dir, uint64_t n, uint64_t subgroup,
              int threads, const std::string& cache, Durability durability,
              const std::vector<uint16_t>& grad_host) {
  s->grads = Must(s->backend->AllocDevice(n * 2), s->name + ": gradients");
  s->params = Must(s->backend->AllocDevice(n * 2), s->name + ": parameters");
  absl::Status st = s->backend->CopyToDevice(s->grads, grad_host.data(), n * 2,
                                             kGradStream);
  if (st.ok()) st = s->backend->Synchronize(kGradStream);
  if (!st.ok()) Die(s->name + ": gradients", st);
  s->sink = Must(DeviceParamSink::Create(s->backend, {s->params}, DType::kBF16,
                                         std::min(subgroup, n)),
                 s->name + ": parameter sink");
  OptimizerOptions o;
  o.store.name = "gpu-" + s->name;
  o.store.extent_bytes = 4 << 20;
  o.store.durability = durability;
  st = ParseCacheBudget(cache, &o.store.cache_bytes, &o.store.cache_percent);
  if (!st.ok()) Die("--cache", st);
  StorePathConfig pc;
  pc.path.root = dir;
  pc.path.segment_bytes = uint64_t{1} << 30;
  pc.path.queue_depth = 16;
  o.store.paths.push_back(pc);
  std::filesystem::remove_all(dir + "/" + o.store.name);
  SetSyntheticModel(&o, n, subgroup, threads);
  o.param_sink = s->sink.get();
  o.init_params = [](int, uint64_t off, float* dst, uint64_t k) {
    for (uint64_t i = 0; i < k; ++i)
      dst[i] = 0.001f * static_cast<float>((off + i) % 1000) - 0.5f;
  };
  s->opt = Must(Optimizer::Open(o), s->name + ": open");
  st = s->opt->RegisterDevice(s->backend);
  if (!st.ok()) Die(s->name + ": register", st);
}

// Gradients handed over a subgroup at a time (as a backward pass would),
// then the step; returns seconds for both.
double RunStep(Side* s, uint64_t n, uint64_t subgroup) {
  absl::Time t0 = absl::Now();
  for (uint64_t off = 0; off < n; off += subgroup) {
    uint64_t k = std::min(subgroup, n - off);
    absl::Status st = s->opt->StageGradFromDevice(
        s->backend, 0, off, static_cast<char*>(s->grads) + off * 2,
        DType::kF16, k);
    if (!st.ok()) Die(s->name + ": gradients", st);
  }
  auto r = s->opt->Step(1024.0);
  if (!r.ok()) Die(s->name + ": step", r.status());
  return absl::ToDoubleSeconds(absl::Now() - t0);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

void AddGpuBench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gpu", "Device ends: copies from the store's pinned pool buffers vs "
             "cudaHostAlloc memory, and a step with gradients from and "
             "parameters to the GPU vs the same step with the host backend");
  struct Args {
    BenchFlags f;
    std::string backend = "auto";
    std::string copy_bytes = "1GiB", chunk = "64MiB";
    uint64_t params = uint64_t{256} << 20, subgroup = uint64_t{16} << 20;
    int steps = 4;
    int threads = 0;
    std::string cache = "100%", durability = "tag";
    bool skip_copies = false;
    std::string trace;
  };
  auto a = std::make_shared<Args>();
  AddBenchFlags(cmd, &a->f);
  cmd->add_option("--backend", a->backend,
                  "Device side: auto (CUDA when a GPU is visible), cuda, host")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cuda", "host"}));
  cmd->add_option("--copy-bytes", a->copy_bytes,
                  "Bytes per copy pass (256MiB with --quick unless given)")
      ->capture_default_str();
  cmd->add_option("--chunk", a->chunk, "Bytes per copy call")
      ->capture_default_str();
  cmd->add_option("--params", a->params,
                  "Parameters of the synthetic model: 268435456, 256M, 1B "
                  "(32M with --quick unless given)")
      ->capture_default_str()
      ->transform(CountArg());
  cmd->add_option("--subgroup", a->subgroup, "Parameters per subgroup")
      ->capture_default_str()
      ->transform(CountArg());
  cmd->add_option("--steps", a->steps, "Timed steps per side (after one "
                                       "untimed)")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--threads", a->threads,
                  "Update threads (0: every core)")->capture_default_str();
  cmd->add_option("--cache", a->cache,
                  "DRAM tier (\"100%\" keeps the state in memory so the "
                  "step is not disk-bound and the ends' cost shows)")
      ->capture_default_str();
  cmd->add_flag("--skip-copies", a->skip_copies,
                "Measure the step only (part 2), not the copy rates");
  cmd->add_option("--trace", a->trace,
                  "Write a Chrome trace-event JSON of the timed steps (opens "
                  "in Perfetto or chrome://tracing): gradient stage copies "
                  "and statistics, kernel runs, read and write waits, "
                  "parameter copies and their waits");
  cmd->add_option("--durability", a->durability, "step or tag")
      ->capture_default_str()
      ->check(CLI::IsMember({"step", "tag"}));
  cmd->callback([a] {
    const BenchFlags& f = a->f;
    EnsureBenchDir(f);
    if (!a->trace.empty()) EnsureWritableFile("--trace", a->trace);
    BackendChoice choice = Must(ParseBackendChoice(a->backend), "--backend");
    Durability durability = Durability::kTag;
    if (a->durability == "step") durability = Durability::kStep;
    else if (a->durability != "tag")
      Die("--durability", absl::InvalidArgumentError(
                              "'" + a->durability + "': expected step or tag"));
    {
      uint64_t bytes = 0;
      double percent = 0;
      absl::Status st = ParseCacheBudget(a->cache, &bytes, &percent);
      if (!st.ok()) Die("--cache", st);  // before any work
    }
    std::unique_ptr<DeviceBackend> dev = Must(SelectBackend(choice), "backend");
    std::unique_ptr<DeviceBackend> host = CreateHostBackend();
    // --quick shrinks what was left at its default, as `step` does.
    const Args d;
    const uint64_t copy_bytes =
        f.quick && a->copy_bytes == d.copy_bytes
            ? (uint64_t{256} << 20)
            : SizeArg("--copy-bytes", a->copy_bytes);
    const uint64_t chunk = SizeArg("--chunk", a->chunk);
    const uint64_t n =
        f.quick && a->params == d.params ? (uint64_t{32} << 20) : a->params;
    const uint64_t subgroup = std::min<uint64_t>(
        f.quick && a->subgroup == d.subgroup ? (uint64_t{4} << 20)
                                             : a->subgroup,
        n);
    if (chunk == 0 || copy_bytes == 0 || n == 0 || subgroup == 0)
      Die("sizes", absl::InvalidArgumentError(
                       "--copy-bytes, --chunk, --params and --subgroup must "
                       "be positive"));
    const int threads =
        a->threads > 0 ? a->threads
                       : std::max(1u, std::thread::hardware_concurrency());
    const int reps = f.quick ? 3 : 5;
    nlohmann::json out;
    out["device_backend"] = dev->name();
    if (!dev->on_device())
      out["note"] = "no GPU: both sides ran the host backend; the figures "
                    "check the code path only";

    // 1. Copies.
    if (!a->skip_copies) {
      Progress("gpu: copies");
      StoreOptions so;
      so.name = "gpu-copies";
      StorePathConfig pc;
      pc.path.root = f.dir;
      so.paths.push_back(pc);
      std::filesystem::remove_all(f.dir + "/gpu-copies");
      auto store = Must(ObjectStore::Open(so), "store");
      absl::Status st = store->RegisterHostMemory(dev.get());
      if (!st.ok()) Die("pinning the pool", st);
      AlignedBuffer pool_buf = store->BorrowBuffer(copy_bytes);
      std::memset(pool_buf.data(), 1, copy_bytes);
      void* ref = Must(dev->AllocPinnedHost(copy_bytes), "cudaHostAlloc");
      std::memset(ref, 2, copy_bytes);
      AlignedBuffer pageable(copy_bytes);
      std::memset(pageable.data(), 3, copy_bytes);
      void* dbuf = Must(dev->AllocDevice(copy_bytes), "device buffer");
      double pool_h2d = 0, pool_d2h = 0, ref_h2d = 0, ref_d2h = 0,
             page_h2d = 0, page_d2h = 0;
      for (int round = 0; round < 2; ++round) {  // interleaved, best of all
        pool_h2d = std::max(pool_h2d, CopyRate(dev.get(), pool_buf.data(), dbuf,
                                               copy_bytes, chunk, true, reps));
        ref_h2d = std::max(ref_h2d, CopyRate(dev.get(), ref, dbuf, copy_bytes,
                                             chunk, true, reps));
        page_h2d = std::max(page_h2d, CopyRate(dev.get(), pageable.data(),
                                               dbuf, copy_bytes, chunk, true,
                                               reps));
        pool_d2h = std::max(pool_d2h, CopyRate(dev.get(), pool_buf.data(), dbuf,
                                               copy_bytes, chunk, false, reps));
        ref_d2h = std::max(ref_d2h, CopyRate(dev.get(), ref, dbuf, copy_bytes,
                                             chunk, false, reps));
        page_d2h = std::max(page_d2h, CopyRate(dev.get(), pageable.data(),
                                               dbuf, copy_bytes, chunk, false,
                                               reps));
      }
      out["copies"] = {
          {"bytes", copy_bytes},
          {"chunk", chunk},
          {"pool_pinned_bytes", store->pinned_bytes()},
          {"h2d_pool_gbps", pool_h2d / 1e9},
          {"h2d_hostalloc_gbps", ref_h2d / 1e9},
          {"h2d_pageable_gbps", page_h2d / 1e9},
          {"h2d_ratio_pool_vs_hostalloc", pool_h2d / ref_h2d},
          {"d2h_pool_gbps", pool_d2h / 1e9},
          {"d2h_hostalloc_gbps", ref_d2h / 1e9},
          {"d2h_pageable_gbps", page_d2h / 1e9},
          {"d2h_ratio_pool_vs_hostalloc", pool_d2h / ref_d2h}};
      dev->FreeDevice(dbuf);
      dev->FreePinnedHost(ref);
      store->ReturnBuffer(std::move(pool_buf));
    }

    // 2. Steps, alternating between the device side and the host side.
    std::vector<uint16_t> grad_host(n);
    for (uint64_t i = 0; i < n; ++i)
      grad_host[i] = FloatToF16(0.01f * static_cast<float>((i * 7) % 100) -
                                0.5f);
    Side dside, hside;
    dside.backend = dev.get();
    dside.name = "device";
    hside.backend = host.get();
    hside.name = "host";
    Progress("gpu: opening the two stores");
    OpenSide(&dside, f.dir, n, subgroup, threads, a->cache, durability,
             grad_host);
    OpenSide(&hside, f.dir, n, subgroup, threads, a->cache, durability,
             grad_host);
    // The kernel alone, before, between and after the timed steps.
    std::vector<double> kernel_rates;
    const size_t kernel_n = std::min<uint64_t>(n, uint64_t{64} << 20);
    auto measure_kernel = [&] {
      Progress("gpu: the fused kernel alone");
      kernel_rates.push_back(MeasureKernelRates(kernel_n, threads, 3).adam);
    };
    for (int s = 0; s <= a->steps; ++s) {
      Progress(absl::StrFormat("gpu: step %d of %d", s, a->steps));
      if (s == 1 || s == a->steps / 2 + 1) measure_kernel();
      if (s == 1 && !a->trace.empty()) Trace::Get()->Start();
      for (Side* side : s % 2 ? std::vector<Side*>{&hside, &dside}
                              : std::vector<Side*>{&dside, &hside}) {
        double t = RunStep(side, n, subgroup);
        if (s > 0) side->step_s.push_back(t);  // step 0 creates the state
      }
    }
    if (!a->trace.empty() && Trace::Get()->enabled()) {
      // Stopped before the last kernel measurement (not part of a step).
      size_t events = Trace::Get()->events();
      if (auto st = Trace::Get()->StopAndWrite(a->trace); !st.ok())
        Die("--trace", st);
      out["trace"] = a->trace;
      out["trace_events"] = events;
    }
    measure_kernel();
    Progress("");
    // Both sides ran the same steps on the same gradients.
    std::vector<char> a_params(n * 2), b_params(n * 2);
    absl::Status st = dev->CopyToHost(a_params.data(), dside.params, n * 2,
                                      kGradStream);
    if (st.ok()) st = dev->Synchronize(kGradStream);
    if (!st.ok()) Die("reading parameters back", st);
    std::memcpy(b_params.data(), hside.params, n * 2);
    const bool identical =
        std::memcmp(a_params.data(), b_params.data(), n * 2) == 0;
    const double dmed = Median(dside.step_s), hmed = Median(hside.step_s);
    out["step"] = {{"params", n},
                   {"subgroup", subgroup},
                   {"threads", threads},
                   {"cache", a->cache},
                   {"durability", a->durability},
                   {"device_step_s", dside.step_s},
                   {"host_step_s", hside.step_s},
                   {"device_median_s", dmed},
                   {"host_median_s", hmed},
                   {"device_params_per_s", n / dmed},
                   {"ratio_device_vs_host", dmed / hmed},
                   {"params_identical", identical},
                   {"kernel_params_per_s_runs", kernel_rates},
                   {"kernel_params_per_s", Median(kernel_rates)},
                   {"device_step_vs_kernel", n / dmed / Median(kernel_rates)},
                   {"host_step_vs_kernel", n / hmed / Median(kernel_rates)},
                   {"bytes_per_param", {{"kernel", 28}, {"grad_stage", 4},
                                        {"params_out", 2}, {"total", 34}}},
                   {"bound_vs_kernel", 28.0 / 34.0}};
    for (Side* side : {&dside, &hside}) {
      side->opt.reset();
      side->sink.reset();
      side->backend->FreeDevice(side->grads);
      side->backend->FreeDevice(side->params);
      if (!f.keep)
        std::filesystem::remove_all(f.dir + "/gpu-" + side->name);
    }
    if (!f.keep) std::filesystem::remove_all(f.dir + "/gpu-copies");
    if (f.json) {
      std::cout << out.dump(2) << "\n";
    } else {
      std::printf("device backend: %s\n", dev->name());
      if (out.contains("note"))
        std::printf("note: %s\n", out["note"].get<std::string>().c_str());
      if (out.contains("copies")) {
        auto& c = out["copies"];
        std::printf(
          "copies of %.0f MiB in %.0f MiB calls, GB/s (pool pinned / "
          "cudaHostAlloc / pageable):\n  H2D %.2f / %.2f / %.2f  ratio %.3f\n"
          "  D2H %.2f / %.2f / %.2f  ratio %.3f\n",
          copy_bytes / 1048576.0, chunk / 1048576.0,
          c["h2d_pool_gbps"].get<double>(), c["h2d_hostalloc_gbps"].get<double>(),
          c["h2d_pageable_gbps"].get<double>(),
          c["h2d_ratio_pool_vs_hostalloc"].get<double>(),
          c["d2h_pool_gbps"].get<double>(), c["d2h_hostalloc_gbps"].get<double>(),
          c["d2h_pageable_gbps"].get<double>(),
          c["d2h_ratio_pool_vs_hostalloc"].get<double>());
      }
      std::printf(
          "step, %llu params, %d threads, cache %s, durability %s: device "
          "ends %.3f s, host ends %.3f s (median of %d), ratio %.3f; "
          "parameters %s\n",
          static_cast<unsigned long long>(n), threads, a->cache.c_str(),
          a->durability.c_str(), dmed, hmed, a->steps, dmed / hmed,
          identical ? "bit-identical" : "DIFFER");
      const double k = Median(kernel_rates);
      std::printf(
          "against the fused kernel alone (%.0f M params/s, same threads, "
          "median of %zu): device ends %.0f M params/s = %.3f, host ends "
          "%.0f M params/s = %.3f (bound %.3f: 34 B moved per parameter "
          "against the kernel's 28)\n",
          k / 1e6, kernel_rates.size(), n / dmed / 1e6, n / dmed / k,
          n / hmed / 1e6, n / hmed / k, 28.0 / 34.0);
    }
    if (!identical) throw CLI::RuntimeError(1);
  });
}

}  // namespace mlpo

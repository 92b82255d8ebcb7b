// `mlpo-bench kernel`: fused AdamW params/s on 1 and 2 threads against a
// memory-bandwidth reference measured in the same run: a streaming loop that
// moves exactly the kernel's bytes (reads p, m, v and an fp16 gradient;
// writes p, m, v and a bf16 parameter: 28 B per element) with trivial math.
#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/strings/str_format.h"
#include "bench/bench_common.h"
#include "bench/kernel_rate.h"
#include "nlohmann/json.hpp"
#include "optimizer/adam_kernel.h"
#include "optimizer/parallel.h"
#include "base/aligned_buffer.h"

namespace mlpo {
namespace {

struct Arrays {
  AlignedBuffer p, m, v, g, out;
  size_t n;
  explicit Arrays(size_t n)
      : p(n * 4), m(n * 4), v(n * 4), g(n * 2), out(n * 2), n(n) {
    auto* pp = reinterpret_cast<float*>(p.data());
    auto* mm = reinterpret_cast<float*>(m.data());
    auto* vv = reinterpret_cast<float*>(v.data());
    auto* gg = reinterpret_cast<uint16_t*>(g.data());
    for (size_t i = 0; i < n; ++i) {
      pp[i] = 0.001f * (i % 1000);
      mm[i] = 0;
      vv[i] = 0;
      gg[i] = FloatToF16(0.01f * ((i * 7) % 100) - 0.5f);
    }
  }
};

// Elements per second of `fn` over the arrays in tiles on `threads`.
template <typename Fn>
double Rate(Arrays& a, int threads, int reps, Fn fn) {
  ParallelRunner runner(threads);
  const size_t tile = size_t{1} << 16;
  size_t tiles = (a.n + tile - 1) / tile;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    absl::Time t0 = absl::Now();
    runner.ParallelFor(tiles, [&](size_t t) {
      size_t off = t * tile;
      fn(off, std::min(tile, a.n - off));
    });
    best = std::max(best, a.n / absl::ToDoubleSeconds(absl::Now() - t0));
  }
  return best;
}

}  // namespace

KernelRates MeasureKernelRates(size_t n, int threads, int reps) {
  Arrays a(n);
  auto* p = reinterpret_cast<float*>(a.p.data());
  auto* m = reinterpret_cast<float*>(a.m.data());
  auto* v = reinterpret_cast<float*>(a.v.data());
  auto* g = reinterpret_cast<uint16_t*>(a.g.data());
  auto* out = reinterpret_cast<uint16_t*>(a.out.data());
  AdamHyper h;
  h.weight_decay = 0.01;
  AdamStepConsts c = MakeStepConsts(h, 10, 1.0 / 1024);
  KernelRates r;
  r.adam = Rate(a, threads, reps, [&](size_t off, size_t len) {
    AdamUpdate({p + off, m + off, v + off, g + off, DType::kF16, out + off,
                DType::kBF16, len},
               c);
  });
  r.stream = Rate(a, threads, reps, [&](size_t off, size_t len) {
    for (size_t i = off; i < off + len; ++i) {
      p[i] = p[i] * 0.5f;
      m[i] = m[i] * 0.5f;
      v[i] = v[i] * 0.5f;
      out[i] = g[i];
    }
  });
  return r;
}

void AddKernelBench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "kernel", "Fused AdamW params/s on 1 and 2 threads vs a streaming "
                "memory-bandwidth reference moving the same 28 B/param");
  struct Args {
    BenchFlags f;
    size_t n = size_t{64} << 20;
  };
  auto a = std::make_shared<Args>();
  AddBenchFlags(cmd, &a->f);
  cmd->add_option("--elements", a->n, "Elements per array (16M with --quick)")
      ->capture_default_str();
  cmd->callback([a] {
    size_t n = a->f.quick ? (size_t{16} << 20) : a->n;
    nlohmann::json out;
    out["isa"] = KernelIsaName(BestKernelIsa());
    out["elements"] = n;
    for (int threads : {1, 2}) {
      Progress(absl::StrFormat("kernel: %d thread(s)", threads));
      KernelRates r = MeasureKernelRates(n, threads, a->f.quick ? 3 : 5);
      out["threads_" + std::to_string(threads)] = {
          {"adam_params_per_s", r.adam},
          {"stream_elems_per_s", r.stream},
          {"bandwidth_ratio", r.adam / r.stream},
          {"adam_gb_per_s", r.adam * 28 / 1e9}};
    }
    Progress("");
    if (a->f.json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::printf("isa %s, %zu elements (28 B each per update)\n",
                out["isa"].get<std::string>().c_str(), n);
    for (int threads : {1, 2}) {
      auto& t = out["threads_" + std::to_string(threads)];
      std::printf("%d thread(s): AdamW %.0f M params/s (%.1f GB/s), "
                  "stream %.0f M/s, ratio %.3f\n",
                  threads, t["adam_params_per_s"].get<double>() / 1e6,
                  t["adam_gb_per_s"].get<double>(),
                  t["stream_elems_per_s"].get<double>() / 1e6,
                  t["bandwidth_ratio"].get<double>());
    }
  });
}

}  // namespace mlpo

// `mlpo-bench kernel`: fused AdamW params/s on 1 and 2 threads against a
// memory-bandwidth reference measured in the same run: a streaming loop that
// moves exactly the kernel's bytes (reads p, m, v and an fp16 gradient;
// writes p, m, v and a bf16 parameter: 28 B per element in fp32, 20 with
// bf16 moments, about 16 with int8 moments) with trivial math, for each
// state format.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/aligned_buffer.h"
#include "bench/bench_common.h"
#include "bench/kernel_rate.h"
#include "nlohmann/json.hpp"
#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/isa.h"
#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/state_codec.h"
#include "optimizer/parallel.h"
#include <cstring>

namespace mlpo {
namespace {

struct Arrays {
  AlignedBuffer p, m, v, g, out, ms, vs;
  size_t n;
  explicit Arrays(size_t n)
      : p(n * 4), m(n * 4), v(n * 4), g(n * 2), out(n * 2),
        ms((n / kQuantBlock + 1) * 4), vs((n / kQuantBlock + 1) * 4), n(n) {
    std::memset(ms.data(), 0, ms.size());
    std::memset(vs.data(), 0, vs.size());
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

double KernelBytesPerElement(StateFormat format) {
  // p read and written, the gradient in, the parameter out, m and v.
  return 8 + 2 + 2 + (StateBytesPerParam(format) - 4) * 2;
}

KernelRates MeasureKernelRates(size_t n, int threads, int reps,
                               StateFormat format, RuleKind rule) {
  Arrays a(n);
  auto* p = reinterpret_cast<float*>(a.p.data());
  auto* g = reinterpret_cast<uint16_t*>(a.g.data());
  auto* out = reinterpret_cast<uint16_t*>(a.out.data());
  auto* ms = reinterpret_cast<float*>(a.ms.data());
  auto* vs = reinterpret_cast<float*>(a.vs.data());
  // Zero moments are zero in every format (zero codes, zero scales).
  std::memset(a.m.data(), 0, a.m.size());
  std::memset(a.v.data(), 0, a.v.size());
  const size_t esize = MomentBytes(format);
  RuleHyper h;
  h.weight_decay = 0.01;
  AdamStepConsts c = MakeStepConsts(h, 10, 1.0 / 1024);
  KernelRates r;
  if (rule != RuleKind::kAdam) {  // the rule's kernel over its own slots
    RuleSpec spec{rule, false, true};
    const std::vector<StateSlot> slots = spec.Slots();
    RuleHyper rh;
    rh.momentum = 0.9;
    RuleConsts rc = MakeRuleConsts(rule, rh, 10, 1.0 / 1024);
    r.adam = Rate(a, threads, reps, [&](size_t off, size_t len) {
      RuleSlice s;
      s.p = p + off;
      s.grad = g + off;
      s.grad_dtype = DType::kF16;
      s.out = out + off;
      s.n = len;
      s.format = format;
      s.slots = static_cast<int>(slots.size());
      AlignedBuffer* arr[2] = {&a.m, &a.v};
      float* sc[2] = {ms, vs};
      for (int k = 0; k < s.slots; ++k) {
        s.slot[k] = arr[k]->data() + off * esize;
        s.scale[k] = sc[k] + off / kQuantBlock;
        s.nonneg[k] = slots[k].nonneg;
      }
      RuleUpdate(s, rc);
    });
    r.stream = 0;
    return r;
  }
  r.adam = Rate(a, threads, reps, [&](size_t off, size_t len) {
    AdamSlice s{p + off, a.m.data() + off * esize, a.v.data() + off * esize,
                g + off, DType::kF16, out + off, DType::kBF16, len};
    s.format = format;
    s.ms = ms + off / kQuantBlock;  // tiles are whole blocks
    s.vs = vs + off / kQuantBlock;
    AdamUpdate(s, c);
  });
  r.stream = Rate(a, threads, reps, [&](size_t off, size_t len) {
    for (size_t i = off; i < off + len; ++i) {
      p[i] = p[i] * 0.5f;
      out[i] = g[i];
    }
    switch (format) {
      case StateFormat::kF32: {
        auto* m = reinterpret_cast<float*>(a.m.data());
        auto* v = reinterpret_cast<float*>(a.v.data());
        for (size_t i = off; i < off + len; ++i) {
          m[i] = m[i] * 0.5f;
          v[i] = v[i] * 0.5f;
        }
        break;
      }
      case StateFormat::kBF16Moments: {
        auto* m = reinterpret_cast<uint16_t*>(a.m.data());
        auto* v = reinterpret_cast<uint16_t*>(a.v.data());
        for (size_t i = off; i < off + len; ++i) {
          m[i] = static_cast<uint16_t>(m[i] >> 1);
          v[i] = static_cast<uint16_t>(v[i] >> 1);
        }
        break;
      }
      case StateFormat::kInt8Moments: {
        auto* m = a.m.data();
        auto* v = a.v.data();
        for (size_t i = off; i < off + len; ++i) {
          m[i] = static_cast<char>(m[i] >> 1);
          v[i] = static_cast<char>(v[i] >> 1);
        }
        for (size_t b = off / kQuantBlock; b < (off + len) / kQuantBlock; ++b) {
          ms[b] = ms[b] * 0.5f;
          vs[b] = vs[b] * 0.5f;
        }
        break;
      }
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
    std::string formats = "fp32,bf16-moments,int8-moments";
    bool n_given = false;
  };
  auto a = std::make_shared<Args>();
  AddBenchFlags(cmd, &a->f);
  cmd->add_option("--elements", a->n, "Elements per array (16M with --quick)")
      ->capture_default_str()
      ->each([a](const std::string&) { a->n_given = true; });
  cmd->add_option("--state-format", a->formats,
                  "State formats to measure, comma-separated (fp32, "
                  "bf16-moments, int8-moments)")
      ->capture_default_str();
  cmd->callback([a] {
    // --quick shrinks only what was left at its default.
    size_t n = a->f.quick && !a->n_given ? (size_t{16} << 20) : a->n;
    {
      // Its arrays (p, m, v, a gradient, a compact copy: under 24 bytes an
      // element) must fit half this machine's memory: a huge count ended
      // in std::bad_alloc (or the OOM killer).
      double mem = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                   static_cast<double>(sysconf(_SC_PAGESIZE));
      if (n == 0 || static_cast<double>(n) * 24 > mem / 2) {
        std::cerr << "mlpo-bench kernel: --elements " << n
                  << ": its arrays (about 24 bytes an element) must fit in "
                     "half this machine's memory ("
                  << FormatBytes(static_cast<uint64_t>(mem)) << "); at most "
                  << static_cast<uint64_t>(mem / 48) << "\n";
        throw CLI::RuntimeError(2);
      }
    }
    std::vector<StateFormat> formats;
    for (auto part : absl::StrSplit(a->formats, ',')) {
      auto f = ParseStateFormat(part);
      if (!f.ok()) {
        std::cerr << "mlpo-bench kernel: --state-format: "
                  << f.status().message() << "\n";
        throw CLI::RuntimeError(2);
      }
      formats.push_back(*f);
    }
    nlohmann::json out;
    out["isa"] = KernelIsaName(BestKernelIsa());
    out["elements"] = n;
    // Formats interleaved within each thread count: one noisy minute hits
    // all of them.
    for (int threads : {1, 2}) {
      for (StateFormat fmt : formats) {
        Progress(absl::StrFormat("kernel: %s, %d thread(s)",
                                 StateFormatName(fmt), threads));
        KernelRates r = MeasureKernelRates(n, threads, a->f.quick ? 3 : 5, fmt);
        double bytes = KernelBytesPerElement(fmt);
        nlohmann::json t = {{"adam_params_per_s", r.adam},
                            {"stream_elems_per_s", r.stream},
                            {"bandwidth_ratio", r.adam / r.stream},
                            {"bytes_per_param", bytes},
                            {"adam_gb_per_s", r.adam * bytes / 1e9}};
        std::string key = "threads_" + std::to_string(threads);
        if (fmt == StateFormat::kF32) out[key] = t;  // the old keys stay
        out["formats"][StateFormatName(fmt)][key] = t;
      }
    }
    Progress("");
    if (a->f.json) {
      std::cout << out.dump(2) << "\n";
      return;
    }
    std::printf("isa %s, %zu elements\n", out["isa"].get<std::string>().c_str(),
                n);
    for (StateFormat fmt : formats) {
      for (int threads : {1, 2}) {
        auto& t = out["formats"][StateFormatName(fmt)]
                     ["threads_" + std::to_string(threads)];
        std::printf("%-13s %d thread(s): AdamW %5.0f M params/s (%4.1f GB/s at "
                    "%.1f B/param), stream %5.0f M/s, ratio %.3f\n",
                    StateFormatName(fmt), threads,
                    t["adam_params_per_s"].get<double>() / 1e6,
                    t["adam_gb_per_s"].get<double>(),
                    t["bytes_per_param"].get<double>(),
                    t["stream_elems_per_s"].get<double>() / 1e6,
                    t["bandwidth_ratio"].get<double>());
      }
    }
  });
}

}  // namespace mlpo

// The C++ optimizer in a training loop of its own: AdamW over 4096 fp32
// parameters whose state lives in a store on two directories (an "NVMe"
// and a "PFS" path), 20 steps of the gradient of 0.5 * |p - target|^2, a
// checkpoint tag, and a check of the result against AdamW computed in
// double precision here. Build and run (docs/user-guide.md, "The
// optimizer"):
//   ninja -C build mlpo-example-adamw
//   build/examples/mlpo-example-adamw /tmp/mlpo-example
// Exit 0 when every parameter is within 1e-5 of the double-precision
// AdamW, 1 otherwise or on any error (printed).
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "optimizer/optimizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (a directory for the store)\n",
                 argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t n = 4096;
  const int steps = 20;
  mlpo::OptimizerOptions o;
  o.store.name = "example";
  for (const char* tier : {"nvme", "pfs"}) {
    const std::string root = dir + "/" + tier;
    ::mkdir(dir.c_str(), 0700);   // the store makes its objects, never
    ::mkdir(root.c_str(), 0700);  // its paths' directories
    // A run before this one left its store (and its tag): this example's
    // store goes, nothing else in DIR.
    std::error_code ec;
    std::filesystem::remove_all(root + "/example", ec);
    mlpo::StorePathConfig pc;
    pc.path.root = root;
    pc.path.kind = tier[0] == 'n' ? mlpo::PathKind::kNvme : mlpo::PathKind::kPfs;
    pc.path.segment_bytes = 4 << 20;
    o.store.paths.push_back(pc);
  }
  mlpo::RuleHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.01;  // AdamW's decoupled decay
  o.groups = {{n, h, {}}};
  o.subgroup_numel = 1024;  // four store objects
  o.grad_dtype = mlpo::DType::kF32;
  o.param_dtype = mlpo::DType::kF32;
  auto init = [](uint64_t i) { return std::sin(0.37 * i); };
  o.init_params = [&](int, uint64_t off, float* dst, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i)
      dst[i] = static_cast<float>(init(off + i));
  };
  auto opened = mlpo::Optimizer::Open(o);
  if (!opened.ok()) {
    std::fprintf(stderr, "open: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<mlpo::Optimizer> opt = std::move(*opened);

  // The reference: AdamW in double precision from the same fp32 start.
  std::vector<double> p(n), m(n, 0), v(n, 0), target(n);
  std::vector<float> params(n), grad(n);
  for (uint64_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(init(i));
    params[i] = static_cast<float>(p[i]);
    target[i] = std::cos(0.11 * i);
  }
  for (int t = 1; t <= steps; ++t) {
    for (uint64_t i = 0; i < n; ++i)
      grad[i] = params[i] - static_cast<float>(target[i]);
    if (auto st = opt->StageGrad(0, 0, grad.data(), mlpo::DType::kF32, n);
        !st.ok()) {
      std::fprintf(stderr, "stage: %s\n", st.ToString().c_str());
      return 1;
    }
    auto rep = opt->Step();
    if (!rep.ok()) {
      std::fprintf(stderr, "step %d: %s\n", t, rep.status().ToString().c_str());
      return 1;
    }
    for (uint64_t i = 0; i < n; ++i) {
      const double g = grad[i];
      p[i] *= 1 - h.lr * h.weight_decay;
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
      const double mh = m[i] / (1 - std::pow(h.beta1, t));
      const double vh = v[i] / (1 - std::pow(h.beta2, t));
      p[i] -= h.lr * mh / (std::sqrt(vh) + h.eps);
    }
    if (auto st = opt->CopyParams(0, 0, params.data(), n); !st.ok()) {
      std::fprintf(stderr, "params: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  if (auto st = opt->Tag("step-20"); !st.ok()) {
    std::fprintf(stderr, "tag: %s\n", st.ToString().c_str());
    return 1;
  }
  double worst = 0, loss = 0;
  for (uint64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(params[i] - p[i]));
    loss += 0.5 * (params[i] - target[i]) * (params[i] - target[i]);
  }
  std::printf("%d steps: loss %.4f, largest difference from double-precision "
              "AdamW %.2e; tag step-20 in %s\n",
              steps, loss, worst, dir.c_str());
  return worst <= 1e-5 ? 0 : 1;
}

#include "store/placement/placement.h"

#include "absl/strings/str_cat.h"
#include "store/placement/stripe.h"

namespace mlpo {

Placement::Placement(size_t num_paths)
    : n_(num_paths),
      fractions_(NormaliseFractions(std::vector<double>(num_paths, 0))),
      degraded_(num_paths, false),
      last_(num_paths),
      estimates_(num_paths, 0.0) {}

std::vector<double> Placement::fractions() const {
  MutexLock l(&mu_);
  return fractions_;
}

void Placement::SetWeights(const std::vector<double>& weights) {
  MutexLock l(&mu_);
  fractions_ = NormaliseFractions(weights);
}

absl::Status Placement::SetObjectFractions(const std::string& object,
                                           std::vector<double> fractions) {
  if (!fractions.empty() && fractions.size() != n_)
    return absl::InvalidArgumentError(absl::StrCat(
        "fractions of ", object, ": ", fractions.size(), " given, the store has ",
        n_, " paths"));
  MutexLock l(&mu_);
  if (fractions.empty())
    object_fractions_.erase(object);
  else
    object_fractions_[object] = NormaliseFractions(fractions);
  return absl::OkStatus();
}

void Placement::ForObject(const std::string& object,
                          std::vector<double>* fractions,
                          std::vector<bool>* excluded) const {
  MutexLock l(&mu_);
  auto it = object_fractions_.find(object);
  *fractions = it != object_fractions_.end() ? it->second : fractions_;
  *excluded = degraded_;
}

std::vector<double> Placement::UpdateEstimates(
    const std::vector<PathSample>& now) {
  MutexLock l(&estimate_mu_);
  for (size_t i = 0; i < n_ && i < now.size(); ++i) {
    double bytes = static_cast<double>(now[i].bytes) -
                   static_cast<double>(last_[i].bytes);
    double busy = now[i].busy_s - last_[i].busy_s;
    if (busy > 0 && bytes > 0) {
      double rate = bytes / busy;
      estimates_[i] =
          estimates_[i] > 0 ? 0.5 * estimates_[i] + 0.5 * rate : rate;
    }
    last_[i] = now[i];
  }
  return estimates_;
}

std::vector<double> Placement::Adapt(const std::vector<double>& rates,
                                     const std::vector<uint64_t>& room,
                                     uint64_t demand) {
  for (double r : rates)
    if (!(r > 0)) return fractions();  // not measured yet: keep as is
  std::vector<double> f = WaterFill(rates, room, demand);
  MutexLock l(&mu_);
  fractions_ = f;
  return f;
}

Placement::Degraded Placement::Degrade(size_t path) {
  if (path >= n_) return Degraded::kRefused;
  MutexLock l(&mu_);
  size_t healthy = 0;
  for (size_t k = 0; k < n_; ++k) healthy += !degraded_[k] && k != path;
  if (healthy == 0) return Degraded::kRefused;  // nowhere else to go
  if (degraded_[path]) return Degraded::kAlready;
  degraded_[path] = true;
  return Degraded::kNow;
}

bool Placement::degraded(size_t path) const {
  MutexLock l(&mu_);
  return path < n_ && degraded_[path];
}

std::vector<bool> Placement::degraded_paths() const {
  MutexLock l(&mu_);
  return degraded_;
}

}  // namespace mlpo

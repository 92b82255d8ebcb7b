// `mlpo show STORE OBJECT`: one version of an object, its layout, extents
// and per-section statistics. In an int8-moments store the sections m and v
// hold codes and ms/vs their block scales; the statistics of the values
// they stand for are decoded with the block grid of the optimizer's
// manifest (blocks restart at each parameter, which only the manifest
// knows), as `mlpo export` decodes them. The optimizer's step counts
// (ParamStepsObject: u64 values in an f32 section) are shown as counts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "base/state_format.h"
#include "nlohmann/json.hpp"
#include "optimizer/checkpoint_reader.h"
#include "optimizer/state_layout.h"
#include "store/object_store.h"
#include "tools/cli_util.h"
#include "tools/store_cmd_util.h"

namespace mlpo {
namespace {

// An integer option of at least `lo`, said in those words (CLI11's own
// range checks print the largest double as the bound).
CLI::Validator AtLeast(int64_t lo) {
  return CLI::Validator(
      [lo](std::string& text) -> std::string {
        int64_t v;
        if (absl::SimpleAtoi(text, &v) && v >= lo) return "";
        return absl::StrCat("must be a whole number >= ", lo, ", not '", text,
                            "'");
      },
      absl::StrCat("INT>=", lo));
}

using json = nlohmann::json;

// min, max, mean, L2, NaN and Inf counts of a run of values.
struct ValueStats {
  double mn = INFINITY, mx = -INFINITY, sum = 0, sq = 0;
  uint64_t nan = 0, inf = 0, finite = 0;

  void Add(double v) {
    if (std::isnan(v)) { ++nan; return; }
    if (std::isinf(v)) { ++inf; return; }
    ++finite;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
    sum += v;
    sq += v * v;
  }
  json Json(const std::string& name, const std::string& dtype, uint64_t count,
            uint64_t offset) const {
    return {{"name", name},
            {"dtype", dtype},
            {"count", count},
            {"offset", offset},
            {"min", finite ? mn : 0.0},
            {"max", finite ? mx : 0.0},
            {"mean", finite ? sum / finite : 0.0},
            {"l2", std::sqrt(sq)},
            {"nan", nan},
            {"inf", inf}};
  }
};

json SectionStats(const CheckoutLease& l) {
  json out = json::array();
  for (const auto& sec : l.layout().sections()) {
    ValueStats st;
    const char* base = l.data() + sec.offset;
    for (uint64_t i = 0; i < sec.spec.count; ++i)
      st.Add(LoadAsFloat(base, sec.spec.dtype, i));
    out.push_back(st.Json(sec.spec.name, DTypeName(sec.spec.dtype),
                          sec.spec.count, sec.offset));
  }
  return out;
}

// Statistics of m and v as fp32 values, for an object of an int8-moments
// store that the optimizer's manifest names; `decoded` stays null and
// `why` says why when they cannot be decoded (no manifest: a store not
// written by the PyTorch adapter; an object that is no subgroup of it; a
// layout other than the manifest's).
void DecodedMomentStats(const StoreView& s, const std::string& obj,
                        CheckoutLease* l, json* decoded, std::string* why) {
  auto text = s.GetAttribute(kManifestAttribute);
  if (!text.ok()) {
    *why = "the store has no optimizer manifest, so its block grid is "
           "unknown";
    return;
  }
  json manifest;
  try {
    manifest = json::parse(*text);
  } catch (const std::exception& e) {
    *why = absl::StrCat("bad manifest: ", e.what());
    return;
  }
  auto layout = ManifestSubgroups(manifest);
  if (!layout.ok()) {
    *why = std::string(layout.status().message());
    return;
  }
  const Subgroup* sub = nullptr;
  for (const Subgroup& g : layout->subgroups)
    if (g.object == obj) sub = &g;
  if (sub == nullptr) {
    *why = "the object is not one of the optimizer's subgroups";
    return;
  }
  auto want = StateLayout(StateFormat::kInt8Moments, sub->numel,
                          sub->grid.blocks());
  if (!want.ok() || !(l->layout() == *want)) {
    *why = absl::StrCat("its layout ", l->layout().DebugString(),
                        " is not the manifest's for ", sub->numel,
                        " elements in ", sub->grid.blocks(), " blocks");
    return;
  }
  auto ref = StateIn(StateFormat::kInt8Moments, RuleSpec(), l, sub->grid);
  if (!ref.ok()) {
    *why = std::string(ref.status().message());
    return;
  }
  ValueStats m, v;
  constexpr uint64_t kChunk = uint64_t{1} << 20;  // bounds the memory used
  std::vector<float> mb(std::min(kChunk, sub->numel));
  std::vector<float> vb(mb.size());
  for (uint64_t from = 0; from < sub->numel; from += kChunk) {
    uint64_t n = std::min(kChunk, sub->numel - from);
    DecodeSlot(*ref, 0, from, n, mb.data());  // Adam's m
    DecodeSlot(*ref, 1, from, n, vb.data());  // and v
    for (uint64_t i = 0; i < n; ++i) {
      m.Add(mb[i]);
      v.Add(vb[i]);
    }
  }
  *decoded = json::array({m.Json("m", "f32", sub->numel, 0),
                          v.Json("v", "f32", sub->numel, 0)});
}

// The optimizer's per-parameter step counts (ParamStepsObject: K uint64
// counts kept in an f32 section "t" of 2K elements) as counts, or null for
// any other object.
json StepCountStats(const std::string& obj, const CheckoutLease& l) {
  const auto& secs = l.layout().sections();
  if (secs.size() != 1) return nullptr;
  uint64_t k = secs[0].spec.count / 2;
  if (obj != ParamStepsObject(k)) return nullptr;
  auto counts = ParamStepsIn(l, k);
  if (!counts.ok()) return nullptr;
  ValueStats st;
  for (uint64_t t : *counts) st.Add(static_cast<double>(t));
  return json::array({st.Json("t", "u64", k, secs[0].offset)});
}

void PrintStatsRows(const json& rows) {
  for (auto& x : rows)
    std::printf("%-8s %-5s %12lu %13.6g %13.6g %13.6g %13.6g %6lu %6lu\n",
                x["name"].get<std::string>().c_str(),
                x["dtype"].get<std::string>().c_str(),
                (unsigned long)x["count"].get<uint64_t>(),
                x["min"].get<double>(), x["max"].get<double>(),
                x["mean"].get<double>(), x["l2"].get<double>(),
                (unsigned long)x["nan"].get<uint64_t>(),
                (unsigned long)x["inf"].get<uint64_t>());
}

}  // namespace

void AddShowCommand(CLI::App& app) {
  auto a = std::make_shared<CommonArgs>();
  auto obj = std::make_shared<std::string>();
  auto ver = std::make_shared<int64_t>(0);
  auto step = std::make_shared<int64_t>(-1);  // -1: not given
  auto* c = AddStoreSub(app, "show",
                        "One object: layout, extents per path with "
                        "checksums, per-section statistics (min, max, mean, "
                        "L2, NaN, Inf); in an int8-moments store also of m "
                        "and v decoded to fp32, and the optimizer's step "
                        "counts as counts",
                        a.get());
  c->add_option("object", *obj, "Object name")->required();
  auto* vo = c->add_option("--version", *ver,
                           "Version to show: its sequence number, as `mlpo "
                           "ls --json` lists them (default: the head)")
                 ->check(AtLeast(1));
  c->add_option("--step", *step,
                "Show the newest kept version committed at this step "
                "(after a restore, two lineages can each hold one; 0: the "
                "initial state a tag before the first step stored)")
      ->check(AtLeast(0))
      ->excludes(vo);
  c->callback([a, obj, ver, step] {
    auto s = OpenTarget("show", a->store, /*read_only=*/true);
    uint64_t want = static_cast<uint64_t>(*ver);
    if (*step >= 0) {
      for (auto& i : s->List())
        if (i.name == *obj)
          for (size_t k = 0; k < i.versions.size(); ++k)
            if (i.steps[k] == static_cast<uint64_t>(*step))
              want = std::max(want, i.versions[k]);
      if (want == 0)
        Fail("show", absl::NotFoundError(absl::StrCat(
                         "object ", *obj, " has no kept version at step ",
                         *step)));
    }
    auto rec = s->GetVersion(*obj, want);
    if (!rec.ok()) Fail("show", rec.status());
    auto lease = s->ReadVersion(*obj, rec->version);
    // Beside a writer, the version read may have been replaced and its
    // space reused meanwhile: a fresh look decides whether it is damage.
    for (int look = 0; look < 3 && !lease.ok() && want == 0; ++look) {
      s = OpenTarget("show", a->store, /*read_only=*/true);
      auto again = s->GetVersion(*obj, 0);
      if (!again.ok() || again->version == rec->version) break;  // damage
      rec = again;
      lease = s->ReadVersion(*obj, rec->version);
    }
    if (!lease.ok()) Fail("show", lease.status());
    json ext = ExtentsJson(*s, rec->extents);
    json j = {{"object", *obj},
              {"version", rec->version},
              {"step", rec->step},
              {"bytes", rec->blob_bytes},
              {"state_format", StateFormatOf(*s)},
              {"sections", SectionStats(**lease)},
              {"extents", ext},
              {"replica", ExtentsJson(*s, rec->replica)},
              {"decoded", nullptr}};
    std::string why;
    j["decoded"] = StepCountStats(*obj, **lease);
    if (j["state_format"] == StateFormatName(StateFormat::kInt8Moments) &&
        (*lease)->layout().Find("ms") != nullptr) {
      DecodedMomentStats(*s, *obj, lease->get(), &j["decoded"], &why);
      if (!why.empty()) j["decode_note"] = why;
    }
    if (a->json) {
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::printf("object %s step %lu (version %lu, %s; store state format "
                "%s)\n",
                obj->c_str(), (unsigned long)rec->step,
                (unsigned long)rec->version,
                FormatBytes(rec->blob_bytes).c_str(),
                j["state_format"].get<std::string>().c_str());
    std::printf("%-8s %-5s %12s %13s %13s %13s %13s %6s %6s\n", "section",
                "dtype", "count", "min", "max", "mean", "l2", "nan", "inf");
    PrintStatsRows(j["sections"]);
    if (!j["decoded"].is_null()) {
      std::printf("%s\n", j["decoded"][0]["name"] == "t"
                              ? "t as the parameters' step counts (u64, "
                                "two f32 slots each):"
                              : "m and v as values (codes times their "
                                "block's scale):");
      PrintStatsRows(j["decoded"]);
    } else if (!why.empty()) {
      std::printf("(u8 sections m and v are codes, ms and vs their block "
                  "scales; not decoded: %s)\n", why.c_str());
    }
    for (const char* which : {"extents", "replica"}) {
      const json& list = j[which];
      if (list.empty()) continue;
      std::printf("%zu %s:\n", list.size(),
                  std::string(which) == "extents"
                      ? "extents"
                      : "replica extents (tag --copy-to)");
      for (auto& e : list)
        std::printf("  %s @%lu +%lu  blob@%lu  xxh3 %s\n",
                    e["file"].get<std::string>().c_str(),
                    (unsigned long)e["offset"].get<uint64_t>(),
                    (unsigned long)e["length"].get<uint64_t>(),
                    (unsigned long)e["blob_offset"].get<uint64_t>(),
                    e["xxh3"].get<std::string>().c_str());
    }
  });
}

}  // namespace mlpo

#include "store/store_options.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "store/size_units.h"
#include "store/status_macros.h"

namespace mlpo {
namespace fs = std::filesystem;

namespace {

absl::StatusOr<uint64_t> SizeValue(const toml::node& n, const std::string& key) {
  if (auto i = n.value<int64_t>()) {
    if (*i < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("config key '", key, "': negative size"));
    return static_cast<uint64_t>(*i);
  }
  if (auto s = n.value<std::string>()) {
    auto v = ParseSize(*s);
    if (v.ok()) return v;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("config key '", key, "': expected a size (e.g. 4096, \"1M\")"));
}

std::string Resolve(const std::string& base, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute() || base.empty()) return p;
  return (fs::path(base) / p).lexically_normal().string();
}

}  // namespace

std::string StoreNamespace(const StoreOptions& o) {
  return absl::StrCat(o.name, "/rank-", o.rank);
}

std::string DefaultMetaDir(const StoreOptions& o) {
  std::string root = o.paths.empty() ? "." : o.paths[0].path.root;
  for (auto& p : o.paths)
    if (p.path.kind == PathKind::kNvme) {
      root = p.path.root;
      break;
    }
  return absl::StrCat(root, "/", StoreNamespace(o), "/meta");
}

absl::Status ValidateStoreOptions(const StoreOptions& o) {
  MLPO_RETURN_IF_ERROR(ValidateName("store", o.name));
  if (o.rank < 0)
    return absl::InvalidArgumentError(absl::StrCat("rank ", o.rank, " < 0"));
  if (o.paths.empty())
    return absl::InvalidArgumentError("store options: no paths");
  if (o.extent_bytes < (64 << 10) || o.extent_bytes > (64 << 20) ||
      o.extent_bytes % kIoAlignment)
    return absl::InvalidArgumentError(absl::StrCat(
        "extent_bytes ", o.extent_bytes,
        " must be a multiple of 4096 in 64 KiB..64 MiB"));
  for (auto& p : o.paths) {
    if (p.fraction < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("path ", p.path.root, ": negative fraction"));
    if (p.path.segment_bytes < o.extent_bytes)
      return absl::InvalidArgumentError(absl::StrCat(
          "path ", p.path.root, ": segment_bytes smaller than extent_bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StoreOptions> ParseStoreOptions(const std::string& text,
                                               const std::string& base) {
  toml::table t;
  try {
    t = toml::parse(text);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config: ", std::string(e.description()), " at line ",
        static_cast<uint64_t>(e.source().begin.line)));
  }
  StoreOptions o;
  for (auto& [k, v] : t) {
    std::string key(k.str());
    if (key == "name") {
      if (!v.is_string())
        return absl::InvalidArgumentError("config key 'name': expected a string");
      o.name = *v.value<std::string>();
    } else if (key == "rank") {
      if (!v.is_integer())
        return absl::InvalidArgumentError("config key 'rank': expected an integer");
      o.rank = static_cast<int>(*v.value<int64_t>());
    } else if (key == "durability") {
      auto s = v.value<std::string>();
      if (s && *s == "step") o.durability = Durability::kStep;
      else if (s && *s == "tag") o.durability = Durability::kTag;
      else return absl::InvalidArgumentError(
          "config key 'durability': expected \"step\" or \"tag\"");
    } else if (key == "meta_dir") {
      if (!v.is_string())
        return absl::InvalidArgumentError("config key 'meta_dir': expected a string");
      o.meta_dir = Resolve(base, *v.value<std::string>());
    } else if (key == "extent_bytes") {
      MLPO_ASSIGN_OR_RETURN(o.extent_bytes, SizeValue(v, key));
    } else if (key == "buffer_pool_bytes") {
      MLPO_ASSIGN_OR_RETURN(o.buffer_pool_bytes, SizeValue(v, key));
    } else if (key == "path") {
      auto* arr = v.as_array();
      if (arr == nullptr)
        return absl::InvalidArgumentError(
            "config key 'path': expected [[path]] tables");
      int idx = 0;
      for (auto& el : *arr) {
        auto* pt = el.as_table();
        if (pt == nullptr)
          return absl::InvalidArgumentError("config key 'path': expected tables");
        StorePathConfig pc;
        for (auto& [pk, pv] : *pt) {
          std::string key2 = absl::StrCat("path[", idx, "].", std::string(pk.str()));
          std::string n(pk.str());
          if (n == "root") {
            if (!pv.is_string())
              return absl::InvalidArgumentError(
                  absl::StrCat("config key '", key2, "': expected a string"));
            pc.path.root = Resolve(base, *pv.value<std::string>());
          } else if (n == "kind" || n == "engine") {
            auto s = pv.value<std::string>();
            if (!s)
              return absl::InvalidArgumentError(
                  absl::StrCat("config key '", key2, "': expected a string"));
            if (n == "kind") {
              auto k2 = ParsePathKind(*s);
              if (!k2.ok()) return Annotate(k2.status(), "config key '" + key2 + "'");
              pc.path.kind = *k2;
            } else if (*s == "auto") pc.path.engine = IoEngineKind::kAuto;
            else if (*s == "uring") pc.path.engine = IoEngineKind::kUring;
            else if (*s == "threadpool") pc.path.engine = IoEngineKind::kThreadPool;
            else return absl::InvalidArgumentError(absl::StrCat(
                "config key '", key2, "': expected auto, uring or threadpool"));
          } else if (n == "fraction") {
            auto f = pv.value<double>();
            if (!f || *f < 0)
              return absl::InvalidArgumentError(absl::StrCat(
                  "config key '", key2, "': expected a number >= 0"));
            pc.fraction = *f;
          } else if (n == "read_cap") {
            MLPO_ASSIGN_OR_RETURN(pc.path.read_cap, SizeValue(pv, key2));
          } else if (n == "write_cap") {
            MLPO_ASSIGN_OR_RETURN(pc.path.write_cap, SizeValue(pv, key2));
          } else if (n == "capacity") {
            MLPO_ASSIGN_OR_RETURN(pc.path.capacity, SizeValue(pv, key2));
          } else if (n == "segment_bytes") {
            MLPO_ASSIGN_OR_RETURN(pc.path.segment_bytes, SizeValue(pv, key2));
          } else if (n == "slots" || n == "queue_depth") {
            auto i = pv.value<int64_t>();
            if (!i || *i < -1 || (n == "queue_depth" && (*i < 1 || *i > 4096)))
              return absl::InvalidArgumentError(absl::StrCat(
                  "config key '", key2, "': bad integer"));
            (n == "slots" ? pc.path.slots : pc.path.queue_depth) =
                static_cast<int>(*i);
          } else {
            return absl::InvalidArgumentError(
                absl::StrCat("unknown config key '", key2, "'"));
          }
        }
        if (pc.path.root.empty())
          return absl::InvalidArgumentError(
              absl::StrCat("config: path[", idx, "] has no root"));
        o.paths.push_back(pc);
        ++idx;
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown config key '", key, "'"));
    }
  }
  MLPO_RETURN_IF_ERROR(ValidateStoreOptions(o));
  return o;
}

absl::StatusOr<StoreOptions> LoadStoreOptions(const std::string& file) {
  std::ifstream in(file);
  if (!in)
    return absl::NotFoundError(absl::StrCat("cannot read config ", file));
  std::stringstream ss;
  ss << in.rdbuf();
  auto o = ParseStoreOptions(
      ss.str(), fs::absolute(file).parent_path().lexically_normal().string());
  if (!o.ok()) return Annotate(o.status(), file);
  return o;
}

std::string StoreDescriptorJson(const StoreOptions& o) {
  nlohmann::json j;
  j["name"] = o.name;
  j["rank"] = o.rank;
  j["durability"] = o.durability == Durability::kStep ? "step" : "tag";
  j["meta_dir"] = fs::absolute(o.meta_dir.empty() ? DefaultMetaDir(o)
                                                  : o.meta_dir)
                      .lexically_normal()
                      .string();
  j["extent_bytes"] = o.extent_bytes;
  for (auto& p : o.paths) {
    j["paths"].push_back(
        {{"root", fs::absolute(p.path.root).lexically_normal().string()},
         {"kind", PathKindName(p.path.kind)},
         {"fraction", p.fraction},
         {"read_cap", p.path.read_cap},
         {"write_cap", p.path.write_cap},
         {"slots", p.path.slots},
         {"capacity", p.path.capacity},
         {"segment_bytes", p.path.segment_bytes},
         {"queue_depth", p.path.queue_depth}});
  }
  return j.dump(2);
}

absl::StatusOr<StoreOptions> StoreOptionsFromDescriptor(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    StoreOptions o;
    o.name = j.at("name");
    o.rank = j.at("rank");
    o.durability = j.at("durability") == "tag" ? Durability::kTag
                                               : Durability::kStep;
    o.meta_dir = j.at("meta_dir");
    o.extent_bytes = j.at("extent_bytes");
    o.create_if_missing = false;
    for (auto& p : j.at("paths")) {
      StorePathConfig pc;
      pc.path.root = p.at("root");
      MLPO_ASSIGN_OR_RETURN(pc.path.kind,
                            ParsePathKind(p.at("kind").get<std::string>()));
      pc.fraction = p.at("fraction");
      pc.path.read_cap = p.at("read_cap");
      pc.path.write_cap = p.at("write_cap");
      pc.path.slots = p.at("slots");
      pc.path.capacity = p.at("capacity");
      pc.path.segment_bytes = p.at("segment_bytes");
      pc.path.queue_depth = p.at("queue_depth");
      o.paths.push_back(pc);
    }
    return o;
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("corrupt store descriptor: ", e.what()));
  }
}

absl::StatusOr<StoreOptions> StoreOptionsForTarget(const std::string& target) {
  std::error_code ec;
  if (fs::is_directory(target, ec)) {
    std::string f = target + "/STORE";
    std::ifstream in(f);
    if (!in)
      return absl::NotFoundError(absl::StrCat(
          target, " is not a store directory (no STORE file); pass the "
                  "store's TOML config or <path>/<store>/rank-<r>"));
    std::stringstream ss;
    ss << in.rdbuf();
    auto o = StoreOptionsFromDescriptor(ss.str());
    if (!o.ok()) return Annotate(o.status(), f);
    return o;
  }
  if (!fs::exists(target, ec))
    return absl::NotFoundError(absl::StrCat("no such store or config: ", target));
  auto o = LoadStoreOptions(target);
  if (o.ok()) o->create_if_missing = false;
  return o;
}

}  // namespace mlpo

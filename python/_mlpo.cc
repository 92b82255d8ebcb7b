// _mlpo: the pybind11 binding of the Optimizer facade and the checkpoint
// reader, for the PyTorch adapter (python/mlpo/torch.py). Tensors cross as
// raw pointers (tensor.data_ptr()) with their dtype and element count, so no
// copy is made here beyond the optimizer's own staging; every call that
// waits on I/O or runs the update releases the GIL.
//
// Errors: absl statuses become Python exceptions whose message names the
// problem (ValueError for InvalidArgument, FileNotFoundError for NotFound,
// RuntimeError otherwise), raised only once the GIL is held again.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "optimizer/optimizer.h"
#include "optimizer/optimizer_config.h"
#include "optimizer/param_sink.h"
#include "python/binding_util.h"
#include "store/admin/gc.h"
#include "store/checksum/checksum.h"
#include "store/store_options.h"

namespace py = pybind11;

namespace mlpo {
namespace {

DType DTypeArg(const std::string& s) { return Value(ParseDType(s)); }

// The Optimizer with the initial parameters it needs before its first step
// (copied in at construction: the model's own tensors may change before
// then).
class Engine {
 public:
  Engine(const std::string& toml, const std::string& base_dir,
         const std::string& name, int rank, const std::vector<py::dict>& groups,
         uint64_t subgroup_numel, const std::string& grad_dtype,
         const std::string& param_dtype, double max_grad_norm, int prefetch,
         int commits, int threads, const std::string& durability,
         const std::string& restore_tag, const std::string& device_backend,
         int device_index, const std::vector<py::list>& device_pieces,
         bool fresh, const std::string& state_format) {
    OptimizerOptions o;
    o.store = StoreArg(toml, base_dir, name, rank);
    if (!state_format.empty()) {
      absl::StatusOr<StateFormat> f = ParseStateFormat(state_format);
      if (!f.ok()) throw py::value_error(std::string(f.status().message()));
      o.state_format = *f;
    }
    if (durability == "tag") o.store.durability = Durability::kTag;
    else if (durability == "step") o.store.durability = Durability::kStep;
    else if (!durability.empty())
      throw py::value_error("durability must be 'step' or 'tag', not '" +
                            durability + "'");
    for (const py::dict& g : groups) {
      ParamGroup pg;
      pg.numel = g["numel"].cast<uint64_t>();
      pg.hyper = HyperArg(g);
      o.rule = RuleKindArg(g);  // one rule for every group
      if (g.contains("params"))
        pg.params = g["params"].cast<std::vector<uint64_t>>();
      o.groups.push_back(pg);
    }
    o.subgroup_numel = subgroup_numel;
    o.grad_dtype = DTypeArg(grad_dtype);
    o.param_dtype = DTypeArg(param_dtype);
    o.max_grad_norm = max_grad_norm;
    o.pipeline.prefetch_depth = prefetch;
    o.pipeline.max_commits_in_flight = commits;
    o.pipeline.threads = threads;
    o.restore_tag = restore_tag;
    o.fresh = fresh;
    if (!device_backend.empty()) OpenDevice(device_backend, device_index,
                                            device_pieces, &o);
    init_.resize(o.groups.size());
    for (size_t g = 0; g < o.groups.size(); ++g) init_[g].assign(o.groups[g].numel, 0.f);
    auto* init = &init_;
    o.init_params = [init](int g, uint64_t off, float* dst, uint64_t n) {
      // Dropped after the first step: zeros (the model's memory, adopted
      // by the step, then gives the masters).
      if ((*init)[g].size() < off + n)
        std::memset(dst, 0, n * sizeof(float));
      else
        std::memcpy(dst, (*init)[g].data() + off, n * sizeof(float));
    };
    absl::StatusOr<std::unique_ptr<Optimizer>> opened;
    {
      py::gil_scoped_release nogil;
      opened = Optimizer::Open(std::move(o));
    }
    opt_ = Value(std::move(opened));
    if (backend_) Check(opt_->RegisterDevice(backend_.get()));
  }

  // The device path: gradients staged from device memory, new parameters
  // copied to the model's tensors on the device by the step itself.
  // `pieces[g]`: (offset in the group, numel, data_ptr) of each tensor.
  void OpenDevice(const std::string& which, int index,
                  const std::vector<py::list>& pieces, OptimizerOptions* o) {
    BackendChoice choice = Value(ParseBackendChoice(which));
    backend_ = Value(SelectBackend(choice, index));
    if (pieces.size() != o->groups.size())
      throw py::value_error("device pieces: one list per parameter group");
    std::vector<std::vector<DevicePiece>> dest(pieces.size());
    uint64_t largest = 1;
    for (size_t g = 0; g < pieces.size(); ++g) {
      largest = std::max(largest, o->groups[g].numel);
      for (const py::handle& h : pieces[g]) {
        auto t = h.cast<std::tuple<uint64_t, uint64_t, uintptr_t>>();
        dest[g].push_back({std::get<0>(t), std::get<1>(t),
                           reinterpret_cast<void*>(std::get<2>(t))});
      }
    }
    sink_ = Value(DeviceParamSink::Create(
        backend_.get(), std::move(dest), o->param_dtype,
        std::min<uint64_t>(largest, o->subgroup_numel)));
    o->param_sink = sink_.get();
  }

  void StageGradDevice(int group, uint64_t offset, uintptr_t ptr,
                       const std::string& dtype, uint64_t count) {
    if (!backend_)
      throw py::value_error("stage_grad_device: the engine has no device");
    DType dt = DTypeArg(dtype);
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->StageGradFromDevice(backend_.get(), group, offset,
                                  reinterpret_cast<const void*>(ptr), dt,
                                  count);
    }
    Check(st);
  }
  std::string device_backend() const {
    return backend_ ? backend_->name() : "";
  }

  // Initial fp32 master parameters [offset, +count) of a group, from a
  // tensor's memory in `dtype`.
  void SetInitial(int group, uint64_t offset, uintptr_t ptr,
                  const std::string& dtype, uint64_t count) {
    if (group >= 0 && group < static_cast<int>(init_.size()) &&
        init_[group].empty())
      init_[group].assign(opt()->options().groups[group].numel, 0.f);
    if (group < 0 || group >= static_cast<int>(init_.size()) ||
        offset + count > init_[group].size())
      throw py::value_error("initial parameters outside their group");
    DType dt = DTypeArg(dtype);
    const void* src = reinterpret_cast<const void*>(ptr);
    float* dst = init_[group].data() + offset;
    for (uint64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(LoadAsFloat(src, dt, i));
  }
  void DropInitial() {
    for (auto& v : init_) std::vector<float>().swap(v);
  }

  void SetParamMemory(int param, uintptr_t ptr, const std::string& dtype) {
    Check(opt()->SetParamMemory(param, reinterpret_cast<void*>(ptr),
                                DTypeArg(dtype)));
  }
  void OverrideMasters(int group, uint64_t offset, uintptr_t ptr,
                       const std::string& dtype, uint64_t count) {
    Check(opt()->OverrideMasters(group, offset,
                                 reinterpret_cast<const void*>(ptr),
                                 DTypeArg(dtype), count));
  }
  void AdoptEdits(const std::vector<int>& params) {
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->AdoptEdits(params);
    }
    Check(st);
  }
  void Reset() {
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->Reset();
    }
    Check(st);
  }
  void ContinueHeads() { Check(opt()->ContinueHeads()); }
  bool fresh_pending() const { return opt()->fresh_pending(); }
  bool state_stored() const { return opt()->state_stored(); }
  std::vector<uint64_t> ParamSteps() const { return opt()->param_steps(); }
  // (p, {slot section: values}) of elements [offset, offset + count).
  py::tuple ReadRange(int group, uint64_t offset, uint64_t count) {
    Optimizer* o = opt();
    const std::vector<StateSlot> slots = o->rule().Slots();
    std::vector<float> p(count);
    std::vector<std::vector<float>> vals(slots.size(),
                                         std::vector<float>(count));
    float* ptrs[kMaxRuleSlots] = {};
    for (size_t k = 0; k < slots.size(); ++k) ptrs[k] = vals[k].data();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->ReadRange(group, offset, count, p.data(), ptrs);
    }
    Check(st);
    return py::make_tuple(FloatArray(std::move(p)), SlotDict(slots, &vals));
  }

  py::list Slots() const { return SlotList(opt()->rule()); }

  void StageGrad(int group, uint64_t offset, uintptr_t ptr,
                 const std::string& dtype, uint64_t count) {
    DType dt = DTypeArg(dtype);
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->StageGrad(group, offset, reinterpret_cast<const void*>(ptr), dt,
                        count);
    }
    Check(st);
  }

  void BorrowGrad(int group, uint64_t offset, uintptr_t ptr,
                  const std::string& dtype, uint64_t count) {
    Check(opt()->BorrowGrad(group, offset, reinterpret_cast<const void*>(ptr),
                            DTypeArg(dtype), count));
  }

  py::tuple LocalGradStats() {
    GradStats s = opt()->LocalGradStats();
    return py::make_tuple(s.sum_sq, s.nonfinite);
  }

  py::dict Step(double loss_scale, py::object sum_sq, py::object nonfinite) {
    GradStats g;
    const GradStats* global = nullptr;
    if (!sum_sq.is_none()) {
      g.sum_sq = sum_sq.cast<double>();
      g.nonfinite = nonfinite.cast<uint64_t>();
      global = &g;
    }
    Optimizer* o = opt();
    absl::StatusOr<StepReport> stepped;
    {
      py::gil_scoped_release nogil;
      stepped = o->Step(loss_scale, global);
    }
    return ReportDict(Value(std::move(stepped)));
  }

  // Update during backward (Optimizer::BeginStep): the step runs while
  // backward hands in each parameter's gradient (borrow_grad, grad_ready).
  void BeginStep(double loss_scale) {
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->BeginStep(loss_scale);
    }
    Check(st);
  }
  void GradReady(int param) { Check(opt()->GradReady(param)); }
  bool stepping_in_backward() { return opt()->stepping_in_backward(); }
  // `agree` (data parallel): called with this rank's (sum_sq, nonfinite)
  // once the running step stopped, returns every rank's.
  py::dict FinishStep(py::object agree) {
    Optimizer* o = opt();
    absl::StatusOr<StepReport> stepped;
    Optimizer::AgreeStats fn;
    std::string agree_error;
    if (!agree.is_none()) {
      fn = [&agree, &agree_error](const GradStats& local) {
        py::gil_scoped_acquire gil;
        try {
          py::tuple t = agree(local.sum_sq, local.nonfinite);
          GradStats g;
          g.sum_sq = t[0].cast<double>();
          g.nonfinite = t[1].cast<uint64_t>();
          return g;
        } catch (py::error_already_set& e) {
          agree_error = e.what();
          GradStats bad;
          bad.nonfinite = 1;  // (never committed: the step raises below)
          return bad;
        }
      };
    }
    {
      py::gil_scoped_release nogil;
      stepped = o->FinishStep(fn);
    }
    if (!agree_error.empty())
      throw std::runtime_error("the ranks could not agree on the step's "
                               "gradient statistics: " + agree_error);
    return ReportDict(Value(std::move(stepped)));
  }
  // The step running during backward dropped (Optimizer::DiscardStep):
  // redone by the next step() (`redo`), or rewound now.
  void DiscardStep(bool redo) {
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->DiscardStep(redo);
    }
    Check(st);
  }
  uint64_t redone_steps() { return opt()->redone_steps(); }

  py::dict ReportDict(const StepReport& r) {
    if (!r.skipped) DropInitial();  // the store holds every object now
    py::dict d;
    d["step"] = opt()->step();
    d["skipped"] = r.skipped;
    d["skip_reason"] = r.skip_reason;
    d["grad_norm"] = r.grad_norm;
    d["clip_coef"] = r.clip_coef;
    d["total_s"] = r.total_s;
    d["read_wait_s"] = r.read_wait_s;
    d["compute_s"] = r.compute_s;
    d["write_wait_s"] = r.write_wait_s;
    d["bytes_read"] = r.bytes_read;
    d["cache_hits"] = r.cache_hits;
    d["cache_hit_bytes"] = r.cache_hit_bytes;
    d["fractions"] = r.fractions;
    d["bytes_written"] = r.bytes_written;
    d["read_ahead_used"] = r.read_ahead_used;
    d["grad_wait_s"] = r.grad_wait_s;
    d["redone"] = r.redone;
    d["discarded_s"] = r.discarded_s;
    py::list paths;
    for (auto& p : r.paths) {
      py::dict pd;
      pd["root"] = p.root;
      pd["read"] = p.read;
      pd["written"] = p.written;
      paths.append(pd);
    }
    d["paths"] = paths;
    return d;
  }

  void SetHyper(int group, const py::dict& g) {
    Check(opt()->SetHyper(group, HyperArg(g)));
  }

  void CopyParams(int group, uint64_t offset, uintptr_t ptr, uint64_t count) {
    Check(opt()->CopyParams(group, offset, reinterpret_cast<void*>(ptr), count));
  }

  py::tuple ReadGroup(int group) {
    std::vector<float> p;
    std::vector<std::vector<float>> vals;
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->ReadState(group, &p, &vals);
    }
    Check(st);
    return py::make_tuple(FloatArray(std::move(p)),
                          SlotDict(o->rule().Slots(), &vals));
  }

  // `fill(group, group_offset, numel)` returns (p, {slot section: values})
  // of float32 arrays, every slot of the rule given.
  void ImportState(uint64_t t, py::function fill,
                   std::vector<uint64_t> param_steps) {
    const std::vector<StateSlot> slots = opt()->rule().Slots();
    Check(opt()->ImportState(
        t,
        [&](const Subgroup& s, float* p, float* const* dst) -> absl::Status {
          py::tuple r = fill(s.group, s.group_offset, s.numel);
          auto copy = [&](py::handle h, float* to,
                          const char* what) -> absl::Status {
            auto a = h.cast<py::array_t<float, py::array::c_style |
                                                   py::array::forcecast>>();
            if (static_cast<uint64_t>(a.size()) != s.numel)
              return absl::InvalidArgumentError(absl::StrCat(
                  "import: ", what, " has ", a.size(), " elements, not ",
                  s.numel));
            std::memcpy(to, a.data(), s.numel * sizeof(float));
            return absl::OkStatus();
          };
          MLPO_RETURN_IF_ERROR(copy(r[0], p, "the parameters"));
          py::dict d = r[1].cast<py::dict>();
          for (size_t k = 0; k < slots.size(); ++k) {
            if (!d.contains(slots[k].section))
              return absl::InvalidArgumentError(absl::StrCat(
                  "import: no values for ", slots[k].torch));
            MLPO_RETURN_IF_ERROR(
                copy(d[slots[k].section], dst[k], slots[k].torch));
          }
          return absl::OkStatus();
        },
        std::move(param_steps)));
    DropInitial();
  }

  void Tag(const std::string& name) {
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->Tag(name);
    }
    Check(st);
  }
  void Restore(const std::string& name) {
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->Restore(name);
    }
    Check(st);
  }
  void DropTag(const std::string& name) {
    Settle();
    Check(opt()->store()->DropTag(name));
  }
  uint64_t Gc() {
    Settle();
    return Value(::mlpo::Gc(*opt()->store()));
  }
  // Waits for a write-behind step's writes; their error, naming the step.
  void Settle() {
    Optimizer* o = opt();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = o->Settle();
    }
    Check(st);
  }
  std::vector<std::string> Tags() {
    std::vector<std::string> out;
    for (auto& [t, objs] : opt()->store()->Tags()) out.push_back(t);
    return out;
  }
  // Whether `name` records exactly the current heads (the state a new
  // state_dict() would tag): after a rollback a tag of the same step can
  // belong to another lineage.
  bool TagIsCurrent(const std::string& name) {
    ObjectStore* st = opt()->store();
    // Versions only the DRAM tier holds (durability "tag") become heads
    // first: a tag is taken of them, and they are what is current.
    {
      absl::Status wb;
      {
        py::gil_scoped_release nogil;
        wb = st->WriteBack();
      }
      Check(wb);
    }
    auto tags = st->Tags();
    auto t = tags.find(name);
    if (t == tags.end()) return false;
    std::map<std::string, uint64_t> heads;
    for (const ObjectInfo& i : st->List())
      if (i.has_head) heads[i.name] = i.head;
    return heads == t->second;
  }
  // The (object, version) pairs tag `name` holds, or None: versions are
  // never reused, so they tell a tag from a later one of the same name.
  py::object TagVersions(const std::string& name) {
    auto tags = opt()->store()->Tags();
    auto t = tags.find(name);
    if (t == tags.end()) return py::none();
    py::dict out;
    for (auto& [o, v] : t->second) out[py::str(o)] = v;
    return out;
  }
  // Tag names, oldest first (store/store_view.h).
  std::vector<std::string> TagOrder() {
    return TagsInWriteOrder(opt()->store()->Tags());
  }
  void SetAttribute(const std::string& k, const std::string& v) {
    Settle();
    Check(opt()->store()->SetAttribute(k, v));
  }
  py::object GetAttribute(const std::string& k) {
    auto v = opt()->store()->GetAttribute(k);
    if (!v.ok()) return py::none();
    return py::str(*v);
  }
  uint64_t step() const { return opt()->step(); }
  uint64_t skipped_steps() const { return opt()->skipped_steps(); }
  std::string store_uuid() const { return opt()->store()->store_uuid(); }
  std::string meta_dir() const { return opt()->store()->options().meta_dir; }
  std::vector<std::string> store_dirs() const {
    std::vector<std::string> out;
    for (size_t i = 0; i < opt()->store()->num_paths(); ++i)
      out.push_back(opt()->store()->path(i)->dir());
    return out;
  }
  // Writes what the DRAM tier holds dirty (durability "tag") and releases
  // the store. A write-back that fails (a full disk) still releases it and
  // raises: the steps since the last tag were not stored.
  void Close() {
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      if (opt_) st = opt_->Settle();
      if (opt_ && st.ok()) st = opt_->store()->WriteBack();
      opt_.reset();
    }
    if (!st.ok())
      Check(absl::Status(
          st.code(), absl::StrCat("closing the store: ", st.message(),
                                  "; the store holds its last tag and the "
                                  "steps written before this failure")));
  }
  Optimizer* opt() const {
    if (!opt_) throw std::runtime_error("the mlpo optimizer is closed");
    return opt_.get();
  }

 private:
  std::vector<std::vector<float>> init_;
  // Destroyed after opt_ (the optimizer uses both until it closes).
  std::unique_ptr<DeviceBackend> backend_;
  std::unique_ptr<DeviceParamSink> sink_;
  std::unique_ptr<Optimizer> opt_;
};

}  // namespace
}  // namespace mlpo

PYBIND11_MODULE(_mlpo, m) {
  mlpo::RegisterOptimizerConfigKeys();  // (the store configs' optimizer keys)
  // What Throw raises for an engine error (binding_util.h); kept alive by
  // the module's reference.
  mlpo::EngineErrorType() = PyErr_NewExceptionWithDoc(
      "_mlpo.EngineError",
      "An engine error (a RuntimeError): `code` is the absl status code's "
      "name, `reason` one of mlpo's reasons (store_held, layout_mismatch, "
      "state_format, step_interrupted) or None, `detail` what the reason "
      "names (the holding pid, the store's state format)",
      PyExc_RuntimeError, nullptr);
  m.attr("EngineError") =
      py::reinterpret_borrow<py::object>(mlpo::EngineErrorType());
  mlpo::DefineCodecBindings(m);
  using mlpo::Engine;
  m.doc() = "mlpo: optimizer state in a tiered object store (C++ engine)";
  m.def("read_store_attribute",
        [](const std::string& toml, const std::string& base_dir,
           const std::string& name, const std::string& key) -> py::object {
          mlpo::StoreOptions o = mlpo::StoreArg(toml, base_dir, name, 0);
          o.read_only = true;
          o.create_if_missing = false;
          absl::Status opened;
          absl::StatusOr<std::string> v;
          {
            py::gil_scoped_release nogil;
            auto store = mlpo::ObjectStore::Open(o);
            opened = store.status();
            if (store.ok()) v = (*store)->GetAttribute(key);  // or NotFound
          }
          mlpo::Check(opened);
          if (!v.ok()) return py::none();
          return py::str(*v);
        },
        "Attribute `key` of store `name` (rank 0), opened read-only (beside "
        "a live writer too); None when the store has no such attribute");
  m.def("checksum",
        [](uintptr_t data, uint64_t nbytes) {
          py::gil_scoped_release nogil;
          return mlpo::Checksum(reinterpret_cast<const void*>(data), nbytes);
        },
        "XXH3-64 of nbytes of host memory at address data (the adapter "
        "tells a gradient rewritten with the same values, as a clip by 1.0 "
        "does, from one changed)");
  m.def("check_store_config",
        [](const std::string& toml, const std::string& base_dir) {
          mlpo::StoreOptions o = mlpo::StoreArg(toml, base_dir, "", 0);
          mlpo::Value(mlpo::ParseOptimizerConfig(o.upper));
        },
        "ValueError naming the key unless the TOML config text parses into "
        "valid store and optimizer options (nothing is opened or created)");
  py::class_<Engine>(m, "Engine")
      .def(py::init<const std::string&, const std::string&, const std::string&,
                    int, const std::vector<py::dict>&, uint64_t,
                    const std::string&, const std::string&, double, int, int,
                    int, const std::string&, const std::string&,
                    const std::string&, int, const std::vector<py::list>&,
                    bool, const std::string&>())
      .def("set_initial", &Engine::SetInitial)
      .def("stage_grad", &Engine::StageGrad)
      .def("stage_grad_device", &Engine::StageGradDevice)
      .def("borrow_grad", &Engine::BorrowGrad)
      .def_property_readonly("device_backend", &Engine::device_backend)
      .def("local_grad_stats", &Engine::LocalGradStats)
      .def("step", &Engine::Step, py::arg("loss_scale") = 1.0,
           py::arg("sum_sq") = py::none(), py::arg("nonfinite") = py::none())
      .def("set_hyper", &Engine::SetHyper)
      .def("copy_params", &Engine::CopyParams)
      .def("read_group", &Engine::ReadGroup)
      .def("import_state", &Engine::ImportState, py::arg("t"), py::arg("fill"),
           py::arg("param_steps") = std::vector<uint64_t>())
      .def("set_param_memory", &Engine::SetParamMemory)
      .def("override_masters", &Engine::OverrideMasters)
      .def("adopt_edits", &Engine::AdoptEdits)
      .def("reset", &Engine::Reset)
      .def("continue_heads", &Engine::ContinueHeads)
      .def_property_readonly("fresh_pending", &Engine::fresh_pending)
      .def_property_readonly("state_stored", &Engine::state_stored)
      .def_property_readonly("param_steps", &Engine::ParamSteps)
      .def("read_range", &Engine::ReadRange)
      .def("tag", &Engine::Tag)
      .def("restore", &Engine::Restore)
      .def("drop_tag", &Engine::DropTag)
      .def("gc", &Engine::Gc)
      .def("tags", &Engine::Tags)
      .def("tag_is_current", &Engine::TagIsCurrent)
      .def("tag_order", &Engine::TagOrder)
      .def("tag_versions", &Engine::TagVersions)
      .def("set_attribute", &Engine::SetAttribute)
      .def("get_attribute", &Engine::GetAttribute)
      .def_property_readonly("step_count", &Engine::step)
      .def_property_readonly("slots", &Engine::Slots)
      .def_property_readonly("rule", [](Engine& e) {
        return e.opt()->rule().Name();
      })
      .def_property_readonly("state_format", [](Engine& e) {
        return std::string(StateFormatName(e.opt()->state_format()));
      })
      .def_property_readonly("skipped_steps", &Engine::skipped_steps)
      .def_property_readonly("store_uuid", &Engine::store_uuid)
      .def_property_readonly("meta_dir", &Engine::meta_dir)
      .def_property_readonly("store_dirs", &Engine::store_dirs)
      .def("settle", &Engine::Settle)
      .def("begin_step", &Engine::BeginStep, py::arg("loss_scale") = 1.0)
      .def("grad_ready", &Engine::GradReady)
      .def("finish_step", &Engine::FinishStep, py::arg("agree") = py::none())
      .def("discard_step", &Engine::DiscardStep, py::arg("redo"))
      .def_property_readonly("redone_steps", &Engine::redone_steps)
      .def_property_readonly("stepping_in_backward",
                             &Engine::stepping_in_backward)
      .def("close", &Engine::Close);
  mlpo::DefineReaderBindings(m);
  mlpo::DefineAioBindings(m);
}

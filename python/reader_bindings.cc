// The binding of the checkpoint reader (optimizer/checkpoint_reader.h):
// a tag's state read across every rank's store, for export_state_dict and
// resharding (python/mlpo/_export.py, _reshard.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "optimizer/checkpoint_reader.h"
#include "python/binding_util.h"

namespace mlpo {
namespace {

class Reader {
 public:
  // `target`: a store directory (STORE descriptor) or TOML config text
  // (with base_dir), plus name and rank for the latter.
  Reader(const std::string& toml, const std::string& base_dir,
         const std::string& name, const std::string& tag) {
    StoreOptions o = StoreArg(toml, base_dir, name, 0);
    absl::StatusOr<std::unique_ptr<CheckpointReader>> opened;
    {
      py::gil_scoped_release nogil;
      opened = CheckpointReader::Open(o, tag);
    }
    r_ = Value(std::move(opened));
  }
  std::string manifest() const { return r_->manifest().dump(); }
  std::string state_format() const {
    return StateFormatName(r_->state_format());
  }
  int world() const { return r_->world(); }
  uint64_t step() const { return r_->step(); }
  std::vector<std::string> store_uuids() const { return r_->store_uuids(); }
  py::dict TagVersions(int k) const {
    if (k < 0 || k >= r_->world()) throw py::index_error("no such rank");
    py::dict out;
    for (auto& [o, v] : r_->tag_versions(k)) out[py::str(o)] = v;
    return out;
  }
  py::object GetAttribute(int k, const std::string& key) const {
    if (k < 0 || k >= r_->world()) throw py::index_error("no such rank");
    auto v = r_->attribute(k, key);
    if (absl::IsNotFound(v.status())) return py::none();
    return py::str(Value(std::move(v)));
  }
  std::vector<uint64_t> ParamSteps() { return Value(r_->ParamSteps()); }
  // (p, {slot section: values}).
  py::tuple Read(int g, uint64_t start, uint64_t n) {
    const std::vector<StateSlot> slots = r_->rule().Slots();
    std::vector<float> p(n);
    std::vector<std::vector<float>> vals(slots.size(), std::vector<float>(n));
    float* ptrs[kMaxRuleSlots] = {};
    for (size_t k = 0; k < slots.size(); ++k) ptrs[k] = vals[k].data();
    absl::Status st;
    {
      py::gil_scoped_release nogil;
      st = r_->Read(g, start, n, p.data(), ptrs);
    }
    Check(st);
    return py::make_tuple(FloatArray(std::move(p)), SlotDict(slots, &vals));
  }
  py::list Slots() const { return SlotList(r_->rule()); }
  std::string rule() const { return r_->rule().Name(); }

 private:
  std::unique_ptr<CheckpointReader> r_;
};

}  // namespace

void DefineReaderBindings(py::module_& m) {
  py::class_<Reader>(m, "CheckpointReader")
      .def(py::init<const std::string&, const std::string&, const std::string&,
                    const std::string&>())
      .def("manifest", &Reader::manifest)
      .def_property_readonly("world", &Reader::world)
      .def_property_readonly("step", &Reader::step)
      .def_property_readonly("state_format", &Reader::state_format)
      .def_property_readonly("store_uuids", &Reader::store_uuids)
      .def("param_steps", &Reader::ParamSteps)
      .def("tag_versions", &Reader::TagVersions)
      .def("get_attribute", &Reader::GetAttribute)
      .def("read", &Reader::Read)
      .def_property_readonly("slots", &Reader::Slots)
      .def_property_readonly("rule", &Reader::rule);
}

}  // namespace mlpo

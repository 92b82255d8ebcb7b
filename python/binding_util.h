// What the _mlpo binding's files share: absl statuses as Python
// exceptions, and the hyperparameters of a group from a Python dict.
#ifndef MLPO_PYTHON_BINDING_UTIL_H_
#define MLPO_PYTHON_BINDING_UTIL_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/status_reason.h"
#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/update_rule.h"
#include "store/store_options.h"

namespace mlpo {

namespace py = pybind11;

// _mlpo.EngineError, a RuntimeError (made at module init).
inline PyObject*& EngineErrorType() {
  static PyObject* type = nullptr;
  return type;
}

// ValueError for InvalidArgument and OutOfRange, FileNotFoundError for
// NotFound, _mlpo.EngineError (a RuntimeError) otherwise; the message names
// the problem. An EngineError carries `code` (the status code's name) and
// `reason`/`detail` (status_reason.h; None and "" without one): what the
// adapter acts on, instead of the message's words. Called with the GIL.
[[noreturn]] inline void Throw(const absl::Status& s) {
  std::string msg(s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      throw py::value_error(msg);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, msg.c_str());
      throw py::error_already_set();
    default: {
      const std::string code = absl::StatusCodeToString(s.code());
      PyObject* type = EngineErrorType();
      if (type == nullptr) throw std::runtime_error(code + ": " + msg);
      py::object err = py::reinterpret_borrow<py::object>(type)(
          py::str(code + ": " + msg));
      err.attr("code") = py::str(code);
      auto reason = ReasonOf(s);
      err.attr("reason") =
          reason ? py::object(py::str(reason->first)) : py::object(py::none());
      err.attr("detail") = py::str(reason ? reason->second : std::string());
      PyErr_SetObject(type, err.ptr());
      throw py::error_already_set();
    }
  }
}
inline void Check(const absl::Status& s) {
  if (!s.ok()) Throw(s);
}
template <typename T>
T Value(absl::StatusOr<T> v) {
  if (!v.ok()) Throw(v.status());
  return std::move(*v);
}

// {"lr", "weight_decay", "mode": "adamw", or a rule's name (RuleKindName:
//  "adam", "lion", "adagrad", "sgd", "adamax"),
//  and the rule's own: "beta1", "beta2", "eps", "maximize", "amsgrad",
//  "momentum", "dampening", "nesterov", "lr_decay",
//  "initial_accumulator_value" (each optional but lr and mode)}.
inline RuleKind RuleKindArg(const py::dict& g) {
  std::string mode = g["mode"].cast<std::string>();
  if (mode == "adamw") return RuleKind::kAdam;
  absl::StatusOr<RuleKind> k = ParseRuleKind(mode);
  if (!k.ok())
    throw py::value_error("mode: " + std::string(k.status().message()) +
                          " (or 'adamw')");
  return *k;
}
inline RuleHyper HyperArg(const py::dict& g) {
  RuleHyper h;
  RuleKindArg(g);  // checks the mode
  h.mode = g["mode"].cast<std::string>() == "adam" ? AdamMode::kAdam
                                                   : AdamMode::kAdamW;
  h.lr = g["lr"].cast<double>();
  auto num = [&](const char* key, double* dst) {
    if (g.contains(key)) *dst = g[key].cast<double>();
  };
  auto flag = [&](const char* key, bool* dst) {
    if (g.contains(key)) *dst = g[key].cast<bool>();
  };
  num("beta1", &h.beta1);
  num("beta2", &h.beta2);
  num("eps", &h.eps);
  num("weight_decay", &h.weight_decay);
  num("momentum", &h.momentum);
  num("dampening", &h.dampening);
  num("lr_decay", &h.lr_decay);
  num("initial_accumulator_value", &h.initial_accumulator_value);
  flag("maximize", &h.maximize);
  flag("amsgrad", &h.amsgrad);
  flag("nesterov", &h.nesterov);
  return h;
}


// A store's options from TOML text (its paths relative to base_dir), with
// the name and rank the adapter gives.
inline StoreOptions StoreArg(const std::string& toml, const std::string& base_dir,
                      const std::string& name, int rank) {
  StoreOptions o = Value(ParseStoreOptions(toml, base_dir));
  if (!name.empty()) o.name = name;
  o.rank = rank;
  Check(ValidateStoreOptions(o));
  return o;
}

inline py::array_t<float> FloatArray(std::vector<float>&& v) {
  auto* heap = new std::vector<float>(std::move(v));
  py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return py::array_t<float>({heap->size()}, {sizeof(float)}, heap->data(), owner);
}

// [(section, torch.optim state name, never negative)] of a rule.
inline py::list SlotList(const RuleSpec& rule) {
  py::list out;
  for (const StateSlot& s : rule.Slots())
    out.append(py::make_tuple(s.section, s.torch, s.nonneg));
  return out;
}

// {section: values} of a rule's slots.
inline py::dict SlotDict(const std::vector<StateSlot>& slots,
                  std::vector<std::vector<float>>* vals) {
  py::dict d;
  for (size_t k = 0; k < slots.size(); ++k)
    d[slots[k].section] = FloatArray(std::move((*vals)[k]));
  return d;
}

// codec_encode, codec_decode, kernel_step (python/codec_bindings.cc).
void DefineCodecBindings(py::module_& m);
// CheckpointReader (python/reader_bindings.cc).
void DefineReaderBindings(py::module_& m);
// python/aio_bindings.cc
void DefineAioBindings(py::module_& m);

}  // namespace mlpo

#endif  // MLPO_PYTHON_BINDING_UTIL_H_

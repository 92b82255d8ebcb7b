// What the _mlpo binding's files share: absl statuses as Python
// exceptions, and the hyperparameters of a group from a Python dict.
#ifndef MLPO_PYTHON_BINDING_UTIL_H_
#define MLPO_PYTHON_BINDING_UTIL_H_

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "optimizer/adam_kernel.h"

namespace mlpo {

namespace py = pybind11;

// ValueError for InvalidArgument and OutOfRange, FileNotFoundError for
// NotFound, RuntimeError otherwise; the message names the problem.
[[noreturn]] inline void Throw(const absl::Status& s) {
  std::string msg(s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      throw py::value_error(msg);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, msg.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(absl::StatusCodeToString(s.code()) + ": " + msg);
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

// {"lr", "weight_decay", "mode": "adamw"|"adam"|"lion"|"adagrad"|"sgd",
//  and the rule's own: "beta1", "beta2", "eps", "maximize", "amsgrad",
//  "momentum", "dampening", "nesterov", "lr_decay",
//  "initial_accumulator_value" (each optional but lr and mode)}.
inline RuleKind RuleKindArg(const py::dict& g) {
  std::string mode = g["mode"].cast<std::string>();
  if (mode == "adamw" || mode == "adam") return RuleKind::kAdam;
  if (mode == "lion") return RuleKind::kLion;
  if (mode == "adagrad") return RuleKind::kAdagrad;
  if (mode == "sgd") return RuleKind::kSgd;
  throw py::value_error("mode must be 'adamw', 'adam', 'lion', 'adagrad' or "
                        "'sgd', not '" + mode + "'");
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


// codec_encode, codec_decode, kernel_step (python/codec_bindings.cc).
void DefineCodecBindings(py::module_& m);

}  // namespace mlpo

#endif  // MLPO_PYTHON_BINDING_UTIL_H_

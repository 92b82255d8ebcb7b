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

// {"lr", "beta1", "beta2", "eps", "weight_decay", "mode": "adamw"|"adam",
//  "maximize": bool (optional)}.
inline AdamHyper HyperArg(const py::dict& g) {
  AdamHyper h;
  h.lr = g["lr"].cast<double>();
  h.beta1 = g["beta1"].cast<double>();
  h.beta2 = g["beta2"].cast<double>();
  h.eps = g["eps"].cast<double>();
  h.weight_decay = g["weight_decay"].cast<double>();
  std::string mode = g["mode"].cast<std::string>();
  if (mode == "adamw") h.mode = AdamMode::kAdamW;
  else if (mode == "adam") h.mode = AdamMode::kAdam;
  else throw py::value_error("mode must be 'adamw' or 'adam'");
  if (g.contains("maximize")) h.maximize = g["maximize"].cast<bool>();
  return h;
}


// codec_encode, codec_decode, kernel_step (python/codec_bindings.cc).
void DefineCodecBindings(py::module_& m);

}  // namespace mlpo

#endif  // MLPO_PYTHON_BINDING_UTIL_H_

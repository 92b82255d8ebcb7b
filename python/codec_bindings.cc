// The C++ codecs and the fused kernel on numpy arrays: test bindings of
// _mlpo, for python/tests/test_codecs.py to hold against the independent
// reference in mlpo/codecs.py. Not part of the adapter's API.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/isa.h"
#include "optimizer/kernel/state_codec.h"
#include "python/binding_util.h"

namespace mlpo {
namespace {

// `pieces`: where parameters start (QuantGrid).
using F32Array = py::array_t<float, py::array::c_style>;
using U8Array = py::array_t<uint8_t, py::array::c_style>;
using U16Array = py::array_t<uint16_t, py::array::c_style>;

// Adam's moments as slots 0 (m) and 1 (v, int8 codes its square root).
StateRef CodecRef(StateFormat f, py::array& m, py::array& v, F32Array& ms,
                  F32Array& vs, const QuantGrid& grid) {
  StateRef r;
  r.format = f;
  r.grid = &grid;
  r.slots = 2;
  r.slot[0] = m.mutable_data();
  r.slot[1] = v.mutable_data();
  r.scale[0] = ms.mutable_data();
  r.scale[1] = vs.mutable_data();
  r.nonneg[1] = true;
  return r;
}

py::tuple CodecEncode(const std::string& format, F32Array m, F32Array v,
                      const std::vector<uint64_t>& pieces) {
  StateFormat f = Value(ParseStateFormat(format));
  size_t n = m.size();
  if (static_cast<size_t>(v.size()) != n)
    throw py::value_error("m and v differ in length");
  QuantGrid grid(pieces, n);
  py::array mc, vc;
  if (f == StateFormat::kF32) mc = F32Array(n), vc = F32Array(n);
  else if (f == StateFormat::kBF16Moments) mc = U16Array(n), vc = U16Array(n);
  else mc = U8Array(n), vc = U8Array(n);
  F32Array ms(grid.blocks()), vs(grid.blocks());
  StateRef r = CodecRef(f, mc, vc, ms, vs, grid);
  EncodeSlot(r, 0, n, m.data());
  EncodeSlot(r, 1, n, v.data());
  return py::make_tuple(mc, vc, ms, vs);
}

py::tuple CodecDecode(const std::string& format, py::array mc, py::array vc,
                      F32Array ms, F32Array vs,
                      const std::vector<uint64_t>& pieces) {
  StateFormat f = Value(ParseStateFormat(format));
  size_t n = mc.size();
  QuantGrid grid(pieces, n);
  if (f == StateFormat::kInt8Moments &&
      (static_cast<uint64_t>(ms.size()) != grid.blocks() ||
       static_cast<uint64_t>(vs.size()) != grid.blocks()))
    throw py::value_error("scales: one per block");
  F32Array m(n), v(n);
  StateRef r = CodecRef(f, mc, vc, ms, vs, grid);
  DecodeSlot(r, 0, 0, n, m.mutable_data());
  DecodeSlot(r, 1, 0, n, v.mutable_data());
  return py::make_tuple(m, v);
}

// One fused update of a whole array (one parameter: blocks from element 0)
// with the given ISA; p, m, v, ms, vs change in place.
void KernelStep(const std::string& format, const std::string& isa,
                F32Array p, py::array m, py::array v, F32Array ms, F32Array vs,
                F32Array g, const py::dict& hyper, uint64_t t,
                double grad_scale) {
  StateFormat f = Value(ParseStateFormat(format));
  KernelIsa k = isa == "avx512" ? KernelIsa::kAvx512
                : isa == "avx2" ? KernelIsa::kAvx2
                                : KernelIsa::kScalar;
  if (!KernelIsaSupported(k)) throw py::value_error(isa + " not supported");
  AdamSlice s{p.mutable_data(), m.mutable_data(), v.mutable_data(), g.data(),
              DType::kF32, nullptr, DType::kBF16,
              static_cast<size_t>(p.size())};
  s.format = f;
  s.ms = ms.mutable_data();
  s.vs = vs.mutable_data();
  AdamUpdate(s, MakeStepConsts(HyperArg(hyper), t, grad_scale), k);
}

}  // namespace

void DefineCodecBindings(py::module_& m) {
  m.def("codec_encode", &CodecEncode);
  m.def("codec_decode", &CodecDecode);
  m.def("kernel_step", &KernelStep);
}

}  // namespace mlpo

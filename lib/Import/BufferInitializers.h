//===- BufferInitializers.h - initializers that are buffers, not weights -*- C++ -*-===//
//
// ONNX stores trained weights and an exporter's buffers (rotary cos/sin tables,
// inv_freq) alike, as initializers. The importer trains every float
// initializer of more than one element unless told otherwise; this analysis
// finds the ones that are buffers by how the graph uses them, so that an
// export with folded rotary tables does not silently train them.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_IMPORT_BUFFERINITIALIZERS_H
#define PIPEMESH_LIB_IMPORT_BUFFERINITIALIZERS_H

#include <functional>
#include <map>
#include <string>

namespace onnx {
class GraphProto;
class TensorProto;
} // namespace onnx

namespace pipemesh::onnximport {

/// Graph inputs the importer replaces by constants: position_ids and HF's
/// cache_position (every row 0..T-1, since a training window starts at
/// position 0), and with `attentionMaskOnes` attention_mask (all ones: a
/// training window has no padding).
bool isConstantGraphInput(const std::string &name, bool attentionMaskOnes);

struct BufferUse {
  /// Why the initializer is taken for a buffer, naming the node that shows it.
  std::string why;
  /// True when training it is impossible: it reaches a Cos or Sin (which
  /// exist for constants only) and meets no activation, or no gradient reaches
  /// it, or the exporter declares it a buffer. No warning is due then. False
  /// for the Mul-only heuristic.
  bool forced = false;
};

/// The float initializers of more than one element that `graph` uses as
/// buffers, by name: every one the exporter declares a buffer or a constant
/// tensor (PyTorch 2's metadata pkg.torch.export.graph_signature.InputSpec.kind
/// on the initializer or its value_info), and, by the rules below, others (a declared parameter by the first
/// two only, and by the first with a warning):
///  - every initializer that a Cos or Sin computes from through constants
///    only (inv_freq times positions, or a stored angle table);
///  - every initializer from which no gradient can reach a graph output (it is
///    only compared, used as a condition, an index or a shape);
///  - every initializer of rank >= 2 whose values reach the activations only
///    as a factor of a Mul, through reshaping, slicing, gathering, casting,
///    concatenating and constant scaling (a precomputed rotary cos or sin
///    table; a trained weight meets a MatMul, a Gemm, an Add, a
///    normalization, or is a vector);
///  - every initializer of rank >= 2 whose values reach the activations only
///    that way or as a term of an Add, and that `valuesOf` says holds an
///    additive mask's values (0 and -inf);
///  - every initializer of rank >= 2 that `valuesOf` says holds 0s and 1s and
///    whose values reach the activations only that way or, shifted by a
///    constant (1 - b) and scaled, as a term of an Add or Sub (GPT-1's causal
///    table in `w * b - 1e4 * (1 - b)`).
/// `valuesOf` is called only for tables that the uses already qualify.
enum class TableValues { Other, AdditiveMask, ZeroOne };
std::map<std::string, BufferUse>
findBufferInitializers(const onnx::GraphProto &graph,
                       const std::function<TableValues(const onnx::TensorProto &)> &valuesOf,
                       bool attentionMaskOnes);

} // namespace pipemesh::onnximport

#endif // PIPEMESH_LIB_IMPORT_BUFFERINITIALIZERS_H

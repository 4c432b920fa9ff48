//===- BufferInitializers.cpp - initializers that are buffers, not weights ===//
//
// Five uses mark a buffer. A Cos or Sin has no pmesh op: the importer folds
// it, so its input must be computable from constants, and every initializer it
// is computed from is a buffer (this only turns a failing import into a working
// one). A table only added to activations whose values are a mask's is no
// weight either (it would start at -inf). What no gradient can reach (a float mask compared with 0) is not
// trained by PyTorch either: AdamW skips a parameter without a gradient, while
// ours would decay it. A rotary table that an exporter folded ahead of the Cos and Sin is
// only ever multiplied into q and k; a trained weight of rank 2 or more always
// meets a MatMul, a Gemm, an Add or a normalization. A table of 0s and 1s that
// multiplies the scores and, as 1 - b scaled by -1e4, is added to them is
// GPT-1's causal table; a weight does not start as such a pattern. Those last
// two rules are heuristics, so the importer says when it applies them.
//
// None of that is needed where the exporter says what each initializer is:
// PyTorch 2's (torch.onnx.export(dynamo=True)) declares every one a
// PARAMETER, a BUFFER or a CONSTANT_TENSOR. A declared buffer is a constant
// (GPT-1's causal table `attn.bias` is multiplied into the scores and would
// otherwise be trained), and a declared parameter is never taken for a
// buffer by the heuristic.
//
//===----------------------------------------------------------------------===//

#include "BufferInitializers.h"

#include "ConstTensor.h"
#include "ONNXModelLoader.h"

#include <google/protobuf/unknown_field_set.h>
#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace pipemesh::onnximport {
namespace {

bool isDefaultDomain(const onnx::NodeProto &node) {
  return node.domain().empty() || node.domain() == "ai.onnx";
}

std::string nodeName(const onnx::GraphProto &g, int index) {
  const onnx::NodeProto &node = g.node(index);
  return "'" + nodeLabel(node, index) + "' (" + node.op_type() + ")";
}

/// The graph's tensors whose values do not depend on the values of graph
/// inputs: initializers, Constant outputs, shapes (static once the dims are
/// bound), and whatever is computed from those alone.
std::set<std::string> constantTensors(const onnx::GraphProto &g, bool attentionMaskOnes) {
  std::set<std::string> constant;
  for (const onnx::TensorProto &t : g.initializer())
    constant.insert(t.name());
  for (const onnx::ValueInfoProto &in : g.input()) {
    if (isConstantGraphInput(in.name(), attentionMaskOnes))
      constant.insert(in.name());
    else
      constant.erase(in.name()); // an initializer listed as an input may be fed
  }
  for (const onnx::NodeProto &node : g.node()) {
    bool isConstant = false;
    if (isDefaultDomain(node)) {
      const std::string &op = node.op_type();
      if (op == "Constant" || op == "Shape" || op == "Size") {
        isConstant = true;
      } else if (op != "If" && op != "Loop" && op != "Scan") {
        int inputs = 0;
        isConstant = true;
        for (const std::string &in : node.input()) {
          if (in.empty())
            continue;
          ++inputs;
          isConstant &= constant.count(in) > 0;
        }
        isConstant &= inputs > 0; // a generator (RandomNormal) is not constant
      }
    }
    if (isConstant)
      for (const std::string &out : node.output())
        constant.insert(out);
  }
  return constant;
}

/// The metadata key under which PyTorch 2's exporter declares an initializer
/// a PARAMETER, BUFFER or CONSTANT_TENSOR.
constexpr const char *kTorchInputKind = "pkg.torch.export.graph_signature.InputSpec.kind";

/// The value of `key` in `message`'s metadata_props (field `number`: 4 of
/// ValueInfoProto, 16 of TensorProto since ONNX IR 10). The ONNX this builds
/// with may predate the field; protobuf then keeps it among the unknown fields.
std::optional<std::string> metadataValue(const google::protobuf::Message &message, int number,
                                         const std::string &key) {
  const google::protobuf::Reflection *reflection = message.GetReflection();
  if (const google::protobuf::FieldDescriptor *field =
          message.GetDescriptor()->FindFieldByNumber(number);
      field && field->name() == "metadata_props" && field->is_repeated() &&
      field->message_type() == onnx::StringStringEntryProto::descriptor()) {
    for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
      const auto &entry = static_cast<const onnx::StringStringEntryProto &>(
          reflection->GetRepeatedMessage(message, field, i));
      if (entry.key() == key)
        return entry.value();
    }
    return std::nullopt;
  }
  const google::protobuf::UnknownFieldSet &unknown = reflection->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField &f = unknown.field(i);
    if (f.number() != number || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(f.length_delimited()) && entry.key() == key)
      return entry.value();
  }
  return std::nullopt;
}

/// What the exporter declares each initializer to be, by name ("PARAMETER",
/// "BUFFER", "CONSTANT_TENSOR"); empty for exporters that do not say.
std::map<std::string, std::string> declaredInitializerKinds(const onnx::GraphProto &g) {
  std::map<std::string, std::string> kinds;
  for (const onnx::TensorProto &t : g.initializer())
    if (auto kind = metadataValue(t, 16, kTorchInputKind))
      kinds[t.name()] = *kind;
  for (const onnx::ValueInfoProto &v : g.value_info())
    if (auto kind = metadataValue(v, 4, kTorchInputKind))
      kinds[v.name()] = *kind;
  return kinds;
}

bool isTrainableCandidate(const onnx::TensorProto &t) {
  if (!isFloatType((DType)t.data_type()))
    return false;
  // More than one element, without multiplying dims a malformed file makes huge.
  bool empty = false, anyAboveOne = false;
  for (int64_t d : t.dims()) {
    empty |= d <= 0;
    anyAboveOne |= d > 1;
  }
  return !empty && anyAboveOne;
}

/// Ops through which a table stays a table (on the input index given, -1: any).
int passThroughInput(const std::string &op) {
  static const std::map<std::string, int> ops = {
      {"Identity", 0}, {"Cast", 0},  {"CastLike", 0}, {"Reshape", 0},   {"Unsqueeze", 0},
      {"Squeeze", 0},  {"Slice", 0}, {"Gather", 0},   {"Expand", 0},    {"Transpose", 0},
      {"Split", 0},    {"Tile", 0},  {"Flatten", 0},  {"Concat", -1},   {"GatherND", 0},
      {"SplitToSequence", 0}, {"SequenceAt", 0},
  };
  auto it = ops.find(op);
  return it == ops.end() ? -2 : it->second;
}

/// Whether a gradient can flow from the output of `node` into its input
/// `input`: not into what only shapes, selects, indexes or is compared.
bool carriesGradient(const onnx::NodeProto &node, int input) {
  if (!isDefaultDomain(node))
    return true; // unknown: assume it does
  static const std::set<std::string> none = {
      "Shape", "Size",   "Equal",     "Less",   "Greater", "LessOrEqual", "GreaterOrEqual",
      "Not",   "And",    "Or",        "Xor",    "ArgMax",  "ArgMin",      "Range",
      "ConstantOfShape", "NonZero",   "IsNaN",  "IsInf",   "Sign",        "Floor",
      "Ceil",  "Round"};
  const std::string &op = node.op_type();
  if (none.count(op))
    return false;
  if (op == "Cast") {
    for (const onnx::AttributeProto &a : node.attribute())
      if (a.name() == "to")
        return isFloatType((DType)a.i());
    return true;
  }
  // Ops whose later inputs are indices, shapes, axes, ratios or labels.
  static const std::map<std::string, int> dataInputs = {
      {"Where", -1},  {"Gather", 1},  {"GatherND", 1}, {"Slice", 1},   {"Reshape", 1},
      {"Expand", 1},  {"Unsqueeze", 1}, {"Squeeze", 1}, {"Tile", 1},
      {"Split", 1},   {"SplitToSequence", 1}, {"SequenceAt", 1}, {"CumSum", 1},
      {"Trilu", 1},   {"Dropout", 1}, {"SoftmaxCrossEntropyLoss", 1},
      {"NegativeLogLikelihoodLoss", 1}, {"ReduceMean", 1}, {"ReduceSum", 1}};
  auto it = dataInputs.find(op);
  if (it == dataInputs.end())
    return true;
  if (it->second == -1) // Where: the condition carries none
    return input != 0;
  return input < it->second;
}

} // namespace

bool isConstantGraphInput(const std::string &name, bool attentionMaskOnes) {
  return name == "position_ids" || name == "cache_position" ||
         (attentionMaskOnes && name == "attention_mask");
}

std::map<std::string, BufferUse>
findBufferInitializers(const onnx::GraphProto &g,
                       const std::function<TableValues(const onnx::TensorProto &)> &valuesOf,
                       bool attentionMaskOnes) {
  std::map<std::string, BufferUse> buffers;
  std::set<std::string> constant = constantTensors(g, attentionMaskOnes);
  std::map<std::string, const onnx::TensorProto *> candidates;
  for (const onnx::TensorProto &t : g.initializer())
    if (isTrainableCandidate(t) && constant.count(t.name()))
      candidates[t.name()] = &t;
  // What the exporter declares: a buffer is a constant, as in PyTorch.
  std::map<std::string, std::string> declared = declaredInitializerKinds(g);
  auto declaredParameter = [&](const std::string &name) {
    auto it = declared.find(name);
    return it != declared.end() && it->second == "PARAMETER";
  };
  for (const auto &[name, init] : candidates) {
    auto it = declared.find(name);
    if (it != declared.end() && (it->second == "BUFFER" || it->second == "CONSTANT_TENSOR"))
      buffers.emplace(name, BufferUse{"the exporter declares it a " + it->second + " (" +
                                          kTorchInputKind + ")",
                                      /*forced=*/true});
  }
  std::map<std::string, int> producer;
  std::map<std::string, std::vector<std::pair<int, int>>> consumers;
  for (int k = 0; k < g.node_size(); ++k) {
    for (const std::string &out : g.node(k).output())
      producer[out] = k;
    for (int i = 0; i < g.node(k).input_size(); ++i)
      if (!g.node(k).input(i).empty())
        consumers[g.node(k).input(i)].push_back({k, i});
  }

  // Rule 1: whatever a Cos or Sin of a constant is computed from.
  for (int k = 0; k < g.node_size(); ++k) {
    const onnx::NodeProto &node = g.node(k);
    if (!isDefaultDomain(node) || (node.op_type() != "Cos" && node.op_type() != "Sin") ||
        node.input_size() < 1 || !constant.count(node.input(0)))
      continue;
    std::vector<std::string> work = {node.input(0)};
    std::set<std::string> seen;
    while (!work.empty()) {
      std::string t = work.back();
      work.pop_back();
      if (!seen.insert(t).second)
        continue;
      if (candidates.count(t)) {
        // Used also beside activations (a weight whose cosine is taken too):
        // that other use would have trained it, so this is worth a warning.
        bool onlyConstantUses = true;
        for (auto [user, input] : consumers[t])
          for (const std::string &out : g.node(user).output())
            onlyConstantUses &= out.empty() || constant.count(out) > 0;
        buffers.emplace(t, BufferUse{"the node " + nodeName(g, k) +
                                         " computes from it through constants only",
                                     onlyConstantUses && !declaredParameter(t)});
        continue;
      }
      auto p = producer.find(t);
      if (p == producer.end())
        continue;
      const onnx::NodeProto &from = g.node(p->second);
      if (from.op_type() == "Shape" || from.op_type() == "Size")
        continue; // reads a shape, not values
      for (const std::string &in : from.input())
        if (!in.empty())
          work.push_back(in);
    }
  }

  std::set<std::string> graphOutputs;
  for (const onnx::ValueInfoProto &out : g.output())
    graphOutputs.insert(out.name());

  // Rule 2: what no gradient can reach (a float causal mask compared with 0):
  // PyTorch leaves such a tensor alone, even under weight decay. One pass from
  // the outputs back (ONNX lists nodes in topological order) marks every
  // tensor a gradient reaches.
  std::set<std::string> getsGradient = graphOutputs;
  for (int k = g.node_size() - 1; k >= 0; --k) {
    const onnx::NodeProto &node = g.node(k);
    bool used = false;
    for (const std::string &out : node.output())
      used |= !out.empty() && getsGradient.count(out);
    if (!used)
      continue;
    for (int i = 0; i < node.input_size(); ++i)
      if (!node.input(i).empty() && carriesGradient(node, i))
        getsGradient.insert(node.input(i));
  }
  for (const auto &[name, init] : candidates) {
    auto uses = consumers.find(name);
    if (buffers.count(name) || getsGradient.count(name) || uses == consumers.end())
      continue;
    buffers.emplace(name, BufferUse{"no gradient reaches it (it is first read by node " +
                                        nodeName(g, uses->second.front().first) + ")",
                                    /*forced=*/true});
  }

  // How a table's values reach the activations: through ops that keep it a
  // table (reshaping, slicing, gathering, casting, concatenating, constant
  // scaling, and with `shifts` adding or subtracting a constant: GPT-1's
  // 1 - b), ending as a factor of a Mul or a term of an Add (or, shifted,
  // of a Sub). Any other use, or a graph output, makes it no table.
  struct TableUses {
    bool table = true;
    int firstMul = -1, firstAdd = -1;
    bool shifted = false;
  };
  auto tableUses = [&](const std::string &name, bool shifts) {
    TableUses u;
    std::vector<std::string> work = {name};
    std::set<std::string> seen;
    while (u.table && !work.empty()) {
      std::string t = work.back();
      work.pop_back();
      if (!seen.insert(t).second)
        continue;
      if (graphOutputs.count(t)) {
        u.table = false;
        break;
      }
      for (auto [k, input] : consumers[t]) {
        const onnx::NodeProto &node = g.node(k);
        const std::string &op = node.op_type();
        if (isDefaultDomain(node) && (op == "Shape" || op == "Size"))
          continue; // reads its shape, not its values
        int through = passThroughInput(op);
        bool othersConstant = true;
        for (int i = 0; i < node.input_size(); ++i)
          if (i != input && !node.input(i).empty())
            othersConstant &= constant.count(node.input(i)) > 0;
        bool scales = (op == "Mul" || op == "Neg" || (op == "Div" && input == 0)) && othersConstant;
        bool shift = shifts && (op == "Add" || op == "Sub") && othersConstant;
        if (isDefaultDomain(node) && ((through == -1 || through == input) || scales || shift)) {
          u.shifted |= shift;
          for (const std::string &out : node.output())
            if (!out.empty())
              work.push_back(out);
        } else if (isDefaultDomain(node) && op == "Mul") {
          if (u.firstMul < 0)
            u.firstMul = k;
        } else if (isDefaultDomain(node) &&
                   (op == "Add" || (shifts && u.shifted && op == "Sub"))) {
          if (u.firstAdd < 0)
            u.firstAdd = k;
        } else {
          u.table = false;
          break;
        }
      }
    }
    return u;
  };

  // Rules 3 and 4, on the tables of rank >= 2 the rules above left; their
  // values are read (once) only for a table whose uses qualify it.
  for (const auto &[name, init] : candidates) {
    if (buffers.count(name) || init->dims_size() < 2 || declaredParameter(name))
      continue;
    std::optional<TableValues> values;
    const onnx::TensorProto &table = *init; // C++17 lambdas cannot capture a structured binding
    auto valuesOfTable = [&] {
      if (!values)
        values = valuesOf(table);
      return *values;
    };
    // Rule 3: a table that only ever multiplies activations, or is only
    // added to them and holds a mask's values. A learned additive table is
    // legitimate; one whose values are 0 or "minus infinity" is a mask, and a
    // parameter starting at -inf or finfo.min could not be trained (AdamW's
    // decay turns it into NaN).
    TableUses u = tableUses(name, /*shifts=*/false);
    if (u.table && u.firstMul >= 0 && u.firstAdd < 0) {
      buffers.emplace(name, BufferUse{"it only ever multiplies activations (first at node " +
                                          nodeName(g, u.firstMul) +
                                          "), as a rotary cos or sin table does",
                                      /*forced=*/false});
      continue;
    }
    if (u.table && u.firstAdd >= 0 && valuesOfTable() == TableValues::AdditiveMask) {
      buffers.emplace(name, BufferUse{"it is only added to activations (first at node " +
                                          nodeName(g, u.firstAdd) +
                                          ") and holds a mask's values (0 and -inf or "
                                          "below -1e4)",
                                      /*forced=*/true});
      continue;
    }
    // Rule 4: a table of 0s and 1s that multiplies activations and, shifted
    // and scaled by constants, is added to them: GPT-1's causal table in
    // `w * b + -1e4 * (1 - b)`, as exported without the exporter's BUFFER
    // declaration and without folding the right-hand term (which rule 3
    // would then read as a mask). A weight starts from random values, not
    // from a 0/1 pattern.
    u = tableUses(name, /*shifts=*/true);
    if (!u.table || (u.firstMul < 0 && !(u.shifted && u.firstAdd >= 0)) ||
        valuesOfTable() != TableValues::ZeroOne)
      continue;
    int first = u.firstMul >= 0 ? u.firstMul : u.firstAdd;
    buffers.emplace(name, BufferUse{"it holds only 0s and 1s and masks activations (first at "
                                        "node " +
                                        nodeName(g, first) +
                                        "), as GPT-1's causal table in w * b - 1e4 * (1 - b) "
                                        "does",
                                    /*forced=*/false});
  }
  return buffers;
}

} // namespace pipemesh::onnximport

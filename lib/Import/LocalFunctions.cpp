//===- LocalFunctions.cpp - inlining an ONNX model's local functions ------===//

#include "LocalFunctions.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace pipemesh::onnximport {
namespace {

std::string normalDomain(const std::string &domain) {
  return domain == "ai.onnx" ? "" : domain;
}

std::string key(const std::string &domain, const std::string &name) {
  return normalDomain(domain) + "::" + name;
}

/// Names in use, handing out fresh ones as `base`, `base#2`, `base#3`, ...
/// Each base remembers its next suffix: 2^19 calls of one function (all named
/// after it) would otherwise probe quadratically many names.
class NameSet {
public:
  void insert(const std::string &name) { used.insert(name); }
  std::string fresh(const std::string &base) {
    if (used.insert(base).second)
      return base;
    int &k = next.try_emplace(base, 2).first->second;
    std::string name;
    do
      name = base + "#" + std::to_string(k++);
    while (!used.insert(name).second);
    return name;
  }

private:
  std::set<std::string> used;
  std::map<std::string, int> next;
};

class Inliner {
public:
  // A 1000-layer GPT has about 50,000 nodes; importing takes about 50 us a
  // node, so the default 200,000 (ImportOptions::maxInlinedNodes) bounds
  // what a few kilobytes of nested calls can cost (10 s).
  Inliner(onnx::ModelProto &model, size_t maxNodes) : model(model), maxNodes(maxNodes) {
    for (const onnx::FunctionProto &fn : model.functions())
      functions[key(fn.domain(), fn.name())] = &fn;
    const onnx::GraphProto &g = model.graph();
    for (const onnx::ValueInfoProto &v : g.input())
      names.insert(v.name());
    for (const onnx::TensorProto &t : g.initializer())
      names.insert(t.name());
    for (const onnx::NodeProto &node : g.node())
      for (const std::string &out : node.output())
        names.insert(out);
  }

  bool run(std::string &why) {
    if (functions.empty())
      return true;
    // Calls nested n deep, each calling twice, make 2^n nodes: counted first,
    // so that a model built that way is refused at once.
    size_t total = 0;
    for (const onnx::NodeProto &node : model.graph().node())
      total = std::min(maxNodes + 1, total + expandedSize(node));
    if (total > maxNodes) {
      why = "inlining the model's functions would make more than " +
            std::to_string(maxNodes) + " nodes";
      return false;
    }
    std::vector<onnx::NodeProto> nodes;
    for (const onnx::NodeProto &node : model.graph().node())
      if (!emit(node, nodes, why))
        return false;
    onnx::GraphProto *g = model.mutable_graph();
    g->clear_node();
    for (onnx::NodeProto &node : nodes)
      *g->add_node() = std::move(node);
    model.clear_functions();
    return true;
  }

private:
  onnx::ModelProto &model;
  const size_t maxNodes;
  std::map<std::string, const onnx::FunctionProto *> functions;
  NameSet names;        // every tensor name in use
  NameSet callPrefixes; // prefixes given to calls so far
  std::vector<const onnx::FunctionProto *> active; // the bodies being inlined

  std::map<const onnx::FunctionProto *, size_t> sizes; // nodes of each body, inlined

  /// The nodes `node` becomes, at most maxNodes + 1 (a function that calls
  /// itself counts as one node here; emit() reports it).
  size_t expandedSize(const onnx::NodeProto &node) {
    const onnx::FunctionProto *fn = calledFunction(node);
    if (!fn)
      return 1;
    auto [it, inserted] = sizes.try_emplace(fn, 1);
    if (!inserted)
      return it->second;
    size_t total = 0;
    for (const onnx::NodeProto &inner : fn->node())
      total = std::min(maxNodes + 1, total + expandedSize(inner));
    return sizes[fn] = total;
  }

  const onnx::FunctionProto *calledFunction(const onnx::NodeProto &node) const {
    auto it = functions.find(key(node.domain(), node.op_type()));
    return it == functions.end() ? nullptr : it->second;
  }

  /// Appends `node` to `out`, or the body of the function it calls.
  bool emit(const onnx::NodeProto &node, std::vector<onnx::NodeProto> &out, std::string &why) {
    const onnx::FunctionProto *fn = calledFunction(node);
    if (!fn) {
      out.push_back(node);
      return true;
    }
    std::string callName = node.name().empty() ? fn->name() : node.name();
    std::string what = "call '" + callName + "' of the model's function '" +
                       (fn->domain().empty() ? "" : fn->domain() + ".") + fn->name() + "'";
    auto fullName = [](const onnx::FunctionProto *f) {
      return (f->domain().empty() ? "" : f->domain() + ".") + f->name();
    };
    if (std::find(active.begin(), active.end(), fn) != active.end()) {
      why = "the model's function '" + fullName(active.front()) + "' calls itself (";
      for (const onnx::FunctionProto *f : active)
        why += fullName(f) + " -> ";
      why += fullName(fn) + "): it cannot be inlined";
      return false;
    }
    if (node.input_size() > fn->input_size() || node.output_size() > fn->output_size()) {
      why = what + ": it passes " + std::to_string(node.input_size()) + " inputs and takes " +
            std::to_string(node.output_size()) + " outputs, the function declares " +
            std::to_string(fn->input_size()) + " and " + std::to_string(fn->output_size());
      return false;
    }
    for (const onnx::OperatorSetIdProto &fnOpset : fn->opset_import()) {
      if (!normalDomain(fnOpset.domain()).empty())
        continue;
      for (const onnx::OperatorSetIdProto &modelOpset : model.opset_import())
        if (normalDomain(modelOpset.domain()).empty() &&
            modelOpset.version() != fnOpset.version()) {
          why = what + ": the function uses opset " + std::to_string(fnOpset.version()) +
                " of the default domain, the model opset " +
                std::to_string(modelOpset.version()) + " (one version for all is supported)";
          return false;
        }
    }
    // (A call inside a body already has its caller's prefix in its name.)
    std::string prefix = callPrefixes.fresh(callName) + "/";

    // The function's names, as the call's: formal inputs and outputs become
    // the call's (an absent one stays absent, "" in ONNX), internal ones get
    // the call's prefix.
    std::map<std::string, std::string> rename;
    for (int i = 0; i < fn->input_size(); ++i)
      rename[fn->input(i)] = i < node.input_size() ? node.input(i) : "";
    for (int i = 0; i < fn->output_size(); ++i)
      if (i < node.output_size() && !node.output(i).empty())
        rename[fn->output(i)] = node.output(i);
    auto renamed = [&](const std::string &name) -> std::string {
      if (name.empty())
        return name;
      auto it = rename.find(name);
      if (it != rename.end())
        return it->second;
      return rename[name] = names.fresh(prefix + name);
    };
    std::map<std::string, const onnx::AttributeProto *> callAttrs;
    for (const onnx::AttributeProto &a : node.attribute())
      callAttrs[a.name()] = &a;

    for (const onnx::NodeProto &inner : fn->node()) {
      onnx::NodeProto copy = inner;
      copy.set_name(prefix + (inner.name().empty() ? inner.op_type() : inner.name()));
      for (int i = 0; i < copy.input_size(); ++i)
        copy.set_input(i, renamed(inner.input(i)));
      for (int i = 0; i < copy.output_size(); ++i)
        copy.set_output(i, renamed(inner.output(i)));
      copy.clear_attribute();
      for (const onnx::AttributeProto &a : inner.attribute()) {
        if (a.type() == onnx::AttributeProto::GRAPH ||
            a.type() == onnx::AttributeProto::GRAPHS || a.has_g() || a.graphs_size()) {
          why = what + ": its node '" + copy.name() + "' (" + inner.op_type() +
                ") has a subgraph, which is not supported";
          return false;
        }
        if (a.ref_attr_name().empty()) {
          *copy.add_attribute() = a;
          continue;
        }
        // A reference to the call's attribute; absent, the op's default applies.
        auto it = callAttrs.find(a.ref_attr_name());
        if (it == callAttrs.end())
          continue;
        onnx::AttributeProto *value = copy.add_attribute();
        *value = *it->second;
        value->set_name(a.name());
      }
      active.push_back(fn);
      bool ok = emit(copy, out, why);
      active.pop_back();
      if (!ok)
        return false;
    }
    return true;
  }
};

} // namespace

bool inlineLocalFunctions(onnx::ModelProto &model, size_t maxNodes, std::string &why) {
  return Inliner(model, maxNodes).run(why);
}

} // namespace pipemesh::onnximport

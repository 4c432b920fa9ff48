//===- ControlOps.cpp - load_microbatch, zero, accumulate, loss, adamw ------===//
//
// The instructions that are not kernels (docs/plan-format.md, "Control
// instructions"). They read and write ExecEnv::state: the step, its learning
// rate, the accumulated loss and the gradient norm.
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/Communicator.h"
#include "pipemesh/runtime/CpuKernels.h"
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/Sampler.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>

namespace pipemesh::rt {
namespace {

Thunk bindLoadMicrobatch(OpContext &c) {
  // "what": "both" (default): out [tokens, targets], or [tokens] alone for a
  // model that shifts its labels itself (loss "model-shifted"); "tokens":
  // out [tokens] (a first pipeline stage); "targets": out [targets] (a last
  // stage). The rank's dp_rank picks its sequences (canonical sampling).
  c.cls = InstrClass::Control;
  std::string what = "both";
  if (const nlohmann::json *it = c.fieldValue("what")) {
    if (!it->is_string())
      c.error("\"what\" must be \"tokens\", \"targets\" or \"both\", got ", it->dump());
    what = it->get<std::string>();
  }
  const bool wantTargets = what == "targets";
  if (what == "both")
    c.expectCounts(0, 0, 1, 2);
  else if (what == "tokens" || what == "targets")
    c.expectCounts(0, 0, 1, 1);
  else
    c.error("\"what\" must be \"tokens\", \"targets\" or \"both\", got \"", what, "\"");
  const Plan &plan = c.env.plan;
  int64_t j = (int64_t)c.field("index");
  if (j < 0 || j >= plan.parallel.microbatches)
    c.error("micro-batch index ", j, " is outside [0, ", plan.parallel.microbatches, ")");
  int64_t n = plan.model.batch * plan.model.seq;
  TensorRef tokens, targets;
  for (size_t i = 0; i < c.numOut(); ++i) {
    TensorRef t = c.out(i);
    bool isTargets = wantTargets || i == 1;
    c.expectIndex(t, isTargets ? "the targets" : "the tokens");
    if (t.numel != n)
      c.error(isTargets ? "targets " : "tokens ", shapeStr(t.shape),
              " must hold batch x seq = ", plan.model.batch, "x", plan.model.seq, " ids");
    (isTargets ? targets : tokens) = t;
  }
  auto a = std::make_shared<std::vector<int64_t>>(n), b = std::make_shared<std::vector<int64_t>>(n);
  ExecEnv *env = &c.env;
  int64_t dpRank = c.env.rank.dpRank;
  return [env, j, dpRank, tokens, targets, a, b, n] {
    if (!env->sampler)
      fail("no data loader is attached");
    env->sampler->fill(env->state.step, j, dpRank, a->data(), b->data());
    if (env->observer)
      env->observer(env->state.step, j, dpRank, a->data(), b->data(), n);
    if (tokens.data)
      ops::convert(a->data(), DType::I64, tokens.data, tokens.dtype, n);
    if (targets.data)
      ops::convert(b->data(), DType::I64, targets.data, targets.dtype, n);
  };
}

Thunk bindZero(OpContext &c) {
  c.cls = InstrClass::Control;
  c.expectCounts(0, 0, 1, SIZE_MAX);
  std::vector<TensorRef> ts;
  for (size_t i = 0; i < c.numOut(); ++i)
    ts.push_back(c.out(i));
  return [ts] {
    for (const TensorRef &t : ts)
      std::memset(t.data, 0, t.bytes());
  };
}

Thunk bindAccumulate(OpContext &c) {
  // dst += scale * src, pairwise over "in" and "out".
  if (c.numIn() == 0 || c.numIn() != c.numOut())
    c.error("needs as many sources (in) as destinations (out), has ", c.numIn(), " and ",
            c.numOut());
  float scale = (float)c.field("scale", 1.0);
  std::vector<std::pair<TensorRef, TensorRef>> pairs;
  for (size_t i = 0; i < c.numIn(); ++i) {
    TensorRef s = c.in(i), d = c.out(i);
    c.expectFloat(s, "source");
    c.expectFloat(d, "destination");
    if (s.numel != d.numel)
      c.error("source ", shapeStr(s.shape), " and destination ", shapeStr(d.shape),
              " differ in size");
    pairs.emplace_back(s, d);
  }
  return [pairs, scale] {
    for (const auto &[s, d] : pairs) {
      const float *x = s.as<float>();
      float *y = d.as<float>();
      const int64_t n = s.numel;
      if (scale == 1.0f) {
        for (int64_t i = 0; i < n; ++i)
          y[i] += x[i];
      } else {
        for (int64_t i = 0; i < n; ++i)
          y[i] += scale * x[i];
      }
    }
  };
}

Thunk bindLoss(OpContext &c) {
  c.cls = InstrClass::Control;
  c.expectCounts(1, 1, 0, 0);
  TensorRef l = c.in(0);
  c.expectFloat(l, "the loss");
  if (l.numel != 1)
    c.error("the loss ", shapeStr(l.shape), " must be a scalar");
  double scale = c.field("scale", 1.0);
  ExecEnv *env = &c.env;
  return [env, l, scale] { env->state.loss += scale * (double)l.as<float>()[0]; };
}

struct AdamParam {
  TensorRef p, g, m, v;
  TensorRef copy; ///< params=bf16: receives the updated master, rounded (numel 0: none)
  bool decay;
  double normWeight; ///< weight of this gradient's squares in the global norm
};

Thunk bindAdamW(OpContext &c) {
  // Entries may be ZeRO shards (elem_offset / shard_numel): AdamW is
  // elementwise, so a shard updates on its own; the global gradient norm is
  // sqrt(sum over ranks of sum over entries of norm_weight * ||grad||^2).
  const nlohmann::json *it = c.fieldValue("params");
  if (!it || !it->is_array())
    c.error("needs a \"params\" array of {param, grad, m, v, decay}");
  std::vector<AdamParam> ps;
  for (size_t i = 0; i < it->size(); ++i) {
    const auto &e = (*it)[i];
    // Every key read is recorded, as OpContext does for the instruction's own
    // fields: a key no read asked about (a misspelled "decay") is refused.
    std::set<std::string, std::less<>> read;
    auto entryField = [&](const char *key) -> const nlohmann::json * {
      read.insert(key);
      auto f = e.find(key); // end() for an entry that is not an object
      return f == e.end() ? nullptr : &*f;
    };
    auto id = [&](const char *key) -> TensorRef {
      const nlohmann::json *f = entryField(key);
      if (!f || !f->is_number_integer())
        c.error("params[", i, "] needs an integer buffer id \"", key, "\"");
      TensorRef t = c.env.arena.tensor(f->get<int64_t>());
      c.expectFloat(t, std::string("params[") + std::to_string(i) + "]." + key);
      return t;
    };
    AdamParam a{id("param"), id("grad"), id("m"), id("v"), {}, false, 1.0};
    if (a.g.numel != a.p.numel || a.m.numel != a.p.numel || a.v.numel != a.p.numel)
      c.error("params[", i, "]: param, grad, m and v differ in size");
    if (const nlohmann::json *copy = entryField("copy")) {
      if (!copy->is_number_integer())
        c.error("params[", i, "].copy must be an integer buffer id");
      a.copy = c.env.arena.tensor(copy->get<int64_t>());
      if (a.copy.dtype != DType::BF16 || a.copy.numel != a.p.numel)
        c.error("params[", i, "].copy must be a bf16 buffer of the param's ", a.p.numel,
                " elements; buffer ", copy->get<int64_t>(), " is ", dtypeName(a.copy.dtype),
                " ", shapeStr(a.copy.shape));
    }
    if (const nlohmann::json *decay = entryField("decay")) {
      if (!decay->is_boolean())
        c.error("params[", i, "].decay must be true or false");
      a.decay = decay->get<bool>();
    } else if (const ParamInfo *pi = c.env.plan.findParam(a.p.info->param)) {
      a.decay = pi->decay; // the parameter's, not the (1-D) shard's rank
    } else {
      a.decay = a.p.rank() >= 2;
    }
    if (const nlohmann::json *w = entryField("norm_weight")) {
      if (!w->is_number() || w->get<double>() < 0)
        c.error("params[", i, "].norm_weight must be a non-negative number");
      a.normWeight = w->get<double>();
    }
    for (const auto &kv : e.items())
      if (!read.count(kv.key()))
        c.error("params[", i, "] has a field '", kv.key(), "' unknown to this runtime (",
                "it may change the update; the plan may come from a newer compiler)");
    ps.push_back(a);
  }
  ExecEnv *env = &c.env;
  return [env, ps] {
    // Global gradient norm before clipping (PyTorch clip_grad_norm_):
    // coef = max_norm / (norm + 1e-6), applied when below 1.
    double sq = 0;
    for (const AdamParam &a : ps)
      if (a.normWeight != 0)
        sq += a.normWeight * cpu::sumSquares<float>(a.g.as<float>(), a.g.numel);
    if (env->comm) {
      auto start = std::chrono::steady_clock::now();
      env->comm->allreduceSum(&sq, 1, "squared gradient norm");
      env->state.commInComputeMs +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
    }
    double norm = std::sqrt(sq);
    double gradScale = 1.0;
    const OptimizerConfig &o = env->opt;
    // The norm is the same on every rank (all-reduced): all stop alike.
    if (o.nanCheck && !std::isfinite(norm))
      throw UniformError(concat("step ", env->state.step + 1, ": the global gradient norm is ",
                                norm, ": stopped before the update, so the parameters (and any "
                                "checkpoint) are those after step ", env->state.step,
                                " (--nan-check off would apply it)"));
    if (o.gradClip > 0) {
      double coef = o.gradClip / (norm + 1e-6);
      if (coef < 1.0)
        gradScale = coef;
    }
    int64_t step = env->state.step + 1;
    for (const AdamParam &a : ps)
      cpu::adamw<float>(a.p.as<float>(), a.g.as<float>(), a.m.as<float>(), a.v.as<float>(),
                        a.p.numel, env->state.lr, o.beta1, o.beta2, o.eps,
                        a.decay ? o.weightDecay : 0.0, step, gradScale,
                        a.copy.numel > 0 ? a.copy.as<uint16_t>() : nullptr);
    env->state.gradNorm = norm;
    env->state.optimizerRan = true;
  };
}

} // namespace

void registerControlOps(OpTable &t) {
  t["load_microbatch"] = bindLoadMicrobatch;
  t["zero"] = bindZero;
  t["accumulate"] = bindAccumulate;
  t["loss"] = bindLoss;
  t["adamw"] = bindAdamW;
}

} // namespace pipemesh::rt

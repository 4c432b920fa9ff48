//===- AttentionOps.cpp - attention and attention_grad ----------------------===//
//
// q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]: the leading dims flatten
// to BH. Grouped-query attention: k's (v's) leading dims may be q's with the
// last one (the heads) divided by a group size g; query head h then reads
// key head h / g, as Llama's repeat_kv would have copied it. The additive mask broadcasts to [..., Tq, Tk]; the kernel takes it
// through three strides (BH, query, key). When the mask's leading dims
// broadcast in a way one BH stride cannot express (e.g. [B, 1, Tq, Tk]
// against [B, H, ...]) it is expanded over the leading dims into a scratch
// buffer first, each call (a mask may be computed per step).
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

#include <algorithm>
#include <cmath>
#include <memory>

namespace pipemesh::rt {
namespace {

struct AttnShape {
  int64_t BH, Tq, Tk, D, Dv;
  Dims lead;
  int64_t groupK = 1, groupV = 1; ///< query slices per key (value) slice
};

/// Query slices per slice of an operand with leading dims `lead`: 1 when they
/// are q's, g when they are q's with the last divided by g; 0 otherwise.
int64_t headGroup(const Dims &lead, const Dims &qLead) {
  if (lead == qLead)
    return 1;
  if (lead.empty() || lead.size() != qLead.size() ||
      !std::equal(lead.begin(), lead.end() - 1, qLead.begin()) || lead.back() <= 0 ||
      qLead.back() % lead.back() != 0)
    return 0;
  return qLead.back() / lead.back();
}

AttnShape attnShape(OpContext &c, const TensorRef &q, const TensorRef &k, const TensorRef &v) {
  if (q.rank() < 2 || k.rank() != q.rank() || v.rank() != q.rank())
    c.error("q, k and v must have one rank >= 2 (", shapeStr(q.shape), ", ", shapeStr(k.shape),
            ", ", shapeStr(v.shape), ")");
  size_t r = q.shape.size();
  AttnShape s;
  s.lead.assign(q.shape.begin(), q.shape.end() - 2);
  s.Tq = q.shape[r - 2];
  s.D = q.shape[r - 1];
  s.Tk = k.shape[r - 2];
  s.Dv = v.shape[r - 1];
  s.groupK = headGroup(Dims(k.shape.begin(), k.shape.end() - 2), s.lead);
  s.groupV = headGroup(Dims(v.shape.begin(), v.shape.end() - 2), s.lead);
  if (!s.groupK || !s.groupV || k.shape[r - 1] != s.D || v.shape[r - 2] != s.Tk)
    c.error("q ", shapeStr(q.shape), ", k ", shapeStr(k.shape), " and v ", shapeStr(v.shape),
            " do not fit [..., H, Tq, D], [..., H / g, Tk, D], [..., H / g', Tk, Dv]");
  s.BH = ops::product(s.lead, 0, s.lead.size());
  return s;
}

/// The sliding window (0: none); it needs causal attention.
int64_t attentionWindow(OpContext &c, bool causal) {
  int64_t window = c.i64("window", 0);
  if (window < 0 || (window > 0 && !causal))
    c.error("window ", window, " must be 0, or positive with causal attention");
  return window;
}

/// The soft cap of the scores (0: none).
float attentionSoftcap(OpContext &c) {
  double softcap = c.f64("softcap", 0.0);
  if (!(softcap >= 0.0) || !std::isfinite(softcap))
    c.error("softcap ", softcap, " must be finite and >= 0");
  return (float)softcap;
}

/// How the kernel reads the mask: directly through strides, or from an
/// expanded copy refreshed before each call.
struct MaskPlan {
  const float *data = nullptr;
  int64_t sBH = 0, sQ = 0, sK = 0;
  // expansion (when `scratch` is set)
  std::shared_ptr<std::vector<float>> scratch;
  Dims copyShape, srcStrides, dstStrides;
  const float *src = nullptr;

  const float *prepare() const {
    if (scratch)
      ops::copyStrided(copyShape, sizeof(float), src, srcStrides, scratch->data(), dstStrides);
    return data;
  }
};

MaskPlan maskPlan(OpContext &c, const AttnShape &s) {
  MaskPlan p;
  if (c.numIn() < 4)
    return p;
  TensorRef m = c.in(3);
  c.expectFloat(m, "the mask");
  Dims full = s.lead;
  full.push_back(s.Tq);
  full.push_back(s.Tk);
  if (!ops::broadcastsTo(m.shape, full))
    c.error("mask ", shapeStr(m.shape), " does not broadcast to ", shapeStr(full));
  Dims st = ops::broadcastStrides(m.shape, full);
  size_t L = s.lead.size();
  p.sQ = st[L];
  p.sK = st[L + 1];
  p.data = m.as<float>();
  bool allZero = true, dense = true;
  for (size_t d = 0; d < L; ++d) {
    allZero &= st[d] == 0;
    if (st[d] == 0 || (d + 1 < L && st[d] != st[d + 1] * s.lead[d + 1]))
      dense = false;
  }
  if (L == 0 || allZero) {
    p.sBH = 0;
    return p;
  }
  if (dense) {
    p.sBH = st[L - 1];
    return p;
  }
  // Expand the leading dims; keep the (possibly broadcast) query/key dims.
  int64_t mq = p.sQ ? s.Tq : 1, mk = p.sK ? s.Tk : 1;
  p.copyShape = s.lead;
  p.copyShape.push_back(mq);
  p.copyShape.push_back(mk);
  p.srcStrides = st;
  p.dstStrides = ops::contiguousStrides(p.copyShape);
  p.scratch = std::make_shared<std::vector<float>>(s.BH * mq * mk);
  p.src = m.as<float>();
  p.data = p.scratch->data();
  p.sBH = mq * mk;
  p.sQ = mq == 1 ? 0 : mk;
  p.sK = mk == 1 ? 0 : 1;
  return p;
}

Thunk bindAttention(OpContext &c) {
  c.expectCounts(3, 4, 1, 1);
  TensorRef q = c.in(0), k = c.in(1), v = c.in(2), o = c.out(0);
  for (const TensorRef *t : {&q, &k, &v, &o})
    c.expectFloat(*t, "operand");
  AttnShape s = attnShape(c, q, k, v);
  Dims os = s.lead;
  os.push_back(s.Tq);
  os.push_back(s.Dv);
  c.expectShape(o, os, "the result");
  float scale = (float)c.f64("scale");
  bool causal = c.boolean("causal", true);
  int64_t window = attentionWindow(c, causal);
  float softcap = attentionSoftcap(c);
  MaskPlan mp = maskPlan(c, s);
  return [q, k, v, o, s, scale, causal, window, softcap, mp] {
    const float *mask = mp.prepare();
    cpu::attention<float>(q.as<float>(), k.as<float>(), v.as<float>(), mask, mp.sBH, mp.sQ, mp.sK,
                          o.as<float>(), s.BH, s.Tq, s.Tk, s.D, s.Dv, scale, causal, window,
                          softcap, s.groupK, s.groupV);
  };
}

Thunk bindAttentionGrad(OpContext &c) {
  // attention_grad(dout, q, k, v [, mask]) -> (dq, dk, dv)
  c.expectCounts(4, 5, 3, 3);
  TensorRef dO = c.in(0), q = c.in(1), k = c.in(2), v = c.in(3);
  TensorRef dq = c.out(0), dk = c.out(1), dv = c.out(2);
  for (const TensorRef *t : {&dO, &q, &k, &v, &dq, &dk, &dv})
    c.expectFloat(*t, "operand");
  AttnShape s = attnShape(c, q, k, v);
  Dims os = s.lead;
  os.push_back(s.Tq);
  os.push_back(s.Dv);
  c.expectShape(dO, os, "dout");
  c.expectShape(dq, q.shape, "dq");
  c.expectShape(dk, k.shape, "dk");
  c.expectShape(dv, v.shape, "dv");
  float scale = (float)c.f64("scale");
  bool causal = c.boolean("causal", true);
  int64_t window = attentionWindow(c, causal);
  float softcap = attentionSoftcap(c);
  // The mask is operand 4 here; maskPlan reads operand 3, so shift the view.
  MaskPlan mp;
  if (c.numIn() == 5) {
    Instruction shifted = c.inst;
    shifted.in.erase(shifted.in.begin());
    OpContext sc(c.env, shifted);
    mp = maskPlan(sc, s);
  }
  return [dO, q, k, v, dq, dk, dv, s, scale, causal, window, softcap, mp] {
    const float *mask = mp.prepare();
    cpu::attentionGrad<float>(dO.as<float>(), q.as<float>(), k.as<float>(), v.as<float>(), mask,
                              mp.sBH, mp.sQ, mp.sK, dq.as<float>(), dk.as<float>(), dv.as<float>(),
                              s.BH, s.Tq, s.Tk, s.D, s.Dv, scale, causal, window, softcap,
                              s.groupK, s.groupV);
  };
}

} // namespace

void registerAttentionOps(OpTable &t) {
  t["attention"] = bindAttention;
  t["attention_grad"] = bindAttentionGrad;
}

} // namespace pipemesh::rt

//===- PlanPrinter.cpp - a plan file as readable text ----------------------===//
#include "pipemesh/Plan/Plan.h"
#include "pipemesh/Plan/Replicas.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"


namespace json = llvm::json;

namespace pipemesh::plan {

namespace {
std::string shapeText(const json::Array *shape) {
  std::string s = "[";
  if (shape)
    for (size_t i = 0; i < shape->size(); ++i)
      s += (i ? "x" : "") + std::to_string((*shape)[i].getAsInteger().value_or(-1));
  return s + "]";
}

/// `sep` ",": as the compile option spells it (fwd-groups=4,2), to paste back.
std::string intList(const json::Array *a, llvm::StringRef sep = ", ") {
  std::string s;
  if (a)
    for (size_t i = 0; i < a->size(); ++i)
      s += (i ? sep.str() : "") + std::to_string((*a)[i].getAsInteger().value_or(-1));
  return s;
}

std::string ids(const json::Array *a) {
  std::string s;
  if (a)
    for (size_t i = 0; i < a->size(); ++i)
      s += (i ? ", %" : "%") + std::to_string((*a)[i].getAsInteger().value_or(-1));
  return s;
}
} // namespace

bool printPlan(llvm::StringRef path, llvm::raw_ostream &os, std::string &why) {
  PlanContainer container;
  if (!readPlanContainer(path, "pipemesh-opt", container, why))
    return false;
  auto parsed = json::parse(container.manifest);
  if (!parsed) {
    why = "plan '" + path.str() + "': invalid manifest JSON: " + llvm::toString(parsed.takeError());
    return false;
  }
  const json::Object *m = parsed->getAsObject();
  if (!m) {
    why = "plan '" + path.str() + "': the manifest is not a pipemesh-plan";
    return false;
  }
  if (!checkPlanManifest(*m, path, "pipemesh-opt", why))
    return false;
  // An elided plan holds one entry per pipeline rank; each is printed once
  // per dp replica, derived in turn (a big plan's replicas need not fit in
  // memory together).
  std::string elided;
  int64_t replicas = 1;
  if (const json::Object *par = m ? m->getObject("parallel") : nullptr;
      par && par->getBoolean("replicas_elided").value_or(false)) {
    const json::Array *listed = m->getArray("ranks");
    replicas = par->getInteger("dp").value_or(1);
    elided = ", programs of " + std::to_string(listed ? listed->size() : 0) + " pipeline ranks (" +
             std::to_string(replicas) + " dp replicas each)";
  }
  const json::Object *model = m ? m->getObject("model") : nullptr;
  const json::Object *par = m ? m->getObject("parallel") : nullptr;
  const json::Array *ranks = m ? m->getArray("ranks") : nullptr;
  if (!model || !par || !ranks) {
    why = "plan '" + path.str() + "': the manifest lacks model, parallel or ranks";
    return false;
  }
  os << "plan format " << kPlanFormatVersion << ", " << container.weights.size()
     << " bytes of weights" << elided << "\n";
  os << "model: " << model->getString("source").value_or("?")
     << "  batch=" << model->getInteger("batch").value_or(0)
     << " seq=" << model->getInteger("seq").value_or(0)
     << " vocab=" << model->getInteger("vocab").value_or(0)
     << " params=" << model->getInteger("num_params").value_or(0)
     << " loss=" << model->getString("loss").value_or("?")
     << " activations=" << m->getString("activations").value_or("f32")
     << " param_dtype=" << m->getString("param_dtype").value_or("f32")
     << " grad_reduce=" << m->getString("grad_reduce").value_or("f32") << "\n";
  os << "parallel: pp=" << par->getInteger("pp").value_or(0)
     << " dp=" << par->getInteger("dp").value_or(0)
     << " vpp=" << par->getInteger("vpp").value_or(0)
     << " microbatches=" << par->getInteger("microbatches").value_or(0)
     << " schedule=" << par->getString("schedule").value_or("?");
  if (auto run = par->getString("schedule_run"))
    os << " (runs " << *run << ")";
  if (auto group = par->getInteger("group"))
    os << " group=" << *group;
  for (const char *key : {"fwd_groups", "bwd_groups"})
    if (const json::Array *g = par->getArray(key))
      os << " " << llvm::StringRef(key).take_front(3) << "-groups=" << intList(g, ",");
  if (auto deferW = par->getString("defer_w"))
    os << " defer-w=" << *deferW;
  // What a search (groups=auto, zero=auto) looked at.
  auto searchNote = [&](llvm::StringRef key, llvm::StringRef what) {
    if (const json::Object *sr = par->getObject(key))
      os << " (" << what << ": " << sr->getInteger("candidates").value_or(0)
         << " candidates on " << sr->getString("cluster").value_or("?") << " in "
         << llvm::format("%.2f", sr->getNumber("seconds").value_or(0)) << " s)";
  };
  searchNote("groups_search", "groups=auto");
  if (const json::Array *zc = par->getArray("zero_chunks"))
    os << " zero-per-chunk=" << intList(zc, ",");
  else if (auto zero = par->getInteger("zero"))
    os << " zero=" << *zero;
  if (auto dc = par->getString("dp_collectives"))
    os << " dp-collectives=" << *dc;
  if (auto prefetch = par->getInteger("prefetch"))
    os << " prefetch=" << *prefetch;
  if (const json::Object *ps = par->getObject("prefetch_search")) {
    os << " (prefetch=auto on " << ps->getString("cluster").value_or("?") << ":";
    if (const json::Array *tried = ps->getArray("tried"))
      for (const json::Value &v : *tried)
        if (const json::Object *t = v.getAsObject()) {
          os << " " << t->getInteger("prefetch").value_or(0) << " ";
          if (auto st = t->getNumber("step_s"))
            os << llvm::format("%.6g", *st) << " s";
          else
            os << "over mem-limit";
        }
    os << ")";
  }
  searchNote("zero_search", "zero=auto");
  os << "\n";
  auto printRank = [&](const json::Object *r) {
    const json::Array *bufs = r->getArray("buffers");
    const json::Array *prog = r->getArray("program");
    int64_t arena = r->getInteger("arena_bytes").value_or(0);
    os << "\nrank " << r->getInteger("rank").value_or(-1);
    if (auto pp = r->getInteger("pp_rank")) {
      os << " (pp " << *pp << ", dp " << r->getInteger("dp_rank").value_or(0) << "; chunks "
         << intList(r->getArray("chunks"));
      if (const json::Object *g = r->getObject("groups")) {
        os << "; dp group [" << intList(g->getArray("dp")) << "]";
        if (const json::Array *t = g->getArray("tied"); t && !t->empty())
          os << ", tied group [" << intList(t) << "]";
      }
      if (r->getBoolean("first_stage").value_or(false))
        os << "; first stage";
      if (r->getBoolean("last_stage").value_or(false))
        os << "; last stage";
      os << ")";
    }
    os << ": arena " << arena << " bytes (" << llvm::format("%.2f", arena / 1048576.0)
       << " MiB; persistent " << r->getInteger("persistent_bytes").value_or(0)
       << ", activations " << r->getInteger("activation_peak_bytes").value_or(0);
    if (auto rc = r->getString("recompute"); rc && *rc != "none")
      os << "; recompute " << *rc;
    os << ")\n";
    // The schedule row in PyTorch's action notation (older single-rank plans
    // have none: F then B per micro-batch).
    if (auto row = r->getString("schedule")) {
      os << "  schedule: " << *row << "\n";
    } else if (prog) {
      os << "  schedule:";
      for (const json::Value &iv : *prog) {
        const json::Object *in = iv.getAsObject();
        if (in && in->getString("op") == "load_microbatch")
          os << " 0F" << in->getInteger("index").value_or(0) << " 0B"
             << in->getInteger("index").value_or(0);
      }
      os << "\n";
    }
    os << "  buffers:\n";
    if (bufs)
      for (const json::Value &bv : *bufs) {
        const json::Object *b = bv.getAsObject();
        if (!b)
          continue;
        os << llvm::format("    %%%-4lld %-10s %-5s %-18s @%-10lld %s",
                           (long long)b->getInteger("id").value_or(-1),
                           b->getString("kind").value_or("?").str().c_str(),
                           b->getString("dtype").value_or("?").str().c_str(),
                           shapeText(b->getArray("shape")).c_str(),
                           (long long)b->getInteger("offset").value_or(0),
                           b->getString("name").value_or("").str().c_str());
        if (auto n = b->getInteger("shard_numel"))
          os << " [shard " << b->getInteger("elem_offset").value_or(0) << ".."
             << b->getInteger("elem_offset").value_or(0) + *n << " of "
             << b->getInteger("padded_numel").value_or(0) << "]";
        if (auto a = b->getInteger("alias_of"))
          os << " (view of %" << *a << ")";
        os << "\n";
      }
    os << "  program:\n";
    if (prog)
      for (auto [k, iv] : llvm::enumerate(*prog)) {
        const json::Object *in = iv.getAsObject();
        if (!in)
          continue;
        std::string op = in->getString("op").value_or("?").str();
        os << llvm::format("    %4zu  ", k) << op;
        if (op == "load_microbatch") {
          os << " " << in->getInteger("index").value_or(0);
          if (auto what = in->getString("what"))
            os << " " << *what;
        }
        if (auto g = in->getString("group"))
          os << " " << *g;
        if (auto t = in->getString("dtype"))
          os << " " << *t;
        if (op == "adamw") {
          const json::Array *ps = in->getArray("params");
          size_t zeroWeight = 0, copies = 0;
          if (ps)
            for (const json::Value &e : *ps)
              if (const json::Object *eo = e.getAsObject()) {
                zeroWeight += eo->getNumber("norm_weight").value_or(1.0) == 0.0;
                copies += eo->get("copy") != nullptr;
              }
          os << " (" << (ps ? ps->size() : 0) << " parameters";
          if (zeroWeight)
            os << ", " << zeroWeight << " with norm_weight 0";
          if (copies)
            os << ", " << copies << " rounded into bf16 copies";
          os << ")\n";
          continue;
        }
        if (auto *a = in->getArray("bufs"); a && !a->empty())
          os << " " << ids(a);
        if (auto *a = in->getArray("in"); a && !a->empty())
          os << " " << ids(a);
        if (auto *a = in->getArray("out"); a && !a->empty())
          os << " -> " << ids(a);
        if (auto peer = in->getInteger("peer"))
          os << (op == "recv" ? " from rank " : " to rank ") << *peer;
        if (auto tag = in->getInteger("tag"))
          os << " tag " << *tag;
        if (auto keep = in->getInteger("keep"))
          os << " keep " << *keep;
        if (in->getBoolean("async").value_or(false))
          os << " async";
        if (in->getBoolean("accumulate").value_or(false))
          os << " accumulate";
        if (auto s = in->getNumber("scale"))
          os << " scale " << *s;
        if (auto *attrs = in->getObject("attrs")) {
          std::string text;
          llvm::raw_string_ostream as(text);
          as << json::Value(json::Object(*attrs));
          os << " " << text;
        }
        os << "\n";
      }
  };
  for (const json::Value &rv : *ranks) {
    const json::Object *entry = rv.getAsObject();
    if (!entry)
      continue;
    if (elided.empty()) {
      printRank(entry);
      continue;
    }
    for (int64_t d = 0; d < replicas; ++d) {
      json::Object replica = replicaOf(*entry, d);
      printRank(&replica);
    }
  }
  return true;
}

} // namespace pipemesh::plan

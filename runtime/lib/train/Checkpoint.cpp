//===- Checkpoint.cpp - atomic, checksummed checkpoints ---------------------===//
#include "pipemesh/runtime/Checkpoint.h"

#include "pipemesh/runtime/AtomicFile.h"
#include "pipemesh/runtime/Bf16.h"
#include "pipemesh/runtime/Checksum.h"
#include "pipemesh/runtime/Communicator.h"
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/MappedFile.h"
#include "pipemesh/runtime/Safetensors.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace pipemesh::rt {
namespace {

constexpr const char *kFormat = "pipemesh-checkpoint";
constexpr int kVersion = 2; // 2: file checksums are XXH3-64 ("xxh3_64"), were FNV-1a
/// index.json: per file, its tensors' names and element counts.
constexpr const char *kIndexFile = "index.json";
constexpr const char *kIndexFormat = "pipemesh-checkpoint-index";

void fsyncPath(const fs::path &p, bool directory) {
  int fd = ::open(p.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    fail("checkpoint: cannot open '", p.string(), "' to sync it: ", std::strerror(errno));
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0)
    fail("checkpoint: fsync of '", p.string(), "' failed: ", std::strerror(e));
}

void renameOrFail(const fs::path &from, const fs::path &to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail("checkpoint: cannot rename '", from.string(), "' to '", to.string(),
         "': ", std::strerror(errno));
}

/// Name of a persistent buffer's tensor in a checkpoint file: a shard (and
/// any partial buffer) carries its first element ("adam_m/wte@416").
std::string tensorName(const BufferInfo &b) {
  std::string n = std::string(bufferKindName(b.kind)) + "/" + b.param;
  if (b.elemOffset || b.isShard())
    n += "@" + std::to_string(b.elemOffset);
  return n;
}

/// The configuration a checkpoint is only valid for.
nlohmann::json parallelConfig(const Plan &plan) {
  const ParallelInfo &p = plan.parallel;
  return {{"world_size", p.worldSize}, {"pp", p.pp},         {"dp", p.dp},
          {"vpp", p.vpp},              {"zero", p.zero},     {"microbatches", p.microbatches},
          {"schedule", p.schedule}};
}

std::string configText(const nlohmann::json &c) {
  auto get = [&](const char *k) { return c.contains(k) ? c[k].dump() : std::string("?"); };
  return concat("pp=", get("pp"), " dp=", get("dp"), " zero=", get("zero"), " (world size ",
                get("world_size"), ")");
}

/// What another plan must share to resume from a checkpoint (resharded):
/// the parameters, and the data each step reads (sequence length, global
/// batch: canonical sampling).
nlohmann::json modelIdentity(const Plan &plan) {
  nlohmann::json params = nlohmann::json::array();
  for (const ParamInfo &p : plan.params)
    params.push_back({{"name", p.name}, {"shape", p.shape}});
  return {{"seq", plan.model.seq}, {"global_batch", plan.globalBatch()}, {"params", params}};
}

bool checkpointed(const BufferInfo &b) {
  return b.kind == BufferKind::Param || b.kind == BufferKind::ParamCopy ||
         b.kind == BufferKind::AdamM || b.kind == BufferKind::AdamV;
}

/// What a resharded load reads: the f32 values (bf16 copies are recomputed
/// from the masters).
bool reshardable(const BufferInfo &b) { return checkpointed(b) && b.kind != BufferKind::ParamCopy; }

/// A checkpoint tensor a resharded load recomputes instead of reading
/// ("param_copy/<name>...", the bf16 copies).
bool recomputedOnLoad(const std::string &tensor) {
  const std::string prefix = std::string(bufferKindName(BufferKind::ParamCopy)) + "/";
  return tensor.rfind(prefix, 0) == 0;
}

/// Runs `f` on this rank; every rank learns whether all succeeded, and the
/// ranks that did not fail report that a peer did.
template <typename F> void collectively(Communicator &comm, const char *what, F &&f) {
  std::string err;
  try {
    f();
  } catch (const Error &e) {
    err = e.what();
  } catch (const std::exception &e) {
    err = concat("checkpoint: ", what, ": ", e.what());
  }
  if (comm.allOk(err.empty(), what))
    return;
  // When every rank failed (a checkpoint of another configuration, say),
  // rank 0 alone reports; otherwise the failing ranks do.
  if (comm.allOk(!err.empty(), what))
    throw UniformError(err);
  if (!err.empty())
    throw Error(err);
  fail("checkpoint: another rank failed during the ", what);
}

/// A rank's file of a checkpoint: mapped and its header parsed when first
/// opened, its whole checksum verified before any of its values is used (a
/// resharded load opens the files its elements are in; without index.json,
/// the headers of every file).
struct CheckpointFile {
  int64_t rank = 0;
  fs::path path;
  uint64_t checksum = 0, bytes = 0;
  std::shared_ptr<MappedFile> file;
  Safetensors tensors;
  bool verified = false;

  const Safetensors &open() {
    if (file)
      return tensors;
    file = MappedFile::open(path.string(), "checkpoint file");
    if (file->size() != bytes)
      fail("checkpoint file '", path.string(), "' is damaged: ", file->size(),
           " bytes, the manifest says ", bytes);
    tensors = Safetensors::parse(file->data(), file->size(),
                                 "checkpoint file '" + path.string() + "'");
    return tensors;
  }
  const Safetensors &verify() {
    open();
    if (!verified) {
      uint64_t sum = checksum64(file->data(), file->size());
      if (sum != checksum)
        fail("checkpoint file '", path.string(), "' is damaged: checksum ", hex64(sum),
             " does not match the manifest's ", hex64(checksum));
      verified = true;
    }
    return tensors;
  }
};

/// Another plan may resume a checkpoint when it trains the same parameters
/// on the same data (modelIdentity()).
void checkSameModel(const fs::path &S, const nlohmann::json &model, const Plan &plan) {
  const nlohmann::json mine = modelIdentity(plan);
  for (const char *k : {"seq", "global_batch"})
    if (!model.contains(k) || model[k] != mine[k])
      fail("checkpoint '", S.string(), "' was written with ", k, " ",
           model.contains(k) ? model[k].dump() : std::string("?"), ", this plan '", plan.path,
           "' has ", mine[k].dump(),
           ": another sequence length or global batch would change the data each step reads "
           "(canonical sampling)");
  std::map<std::string, nlohmann::json> theirs;
  if (model.contains("params") && model["params"].is_array())
    for (const nlohmann::json &p : model["params"])
      if (p.is_object() && p.contains("name") && p["name"].is_string())
        theirs[p["name"].get<std::string>()] = p.value("shape", nlohmann::json());
  for (const ParamInfo &p : plan.params) {
    auto it = theirs.find(p.name);
    if (it == theirs.end())
      fail("checkpoint '", S.string(), "' has no parameter '", p.name, "' of this plan '",
           plan.path, "' (another model?)");
    if (it->second != nlohmann::json(p.shape)) {
      std::string theirs = it->second.dump();
      try {
        theirs = shapeStr(it->second.get<Dims>());
      } catch (const nlohmann::json::exception &) {
      }
      fail("checkpoint '", S.string(), "' holds parameter '", p.name, "' with shape ", theirs,
           ", this plan '", plan.path, "' has ", shapeStr(p.shape));
    }
    theirs.erase(it);
  }
  if (!theirs.empty())
    fail("checkpoint '", S.string(), "' has parameter '", theirs.begin()->first,
         "', which this plan '", plan.path, "' does not (another model?)");
}

/// A tensor of a checkpoint file: elements [first, first + count) of one
/// kind of one parameter's values ("adam_m/wte@416": adam_m of wte from 416).
struct Piece {
  CheckpointFile *file;
  std::string tensor;
  int64_t first, count;
};
/// "adam_m/wte" -> its pieces, in file order.
using Pieces = std::map<std::string, std::vector<Piece>>;

void addPiece(Pieces &pieces, CheckpointFile &f, const std::string &name, int64_t count) {
  std::string key = name;
  int64_t first = 0;
  if (size_t at = name.rfind('@'); at != std::string::npos) {
    key = name.substr(0, at);
    try {
      first = std::stoll(name.substr(at + 1));
    } catch (const std::exception &) {
      fail("checkpoint file '", f.path.string(), "': tensor name '", name,
           "' has no element offset after its '@'");
    }
  }
  if (recomputedOnLoad(name))
    return;
  pieces[key].push_back({&f, name, first, count});
}

/// The pieces from every file's header (a checkpoint without index.json:
/// every file is opened).
Pieces piecesFromHeaders(std::vector<CheckpointFile> &files) {
  Pieces pieces;
  for (CheckpointFile &f : files)
    for (const auto &[name, e] : f.open().tensors) {
      if (!recomputedOnLoad(name) && e.dtype != "F32")
        fail("checkpoint file '", f.path.string(), "': tensor '", name, "' is ", e.dtype,
             ", expected F32");
      addPiece(pieces, f, name, (int64_t)(e.bytes / sizeof(float)));
    }
  return pieces;
}

/// The pieces index.json lists (verified against the manifest's checksum);
/// the files themselves are opened only when their values are read.
Pieces piecesFromIndex(const fs::path &S, const nlohmann::json &entry,
                       std::vector<CheckpointFile> &files) {
  const std::string what = "checkpoint '" + S.string() + "': ";
  if (!entry.is_object() || !entry.contains("file") || !entry["file"].is_string() ||
      !entry.contains("xxh3_64") || !entry["xxh3_64"].is_string())
    fail(what, "manifest.json field 'index' must name a file and its xxh3_64");
  const fs::path path = S / entry["file"].get<std::string>();
  auto file = MappedFile::open(path.string(), "checkpoint index");
  uint64_t want = 0;
  if (entry.contains("bytes") && entry["bytes"] != file->size())
    fail("checkpoint index '", path.string(), "' is damaged: ", file->size(),
         " bytes, the manifest says ", entry["bytes"].dump());
  if (!parseHex64(entry["xxh3_64"].get<std::string>(), want) ||
      checksum64(file->data(), file->size()) != want)
    fail("checkpoint index '", path.string(),
         "' is damaged: its checksum does not match the manifest's");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(file->data(), file->data() + file->size());
  } catch (const nlohmann::json::exception &e) {
    fail("checkpoint index '", path.string(), "' is not JSON: ", e.what());
  }
  if (!index.is_object() || !index.contains("format") || index["format"] != kIndexFormat ||
      !index.contains("files") || !index["files"].is_array() ||
      index["files"].size() != files.size())
    fail("checkpoint index '", path.string(), "' is not an index of the manifest's ", files.size(),
         " files");
  Pieces pieces;
  for (size_t i = 0; i < files.size(); ++i) {
    const nlohmann::json &held = index["files"][i];
    if (!held.is_object())
      fail("checkpoint index '", path.string(), "': files[", i, "] is not an object");
    for (const auto &[name, count] : held.items()) {
      if (!count.is_number_integer() || count.get<int64_t>() < 0)
        fail("checkpoint index '", path.string(), "': files[", i, "].", name,
             " must be an element count, got ", count.dump());
      addPiece(pieces, files[i], name, count.get<int64_t>());
    }
  }
  return pieces;
}

/// Fills every checkpointed buffer of `rank` from the elements the files
/// hold, whatever layout wrote them: tensors are named by kind, parameter
/// and first element ("adam_m/wte@416"), so each file's pieces cover known
/// element ranges of their parameter (ZeRO padding past the end ignored).
/// An element several files hold (replicas) is read from the first; a file
/// none of whose pieces is read is not opened. bf16 copies are the f32
/// masters rounded, as adamw writes them.
void loadResharded(const fs::path &S, Pieces &pieces, const Plan &plan, const RankPlan &rank,
                   Arena &arena) {
  for (const BufferInfo &b : rank.buffers) {
    if (!checkpointed(b))
      continue;
    const ParamInfo *pi = plan.findParam(b.param);
    if (!pi)
      fail("plan '", plan.path, "': buffer '", b.name, "' names no parameter");
    const int64_t total = numElements(pi->shape);
    const std::string key =
        std::string(b.kind == BufferKind::ParamCopy ? "param" : bufferKindName(b.kind)) + "/" +
        b.param;
    std::vector<float> values(b.numel, 0.0f);
    std::vector<bool> have(b.numel, false);
    const int64_t lo = b.elemOffset, hi = std::min(b.elemOffset + b.numel, total);
    for (const Piece &pc : pieces[key]) {
      int64_t from = std::max(lo, pc.first), to = std::min(hi, pc.first + pc.count);
      if (from >= to)
        continue;
      const auto haveFrom = have.begin() + (from - lo), haveTo = have.begin() + (to - lo);
      if (std::all_of(haveFrom, haveTo, [](bool h) { return h; }))
        continue; // a replica's copy, read from another file
      const SafetensorsEntry *e = pc.file->verify().find(pc.tensor);
      if (!e || e->dtype != "F32" || e->bytes != (uint64_t)pc.count * sizeof(float))
        fail("checkpoint file '", pc.file->path.string(), "' does not hold ", pc.count,
             " F32 values as tensor '", pc.tensor, "' (as index.json says)");
      std::memcpy(values.data() + (from - lo), e->data + (from - pc.first) * sizeof(float),
                  (to - from) * sizeof(float));
      std::fill(have.begin() + (from - lo), have.begin() + (to - lo), true);
    }
    for (int64_t i = lo; i < hi; ++i)
      if (!have[i - lo]) {
        int64_t j = i;
        while (j < hi && !have[j - lo])
          ++j;
        fail("checkpoint '", S.string(), "' holds no ", key.substr(0, key.find('/')),
             " value for elements ", i, "..", j, " of parameter '", b.param, "'");
      }
    TensorRef t = arena.tensor(b);
    if (b.kind == BufferKind::ParamCopy) {
      uint16_t *out = t.as<uint16_t>();
      for (int64_t i = 0; i < b.numel; ++i)
        out[i] = floatToBf16(values[i]);
    } else {
      std::memcpy(t.data, values.data(), b.numel * sizeof(float));
    }
  }
}

} // namespace

std::string writeCheckpoint(const std::string &dir, const CheckpointState &state, const Plan &plan,
                            const RankPlan &rank, const Arena &arena, Communicator &comm) {
  const std::string stepName = "step-" + std::to_string(state.step);
  const fs::path D(dir), tmp = D / ("." + stepName + ".tmp"), final = D / stepName;

  collectively(comm, "checkpoint directory setup", [&] {
    if (comm.rank() != 0)
      return;
    fs::create_directories(D);
    fs::remove_all(tmp);
    fs::create_directory(tmp);
  });

  uint64_t info[2] = {0, 0}; // checksum, bytes
  const std::string fileName = "rank-" + std::to_string(rank.rank) + ".safetensors";
  nlohmann::json held = nlohmann::json::object(); // this file's entry of index.json
  collectively(comm, "checkpoint file write", [&] {
    SafetensorsWriter w;
    for (const BufferInfo &b : rank.buffers)
      if (checkpointed(b)) {
        TensorRef t = arena.tensor(b);
        w.add(tensorName(b), safetensorsDType(b.dtype), b.shape, t.data, t.bytes());
        if (reshardable(b))
          held[tensorName(b)] = b.numel;
      }
    w.setMetadata("format", kFormat);
    w.setMetadata("step", std::to_string(state.step));
    w.setMetadata("rank", std::to_string(rank.rank));
    w.setMetadata("rng_state", hex64(state.rngState));
    w.setMetadata("plan_checksum", hex64(plan.checksum));
    fs::path part = tmp / (fileName + ".tmp");
    int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      fail("checkpoint: cannot create '", part.string(), "': ", std::strerror(errno));
    try {
      info[0] = w.write(fd, "checkpoint file '" + part.string() + "'");
    } catch (...) {
      ::close(fd);
      throw;
    }
    info[1] = w.size();
    if (::fsync(fd) != 0 || ::close(fd) != 0)
      fail("checkpoint: cannot sync '", part.string(), "': ", std::strerror(errno));
    renameOrFail(part, tmp / fileName);
  });

  std::vector<uint64_t> all = comm.gather(info, 2, "checkpoint checksums");
  std::vector<std::string> indexes = comm.gatherText(held.dump(), "checkpoint index");
  collectively(comm, "checkpoint commit", [&] {
    if (comm.rank() != 0)
      return;
    nlohmann::json m;
    m["format"] = kFormat;
    m["version"] = kVersion;
    m["step"] = state.step;
    m["plan"] = {{"path", plan.path}, {"checksum", hex64(plan.checksum)}};
    m["world_size"] = comm.size();
    m["parallel"] = parallelConfig(plan);
    m["model"] = modelIdentity(plan);
    m["rng_state"] = hex64(state.rngState);
    m["run"] = state.run;
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < comm.size(); ++r)
      files.push_back({{"rank", r},
                       {"file", "rank-" + std::to_string(r) + ".safetensors"},
                       {"bytes", all[2 * r + 1]},
                       {"xxh3_64", hex64(all[2 * r])}});
    m["files"] = files;
    // What each file holds, for another plan's resume: read instead of every
    // file's header, it opens only the files that hold its elements.
    std::string index = std::string("{\"format\":\"") + kIndexFormat + "\",\"files\":[";
    for (size_t r = 0; r < indexes.size(); ++r)
      index += (r ? ",\n" : "\n") + indexes[r];
    index += "\n]}\n";
    writeFileAtomically((tmp / kIndexFile).string(), index, "checkpoint");
    m["index"] = {{"file", kIndexFile},
                  {"bytes", index.size()},
                  {"xxh3_64", hex64(checksum64(index.data(), index.size()))}};
    writeFileAtomically((tmp / "manifest.json").string(), m.dump(2) + "\n", "checkpoint");
    fsyncPath(tmp, true);
    fs::path old;
    if (fs::exists(final)) {
      old = D / ("." + stepName + ".old");
      fs::remove_all(old);
      renameOrFail(final, old);
    }
    renameOrFail(tmp, final);
    fsyncPath(D, true);
    if (!old.empty())
      fs::remove_all(old);
    writeFileAtomically((D / "latest").string(), stepName + "\n", "checkpoint");
    fsyncPath(D, true);
  });
  return final.string();
}

/// The complete step directories under `dir`, by step.
static std::map<int64_t, fs::path> completeCheckpoints(const std::string &dir) {
  std::map<int64_t, fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return out;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !e.is_directory())
      continue;
    std::string num = name.substr(5);
    if (num.empty() || num.size() > 18 || num.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (!fs::exists(e.path() / "manifest.json"))
      continue;
    out[std::stoll(num)] = e.path();
  }
  return out;
}

std::optional<std::string> findLatestCheckpoint(const std::string &dir) {
  auto all = completeCheckpoints(dir);
  if (all.empty())
    return std::nullopt;
  return all.rbegin()->second.string();
}

int pruneCheckpoints(const std::string &dir, int64_t keep) {
  auto all = completeCheckpoints(dir);
  int removed = 0;
  for (auto it = all.begin(); (int64_t)all.size() - removed > keep && it != all.end(); ++it) {
    // Renamed aside first: a step directory is whole or absent, never half removed.
    fs::path aside = it->second.parent_path() / ("." + it->second.filename().string() + ".old");
    fs::remove_all(aside);
    renameOrFail(it->second, aside);
    fs::remove_all(aside);
    ++removed;
  }
  return removed;
}

CheckpointState loadCheckpoint(const std::string &dir, const Plan &plan, const RankPlan &rank,
                               Arena &arena, Communicator &comm, std::string &loadedFrom) {
  CheckpointState st;
  collectively(comm, "checkpoint load", [&] {
    auto found = findLatestCheckpoint(dir);
    if (!found)
      fail("--resume: no complete checkpoint in '", dir, "' (expected ", dir,
           "/step-<s>/manifest.json)");
    loadedFrom = *found;
    fs::path S(*found);
    nlohmann::json m;
    {
      std::ifstream in(S / "manifest.json");
      std::stringstream ss;
      ss << in.rdbuf();
      try {
        m = nlohmann::json::parse(ss.str());
      } catch (const nlohmann::json::exception &e) {
        fail("checkpoint '", S.string(), "': manifest.json is damaged: ", e.what());
      }
    }
    auto need = [&](const char *key) -> const nlohmann::json & {
      if (!m.is_object() || !m.contains(key))
        fail("checkpoint '", S.string(), "': manifest.json has no '", key, "'");
      return m[key];
    };
    // Typed reads that name the field (an edited manifest.json would
    // otherwise surface as a bare "type must be string, but is number").
    auto typed = [&](const nlohmann::json &v, const std::string &field, bool ok,
                     const char *want) -> const nlohmann::json & {
      if (!ok)
        fail("checkpoint '", S.string(), "': manifest.json field '", field, "' must be ", want,
             ", got ", v.dump());
      return v;
    };
    auto text = [&](const nlohmann::json &v, const std::string &field) {
      return typed(v, field, v.is_string(), "a string").get<std::string>();
    };
    auto count = [&](const nlohmann::json &v, const std::string &field) {
      return typed(v, field, v.is_number_integer() && v.get<int64_t>() >= 0,
                   "a non-negative integer")
          .get<int64_t>();
    };
    if (need("format") != kFormat)
      fail("checkpoint '", S.string(), "' is not a PipeMesh checkpoint");
    if (need("version") != kVersion)
      fail("checkpoint '", S.string(), "' is a version ", need("version").dump(),
           " PipeMesh checkpoint, this pipemesh-run reads version ", kVersion,
           " (resume it with the pipemesh-run and plan that wrote it)");
    uint64_t planSum = 0;
    const nlohmann::json &planEntry = typed(need("plan"), "plan", m["plan"].is_object(),
                                            "an object");
    if (!planEntry.contains("checksum") ||
        !parseHex64(text(planEntry["checksum"], "plan.checksum"), planSum))
      fail("checkpoint '", S.string(), "': manifest.json has no plan checksum");
    // The plan that wrote it: each rank reads its own file. Another plan of
    // the same model (another pp / dp / zero / schedule ...): every rank
    // gathers its buffers' elements from whichever files hold them.
    const bool samePlan = planSum == plan.checksum;
    if (samePlan) {
      if (m.contains("parallel")) {
        nlohmann::json mine = parallelConfig(plan);
        for (const char *k : {"world_size", "pp", "dp", "zero"})
          if (!m["parallel"].contains(k) || m["parallel"][k] != mine[k])
            fail("checkpoint '", S.string(), "' was written by a ", configText(m["parallel"]),
                 " job; this plan '", plan.path, "' is ", configText(mine),
                 " but has the same checksum");
      }
      const int64_t worldSize = count(need("world_size"), "world_size");
      if (worldSize != comm.size())
        fail("checkpoint '", S.string(), "' was written by ", worldSize,
             " ranks, this job has ", comm.size(), ": resume needs the same configuration");
    } else {
      if (!m.contains("model"))
        fail("checkpoint '", S.string(), "' was written for another plan (checksum ",
             hex64(planSum), ", this plan '", plan.path, "' has ", hex64(plan.checksum),
             ") and records no model to reshard it by (an older pipemesh-run wrote it)");
      checkSameModel(S, m["model"], plan);
      st.reshardedFrom = m.contains("parallel") ? configText(m["parallel"]) : "another";
    }
    st.step = count(need("step"), "step");
    if (!parseHex64(text(need("rng_state"), "rng_state"), st.rngState))
      fail("checkpoint '", S.string(), "': bad rng_state");
    st.run = m.value("run", nlohmann::json::object());
    typed(st.run, "run", st.run.is_object(), "an object");
    const nlohmann::json &files = typed(need("files"), "files", m["files"].is_array(), "a list");
    std::vector<CheckpointFile> listed;
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string at = "files[" + std::to_string(i) + "]";
      const nlohmann::json &f = typed(files[i], at, files[i].is_object(), "an object");
      auto field = [&](const char *key) -> const nlohmann::json & {
        if (!f.contains(key))
          fail("checkpoint '", S.string(), "': manifest.json: ", at, " has no '", key, "'");
        return f[key];
      };
      CheckpointFile cf;
      cf.rank = count(field("rank"), at + ".rank");
      cf.path = S / text(field("file"), at + ".file");
      if (!parseHex64(text(field("xxh3_64"), at + ".xxh3_64"), cf.checksum))
        fail("checkpoint '", S.string(), "': bad checksum for rank ", cf.rank);
      cf.bytes = (uint64_t)count(field("bytes"), at + ".bytes");
      listed.push_back(std::move(cf));
    }
    if (samePlan) {
      auto own = std::find_if(listed.begin(), listed.end(),
                              [&](const CheckpointFile &f) { return f.rank == rank.rank; });
      if (own == listed.end())
        fail("checkpoint '", S.string(), "' lists no file for rank ", rank.rank);
      const Safetensors &t = own->verify();
      for (const BufferInfo &b : rank.buffers) {
        if (!checkpointed(b))
          continue;
        std::string name = tensorName(b);
        const SafetensorsEntry *e = t.find(name);
        if (!e)
          fail("checkpoint file '", own->path.string(), "' has no tensor '", name, "'");
        if (e->dtype != safetensorsDType(b.dtype) || e->bytes != b.bytes)
          fail("checkpoint file '", own->path.string(), "': tensor '", name, "' is ", e->dtype,
               " ", shapeStr(e->shape), ", the plan's buffer is ", dtypeName(b.dtype), " ",
               shapeStr(b.shape));
        std::memcpy(arena.tensor(b).data, e->data, b.bytes);
      }
    } else {
      Pieces pieces = m.contains("index") ? piecesFromIndex(S, m["index"], listed)
                                          : piecesFromHeaders(listed);
      loadResharded(S, pieces, plan, rank, arena);
    }
  });
  return st;
}

} // namespace pipemesh::rt

//===- Checkpoint.cpp - atomic, checksummed checkpoints ---------------------===//
#include "pipemesh/runtime/Checkpoint.h"

#include "pipemesh/runtime/AtomicFile.h"
#include "pipemesh/runtime/Checksum.h"
#include "pipemesh/runtime/Communicator.h"
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/MappedFile.h"
#include "pipemesh/runtime/Safetensors.h"

#include <cerrno>
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

bool checkpointed(const BufferInfo &b) {
  return b.kind == BufferKind::Param || b.kind == BufferKind::ParamCopy ||
         b.kind == BufferKind::AdamM || b.kind == BufferKind::AdamV;
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
  collectively(comm, "checkpoint file write", [&] {
    SafetensorsWriter w;
    for (const BufferInfo &b : rank.buffers)
      if (checkpointed(b)) {
        TensorRef t = arena.tensor(b);
        w.add(tensorName(b), safetensorsDType(b.dtype), b.shape, t.data, t.bytes());
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
    m["rng_state"] = hex64(state.rngState);
    m["run"] = state.run;
    nlohmann::json files = nlohmann::json::array();
    for (int r = 0; r < comm.size(); ++r)
      files.push_back({{"rank", r},
                       {"file", "rank-" + std::to_string(r) + ".safetensors"},
                       {"bytes", all[2 * r + 1]},
                       {"xxh3_64", hex64(all[2 * r])}});
    m["files"] = files;
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

std::optional<std::string> findLatestCheckpoint(const std::string &dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return std::nullopt;
  int64_t best = -1;
  std::string bestPath;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !e.is_directory())
      continue;
    std::string num = name.substr(5);
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (!fs::exists(e.path() / "manifest.json"))
      continue;
    int64_t s = std::stoll(num);
    if (s > best) {
      best = s;
      bestPath = e.path().string();
    }
  }
  if (best < 0)
    return std::nullopt;
  return bestPath;
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
    // Same configuration only: a checkpoint's files are this layout's shards
    // (resharding to another pp / dp / zero is not supported).
    if (m.contains("parallel")) {
      nlohmann::json mine = parallelConfig(plan);
      for (const char *k : {"world_size", "pp", "dp", "zero"})
        if (!m["parallel"].contains(k) || m["parallel"][k] != mine[k])
          fail("checkpoint '", S.string(), "' was written by a ", configText(m["parallel"]),
               " job; this plan '", plan.path, "' is ", configText(mine),
               ": resume needs the same configuration (its files are that layout's shards)");
    }
    const int64_t worldSize = count(need("world_size"), "world_size");
    if (worldSize != comm.size())
      fail("checkpoint '", S.string(), "' was written by ", worldSize,
           " ranks, this job has ", comm.size(), ": resume needs the same configuration");
    uint64_t planSum = 0;
    const nlohmann::json &planEntry = typed(need("plan"), "plan", m["plan"].is_object(),
                                            "an object");
    if (!planEntry.contains("checksum") ||
        !parseHex64(text(planEntry["checksum"], "plan.checksum"), planSum))
      fail("checkpoint '", S.string(), "': manifest.json has no plan checksum");
    if (planSum != plan.checksum)
      fail("checkpoint '", S.string(), "' was written for another plan (checksum ", hex64(planSum),
           ", this plan '", plan.path, "' has ", hex64(plan.checksum), ")");
    st.step = count(need("step"), "step");
    if (!parseHex64(text(need("rng_state"), "rng_state"), st.rngState))
      fail("checkpoint '", S.string(), "': bad rng_state");
    st.run = m.value("run", nlohmann::json::object());
    typed(st.run, "run", st.run.is_object(), "an object");
    const nlohmann::json &files = typed(need("files"), "files", m["files"].is_array(), "a list");
    const nlohmann::json *entry = nullptr;
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string at = "files[" + std::to_string(i) + "]";
      const nlohmann::json &f = typed(files[i], at, files[i].is_object(), "an object");
      if (f.contains("rank") && count(f["rank"], at + ".rank") == rank.rank)
        entry = &f;
    }
    if (!entry)
      fail("checkpoint '", S.string(), "' lists no file for rank ", rank.rank);
    const std::string at = "files[rank " + std::to_string(rank.rank) + "]";
    auto field = [&](const char *key) -> const nlohmann::json & {
      if (!entry->contains(key))
        fail("checkpoint '", S.string(), "': manifest.json: ", at, " has no '", key, "'");
      return (*entry)[key];
    };
    fs::path file = S / text(field("file"), at + ".file");
    uint64_t wantSum = 0;
    if (!parseHex64(text(field("xxh3_64"), at + ".xxh3_64"), wantSum))
      fail("checkpoint '", S.string(), "': bad checksum for rank ", rank.rank);
    auto mf = MappedFile::open(file.string(), "checkpoint file");
    uint64_t wantBytes = (uint64_t)count(field("bytes"), at + ".bytes");
    if (mf->size() != wantBytes)
      fail("checkpoint file '", file.string(), "' is damaged: ", mf->size(),
           " bytes, the manifest says ", wantBytes);
    uint64_t sum = checksum64(mf->data(), mf->size());
    if (sum != wantSum)
      fail("checkpoint file '", file.string(), "' is damaged: checksum ", hex64(sum),
           " does not match the manifest's ", hex64(wantSum));
    Safetensors t =
        Safetensors::parse(mf->data(), mf->size(), "checkpoint file '" + file.string() + "'");
    for (const BufferInfo &b : rank.buffers) {
      if (!checkpointed(b))
        continue;
      std::string name = tensorName(b);
      const SafetensorsEntry *e = t.find(name);
      if (!e)
        fail("checkpoint file '", file.string(), "' has no tensor '", name, "'");
      if (e->dtype != safetensorsDType(b.dtype) || e->bytes != b.bytes)
        fail("checkpoint file '", file.string(), "': tensor '", name, "' is ", e->dtype, " ",
             shapeStr(e->shape), ", the plan's buffer is ", dtypeName(b.dtype), " ",
             shapeStr(b.shape));
      std::memcpy(arena.tensor(b).data, e->data, b.bytes);
    }
  });
  return st;
}

} // namespace pipemesh::rt

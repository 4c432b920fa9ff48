//===- PlanContainer.cpp - the plan container's checksum and checks -------===//
//
// XXH3-64 from libxxhash, the function pipemesh-run checks (runtime/lib/plan/
// Checksum.cpp); inlined from the header so no shared library is needed.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Plan/PlanFormat.h"

#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pipemesh::plan {

uint64_t planChecksum(llvm::StringRef manifest, llvm::StringRef weights) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, manifest.data(), manifest.size());
  XXH3_64bits_update(&state, weights.data(), weights.size());
  return XXH3_64bits_digest(&state);
}

bool readPlanContainer(llvm::StringRef path, llvm::StringRef tool, PlanContainer &out,
                       std::string &why) {
  // Slices may be mapped, not read: past the end of the file their pages
  // would fault. So every length is checked against the file's size first.
  uint64_t fileSize = 0;
  if (std::error_code ec = llvm::sys::fs::file_size(path, fileSize)) {
    why = "cannot read plan '" + path.str() + "': " + ec.message();
    return false;
  }
  if (fileSize < kPlanHeaderBytes) {
    why = "'" + path.str() + "' is not a PipeMesh plan (" + std::to_string(fileSize) +
          " bytes, shorter than the header)";
    return false;
  }
  auto head = llvm::MemoryBuffer::getFileSlice(path, kPlanHeaderBytes, 0);
  if (!head) {
    why = "cannot read plan '" + path.str() + "': " + head.getError().message();
    return false;
  }
  llvm::StringRef h = (*head)->getBuffer();
  if (h.size() < kPlanHeaderBytes || h.substr(0, 8) != llvm::StringRef(kPlanMagic, 8)) {
    why = "'" + path.str() + "' is not a PipeMesh plan (bad magic)";
    return false;
  }
  auto u32 = [&](size_t at) { return llvm::support::endian::read32le(h.data() + at); };
  auto u64 = [&](size_t at) { return llvm::support::endian::read64le(h.data() + at); };
  if (u32(8) != kPlanFormatVersion) {
    why = "plan '" + path.str() + "': format version " + std::to_string(u32(8)) + ", this " +
          tool.str() + " reads version " + std::to_string(kPlanFormatVersion) +
          " (recompile it with a matching pipemesh-opt)";
    return false;
  }
  const uint64_t manifestLen = u64(16), weightsLen = u64(24);
  const uint64_t body = fileSize - kPlanHeaderBytes;
  if (manifestLen > body || weightsLen > body - manifestLen) {
    why = "plan '" + path.str() + "' is truncated: the header announces " +
          std::to_string(manifestLen) + " manifest + " + std::to_string(weightsLen) +
          " weight bytes but only " + std::to_string(body) + " follow";
    return false;
  }
  if (manifestLen + weightsLen != body) {
    why = "plan '" + path.str() + "' has " + std::to_string(body - manifestLen - weightsLen) +
          " bytes past the " + std::to_string(manifestLen) + " manifest + " +
          std::to_string(weightsLen) + " weight bytes its header announces";
    return false;
  }
  // The checksum covers the weights too, so the whole body is read (mapped).
  auto whole = llvm::MemoryBuffer::getFileSlice(path, body, kPlanHeaderBytes);
  if (!whole || (*whole)->getBufferSize() != body) {
    why = "plan '" + path.str() + "': cannot read its " + std::to_string(body) + " bytes";
    return false;
  }
  llvm::StringRef bytes = (*whole)->getBuffer();
  if (planChecksum(bytes.take_front(manifestLen), bytes.drop_front(manifestLen)) != u64(32)) {
    why = "plan '" + path.str() + "' is damaged: its checksum does not match the one in its "
          "header";
    return false;
  }
  out.manifest = bytes.take_front(manifestLen);
  out.weights = bytes.drop_front(manifestLen);
  out.file = std::move(*whole);
  return true;
}

bool checkPlanManifest(const llvm::json::Object &m, llvm::StringRef path, llvm::StringRef tool,
                       std::string &why) {
  if (m.getString("format") != "pipemesh-plan") {
    why = "plan '" + path.str() + "': the manifest is not a pipemesh-plan";
    return false;
  }
  if (m.getInteger("version") != (int64_t)kPlanFormatVersion) {
    why = "plan '" + path.str() + "' has plan format version " +
          (m.getInteger("version") ? std::to_string(*m.getInteger("version"))
                                   : std::string("(none)")) +
          " in its manifest, this " + tool.str() + " reads " +
          std::to_string(kPlanFormatVersion);
    return false;
  }
  if (const llvm::json::Object *par = m.getObject("parallel"))
    if (const llvm::json::Value *dc = par->get("dp_collectives")) {
      std::optional<llvm::StringRef> s = dc->getAsString();
      if (!s || (*s != "flat" && *s != "hierarchical")) {
        std::string got;
        llvm::raw_string_ostream os(got);
        os << *dc;
        why = "plan '" + path.str() + "': parallel.dp_collectives must be \"flat\" or " +
              "\"hierarchical\", got " + got;
        return false;
      }
    }
  return true;
}

} // namespace pipemesh::plan

//===- PlanFormat.h - the plan container: constants and reader --*- C++ -*-===//
//
// What the compiler writes and its readers (--print-plan, pipemesh-sim) check
// first; docs/plan-format.md. pipemesh-run, which links no LLVM, states the
// same in runtime/include/pipemesh/runtime/Plan.h.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_PLAN_PLANFORMAT_H
#define PIPEMESH_PLAN_PLANFORMAT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <string>

namespace pipemesh::plan {

/// 2: the checksum is XXH3-64 (was FNV-1a 64). 3: attention may carry
/// `window` and `softcap`, which a version-2 runtime would ignore.
constexpr uint32_t kPlanFormatVersion = 3;
constexpr char kPlanMagic[8] = {'P', 'M', 'P', 'L', 'A', 'N', 0, 0};
/// magic, version, reserved, manifest and weight lengths, checksum.
constexpr uint64_t kPlanHeaderBytes = 40;

/// The plan container's checksum: XXH3-64 of the manifest bytes followed by
/// the weight bytes (docs/plan-format.md). In PMeshPlanFormat, which links
/// only LLVM Support, so that pipemesh-sim's loader checks it too.
uint64_t planChecksum(llvm::StringRef manifest, llvm::StringRef weights);

/// A plan file whose container checked out; `manifest` (JSON text, not yet
/// parsed) and `weights` view into `file`.
struct PlanContainer {
  std::unique_ptr<llvm::MemoryBuffer> file;
  llvm::StringRef manifest, weights;
};

/// Reads `path` and checks its container: the magic, the format version
/// (`tool` names the reader in the message), the lengths its header announces
/// against the file's size (before anything past them is mapped) and the
/// checksum. On failure `why` names the file and what is wrong with it.
bool readPlanContainer(llvm::StringRef path, llvm::StringRef tool, PlanContainer &out,
                       std::string &why);

/// The manifest's own format checks, as pipemesh-run makes them: `format`,
/// `version` (the container's, again) and `parallel.dp_collectives` (absent,
/// "flat" or "hierarchical"). False with `why` naming `path`.
bool checkPlanManifest(const llvm::json::Object &manifest, llvm::StringRef path,
                       llvm::StringRef tool, std::string &why);

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_PLANFORMAT_H

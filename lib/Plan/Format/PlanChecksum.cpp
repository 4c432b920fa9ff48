//===- PlanChecksum.cpp - the plan container's checksum -------------------===//
//
// XXH3-64 from libxxhash, the function pipemesh-run checks (runtime/lib/plan/
// Checksum.cpp); inlined from the header so no shared library is needed.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Plan/PlanFormat.h"

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

} // namespace pipemesh::plan

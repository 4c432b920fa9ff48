//===- AtomicFile.h - whole files replaced atomically -----------*- C++ -*-===//
#ifndef PIPEMESH_RUNTIME_ATOMICFILE_H
#define PIPEMESH_RUNTIME_ATOMICFILE_H

#include <string>

namespace pipemesh::rt {

/// Writes `text` to `path` as a whole: into `path`.tmp, fsync, renamed over
/// `path`, so a reader (or a crash) sees the old file or the new one, never a
/// part. `what` names the file in errors ("checkpoint", "--log-json file").
void writeFileAtomically(const std::string &path, const std::string &text,
                         const std::string &what);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_ATOMICFILE_H

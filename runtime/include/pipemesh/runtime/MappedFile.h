//===- MappedFile.h - read-only memory-mapped files -------------*- C++ -*-===//
#ifndef PIPEMESH_RUNTIME_MAPPEDFILE_H
#define PIPEMESH_RUNTIME_MAPPEDFILE_H

#include <cstdint>
#include <memory>
#include <string>

namespace pipemesh::rt {

/// A whole file mapped read-only. `what` names it in errors ("plan", "data
/// file"): a missing or unreadable file is an Error naming the path.
class MappedFile {
public:
  static std::shared_ptr<MappedFile> open(const std::string &path, const std::string &what);
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const uint8_t *data() const { return bytes; }
  uint64_t size() const { return length; }
  const std::string &path() const { return filePath; }

private:
  MappedFile() = default;
  const uint8_t *bytes = nullptr;
  uint64_t length = 0;
  std::string filePath;
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_MAPPEDFILE_H

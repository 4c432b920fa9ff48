//===- Safetensors.h - safetensors blobs (read and write) -------*- C++ -*-===//
//
// The format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "string value", ...}}
// then the data, offsets relative to its start. Parsed here by hand (the JSON
// with nlohmann::json); dtypes F32, F64, I64, I32, BOOL and U8 are accepted.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_SAFETENSORS_H
#define PIPEMESH_RUNTIME_SAFETENSORS_H

#include "pipemesh/runtime/DType.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pipemesh::rt {

struct SafetensorsEntry {
  std::string dtype; ///< "F32", "I64", "BOOL", "U8", ...
  Dims shape;
  const uint8_t *data = nullptr; ///< points into the parsed blob
  uint64_t bytes = 0;
};

/// A parsed view of a safetensors blob; the blob must outlive it.
struct Safetensors {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;

  /// Parses `size` bytes at `data`. `what` names the blob in errors
  /// ("plan weights", "checkpoint ckpt/step-5/rank-0.safetensors").
  static Safetensors parse(const uint8_t *data, uint64_t size, const std::string &what);

  const SafetensorsEntry *find(const std::string &name) const;
};

/// Element size of a safetensors dtype name (0 when unknown).
size_t safetensorsDTypeSize(const std::string &dtype);
/// The safetensors dtype holding a plan dtype ("F32", "I64", "BOOL" for i1, ...).
const char *safetensorsDType(DType t);

/// Writes a safetensors blob from tensors that stay in memory until written
/// (tensors in insertion order, the header padded with spaces to a multiple of
/// 8 bytes). Nothing is copied: a checkpoint streams the arena to the file.
class SafetensorsWriter {
public:
  /// `data` must stay valid until write() returns.
  void add(const std::string &name, const std::string &dtype, const Dims &shape, const void *data,
           uint64_t bytes);
  void setMetadata(const std::string &key, const std::string &value) { metadata[key] = value; }
  /// Total size of the blob write() produces.
  uint64_t size() const;
  /// Writes the blob to `fd`, returning its checksum64. Throws Error
  /// naming `what` on an I/O failure.
  uint64_t write(int fd, const std::string &what) const;

private:
  std::string header() const;
  struct Item {
    std::string name, dtype;
    Dims shape;
    const void *data;
    uint64_t bytes;
  };
  std::vector<Item> items;
  std::map<std::string, std::string> metadata;
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_SAFETENSORS_H

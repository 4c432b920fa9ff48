//===- TokenData.h - training tokens (llm.c shards, default corpus) -*- C++ -*-===//
//
// llm.c token shards: a 1024-byte header of 256 little-endian int32 (magic
// 20240520, version 1, token count N), then N uint16 tokens. A shard is
// validated whole at load: header, exact size, and every token < the plan's
// vocabulary, so a bad file fails before the first step, not at step 9000.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_TOKENDATA_H
#define PIPEMESH_RUNTIME_TOKENDATA_H

#include "pipemesh/runtime/MappedFile.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipemesh::rt {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr uint64_t kShardHeaderBytes = 1024;

class TokenData {
public:
  /// Loads and validates an llm.c shard (tokens must be < vocab).
  static std::shared_ptr<TokenData> loadShard(const std::string &path, int64_t vocab);
  /// The embedded default corpus (see DefaultCorpus.h); Error when its
  /// largest token is not < vocab.
  static std::shared_ptr<TokenData> defaultCorpus(int64_t vocab);

  const uint16_t *tokens() const { return data; }
  int64_t size() const { return count; }
  /// "train.bin" or "the embedded default corpus".
  const std::string &origin() const { return name; }

private:
  std::shared_ptr<MappedFile> file;
  std::vector<uint16_t> owned;
  const uint16_t *data = nullptr;
  int64_t count = 0;
  std::string name;
};

/// Writes `tokens` as an llm.c shard (used by --write-default-corpus).
void writeShard(const std::string &path, const std::vector<uint16_t> &tokens);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_TOKENDATA_H

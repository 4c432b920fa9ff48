//===- TokenData.h - training tokens (llm.c shards, default corpus) -*- C++ -*-===//
//
// llm.c token shards: a 1024-byte header of 256 little-endian int32 (magic
// 20240520, version 1, token count N), then N uint16 tokens. A shard is
// validated whole at load: header, exact size, and every token < the plan's
// vocabulary, so a bad file fails before the first step, not at step 9000.
//
// A dataset is one shard or several (a glob pattern, as llm.c's loaders take:
// "fineweb_train_*.bin", the files in name order). Sampling (Sampler.h) cuts
// windows within each shard, never across two.
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
  struct Shard {
    std::string path;
    const uint16_t *tokens = nullptr;
    int64_t count = 0;
  };

  /// Loads and validates an llm.c shard, or, when `pathOrPattern` holds a
  /// glob character (`*?[`) and names no file itself, every file the
  /// pattern matches, in name order (tokens must be < vocab). `what` names
  /// the option in messages ("--data").
  static std::shared_ptr<TokenData> load(const std::string &pathOrPattern, int64_t vocab,
                                         const std::string &what = "--data");
  /// The embedded default corpus (see DefaultCorpus.h); Error when its
  /// largest token is not < vocab.
  static std::shared_ptr<TokenData> defaultCorpus(int64_t vocab);

  const std::vector<Shard> &shards() const { return parts; }
  /// Tokens in all shards.
  int64_t size() const;
  /// "train.bin", "train_*.bin (12 shards)" or "the embedded default corpus".
  const std::string &origin() const { return name; }

private:
  void addShard(const std::string &path, int64_t vocab);
  std::vector<std::shared_ptr<MappedFile>> files;
  std::vector<uint16_t> owned;
  std::vector<Shard> parts;
  std::string name;
};

/// Writes `tokens` as an llm.c shard (used by --write-default-corpus).
void writeShard(const std::string &path, const std::vector<uint16_t> &tokens);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_TOKENDATA_H

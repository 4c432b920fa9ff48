//===- TokenData.h - training tokens (llm.c shards, default corpus) -*- C++ -*-===//
//
// llm.c token shards: a 1024-byte header of 256 little-endian int32 (magic,
// version, token count N), then N tokens: magic 20240520 version 1 holds
// uint16 tokens (GPT-2's vocabulary), magic 20240801 version 7 uint32 ones
// (llm.c's Llama 3 shards, vocabularies beyond 65536). A shard is
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

constexpr int32_t kShardMagic = 20240520; ///< uint16 tokens
constexpr int32_t kShardVersion = 1;
constexpr int32_t kShard32Magic = 20240801; ///< uint32 tokens
constexpr int32_t kShard32Version = 7;
constexpr uint64_t kShardHeaderBytes = 1024;

class TokenData {
public:
  struct Shard {
    std::string path;
    const void *tokens = nullptr;
    int bytesPerToken = 2; ///< 2 (uint16) or 4 (uint32)
    int64_t count = 0;
    uint32_t at(int64_t i) const {
      return bytesPerToken == 2 ? static_cast<const uint16_t *>(tokens)[i]
                                : static_cast<const uint32_t *>(tokens)[i];
    }
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

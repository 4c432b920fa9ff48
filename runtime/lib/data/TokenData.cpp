//===- TokenData.cpp - llm.c token shards and the default corpus ------------===//
#include "pipemesh/runtime/TokenData.h"

#include "pipemesh/runtime/DefaultCorpus.h"
#include "pipemesh/runtime/Error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pipemesh::rt {

static int32_t readI32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

std::shared_ptr<TokenData> TokenData::loadShard(const std::string &path, int64_t vocab) {
  auto td = std::make_shared<TokenData>();
  td->name = path;
  td->file = MappedFile::open(path, "data file");
  const uint8_t *d = td->file->data();
  uint64_t size = td->file->size();
  if (size < kShardHeaderBytes)
    fail("data file '", path, "' is too short for an llm.c token shard: ", size,
         " bytes, the header alone is ", kShardHeaderBytes);
  int32_t magic = readI32(d), version = readI32(d + 4), n = readI32(d + 8);
  if (magic != kShardMagic)
    fail("data file '", path, "' has a bad header: magic ", magic, ", expected ", kShardMagic,
         " (an llm.c token shard)");
  if (version != kShardVersion)
    fail("data file '", path, "' has a bad header: version ", version, ", this runtime reads ",
         kShardVersion, " (uint16 tokens)");
  if (n < 0)
    fail("data file '", path, "' has a bad header: negative token count ", n);
  uint64_t want = kShardHeaderBytes + 2 * (uint64_t)n;
  if (size < want)
    fail("data file '", path, "' is short: the header announces ", n, " tokens (", want,
         " bytes) but the file has ", size, " bytes");
  if (size > want)
    fail("data file '", path, "' has ", size - want, " bytes after its ", n,
         " announced tokens (a bad header?)");
  if ((uintptr_t)(d + kShardHeaderBytes) % alignof(uint16_t))
    fail("data file '", path, "': misaligned mapping");
  td->data = reinterpret_cast<const uint16_t *>(d + kShardHeaderBytes);
  td->count = n;
  for (int64_t i = 0; i < td->count; ++i)
    if (td->data[i] >= vocab)
      fail("data file '", path, "' has token ", td->data[i], " at position ", i,
           ", outside the plan's vocabulary of ", vocab, " (tokens must be < ", vocab, ")");
  return td;
}

std::shared_ptr<TokenData> TokenData::defaultCorpus(int64_t vocab) {
  auto td = std::make_shared<TokenData>();
  td->name = "the embedded default corpus";
  td->owned = defaultCorpusTokens();
  td->data = td->owned.data();
  td->count = (int64_t)td->owned.size();
  uint16_t maxTok = 0;
  for (uint16_t t : td->owned)
    maxTok = t > maxTok ? t : maxTok;
  if (maxTok >= vocab)
    fail("the embedded default corpus is byte-level text (tokens up to ", maxTok,
         ") but the plan's vocabulary has only ", vocab,
         " tokens: pass --data with a token shard for this model");
  return td;
}

void writeShard(const std::string &path, const std::vector<uint16_t> &tokens) {
  std::FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    fail("cannot write '", path, "': ", std::strerror(errno));
  int32_t header[256] = {0};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = (int32_t)tokens.size();
  bool ok = std::fwrite(header, sizeof header, 1, f) == 1 &&
            (tokens.empty() || std::fwrite(tokens.data(), 2, tokens.size(), f) == tokens.size());
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    fail("cannot write '", path, "': ", std::strerror(errno));
}

} // namespace pipemesh::rt

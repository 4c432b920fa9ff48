//===- TokenData.cpp - llm.c token shards and the default corpus ------------===//
#include "pipemesh/runtime/TokenData.h"

#include "pipemesh/runtime/AtomicFile.h"
#include "pipemesh/runtime/DefaultCorpus.h"
#include "pipemesh/runtime/Error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <glob.h>
#include <sys/stat.h>

namespace pipemesh::rt {

static int32_t readI32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

void TokenData::addShard(const std::string &path, int64_t vocab) {
  std::shared_ptr<MappedFile> file = MappedFile::open(path, "data file");
  const uint8_t *d = file->data();
  uint64_t size = file->size();
  if (size < kShardHeaderBytes)
    fail("data file '", path, "' is too short for an llm.c token shard: ", size,
         " bytes, the header alone is ", kShardHeaderBytes);
  int32_t magic = readI32(d), version = readI32(d + 4), n = readI32(d + 8);
  int width = 0;
  if (magic == kShardMagic && version == kShardVersion)
    width = 2;
  else if (magic == kShard32Magic && version == kShard32Version)
    width = 4;
  else if (magic != kShardMagic && magic != kShard32Magic)
    fail("data file '", path, "' has a bad header: magic ", magic, ", expected ", kShardMagic,
         " (an llm.c token shard of uint16 tokens) or ", kShard32Magic, " (uint32 tokens)");
  else
    fail("data file '", path, "' has a bad header: version ", version, " with magic ", magic,
         ", this runtime reads version ", magic == kShardMagic ? kShardVersion : kShard32Version,
         magic == kShardMagic ? " (uint16 tokens)" : " (uint32 tokens)");
  if (n < 0)
    fail("data file '", path, "' has a bad header: negative token count ", n);
  uint64_t want = kShardHeaderBytes + (uint64_t)width * (uint64_t)n;
  if (size < want)
    fail("data file '", path, "' is short: the header announces ", n, " tokens (", want,
         " bytes) but the file has ", size, " bytes");
  if (size > want)
    fail("data file '", path, "' has ", size - want, " bytes after its ", n,
         " announced tokens (a bad header?)");
  if ((uintptr_t)(d + kShardHeaderBytes) % width)
    fail("data file '", path, "': misaligned mapping");
  Shard sh{path, d + kShardHeaderBytes, width, n};
  for (int64_t i = 0; i < sh.count; ++i)
    if (sh.at(i) >= vocab)
      fail("data file '", path, "' has token ", sh.at(i), " at position ", i,
           ", outside the plan's vocabulary of ", vocab, " (tokens must be < ", vocab, ")");
  files.push_back(std::move(file));
  parts.push_back(std::move(sh));
}

std::shared_ptr<TokenData> TokenData::load(const std::string &pathOrPattern, int64_t vocab,
                                           const std::string &what) {
  auto td = std::make_shared<TokenData>();
  struct stat st;
  bool pattern = pathOrPattern.find_first_of("*?[") != std::string::npos &&
                 ::stat(pathOrPattern.c_str(), &st) != 0;
  if (!pattern) {
    td->name = pathOrPattern;
    td->addShard(pathOrPattern, vocab);
    return td;
  }
  glob_t g{};
  int rc = ::glob(pathOrPattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty()))
    fail(what, " '", pathOrPattern, "' matches no file");
  if (rc != 0)
    fail(what, " '", pathOrPattern, "': cannot read the directories it names (",
         std::strerror(errno), ")");
  // glob(3) sorts by name: the shards' order, hence every window's index.
  for (const std::string &p : paths)
    td->addShard(p, vocab);
  td->name = pathOrPattern + " (" + std::to_string(paths.size()) +
             (paths.size() == 1 ? " shard)" : " shards)");
  return td;
}

int64_t TokenData::size() const {
  int64_t n = 0;
  for (const Shard &s : parts)
    n += s.count;
  return n;
}

std::shared_ptr<TokenData> TokenData::defaultCorpus(int64_t vocab) {
  auto td = std::make_shared<TokenData>();
  td->name = "the embedded default corpus";
  td->owned = defaultCorpusTokens();
  td->parts.push_back({td->name, td->owned.data(), 2, (int64_t)td->owned.size()});
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
  std::string bytes(kShardHeaderBytes + 2 * tokens.size(), '\0');
  auto put = [&](size_t at, uint32_t v, int n) {
    for (int i = 0; i < n; ++i)
      bytes[at + i] = (char)(v >> (8 * i));
  };
  put(0, (uint32_t)kShardMagic, 4);
  put(4, (uint32_t)kShardVersion, 4);
  put(8, (uint32_t)tokens.size(), 4);
  for (size_t i = 0; i < tokens.size(); ++i)
    put(kShardHeaderBytes + 2 * i, tokens[i], 2);
  // Beside and renamed over: a failed write leaves what was at `path`.
  writeFileAtomically(path, bytes, "token shard");
}

} // namespace pipemesh::rt

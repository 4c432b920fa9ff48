//===- DefaultCorpus.h - the embedded default training text ------*- C++ -*-===//
//
// When --data is absent, pipemesh-run trains on a small English text built
// into the binary, tokenized byte-level (token = byte value, so vocab >= 128
// suffices: it is plain ASCII). The text is generated, deterministically, by
// a tiny sentence grammar driven by splitmix64 (seed fixed): simple
// sentences about a handful of characters and places, ~96 KB. Nothing is
// copied from anywhere; the structure (a closed vocabulary of words, fixed
// sentence patterns, punctuation) makes it learnable, so a tiny GPT's loss
// falls visibly within tens of steps. `pipemesh-run --write-default-corpus
// FILE` writes it as an llm.c shard for references and tests.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_DEFAULTCORPUS_H
#define PIPEMESH_RUNTIME_DEFAULTCORPUS_H

#include <cstdint>
#include <string>
#include <vector>

namespace pipemesh::rt {

/// The default corpus text (deterministic, the same on every machine).
const std::string &defaultCorpusText();
/// Its byte-level tokens.
std::vector<uint16_t> defaultCorpusTokens();

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_DEFAULTCORPUS_H

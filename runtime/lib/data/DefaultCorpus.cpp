//===- DefaultCorpus.cpp - the embedded default training text ---------------===//
//
// A deterministic sentence grammar (see DefaultCorpus.h). Changing anything
// here changes the default run's losses: treat it as data.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/DefaultCorpus.h"

#include "pipemesh/runtime/SplitMix64.h"

#include <cctype>

namespace pipemesh::rt {
namespace {

const char *const kSubjects[] = {
    "the old miller", "the little girl", "the grey fox",     "the young sailor",
    "the king",       "the farmer",      "the black cat",    "the shepherd",
    "the baker",      "the queen",       "the tall soldier", "the weaver",
    "the small boy",  "the wise woman",  "the fisherman",    "the red hen"};
const char *const kVerbs[] = {"walked to",    "looked at",  "sang about", "dreamed of",
                              "ran past",     "waited by",  "spoke of",   "climbed",
                              "painted",      "remembered", "found",      "left",
                              "came back to", "watched",    "slept near", "carried bread to"};
const char *const kPlaces[] = {
    "the river",     "the mill",   "the green hill", "the old bridge",
    "the market",    "the sea",    "the dark wood",  "the castle",
    "the well",      "the garden", "the harbour",    "the church",
    "the high road", "the barn",   "the village",    "the field of wheat"};
const char *const kTimes[] = {"in the morning", "at night",       "after the rain",
                              "before supper",  "in winter",      "at noon",
                              "on a cold day",  "in the spring",  "at dawn",
                              "every evening",  "one summer day", "when the bells rang"};
const char *const kLinks[] = {"and then", "but", "so", "because", "while"};
const char *const kSayings[] = {"where is the road to the sea?",
                                "it is late, and the fire is low.",
                                "the wind is cold tonight.",
                                "we must go home before dark.",
                                "the bread is warm.",
                                "look, the river is high!",
                                "I have seen this place before.",
                                "the bells will ring soon.",
                                "who left the gate open?",
                                "the stars are bright tonight."};
const char *const kSayVerbs[] = {"said", "asked", "cried", "whispered"};

template <size_t N> const char *pick(SplitMix64 &rng, const char *const (&list)[N]) {
  return list[rng.next() % N];
}

std::string capitalized(std::string s) {
  if (!s.empty())
    s[0] = (char)std::toupper((unsigned char)s[0]);
  return s;
}

std::string sentence(SplitMix64 &rng) {
  std::string s, subj = pick(rng, kSubjects);
  switch (rng.next() % 5) {
  case 0:
    s = subj + " " + pick(rng, kVerbs) + " " + pick(rng, kPlaces) + " " + pick(rng, kTimes) + ".";
    break;
  case 1:
    s = std::string(pick(rng, kTimes)) + ", " + subj + " " + pick(rng, kVerbs) + " " +
        pick(rng, kPlaces) + ".";
    break;
  case 2:
    s = subj + " " + pick(rng, kVerbs) + " " + pick(rng, kPlaces) + ", " + pick(rng, kLinks) + " " +
        pick(rng, kSubjects) + " " + pick(rng, kVerbs) + " " + pick(rng, kPlaces) + ".";
    break;
  case 3:
    s = "\"" + capitalized(pick(rng, kSayings)) + "\" " + pick(rng, kSayVerbs) + " " + subj + ".";
    return s;
  default:
    s = subj + " " + pick(rng, kVerbs) + " " + pick(rng, kPlaces) + ".";
    break;
  }
  return capitalized(s);
}

std::string buildText() {
  SplitMix64 rng(20240520);
  std::string text;
  const size_t target = 96 * 1024;
  int chapter = 1;
  while (text.size() < target) {
    text += "Chapter " + std::to_string(chapter++) + "\n\n";
    int paragraphs = 3 + (int)(rng.next() % 4);
    for (int p = 0; p < paragraphs; ++p) {
      int sentences = 3 + (int)(rng.next() % 5);
      for (int i = 0; i < sentences; ++i)
        text += (i ? " " : "") + sentence(rng);
      text += "\n\n";
    }
  }
  return text;
}

} // namespace

const std::string &defaultCorpusText() {
  static const std::string text = buildText();
  return text;
}

std::vector<uint16_t> defaultCorpusTokens() {
  const std::string &t = defaultCorpusText();
  std::vector<uint16_t> tokens(t.size());
  for (size_t i = 0; i < t.size(); ++i)
    tokens[i] = (unsigned char)t[i];
  return tokens;
}

} // namespace pipemesh::rt

//===- PlanReaderTest.cpp - an elided plan read for one rank ----------------===//
//
// A process reads an elided plan (parallel.replicas_elided: dp rank 0's
// program of each pipeline rank) as its own rank: the listed programs, and
// only its own replica derived by the replica rules (Plan.h); asking for
// another replica is an error, not a stale or wrong program. The cross-rank
// checks run on the listed programs and name a peer or tied member that is
// not a listed rank.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Checksum.h"
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/Plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <unistd.h>

using namespace pipemesh::rt;
using nlohmann::json;

namespace {

/// pp=2 x dp=2, elided: pipeline rank 0 (rank 0) sends x to pipeline rank 1
/// (rank 2); both hold a ZeRO shard of the 3-element parameter w (2 per
/// replica, padded to 4) and share a tied group; their adamw entry counts in
/// the norm on dp rank 0 only.
json elidedManifest() {
  auto entry = [](int64_t rank, json comm) {
    return json{
        {"rank", rank},
        {"arena_bytes", 128},
        {"groups", {{"dp", {rank, rank + 1}}, {"tied", {0, 2}}}},
        {"buffers",
         {{{"id", 0}, {"name", "w.shard"}, {"shape", {2}}, {"dtype", "f32"}, {"offset", 0},
           {"bytes", 8}, {"kind", "param"}, {"param", "w"}, {"elem_offset", 0},
           {"shard_numel", 2}, {"padded_numel", 4}},
          {{"id", 1}, {"name", "x"}, {"shape", {2}}, {"dtype", "f32"}, {"offset", 64},
           {"bytes", 8}, {"kind", "activation"}}}},
        {"program",
         {comm, {{"op", "adamw"}, {"params", {{{"param", 0}, {"norm_dp0_only", true}}}}}}}};
  };
  return json{{"format", "pipemesh-plan"},
              {"version", kPlanVersion},
              {"model", {{"batch", 1}, {"seq", 2}, {"vocab", 4}}},
              {"parallel",
               {{"pp", 2}, {"dp", 2}, {"microbatches", 1}, {"world_size", 4},
                {"replicas_elided", true}}},
              {"params", {{{"name", "w"}, {"shape", {3}}}}},
              {"ranks",
               {entry(0, {{"op", "send"}, {"in", {1}}, {"peer", 2}, {"tag", 0}}),
                entry(2, {{"op", "recv"}, {"out", {1}}, {"peer", 0}, {"tag", 0}})}}};
}

/// Writes the plan container (docs/plan-format.md) around `manifest` and an
/// empty weights blob; removed with the test.
class PlanFile {
public:
  explicit PlanFile(const json &manifest) {
    char name[] = "/tmp/pipemesh-plan-reader-XXXXXX";
    int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path = name;
    std::string m = manifest.dump(), w = std::string("\x02\0\0\0\0\0\0\0{}", 10);
    std::string body = m + w;
    std::string head = "PMPLAN";
    head.append(2, '\0');
    auto u32 = [&](uint32_t v) {
      for (int i = 0; i < 4; ++i)
        head.push_back((char)(v >> (8 * i)));
    };
    auto u64 = [&](uint64_t v) {
      u32((uint32_t)v);
      u32((uint32_t)(v >> 32));
    };
    u32(kPlanVersion);
    u32(0);
    u64(m.size());
    u64(w.size());
    u64(checksum64(body.data(), body.size()));
    std::ofstream(path, std::ios::binary) << head << body;
  }
  ~PlanFile() { std::remove(path.c_str()); }
  std::string path;
};

/// The message of the Error `f` throws; "" when it throws none.
std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(PlanReader, DerivesOnlyTheOwnReplica) {
  PlanFile f(elidedManifest());
  Plan p = readPlan(f.path, 3);
  ASSERT_EQ(p.listed.size(), 2u);
  EXPECT_EQ(p.listed[0].rank, 0);
  EXPECT_EQ(p.listed[1].rank, 2);
  ASSERT_EQ(p.derived.size(), 1u);
  const RankPlan &r = p.rank(3);
  EXPECT_EQ(&r, &p.derived[0]);
  EXPECT_EQ(&p.listedOf(3), &p.listed[1]);
  EXPECT_EQ(r.dpRank, 1);
  EXPECT_EQ(r.ppRank, 1);
  EXPECT_EQ(r.dpGroup, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.tiedGroup, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(r.buffer(0).elemOffset, 2);
  EXPECT_EQ(r.program[0].json["peer"], 1);
  const json &entry = r.program[1].json["params"][0];
  EXPECT_EQ(entry["norm_weight"], 0.0);
  EXPECT_FALSE(entry.contains("norm_dp0_only"));
  // dp rank 0 runs the listed program, the mark dropped and its weight kept.
  const json &listedEntry = p.rank(2).program[1].json["params"][0];
  EXPECT_FALSE(listedEntry.contains("norm_dp0_only"));
  EXPECT_FALSE(listedEntry.contains("norm_weight"));
  EXPECT_EQ(p.rank(2).dpRank, 0);
  EXPECT_EQ(p.rank(2).buffer(0).elemOffset, 0);
  std::string e = errorOf([&] { p.rank(1); });
  EXPECT_NE(e.find("the program of rank 1 (dp replica 1 of pipeline rank 0) was not derived"),
            std::string::npos)
      << e;
  EXPECT_NE(errorOf([&] { p.rank(4); }).find("has no program for rank 4"), std::string::npos);
  EXPECT_EQ(errorOf([&] { validateParallelPlan(p); }), "");
}

TEST(PlanReader, DpRankZeroAndOutsideTheWorldDeriveNothing) {
  PlanFile f(elidedManifest());
  for (int64_t own : {0, 2, 4, 7}) {
    Plan p = readPlan(f.path, own);
    EXPECT_EQ(p.listed.size(), 2u);
    EXPECT_TRUE(p.derived.empty()) << own;
  }
}

TEST(PlanReader, EveryRankOnRequest) {
  PlanFile f(elidedManifest());
  Plan p = readPlan(f.path, kEveryRank);
  ASSERT_EQ(p.derived.size(), 2u);
  EXPECT_EQ(p.rank(1).program[0].json["peer"], 3);
  EXPECT_EQ(p.rank(1).buffer(0).elemOffset, 2);
  EXPECT_EQ(p.rank(3).program[0].json["peer"], 1);
}

TEST(PlanReader, ListedShardsAreCheckedForEveryReplica) {
  // dp rank 0 holds [2, 4): its replica would hold [4, 6), past the padding.
  json m = elidedManifest();
  m["ranks"][0]["buffers"][0]["elem_offset"] = 2;
  PlanFile f(m);
  // Rank 0 finds it although it derives nothing: every process agrees.
  std::string e = errorOf([&] { readPlan(f.path, 0); });
  EXPECT_NE(e.find("buffer 0 'w.shard' of rank 0 (as rank 1, its dp replica 1) is a shard "
                   "[4, 6) past the padded_numel 4"),
            std::string::npos)
      << e;
}

TEST(PlanReader, AShardOffsetOfTheWrongTypeIsNamedForEveryReplica) {
  // Deriving replica 1 shifts elem_offset: one that is not an integer is
  // left for the parser to name, not read as one (fuzz-plan.py seed 77
  // found the JSON library's own "type must be number" instead).
  for (json bad : {json("x"), json::array({0})}) {
    json m = elidedManifest();
    m["ranks"][0]["buffers"][0]["elem_offset"] = bad;
    PlanFile f(m);
    for (int64_t rank : {0, 1}) {
      std::string e = errorOf([&] { readPlan(f.path, rank); });
      EXPECT_NE(e.find("manifest field 'ranks[0].buffers[0].elem_offset' must be an integer"),
                std::string::npos)
          << rank << ": " << e;
    }
  }
}

TEST(PlanReader, CrossRankChecksNameWhatIsNotListed) {
  struct Case {
    std::function<void(json &)> edit;
    std::string needle;
  };
  std::vector<Case> cases = {
      {[](json &m) { m["ranks"][0]["program"][0]["peer"] = 3; },
       "rank 0, instruction 0 (send) has peer rank 3, dp rank 1 of pipeline rank 1: in a plan "
       "with replicas_elided"},
      {[](json &m) {
         for (json &r : m["ranks"])
           r["groups"]["tied"] = {0, 3};
       },
       "rank 0's tied group [0, 3] names rank 3, dp rank 1 of pipeline rank 1"},
      {[](json &m) { m["ranks"][0]["groups"]["dp"] = {0, 3}; },
       "rank 1's dp group [0, 3] does not contain it"},
      {[](json &m) { m["ranks"][1]["groups"]["dp"] = {3, 2}; },
       "rank 2 (dp_rank 0) is at position 1 of its dp group [3, 2]"},
      {[](json &m) { m["ranks"][1]["program"][0]["tag"] = 1; },
       "rank 0 sends 1 message(s) to rank 2 with tag 0 (first: instruction 0) but rank 2 "
       "receives 0"},
  };
  for (const Case &c : cases) {
    json m = elidedManifest();
    c.edit(m);
    PlanFile f(m);
    // Every rank reaches the same verdict, whichever replica it derived.
    for (int64_t own : {0, 1, 3}) {
      Plan p = readPlan(f.path, own);
      try {
        validateParallelPlan(p);
        ADD_FAILURE() << "no error for: " << c.needle;
      } catch (const UniformError &e) {
        EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
      }
    }
  }
}

// The plan and checkpoint checksum is libxxhash's XXH3-64 (seed 0): the
// values below are the reference implementation's (XXH3_64bits, through
// Python's xxhash module), so another language can check our files; fed in
// pieces, it gives the one-shot value.
TEST(Checksum, IsXxh3SixtyFourAndStreams) {
  EXPECT_EQ(checksum64("", 0), 0x2d06800538d394c2ull);
  EXPECT_EQ(checksum64("abc", 3), 0x78af5f94892f3950ull);
  std::string bytes;
  for (int i = 0; i < 40 * 256; ++i)
    bytes.push_back((char)(i % 256));
  EXPECT_EQ(checksum64(bytes.data(), bytes.size()), 0xc03d2231ab9348f3ull);
  Checksum64 pieces;
  for (size_t at = 0, n = 1; at < bytes.size(); at += n, n = n * 3 + 1)
    pieces.update(bytes.data() + at, std::min(n, bytes.size() - at));
  EXPECT_EQ(pieces.digest(), 0xc03d2231ab9348f3ull);
}

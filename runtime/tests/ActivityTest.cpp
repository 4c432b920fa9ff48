//===- ActivityTest.cpp - the SIGTERM handler's record of the activity ----===//
#include "pipemesh/runtime/Activity.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

using namespace pipemesh::rt;

namespace {

// The record is a copy: an executor unwound by an error frees its
// instructions' descriptions, and the launcher's SIGTERM may come after.
// (Before, the handler printed whatever then lay where the freed string had
// been: bytes that were not even UTF-8, seen once in CI.)
TEST(Activity, OutlivesTheCallersString) {
  auto text = std::make_unique<std::string>("instruction 7 (recv from rank 0, tag 3)");
  activity::set(text->c_str());
  (*text)[0] = 'X';
  text.reset();
  EXPECT_STREQ(activity::current(), "instruction 7 (recv from rank 0, tag 3)");
}

TEST(Activity, LatestWinsAndLongOnesAreCut) {
  activity::set("the end of the step");
  activity::set("writing a checkpoint");
  EXPECT_STREQ(activity::current(), "writing a checkpoint");
  std::string longer(1000, 'a');
  activity::set(longer.c_str());
  EXPECT_EQ(std::string(activity::current()), std::string(255, 'a'));
  activity::set(nullptr);
  EXPECT_STREQ(activity::current(), "");
}

} // namespace

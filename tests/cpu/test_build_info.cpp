// moekit::build_info(): the provenance the build baked in (cmake/moekit_build_info.cmake) is
// well-formed whichever way it was found; tests/python/test_tools.py tests how it is found.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "moekit/version.hpp"

namespace {

bool is_git_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

TEST(CpuBuildInfo, IsWellFormedForItsSource) {
  const moekit::BuildInfo& b = moekit::build_info();
  ASSERT_NE(b.commit, nullptr);
  ASSERT_NE(b.tree, nullptr);
  ASSERT_NE(b.date, nullptr);
  ASSERT_NE(b.source, nullptr);
  const std::string source = b.source, commit = b.commit, tree = b.tree;
  EXPECT_TRUE(b.dirty == -1 || b.dirty == 0 || b.dirty == 1) << b.dirty;
  if (source == "git" || source == "build-info.json" || source == "build-info.json (tree verified by git)") {
    EXPECT_TRUE(is_git_hash(commit)) << commit;
    EXPECT_TRUE(is_git_hash(tree)) << tree;
    EXPECT_NE(b.dirty, -1);
  } else if (source == "build-info.json (stale)") {
    EXPECT_TRUE(is_git_hash(commit)) << commit;
    EXPECT_EQ(tree.rfind("stale:", 0), 0u) << tree;
    EXPECT_EQ(b.dirty, 1);  // a tree edited after stamping is never reported clean
  } else if (source == "MOEKIT_COMMIT (typed by hand)") {
    EXPECT_EQ(tree, "unknown");
    EXPECT_EQ(b.dirty, -1);
  } else {
    EXPECT_EQ(source, "unknown");
    EXPECT_EQ(commit, "unknown");
    EXPECT_EQ(b.dirty, -1);
  }
  EXPECT_EQ(&b, &moekit::build_info());  // one record per process
}

}  // namespace

// moekit's version.
#pragma once

#define MOEKIT_VERSION_MAJOR 0
#define MOEKIT_VERSION_MINOR 1
#define MOEKIT_VERSION_PATCH 0

namespace moekit {
/// "0.1.0"
const char* version() noexcept;

/// Where this build's sources came from, baked in by the build (cmake/moekit_build_info.cmake),
/// never typed by hand: from git when the source tree is a git work tree, else from the
/// build-info.json that tools/scripts/stamp_tree.sh wrote before the tree was copied.
struct BuildInfo {
  const char* commit;  ///< the full hash of HEAD, or "unknown"
  /// The git tree hash of the working tree as built (uncommitted and untracked-not-ignored files
  /// included): equal to the commit's tree when clean. "stale:<hash>" when build-info.json no
  /// longer matches the files; "unknown" when neither git nor a stamp was there.
  const char* tree;
  int dirty;           ///< 1: the tree differs from the commit's; 0: clean; -1: unknown
  const char* date;    ///< ISO 8601: the commit's date (git) or the stamp's (build-info.json)
  /// "git", "build-info.json", "build-info.json (stale)", "MOEKIT_COMMIT (typed by hand)" or "unknown".
  const char* source;
};
/// This build's provenance (see BuildInfo).
const BuildInfo& build_info() noexcept;
}  // namespace moekit

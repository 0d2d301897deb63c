# Where this build's sources came from, baked into moekit::build_info() (include/moekit/version.hpp).
# Runs at configure time and before every build (cmake -DSRC=<source dir> -DOUT=<generated .cpp>
# -P moekit_build_info.cmake); OUT is rewritten only when its content changes. The answer comes from:
#   1. git, when SRC is the top of a git work tree: tools/scripts/stamp_tree.sh --stdout (commit, dirty, the
#      tree hash of the working tree with uncommitted and untracked-not-ignored files);
#   2. else SRC/build-info.json, written by tools/scripts/stamp_tree.sh before the tree was copied
#      (the GPU machine gets no .git); its per-file SHA-256 are checked here, so a file changed or
#      removed after stamping marks the build dirty with a stale stamp, never clean;
#      When both exist and build-info.json's tree equals the tree git computes, the stamp's commit
#      wins: a copy of the tree may carry older git metadata than its files;
#   3. else MOEKIT_COMMIT from the environment, typed by hand: accepted with a warning, dirty unknown;
#   4. else "unknown".
cmake_minimum_required(VERSION 3.25)
if(NOT SRC OR NOT OUT)
  message(FATAL_ERROR "moekit_build_info.cmake: pass -DSRC=<source dir> -DOUT=<file>")
endif()

set(commit "unknown")
set(tree "unknown")
set(dirty -1)
set(date "unknown")
set(source "unknown")
set(json "")

find_program(MOEKIT_GIT git)
find_program(MOEKIT_BASH bash)
if(MOEKIT_GIT AND MOEKIT_BASH AND EXISTS "${SRC}/tools/scripts/stamp_tree.sh")
  # Only when SRC is the top of its own work tree: a source tree unpacked inside another checkout
  # (an A/B's base in the ignored .ab/, tools/scripts/ab_base.sh) would otherwise be stamped with
  # the enclosing checkout's commit and tree; it carries its own build-info.json instead.
  execute_process(COMMAND ${MOEKIT_GIT} -C "${SRC}" rev-parse --show-toplevel
                  RESULT_VARIABLE rc OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    file(REAL_PATH "${top}" top)
    file(REAL_PATH "${SRC}" src_real)
    if(NOT top STREQUAL src_real)
      set(rc 1)
    endif()
  endif()
  if(rc EQUAL 0)
    execute_process(COMMAND ${MOEKIT_BASH} "${SRC}/tools/scripts/stamp_tree.sh" --stdout
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(rc EQUAL 0)
      set(json "${out}")
      set(source "git")
      # The commit's date, not now: the same tree must generate the same source (no rebuild).
      execute_process(COMMAND ${MOEKIT_GIT} -C "${SRC}" show -s --format=%cI HEAD
                      OUTPUT_VARIABLE commit_date OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    else()
      message(WARNING "moekit build info: stamp_tree.sh failed in a git work tree: ${err}")
    endif()
  endif()
endif()

# A copy of the tree can carry git metadata older than its files (the GPU machine's copy does):
# when build-info.json stamps the very tree git computes, its commit is the one that tree came
# from, not git's HEAD.
if(source STREQUAL "git" AND EXISTS "${SRC}/build-info.json")
  file(READ "${SRC}/build-info.json" stamp)
  string(JSON stamp_tree ERROR_VARIABLE es1 GET "${stamp}" tree)
  string(JSON git_tree ERROR_VARIABLE es2 GET "${json}" tree)
  if(NOT es1 AND NOT es2 AND stamp_tree STREQUAL git_tree)
    set(json "${stamp}")
    set(source "build-info.json (tree verified by git)")
    unset(commit_date)
  endif()
endif()

if(source STREQUAL "unknown" AND EXISTS "${SRC}/build-info.json")
  file(READ "${SRC}/build-info.json" json)
  set(source "build-info.json")
endif()

if(NOT json STREQUAL "")
  string(JSON commit ERROR_VARIABLE e1 GET "${json}" commit)
  string(JSON tree ERROR_VARIABLE e2 GET "${json}" tree)
  string(JSON dirty_json ERROR_VARIABLE e3 GET "${json}" dirty)
  string(JSON date ERROR_VARIABLE e4 GET "${json}" date)
  if(source STREQUAL "git" AND commit_date)
    set(date "${commit_date}")
  endif()
  if(e1 OR e2 OR e3)
    message(WARNING "moekit build info: ${source} lacks commit/tree/dirty: ${e1} ${e2} ${e3}")
    set(commit "unknown")
    set(tree "unknown")
    set(source "unknown")
  else()
    if(dirty_json)
      set(dirty 1)
    else()
      set(dirty 0)
    endif()
  endif()
  if(source STREQUAL "build-info.json")
    # The copy must still be what was stamped: recompute stamp_tree.sh's content hash.
    string(JSON nfiles ERROR_VARIABLE e5 LENGTH "${json}" files)
    string(JSON expected ERROR_VARIABLE e6 GET "${json}" content_sha256)
    set(listing "")
    set(changed "")
    if(NOT e5 AND NOT e6 AND nfiles GREATER 0)
      math(EXPR last "${nfiles} - 1")
      foreach(i RANGE ${last})
        string(JSON path GET "${json}" files ${i})
        if(EXISTS "${SRC}/${path}")
          file(SHA256 "${SRC}/${path}" h)
        else()
          set(h "missing")
        endif()
        string(APPEND listing "${h}  ${path}\n")
      endforeach()
      string(SHA256 actual "${listing}")
    else()
      set(actual "no file list")
    endif()
    if(NOT actual STREQUAL expected)
      message(WARNING "moekit build info: build-info.json is stale (files changed or removed since "
                      "tools/scripts/stamp_tree.sh ran): recorded as dirty, tree 'stale:${tree}'. "
                      "Run stamp_tree.sh right before copying the tree.")
      set(tree "stale:${tree}")
      set(dirty 1)
      set(source "build-info.json (stale)")
    endif()
  endif()
endif()

if(source STREQUAL "unknown" AND NOT "$ENV{MOEKIT_COMMIT}" STREQUAL "")
  message(WARNING "moekit build info: no git and no build-info.json; using MOEKIT_COMMIT=$ENV{MOEKIT_COMMIT} "
                  "as typed by hand (dirty and tree unknown). Prefer tools/scripts/stamp_tree.sh.")
  set(commit "$ENV{MOEKIT_COMMIT}")
  set(source "MOEKIT_COMMIT (typed by hand)")
endif()
if(source STREQUAL "unknown")
  message(WARNING "moekit build info: no git work tree, no build-info.json: commit and tree unknown")
endif()

# Keep the generated source stable across builds of the same tree (no build time in it), so an
# unchanged tree recompiles nothing.
foreach(v commit tree date source)
  string(REGEX REPLACE "[^A-Za-z0-9:._ ()+-]" "_" ${v} "${${v}}")
endforeach()
set(content "// Generated by cmake/moekit_build_info.cmake: do not edit, do not commit.
#include \"moekit/version.hpp\"

namespace moekit {
const BuildInfo& build_info() noexcept {
  static const BuildInfo info{\"${commit}\", \"${tree}\", ${dirty}, \"${date}\", \"${source}\"};
  return info;
}
}  // namespace moekit
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
message(STATUS "moekit build info: commit ${commit}, dirty ${dirty}, tree ${tree} (from ${source})")

// moekit's version.
#pragma once

#define MOEKIT_VERSION_MAJOR 0
#define MOEKIT_VERSION_MINOR 1
#define MOEKIT_VERSION_PATCH 0

namespace moekit {
/// "0.1.0"
const char* version() noexcept;
}  // namespace moekit

// A scoped environment variable for tests (host only, no CUDA): moekit's switches
// (MOEKIT_PDL, MOEKIT_LOG_DISPATCH, MOEKIT_TOKMAJOR_SCHEDULE, MOEKIT_FUZZ_*) are read at every call.
#pragma once

#include <cstdlib>
#include <string>

namespace moekit::testing {

// Sets an environment variable for a scope (value null: unsets it) and restores what was there
// before, even when the scope is left by an exception.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace moekit::testing

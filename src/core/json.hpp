// A small strict JSON reader and string escaper for safetensors headers and index files. Private
// to moekit: the GPU machine has no JSON library, and headers need exact 64-bit integers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moekit::detail {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0.0;
  // Integers without fraction or exponent that fit in int64 are kept exactly: data_offsets pass 2^53
  // in multi-hundred-GB shards.
  bool is_int = false;
  std::int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in document order, duplicates kept

  bool is_object() const noexcept { return type == Type::kObject; }
  bool is_array() const noexcept { return type == Type::kArray; }
  bool is_string() const noexcept { return type == Type::kString; }
  /// The first member named `key`, or null (objects only).
  const JsonValue* find(std::string_view key) const noexcept;
};

/// Parses one JSON document (RFC 8259; surrounding whitespace allowed). Throws
/// Error(kInvalidArgument) "<what>: invalid JSON at byte N: <reason>".
JsonValue parse_json(std::string_view text, const std::string& what);

/// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

}  // namespace moekit::detail

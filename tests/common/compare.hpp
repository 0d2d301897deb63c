// The one output comparator of moekit's tests: every row's relative error and every element's
// bound (tests/common/tolerance.hpp), so one wrong token or one dropped slot fails at any M,
// instead of diluting into a global error. NaN never passes where the reference is finite.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/tolerance.hpp"

namespace moekit::testing {

/// What compare_rows found. `ok` is the verdict; the rest locates the first failure.
struct Comparison {
  bool ok = true;
  std::int64_t rows = 0, cols = 0;
  std::int64_t bad_rows = 0;      ///< rows that fail the row bound or hold a failing element
  std::int64_t bad_elements = 0;  ///< elements over their bound (NaN / inf mismatches included)
  double max_row_error = 0.0;     ///< the largest row error seen (over the checked rows)
  std::int64_t worst_row = -1;
  std::string message;            ///< "" when ok; else names the first failing row / column and values
};

/// Compare `got` with `ref`, both row-major [rows, cols] (rows = size / cols), against `tol`.
/// Reference entries that are NaN must be NaN in `got`; +-inf must be equal. `check_row` (if not
/// empty, one entry per row) limits the check to the rows where it is nonzero.
Comparison compare_rows(const std::vector<float>& got, const std::vector<float>& ref, std::int64_t cols,
                        const Tolerance& tol, const std::vector<char>& check_row = {});
/// The same with a double-precision reference (the GEMM kernel tests).
Comparison compare_rows(const std::vector<float>& got, const std::vector<double>& ref, std::int64_t cols,
                        const Tolerance& tol, const std::vector<char>& check_row = {});

/// For EXPECT_TRUE / ASSERT_TRUE: compare_rows with the failure message prefixed by `what`.
::testing::AssertionResult rows_match(const std::vector<float>& got, const std::vector<float>& ref, std::int64_t cols,
                                      const Tolerance& tol, const std::string& what);
::testing::AssertionResult rows_match(const std::vector<float>& got, const std::vector<float>& ref, std::int64_t cols,
                                      Scheme scheme, const std::string& what);

}  // namespace moekit::testing

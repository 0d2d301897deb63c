// The row-by-row, element-by-element output comparator (compare.hpp).
#include "common/compare.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace moekit::testing {

namespace {

// Below this a reference row counts as zero: its error is then absolute (a row of zeros, e.g.
// every slot remote, must come back as zeros).
constexpr double kTinyNorm = 1e-30;

template <class R>
Comparison compare_impl(const std::vector<float>& got, const std::vector<R>& ref, std::int64_t cols,
                        const Tolerance& tol, const std::vector<char>& check_row) {
  Comparison c;
  c.cols = cols;
  std::ostringstream msg;
  msg.precision(6);
  if (cols <= 0 || got.size() != ref.size() || ref.size() % static_cast<std::size_t>(cols) != 0) {
    c.ok = false;
    msg << "sizes differ or are not whole rows: got " << got.size() << " values, reference " << ref.size()
        << ", cols " << cols;
    c.message = msg.str();
    return c;
  }
  c.rows = static_cast<std::int64_t>(ref.size()) / cols;
  if (!check_row.empty() && static_cast<std::int64_t>(check_row.size()) != c.rows) {
    c.ok = false;
    msg << "check_row has " << check_row.size() << " entries for " << c.rows << " rows";
    c.message = msg.str();
    return c;
  }
  bool first = true;
  for (std::int64_t r = 0; r < c.rows; ++r) {
    if (!check_row.empty() && !check_row[static_cast<std::size_t>(r)]) continue;
    const float* g = got.data() + r * cols;
    const R* f = ref.data() + r * cols;
    double ref_sq = 0.0;
    std::int64_t finite = 0;
    for (std::int64_t j = 0; j < cols; ++j)
      if (std::isfinite(static_cast<double>(f[j]))) {
        ref_sq += static_cast<double>(f[j]) * static_cast<double>(f[j]);
        ++finite;
      }
    const double rms = finite > 0 ? std::sqrt(ref_sq / static_cast<double>(finite)) : 0.0;
    double diff_sq = 0.0;
    std::int64_t bad_here = 0, first_col = -1;
    double first_got = 0, first_ref = 0, first_bound = 0;
    const char* first_why = "";
    for (std::int64_t j = 0; j < cols; ++j) {
      const double x = g[j], y = static_cast<double>(f[j]);
      bool bad = false;
      const char* why = "";
      double bound = 0.0;
      if (std::isnan(y)) {
        bad = !std::isnan(x);
        why = "the reference is NaN";
      } else if (std::isinf(y)) {
        bad = x != y;
        why = "the reference is infinite";
      } else if (!std::isfinite(x)) {  // NaN or inf where the reference is finite: never passes
        bad = true;
        why = "not finite where the reference is";
      } else {
        const double d = x - y;
        diff_sq += d * d;
        bound = tol.elem_rel * std::fabs(y) + tol.elem_abs * rms;
        bad = !(std::fabs(d) <= bound);
        why = "over the element bound";
      }
      if (bad && bad_here++ == 0) {
        first_col = j;
        first_got = x;
        first_ref = y;
        first_bound = bound;
        first_why = why;
      }
    }
    const double ref_norm = std::sqrt(ref_sq);
    // A non-finite got where ref is finite already failed above; diff_sq covers the finite rest.
    const double row_err = std::sqrt(diff_sq) / std::max(ref_norm, kTinyNorm);
    if (row_err > c.max_row_error || c.worst_row < 0) {
      c.max_row_error = row_err;
      c.worst_row = r;
    }
    const bool row_bad = !(row_err <= tol.row);
    if (bad_here == 0 && !row_bad) continue;
    c.ok = false;
    ++c.bad_rows;
    c.bad_elements += bad_here;
    if (first) {
      first = false;
      msg << "row " << r << " of " << c.rows << " (cols " << cols << ", |ref_row| = " << ref_norm << ")";
      if (row_bad) msg << ": row error " << row_err << " > " << tol.row;
      if (bad_here > 0) {
        msg << (row_bad ? "; " : ": ") << bad_here << " bad element(s), first [" << r << ", " << first_col
            << "]: got " << first_got << ", ref " << first_ref << " (" << first_why;
        if (std::isfinite(first_ref) && std::isfinite(first_got)) msg << ": |diff| " << std::fabs(first_got - first_ref)
                                                                      << " > bound " << first_bound;
        msg << ")";
      }
    }
  }
  if (!c.ok) {
    msg << "; " << c.bad_rows << " bad row(s), " << c.bad_elements << " bad element(s) in all; worst row "
        << c.worst_row << " (error " << c.max_row_error << "); tolerance row " << tol.row << ", element "
        << tol.elem_rel << " |ref| + " << tol.elem_abs << " rms(ref_row)";
    c.message = msg.str();
  }
  return c;
}

}  // namespace

Comparison compare_rows(const std::vector<float>& got, const std::vector<float>& ref, std::int64_t cols,
                        const Tolerance& tol, const std::vector<char>& check_row) {
  return compare_impl(got, ref, cols, tol, check_row);
}

Comparison compare_rows(const std::vector<float>& got, const std::vector<double>& ref, std::int64_t cols,
                        const Tolerance& tol, const std::vector<char>& check_row) {
  return compare_impl(got, ref, cols, tol, check_row);
}

::testing::AssertionResult rows_match(const std::vector<float>& got, const std::vector<float>& ref, std::int64_t cols,
                                      const Tolerance& tol, const std::string& what) {
  const Comparison c = compare_rows(got, ref, cols, tol);
  if (c.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << c.message;
}

::testing::AssertionResult rows_match(const std::vector<float>& got, const std::vector<float>& ref, std::int64_t cols,
                                      Scheme scheme, const std::string& what) {
  return rows_match(got, ref, cols, tolerance_of(scheme), what + " [" + scheme_name(scheme) + "]");
}

}  // namespace moekit::testing

// moekit-bench --op inv_rope_fp8_quant (rope_quant_bench.cu): its own sweep and table, entered
// from main() before the MoE options are parsed.
#pragma once

#include <string>

namespace moekit::bench {

/// Runs the inv_rope_fp8_quant benchmark with the command line's options; the exit status.
int run_rope_quant_bench(int argc, char** argv, const std::string& commit, const std::string& date);

}  // namespace moekit::bench

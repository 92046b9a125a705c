// The kernel benchmark behind `flashnorm bench` (issue 3; its own library, flashnorm_kernel_bench,
// outside the product's kernel library): every shape and M of a shapes.json
// (bench/shapes.json format), CUDA events, CUDA-graph captured and eager timings (medians),
// W rotated over more copies than the L2 holds, random inputs. Variants, all in one process run:
// rms_norm alone, unfused (rms_norm + cuBLASLt GEMM), bare cuBLASLt GEMM on folded weights, and
// each flashnorm_linear implementation; HBM floor (bytes of W + x + y over the copy bandwidth
// measured in the run) and tensor floor (2MNK over the bf16 GEMM rate measured in the run).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace flashnorm::bench {

// What `flashnorm bench` passes (src/cli/cmd_bench.cpp).
struct KernelBenchOptions {
  std::string shapes_path = "bench/shapes.json";
  std::vector<int> Ms;                 // empty: the file's "M" list
  std::vector<std::string> only;       // empty: every shape
  int graph_reps = 30;                 // graph replays per variant (median)
  int eager_reps = 10;                 // eager passes per variant (median)
  size_t rotate_bytes = 256ull << 20;  // W copies cover at least this many bytes (L2 is 60 MB)
  bool check = true;                   // compare flashnorm outputs with the fp64 CPU reference
  bool decode_sweep = false;           // also time the decode kernel at split-K 1..32
  std::string commit, driver;          // recorded verbatim in the JSON
  bool dirty = false;
};

// Runs the benchmark on the current device, prints a table on stdout and returns the JSON document
// {gpu, driver, commit, dirty, date, copy_bw_GBs, gemm_tflops, rows: [...]}. Throws
// flashnorm::Error on any CUDA/cuBLASLt failure or an unreadable shapes file.
nlohmann::json run_kernel_bench(const KernelBenchOptions& opt);

}  // namespace flashnorm::bench

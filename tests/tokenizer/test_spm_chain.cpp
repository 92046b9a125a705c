// SentencePiece BPE (src/tokenizer/spm.h) on a hostile vocabulary: a chain of UNUSED pieces
// "aa", "aaa", ... whose every merge must be split back into the pieces that formed it. The
// split used to recurse once per level (a segfault for a long enough chain and prompt); it must
// work within a small stack and give one "a" token per character.
#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "../../src/tokenizer/spm.h"

using flashnorm::tokenizer_detail::kSpmTypeUnused;
using flashnorm::tokenizer_detail::SpmModel;

namespace {

struct ChainRun {
  const SpmModel* model;
  std::string text;
  std::vector<int32_t> ids;
};

void* run_chain(void* arg) {
  auto* r = static_cast<ChainRun*>(arg);
  r->model->encode(r->text, r->ids);
  return nullptr;
}

}  // namespace

TEST(SpmHostile, LongUnusedMergeChainInASmallStack) {
  const int n = 4000;  // chain length and prompt length
  std::vector<std::string> tokens = {"<unk>"};
  std::vector<int8_t> types = {2};
  std::vector<float> scores = {0.f};
  for (int k = 1; k <= n; ++k) {
    tokens.push_back(std::string(static_cast<size_t>(k), 'a'));
    types.push_back(k == 1 ? 1 : kSpmTypeUnused);  // "a" normal, longer pieces UNUSED
    scores.push_back(static_cast<float>(k));       // longer pieces merge first
  }
  std::unordered_map<std::string_view, int32_t> by_text;
  for (size_t i = 0; i < tokens.size(); ++i) by_text[tokens[i]] = static_cast<int32_t>(i);
  const SpmModel model(tokens, types, by_text, scores, 0, /*add_space_prefix=*/false);

  ChainRun r{&model, std::string(static_cast<size_t>(n), 'a'), {}};
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 256 * 1024), 0);  // recursion of depth n overflows it
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, &attr, run_chain, &r), 0);
  ASSERT_EQ(pthread_join(t, nullptr), 0);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(r.ids.size(), static_cast<size_t>(n));
  for (int32_t id : r.ids) ASSERT_EQ(id, 1);  // "a"
}

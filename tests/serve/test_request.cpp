// serve::parse_request: OpenAI request bodies of /v1/completions and /v1/chat/completions, the
// defaults of OpenAI's API reference, and a 400 naming the field for every malformed one.
#include <gtest/gtest.h>

#include "serve/api_error.h"
#include "serve/request.h"

namespace flashnorm::serve {
namespace {

TEST(Request, CompletionFieldsAndDefaults) {
  const CompletionRequest r = parse_request(
      R"({"model": "m", "prompt": "hi", "max_tokens": 5, "temperature": 0, "top_p": 0.5,
          "top_k": 3, "seed": 18446744073709551615, "stop": ["a", "b"], "n": 1,
          "stream": true})",
      false);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.seed, 18446744073709551615ull);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.stream);
  const CompletionRequest d = parse_request(R"({"model": "m", "prompt": "hi"})", false);
  EXPECT_FALSE(d.max_tokens);  // the endpoint's default
  EXPECT_EQ(d.sampling.temperature, 1.0f);
  EXPECT_EQ(d.sampling.top_p, 1.0f);
  EXPECT_EQ(d.sampling.top_k, 0);
  EXPECT_FALSE(d.stream);
  EXPECT_TRUE(d.stop.empty());
}

TEST(Request, ChatMessages) {
  const CompletionRequest r = parse_request(
      R"({"model": "m", "messages": [{"role": "system", "content": "S"},
          {"role": "user", "content": "U"}], "max_completion_tokens": 7})",
      true);
  EXPECT_TRUE(r.chat);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "S");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "U");
  EXPECT_EQ(r.max_tokens, 7);
  const CompletionRequest u =
      parse_request(R"({"model": "m", "messages": [{"role": "user", "content": "U"}]})", true);
  ASSERT_EQ(u.messages.size(), 1u);
  EXPECT_EQ(u.messages[0].role, "user");
  // A conversation: earlier assistant turns are kept in order (an empty earlier turn too).
  const CompletionRequest c = parse_request(
      R"({"model": "m", "messages": [{"role": "user", "content": "a"},
          {"role": "assistant", "content": ""}, {"role": "user", "content": "c"}]})",
      true);
  ASSERT_EQ(c.messages.size(), 3u);
  EXPECT_EQ(c.messages[1].role, "assistant");
  EXPECT_EQ(c.messages[2].content, "c");
}

// The param a 400 names, or "(no error)".
std::string refused_param(const std::string& body, bool chat) {
  try {
    parse_request(body, chat);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error");
    return e.param;
  }
  return "(no error)";
}

TEST(Request, RefusalsNameTheField) {
  const std::pair<const char*, const char*> completions[] = {
      {R"({"model": "m", "prompt": )", ""},
      {R"([1])", ""},
      {"{\"model\": \"m\", \"prompt\": \"\xff\"}", ""},               // invalid UTF-8
      {R"({"model": "m", "prompt": "a", "max_tokens": 1e400})", ""},  // past double's range
      {R"({"model": "m", "prompt": "a", "temperature": -1e999})", ""},
      {R"({"prompt": "a"})", "model"},
      {R"({"model": 1, "prompt": "a"})", "model"},
      {R"({"model": "m"})", "prompt"},
      {R"({"model": "m", "prompt": ""})", "prompt"},
      {R"({"model": "m", "prompt": ["a"]})", "prompt"},
      {R"({"model": "m", "prompt": "a", "max_tokens": 0})", "max_tokens"},
      {R"({"model": "m", "prompt": "a", "max_tokens": 2.5})", "max_tokens"},
      {R"({"model": "m", "prompt": "a", "max_tokens": 99999999999})", "max_tokens"},
      {R"({"model": "m", "prompt": "a", "temperature": -1})", "temperature"},
      {R"({"model": "m", "prompt": "a", "temperature": "0"})", "temperature"},
      {R"({"model": "m", "prompt": "a", "top_p": 0})", "top_p"},
      {R"({"model": "m", "prompt": "a", "top_p": 1.5})", "top_p"},
      {R"({"model": "m", "prompt": "a", "top_k": -1})", "top_k"},
      {R"({"model": "m", "prompt": "a", "seed": -1})", "seed"},
      {R"({"model": "m", "prompt": "a", "seed": 1.5})", "seed"},
      {R"({"model": "m", "prompt": "a", "stop": ""})", "stop"},
      {R"({"model": "m", "prompt": "a", "stop": ["a","b","c","d","e"]})", "stop"},
      {R"({"model": "m", "prompt": "a", "stop": [1]})", "stop[0]"},
      {R"({"model": "m", "prompt": "a", "n": 2})", "n"},
      {R"({"model": "m", "prompt": "a", "stream": "yes"})", "stream"},
      {R"({"model": "m", "prompt": "a", "echo": true})", "echo"},
      // OpenAI's defaults that clients send are served; any other value is refused
      {R"({"model": "m", "prompt": "a", "presence_penalty": 0, "frequency_penalty": 0.0})",
       "(no error)"},
      {R"({"model": "m", "prompt": "a", "logprobs": null})", "(no error)"},
      {R"({"model": "m", "prompt": "a", "logprobs": false})", "(no error)"},
      {R"({"model": "m", "prompt": "a", "presence_penalty": 0.5})", "presence_penalty"},
      {R"({"model": "m", "prompt": "a", "frequency_penalty": "0"})", "frequency_penalty"},
      {R"({"model": "m", "prompt": "a", "logprobs": 2})", "logprobs"},
      {R"({"model": "m", "prompt": "a", "logprobs": true})", "logprobs"},
      {R"({"model": "m", "prompt": "a", "messages": []})", "messages"},
      // a duplicate key would otherwise keep its last value silently
      {R"({"model": "nope", "model": "m", "prompt": "a"})", ""},
  };
  for (const auto& [body, param] : completions) {
    EXPECT_EQ(refused_param(body, false), param) << body;
  }
  // nesting past 64 levels is refused as it is reached (a deep body would cost memory)
  EXPECT_EQ(refused_param(R"({"model": "m", "prompt": )" + std::string(100000, '['), false), "");
  const std::pair<const char*, const char*> chat[] = {
      {R"({"model": "m"})", "messages"},
      {R"({"model": "m", "messages": [{"role": "user", "role": "system", "content": "a"}]})", ""},
      {R"({"model": "m", "messages": [{"role": 1e400, "content": "a"}]})", ""},
      {R"({"model": "m", "messages": []})", "messages"},
      {R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"model": "m", "messages": [{"role": "user", "content": ""}]})", "messages[0].content"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a", "name": "x"}]})",
       "messages[0].name"},
      {R"({"model": "m", "messages": [{"role": "assistant", "content": "a"}]})",
       "messages[0].role"},
      {R"({"model": "m", "messages": [{"role": "system", "content": "a"}]})", "messages"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"},
          {"role": "assistant", "content": "b"}]})",
       "messages[1].role"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"},
          {"role": "user", "content": "b"}]})",
       "messages[1].role"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"},
          {"role": "system", "content": "b"}, {"role": "user", "content": "c"}]})",
       "messages[1].role"},
      {R"({"model": "m", "messages": [{"role": "tool", "content": "a"}]})", "messages[0].role"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"},
          {"role": "assistant", "content": "b"}, {"role": "user", "content": ""}]})",
       "messages[2].content"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": 3,
          "max_completion_tokens": 4})",
       "max_completion_tokens"},
      {R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "prompt": "a"})",
       "prompt"},
  };
  for (const auto& [body, param] : chat) EXPECT_EQ(refused_param(body, true), param) << body;
}

}  // namespace
}  // namespace flashnorm::serve

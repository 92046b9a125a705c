// serve::parse_model_spec: the `--model NAME=PATH[,key=value...]` values of `flashnorm serve`, each
// key parsed or refused with one line naming it (an unknown key, a bad value, a key given twice).
#include <gtest/gtest.h>

#include <string>

#include "flashnorm/error.h"
#include "serve/served_model.h"

namespace {

using flashnorm::serve::ModelSpec;
using flashnorm::serve::parse_model_spec;

TEST(ModelSpec, Keys) {
  ModelSpec defaults;
  defaults.limits.max_concurrent = 5;
  const ModelSpec s = parse_model_spec(
      "smol=/m.gguf,norm=standard,weights=native,ctx=64,max-queued=0,prefix-cache=off,"
      "chat-format=chatml",
      defaults);
  EXPECT_EQ(s.name, "smol");
  EXPECT_EQ(s.path, "/m.gguf");
  EXPECT_EQ(s.norm, "standard");
  EXPECT_EQ(s.weights, "native");
  EXPECT_EQ(s.ctx, 64);
  EXPECT_EQ(s.limits.max_queued, 0);
  EXPECT_EQ(s.limits.max_concurrent, 5);  // from the flags' defaults
  EXPECT_EQ(s.chat_format, "chatml");
  EXPECT_FALSE(s.limits.prefix_cache);
  const ModelSpec d = parse_model_spec("a=b", defaults);
  EXPECT_TRUE(d.limits.prefix_cache);
  EXPECT_EQ(d.norm, "flashnorm");
  EXPECT_EQ(d.weights, "auto");
  EXPECT_EQ(d.device, "cpu");
}

// Each refused with an Error whose one line names the offending key or part.
TEST(ModelSpec, Refusals) {
  const std::pair<const char*, const char*> cases[] = {
      {"nopath", "NAME=PATH"},
      {"=p", "NAME=PATH"},
      {"a=", "no PATH"},
      {"a=p,colour=red", "'colour'"},
      {"a=p,norm=rms", "norm=rms"},
      {"a=p,weights=q4", "weights=q4"},
      {"a=p,norm=standard,norm=flashnorm", "'norm' given twice"},
      {"a=p,weights=native,weights=f32", "'weights' given twice"},
      {"a=p,ctx=10,ctx=20", "'ctx' given twice"},
      {"a=p,max-concurrent=4097", "max-concurrent=4097 is above 4096"},
      {"a=p,max-queued=2147483647", "max-queued=2147483647 is above 1048576"},
      {"a=p,device=gpu", "device=gpu"},
      {"a=p,prefix-cache=maybe", "prefix-cache=maybe"},
  };
  for (const auto& [value, want] : cases) {
    try {
      parse_model_spec(value, ModelSpec{});
      ADD_FAILURE() << value << ": accepted";
    } catch (const flashnorm::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(want), std::string::npos) << value << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

}  // namespace

// serve::TextStream: text released in whole UTF-8 characters, cut before the first OpenAI stop
// string (which may arrive split across tokens), text that cannot start a stop string never held.
#include <gtest/gtest.h>

#include "serve/text_stream.h"

namespace flashnorm::serve {
namespace {

TEST(TextStream, ReleasesWholeUtf8Characters) {
  TextStream t({});
  EXPECT_EQ(t.push("caf"), "caf");
  EXPECT_EQ(t.push("\xC3"), "");  // first byte of U+00E9
  EXPECT_EQ(t.push("\xA9!"), "\xC3\xA9!");
  EXPECT_EQ(t.push("\xE2\x82"), "");  // two of U+20AC's three bytes
  EXPECT_EQ(t.flush(), "\xE2\x82");   // the end of a generation releases what is held, as is
  EXPECT_EQ(t.text(), "caf\xC3\xA9!\xE2\x82");
  EXPECT_FALSE(t.stopped());
}

TEST(TextStream, StopStringSplitAcrossTokens) {
  TextStream t({"END"});
  EXPECT_EQ(t.push("abc E"), "abc ");  // "E" may begin "END"
  EXPECT_EQ(t.push("N"), "");
  EXPECT_EQ(t.push("D and more"), "");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.push("later"), "");
  EXPECT_EQ(t.flush(), "");
  EXPECT_EQ(t.text(), "abc ");
}

TEST(TextStream, HeldTextReleasedWhenItCannotBeAStop) {
  TextStream t({"END"});
  EXPECT_EQ(t.push("xEN"), "x");
  EXPECT_EQ(t.push("q"), "ENq");
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.push("EN"), "");
  EXPECT_EQ(t.flush(), "EN");  // the generation ended (length) before the stop completed
  EXPECT_EQ(t.text(), "xENqEN");
}

TEST(TextStream, EarliestOfSeveralStops) {
  TextStream t({"world", "lo"});
  EXPECT_EQ(t.push("hello world"), "hel");
  EXPECT_TRUE(t.stopped());
}

TEST(TextStream, StopAtTheStart) {
  TextStream t({"\n\n"});
  EXPECT_EQ(t.push("\n"), "");
  EXPECT_EQ(t.push("\nrest"), "");
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.text(), "");
}

}  // namespace
}  // namespace flashnorm::serve

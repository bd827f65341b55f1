// EscapeForTerminal and DecodeUtf8 (common/printable.h): what ringctl prints of a server string.
#include "common/printable.h"

#include <string>

#include "gtest/gtest.h"

namespace ringtrain {
namespace {

TEST(PrintableTest, EscapesControlCharactersAndBrokenUtf8) {
  EXPECT_EQ(EscapeForTerminal("plain name"), "plain name");
  EXPECT_EQ(EscapeForTerminal("日本語 ça"), "日本語 ça");
  EXPECT_EQ(EscapeForTerminal("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(EscapeForTerminal("x\x07y\x7f"), "x\\x07y\\x7f");
  EXPECT_EQ(EscapeForTerminal("csi \xc2\x9b"), "csi \\u009b");
  EXPECT_EQ(EscapeForTerminal("raw \x9b byte"), "raw \\x9b byte");
  EXPECT_EQ(EscapeForTerminal(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(EscapeForTerminal("two\nlines\r"), "two\\x0alines\\x0d");
  EXPECT_EQ(EscapeForTerminal("two\nlines\tkept\r", /*keep_newlines=*/true),
            "two\nlines\tkept\\x0d");
  EXPECT_EQ(EscapeForTerminal("cut \xe6\x97"), "cut \\xe6\\x97");
}

// Bidi embeddings, overrides and isolates reorder what follows them ("Trojan Source"); ringctl
// must show them, not obey them. Neighbouring code points print as themselves.
TEST(PrintableTest, EscapesBidirectionalControls) {
  EXPECT_EQ(EscapeForTerminal("invoice\u202egpj.exe"), "invoice\\u202egpj.exe");
  EXPECT_EQ(EscapeForTerminal("\u202a\u202b\u202c\u202d"), "\\u202a\\u202b\\u202c\\u202d");
  EXPECT_EQ(EscapeForTerminal("\u2066a\u2067b\u2068c\u2069"), "\\u2066a\\u2067b\\u2068c\\u2069");
  EXPECT_EQ(EscapeForTerminal("\u2029\u202f\u2065\u206a"), "\u2029\u202f\u2065\u206a");
  EXPECT_TRUE(IsBidiControl(0x202e));
  EXPECT_TRUE(IsBidiControl(0x2066));
  EXPECT_FALSE(IsBidiControl(0x2029));
  EXPECT_FALSE(IsBidiControl(0x206a));
}

TEST(PrintableTest, DecodesUtf8) {
  EXPECT_EQ(DecodeUtf8("é", 0), std::make_pair(uint32_t{0xe9}, size_t{2}));
  EXPECT_EQ(DecodeUtf8("\xf0\x9f\x98\x80", 0), std::make_pair(uint32_t{0x1f600}, size_t{4}));
  EXPECT_EQ(DecodeUtf8("\xed\xa0\x80", 0).second, 0u);      // a surrogate
  EXPECT_EQ(DecodeUtf8("\xe0\x80\xaf", 0).second, 0u);      // overlong
  EXPECT_EQ(DecodeUtf8("\xf4\x90\x80\x80", 0).second, 0u);  // past U+10FFFF
}

TEST(PrintableTest, ValidUtf8ReplacesBrokenSequences) {
  EXPECT_EQ(ValidUtf8("plain ça 日本"), "plain ça 日本");
  EXPECT_EQ(ValidUtf8("cut \xe6\x97"), "cut \xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(ValidUtf8("\xff"), "\xef\xbf\xbd");
  EXPECT_EQ(ValidUtf8(std::string("nul\0", 4)), std::string("nul\0", 4));
  EXPECT_EQ(ValidUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
}

TEST(PrintableTest, Utf8PrefixNeverSplitsACharacter) {
  const std::string text = "ab日本";  // 2 + 3 + 3 bytes
  EXPECT_EQ(Utf8Prefix(text, 100), text);
  EXPECT_EQ(Utf8Prefix(text, 8), text);
  EXPECT_EQ(Utf8Prefix(text, 7), "ab日");
  EXPECT_EQ(Utf8Prefix(text, 5), "ab日");
  EXPECT_EQ(Utf8Prefix(text, 4), "ab");
  EXPECT_EQ(Utf8Prefix(text, 2), "ab");
  EXPECT_EQ(Utf8Prefix(text, 0), "");
  EXPECT_EQ(Utf8Prefix("\xf0\x9f\x98\x80x", 3), "");
}

TEST(PrintableTest, ExcerptCutsLongValuesOnCharactersAndSaysHowLong) {
  EXPECT_EQ(Excerpt("short"), "short");
  EXPECT_EQ(Excerpt(std::string(kMaxEchoBytes, 'v')), std::string(kMaxEchoBytes, 'v'));
  EXPECT_EQ(Excerpt(std::string(200 * 1024, 'v')),
            std::string(kMaxEchoBytes, 'v') + "\xe2\x80\xa6 (204800 bytes)");
  EXPECT_EQ(Excerpt("ab日本", 4), "ab\xe2\x80\xa6 (8 bytes)");  // 日 would be split: dropped whole
  EXPECT_LE(Excerpt(std::string(1 << 20, 'v')).size(), kMaxEchoBytes + 25);
}

}  // namespace
}  // namespace ringtrain

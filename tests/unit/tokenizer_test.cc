// Tests for the tokenizer library (common/tokenizer): hand-made tokenizer.json and tiktoken files
// whose ids are worked out by hand in the comments, the errors a broken file gets, the byte-level
// alphabet and the regex splitter. tokenizer_parity_test checks it against Hugging Face's library.
#include "common/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/regex_splitter.h"
#include "common/tokenizer/utf8_lossy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_util.h"

namespace ringtrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// A byte-level BPE: ids 0..255 are the bytes (in byte order), then the merges' tokens
//   256 he = h + e, 257 ll = l + l, 258 hell = he + ll, 259 hello = hell + o, 260 Ġw = Ġ + w,
// 261 "abc" with no merge that makes it (only ignore_merges reaches it), and the added token
// "<|eot|>" = 262.
Json HandMadeJson(const Json& pre_tokenizer) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelChar(static_cast<unsigned char>(b))] = b;
  const std::string space = ByteLevelChar(' ');  // "Ġ"
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab[space + "w"] = 260;
  vocab["abc"] = 261;
  vocab["<|eot|>"] = 262;
  return {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 262},
         {"content", "<|eot|>"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        // Both spellings Hugging Face has written: "a b" (older) and ["a", "b"].
        {"merges",
         {"h e", Json::array({"l", "l"}), "he ll", Json::array({"hell", "o"}),
          Json::array({space, "w"})}}}},
  };
}

Json ByteLevelPreTokenizer() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", true}};
}

class TokenizerFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ / name;
    testing::WriteFile(path, text);
    return path;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> LoadJson(const Json& json) {
    return Tokenizer::Load(Write("tokenizer.json", json.dump()));
  }
  std::vector<int32_t> Encode(Tokenizer& t, const std::string& text) {
    std::vector<int32_t> ids;
    t.Encode(text, &ids);
    return ids;
  }
  // Decode's (or DecodeBytes') text, or its error as text, so a failure shows rather than aborts.
  static std::string Decoded(const Tokenizer& t, const std::vector<int32_t>& ids,
                             bool bytes = false) {
    const absl::StatusOr<std::string> text = bytes ? t.DecodeBytes(ids) : t.Decode(ids);
    EXPECT_TRUE(text.ok()) << text.status();
    return text.ok() ? *text : text.status().ToString();
  }
  absl::Status LoadError(const Json& json) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(json);
    return t.ok() ? absl::OkStatus() : t.status();
  }

  testing::TempDir dir_;
};

TEST_F(TokenizerFileTest, JsonByteLevelKnownIds) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(HandMadeJson(ByteLevelPreTokenizer()));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 263);
  // "hello" merges all the way; " world" is one GPT-2 piece: Ġw, o, r, l, d; the added token is
  // matched before pre-tokenization; "hell" + "o" again.
  EXPECT_THAT(Encode(**t, "hello world<|eot|>hello"),
              ElementsAre(259, 260, 'o', 'r', 'l', 'd', 262, 259));
  // "llhe": ll and he merge, and no merge joins ll + he.
  EXPECT_THAT(Encode(**t, "llhe"), ElementsAre(257, 256));
  // "abc" is a token, but no merge makes it.
  EXPECT_THAT(Encode(**t, "abc"), ElementsAre('a', 'b', 'c'));
  // Bytes that are not UTF-8 still encode, one id per byte.
  EXPECT_THAT(Encode(**t, std::string("\xff\xfe", 2)), ElementsAre(0xff, 0xfe));
  EXPECT_THAT(Encode(**t, ""), ElementsAre());
  EXPECT_THAT((*t)->Describe(), HasSubstr("tokenizer.json: byte-level BPE, 263 ids (5 merges"));
}

TEST_F(TokenizerFileTest, JsonIgnoreMergesTakesWholeWords) {
  Json json = HandMadeJson(ByteLevelPreTokenizer());
  json["model"]["ignore_merges"] = true;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(json);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(Encode(**t, "abc abcd"), ElementsAre(261, ' ', 'a', 'b', 'c', 'd'));
}

TEST_F(TokenizerFileTest, JsonSplitSequenceAsLlama3Ships) {
  // A Split that isolates every character: no merge can cross a piece, so "hello" stays bytes.
  const Json pre = {{"type", "Sequence"},
                    {"pretokenizers",
                     {{{"type", "Split"},
                       {"pattern", {{"Regex", "."}}},
                       {"behavior", "Isolated"},
                       {"invert", false}},
                      {{"type", "ByteLevel"},
                       {"add_prefix_space", false},
                       {"trim_offsets", false},
                       {"use_regex", false}}}}};
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(HandMadeJson(pre));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(Encode(**t, "hello"), ElementsAre('h', 'e', 'l', 'l', 'o'));
  // ByteLevel with use_regex false and no Split: the whole text is one word.
  Json whole = pre;
  whole["pretokenizers"].erase(0);
  t = LoadJson(HandMadeJson(whole));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(Encode(**t, "hello world"), ElementsAre(259, 260, 'o', 'r', 'l', 'd'));
}

TEST_F(TokenizerFileTest, JsonAddPrefixSpace) {
  Json pre = ByteLevelPreTokenizer();
  pre["add_prefix_space"] = true;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(HandMadeJson(pre));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(Encode(**t, "w"), ElementsAre(260));
}

TEST_F(TokenizerFileTest, JsonErrorsNameFieldAndFile) {
  const auto expect = [&](const Json& json, const std::string& part) {
    const absl::Status s = LoadError(json);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(part));
    EXPECT_THAT(std::string(s.message()), HasSubstr(dir_ / "tokenizer.json"));
  };
  Json json = HandMadeJson(ByteLevelPreTokenizer());
  json["model"]["type"] = "Unigram";
  expect(json, "model.type is \"Unigram\", not \"BPE\"");
  json["model"]["type"] = "SomethingElse";
  expect(json, "model.type is an unknown type");

  json = HandMadeJson(ByteLevelPreTokenizer());
  json["model"].erase("merges");
  expect(json, "model.merges is missing");
  json = HandMadeJson(ByteLevelPreTokenizer());
  json.erase("model");
  expect(json, "model is missing");
  json = HandMadeJson(ByteLevelPreTokenizer());
  json["model"]["merges"].push_back("x y z");
  expect(json, "model.merges[5] is not two tokens separated by a space");
  json = HandMadeJson(ByteLevelPreTokenizer());
  json["model"]["merges"].push_back(Json::array({"a", "c"}));
  expect(json, "merge 5 (0-based) makes a token that is not in the vocabulary");

  expect(HandMadeJson({{"type", "Whitespace"}}), "pre_tokenizer is \"Whitespace\", not supported");
  expect(HandMadeJson(nullptr), "pre_tokenizer is null");
  json = HandMadeJson(ByteLevelPreTokenizer());
  json["normalizer"] = {{"type", "NFC"}};
  expect(json, "normalizer is \"NFC\"");
  json = HandMadeJson(ByteLevelPreTokenizer());
  json["added_tokens"][0]["lstrip"] = true;
  expect(json, "added_tokens[0].lstrip is true");

  // A vocabulary without every byte cannot encode arbitrary text.
  json = HandMadeJson(ByteLevelPreTokenizer());
  json["model"]["vocab"].erase(ByteLevelChar('z'));
  expect(json, "no single-byte token for 1 of the 256 byte values (the first is byte 122)");

  const absl::StatusOr<std::unique_ptr<Tokenizer>> broken =
      Tokenizer::Load(Write("broken.json", "{\"model\": [secret"));
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("not valid JSON (error at byte"));
  EXPECT_THAT(std::string(broken.status().message()), ::testing::Not(HasSubstr("secret")));

  // A number past a double's range is the parser's one non-syntax error; it is refused, not thrown.
  const absl::StatusOr<std::unique_ptr<Tokenizer>> huge =
      Tokenizer::Load(Write("huge.json", "{\"model\": {\"vocab\": {\"a\": 22e2222222}}}"));
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(std::string(huge.status().message()),
              HasSubstr("a number in the JSON is too large to represent"));

  const absl::StatusOr<std::unique_ptr<Tokenizer>> missing = Tokenizer::Load(dir_ / "absent.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir_ / "absent.json"));
}

// Decode gives back what Encode was given, added tokens included, for any bytes.
TEST_F(TokenizerFileTest, JsonDecodeRoundTripsEncode) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(HandMadeJson(ByteLevelPreTokenizer()));
  ASSERT_TRUE(t.ok()) << t.status();
  for (const std::string text : {"hello world<|eot|>hello", "llhe abc\t\n\n  x", "",
                                 "\xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80<|eot|>"}) {
    const std::vector<int32_t> ids = Encode(**t, text);
    absl::StatusOr<std::string> back = (*t)->Decode(ids);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
  }
  EXPECT_EQ(Decoded(**t, {259, 260, 'o', 'r', 'l', 'd', 262, 259}), "hello world<|eot|>hello");
}

// Added tokens, special or not, go through the ByteLevel decoder's rule (Hugging Face's): "Ġx"
// is all alphabet and decodes to " x"; "a b" holds a raw space and stays as written.
TEST_F(TokenizerFileTest, JsonDecodeAddedTokens) {
  Json json = HandMadeJson(ByteLevelPreTokenizer());
  json["added_tokens"].push_back({{"id", 263}, {"content", ByteLevelChar(' ') + "x"}});
  json["added_tokens"].push_back({{"id", 264}, {"content", "a b"}, {"special", false}});
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(json);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Decoded(**t, {262, 263, 'y', 264, 262}), "<|eot|> xya b<|eot|>");
}

// A token that is part of a character: U+FFFD alone, the character beside its other half; the
// bytes themselves from DecodeBytes, so a caller printing token by token shows the character.
TEST_F(TokenizerFileTest, JsonDecodeHalfCharacter) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(HandMadeJson(ByteLevelPreTokenizer()));
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int32_t> tokyo = Encode(**t, "\xE6\x9D\xB1");  // one id per byte
  ASSERT_THAT(tokyo, ElementsAre(0xE6, 0x9D, 0xB1));
  EXPECT_EQ(Decoded(**t, {0xE6, 0x9D}), "\xEF\xBF\xBD");
  EXPECT_EQ(Decoded(**t, {0xE6, 0x9D, 'a'}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(Decoded(**t, tokyo), "\xE6\x9D\xB1");
  EXPECT_EQ(Decoded(**t, {0xE6, 0x9D}, /*bytes=*/true), "\xE6\x9D");
  EXPECT_EQ(Decoded(**t, {0xE6}, /*bytes=*/true) + Decoded(**t, {0x9D, 0xB1}, /*bytes=*/true),
            "\xE6\x9D\xB1");
}

TEST_F(TokenizerFileTest, JsonDecodeErrors) {
  Json json = HandMadeJson(ByteLevelPreTokenizer());
  json["added_tokens"].push_back({{"id", 270}, {"content", "<|gap|>"}});  // 263..269 unused
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadJson(json);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Decoded(**t, {270}), "<|gap|>");
  const auto error = [&](const std::vector<int32_t>& ids) {
    const absl::StatusOr<std::string> text = (*t)->Decode(ids);
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << text.status();
    return std::string(text.status().message());
  };
  EXPECT_THAT(error({'a', 271}), HasSubstr("ids[1] = 271 is not a token id: this tokenizer's ids "
                                           "are 0..270"));
  EXPECT_THAT(error({-1}), HasSubstr("ids[0] = -1 is not a token id"));
  EXPECT_THAT(error({'a', 'b', 265}),
              HasSubstr("ids[2] = 265 is not a token id: neither the vocabulary nor the added "
                        "tokens have it"));
  EXPECT_THAT(error({INT32_MAX}), HasSubstr("ids[0] = 2147483647"));

  // Another decoder would give other text (none joins tokens with spaces): encoding still works,
  // decoding is refused naming it.
  for (const Json& decoder : {Json(nullptr), Json({{"type", "Sequence"}, {"decoders", {}}})}) {
    json = HandMadeJson(ByteLevelPreTokenizer());
    json["decoder"] = decoder;
    t = LoadJson(json);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_THAT(Encode(**t, "hello"), ElementsAre(259));
    const absl::StatusOr<std::string> text = (*t)->Decode({259});
    EXPECT_EQ(text.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(text.status().message()),
                HasSubstr(decoder.is_null() ? "decoder is null" : "decoder is \"Sequence\""));
  }
  json = HandMadeJson(ByteLevelPreTokenizer());
  json.erase("decoder");
  t = LoadJson(json);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Decode({259}).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A tiktoken file: the 256 bytes at ranks 0..255, then 256 "34", 257 "12", 258 "45", 259 "he",
// 260 "ll", 261 "hell".
std::string HandMadeTiktoken() {
  std::string text;
  for (int b = 0; b < 256; ++b) {
    absl::StrAppend(&text, absl::Base64Escape(std::string(1, static_cast<char>(b))), " ", b, "\n");
  }
  int rank = 256;
  for (const char* token : {"34", "12", "45", "he", "ll", "hell"}) {
    absl::StrAppend(&text, absl::Base64Escape(token), " ", rank++, "\n");
  }
  return text;
}

TEST_F(TokenizerFileTest, TiktokenKnownIds) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      Tokenizer::Load(Write("tokenizer.model", HandMadeTiktoken()));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 262);
  // Llama 3's pattern cuts digits in threes: "123" | "45". "123": 12 merges (257), then "123" is
  // no token; "45" is a token. Without the split "34" (the lowest rank) would merge first.
  EXPECT_THAT(Encode(**t, "12345"), ElementsAre(257, '3', 258));
  // Merges are implied by ranks: he (259) and ll (260), then he + ll = "hell" (261), which no
  // listed merge would need to name.
  EXPECT_THAT(Encode(**t, "hells"), ElementsAre(261, 's'));
  // "I'm" is "I" + "'m" under the pattern's contractions; " " before a digit is its own piece.
  EXPECT_THAT(Encode(**t, "I'm 1"), ElementsAre('I', '\'', 'm', ' ', '1'));
  EXPECT_THAT((*t)->Describe(), HasSubstr("tiktoken: byte-level BPE, 262 ids (merges by rank"));
}

// tiktoken decodes to the tokens' bytes; no added tokens, so "<|eot|>" is text both ways.
TEST_F(TokenizerFileTest, TiktokenDecodeRoundTripsEncode) {
  std::string file = HandMadeTiktoken();
  absl::StrAppend(&file, absl::Base64Escape("gap"), " 300\n");  // 262..299 unused
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(Write("tokenizer.model", file));
  ASSERT_TRUE(t.ok()) << t.status();
  for (const std::string text : {"12345 hells <|eot|>", "\xE6\x9D\xB1 \xFF\xFE", ""}) {
    EXPECT_EQ(Decoded(**t, Encode(**t, text), /*bytes=*/true), text);
  }
  EXPECT_EQ(Decoded(**t, {261, 257, 300}), "hell12gap");
  EXPECT_EQ(Decoded(**t, {0xFF, 'a'}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_THAT(std::string((*t)->Decode({'a', 262}).status().message()),
              HasSubstr("ids[1] = 262 is not a token id: neither the vocabulary"));
}

// Ids far apart cost memory for the tokens there are, not for the largest id (the fuzzer's
// out-of-memory input named one near INT32_MAX).
TEST_F(TokenizerFileTest, TiktokenHugeIdIsSparse) {
  std::string file = HandMadeTiktoken();
  absl::StrAppend(&file, absl::Base64Escape("far"), " 2147483646\n");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(Write("tokenizer.model", file));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 2147483647);
  EXPECT_EQ(Decoded(**t, {261, 2147483646}), "hellfar");
  EXPECT_THAT(std::string((*t)->Decode({2147483645}).status().message()),
              HasSubstr("ids[0] = 2147483645 is not a token id: neither the vocabulary nor the "
                        "added tokens have it (the tokenizer's ids are 0..2147483646 with gaps)"));
}

TEST_F(TokenizerFileTest, TiktokenErrorsNameLine) {
  const auto error = [&](const std::string& text) {
    const absl::StatusOr<std::unique_ptr<Tokenizer>> t =
        Tokenizer::Load(Write("tokenizer.model", text));
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(t.status().message());
  };
  EXPECT_THAT(error("YQ== 0\nYg== 1\n!!!! 2\n"),
              HasSubstr("line 3: bad base64 in the first field"));
  EXPECT_THAT(error("YQ== 0\n\nYg== x\n"), HasSubstr("line 3: the rank (second field) is not"));
  EXPECT_THAT(error("YQ== 0\nYg== 0\n"), HasSubstr("line 2: rank 0 again"));
  EXPECT_THAT(error("YQ==\n"), HasSubstr("line 1: not two fields"));
  EXPECT_THAT(error(""), HasSubstr("no tokens"));
  // Valid lines, but not a byte-level vocabulary.
  EXPECT_THAT(error("YQ== 0\n"), HasSubstr("no single-byte token for 255 of the 256"));
}

// A truncated character is one U+FFFD, a byte that cannot start or continue one is one each
// (Unicode's maximal subparts, what Rust's from_utf8_lossy and Python's errors="replace" do);
// tokenizer_parity_test compares whole decodes with Hugging Face's.
TEST(Utf8LossyTest, MaximalSubpartsBecomeOneReplacement) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(Utf8Lossy("plain \xE6\x9D\xB1 \xF0\x9F\x98\x80"),
            "plain \xE6\x9D\xB1 \xF0\x9F\x98\x80");
  EXPECT_EQ(Utf8Lossy("\xE6\x9D"), r);  // the first two bytes of U+6771
  EXPECT_EQ(Utf8Lossy(std::string("\xE6\x9D") + "a"), r + "a");
  EXPECT_EQ(Utf8Lossy("\xE6\x9D\xE6\x9D\xB1"), r + "\xE6\x9D\xB1");
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), r);
  EXPECT_EQ(Utf8Lossy("\xE0\x80"), r + r);                  // E0 needs A0..BF next (overlong)
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), r + r + r);          // a surrogate
  EXPECT_EQ(Utf8Lossy("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(Utf8Lossy("\xC0\xAF\xFF\x80"), r + r + r + r);
  EXPECT_EQ(Utf8Lossy(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(ByteLevelTest, AlphabetRoundTrips) {
  EXPECT_EQ(ByteLevelChar(' '), "\xC4\xA0");  // U+0120 "Ġ"
  EXPECT_EQ(ByteLevelChar('a'), "a");
  for (int b = 0; b < 256; ++b) {
    const std::optional<std::string> back =
        ByteLevelDecode(ByteLevelChar(static_cast<unsigned char>(b)));
    ASSERT_TRUE(back.has_value()) << b;
    EXPECT_EQ(*back, std::string(1, static_cast<char>(b)));
  }
  EXPECT_FALSE(ByteLevelDecode("\xE6\x9D\xB1").has_value());  // "東": not in the alphabet
  EXPECT_FALSE(ByteLevelDecode(" ").has_value());             // a raw space is shown as "Ġ"
  // The decoder's rule for a whole token: all in the alphabet, or kept as written.
  EXPECT_EQ(ByteLevelDecoderBytes(ByteLevelChar(' ') + "x"), " x");
  EXPECT_EQ(ByteLevelDecoderBytes("a b"), "a b");
  EXPECT_EQ(ByteLevelDecoderBytes("\xE6\x9D\xB1"), "\xE6\x9D\xB1");
}

TEST(RegexSplitterTest, PiecesCoverTheText) {
  absl::StatusOr<std::unique_ptr<RegexSplitter>> split = RegexSplitter::Create(kLlama3Pattern);
  ASSERT_TRUE(split.ok()) << split.status();
  std::vector<std::string> pieces;
  const std::string text = "Hello  world\t\n\n12345 東京\xff!";
  (*split)->Split(text, [&](absl::string_view p) { pieces.emplace_back(p); });
  EXPECT_THAT(pieces,
              ElementsAre("Hello", " ", " world", "\t\n\n", "123", "45", " 東京", "\xff", "!"));
  const absl::StatusOr<std::unique_ptr<RegexSplitter>> bad = RegexSplitter::Create("(unclosed");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("does not compile"));
}

}  // namespace
}  // namespace ringtrain

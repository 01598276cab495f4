// Tokenizer tests: llama.cpp's vocabulary test vectors and the reference prompts' ids (id for id),
// decode round trips, streaming UTF-8, special-token parsing, and errors on bad metadata.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_test_util.h"
#include "rewind/error.h"
#include "rewind/gguf.h"
#include "rewind/tokenizer.h"

namespace fs = std::filesystem;
using namespace rwd;

namespace {

const std::string kShared = REWIND_SHARED_DIR;

std::unique_ptr<Tokenizer> load(const std::string& path) {
    const GgufFile gguf = GgufFile::open(path);
    return Tokenizer::from_gguf(gguf);
}
std::unique_ptr<Tokenizer> load_vocab(const std::string& name) {
    return load(kShared + "/vocab/ggml-vocab-" + name + ".gguf");
}
std::unique_ptr<Tokenizer> load_model(const std::string& name) { return load(kShared + "/models/" + name + ".gguf"); }

struct Vector {
    std::string text;
    std::vector<TokenId> ids;
};

// NAME.gguf.inp: every string is followed by "\n__ggml_vocab_test__\n"; NAME.gguf.out: one line
// of space-separated ids per string (an empty line for the empty string).
std::vector<Vector> load_vectors(const std::string& name) {
    const std::string base = kShared + "/vocab/ggml-vocab-" + name + ".gguf";
    const std::string inp = gguf_test::read_file(base + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<Vector> v;
    size_t pos = 0;
    while (pos < inp.size()) {
        const size_t next = inp.find(sep, pos);
        if (next == std::string::npos) throw std::runtime_error(base + ".inp: text after the last separator");
        v.push_back({inp.substr(pos, next - pos), {}});
        pos = next + sep.size();
    }
    std::istringstream out(gguf_test::read_file(base + ".out"));
    std::string line;
    size_t i = 0;
    while (std::getline(out, line)) {
        if (i >= v.size()) throw std::runtime_error(base + ".out: more lines than strings");
        std::istringstream ls(line);
        TokenId id;
        while (ls >> id) v[i].ids.push_back(id);
        ++i;
    }
    if (i != v.size()) throw std::runtime_error(base + ".out: fewer lines than strings");
    return v;
}

std::string show(const std::vector<TokenId>& ids) {
    std::string s;
    for (TokenId id : ids) {
        if (!s.empty()) s += ' ';
        s += std::to_string(id);
    }
    return s;
}

bool valid_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += n;
    }
    return true;
}

TokenId id_of(const Tokenizer& tok, const std::string& piece) {
    for (TokenId i = 0; i < tok.n_vocab(); ++i)
        if (tok.piece(i) == piece) return i;
    return -1;
}

bool contains(const std::vector<TokenId>& ids, TokenId id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

// ---- llama.cpp's vocabulary test vectors ----

class VocabVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, MatchLlamaCppIdForId) {
    const auto tok = load_vocab(GetParam());
    const auto vectors = load_vectors(GetParam());
    ASSERT_FALSE(vectors.empty());
    size_t matched = 0;
    for (const Vector& v : vectors) {
        const auto ids = tok->encode(v.text, AddBos::No);
        if (ids == v.ids)
            ++matched;
        else
            ADD_FAILURE() << "text '" << v.text << "'\n  want " << show(v.ids) << "\n  got  " << show(ids);
    }
    std::cout << GetParam() << ": " << matched << "/" << vectors.size() << " vectors match\n";
    EXPECT_EQ(matched, vectors.size());
}

TEST_P(VocabVectors, DecodeRoundTrips) {
    const auto tok = load_vocab(GetParam());
    for (const Vector& v : load_vectors(GetParam())) {
        EXPECT_EQ(tok->decode(tok->encode(v.text, AddBos::No)), v.text);
        EXPECT_EQ(tok->decode(tok->encode(v.text, AddBos::Yes)), v.text);
    }
}

TEST_P(VocabVectors, StreamDecodingEqualsDecode) {
    const auto tok = load_vocab(GetParam());
    for (const Vector& v : load_vectors(GetParam())) {
        Utf8StreamDecoder dec(*tok);
        std::string text;
        for (TokenId id : tok->encode(v.text)) {
            const std::string chunk = dec.push(id);
            EXPECT_TRUE(valid_utf8(chunk));
            text += chunk;
        }
        text += dec.flush();
        EXPECT_EQ(text, v.text);
    }
}

// Random text: ASCII, multi-byte characters, special-token spellings and stray bytes. Encoding
// must never fail, and valid UTF-8 must decode back unchanged. (Malformed UTF-8 is not always
// restored: both kinds cut symbols by lead byte as llama.cpp does, so a stray lead byte swallows
// the next bytes, e.g. SentencePiece's space mark, and byte-level BPE turns it into U+FFFD.)
TEST_P(VocabVectors, RandomTextRoundTrips) {
    const auto tok = load_vocab(GetParam());
    const bool spm = tok->model() == TokenizerModel::Spm;
    const std::vector<std::string> atoms = {"a", "Z", "7", " ", "  ", "\n", "\t", "'s", "'ll", "__", "(", "é", "½",
                                            "日本", "\xF0\x9F\xA6\x99", "\xE2\x96\x81", "<s>", "</s>",
                                            "<|endoftext|>", "<0x41>", "\xC3", "\xFF", "\x80"};
    std::mt19937 rng(1234);
    size_t checked = 0;
    for (int round = 0; round < 400; ++round) {
        std::string text;
        const int n = static_cast<int>(rng() % 40);
        for (int i = 0; i < n; ++i) {
            const std::string& a = atoms[rng() % atoms.size()];
            if (spm && a == "\xE2\x96\x81") continue; // SentencePiece's space mark decodes as ' '
            text += a;
        }
        const auto ids = tok->encode(text, AddBos::No);
        for (TokenId id : ids) ASSERT_TRUE(tok->valid(id));
        EXPECT_TRUE(valid_utf8(tok->decode(ids)) || !valid_utf8(text));
        if (valid_utf8(text)) {
            EXPECT_EQ(tok->decode(ids), text) << "'" << text << "'";
            ++checked;
        }
        EXPECT_NO_THROW(tok->encode(text, AddBos::Yes, SpecialTokens::Parse));
    }
    EXPECT_GT(checked, 20u);
}

INSTANTIATE_TEST_SUITE_P(Vocab, VocabVectors, ::testing::Values("llama-spm", "phi-3", "gpt-2", "starcoder", "llama-bpe", "qwen2"),
                         [](const auto& info) {
                             std::string n = info.param;
                             std::replace(n.begin(), n.end(), '-', '_');
                             return n;
                         });

TEST(Tokenizer, VocabKinds) {
    EXPECT_EQ(load_vocab("llama-spm")->model(), TokenizerModel::Spm);
    const auto gpt2 = load_vocab("gpt-2");
    EXPECT_EQ(gpt2->model(), TokenizerModel::Bpe);
    EXPECT_EQ(gpt2->n_vocab(), 50257);
    EXPECT_EQ(gpt2->eos(), 50256);
    EXPECT_TRUE(gpt2->is_eog(50256));
    EXPECT_FALSE(gpt2->add_bos());
}

// ---- llama.cpp's tokenization of the reference prompts (BOS included) ----

TEST(Tokenizer, ReferencePromptIds) {
    size_t files = 0, prompts = 0;
    for (const auto& entry : fs::directory_iterator(kShared + "/reference")) {
        if (entry.path().extension() != ".jsonl") continue;
        const std::string model = kShared + "/models/" + entry.path().stem().string() + ".gguf";
        const auto tok = load(model);
        std::ifstream f(entry.path());
        std::string line;
        while (std::getline(f, line)) {
            if (line.empty()) continue;
            const auto j = nlohmann::json::parse(line);
            const std::string prompt = j.at("prompt").get<std::string>();
            const auto want = j.at("prompt_ids").get<std::vector<TokenId>>();
            const auto ids = tok->encode(prompt);
            EXPECT_EQ(ids, want) << entry.path().filename() << ": '" << prompt << "'";
            EXPECT_EQ(tok->decode(ids), prompt);
            ++prompts;
        }
        ++files;
    }
    EXPECT_GE(files, 5u);
    EXPECT_GE(prompts, 52u);
}

TEST(Tokenizer, BosAndEmptyText) {
    const auto tok = load_model("pycode-4m");
    EXPECT_TRUE(tok->add_bos());
    EXPECT_FALSE(tok->add_space_prefix());
    EXPECT_EQ(tok->encode(""), std::vector<TokenId>{tok->bos()});
    EXPECT_TRUE(tok->encode("", AddBos::No).empty());
    const auto with = tok->encode("x = 1");
    const auto without = tok->encode("x = 1", AddBos::No);
    ASSERT_EQ(with.size(), without.size() + 1);
    EXPECT_EQ(with[0], tok->bos());
    // BOS renders as nothing unless asked for.
    EXPECT_EQ(tok->decode(with), "x = 1");
    EXPECT_EQ(tok->decode(with, true), "<s>x = 1");
}

TEST(Tokenizer, LeadingSpaceRuleWithSpacePrefix) {
    const auto tok = load_model("aidreams260K");
    ASSERT_TRUE(tok->add_space_prefix());
    const auto ids = tok->encode("Echoes of");
    EXPECT_EQ(tok->decode(ids), "Echoes of");
    // A continuation keeps its leading space.
    Utf8StreamDecoder cont(*tok, /*at_text_start=*/false);
    std::string s;
    for (TokenId id : tok->encode("Echoes of", AddBos::No)) s += cont.push(id);
    EXPECT_EQ(s, " Echoes of");
}

TEST(Tokenizer, LongInputRoundTrips) {
    // Thousands of tokens: the merge queue keeps this fast, and nothing may be lost.
    std::string text;
    std::ifstream f(kShared + "/reference/pycode-4m.jsonl");
    std::string line;
    while (std::getline(f, line)) text += nlohmann::json::parse(line).at("prompt").get<std::string>();
    std::string big;
    for (int i = 0; i < 8; ++i) big += text;
    for (const char* name : {"pycode-4m"}) {
        const auto tok = load_model(name);
        const auto ids = tok->encode(big);
        EXPECT_GT(ids.size(), 5000u);
        EXPECT_EQ(tok->decode(ids), big);
    }
    const auto gpt2 = load_vocab("gpt-2");
    EXPECT_EQ(gpt2->decode(gpt2->encode(big)), big);
}

// ---- streaming ----

TEST(Utf8Stream, MultibyteTextSplitAcrossByteTokens) {
    const auto tok = load_model("pycode-4m"); // 4096 pieces: non-ASCII falls back to bytes
    const std::string text = "# naïve café — 日本語 🦙 done\n";
    const auto ids = tok->encode(text, AddBos::No);
    size_t byte_tokens = 0;
    for (TokenId id : ids) byte_tokens += tok->kind(id) == TokenKind::Byte;
    EXPECT_GE(byte_tokens, 8u);

    Utf8StreamDecoder dec(*tok);
    std::string out;
    size_t empty_pushes = 0;
    for (TokenId id : ids) {
        const std::string chunk = dec.push(id);
        EXPECT_TRUE(valid_utf8(chunk)) << "chunk of token " << id;
        empty_pushes += chunk.empty();
        out += chunk;
    }
    EXPECT_GT(empty_pushes, 0u); // some bytes had to wait for the rest of their character
    out += dec.flush();
    EXPECT_EQ(out, text);
}

TEST(Utf8Stream, InvalidAndTruncatedSequencesBecomeReplacementChars) {
    const auto tok = load_model("pycode-4m");
    const TokenId e2 = id_of(*tok, "<0xE2>"), x82 = id_of(*tok, "<0x82>"), ff = id_of(*tok, "<0xFF>");
    const TokenId a = id_of(*tok, "a");
    ASSERT_GE(e2, 0);
    ASSERT_GE(x82, 0);
    ASSERT_GE(ff, 0);
    ASSERT_GE(a, 0);
    const std::string fffd = "\xEF\xBF\xBD";
    {
        Utf8StreamDecoder dec(*tok);
        EXPECT_EQ(dec.push(e2), "");
        EXPECT_EQ(dec.push(x82), "");
        EXPECT_EQ(dec.push(a), fffd + "a"); // E2 82 cut short by 'a'
        EXPECT_EQ(dec.push(ff), fffd);
        EXPECT_EQ(dec.flush(), "");
    }
    {
        Utf8StreamDecoder dec(*tok);
        EXPECT_EQ(dec.push(e2), "");
        EXPECT_EQ(dec.flush(), fffd);
        EXPECT_EQ(dec.flush(), "");
    }
}

// ---- special tokens ----

TEST(SpecialTokens, ParsedOnlyWhenAsked) {
    const auto tok = load_model("pycode-4m");
    const std::string text = "<s>def f():</s>";
    const auto parsed = tok->encode(text, AddBos::No, SpecialTokens::Parse);
    ASSERT_GE(parsed.size(), 3u);
    EXPECT_EQ(parsed.front(), tok->bos());
    EXPECT_EQ(parsed.back(), tok->eos());
    EXPECT_EQ(tok->decode(parsed), "def f():");
    EXPECT_EQ(tok->decode(parsed, true), text);

    const auto plain = tok->encode(text, AddBos::No);
    EXPECT_FALSE(contains(plain, tok->bos()));
    EXPECT_FALSE(contains(plain, tok->eos()));
    EXPECT_EQ(tok->decode(plain), text);
}

TEST(SpecialTokens, ByteLevelBpe) {
    const auto tok = load_vocab("gpt-2");
    const auto parsed = tok->encode("Hello<|endoftext|>world", AddBos::No, SpecialTokens::Parse);
    std::vector<TokenId> want = tok->encode("Hello");
    want.push_back(50256);
    for (TokenId id : tok->encode("world")) want.push_back(id);
    EXPECT_EQ(parsed, want);
    const auto plain = tok->encode("Hello<|endoftext|>world", AddBos::No);
    EXPECT_FALSE(contains(plain, 50256));
    EXPECT_EQ(tok->decode(plain), "Hello<|endoftext|>world");
}

// StarCoder's byte-level vocabulary has no token for the byte 0xF1 (the lead byte of U+40000..
// U+7FFFF): llama.cpp drops such a byte; it must not become the unknown token, which in that
// vocabulary is "<|endoftext|>" (found by fuzz_tokenizer).
TEST(Tokenizer, ByteMissingFromByteLevelVocabularyIsDropped) {
    const auto tok = load_vocab("starcoder");
    const std::string text = "9\xF1\xA7\xA7\xA7 #20";
    const auto ids = tok->encode(text, AddBos::No, SpecialTokens::Parse);
    for (TokenId id : ids) EXPECT_FALSE(tok->is_control(id)) << "id " << id;
    EXPECT_EQ(tok->decode(ids), "9\xA7\xA7\xA7 #20");
}

TEST(SpecialTokens, LongestPieceWinsAndPhi3StripsWhitespaceAfter) {
    const auto tok = load_vocab("phi-3");
    // "<|endoftext|>" must not be read as "<|end|>" plus text.
    EXPECT_EQ(tok->encode("<|endoftext|>", AddBos::No, SpecialTokens::Parse), std::vector<TokenId>{32000});
    const auto chat = tok->encode("<|user|>\nHi<|end|>\n<|assistant|>", AddBos::Yes, SpecialTokens::Parse);
    ASSERT_GE(chat.size(), 5u);
    EXPECT_EQ(chat[0], 1);
    EXPECT_EQ(chat[1], 32010);
    EXPECT_NE(chat[2], 13); // the newline after <|user|> is eaten (llama.cpp's rule for Phi-3)
    EXPECT_EQ(chat[chat.size() - 2], 32007);
    EXPECT_EQ(chat.back(), 32001);
    EXPECT_EQ(tok->encode("<|user|>\nHi", AddBos::No, SpecialTokens::Parse),
              tok->encode("<|user|>Hi", AddBos::No, SpecialTokens::Parse));
}

TEST(SpecialTokens, UserDefinedPiecesAlwaysMatch) {
    // Qwen2's "<tool_call>" is user-defined: llama.cpp (like Hugging Face) matches it even in
    // plain text; its control tokens only when parsing specials.
    const auto tok = load_vocab("qwen2");
    const TokenId tool_call = id_of(*tok, "<tool_call>"), im_end = id_of(*tok, "<|im_end|>");
    ASSERT_EQ(tok->kind(tool_call), TokenKind::UserDefined);
    EXPECT_FALSE(tok->is_control(tool_call));
    EXPECT_TRUE(contains(tok->encode("a<tool_call>b"), tool_call));
    EXPECT_FALSE(contains(tok->encode("a<|im_end|>b"), im_end));
    EXPECT_TRUE(contains(tok->encode("a<|im_end|>b", AddBos::No, SpecialTokens::Parse), im_end));
    EXPECT_EQ(tok->decode(tok->encode("a<tool_call>b")), "a<tool_call>b");
}

// Phi-3's "</s>" is user-defined in the file, but llama.cpp lists "</s>" among the texts that end
// generation and makes every such token control: so with special parsing off it stays text (three
// pieces, like "<s>"), and it renders as "" unless asked.
TEST(SpecialTokens, Phi3EndOfSentenceIsControlAsInLlamaCpp) {
    const auto tok = load_vocab("phi-3");
    ASSERT_EQ(tok->piece(2), "</s>");
    EXPECT_EQ(tok->kind(2), TokenKind::UserDefined);
    EXPECT_TRUE(tok->is_control(2));
    EXPECT_TRUE(tok->is_eog(2));
    const auto eos_text = tok->encode("</s>", AddBos::No);
    EXPECT_EQ(eos_text.size(), 3u);
    EXPECT_FALSE(contains(eos_text, 2));
    EXPECT_EQ(tok->encode("<s>", AddBos::No).size(), 3u);
    EXPECT_FALSE(contains(tok->encode("<s>", AddBos::No), 1));
    EXPECT_FALSE(contains(tok->encode("a</s>b", AddBos::No), 2));
    EXPECT_EQ(tok->decode(tok->encode("a</s>b", AddBos::No)), "a</s>b");
    // Parsed as special, both are single tokens; "</s>" also eats the whitespace after it (Phi-3).
    EXPECT_EQ(tok->encode("</s>", AddBos::No, SpecialTokens::Parse), std::vector<TokenId>{2});
    EXPECT_EQ(tok->encode("<s>", AddBos::No, SpecialTokens::Parse), std::vector<TokenId>{1});
    EXPECT_EQ(tok->encode("a</s> b", AddBos::No, SpecialTokens::Parse),
              tok->encode("a</s>b", AddBos::No, SpecialTokens::Parse));
    EXPECT_EQ(tok->decode({2}), "");
    EXPECT_EQ(tok->decode({2}, true), "</s>");
}

TEST(SpecialTokens, EndOfGenerationSets) {
    const auto llama = load_vocab("llama-bpe");
    EXPECT_EQ(llama->eos(), 128001);
    EXPECT_EQ(llama->eot(), 128009); // "<|eot_id|>", found by its text
    EXPECT_EQ(llama->eog_ids(), (std::vector<TokenId>{128001, 128009}));
    EXPECT_FALSE(llama->is_eog(128006)); // <|start_header_id|>
    EXPECT_FALSE(llama->is_eog(-1));
    EXPECT_FALSE(llama->is_eog(static_cast<TokenId>(llama->n_vocab())));

    const auto qwen = load_vocab("qwen2");
    for (const char* t : {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"})
        EXPECT_TRUE(qwen->is_eog(id_of(*qwen, t))) << t;
    EXPECT_FALSE(qwen->is_eog(id_of(*qwen, "<|im_start|>")));
    EXPECT_EQ(qwen->eot(), id_of(*qwen, "<|im_end|>"));
    // Qwen2's vocabulary also has an ordinary token "</s>": llama.cpp makes it control and EOG too.
    const TokenId plain_eos = id_of(*qwen, "</s>");
    EXPECT_EQ(qwen->kind(plain_eos), TokenKind::Normal);
    EXPECT_TRUE(qwen->is_control(plain_eos));
    EXPECT_TRUE(qwen->is_eog(plain_eos));
    EXPECT_TRUE(qwen->is_eog(qwen->eos()));
}

TEST(SpecialTokens, PaddingEntriesRenderAsNothing) {
    // Qwen2.5's 0.5B vocabulary pads 151,665 tokens to 151,936 with unused "[PAD...]" entries:
    // never matched in text, rendered as nothing (llama.cpp's rule for unused tokens).
    const auto tok = load_vocab("qwen2");
    ASSERT_EQ(tok->n_vocab(), 151936);
    ASSERT_EQ(tok->kind(151935), TokenKind::Unused);
    EXPECT_EQ(tok->decode({151935}), "");
    EXPECT_EQ(tok->decode({151935}, true), "");
    const std::string pad = tok->piece(151935);
    EXPECT_FALSE(contains(tok->encode(pad, AddBos::No, SpecialTokens::Parse), 151935));
    EXPECT_EQ(tok->decode(tok->encode(pad, AddBos::No, SpecialTokens::Parse)), pad);
}

TEST(SpecialTokens, Llama3ChatTurn) {
    const auto tok = load_vocab("llama-bpe");
    EXPECT_TRUE(tok->add_bos());
    const std::string text = "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>";
    const auto parsed = tok->encode(text, AddBos::Default, SpecialTokens::Parse);
    ASSERT_GE(parsed.size(), 6u);
    EXPECT_EQ(parsed[0], 128000);
    EXPECT_EQ(parsed[1], 128006);
    EXPECT_EQ(parsed[3], 128007);
    EXPECT_EQ(parsed.back(), 128009);
    EXPECT_EQ(tok->decode(parsed), "user\n\nHi there");
    EXPECT_EQ(tok->decode(parsed, true), "<|begin_of_text|>" + text);
    const auto plain = tok->encode(text);
    EXPECT_EQ(plain[0], 128000);
    for (TokenId id : {128006, 128007, 128009}) EXPECT_FALSE(contains(plain, id));
    EXPECT_EQ(tok->decode(plain), text);
}

// ---- small hand-built vocabularies ----

TokenizerSpec tiny_spm() {
    TokenizerSpec s;
    s.model = "llama";
    s.tokens = {"<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc", "\xE2\x96\x81"};
    s.scores = {0, 0, 0, -10, -10, -10, -1, -1, -10};
    s.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
    s.add_space_prefix = false;
    return s;
}

TEST(TinyVocab, SpmHighestScoreThenLeftmost) {
    auto spec = tiny_spm();
    auto tok = Tokenizer::from_spec(spec);
    EXPECT_EQ(tok->encode("abc", AddBos::No), (std::vector<TokenId>{6, 5})); // tie: leftmost pair
    spec.scores[7] = -0.5f;
    tok = Tokenizer::from_spec(spec);
    EXPECT_EQ(tok->encode("abc", AddBos::No), (std::vector<TokenId>{3, 7}));
    // No byte pieces: characters the vocabulary lacks become <unk>.
    EXPECT_EQ(tok->encode("ad", AddBos::No), (std::vector<TokenId>{3, 0}));
    EXPECT_EQ(tok->encode("a", AddBos::Default), (std::vector<TokenId>{1, 3}));
}

TEST(TinyVocab, BpeLowestRankFirst) {
    TokenizerSpec s;
    s.model = "gpt2";
    s.pre = "gpt-2";
    s.tokens = {"a", "b", "c", "ab", "bc", "<|end|>"};
    s.token_types = {1, 1, 1, 1, 1, 3};
    s.merges = {"b c", "a b"};
    auto tok = Tokenizer::from_spec(s);
    EXPECT_EQ(tok->encode("abc"), (std::vector<TokenId>{0, 4}));
    EXPECT_EQ(tok->encode("ab"), (std::vector<TokenId>{3}));
    EXPECT_THROW(tok->encode("abc", AddBos::Yes), Error); // no BOS in this vocabulary
    s.merges = {"a b", "b c"};
    tok = Tokenizer::from_spec(s);
    EXPECT_EQ(tok->encode("abc"), (std::vector<TokenId>{3, 2}));
}

// Merges across a word boundary cannot happen, so which merges fire shows where each
// tokenizer.ggml.pre split the text.
TEST(TinyVocab, BpePreTokenizerSplits) {
    TokenizerSpec s;
    s.model = "gpt2";
    s.tokens = {"a", ",", "b", "\xC4\xA0", "1", "2", "3", "4", "5", ",,", "\xC4\xA0" "1", "34", "'", "s", "'s"};
    s.merges = {", ,", "\xC4\xA0 1", "3 4", "' s"};
    const auto ids = [&](const std::string& pre, const std::string& text) {
        s.pre = pre;
        return Tokenizer::from_spec(s)->encode(text);
    };
    using V = std::vector<TokenId>;
    // gpt-2: "a" ",," "b" " 12345"
    EXPECT_EQ(ids("gpt-2", "a,,b 12345"), (V{0, 9, 2, 10, 5, 11, 8}));
    // starcoder: every digit alone first, so neither " 1" nor "34" can merge
    EXPECT_EQ(ids("starcoder", "a,,b 12345"), (V{0, 9, 2, 3, 4, 5, 6, 7, 8}));
    // llama.cpp's default: punctuation runs, GPT-2, digit runs, then groups of three digits
    EXPECT_EQ(ids("", "a,,b 12345"), (V{0, 9, 2, 3, 4, 5, 6, 7, 8}));
    EXPECT_EQ(ids("default", "b 12 345"), ids("", "b 12 345"));
    // A contraction is its own word; the quote alone glues to a following letter run otherwise.
    EXPECT_EQ(ids("gpt-2", "a's"), (V{0, 14}));
    EXPECT_EQ(ids("default", "a's"), (V{0, 12, 13})); // ' is punctuation: split off first
}

// The words a pre-tokenizer cuts `text` into, seen through a vocabulary built for the purpose:
// every byte symbol, every substring of the text's symbols, and merges ranked so that each word
// merges left to right into one token (merges never cross a word boundary).
std::vector<std::string> words_of(const std::string& pre, const std::string& text) {
    const auto symbol = [](unsigned char b) { // GPT-2's printable stand-in for a byte, as UTF-8
        const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        uint32_t cp = b;
        if (!printable) {
            cp = 256;
            for (int x = 0; x < b; ++x)
                cp += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        }
        std::string s;
        if (cp < 0x80) {
            s += static_cast<char>(cp);
        } else {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        }
        return s;
    };
    std::vector<std::string> sym;
    for (char c : text) sym.push_back(symbol(static_cast<unsigned char>(c)));
    TokenizerSpec s;
    s.model = "gpt2";
    s.pre = pre;
    s.add_bos = false;
    for (int b = 0; b < 256; ++b) s.tokens.push_back(symbol(static_cast<unsigned char>(b)));
    for (size_t i = 0; i < sym.size(); ++i) {
        std::string acc = sym[i];
        for (size_t j = i + 1; j < sym.size(); ++j) {
            s.merges.push_back(acc + " " + sym[j]);
            acc += sym[j];
            s.tokens.push_back(acc);
        }
    }
    const auto tok = Tokenizer::from_spec(s);
    std::vector<std::string> words;
    for (TokenId id : tok->encode(text)) words.push_back(tok->decode({id}));
    return words;
}

using Words = std::vector<std::string>;

TEST(PreTokenizers, Llama3AndQwen2) {
    const std::string text = "Hello  world's 12345\n\n  x!!\nI'M (ok)";
    EXPECT_EQ(words_of("llama-bpe", text), (Words{"Hello", " ", " world", "'s", " ", "123", "45", "\n\n", " ", " x",
                                                  "!!\n", "I", "'M", " (", "ok", ")"}));
    EXPECT_EQ(words_of("llama3", "a 1234567"), (Words{"a", " ", "123", "456", "7"}));
    // Qwen2: the same pattern with every digit alone.
    EXPECT_EQ(words_of("qwen2", text), (Words{"Hello", " ", " world", "'s", " ", "1", "2", "3", "4", "5", "\n\n", " ",
                                              " x", "!!\n", "I", "'M", " (", "ok", ")"}));
    // A non-letter other than a newline leads a word; a blank run before a newline ends at it.
    EXPECT_EQ(words_of("qwen2", "\tab .cd \r\n ef"), (Words{"\tab", " .", "cd", " \r\n", " ef"}));
}

TEST(PreTokenizers, DeepSeek) {
    EXPECT_EQ(words_of("deepseek-coder", "ab, 12\n\xE4\xB8\xAD\xE6\x96\x87x"), // "ab, 12\n中文x"
              (Words{"ab", ",", " ", "1", "2", "\n", "\xE4\xB8\xAD\xE6\x96\x87", "x"}));
    EXPECT_EQ(words_of("deepseek-llm", "Hi, \xE4\xB8\x96\xE7\x95\x8C 42 ok  "), // "Hi, 世界 42 ok  "
              (Words{"Hi", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", " ", "42", " ok", "  "}));
    // U+3000 (ideographic space) is a blank, never part of the CJK or symbol classes it lies in.
    EXPECT_EQ(words_of("deepseek-llm", "a\xE3\x80\x80\xE3\x80\x82"), (Words{"a", "\xE3\x80\x80", "\xE3\x80\x82"}));
    // Letters outside the cased-letter list (here Hebrew) are not words of their own.
    EXPECT_EQ(words_of("deepseek-llm", "x \xD7\x90\xD7\x91"), (Words{"x", " \xD7\x90\xD7\x91"}));
}

// Every supported split on random text (ASCII, blanks of every kind, CJK, letters outside the
// DeepSeek list, digits, symbols, stray bytes), over a vocabulary of the 256 byte symbols: the
// words must tile the text, so valid UTF-8 decodes back unchanged, and nothing may fail.
TEST(PreTokenizers, RandomTextRoundTrips) {
    const std::vector<std::string> atoms = {"a", "Z", "7", "42", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "(", "!!",
                                            "\xC3\xA9", "\xD7\x90", "\xE4\xB8\xAD", "\xE3\x80\x80",
                                            "\xE3\x80\x82", "\xEF\xBC\x81", "\xE2\x80\x83", "\xC2\xA0",
                                            "\xF0\x9F\xA6\x99", "\xD9\xA3", "\xC3", "\xFF"};
    for (const char* pre : {"llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "gpt-2", "starcoder", "default"}) {
        TokenizerSpec s = [] {
            TokenizerSpec b;
            b.model = "gpt2";
            b.add_bos = false;
            for (int x = 0; x < 256; ++x) {
                const auto byte = static_cast<unsigned char>(x);
                const bool printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174;
                uint32_t cp = byte;
                if (!printable) {
                    cp = 256;
                    for (int y = 0; y < x; ++y) cp += !((y >= 33 && y <= 126) || (y >= 161 && y <= 172) || y >= 174);
                }
                std::string t;
                if (cp < 0x80) {
                    t += static_cast<char>(cp);
                } else {
                    t += static_cast<char>(0xC0 | (cp >> 6));
                    t += static_cast<char>(0x80 | (cp & 0x3F));
                }
                b.tokens.push_back(t);
            }
            b.merges = {"a Z"};
            return b;
        }();
        s.pre = pre;
        const auto tok = Tokenizer::from_spec(s);
        std::mt19937 rng(99);
        for (int round = 0; round < 300; ++round) {
            std::string text;
            const int n = static_cast<int>(rng() % 30);
            for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
            const auto ids = tok->encode(text);
            if (valid_utf8(text)) {
                EXPECT_EQ(tok->decode(ids), text) << pre << ": '" << text << "'";
            }
        }
    }
}

// ---- errors ----

void expect_error(const TokenizerSpec& s, const std::string& needle) {
    try {
        Tokenizer::from_spec(s);
        ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(TokenizerErrors, MissingOrInconsistentMetadata) {
    expect_error(TokenizerSpec{}, "tokenizer.ggml.model");
    TokenizerSpec s = tiny_spm();
    s.model = "bert";
    expect_error(s, "'bert' is not supported");
    s = tiny_spm();
    s.tokens.clear();
    expect_error(s, "tokenizer.ggml.tokens");
    s = tiny_spm();
    s.scores.pop_back();
    expect_error(s, "tokenizer.ggml.scores");
    s = tiny_spm();
    s.token_types.push_back(1);
    expect_error(s, "tokenizer.ggml.token_type");
    s = tiny_spm();
    s.token_types[4] = 9;
    expect_error(s, "tokenizer.ggml.token_type[4]");
    s = tiny_spm();
    s.bos = 100;
    expect_error(s, "tokenizer.ggml.bos_token_id");
    s = tiny_spm();
    s.token_types[3] = 6; // "a" claimed to be a byte piece
    expect_error(s, "<0xNN>");

    TokenizerSpec b;
    b.model = "gpt2";
    b.tokens = {"a", "b", "ab"};
    expect_error(b, "tokenizer.ggml.merges");
    b.merges = {"ab"};
    expect_error(b, "tokenizer.ggml.merges[0]");
    b.merges = {"a b"};
    b.pre = "no-such-pre";
    expect_error(b, "tokenizer.ggml.pre = 'no-such-pre' is not supported");

    // "none" written as -1 or as a uint32 0xFFFFFFFF is accepted.
    s = tiny_spm();
    s.pad = 0xFFFFFFFFll;
    s.eot = -1;
    EXPECT_EQ(Tokenizer::from_spec(s)->pad(), -1);
}

TEST(TokenizerErrors, BadTokenIds) {
    const auto tok = Tokenizer::from_spec(tiny_spm());
    EXPECT_THROW(tok->token_to_piece(-1), Error);
    EXPECT_THROW(tok->token_to_piece(static_cast<TokenId>(tok->n_vocab())), Error);
    EXPECT_THROW(tok->decode({3, 99}), Error);
}

TEST(Tokenizer, DraftAndTargetShareTheTokenizer) {
    const auto a = load_model("pycode-4m");
    const auto b = load_model("pycode-600k");
    ASSERT_EQ(a->n_vocab(), b->n_vocab());
    for (TokenId i = 0; i < a->n_vocab(); ++i) ASSERT_EQ(a->piece(i), b->piece(i));
    const std::string text = "import os\nprint(os.getcwd())\n";
    EXPECT_EQ(a->encode(text), b->encode(text));
}

// from_gguf on real files with one tokenizer key broken: the error names the file and the key.
TEST(TokenizerErrors, FromGgufNamesFileAndKey) {
    using namespace gguf_test;
    const std::string src = model_path("aidreams260K.gguf");
    TempDir dir;
    const auto expect_gguf_error = [&](Builder b, const std::vector<std::string>& needles) {
        const std::string path = dir.file("broken.gguf");
        b.write(path);
        const GgufFile gguf = GgufFile::open(path);
        try {
            Tokenizer::from_gguf(gguf);
            ADD_FAILURE() << "no error; expected one mentioning '" << needles.back() << "'";
        } catch (const Error& e) {
            for (const std::string& n : needles)
                EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
        }
    };
    const auto f32_array = [](std::initializer_list<float> v) {
        Enc e;
        e.u32(F32).u64(v.size());
        for (float x : v) e.put(x);
        return e.b;
    };
    expect_gguf_error(Builder::load(src).remove_kv("tokenizer.ggml.model"), {"broken.gguf", "tokenizer.ggml.model"});
    expect_gguf_error(Builder::load(src).remove_kv("tokenizer.ggml.tokens"), {"broken.gguf", "tokenizer.ggml.tokens"});
    expect_gguf_error(Builder::load(src).set("tokenizer.ggml.scores", ARR, f32_array({0, 1, 2})),
                      {"broken.gguf", "tokenizer.ggml.scores has 3 entries"});
    expect_gguf_error(Builder::load(src).set("tokenizer.ggml.bos_token_id", U32, raw<uint32_t>(9999)),
                      {"broken.gguf", "tokenizer.ggml.bos_token_id = 9999"});
    expect_gguf_error(Builder::load(src).set("tokenizer.ggml.model", STR, raw_str("bert")),
                      {"broken.gguf", "'bert' is not supported"});
    expect_gguf_error(Builder::load(src).set("tokenizer.ggml.tokens", ARR, f32_array({0, 1})),
                      {"broken.gguf", "tokenizer.ggml.tokens"});

    // Untouched, the same round trip loads.
    const std::string path = dir.file("ok.gguf");
    Builder::load(src).write(path);
    EXPECT_EQ(Tokenizer::from_gguf(GgufFile::open(path))->n_vocab(), 512);
}

} // namespace

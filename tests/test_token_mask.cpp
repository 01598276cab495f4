// Exact token masks on real vocabularies (Llama 3, Qwen2.5, the bundled SentencePiece one): the
// mask's trie walk against token-by-token checks along random valid paths, EOG and control rules,
// token names, and the compiled-grammar cache.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "rewind/error.h"
#include "rewind/gguf.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/token_mask.h"

using namespace rwd;
using namespace rwd::grammar;

namespace {

std::string shared_path(const std::string& rel) { return std::string(REWIND_SHARED_DIR) + "/" + rel; }

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

const Tokenizer& vocab_tokenizer(const std::string& path) {
    static std::map<std::string, std::unique_ptr<Tokenizer>> loaded; // test fixture: one load per file
    auto& slot = loaded[path];
    if (!slot) slot = Tokenizer::from_gguf(GgufFile::open(path));
    return *slot;
}

bool bit(const std::vector<uint32_t>& mask, TokenId t) { return (mask[static_cast<size_t>(t) / 32] >> (t % 32)) & 1u; }

// Token t checked on its own: its bytes from the present text, against a second matcher that
// accepted the same text byte by byte (no trie walk, no mask cache).
bool expected_allowed(Matcher& ref, const Tokenizer& tok, const VocabIndex& v, TokenId t) {
    if (v.is_eog(t)) return ref.is_complete();
    if (tok.is_control(t) || v.is_control(t)) return false;
    const std::string b = tok.token_to_piece(t, false);
    return !b.empty() && ref.valid_prefix_length(b) == b.size();
}

// Walks `steps` random allowed tokens (mostly short ones, or any with `any_length`), checking the
// whole mask at each step; returns the text. With `shared`, the matcher uses that cache's local
// masks (shared with other paths through the same grammar).
std::string check_random_path(const std::string& gbnf, const Tokenizer& tok, uint32_t seed, int steps,
                              GrammarCache* shared = nullptr, bool any_length = false) {
    GrammarCache own;
    GrammarCache& cache = shared ? *shared : own;
    const GrammarCache::Compiled c = cache.get(gbnf, tok);
    const auto& grammar = c.grammar;
    const auto& vocab = c.vocab;
    TokenMatcher tm(grammar, vocab, {}, shared ? c.local_masks : nullptr);
    Matcher ref(grammar);
    std::mt19937 rng(seed);
    std::vector<uint32_t> mask(static_cast<size_t>((tok.n_vocab() + 31) / 32));
    std::string text;
    for (int step = 0; step < steps; ++step) {
        tm.fill_mask(mask);
        std::vector<TokenId> allowed;
        for (TokenId t = 0; t < tok.n_vocab(); ++t) {
            const bool want = expected_allowed(ref, tok, *vocab, t);
            EXPECT_EQ(bit(mask, t), want) << "token " << t << " '" << tok.token_to_piece(t) << "' after '" << text << "'";
            if (bit(mask, t) != want) return text;
            EXPECT_EQ(tm.allows(t), want);
            if (want && !vocab->is_eog(t)) allowed.push_back(t);
        }
        if (allowed.empty()) break;
        // Mostly short tokens, so paths go deep into the grammar rather than into long words.
        TokenId pick = allowed[rng() % allowed.size()];
        for (int tries = 0; !any_length && tries < 8 && tok.token_to_piece(pick).size() > 2; ++tries)
            pick = allowed[rng() % allowed.size()];
        EXPECT_TRUE(tm.accept(pick));
        const std::string b = tok.token_to_piece(pick);
        EXPECT_TRUE(ref.accept_bytes(b));
        text += b;
    }
    return text;
}

const char* kVocabs[] = {"vocab/ggml-vocab-llama-bpe.gguf", "vocab/ggml-vocab-qwen2.gguf", "models/pycode-4m.gguf"};
const char* kGrammars[] = {"json.gbnf", "arithmetic.gbnf", "list.gbnf", "japanese.gbnf", "chess.gbnf", "c.gbnf"};

} // namespace

class TokenMaskPaths : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(TokenMaskPaths, MaskEqualsTokenByTokenCheck) {
    const auto [v, g] = GetParam();
    const Tokenizer& tok = vocab_tokenizer(shared_path(kVocabs[v]));
    const std::string gbnf = read_text(shared_path(std::string("grammars/") + kGrammars[g]));
    for (uint32_t seed = 1; seed <= 2; ++seed) {
        const std::string text = check_random_path(gbnf, tok, seed * 7919 + static_cast<uint32_t>(g), 24);
        if (::testing::Test::HasFailure()) return;
        EXPECT_FALSE(text.empty());
    }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenMaskPaths, ::testing::Combine(::testing::Range(0, 3), ::testing::Range(0, 6)));

// Schema-like grammars: bounded strings as chains of named rules, digit ranges, any character
// (so tokens end inside characters), nesting through named rules.
TEST(TokenMask, SchemaLikeGrammarsOnLlama3) {
    const Tokenizer& tok = vocab_tokenizer(shared_path("vocab/ggml-vocab-llama-bpe.gguf"));
    const std::string gbnf = R"(root ::= "{\"name\":" ws str ",\"n\":" ws int ",\"tags\":[" ( str ( "," str )* )? "]" ( ",\"kid\":" root )? "}"
str ::= "\"" s0 "\""
s0 ::= ch s1 | ""
s1 ::= ch s2 | ""
s2 ::= ch s3 | ""
s3 ::= ch | ""
ch ::= [^"\\\x00-\x1F] | "\\" ["\\/nt]
int ::= "-"? ( [1-9] [0-9]{0,2} | "0" )
ws ::= " "?)";
    for (uint32_t seed = 1; seed <= 3; ++seed) {
        check_random_path(gbnf, tok, seed, 40);
        if (::testing::Test::HasFailure()) return;
    }
}

// Tokens ending inside characters where the classes in play take the whole range of what the
// character can become, part of it, or none: masks still equal token-by-token checks.
TEST(TokenMask, UnfinishedCharactersWholeAndPartialRanges) {
    const Tokenizer& tok = vocab_tokenizer(shared_path("vocab/ggml-vocab-llama-bpe.gguf"));
    const std::string gbnf = R"(root ::= "\"" ( [^"\\] | [一-鿿] "!" | [ぁ-ゟ]+ "?" | [é-ü] )* "\"")";
    GrammarCache cache;
    for (uint32_t seed = 1; seed <= 3; ++seed) {
        check_random_path(gbnf, tok, seed, 30, &cache, true);
        if (::testing::Test::HasFailure()) return;
    }
}

// The JSON workload's schemas: bounded strings expand to long chains of rules whose links share
// walks of the short tokens (same shape); paths of any token length reach the chains' last links.
// Paths share one cache, so masks computed along one path serve the next.
TEST(TokenMask, WorkloadSchemasOnLlama3) {
    const std::string path = shared_path("workloads/json.jsonl");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "no JSON workload fixture at " << path;
    const Tokenizer& tok = vocab_tokenizer(shared_path("vocab/ggml-vocab-llama-bpe.gguf"));
    std::set<std::string> grammars; // each item's schema, compact as the workload runs it
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) grammars.insert(json_schema_to_gbnf(nlohmann::json::parse(line).at("json_schema").dump()));
    ASSERT_FALSE(grammars.empty());
    GrammarCache cache;
    uint32_t seed = 11;
    for (const std::string& gbnf : grammars) {
        for (int path_no = 0; path_no < 3; ++path_no) {
            check_random_path(gbnf, tok, seed++, 40, &cache, /*any_length=*/path_no != 1);
            if (::testing::Test::HasFailure()) return;
        }
    }
}

// A bounded repetition longer than the short-token band: its links past the band's reach share
// one walk, those near its end do not; masks stay exact along the whole chain.
TEST(TokenMask, LongBoundedRepetitionSharesWalks) {
    const Tokenizer& tok = vocab_tokenizer(shared_path("vocab/ggml-vocab-llama-bpe.gguf"));
    const std::string gbnf = R"(root ::= "[\"" [a-z_]{0,60} "\"" ( ",\"" [^"]{1,50} "\"" )? "]")";
    GrammarCache cache;
    for (uint32_t seed = 1; seed <= 3; ++seed) {
        check_random_path(gbnf, tok, seed, 36, &cache, /*any_length=*/seed != 2);
        if (::testing::Test::HasFailure()) return;
    }
}

// Compiling a grammar prepares the short tokens' walks of a bounded repetition's last links (each
// a walk of most of the vocabulary): a sequence that runs the string to its bound walks none of
// them (the longer bands' walks, a few thousand tokens, are left to first use).
TEST(TokenMask, PreparedWalksReachTheEndOfBoundedRepetitions) {
    const Tokenizer& tok = vocab_tokenizer(shared_path("vocab/ggml-vocab-llama-bpe.gguf"));
    const std::string gbnf = R"(root ::= "{\"a\":\"" [^"\\]{0,300} "\",\"b\":" [0-9]{1,3} "}")";
    const std::vector<TokenId> text = tok.encode(R"({"a":")" + std::string(300, 'x') + R"(","b":123})", AddBos::No);
    for (const size_t prepare : {size_t{0}, size_t{256}}) {
        GrammarCache cache(8, prepare);
        const GrammarCache::Compiled c = cache.get(gbnf, tok);
        const size_t compiled = c.local_masks->walks(0);
        TokenMatcher tm(c.grammar, c.vocab, {}, c.local_masks);
        std::vector<uint32_t> mask(static_cast<size_t>((tok.n_vocab() + 31) / 32));
        for (TokenId t : text) {
            tm.fill_mask(mask);
            ASSERT_TRUE(bit(mask, t)) << "token " << t;
            ASSERT_TRUE(tm.accept(t));
        }
        ASSERT_TRUE(tm.matcher().is_complete());
        if (prepare == 0) EXPECT_GT(c.local_masks->walks(0), compiled) << "nothing prepared: the masks walk";
        else EXPECT_EQ(c.local_masks->walks(0), compiled) << "short-token walks left to the sequence";
    }
}

TEST(TokenMask, EogOnlyWhenCompleteControlOnlyWhenNamed) {
    const Tokenizer& tok = vocab_tokenizer(shared_path("vocab/ggml-vocab-llama-bpe.gguf"));
    GrammarCache cache;
    TokenMatcher tm(cache.grammar("root ::= \"ab\" | \"ab\" <|start_header_id|> \"c\"", tok), cache.vocab(tok));
    const TokenId eot = tok.eot();
    const auto eom = tok.encode("<|start_header_id|>", AddBos::No, SpecialTokens::Parse);
    ASSERT_EQ(eom.size(), 1u);
    EXPECT_FALSE(tm.allows(eot));
    EXPECT_FALSE(tm.allows(eom[0]));
    ASSERT_TRUE(tm.accept(tok.encode("ab", AddBos::No)[0]));
    EXPECT_TRUE(tm.allows(eot));    // complete
    EXPECT_TRUE(tm.allows(eom[0])); // a control token the grammar names
    const TokenId bos = tok.bos();
    EXPECT_FALSE(tm.allows(bos));
    ASSERT_TRUE(tm.accept(eom[0]));
    EXPECT_FALSE(tm.matcher().is_complete()); // "c" must follow
    EXPECT_TRUE(tm.allows(tok.encode("c", AddBos::No)[0]));
}

TEST(TokenMask, TokensSpanningElementsAndEndingInsideCharacters) {
    const Tokenizer& tok = vocab_tokenizer(shared_path("vocab/ggml-vocab-llama-bpe.gguf"));
    GrammarCache cache;
    TokenMatcher tm(cache.grammar(R"(root ::= "{\"" [a-z]+ "\":" [0-9]+ "}")", tok), cache.vocab(tok));
    const auto ids = tok.encode("{\"", AddBos::No);
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_TRUE(tm.allows(ids[0]));
    EXPECT_TRUE(tm.allows(tok.encode("{", AddBos::No)[0]));
    ASSERT_TRUE(tm.accept(ids[0]));
    const auto key = tok.encode("name\":", AddBos::No); // a token may cross from the key into ":"
    for (TokenId t : key) ASSERT_TRUE(tm.accept(t));
    EXPECT_FALSE(tm.allows(tok.encode("}", AddBos::No)[0]));
    // Byte-fallback pieces of the SentencePiece vocabulary: an unfinished character.
    const Tokenizer& spm = vocab_tokenizer(shared_path("models/pycode-4m.gguf"));
    TokenMatcher cjk(cache.grammar("root ::= [一-鿿]+", spm), cache.vocab(spm));
    const auto bytes = spm.encode("\xE4\xB8\x80", AddBos::No);
    ASSERT_EQ(bytes.size(), 3u);
    EXPECT_TRUE(cjk.allows(bytes[0]));
    ASSERT_TRUE(cjk.accept(bytes[0]));
    EXPECT_FALSE(cjk.matcher().is_complete());
    EXPECT_FALSE(cjk.allows(bytes[0])); // E4 again: not a continuation byte
    EXPECT_TRUE(cjk.accept(bytes[1]));
    EXPECT_TRUE(cjk.accept(bytes[2]));
    EXPECT_TRUE(cjk.matcher().is_complete());
}

TEST(TokenMask, ShapeErrorsAndTokenNames) {
    const Tokenizer& tok = vocab_tokenizer(shared_path("vocab/ggml-vocab-qwen2.gguf"));
    GrammarCache cache;
    TokenMatcher tm(cache.grammar("root ::= \"x\"", tok), cache.vocab(tok));
    std::vector<uint32_t> wrong(3);
    EXPECT_THROW(tm.fill_mask(wrong), Error);
    EXPECT_THROW(cache.grammar("root ::= <not a single token at all>", tok), Error);
    EXPECT_THROW(cache.grammar("root ::= <[999999999]>", tok), Error);
    EXPECT_EQ(cache.grammar("root ::= \"x\"", tok), cache.grammar("root ::= \"x\"", tok)); // cached
    EXPECT_EQ(cache.vocab(tok), cache.vocab(tok));
}

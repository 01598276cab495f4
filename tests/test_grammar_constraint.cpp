// The grammar TokenConstraint (speculate's adapter): masks, accept and undo through the runtime's
// interface, and forced text tokenized as guesses (the tokenizer's split or character by character,
// as the model writes it), on Llama 3's vocabulary and the bundled model's.
#include <gtest/gtest.h>

#include "rewind/error.h"
#include "rewind/gguf.h"
#include "rewind/speculate/forced_source.h"
#include "rewind/speculate/grammar_constraint.h"

using namespace rwd;

namespace {

std::unique_ptr<Tokenizer> load(const std::string& rel) {
    return Tokenizer::from_gguf(GgufFile::open(std::string(REWIND_SHARED_DIR) + "/" + rel));
}

const char* kPerson = R"(root ::= "{\"name\": \"" [A-Za-z ]+ "\", \"age\": " [0-9]+ ", \"tags\": [" tags "]}"
tags ::= "" | tag (", " tag)*
tag ::= "\"" [a-z]+ "\"")";

} // namespace

TEST(GrammarConstraint, ForcedTokensAreTheTokenizedForcedText) {
    const auto tok = load("vocab/ggml-vocab-llama-bpe.gguf");
    grammar::GrammarCache cache;
    auto c = make_grammar_constraint(kPerson, *tok, &cache);
    std::vector<TokenId> forced;
    c->forced_tokens(16, forced);
    EXPECT_EQ(tok->decode(forced), "{\"name\": \"");
    for (TokenId t : forced) ASSERT_TRUE(c->accept(t));
    for (TokenId t : tok->encode("Ada Lovelace\"", AddBos::No)) ASSERT_TRUE(c->accept(t));
    forced.clear();
    c->forced_tokens(16, forced);
    EXPECT_EQ(tok->decode(forced), ", \"age\": ");
    forced.clear();
    c->forced_tokens(1, forced);
    EXPECT_EQ(forced.size(), 1u);
    const auto snap = c->snapshot();
    for (TokenId t : tok->encode(", \"age\": 36, \"tags\": []}", AddBos::No)) ASSERT_TRUE(c->accept(t));
    EXPECT_TRUE(c->is_complete());
    EXPECT_TRUE(c->is_finished());
    EXPECT_TRUE(c->allows(tok->eot()));
    c->rollback(snap);
    EXPECT_FALSE(c->is_complete());
    EXPECT_FALSE(c->allows(tok->eot()));
    c->reset();
    EXPECT_THROW(c->rollback(snap), Error);
}

// forced_characters: the same text, one character's encoding at a time, at most max_tokens.
TEST(GrammarConstraint, ForcedCharactersSplitTheForcedTextByCharacter) {
    const auto tok = load("vocab/ggml-vocab-llama-bpe.gguf");
    auto c = make_grammar_constraint(R"(root ::= "{\"näme\": " [0-9]+ "}")", *tok);
    std::vector<TokenId> want;
    for (const char* ch : {"{", "\"", "n", "ä", "m", "e", "\"", ":"}) {
        const auto one = tok->encode(ch, AddBos::No);
        want.insert(want.end(), one.begin(), one.end());
    }
    want.resize(8);
    std::vector<TokenId> got;
    c->forced_characters(8, got);
    EXPECT_EQ(got, want);
    const auto snap = c->snapshot();
    for (TokenId t : got) ASSERT_TRUE(c->accept(t)); // a split the grammar takes, the state unchanged
    c->rollback(snap);
    got.clear();
    c->forced_characters(0, got);
    EXPECT_TRUE(got.empty());
}

// ForcedSource proposes the split the model has followed: the tokenizer's at first, character by
// character once the model wrote forced text that way.
TEST(GrammarConstraint, ForcedSourceLearnsTheModelsSplit) {
    const auto tok = load("vocab/ggml-vocab-llama-bpe.gguf");
    auto c = make_grammar_constraint(R"(root ::= "hello world" [ab] " goodbye all" [ab])", *tok);
    speculate::ForcedSource fs;
    std::vector<TokenId> context = tok->encode("x", AddBos::No);
    speculate::GenerationStart start;
    start.prompt = context;
    start.constraint = c.get();
    fs.reset(start);
    speculate::Proposal p;
    fs.propose(context, 8, p);
    EXPECT_EQ(p.tokens, tok->encode("hello world", AddBos::No));
    EXPECT_EQ(p.forced, static_cast<int>(p.tokens.size()));
    std::vector<TokenId> chars;
    c->forced_characters(16, chars);
    ASSERT_EQ(tok->decode(chars), "hello world");
    ASSERT_GT(chars.size(), p.tokens.size());
    // The model writes it letter by letter, then "a".
    chars.push_back(tok->encode("a", AddBos::No).at(0));
    for (TokenId t : chars) ASSERT_TRUE(c->accept(t));
    context.insert(context.end(), chars.begin(), chars.end());
    fs.accept(context);
    speculate::Proposal q;
    fs.propose(context, 4, q);
    EXPECT_EQ(tok->decode(q.tokens), " goo");
    EXPECT_EQ(q.tokens.size(), 4u);
}

TEST(GrammarConstraint, MaskAgreesWithAllowsAndRefusesWrongShapes) {
    const auto tok = load("models/pycode-4m.gguf");
    auto c = make_grammar_constraint(kPerson, *tok);
    std::vector<uint32_t> mask(static_cast<size_t>((tok->n_vocab() + 31) / 32));
    for (TokenId t : tok->encode("{\"name\": \"Bo\", \"age\": 7", AddBos::No)) {
        c->fill_mask(mask);
        for (TokenId u = 0; u < tok->n_vocab(); ++u)
            ASSERT_EQ(((mask[static_cast<size_t>(u) / 32] >> (u % 32)) & 1u) != 0, c->allows(u)) << u;
        ASSERT_TRUE(c->accept(t));
    }
    EXPECT_FALSE(c->accept(tok->encode("x", AddBos::No)[0]));
    std::vector<uint32_t> small(1);
    EXPECT_THROW(c->fill_mask(small), Error);
    EXPECT_THROW(make_grammar_constraint("root ::= missing", *tok), Error);
}

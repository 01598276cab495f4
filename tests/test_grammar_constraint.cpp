// The grammar TokenConstraint (speculate's adapter): masks, accept and undo through the runtime's
// interface, and forced text tokenized as guesses, on Llama 3's vocabulary and the bundled model's.
#include <gtest/gtest.h>

#include "rewind/error.h"
#include "rewind/gguf.h"
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

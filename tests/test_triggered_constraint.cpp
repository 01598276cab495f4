// The triggered grammar constraint: free text until the trigger (one token, a control token, or
// text spanning tokens), the grammar from there, free again after it (or only the end after
// max_matches); masks agree with allows(); rollback across the trigger; and decoding with it,
// speculative == plain on the bundled model.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/gguf.h"
#include "rewind/kv_cache.h"
#include "rewind/grammar/gbnf.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/speculative_session.h"
#include "rewind/speculate/triggered_constraint.h"

using namespace rwd;

namespace {

std::unique_ptr<Tokenizer> load(const std::string& rel) {
    return Tokenizer::from_gguf(GgufFile::open(std::string(REWIND_SHARED_DIR) + "/" + rel));
}

const char* kCall = R"(root ::= "<tool_call>\n{\"n\": " [0-9]+ "}\n</tool_call>")";

struct Setup {
    std::unique_ptr<Tokenizer> tok;
    grammar::GrammarCache cache;
    std::shared_ptr<const GrammarTrigger> trigger;
    std::unique_ptr<TokenConstraint> make(const std::string& gbnf, size_t max_matches = 0) {
        return make_triggered_constraint(trigger, cache.grammar(gbnf, *tok), *tok, max_matches);
    }
};

std::unique_ptr<Setup> setup(const std::string& vocab, const std::string& trigger) {
    auto s = std::make_unique<Setup>();
    s->tok = load(vocab);
    s->trigger = std::make_shared<const GrammarTrigger>(trigger, *s->tok, s->cache.vocab(*s->tok));
    return s;
}

TokenId one_token(const Tokenizer& tok, const std::string& text) {
    const auto ids = tok.encode(text, AddBos::No);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.at(0);
}

void accept_text(TokenConstraint& c, const Tokenizer& tok, const std::string& text) {
    for (TokenId t : tok.encode(text, AddBos::No)) ASSERT_TRUE(c.accept(t)) << text << ": " << tok.token_to_piece(t);
}

// fill_mask's bits are allows() for every token of the vocabulary.
void expect_mask_is_allows(TokenConstraint& c, const Tokenizer& tok) {
    std::vector<uint32_t> mask(static_cast<size_t>((tok.n_vocab() + 31) / 32));
    c.fill_mask(mask);
    for (TokenId u = 0; u < tok.n_vocab(); ++u)
        ASSERT_EQ(((mask[static_cast<size_t>(u) / 32] >> (u % 32)) & 1u) != 0, c.allows(u)) << u;
}

} // namespace

// Qwen2.5's <tool_call> is one (byte-matched) token: it opens the grammar; the closing tag frees the text.
TEST(TriggeredConstraint, OneTokenTriggerOpensTheGrammarUntilItIsFinished) {
    REWIND_NEED_FIXTURE(std::string(REWIND_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf");
    auto s = setup("vocab/ggml-vocab-qwen2.gguf", "<tool_call>");
    const Tokenizer& tok = *s->tok;
    auto c = s->make(kCall);
    const TokenId x = one_token(tok, "x"), eot = tok.eot();
    accept_text(*c, tok, "Let me check. ");
    EXPECT_TRUE(c->allows(x));
    EXPECT_TRUE(c->allows(eot));
    EXPECT_TRUE(c->is_complete());
    expect_mask_is_allows(*c, tok);
    ASSERT_TRUE(c->accept(one_token(tok, "<tool_call>")));
    EXPECT_FALSE(c->allows(x));
    EXPECT_FALSE(c->allows(eot));
    EXPECT_FALSE(c->is_complete());
    std::vector<TokenId> forced;
    c->forced_tokens(8, forced);
    EXPECT_EQ(tok.decode(forced), "\n{\"n\": ");
    expect_mask_is_allows(*c, tok);
    accept_text(*c, tok, "\n{\"n\": 42");
    EXPECT_FALSE(c->accept(x));
    accept_text(*c, tok, "}\n</tool_call>");
    EXPECT_TRUE(c->allows(x));
    EXPECT_TRUE(c->is_complete());
    EXPECT_FALSE(c->is_finished());
    accept_text(*c, tok, "\n<tool_call>\n{\"n\": 7}\n</tool_call>"); // a second call, constrained too
    EXPECT_TRUE(c->allows(x));

    auto once = s->make(kCall, 1); // at most one call, then the end
    accept_text(*once, tok, "<tool_call>\n{\"n\": 1}\n</tool_call>");
    EXPECT_TRUE(once->is_finished());
    EXPECT_FALSE(once->allows(x));
    EXPECT_TRUE(once->allows(eot));
    expect_mask_is_allows(*once, tok);
}

// On a vocabulary without the tag, the trigger is text spanning several tokens; a token that
// completes it and goes on is allowed only if the grammar takes what follows.
TEST(TriggeredConstraint, TextTriggerSpanningTokens) {
    REWIND_NEED_FIXTURE(std::string(REWIND_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf");
    auto s = setup("vocab/ggml-vocab-qwen2.gguf", "<tool_call>");
    const Tokenizer& tok = *s->tok;
    auto c = s->make(kCall);
    const TokenId x = one_token(tok, "x");
    accept_text(*c, tok, "a <tool_call"); // "<", "tool", "_call": the trigger half read
    expect_mask_is_allows(*c, tok);
    EXPECT_TRUE(c->allows(x));                          // "<tool_callx": no trigger, free
    EXPECT_TRUE(c->allows(one_token(tok, ">\n")));      // completes it, and the grammar takes "\n"
    EXPECT_FALSE(c->allows(one_token(tok, ">(")));      // completes it, and the grammar refuses "("
    ASSERT_TRUE(c->accept(one_token(tok, ">\n")));
    EXPECT_FALSE(c->allows(x));
    accept_text(*c, tok, "{\"n\": 5}\n</tool_call> done");
    EXPECT_TRUE(c->is_complete());

    // The pycode vocabulary (SentencePiece): the tag is always several tokens.
    auto p = setup("models/pycode-4m.gguf", "<tool_call>");
    auto q = p->make(kCall);
    const std::vector<TokenId> ids = p->tok->encode("ok <tool_call>\n{\"n\": 3}\n</tool_call>", AddBos::No);
    ASSERT_GT(ids.size(), 6u);
    for (TokenId t : ids) {
        expect_mask_is_allows(*q, *p->tok);
        ASSERT_TRUE(q->accept(t)) << p->tok->token_to_piece(t);
    }
    EXPECT_TRUE(q->is_complete());
}

// A trigger that overlaps itself ("<<a" in "<<<a") is found where it ends, whatever the tokens.
TEST(TriggeredConstraint, SelfOverlappingTriggerIsFound) {
    auto s = setup("models/pycode-4m.gguf", "<<a");
    const Tokenizer& tok = *s->tok;
    for (const std::string text : {"q <<<a", "<<<<a", "<a<<a"}) {
        auto c = s->make(R"(root ::= "<<a" [0-9]+ ";")");
        const auto ids = tok.encode(text, AddBos::No);
        for (TokenId t : ids) ASSERT_TRUE(c->accept(t)) << text;
        EXPECT_FALSE(c->is_complete()) << text; // inside the grammar: digits must follow
        accept_text(*c, tok, "12;");
        EXPECT_TRUE(c->is_complete()) << text;
    }
    auto c = s->make(R"(root ::= "<<a" [0-9]+ ";")");
    accept_text(*c, tok, "<a<a a<<"); // no occurrence: free
    EXPECT_TRUE(c->is_complete());
}

// A control token as the trigger: the grammar reads its text, the model emits the token.
TEST(TriggeredConstraint, ControlTokenTrigger) {
    REWIND_NEED_FIXTURE(std::string(REWIND_SHARED_DIR) + "/vocab/ggml-vocab-llama-bpe.gguf");
    auto s = setup("vocab/ggml-vocab-llama-bpe.gguf", "<|start_header_id|>");
    const Tokenizer& tok = *s->tok;
    ASSERT_GE(s->trigger->token(), 0);
    auto c = s->make(R"(root ::= "<|start_header_id|>" [a-z]+ "<|end_header_id|>")");
    accept_text(*c, tok, "hello");
    ASSERT_TRUE(c->allows(s->trigger->token()));
    ASSERT_TRUE(c->accept(s->trigger->token()));
    EXPECT_FALSE(c->allows(one_token(tok, "1")));
    EXPECT_TRUE(c->allows(one_token(tok, "user")));
    expect_mask_is_allows(*c, tok);
}

// Snapshots on both sides of the trigger; rollback across it restores free text, then the grammar.
TEST(TriggeredConstraint, RollbackAcrossTheTrigger) {
    REWIND_NEED_FIXTURE(std::string(REWIND_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf");
    auto s = setup("vocab/ggml-vocab-qwen2.gguf", "<tool_call>");
    const Tokenizer& tok = *s->tok;
    auto c = s->make(kCall);
    const TokenId x = one_token(tok, "x");
    accept_text(*c, tok, "hi <tool");
    const auto free = c->snapshot();
    accept_text(*c, tok, "_call>\n{\"n\": 1");
    const auto inside = c->snapshot();
    EXPECT_FALSE(c->allows(x));
    accept_text(*c, tok, "}\n</tool_call>\n<tool_call>\n{\"n\": 2");
    c->rollback(inside);
    accept_text(*c, tok, "9}\n</tool_call>");
    EXPECT_TRUE(c->allows(x));
    c->rollback(inside);
    EXPECT_FALSE(c->allows(x));
    c->rollback(free);
    EXPECT_TRUE(c->allows(x));
    EXPECT_TRUE(c->allows(one_token(tok, ">("))); // "<tool" + ">(" is no trigger
    accept_text(*c, tok, "_call>\n{\"n\": 8}\n</tool_call>");
    EXPECT_TRUE(c->is_complete());
    EXPECT_THROW(c->rollback(inside), Error); // on a path already undone
    c->reset();
    EXPECT_THROW(c->rollback(free), Error);
    EXPECT_TRUE(c->allows(x));
}

TEST(TriggeredConstraint, RefusesGrammarsThatDoNotStartWithTheTrigger) {
    REWIND_NEED_FIXTURE(std::string(REWIND_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf");
    auto s = setup("vocab/ggml-vocab-qwen2.gguf", "<tool_call>");
    EXPECT_THROW(s->make(R"(root ::= "{" [0-9] "}")"), Error);
    EXPECT_THROW(GrammarTrigger("", *s->tok, s->cache.vocab(*s->tok)), Error);
    std::vector<uint32_t> small(1);
    EXPECT_THROW(s->make(kCall)->fill_mask(small), Error);
}

// Decoding with a triggered grammar on the bundled model (trigger "def ", the name and arguments
// constrained): speculative == plain, greedy and seeded, for sources that guess across the trigger.
TEST(TriggeredConstraint, SpeculativeEqualsPlain) {
    const auto m = model_test::load("bundled");
    const Tokenizer& tok = m->tokenizer();
    grammar::GrammarCache cache;
    auto trigger = std::make_shared<const GrammarTrigger>("def ", tok, cache.vocab(tok));
    const auto g = cache.grammar(R"(root ::= "def " [a-z_]{1,12} "(" [a-z, ]{0,16} "):")", tok);
    const std::string text = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n";
    const auto prompt = tok.encode(text);
    Context ctx(m);
    for (const float temp : {0.0f, 0.8f}) {
        for (const size_t max_matches : {size_t{0}, size_t{1}}) {
            GenerateOptions go;
            go.max_tokens = 80;
            go.sampler.temperature = temp;
            go.sampler.seed = 5;
            auto c = make_triggered_constraint(trigger, g, tok, max_matches);
            KvCache plain_cache(*m, {512});
            const GenerateResult plain = generate_plain(ctx, plain_cache, prompt, go, {}, c.get());
            EXPECT_NE(tok.decode(plain.tokens).find("def "), std::string::npos) << tok.decode(plain.tokens); // the grammar ran
            for (const std::string kind : {"ngram", "ref", "forced"}) {
                speculate::SourceSpec spec;
                speculate::parse_source_kind(kind, spec);
                if (kind == "ref") spec.references = {text};
                auto src = speculate::make_guess_source(spec, *m, 512);
                speculate::SpeculativeOptions so;
                so.generate = go;
                so.k = 6;
                KvCache kv(*m, {512});
                c->reset();
                const auto spec_r = speculate::generate_speculative(ctx, kv, prompt, *src, so, {}, c.get());
                ASSERT_EQ(spec_r.tokens, plain.tokens) << kind << " temp " << temp << " max " << max_matches;
                ASSERT_EQ(spec_r.stop, plain.stop);
            }
        }
    }
}

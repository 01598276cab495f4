// Session and plain generation: append / generate / append / generate reuses every processed
// token (tokens_processed counts them), matches generate_plain on the concatenated tokens, and
// honours the shared stop rules (max tokens, stop strings, end of generation, full context).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/session.h"

namespace rwd {
namespace {

std::shared_ptr<const Model> bundled() {
    static auto m = Model::load(std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf");
    return m;
}

GenerateOptions greedy(int64_t n) {
    GenerateOptions o;
    o.max_tokens = n;
    return o;
}

TokenId id_of_piece(const Tokenizer& tok, const std::string& piece) {
    for (TokenId id = 0; id < tok.n_vocab(); ++id)
        if (tok.kind(id) != TokenKind::Byte && tok.token_to_piece(id) == piece) return id;
    ADD_FAILURE() << "no token for '" << piece << "'";
    return 0;
}

TEST(Session, AppendGenerateAppendGenerateReusesEverything) {
    auto model = bundled();
    Context sctx(model, {.n_threads = 1});
    Session s(model, {.capacity = 256});
    s.append_text(sctx, "def add(a, b):\n");
    const size_t prompt1 = s.tokens().size();
    EXPECT_EQ(s.tokens().front(), model->tokenizer().bos());
    EXPECT_EQ(sctx.tokens_processed(), prompt1 - 1); // the newest token is held back
    const GenerateResult g1 = s.generate(sctx, greedy(12));
    EXPECT_EQ(g1.tokens.size(), 12u);
    EXPECT_EQ(g1.stop, StopReason::MaxTokens);
    EXPECT_EQ(g1.prompt_tokens, 1); // only the held-back token ran for the "prompt"
    EXPECT_EQ(s.tokens().size(), prompt1 + 12);

    s.append_text(sctx, "\ndef mul(a, b):\n");
    const std::vector<TokenId> before_second(s.tokens());
    const GenerateResult g2 = s.generate(sctx, greedy(10));
    EXPECT_EQ(g2.tokens.size(), 10u);
    // Every token ran exactly once, except the newest (held back).
    EXPECT_EQ(sctx.tokens_processed(), s.tokens().size() - 1);
    EXPECT_EQ(static_cast<size_t>(s.cache().size()), s.tokens().size() - 1);
    EXPECT_EQ(s.text().substr(0, 15), "def add(a, b):\n");

    // The same as plain generation from scratch on the concatenated tokens.
    Context ctx(model);
    KvCache cache(*model, {.capacity = 256});
    const GenerateResult plain = generate_plain(ctx, cache, before_second, greedy(10));
    EXPECT_EQ(plain.tokens, g2.tokens);
    EXPECT_EQ(plain.prompt_tokens, static_cast<int64_t>(before_second.size()));
    EXPECT_TRUE(cache.contents_equal(s.cache()));
}

TEST(Session, SampledGenerationMatchesPlainToo) {
    // Randomness is keyed by absolute position, so the split into calls does not matter.
    auto model = bundled();
    GenerateOptions o = greedy(16);
    o.sampler.temperature = 0.8f;
    o.sampler.top_k = 40;
    o.sampler.seed = 1234;
    Context sctx(model);
    Session s(model, {.capacity = 128});
    s.append_text(sctx, "import os\n");
    s.generate(sctx, o);
    s.append_text(sctx, "\n");
    const std::vector<TokenId> prefix(s.tokens());
    const auto g = s.generate(sctx, o);
    Context ctx(model);
    KvCache cache(*model, {.capacity = 128});
    EXPECT_EQ(generate_plain(ctx, cache, prefix, o).tokens, g.tokens);
}

TEST(Session, StopStringsAndCallbacks) {
    auto model = bundled();
    const Tokenizer& tok = model->tokenizer();
    Context sctx(model);
    Session s(model, {.capacity = 256});
    s.append_text(sctx, "class A:\n    def f(self):\n        return 1\n\n");
    GenerateOptions o = greedy(200);
    o.stop_strings = {"\n"};
    const auto r = s.generate(sctx, o);
    ASSERT_EQ(r.stop, StopReason::StopString);
    const std::string text = tok.decode(r.tokens);
    // The newline arrives with the last token and nowhere before it.
    const std::string last_piece = tok.token_to_piece(r.tokens.back());
    EXPECT_NE(last_piece.find('\n'), std::string::npos);
    EXPECT_EQ(text.find('\n'), text.size() - last_piece.size() + last_piece.find('\n'));

    int seen = 0;
    const auto c = s.generate(sctx, greedy(50), [&](TokenId) { return ++seen < 3; });
    EXPECT_EQ(c.stop, StopReason::Cancelled);
    EXPECT_EQ(c.tokens.size(), 3u);
    EXPECT_EQ(sctx.tokens_processed(), s.tokens().size() - 1);
}

TEST(Session, ContextFullAndOverflow) {
    auto model = bundled();
    Context sctx(model);
    Session s(model, {.capacity = 24});
    s.append_text(sctx, "for i in range(10):\n");
    const size_t n = s.tokens().size();
    ASSERT_LT(n, 24u);
    const auto r = s.generate(sctx, greedy(100));
    EXPECT_EQ(r.stop, StopReason::ContextFull);
    EXPECT_EQ(s.tokens().size(), 24u); // the sequence exactly fills the cache
    EXPECT_EQ(s.cache().size(), 23);
    // Nothing more fits: appending throws with nothing changed; generating stops at once.
    const std::vector<TokenId> before(s.tokens());
    EXPECT_THROW(s.append_text(sctx, "x"), Error);
    EXPECT_EQ(s.tokens(), before);
    EXPECT_EQ(s.cache().size(), 23);
    const auto again = s.generate(sctx, greedy(5));
    EXPECT_EQ(again.stop, StopReason::ContextFull);
    EXPECT_TRUE(again.tokens.empty());
    EXPECT_THROW(s.append_tokens(sctx, std::vector<TokenId>{static_cast<TokenId>(model->n_vocab())}), Error);

    Session empty(model, {.capacity = 24});
    EXPECT_THROW(empty.generate(sctx, greedy(3)), Error);
}

// Sessions borrow a context per call: two sessions interleaved on one context each equal a
// session alone; a session rebuilt from a saved cache and its ids goes on identically; a context
// of another model and a cache that does not match its ids are refused.
TEST(Session, SessionsShareOneContextAndResumeFromASavedCache) {
    auto model = bundled();
    Context ctx(model);
    Session a(model, {.capacity = 128}), b(model, {.capacity = 128}), alone(model, {.capacity = 128});
    a.append_text(ctx, "def add(a, b):\n");
    b.append_text(ctx, "import sys\n");
    alone.append_text(ctx, "def add(a, b):\n");
    const auto ga = a.generate(ctx, greedy(8));
    b.generate(ctx, greedy(8));
    const auto gb = a.generate(ctx, greedy(8));
    alone.generate(ctx, greedy(8));
    const auto want = alone.generate(ctx, greedy(8));
    EXPECT_EQ(gb.tokens, want.tokens);
    EXPECT_TRUE(a.cache().contents_equal(alone.cache()));

    KvCache copy = a.cache().fork();
    Session resumed(model, std::move(copy), a.tokens());
    EXPECT_EQ(resumed.generate(ctx, greedy(6)).tokens, a.generate(ctx, greedy(6)).tokens);
    KvCache short_cache(*model, {.capacity = 128});
    EXPECT_THROW(Session(model, std::move(short_cache), a.tokens()), Error);

    auto other = Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-600k.gguf");
    Context other_ctx(other);
    const std::vector<TokenId> before(a.tokens());
    EXPECT_THROW(a.generate(other_ctx, greedy(3)), Error);
    EXPECT_THROW(a.append_text(other_ctx, "x"), Error);
    EXPECT_EQ(a.tokens(), before);
    (void)ga;
}

TEST(GeneratePlain, ValidatesAndLeavesCacheUnchanged) {
    auto model = bundled();
    Context ctx(model);
    KvCache cache(*model, {.capacity = 16});
    const std::vector<TokenId> prompt = {1, 295, 299, 3901};
    EXPECT_THROW(generate_plain(ctx, cache, {}, greedy(4)), Error);
    EXPECT_THROW(generate_plain(ctx, cache, std::vector<TokenId>(17, 5), greedy(4)), Error);
    EXPECT_THROW(generate_plain(ctx, cache, {1, -3}, greedy(4)), Error);
    GenerateOptions bad = greedy(4);
    bad.sampler.top_p = 0.0f;
    EXPECT_THROW(generate_plain(ctx, cache, prompt, bad), Error);
    EXPECT_THROW(generate_plain(ctx, cache, prompt, greedy(-1)), Error);
    GenerateOptions empty_stop = greedy(4);
    empty_stop.stop_strings = {""};
    EXPECT_THROW(generate_plain(ctx, cache, prompt, empty_stop), Error);
    EXPECT_EQ(cache.size(), 0);
    EXPECT_EQ(ctx.tokens_processed(), 0u);

    // max_tokens 0: nothing generated, the prompt but its last token is cached.
    const auto zero = generate_plain(ctx, cache, prompt, greedy(0));
    EXPECT_TRUE(zero.tokens.empty());
    EXPECT_EQ(cache.size(), 3);
    // The cache must hold less than the prompt.
    KvCache full(*model, {.capacity = 16});
    generate_plain(ctx, full, prompt, greedy(2));
    EXPECT_THROW(generate_plain(ctx, full, prompt, greedy(2)), Error);
}

TEST(StopChecker, RulesAndPrecedence) {
    auto model = bundled();
    const Tokenizer& tok = model->tokenizer();
    const TokenId a = id_of_piece(tok, "a"), b = id_of_piece(tok, "b"), c = id_of_piece(tok, "c");

    GenerateOptions o = greedy(10);
    o.stop_strings = {"bc", "zzz"};
    StopChecker sc(o, tok, 100);
    EXPECT_FALSE(sc.push(a, 10));
    EXPECT_FALSE(sc.push(b, 11));
    EXPECT_TRUE(sc.push(c, 12)); // "bc" spans two tokens
    EXPECT_EQ(sc.reason(), StopReason::StopString);
    EXPECT_EQ(sc.count(), 3);

    // A stop string inside the prompt does not count: only generated text is checked.
    StopChecker fresh(o, tok, 100);
    EXPECT_FALSE(fresh.push(c, 5));

    StopChecker eog(greedy(10), tok, 100);
    EXPECT_TRUE(eog.push(tok.eos(), 3));
    EXPECT_EQ(eog.reason(), StopReason::EndOfGeneration);
    GenerateOptions no_eog = greedy(10);
    no_eog.stop_at_eog = false;
    StopChecker keep_going(no_eog, tok, 100);
    EXPECT_FALSE(keep_going.push(tok.eos(), 3));

    StopChecker max(greedy(2), tok, 100);
    EXPECT_FALSE(max.push(a, 0));
    EXPECT_TRUE(max.push(a, 1));
    EXPECT_EQ(max.reason(), StopReason::MaxTokens);

    StopChecker full(greedy(10), tok, 8);
    EXPECT_FALSE(full.push(a, 6));
    EXPECT_TRUE(full.push(a, 7)); // position 7 is the last of 8
    EXPECT_EQ(full.reason(), StopReason::ContextFull);

    // Precedence: EOS that is also the max-th token at the last position reports EOG.
    StopChecker all(greedy(1), tok, 1);
    EXPECT_TRUE(all.push(tok.eos(), 0));
    EXPECT_EQ(all.reason(), StopReason::EndOfGeneration);
    EXPECT_STREQ(stop_reason_name(StopReason::StopString), "stop_string");
}

} // namespace
} // namespace rwd

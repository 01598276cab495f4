// ChatSession: each turn's reply equals generating from the whole formatted conversation from
// scratch (greedy and seeded, plain and speculative), while the cache of earlier turns is reused;
// a turn that does not fit is refused with the conversation unchanged; reset forgets it; a saved
// conversation loads and goes on identically.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "rewind/chat.h"
#include "rewind/chat_session.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/speculate/ngram_source.h"
#include "rewind/speculate/speculative_session.h"

using namespace rwd;

namespace {

std::shared_ptr<const Model> target() {
    static auto m = Model::load(std::string(REWIND_SHARED_DIR) + "/models/pycode-4m.gguf");
    return m;
}

// The ids the conversation `messages` gives with a generation prompt, as ChatSession formats it.
std::vector<TokenId> formatted(const Model& m, const ChatFormat& f, const std::vector<ChatMessage>& messages) {
    const Tokenizer& tok = m.tokenizer();
    ChatOptions o;
    o.bos_token = tok.token_to_piece(tok.bos(), true);
    o.eos_token = tok.token_to_piece(tok.eos(), true);
    return tokenize_chat(tok, f, messages, o);
}

const char* kTurns[] = {"def add(a, b):", "and now def sub(a, b):", "class Stack:", "import os"};

} // namespace

TEST(ChatSession, EveryTurnEqualsGenerationFromScratchAndReusesTheCache) {
    const auto model = target();
    const ChatFormat fmt = parse_chat_format_name("chatml");
    Context ctx(model), scratch_ctx(model);
    for (const float temp : {0.0f, 0.8f}) {
        SCOPED_TRACE("temperature " + std::to_string(temp));
        GenerateOptions g;
        g.max_tokens = 16;
        g.sampler.temperature = temp;
        g.sampler.seed = 11;
        ChatSession chat(model, fmt, ChatSessionOptions{.cache = {.capacity = 512}, .system = "You write Python."});
        for (size_t i = 0; i < std::size(kTurns); ++i) {
            std::vector<ChatMessage> before = chat.messages();
            before.push_back(ChatMessage{.role = "user", .content = kTurns[i]});
            const std::vector<TokenId> ids = formatted(*model, fmt, before);
            KvCache fresh(*model, {.capacity = 512});
            const GenerateResult want = generate_plain(scratch_ctx, fresh, ids, g);
            const ChatTurn t = chat.say(ctx, kTurns[i], g);
            EXPECT_EQ(t.result.tokens, want.tokens) << "turn " << i;
            EXPECT_EQ(t.prompt_tokens, static_cast<int64_t>(ids.size()));
            if (i > 0) {
                EXPECT_GT(t.reused_tokens, 0) << "turn " << i << " ran the whole history again";
            }
            EXPECT_EQ(t.run_tokens, t.prompt_tokens - t.reused_tokens);
            EXPECT_EQ(chat.messages().size(), 1 + 2 * (i + 1));
            EXPECT_EQ(chat.messages().back().role, "assistant");
            EXPECT_EQ(chat.messages().back().content, t.reply);
        }
    }
}

TEST(ChatSession, SpeculationInsideTheConversationIsLossless) {
    const auto model = target();
    const ChatFormat fmt = parse_chat_format_name("qwen2.5");
    Context ctx(model);
    GenerateOptions g;
    g.max_tokens = 24;
    ChatSession plain(model, fmt, {.cache = {.capacity = 512}}), spec(model, fmt, {.cache = {.capacity = 512}});
    speculate::NgramSource src;
    speculate::SpeculativeOptions so;
    so.generate = g;
    so.k = 4;
    int64_t accepted = 0;
    for (const char* user : kTurns) {
        const ChatTurn want = plain.say(ctx, user, g);
        const ChatTurn got = spec.say(ctx, user, [&](Session& s) -> GenerateResult {
            speculate::SpeculativeResult r = speculate::generate_speculative(ctx, s, src, so);
            accepted += r.stats.accepted;
            return r;
        });
        EXPECT_EQ(got.result.tokens, want.result.tokens) << user;
        EXPECT_EQ(got.reply, want.reply);
    }
    EXPECT_TRUE(spec.session().cache().contents_equal(plain.session().cache()));
    EXPECT_GT(accepted, 0) << "no guess stood: speculation went untested";
}

TEST(ChatSession, RefusalsLeaveTheConversationUnchangedAndResetForgetsIt) {
    const auto model = target();
    Context ctx(model);
    GenerateOptions g;
    g.max_tokens = 4;
    ChatSession chat(model, parse_chat_format_name("gemma"), ChatSessionOptions{.cache = {.capacity = 96}, .system = "Be short."});
    chat.say(ctx, "def f(x):", g);
    const std::vector<ChatMessage> before = chat.messages();
    const std::vector<TokenId> held = chat.session().tokens();
    // Too long for the cache: refused before anything runs.
    EXPECT_THROW(chat.say(ctx, std::string(400, 'x'), g), Error);
    EXPECT_EQ(chat.messages().size(), before.size());
    EXPECT_EQ(chat.session().tokens(), held);
    // The next turn still reuses the conversation.
    const ChatTurn t = chat.say(ctx, "again", g);
    EXPECT_GT(t.reused_tokens, 0);
    chat.reset();
    ASSERT_EQ(chat.messages().size(), 1u);
    EXPECT_EQ(chat.messages()[0].role, "system");
    EXPECT_EQ(chat.session().tokens().size(), 0u);
    EXPECT_EQ(chat.say(ctx, "def f(x):", g).reused_tokens, 0);
}

// A conversation saved and loaded goes on exactly as the original, reusing the loaded cache; a
// corrupted or truncated conversation file is refused with the conversation unchanged.
TEST(ChatSession, SaveAndLoadKeepTheConversationAcrossRuns) {
    const auto model = target();
    const ChatFormat fmt = parse_chat_format_name("chatml");
    Context ctx(model);
    GenerateOptions g;
    g.max_tokens = 10;
    ChatSession a(model, fmt, {.cache = {.capacity = 512}, .system = "You write Python."});
    a.say(ctx, kTurns[0], g);
    a.say(ctx, kTurns[1], g);
    const std::string path = testing::TempDir() + "rewind_chat_session_" + std::to_string(::getpid()) + ".kv";
    a.save(path);

    ChatSession b(model, fmt, {.cache = {.capacity = 512}});
    b.say(ctx, "something else", g); // replaced by the load
    b.load(path);
    EXPECT_EQ(b.messages().size(), a.messages().size());
    EXPECT_EQ(b.session().tokens(), a.session().tokens());
    const ChatTurn want = a.say(ctx, kTurns[2], g);
    const ChatTurn got = b.say(ctx, kTurns[2], g);
    EXPECT_EQ(got.result.tokens, want.result.tokens);
    EXPECT_EQ(got.reused_tokens, want.reused_tokens);
    EXPECT_GT(got.reused_tokens, 0);

    // Corrupt the conversation file: one byte of a message, then a truncation.
    std::string text;
    {
        std::ifstream in(path + ".chat", std::ios::binary);
        text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::vector<TokenId> held = b.session().tokens();
    std::string flipped = text;
    flipped[text.find("You")] = 'y';
    for (const std::string& bad : {flipped, text.substr(0, text.size() / 2)}) {
        std::ofstream(path + ".chat", std::ios::binary) << bad;
        EXPECT_THROW(b.load(path), Error);
        EXPECT_EQ(b.session().tokens(), held);
    }
    std::remove(path.c_str());
    std::remove((path + ".chat").c_str());
}

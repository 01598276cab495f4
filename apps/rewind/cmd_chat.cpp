// `rewind chat`: a conversation, one turn per input line, over a ChatSession that reuses the KV of
// earlier turns; speculation runs inside the conversation.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <unistd.h>

#include "commands.h"
#include "options.h"
#include "rewind/chat.h"
#include "rewind/chat_session.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/model.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/speculative_session.h"

namespace rwd::cli {
namespace {

struct ChatCliFlags {
    ModelFlags model;
    SamplerOptions sampling;
    OutputFlags output;
    CacheFlags cache;
    SpecFlags spec;
    ConstraintFlags constraint; // each reply constrained from its start
    ChatFlags chat;
    bool verbose = false;
};

// What one run of `rewind chat` holds across turns.
struct ChatRun {
    const ChatCliFlags& f;
    Context& ctx;
    ChatSession& chat;
    speculate::GuessSource* source;
    const speculate::SpeculativeOptions& so;
    TokenConstraint* constraint; // null: replies unconstrained
    bool terminal; // standard input is a terminal: prompts and confirmations on stderr
};

// "/reset", "/save FILE" and "/load FILE": true when `line` was one of them (and was done, or its
// error printed with the conversation as it was).
bool conversation_command(ChatRun& c, const std::string& line) {
    const bool tell = c.terminal || c.f.verbose;
    if (line == "/reset") {
        c.chat.reset();
        if (tell) std::fputs("(conversation reset)\n", stderr);
        return true;
    }
    if (!line.starts_with("/save ") && !line.starts_with("/load ")) return false;
    const std::string path = line.substr(6);
    const bool save = line[1] == 's';
    try {
        if (save) c.chat.save(path);
        else c.chat.load(path);
        if (tell)
            std::fprintf(stderr, "(conversation %s %s: %zu messages, %zu tokens)\n", save ? "saved to" : "loaded from",
                         path.c_str(), c.chat.messages().size(), c.chat.session().tokens().size());
    } catch (const Error& e) {
        std::fprintf(stderr, "rewind chat: %s\n", e.what()); // the conversation is as it was
    }
    return true;
}

// One user turn: the reply streamed to stdout as it is generated (the end-of-turn token is not
// part of its text); with --verbose, the tokens reused and run and the timings on stderr.
void chat_turn(ChatRun& c, const std::string& line, int turn) {
    const Tokenizer& tok = c.ctx.model().tokenizer();
    Utf8StreamDecoder decoder(tok, /*at_text_start=*/false);
    const TokenCallback on_token = [&](TokenId id) {
        if (tok.is_eog(id)) return true;
        const std::string piece = decoder.push(id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return true;
    };
    DecodeStats stats;
    if (c.constraint) c.constraint->reset(); // each reply is one sentence of the grammar
    const ChatGenerate generate = [&](Session& s) -> GenerateResult {
        if (!c.source) return s.generate(c.ctx, c.so.generate, on_token, c.constraint);
        speculate::SpeculativeResult r =
            speculate::generate_speculative(c.ctx, s, *c.source, c.so, on_token, c.constraint);
        stats = r.stats;
        return r;
    };
    const ChatTurn t = c.chat.say(c.ctx, line, generate);
    const std::string rest = decoder.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (!c.f.verbose) return;
    const GenerateResult& r = t.result;
    std::fprintf(stderr,
                 "[turn %d: conversation %lld tokens, %lld reused from the cache, %lld run in %.2f ms; "
                 "reply %zu tokens in %.2f ms, stop: %s]\n",
                 turn, static_cast<long long>(t.prompt_tokens), static_cast<long long>(t.reused_tokens),
                 static_cast<long long>(t.run_tokens), t.prefill_seconds * 1e3, r.tokens.size(),
                 r.generate_seconds * 1e3, stop_reason_name(r.stop));
    if (c.source) std::fputs(speculate::format_stats(stats).c_str(), stderr);
}

// One turn per line of standard input (a terminal or a pipe), each reply streamed as it is
// generated; the KV cache of every earlier turn is reused (ChatSession). "/reset" forgets the
// conversation, "/save FILE" and "/load FILE" keep it (its KV cache and messages) across runs,
// "/exit" ends it.
int run_chat(const ChatCliFlags& f) {
    auto model = Model::load(f.model.model, f.model.model_options());
    const ChatFormat format = resolve_chat_format(f.chat.template_text(), model->file().gguf());
    ContextOptions copts = f.cache.context_options(f.model.context_options());
    copts.pool = std::make_shared<ThreadPool>(copts.n_threads);
    Context ctx(model, copts);
    ChatSessionOptions session;
    session.cache = f.cache.cache_options();
    session.system = f.chat.system;
    ChatSession chat(model, format, session);
    const std::unique_ptr<speculate::GuessSource> source =
        make_guess_source("chat", f.spec, f.model, *model, chat.session().cache(), copts);
    const speculate::SpeculativeOptions so = f.spec.speculative_options(f.output.generate_options(f.sampling));
    const std::unique_ptr<TokenConstraint> constraint =
        make_constraint("chat", f.constraint.gbnf(), model->tokenizer());
    ChatRun c{f, ctx, chat, source.get(), so, constraint.get(), ::isatty(0) != 0};
    if (f.verbose) std::fprintf(stderr, "chat format: %s\n", chat_format_name(format).c_str());
    std::string line;
    for (int turn = 1;; ++turn) {
        if (c.terminal) std::fputs("> ", stderr);
        if (!std::getline(std::cin, line) || line == "/exit") break;
        if (conversation_command(c, line)) continue;
        try {
            chat_turn(c, line, turn);
        } catch (const Error& e) {
            // The conversation is as it was before this turn: /reset (or a shorter turn) goes on.
            std::fprintf(stderr, "rewind chat: %s\n", e.what());
        }
    }
    return 0;
}

} // namespace

void register_chat(CLI::App& app, Runner& run) {
    auto f = std::make_shared<ChatCliFlags>();
    CLI::App* cmd = app.add_subcommand(
        "chat", "Talk with a chat model: one turn per line of standard input, the KV of earlier turns reused");
    add_model_flags(*cmd, f->model);
    add_chat_flags(*cmd, f->chat, nullptr);
    add_output_flags(*cmd, f->output, kStop);
    add_sampling_flags(*cmd, f->sampling);
    add_cache_flags(*cmd, f->cache);
    add_spec_flags(*cmd, f->spec);
    add_constraint_flags(*cmd, f->constraint, 0);
    cmd->add_flag("--verbose", f->verbose, "After each turn: the tokens reused and run, timings, speculation statistics");
    cmd->callback([f, &run] { run = [f] { return run_chat(*f); }; });
}

} // namespace rwd::cli

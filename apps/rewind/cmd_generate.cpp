// `rewind generate`: plain or (--spec) speculative decoding of a prompt (--chat: formatted as a
// user message by the chat template); streams the text as it is produced and prints speed (and
// speculation statistics) to stderr, or with --json one JSON object.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "options.h"
#include "rewind/bench/bench_memory.h"
#include "rewind/chat.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/source_factory.h"

namespace rwd::cli {
namespace {

struct GenerateFlags {
    ModelFlags model;
    PromptFlags prompt;
    SamplerOptions sampling;
    OutputFlags output;
    CacheFlags cache;
    SpecFlags spec;
    ConstraintFlags constraint;
    bool json = false;
    // Chat: the prompt as one user message, formatted by the model's chat template.
    bool chat = false;
    ChatFlags chat_flags;
};

void add_generate_flags(CLI::App& cmd, GenerateFlags& f) {
    add_model_flags(cmd, f.model);
    add_prompt_flags(cmd, f.prompt.prompt, &f.prompt.file);
    add_output_flags(cmd, f.output, kStop | kIgnoreEos);
    add_sampling_flags(cmd, f.sampling);
    add_cache_flags(cmd, f.cache);
    add_spec_flags(cmd, f.spec);
    add_constraint_flags(cmd, f.constraint, kLogprobs);
    auto* json = cmd.add_flag("--json", f.json, "Print one JSON object (ids, text, stop reason, timings) instead of streaming");
    cmd.get_option("--logprobs")->needs(json);
    auto* chat = cmd.add_flag("--chat", f.chat,
                              "Format the prompt as one user message with the model's chat template (an instruct model's prompt)");
    add_chat_flags(cmd, f.chat_flags, chat);
}

double per_second(int64_t n, double seconds) { return seconds > 0 ? static_cast<double>(n) / seconds : 0.0; }

nlohmann::ordered_json stats_json(const DecodeStats& s, const speculate::SpeculativeOptions& so,
                                  std::string_view source) {
    return {
        {"source", source},
        {"k", so.k},
        {"k_policy", speculate::k_policy_name(so.k_policy)},
        {"verify", speculate::verify_mode_name(so.verify)},
        {"passes", s.passes},
        {"tree_passes", s.tree_passes},
        {"guesses_per_pass", s.guesses_per_pass()},
        {"mean_depth", s.mean_depth()},
        {"proposed", s.proposed},
        {"accepted", s.accepted},
        {"forced_proposed", s.forced_proposed},
        {"forced_accepted", s.forced_accepted},
        {"emitted", s.emitted},
        {"empty_passes", s.empty_passes},
        {"acceptance_rate", s.acceptance_rate()},
        {"tokens_per_pass", s.tokens_per_pass()},
        {"proposed_at", s.proposed_at},
        {"accepted_at", s.accepted_at},
        {"propose_seconds", s.propose_seconds},
        {"verify_seconds", s.verify_seconds},
        {"prompt_seconds", s.prompt_seconds},
        {"total_seconds", s.total_seconds},
    };
}

// --chat: the prompt as one user message (after the --system message, if any), formatted by the
// chat template given or the file's, markers as control tokens and message text as text.
std::vector<TokenId> chat_prompt_ids(const ChatFlags& f, const Model& model, const std::string& prompt) {
    std::vector<ChatMessage> messages;
    if (!f.system.empty()) messages.push_back(ChatMessage{.role = "system", .content = f.system});
    messages.push_back(ChatMessage{.role = "user", .content = prompt});
    const ChatFormat format = resolve_chat_format(
        f.template_text(), model.file().gguf().get_string("tokenizer.chat_template").value_or(""));
    const Tokenizer& tok = model.tokenizer();
    ChatOptions o;
    fill_token_texts(o, tok);
    return tokenize_chat(tok, format, messages, o);
}

// What a run produced: the decoder's result, the generated text and the speculation statistics.
struct GenerateRun {
    GenerateResult result;
    std::string text; // complete UTF-8 of the generated tokens
    DecodeStats stats;
};

// Decodes after `prompt_ids` (speculatively when `source` is set), streaming the text to stdout
// unless --json: the prompt is echoed with the first token, so that options the decoder refuses
// fail before any output.
GenerateRun decode(const GenerateFlags& f, Context& ctx, KvCache& cache, const std::string& prompt,
                   const std::vector<TokenId>& prompt_ids, speculate::GuessSource* source,
                   const speculate::SpeculativeOptions& so, TokenConstraint* constraint) {
    // Generated text, complete UTF-8 only: a continuation, so no leading-space rule.
    Utf8StreamDecoder decoder(ctx.model().tokenizer(), /*at_text_start=*/false);
    GenerateRun run;
    bool echoed = f.json;
    auto echo_prompt = [&] {
        if (echoed) return;
        echoed = true;
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
        std::fflush(stdout);
    };
    const TokenCallback on_token = [&](TokenId id) {
        echo_prompt();
        const std::string piece = decoder.push(id);
        run.text += piece;
        if (!f.json && !piece.empty()) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        }
        return true;
    };
    if (source) {
        speculate::SpeculativeResult sr = speculate::generate_speculative(ctx, cache, prompt_ids, *source, so, on_token, constraint);
        run.stats = std::move(sr.stats);
        run.result = std::move(sr);
    } else {
        run.result = generate_plain(ctx, cache, prompt_ids, so.generate, on_token, constraint);
    }
    echo_prompt(); // when nothing was generated
    const std::string rest = decoder.flush();
    run.text += rest;
    if (!f.json) std::fwrite(rest.data(), 1, rest.size(), stdout);
    return run;
}

// --json: one object with the ids, text, stop reason, timings (and speculation statistics).
void print_json(const GenerateFlags& f, const Tokenizer& tok, const std::string& prompt,
                const std::vector<TokenId>& prompt_ids, const GenerateRun& run, const speculate::GuessSource* source,
                const speculate::SpeculativeOptions& so, const KvCache& cache) {
    const GenerateResult& r = run.result;
    const auto n_gen = static_cast<int64_t>(r.tokens.size());
    nlohmann::ordered_json j;
    j["model"] = f.model.model;
    j["numerics"] = f.cache.numerics;
    j["prompt"] = prompt;
    j["prompt_ids"] = prompt_ids;
    j["generated_ids"] = r.tokens;
    j["generated_text"] = run.text;
    j["stop_reason"] = stop_reason_name(r.stop);
    if (so.generate.logprobs.enabled) j["logprobs"] = logprobs_json(r.logprobs, tok);
    j["timings"] = {
        {"prompt_tokens", r.prompt_tokens},
        {"prompt_seconds", r.prompt_seconds},
        {"prompt_tokens_per_second", per_second(r.prompt_tokens, r.prompt_seconds)},
        {"generated_tokens", n_gen},
        {"generate_seconds", r.generate_seconds},
        {"generated_tokens_per_second", per_second(n_gen, r.generate_seconds)},
    };
    j["memory"] = {{"kv_type", cache.type() == KvType::F16 ? "f16" : "f32"},
                   {"kv_capacity", cache.capacity()},
                   {"peak_rss_bytes", bench::peak_resident_bytes()}};
    if (source) j["speculation"] = stats_json(run.stats, so, source->name());
    const std::string out = j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    std::printf("%s\n", out.c_str());
}

// Without --json: the speeds, the memory (and speculation statistics) on stderr after the
// streamed text.
void print_summary(const GenerateRun& run, const KvCache& cache, const speculate::GuessSource* source,
                   const speculate::SpeculativeOptions& so) {
    const GenerateResult& r = run.result;
    const auto n_gen = static_cast<int64_t>(r.tokens.size());
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr,
                 "\nprompt: %lld tokens in %.2f ms (%.1f tokens/s)\n"
                 "generation: %lld tokens in %.2f ms (%.1f tokens/s), stop: %s\n",
                 static_cast<long long>(r.prompt_tokens), r.prompt_seconds * 1e3,
                 per_second(r.prompt_tokens, r.prompt_seconds), static_cast<long long>(n_gen),
                 r.generate_seconds * 1e3, per_second(n_gen, r.generate_seconds), stop_reason_name(r.stop));
    std::fprintf(stderr, "memory: peak resident %.2f GB, KV cache %s of %lld positions\n",
                 static_cast<double>(bench::peak_resident_bytes()) / 1e9, cache.type() == KvType::F16 ? "f16" : "f32",
                 static_cast<long long>(cache.capacity()));
    if (source) {
        std::fprintf(stderr, "source: %s, k %d (%s), verify %s\n%s", std::string(source->name()).c_str(), so.k,
                     speculate::k_policy_name(so.k_policy), speculate::verify_mode_name(so.verify),
                     speculate::format_stats(run.stats).c_str());
    }
}

int run_generate(const GenerateFlags& f) {
    const std::string prompt = f.prompt.text();
    if (prompt.empty()) throw Error("generate: the prompt is empty (give -p TEXT or -f FILE)");
    auto model = Model::load(f.model.model, f.model.model_options());
    ContextOptions copts = f.cache.context_options(f.model.context_options());
    // One pool for the target and a draft model's context: two spinning pools would fight over
    // the cores.
    copts.pool = std::make_shared<ThreadPool>(copts.n_threads);
    Context ctx(model, copts);
    KvCache cache(*model, f.cache.cache_options());
    const std::vector<TokenId> prompt_ids =
        f.chat ? chat_prompt_ids(f.chat_flags, *model, prompt) : model->tokenizer().encode(prompt);
    const std::unique_ptr<speculate::GuessSource> source =
        make_guess_source("generate", f.spec, f.model, *model, cache, copts);
    const speculate::SpeculativeOptions so =
        f.spec.speculative_options(f.constraint.with_logprobs(f.output.generate_options(f.sampling)));
    const std::unique_ptr<TokenConstraint> constraint =
        make_constraint("generate", f.constraint.gbnf(), model->tokenizer());
    const GenerateRun run = decode(f, ctx, cache, prompt, prompt_ids, source.get(), so, constraint.get());
    if (f.json) print_json(f, model->tokenizer(), prompt, prompt_ids, run, source.get(), so, cache);
    else print_summary(run, cache, source.get(), so);
    return 0;
}

} // namespace

void register_generate(CLI::App& app, Runner& run) {
    auto flags = std::make_shared<GenerateFlags>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (plain or speculative decoding)");
    add_generate_flags(*cmd, *flags);
    cmd->callback([flags, &run] { run = [flags] { return run_generate(*flags); }; });
}

} // namespace rwd::cli

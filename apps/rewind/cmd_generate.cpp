// `rewind generate`: plain or (--spec) speculative decoding of a prompt (--chat: formatted as a
// user message by the chat template); streams the text as it is produced and prints speed (and
// speculation statistics) to stderr, or with --json one JSON object. `rewind chat`: a conversation,
// one turn per input line, over a ChatSession that reuses the KV of earlier turns.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "commands.h"
#include "rewind/chat.h"
#include "rewind/chat_session.h"
#include "rewind/context.h"
#include "rewind/device.h"
#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/speculative_session.h"

namespace rwd::cli {
namespace {

struct GenerateFlags {
    std::string model = default_model_path();
    std::string prompt;
    std::string file;
    int64_t n_predict = 128;
    float temperature = 0.0f; // greedy unless asked otherwise
    int32_t top_k = 0;
    float top_p = 1.0f;
    float min_p = 0.0f;
    float repeat_penalty = 1.0f;
    int32_t repeat_last_n = 64;
    uint64_t seed = 0;
    int threads = 1;
    std::string device = "cpu";
    std::string simd; // cap on the CPU kernels' level (empty: the CPU's best)
    int64_t ctx_size = 0; // 0: the model's context length
    std::string kv_type = "auto";   // f32, or f16 with --numerics llamacpp (llama.cpp's default)
    std::string numerics = "exact";
    std::vector<std::string> stop;
    bool ignore_eos = false;
    bool json = false;
    // Speculative decoding.
    std::string spec = "none";
    std::vector<std::string> refs;
    std::string draft;
    int k = 8;
    bool adaptive = false;
    std::string k_policy = "fixed";
    int tree = 0; // continuations per node of ngram, ref and suffix (0: each source's own)
    std::string verify = "exact";
    bool no_repack = false; // keep Q8_0, Q5_0 and K-quant weights in the file's layout (ModelOptions::repack)
    bool widen_q4 = false; // ModelOptions::widen_q4
    // Chat: the prompt as one user message, formatted by the model's chat template.
    bool chat = false;
    std::string system;        // an optional system message before it
    std::string chat_template; // a built-in format name or, with @FILE, a template's text
};

// "none" and every source the library's factory builds.
std::vector<std::string> spec_choices() {
    std::vector<std::string> c{"none"};
    for (const char* n : speculate::kSourceNames) c.emplace_back(n);
    return c;
}

speculate::KPolicy k_policy_of(const GenerateFlags& f) {
    if (f.adaptive || f.k_policy == "adaptive") return speculate::KPolicy::Adaptive;
    return f.k_policy == "cost" ? speculate::KPolicy::Cost : speculate::KPolicy::Fixed;
}

void add_generate_flags(CLI::App& cmd, GenerateFlags& f) {
    cmd.add_option("-m,--model", f.model, "GGUF model file")->capture_default_str();
    auto* p = cmd.add_option("-p,--prompt", f.prompt, "Prompt text");
    auto* fi = cmd.add_option("-f,--file", f.file, "Read the prompt from this file (at most 8 MiB)");
    p->excludes(fi);
    cmd.add_option("-n,--n-predict", f.n_predict, "Tokens to generate at most")->capture_default_str();
    cmd.add_option("--temp", f.temperature, "Temperature; 0 or below = greedy (as in llama.cpp)")->capture_default_str();
    cmd.add_option("--top-k", f.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
    cmd.add_option("--top-p", f.top_p, "Nucleus sampling mass; 1 = off")->capture_default_str();
    cmd.add_option("--min-p", f.min_p, "Drop tokens below min-p times the best one; 0 = off")->capture_default_str();
    cmd.add_option("--repeat-penalty", f.repeat_penalty, "Repetition penalty; 1 = off")->capture_default_str();
    cmd.add_option("--repeat-last-n", f.repeat_last_n, "Tokens the penalty looks back over")->capture_default_str();
    cmd.add_option("-s,--seed", f.seed, "Sampling seed (randomness is keyed by seed and position)")
        ->capture_default_str();
    cmd.add_option("-t,--threads", f.threads, "Threads")->capture_default_str();
    cmd.add_option("--device", f.device, "Where the forward pass runs: cpu, cuda or cuda:N")->capture_default_str();
    cmd.add_option("--simd", f.simd,
                   "Cap the CPU kernels at this SIMD level: scalar, avx2, avx-vnni or avx512 (default: the best this "
                   "CPU has). Quantized models give the same output at every level");
    cmd.add_flag("--no-repack", f.no_repack, "Keep Q8_0, Q5_0, Q5_1 and K-quant weights in the file's layout (no repacking at load)");
    cmd.add_flag("--widen-q4", f.widen_q4,
                  "Widen Q4_0 and Q4_1 weights to the packed Q8_0 layout at load: the same outputs, faster products, +89 % / +80 % of their memory");
    cmd.add_option("-c,--ctx-size", f.ctx_size, "KV cache capacity in tokens; 0 = the model's context, at most 4096")
        ->capture_default_str();
    cmd.add_option("--kv-type", f.kv_type, "KV cache storage; auto = f32, or f16 with --numerics llamacpp")
        ->check(CLI::IsMember({"auto", "f32", "f16"}))
        ->capture_default_str();
    cmd.add_option("--numerics", f.numerics,
                   "exact: rewind's fixed-order sums, the same bits whatever the pass size (needed by --spec); "
                   "llamacpp: llama.cpp's CPU roundings, to reproduce its outputs")
        ->check(CLI::IsMember({"exact", "llamacpp"}))
        ->capture_default_str();
    cmd.add_option("--stop", f.stop,
                   "Stop after the token that completes this text (repeatable; \\n, \\t and \\\\ are escapes)");
    cmd.add_flag("--ignore-eos", f.ignore_eos, "Keep generating after end-of-generation tokens");
    cmd.add_flag("--json", f.json, "Print one JSON object (ids, text, stop reason, timings) instead of streaming");
    cmd.add_option("--spec", f.spec,
                   "Speculative decoding guess source: none, ngram (prompt lookup), ref (--ref documents), "
                   "draft (--draft model), auto (ref, ngram and draft as available; the longest proposal "
                   "wins), auto-first (as auto, but the first member with a guess wins), suffix (a suffix "
                   "index of the prompt and output that proposes token trees)")
        ->check(CLI::IsMember(spec_choices()))
        ->capture_default_str();
    cmd.add_option("--tree", f.tree,
                   "Token trees: up to this many continuations per node for ngram, ref and suffix, verified "
                   "in one pass (1: chains; default: ngram and ref chains, suffix 4)")
        ->check(CLI::Range(1, 64));
    cmd.add_option("--ref", f.refs, "Reference document to copy guesses from (repeatable, at most 16 MiB each; --spec ref/auto)")
        ->check(CLI::ExistingFile);
    cmd.add_option("--draft", f.draft, "Draft GGUF model with the target's vocabulary (--spec draft/auto)")
        ->check(CLI::ExistingFile);
    cmd.add_option("-k", f.k, "Guesses per verification pass (the ceiling with --adaptive)")->capture_default_str();
    auto* chat = cmd.add_flag("--chat", f.chat,
                              "Format the prompt as one user message with the model's chat template (an instruct model's prompt)");
    cmd.add_option("--system", f.system, "With --chat: a system message before the user's")->needs(chat);
    cmd.add_option("--chat-template", f.chat_template,
                   "With --chat: a built-in chat format (llama3, llama3.1, chatml, qwen2.5, qwen3, phi3, gemma, ...), "
                   "or @FILE for a template's text; default: the file's tokenizer.chat_template")
        ->needs(chat);
    auto* ad = cmd.add_flag("--adaptive", f.adaptive, "Adapt the guesses per pass to recent acceptance (--k-policy adaptive)");
    cmd.add_option("--k-policy", f.k_policy,
                   "Guesses per pass: fixed (k), adaptive (grow and shrink with acceptance, at most k), cost "
                   "(keep the guesses, chain or tree, whose chance to stand pays for the time their rows add, "
                   "from this run's pass times)")
        ->check(CLI::IsMember({"fixed", "adaptive", "cost"}))
        ->excludes(ad)
        ->capture_default_str();
    cmd.add_option("--verify", f.verify,
                   "exact: output identical to plain decoding; rejection: speculative sampling "
                   "(the target's distribution, not its exact tokens)")
        ->check(CLI::IsMember({"exact", "rejection"}))
        ->capture_default_str();
}

// "\n", "\t" and "\\" in a command-line stop string stand for newline, tab and backslash.
std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\\' || i + 1 == s.size()) {
            out += s[i];
            continue;
        }
        switch (const char c = s[++i]) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case '\\': out += '\\'; break;
        default: out += '\\'; out += c; // not an escape: kept as written
        }
    }
    return out;
}

GenerateOptions to_generate_options(const GenerateFlags& f) {
    GenerateOptions o;
    o.max_tokens = f.n_predict;
    o.sampler.temperature = f.temperature;
    o.sampler.top_k = f.top_k;
    o.sampler.top_p = f.top_p;
    o.sampler.min_p = f.min_p;
    o.sampler.repeat_penalty = f.repeat_penalty;
    o.sampler.repeat_last_n = f.repeat_last_n;
    o.sampler.seed = f.seed;
    for (const std::string& s : f.stop) o.stop_strings.push_back(unescape(s));
    o.stop_at_eog = !f.ignore_eos;
    return o;
}

KvCacheOptions to_cache_options(const GenerateFlags& f) {
    const bool f16 = f.kv_type == "f16" || (f.kv_type == "auto" && f.numerics == "llamacpp");
    return KvCacheOptions{.capacity = f.ctx_size, .type = f16 ? KvType::F16 : KvType::F32};
}

ContextOptions to_context_options(const GenerateFlags& f) {
    const SimdLevel simd = f.simd.empty() ? detect_simd() : parse_simd(f.simd.c_str());
    if (f.numerics == "llamacpp")
        // llama.cpp's default ubatch passes prompts of up to 512 tokens whole; its roundings
        // depend on that pass size.
        return ContextOptions{.n_threads = f.threads, .max_batch = 512, .numerics = Numerics::LlamaCpp,
                              .device = parse_device(f.device), .simd = simd};
    return ContextOptions{.n_threads = f.threads, .device = parse_device(f.device), .simd = simd};
}

std::string read_prompt(const GenerateFlags& f) {
    if (f.file.empty()) return f.prompt;
    return read_file_limited(f.file, kMaxPromptFileBytes, "prompt file");
}

double per_second(int64_t n, double seconds) { return seconds > 0 ? static_cast<double>(n) / seconds : 0.0; }

// The guess source --spec names (built by the library's one factory), or null for plain
// decoding. Refuses flags that would be ignored.
std::unique_ptr<speculate::GuessSource> make_guess_source(const GenerateFlags& f, const Model& target,
                                                          const KvCache& cache, const ContextOptions& copts) {
    namespace sp = speculate;
    if (f.spec == "none") {
        if (!f.refs.empty() || !f.draft.empty())
            throw Error("generate: --ref and --draft need --spec ref, draft or auto");
        return nullptr;
    }
    if (!f.refs.empty() && f.spec != "ref" && f.spec != "auto" && f.spec != "auto-first")
        throw Error("generate: --ref is only used with --spec ref or auto");
    if (!f.draft.empty() && f.spec != "draft" && f.spec != "auto" && f.spec != "auto-first")
        throw Error("generate: --draft is only used with --spec draft or auto");
    if (f.spec == "ref" && f.refs.empty()) throw Error("generate: --spec ref needs at least one --ref FILE");
    if (f.spec == "draft" && f.draft.empty()) throw Error("generate: --spec draft needs --draft MODEL");
    sp::SourceSpec spec;
    sp::parse_source_kind(f.spec, spec);
    spec.branches = f.tree;
    for (const std::string& path : f.refs) spec.references.push_back(sp::read_text_file(path));
    if (!f.draft.empty()) spec.draft = Model::load(f.draft, ModelOptions{.repack = !f.no_repack, .widen_q4 = f.widen_q4});
    spec.draft_options.context = copts;
    spec.draft_options.cache_type = cache.type();
    return sp::make_guess_source(spec, target, cache.capacity());
}

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
std::vector<TokenId> chat_prompt_ids(const GenerateFlags& f, const Model& model, const std::string& prompt) {
    std::vector<ChatMessage> messages;
    if (!f.system.empty()) messages.push_back(ChatMessage{.role = "system", .content = f.system});
    messages.push_back(ChatMessage{.role = "user", .content = prompt});
    const std::string override_template =
        f.chat_template.starts_with("@")
            ? read_file_limited(f.chat_template.substr(1), kMaxPromptFileBytes, "chat template")
            : f.chat_template;
    const ChatFormat format =
        resolve_chat_format(override_template, model.file().gguf().get_string("tokenizer.chat_template").value_or(""));
    const Tokenizer& tok = model.tokenizer();
    ChatOptions o;
    fill_token_texts(o, tok);
    return tokenize_chat(tok, format, messages, o);
}

int run_generate(const GenerateFlags& f) {
    const std::string prompt = read_prompt(f);
    if (prompt.empty()) throw Error("generate: the prompt is empty (give -p TEXT or -f FILE)");
    auto model = Model::load(f.model, ModelOptions{.repack = !f.no_repack, .widen_q4 = f.widen_q4});
    ContextOptions copts = to_context_options(f);
    // One pool for the target and a draft model's context: two spinning pools would fight over
    // the cores.
    copts.pool = std::make_shared<ThreadPool>(copts.n_threads);
    Context ctx(model, copts);
    KvCache cache(*model, to_cache_options(f));
    const Tokenizer& tok = model->tokenizer();
    const std::vector<TokenId> prompt_ids = f.chat ? chat_prompt_ids(f, *model, prompt) : tok.encode(prompt);
    const GenerateOptions opts = to_generate_options(f);
    const std::unique_ptr<speculate::GuessSource> source = make_guess_source(f, *model, cache, copts);
    speculate::SpeculativeOptions so;
    so.generate = opts;
    so.k = f.k;
    so.k_policy = k_policy_of(f);
    so.verify = f.verify == "rejection" ? speculate::VerifyMode::Rejection : speculate::VerifyMode::Exact;
    if (!source && (f.adaptive || f.k_policy != "fixed" || f.verify != "exact" || f.tree > 0))
        throw Error("generate: --adaptive, --k-policy, --tree and --verify need --spec");
    // Generated text, complete UTF-8 only: a continuation, so no leading-space rule. The prompt
    // is echoed with the first token, so that options the decoder refuses fail before any output.
    Utf8StreamDecoder decoder(tok, /*at_text_start=*/false);
    std::string text;
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
        text += piece;
        if (!f.json && !piece.empty()) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        }
        return true;
    };
    DecodeStats stats;
    GenerateResult r;
    if (source) {
        speculate::SpeculativeResult sr = speculate::generate_speculative(ctx, cache, prompt_ids, *source, so, on_token);
        stats = std::move(sr.stats);
        r = std::move(sr);
    } else {
        r = generate_plain(ctx, cache, prompt_ids, opts, on_token);
    }
    echo_prompt(); // when nothing was generated
    const std::string rest = decoder.flush();
    text += rest;
    const auto n_gen = static_cast<int64_t>(r.tokens.size());

    if (f.json) {
        nlohmann::ordered_json j;
        j["model"] = f.model;
        j["numerics"] = f.numerics;
        j["prompt"] = prompt;
        j["prompt_ids"] = prompt_ids;
        j["generated_ids"] = r.tokens;
        j["generated_text"] = text;
        j["stop_reason"] = stop_reason_name(r.stop);
        j["timings"] = {
            {"prompt_tokens", r.prompt_tokens},
            {"prompt_seconds", r.prompt_seconds},
            {"prompt_tokens_per_second", per_second(r.prompt_tokens, r.prompt_seconds)},
            {"generated_tokens", n_gen},
            {"generate_seconds", r.generate_seconds},
            {"generated_tokens_per_second", per_second(n_gen, r.generate_seconds)},
        };
        if (source) j["speculation"] = stats_json(stats, so, source->name());
        const std::string out = j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        std::printf("%s\n", out.c_str());
        return 0;
    }
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr,
                 "\nprompt: %lld tokens in %.2f ms (%.1f tokens/s)\n"
                 "generation: %lld tokens in %.2f ms (%.1f tokens/s), stop: %s\n",
                 static_cast<long long>(r.prompt_tokens), r.prompt_seconds * 1e3,
                 per_second(r.prompt_tokens, r.prompt_seconds), static_cast<long long>(n_gen),
                 r.generate_seconds * 1e3, per_second(n_gen, r.generate_seconds), stop_reason_name(r.stop));
    if (source) {
        std::fprintf(stderr, "source: %s, k %d (%s), verify %s\n%s", std::string(source->name()).c_str(), so.k,
                     speculate::k_policy_name(so.k_policy), speculate::verify_mode_name(so.verify),
                     speculate::format_stats(stats).c_str());
    }
    return 0;
}

// `rewind chat`: one turn per line of standard input (a terminal or a pipe), each reply streamed as
// it is generated; the KV cache of every earlier turn is reused (ChatSession), speculation runs
// inside the conversation. "/reset" forgets the conversation, "/save FILE" and "/load FILE" keep
// it (its KV cache and messages) across runs, "/exit" ends it.
int run_chat(const GenerateFlags& f, bool verbose) {
    auto model = Model::load(f.model, ModelOptions{.repack = !f.no_repack, .widen_q4 = f.widen_q4});
    const std::string override_template =
        f.chat_template.starts_with("@")
            ? read_file_limited(f.chat_template.substr(1), kMaxPromptFileBytes, "chat template")
            : f.chat_template;
    const ChatFormat format = resolve_chat_format(override_template, model->file().gguf());
    ContextOptions copts = to_context_options(f);
    copts.pool = std::make_shared<ThreadPool>(copts.n_threads);
    Context ctx(model, copts);
    ChatSession chat(model, format, ChatSessionOptions{.cache = to_cache_options(f), .system = f.system});
    const std::unique_ptr<speculate::GuessSource> source = make_guess_source(f, *model, chat.session().cache(), copts);
    speculate::SpeculativeOptions so;
    so.generate = to_generate_options(f);
    so.k = f.k;
    so.k_policy = k_policy_of(f);
    so.verify = f.verify == "rejection" ? speculate::VerifyMode::Rejection : speculate::VerifyMode::Exact;
    const Tokenizer& tok = model->tokenizer();
    const bool terminal = ::isatty(0) != 0;
    if (verbose)
        std::fprintf(stderr, "chat format: %s\n", chat_format_name(format).c_str());
    std::string line;
    for (int turn = 1;; ++turn) {
        if (terminal) std::fputs("> ", stderr);
        if (!std::getline(std::cin, line) || line == "/exit") break;
        if (line == "/reset") {
            chat.reset();
            if (terminal || verbose) std::fputs("(conversation reset)\n", stderr);
            continue;
        }
        if (line.starts_with("/save ") || line.starts_with("/load ")) {
            const std::string path = line.substr(6);
            try {
                if (line[1] == 's') chat.save(path);
                else chat.load(path);
                if (terminal || verbose)
                    std::fprintf(stderr, "(conversation %s %s: %zu messages, %zu tokens)\n",
                                 line[1] == 's' ? "saved to" : "loaded from", path.c_str(), chat.messages().size(),
                                 chat.session().tokens().size());
            } catch (const Error& e) {
                std::fprintf(stderr, "rewind chat: %s\n", e.what()); // the conversation is as it was
            }
            continue;
        }
        Utf8StreamDecoder decoder(tok, /*at_text_start=*/false);
        const TokenCallback on_token = [&](TokenId id) {
            if (tok.is_eog(id)) return true; // the end of the turn is not part of the reply's text
            const std::string piece = decoder.push(id);
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return true;
        };
        DecodeStats stats;
        const ChatGenerate generate = [&](Session& s) -> GenerateResult {
            if (!source) return s.generate(ctx, so.generate, on_token);
            speculate::SpeculativeResult r = speculate::generate_speculative(ctx, s, *source, so, on_token);
            stats = r.stats;
            return r;
        };
        try {
            const ChatTurn t = chat.say(ctx, line, generate);
            const std::string rest = decoder.flush();
            std::fwrite(rest.data(), 1, rest.size(), stdout);
            std::fputs("\n", stdout);
            std::fflush(stdout);
            if (verbose) {
                const GenerateResult& r = t.result;
                std::fprintf(stderr,
                             "[turn %d: conversation %lld tokens, %lld reused from the cache, %lld run in %.2f ms; "
                             "reply %zu tokens in %.2f ms, stop: %s]\n",
                             turn, static_cast<long long>(t.prompt_tokens), static_cast<long long>(t.reused_tokens),
                             static_cast<long long>(t.run_tokens), t.prefill_seconds * 1e3, r.tokens.size(),
                             r.generate_seconds * 1e3, stop_reason_name(r.stop));
                if (source) std::fputs(speculate::format_stats(stats).c_str(), stderr);
            }
        } catch (const Error& e) {
            // The conversation is as it was before this turn: /reset (or a shorter turn) goes on.
            std::fprintf(stderr, "rewind chat: %s\n", e.what());
        }
    }
    return 0;
}

} // namespace

void register_chat(CLI::App& app, Runner& run) {
    auto flags = std::make_shared<GenerateFlags>();
    auto verbose = std::make_shared<bool>(false);
    flags->chat = true;
    CLI::App* cmd = app.add_subcommand(
        "chat", "Talk with a chat model: one turn per line of standard input, the KV of earlier turns reused");
    GenerateFlags& f = *flags;
    cmd->add_option("-m,--model", f.model, "GGUF model file")->capture_default_str();
    cmd->add_option("--system", f.system, "A system message first");
    cmd->add_option("--chat-template", f.chat_template,
                    "A built-in chat format (llama3, llama3.1, chatml, qwen2.5, qwen3, phi3, gemma, ...), or @FILE "
                    "for a template's text; default: the file's tokenizer.chat_template");
    cmd->add_option("-n,--n-predict", f.n_predict, "Tokens per reply at most")->capture_default_str();
    cmd->add_option("--temp", f.temperature, "Temperature; 0 or below = greedy")->capture_default_str();
    cmd->add_option("--top-k", f.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
    cmd->add_option("--top-p", f.top_p, "Nucleus sampling mass; 1 = off")->capture_default_str();
    cmd->add_option("--min-p", f.min_p, "Drop tokens below min-p times the best one; 0 = off")->capture_default_str();
    cmd->add_option("-s,--seed", f.seed, "Sampling seed (randomness is keyed by seed and position)")->capture_default_str();
    cmd->add_option("-t,--threads", f.threads, "Threads")->capture_default_str();
    cmd->add_option("--simd", f.simd, "Cap the CPU kernels at this SIMD level");
    cmd->add_option("-c,--ctx-size", f.ctx_size, "KV cache capacity in tokens; 0 = the model's context, at most 4096")
        ->capture_default_str();
    cmd->add_option("--spec", f.spec, "Guess source: none, ngram, ref, draft, auto, auto-first")->capture_default_str();
    cmd->add_option("--ref", f.refs, "Reference document to copy guesses from (repeatable; --spec ref/auto)");
    cmd->add_option("--draft", f.draft, "Draft GGUF model with the target's vocabulary (--spec draft/auto)");
    cmd->add_option("-k", f.k, "Guesses per verification pass")->capture_default_str();
    cmd->add_flag("--adaptive", f.adaptive, "Adapt the guesses per pass to recent acceptance");
    cmd->add_flag("--verbose", *verbose, "After each turn: the tokens reused and run, timings, speculation statistics");
    cmd->callback([flags, verbose, &run] { run = [flags, verbose] { return run_chat(*flags, *verbose); }; });
}

void register_generate(CLI::App& app, Runner& run) {
    auto flags = std::make_shared<GenerateFlags>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (plain or speculative decoding)");
    add_generate_flags(*cmd, *flags);
    cmd->callback([flags, &run] { run = [flags] { return run_generate(*flags); }; });
}

} // namespace rwd::cli

// `rewind generate`: plain decoding of a prompt with the runtime. Streams the text as it is
// produced and prints prompt and generation speed to stderr, or with --json one JSON object.
// Flags are parsed into GenerateFlags, which to_generate_options() turns into the runtime's
// GenerateOptions, so other decoders (speculative) can reuse the same flags and options.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"

namespace rewind::cli {
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
    int64_t ctx_size = 0; // 0: the model's context length
    std::string kv_type = "f32";
    std::vector<std::string> stop;
    bool ignore_eos = false;
    bool json = false;
};

void add_generate_flags(CLI::App& cmd, GenerateFlags& f) {
    cmd.add_option("-m,--model", f.model, "GGUF model file")->capture_default_str();
    auto* p = cmd.add_option("-p,--prompt", f.prompt, "Prompt text");
    auto* fi = cmd.add_option("-f,--file", f.file, "Read the prompt from this file");
    p->excludes(fi);
    cmd.add_option("-n,--n-predict", f.n_predict, "Tokens to generate at most")->capture_default_str();
    cmd.add_option("--temp", f.temperature, "Temperature; 0 = greedy")->capture_default_str();
    cmd.add_option("--top-k", f.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
    cmd.add_option("--top-p", f.top_p, "Nucleus sampling mass; 1 = off")->capture_default_str();
    cmd.add_option("--min-p", f.min_p, "Drop tokens below min-p times the best one; 0 = off")->capture_default_str();
    cmd.add_option("--repeat-penalty", f.repeat_penalty, "Repetition penalty; 1 = off")->capture_default_str();
    cmd.add_option("--repeat-last-n", f.repeat_last_n, "Tokens the penalty looks back over")->capture_default_str();
    cmd.add_option("-s,--seed", f.seed, "Sampling seed (randomness is keyed by seed and position)")
        ->capture_default_str();
    cmd.add_option("-t,--threads", f.threads, "Threads")->capture_default_str();
    cmd.add_option("-c,--ctx-size", f.ctx_size, "KV cache capacity in tokens; 0 = the model's context")
        ->capture_default_str();
    cmd.add_option("--kv-type", f.kv_type, "KV cache storage")
        ->check(CLI::IsMember({"f32", "f16"}))
        ->capture_default_str();
    cmd.add_option("--stop", f.stop,
                   "Stop after the token that completes this text (repeatable; \\n, \\t and \\\\ are escapes)");
    cmd.add_flag("--ignore-eos", f.ignore_eos, "Keep generating after end-of-generation tokens");
    cmd.add_flag("--json", f.json, "Print one JSON object (ids, text, stop reason, timings) instead of streaming");
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
    return KvCacheOptions{.capacity = f.ctx_size, .type = f.kv_type == "f16" ? KvType::F16 : KvType::F32};
}

std::string read_prompt(const GenerateFlags& f) {
    if (f.file.empty()) return f.prompt;
    std::ifstream in(f.file, std::ios::binary);
    if (!in) throw Error(f.file + ": cannot open the prompt file");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double per_second(int64_t n, double seconds) { return seconds > 0 ? static_cast<double>(n) / seconds : 0.0; }

int run_generate(const GenerateFlags& f) {
    const std::string prompt = read_prompt(f);
    if (prompt.empty()) throw Error("generate: the prompt is empty (give -p TEXT or -f FILE)");
    auto model = Model::load(f.model);
    Context ctx(model, ContextOptions{.n_threads = f.threads});
    KvCache cache(*model, to_cache_options(f));
    const Tokenizer& tok = model->tokenizer();
    const std::vector<TokenId> prompt_ids = tok.encode(prompt);
    const GenerateOptions opts = to_generate_options(f);

    // Generated text, complete UTF-8 only: a continuation, so no leading-space rule.
    Utf8StreamDecoder decoder(tok, /*at_text_start=*/false);
    std::string text;
    if (!f.json) {
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
        std::fflush(stdout);
    }
    const GenerateResult r = generate_plain(ctx, cache, prompt_ids, opts, [&](TokenId id) {
        const std::string piece = decoder.push(id);
        text += piece;
        if (!f.json && !piece.empty()) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
        }
        return true;
    });
    const std::string rest = decoder.flush();
    text += rest;
    const auto n_gen = static_cast<int64_t>(r.tokens.size());

    if (f.json) {
        nlohmann::ordered_json j;
        j["model"] = f.model;
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
    return 0;
}

} // namespace

void register_generate(CLI::App& app, Runner& run) {
    auto flags = std::make_shared<GenerateFlags>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (plain decoding)");
    add_generate_flags(*cmd, *flags);
    cmd->callback([flags, &run] { run = [flags] { return run_generate(*flags); }; });
}

} // namespace rewind::cli

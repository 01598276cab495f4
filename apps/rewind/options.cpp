// The option groups the subcommands share: one declaration per flag (spelling, type, check and
// description) and one mapping from each group to the library's options.
#include "options.h"

#include <cmath>
#include <cstdlib>

#include "rewind/device.h"
#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/regex.h"
#include "rewind/speculate/grammar_constraint.h"
#include "rewind/speculate/reference_source.h"

namespace rwd::cli {

std::string default_model_path() { return std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf"; }

namespace {

// "none" and every source the library's factory builds.
std::vector<std::string> spec_choices() {
    std::vector<std::string> c{"none"};
    for (const char* n : speculate::kSourceNames) c.emplace_back(n);
    return c;
}

// What bench adds to a speculation flag's description: it measures each value of a list.
const char* const kSweepNote = " (bench: a comma-separated list, each value measured)";

const char* const kSpecHelp =
    "Speculative decoding guess source: none, ngram (prompt lookup), ref (--ref documents), draft (--draft "
    "model), auto (ref, ngram and draft as available; the longest proposal wins), auto-first (as auto, but the "
    "first member with a guess wins), suffix (a suffix index of the prompt and output that proposes token trees)";
const char* const kKHelp = "Guesses per verification pass (the ceiling with --adaptive)";
const char* const kTreeHelp =
    "Token trees: up to this many continuations per node for ngram, ref and suffix, verified in one pass "
    "(1: chains; default: ngram and ref chains, suffix 4)";
const char* const kAdaptiveHelp = "Adapt the guesses per pass to recent acceptance (--k-policy adaptive)";
const char* const kRefHelp =
    "Reference document to copy guesses from (repeatable, at most 16 MiB each; --spec ref/auto)";
const char* const kDraftHelp = "Draft GGUF model with the target's vocabulary (--spec draft/auto)";

std::string swept(const char* help) { return std::string(help) + kSweepNote; }

} // namespace

ContextOptions ModelFlags::context_options() const {
    const SimdLevel level = simd.empty() ? detect_simd() : parse_simd(simd.c_str());
    return ContextOptions{.n_threads = threads, .device = parse_device(device), .simd = level};
}

CLI::Option* add_model_path_flag(CLI::App& cmd, std::string& path) {
    return cmd.add_option("-m,--model", path, "GGUF model file (default: the bundled model)")->capture_default_str();
}

void add_model_flags(CLI::App& cmd, ModelFlags& f, unsigned which) {
    if (which & kModelPath) add_model_path_flag(cmd, f.model);
    if (which & kThreads)
        cmd.add_option("-t,--threads", f.threads, "Threads of the forward pass (target and draft)")->capture_default_str();
    if (which & kPlacement) {
        cmd.add_option("--device", f.device, "Where the forward pass runs: cpu, cuda or cuda:N")->capture_default_str();
        cmd.add_option("--simd", f.simd,
                       "Cap the CPU kernels at this SIMD level: scalar, avx2 (plain AVX2, no VNNI), avx-vnni or avx512 "
                       "(default: the best this CPU has; a level it lacks is an error). Quantized models give the "
                       "same bits at every level");
    }
    if (which & kRepack) {
        cmd.add_flag("--no-repack", f.no_repack,
                     "Keep Q8_0, Q5_0, Q5_1 and K-quant weights in the file's layout (no repacking at load)");
        cmd.add_flag("--widen-q4", f.widen_q4,
                     "Widen Q4_0 and Q4_1 weights to the packed Q8_0 layout at load: the same outputs, faster "
                     "products, +89 % / +80 % of their memory");
    }
}

void add_sampling_flags(CLI::App& cmd, SamplerOptions& s) {
    cmd.add_option("--temp", s.temperature, "Temperature; 0 or below = greedy (as in llama.cpp)")->capture_default_str();
    cmd.add_option("--top-k", s.top_k, "Keep the k most likely tokens; 0 = off")->capture_default_str();
    cmd.add_option("--top-p", s.top_p, "Nucleus sampling mass; 1 = off")->capture_default_str();
    cmd.add_option("--min-p", s.min_p, "Drop tokens below min-p times the best one; 0 = off")->capture_default_str();
    cmd.add_option("--repeat-penalty", s.repeat_penalty, "Repetition penalty; 1 = off")->capture_default_str();
    cmd.add_option("--repeat-last-n", s.repeat_last_n, "Tokens the penalty looks back over")->capture_default_str();
    cmd.add_option("-s,--seed", s.seed, "Sampling seed (randomness is keyed by seed and position)")
        ->capture_default_str();
    cmd.add_option("--frequency-penalty", s.frequency_penalty,
                   "Subtract this times a token's count in the last --repeat-last-n tokens (OpenAI's; -2..2, 0 = off)")
        ->check(CLI::Range(-2.0f, 2.0f))
        ->capture_default_str();
    cmd.add_option("--presence-penalty", s.presence_penalty,
                   "Subtract this from tokens present in the last --repeat-last-n tokens (OpenAI's; -2..2, 0 = off)")
        ->check(CLI::Range(-2.0f, 2.0f))
        ->capture_default_str();
    cmd.add_option_function<std::vector<std::string>>(
           "--logit-bias",
           [&s](const std::vector<std::string>& items) {
               for (const std::string& item : items) s.logit_bias.push_back(parse_logit_bias(item));
           },
           "Add BIAS (-100..100) to token ID's logit: ID=BIAS (repeatable)")
        ->type_name("ID=BIAS");
}

namespace {

const char* const kGrammarFileHelp = "Constrain the output to a GBNF grammar file (llama.cpp's syntax, start rule 'root')";
const char* const kJsonSchemaHelp =
    "Constrain the output to a JSON Schema's instances: a file, or the schema's text when it starts with '{' "
    "(properties in the order the schema declares them)";
const char* const kRegexHelp = "Constrain the output to texts the regular expression matches as a whole";

// --json-schema's argument: the schema's text when it looks like a JSON object, else a file.
std::string json_schema_source(const std::string& arg) {
    const size_t first = arg.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && arg[first] == '{') return arg;
    return read_file_limited(arg, kMaxPromptFileBytes, "--json-schema file");
}

// Prefixes an rwd::Error's message with `who`, keeping its code.
template <class F> auto naming(const std::string& who, F&& f) {
    try {
        return f();
    } catch (const Error& e) {
        throw Error(e.code(), who + ": " + e.what());
    }
}

} // namespace

std::pair<TokenId, float> parse_logit_bias(const std::string& item) {
    const size_t eq = item.find('=');
    char* end = nullptr;
    const long long id = eq == std::string::npos ? -1 : std::strtoll(item.c_str(), &end, 10);
    bool ok = eq != std::string::npos && eq > 0 && end == item.c_str() + eq && id >= 0 && id <= 0x7FFFFFFF;
    float bias = 0;
    if (ok) {
        const std::string b = item.substr(eq + 1);
        char* bend = nullptr;
        bias = std::strtof(b.c_str(), &bend);
        ok = !b.empty() && bend == b.c_str() + b.size() && std::isfinite(bias);
    }
    if (!ok) throw CLI::ValidationError("--logit-bias", "'" + item + "' is not ID=BIAS (a token id and a number)");
    return {static_cast<TokenId>(id), bias};
}

std::string ConstraintFlags::gbnf() const {
    grammar::JsonGrammarOptions jo;
    jo.whitespace = json_whitespace == "free" ? grammar::JsonWhitespace::Free : grammar::JsonWhitespace::Compact;
    if (!grammar_file.empty())
        return read_file_limited(grammar_file, kMaxPromptFileBytes, "--grammar file");
    if (!json_schema.empty())
        return naming("--json-schema", [&] { return grammar::json_schema_to_gbnf(json_schema_source(json_schema), jo); });
    if (!regex.empty()) return naming("--regex", [&] { return grammar::regex_to_gbnf(regex); });
    return {};
}

GenerateOptions ConstraintFlags::with_logprobs(GenerateOptions g) const {
    if (logprobs >= 0) g.logprobs = LogprobOptions{.enabled = true, .top_n = logprobs};
    return g;
}

void add_constraint_flags(CLI::App& cmd, ConstraintFlags& f, unsigned which) {
    CLI::Option* g = cmd.add_option("--grammar", f.grammar_file, kGrammarFileHelp);
    CLI::Option* j = cmd.add_option("--json-schema", f.json_schema, kJsonSchemaHelp)->type_name("FILE|TEXT");
    CLI::Option* r = cmd.add_option("--regex", f.regex, kRegexHelp)->type_name("RE");
    g->excludes(j)->excludes(r);
    j->excludes(r);
    cmd.add_option("--json-whitespace", f.json_whitespace,
                   "Whitespace a JSON Schema admits: compact (none) or free (any JSON whitespace, in runs of at most 32)")
        ->check(CLI::IsMember({"compact", "free"}))
        ->capture_default_str()
        ->needs(j);
    if (which & kLogprobs)
        cmd.add_option("--logprobs", f.logprobs,
                       "Per-token log-probabilities with this many top alternatives (0..20), in --json output")
            ->check(CLI::Range(0, LogprobOptions::kMaxTop));
}

nlohmann::ordered_json logprobs_json(const std::vector<TokenLogprob>& lps, const Tokenizer& tok) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const TokenLogprob& lp : lps) {
        nlohmann::ordered_json top = nlohmann::ordered_json::array();
        for (const TopLogprob& t : lp.alternatives())
            top.push_back({{"id", t.token}, {"text", tok.token_to_piece(t.token)}, {"logprob", t.logprob}});
        out.push_back({{"id", lp.token}, {"text", tok.token_to_piece(lp.token)}, {"logprob", lp.logprob}, {"top", top}});
    }
    return out;
}

void constrain_items(std::vector<bench::WorkItem>& items, const ConstraintFlags& c) {
    if (!c.used()) return;
    const std::string gbnf = c.gbnf();
    for (bench::WorkItem& w : items)
        if (w.grammar.empty()) w.grammar = gbnf;
}

std::unique_ptr<TokenConstraint> make_constraint(const char* who, const std::string& gbnf, const Tokenizer& tok,
                                                 grammar::GrammarCache* cache) {
    if (gbnf.empty()) return nullptr;
    return naming(std::string(who) + ": grammar", [&] { return make_grammar_constraint(gbnf, tok, cache); });
}

KvType kv_type_of(const std::string& flag) { return flag == "f32" ? KvType::F32 : KvType::F16; }

void add_kv_type_flag(CLI::App& cmd, std::string& kv_type) {
    cmd.add_option("--kv-type", kv_type,
                   "KV cache storage: f16 (half the memory of f32) or f32; auto = f16. Speculative output equals "
                   "plain decoding at either type")
        ->check(CLI::IsMember({"auto", "f32", "f16"}))
        ->capture_default_str();
}

KvCacheOptions CacheFlags::cache_options() const {
    return KvCacheOptions{.capacity = ctx_size, .type = kv_type_of(kv_type)};
}

ContextOptions CacheFlags::context_options(ContextOptions base) const {
    if (numerics == "llamacpp") {
        // llama.cpp's default ubatch passes prompts of up to 512 tokens whole; its roundings
        // depend on that pass size.
        base.max_batch = 512;
        base.numerics = Numerics::LlamaCpp;
    }
    return base;
}

void add_cache_flags(CLI::App& cmd, CacheFlags& f) {
    cmd.add_option("-c,--ctx-size", f.ctx_size, "KV cache capacity in tokens; 0 = the model's context, at most 4096")
        ->capture_default_str();
    add_kv_type_flag(cmd, f.kv_type);
    cmd.add_option("--numerics", f.numerics,
                   "exact: rewind's fixed-order sums, the same bits whatever the pass size (needed by --spec); "
                   "llamacpp: llama.cpp's CPU roundings, to reproduce its outputs")
        ->check(CLI::IsMember({"exact", "llamacpp"}))
        ->capture_default_str();
}

speculate::KPolicy SpecFlags::policy() const {
    if (adaptive || k_policy == "adaptive") return speculate::KPolicy::Adaptive;
    return k_policy == "cost" ? speculate::KPolicy::Cost : speculate::KPolicy::Fixed;
}

speculate::SpeculativeOptions SpecFlags::speculative_options(const GenerateOptions& generate) const {
    speculate::SpeculativeOptions so;
    so.generate = generate;
    so.k = k;
    so.k_policy = policy();
    so.verify = verify == "rejection" ? speculate::VerifyMode::Rejection : speculate::VerifyMode::Exact;
    return so;
}

void add_spec_flags(CLI::App& cmd, SpecFlags& f, unsigned which) {
    cmd.add_option("--spec", f.spec, kSpecHelp)->check(CLI::IsMember(spec_choices()))->capture_default_str();
    cmd.add_option("-k,--k", f.k, kKHelp)->capture_default_str();
    cmd.add_option("--tree", f.tree, kTreeHelp)->check(CLI::Range(1, 64));
    cmd.add_option("--draft", f.draft, kDraftHelp)->check(CLI::ExistingFile);
    if (which & kRefs) cmd.add_option("--ref", f.refs, kRefHelp)->check(CLI::ExistingFile);
    CLI::Option* ad = nullptr;
    if (which & kAdaptive) ad = cmd.add_flag("--adaptive", f.adaptive, kAdaptiveHelp);
    if (which & kPolicy) {
        auto* kp = cmd.add_option("--k-policy", f.k_policy,
                                  "Guesses per pass: fixed (k), adaptive (grow and shrink with acceptance, at most k), "
                                  "cost (keep the guesses, chain or tree, whose chance to stand pays for the time "
                                  "their rows add, from this run's pass times)")
                       ->check(CLI::IsMember({"fixed", "adaptive", "cost"}))
                       ->capture_default_str();
        if (ad) kp->excludes(ad);
        cmd.add_option("--verify", f.verify,
                       "exact: output identical to plain decoding; rejection: speculative sampling "
                       "(the target's distribution, not its exact tokens)")
            ->check(CLI::IsMember({"exact", "rejection"}))
            ->capture_default_str();
    }
}

void check_spec_flags(const char* who, const SpecFlags& f, unsigned which) {
    const std::string w = who;
    if (!f.used()) {
        if (!f.refs.empty() || !f.draft.empty()) throw Error(w + ": --ref and --draft need --spec ref, draft or auto");
        if (f.adaptive || f.k_policy != "fixed" || f.verify != "exact" || f.tree > 0)
            throw Error(w + ": --adaptive, --k-policy, --tree and --verify need --spec");
        return;
    }
    const bool composite = f.spec == "auto" || f.spec == "auto-first";
    if (!f.refs.empty() && f.spec != "ref" && !composite) throw Error(w + ": --ref is only used with --spec ref or auto");
    if (!f.draft.empty() && f.spec != "draft" && !composite)
        throw Error(w + ": --draft is only used with --spec draft or auto");
    if (f.spec == "ref" && f.refs.empty() && (which & kRefs)) throw Error(w + ": --spec ref needs at least one --ref FILE");
    if (f.spec == "draft" && f.draft.empty()) throw Error(w + ": --spec draft needs --draft MODEL");
}

std::unique_ptr<speculate::GuessSource> make_guess_source(const char* who, const SpecFlags& f, const ModelFlags& m,
                                                          const Model& target, const KvCache& cache,
                                                          const ContextOptions& copts) {
    namespace sp = speculate;
    check_spec_flags(who, f);
    if (!f.used()) return nullptr;
    sp::SourceSpec spec;
    sp::parse_source_kind(f.spec, spec);
    spec.branches = f.tree;
    for (const std::string& path : f.refs) spec.references.push_back(sp::read_text_file(path));
    if (!f.draft.empty()) spec.draft = Model::load(f.draft, m.model_options());
    spec.draft_options.context = copts;
    spec.draft_options.cache_type = cache.type();
    return sp::make_guess_source(spec, target, cache.capacity());
}

CLI::Option* add_spec_sweep_flags(CLI::App& cmd, SpecSweepFlags& f) {
    cmd.add_option("--spec", f.spec, swept(kSpecHelp))
        ->delimiter(',')
        ->check(CLI::IsMember(spec_choices()))
        ->capture_default_str();
    cmd.add_option("-k,--k", f.ks, swept(kKHelp))->delimiter(',')->capture_default_str();
    cmd.add_option("--tree", f.trees, swept(kTreeHelp))->delimiter(',')->check(CLI::Range(1, 64));
    cmd.add_option("--draft", f.draft, kDraftHelp)->check(CLI::ExistingFile);
    cmd.add_option("--ref", f.refs, kRefHelp)->check(CLI::ExistingFile);
    return cmd.add_flag("--adaptive", f.adaptive, std::string(kAdaptiveHelp) + " (bench: measured next to fixed k)");
}

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

GenerateOptions OutputFlags::generate_options(const SamplerOptions& sampler) const {
    GenerateOptions o;
    o.max_tokens = n_predict;
    o.sampler = sampler;
    for (const std::string& s : stop) o.stop_strings.push_back(unescape(s));
    o.stop_at_eog = !ignore_eos;
    return o;
}

void add_output_flags(CLI::App& cmd, OutputFlags& f, unsigned which) {
    cmd.add_option("-n,--n-predict", f.n_predict,
                   "Tokens to generate at most per prompt, reply or request (batch, bench: 0 = each workload "
                   "item's max_tokens)")
        ->capture_default_str();
    if (which & kStop)
        cmd.add_option("--stop", f.stop,
                       "Stop after the token that completes this text (repeatable; \\n, \\t and \\\\ are escapes)");
    if (which & kIgnoreEos) cmd.add_flag("--ignore-eos", f.ignore_eos, "Keep generating after end-of-generation tokens");
}

std::string PromptFlags::text() const {
    if (file.empty()) return prompt;
    return read_file_limited(file, kMaxPromptFileBytes, "prompt file");
}

CLI::Option* add_prompt_flags(CLI::App& cmd, std::string& prompt, std::string* file) {
    auto* p = cmd.add_option("-p,--prompt", prompt, "Prompt text");
    if (file) p->excludes(cmd.add_option("-f,--file", *file, "Read the prompt from this file (at most 8 MiB)"));
    return p;
}

std::string ChatFlags::template_text() const {
    if (!chat_template.starts_with("@")) return chat_template;
    return read_file_limited(chat_template.substr(1), kMaxPromptFileBytes, "chat template");
}

CLI::Option* add_chat_flags(CLI::App& cmd, ChatFlags& f, CLI::Option* needs, bool with_system) {
    if (with_system) {
        auto* s = cmd.add_option("--system", f.system, "A system message before the first user message");
        if (needs) s->needs(needs);
    }
    auto* t = cmd.add_option("--chat-template", f.chat_template,
                             "A built-in chat format (llama3, llama3.1, chatml, qwen2.5, qwen3, phi3, gemma, ...), "
                             "or @FILE for a template's text; default: the file's tokenizer.chat_template");
    if (needs) t->needs(needs);
    return t;
}

CLI::Option* add_chat_template_file_flag(CLI::App& cmd, std::string& path) {
    return cmd.add_option("--chat-template-file", path,
                          "A file holding a chat template's text (as a GGUF file's tokenizer.chat_template holds it)");
}

std::vector<bench::WorkItem> WorkloadFlags::load() const {
    std::vector<bench::WorkItem> all;
    for (const std::string& w : workloads) {
        auto part = bench::take_first(bench::load_workload(w), items);
        all.insert(all.end(), part.begin(), part.end());
    }
    return all;
}

CLI::Option* add_workload_flags(CLI::App& cmd, WorkloadFlags& f) {
    auto* w = cmd.add_option("--workload", f.workloads,
                             "JSON-lines workload file {id, kind?, prompt, references?, max_tokens}, at most 64 MiB; "
                             "repeatable");
    cmd.add_option("--items,--limit", f.items, "Take only the first N items of each workload file");
    return w;
}

bench::BatchRunOptions BatchingFlags::batch_options(const char* who, const SamplerOptions& sampler,
                                                    int64_t max_tokens) const {
    const std::string w = who;
    if (kv_budget_mib < 0) throw Error(w + ": --kv-budget-mib must not be negative");
    if (!pass_cost_ms.empty() &&
        (pass_cost_ms.size() != 2 || !(pass_cost_ms[0] > 0) || !(pass_cost_ms[1] > 0) || std::isinf(pass_cost_ms[0]) ||
         std::isinf(pass_cost_ms[1])))
        throw Error(w + ": --pass-cost wants two positive numbers, FIXED_MS,PER_ROW_MS");
    bench::BatchRunOptions o;
    o.sampler = sampler;
    o.max_tokens = max_tokens;
    o.kv_budget_bytes = static_cast<uint64_t>(kv_budget_mib) << 20;
    o.prefill_chunk = prefill_chunk;
    o.pass_tokens = pass_tokens;
    o.cost_model = cost_model;
    o.kv_type = kv_type_of(kv_type);
    if (!pass_cost_ms.empty()) {
        o.pass_fixed_seconds = pass_cost_ms[0] * 1e-3;
        o.pass_row_seconds = pass_cost_ms[1] * 1e-3;
    }
    return o;
}

void add_batching_flags(CLI::App& cmd, BatchingFlags& f, bool with_budget) {
    cmd.add_option("--prefill-chunk", f.prefill_chunk,
                   "Prompt tokens per pass (all requests still prefilling together), run inside the decode passes")
        ->capture_default_str();
    cmd.add_option("--pass-tokens", f.pass_tokens,
                   "Pending tokens + guesses per pass (guesses least likely to stand dropped first); 0 = no limit")
        ->capture_default_str();
    cmd.add_flag("--cost-model", f.cost_model,
                 "Verify a guess only while its chance to stand pays for its row (pass time fitted as a + b * rows)");
    cmd.add_option("--pass-cost", f.pass_cost_ms,
                   "--cost-model's pass time a + b * rows as FIXED_MS,PER_ROW_MS (e.g. from `rewind bench "
                   "--cost-curve`) instead of fitting it to the run's own passes")
        ->delimiter(',');
    add_kv_type_flag(cmd, f.kv_type);
    if (with_budget)
        cmd.add_option("--kv-budget-mib", f.kv_budget_mib,
                       "Total KV cache of the active requests in MiB (0: no limit); admission waits for room")
            ->capture_default_str();
}

const char* const kConcurrencyHelp = "Requests decoding at once (each pass carries all of them)";

void add_concurrency_flag(CLI::App& cmd, int& concurrency) {
    cmd.add_option("--concurrency", concurrency, kConcurrencyHelp)->capture_default_str();
}

void add_concurrency_sweep_flag(CLI::App& cmd, std::vector<int>& levels, const std::string& bench_help) {
    cmd.add_option("--concurrency", levels, swept(kConcurrencyHelp) + bench_help)->delimiter(',');
}

} // namespace rwd::cli

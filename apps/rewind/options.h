// The option groups the subcommands share (model loading, sampling, speculation, output, chat,
// workload and batching): each flag is declared once here, so it has one spelling, type and
// description everywhere, and each group has one mapping to the library's options.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "rewind/bench/bench_batch.h"
#include "rewind/bench/bench_workload.h"
#include "rewind/constraint.h"
#include "rewind/context.h"
#include "rewind/generate.h"
#include "rewind/grammar/token_mask.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/sampler.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/source_factory.h"

namespace rwd::cli {

// The model bundled with the repository (the default of -m).
std::string default_model_path();

// Model loading and where the forward pass runs.
struct ModelFlags {
    std::string model = default_model_path();
    bool no_repack = false; // keep Q8_0, Q5_0 and K-quant weights in the file's layout (ModelOptions::repack)
    bool widen_q4 = false;  // ModelOptions::widen_q4
    int threads = 1;
    std::string device = "cpu";
    std::string simd; // cap on the CPU kernels' level (empty: the CPU's best)

    ModelOptions model_options() const { return ModelOptions{.repack = !no_repack, .widen_q4 = widen_q4}; }
    // Threads, device and SIMD level; the other fields at their defaults. Throws rwd::Error
    // (argument) on an unknown device or SIMD name.
    ContextOptions context_options() const;
};
// Which of the group's flags a subcommand takes (a bit set; serve has no --device or --simd).
enum ModelFlag : unsigned { kModelPath = 1, kThreads = 2, kPlacement = 4 /* --device, --simd */, kRepack = 8 };
constexpr unsigned kAllModelFlags = kModelPath | kThreads | kPlacement | kRepack;
void add_model_flags(CLI::App& cmd, ModelFlags& f, unsigned which = kAllModelFlags);
// -m alone, for the subcommands that only read a file (inspect, tokenize).
CLI::Option* add_model_path_flag(CLI::App& cmd, std::string& path);

// Sampling: every flag binds to a field of SamplerOptions (its defaults are the flags' defaults);
// --logit-bias ID=BIAS (repeatable) appends to SamplerOptions::logit_bias.
void add_sampling_flags(CLI::App& cmd, SamplerOptions& s);
// One --logit-bias item, "ID=BIAS". Throws CLI::ValidationError when malformed (the range of the
// id and the bias is the Sampler's to check).
std::pair<TokenId, float> parse_logit_bias(const std::string& item);

// Constrained output: at most one grammar source (a GBNF file, a JSON Schema, a regex), the JSON
// whitespace mode, and per-token log-probabilities.
struct ConstraintFlags {
    std::string grammar_file;
    std::string json_schema; // a file's path, or the schema's JSON text when it starts with '{'
    std::string regex;
    std::string json_whitespace = "compact";
    int logprobs = -1; // alternatives per token, [0, LogprobOptions::kMaxTop]; -1: no logprobs

    bool used() const { return !grammar_file.empty() || !json_schema.empty() || !regex.empty(); }
    // The GBNF of whichever source was given (empty when none). Throws rwd::Error naming the
    // flag: argument (an invalid schema or regex, a file that cannot be read), format (not JSON).
    std::string gbnf() const;
    // `g` with logprobs on (the raw distribution, top `logprobs` alternatives) when asked for.
    GenerateOptions with_logprobs(GenerateOptions g) const;
};
// Which of the group's flags a subcommand takes: the grammar sources and --json-whitespace always.
enum ConstraintFlag : unsigned { kLogprobs = 1 };
void add_constraint_flags(CLI::App& cmd, ConstraintFlags& f, unsigned which);
// The constraint of `gbnf` (a GBNF text) for `tok`, compiled through `cache` (null: its own);
// null when `gbnf` is empty. Throws rwd::Error (argument), prefixed with `who`, when the grammar
// does not parse or names a token `tok` lacks.
std::unique_ptr<TokenConstraint> make_constraint(const char* who, const std::string& gbnf, const Tokenizer& tok,
                                                 grammar::GrammarCache* cache = nullptr);
// --logprobs in JSON output: per token {id, text, logprob, top: [{id, text, logprob}...]}.
nlohmann::ordered_json logprobs_json(const std::vector<TokenLogprob>& lps, const Tokenizer& tok);
// Workload items without a constraint of their own get the flags' grammar (batch, bench: the
// flags as defaults); nothing changes when no grammar flag was given. Throws as gbnf() does.
void constrain_items(std::vector<bench::WorkItem>& items, const ConstraintFlags& c);

// --kv-type's value as a cache type: "auto" and "f16" store half precision (every path, CPU and
// CUDA, attends over either type; speculative output equals plain decoding at either), "f32"
// full precision. The value is one CLI11 already checked.
KvType kv_type_of(const std::string& flag);
// --kv-type (auto, f32, f16) into `kv_type` (generate, chat, batch, bench, serve).
void add_kv_type_flag(CLI::App& cmd, std::string& kv_type);

// The KV cache and numerics of one conversation (generate, chat).
struct CacheFlags {
    int64_t ctx_size = 0;         // 0: the model's context length
    std::string kv_type = "auto"; // kv_type_of: auto = f16
    std::string numerics = "exact";

    KvCacheOptions cache_options() const;
    // `base` (ModelFlags::context_options) with llama.cpp's numerics and pass size when asked for.
    ContextOptions context_options(ContextOptions base) const;
};
void add_cache_flags(CLI::App& cmd, CacheFlags& f);

// Speculative decoding with one guess source.
struct SpecFlags {
    std::string spec = "none";
    std::vector<std::string> refs;
    std::string draft;
    int k = 8;
    bool adaptive = false;
    std::string k_policy = "fixed";
    int tree = 0; // continuations per node of ngram, ref and suffix (0: each source's own)
    std::string verify = "exact";

    bool used() const { return spec != "none"; }
    speculate::KPolicy policy() const;
    // `generate` as the plain decoding options and the rest from the flags.
    speculate::SpeculativeOptions speculative_options(const GenerateOptions& generate) const;
};
// Which of the group's flags a subcommand takes: --spec, -k, --tree and --draft always.
enum SpecFlag : unsigned { kRefs = 1, kAdaptive = 2, kPolicy = 4 /* --k-policy, --verify */ };
constexpr unsigned kAllSpecFlags = kRefs | kAdaptive | kPolicy;
void add_spec_flags(CLI::App& cmd, SpecFlags& f, unsigned which = kAllSpecFlags);

// Throws rwd::Error (argument), prefixed with `who`, for flags that would be ignored or are
// missing (--ref without a source that reads it, --spec draft without --draft, --tree or a k
// policy without --spec). `which`: the flags the subcommand takes (without kRefs, as in batch,
// references come from elsewhere and --spec ref needs no --ref).
void check_spec_flags(const char* who, const SpecFlags& f, unsigned which = kAllSpecFlags);
// The guess source the flags name (built by the library's one factory, a draft loaded with the
// model flags' options), or null for plain decoding. Throws as check_spec_flags does.
std::unique_ptr<speculate::GuessSource> make_guess_source(const char* who, const SpecFlags& f, const ModelFlags& m,
                                                          const Model& target, const KvCache& cache,
                                                          const ContextOptions& copts);

// Speculation swept over several values (`bench`): the same flags, each taking a list.
struct SpecSweepFlags {
    std::vector<std::string> spec{"ngram"};
    std::vector<int> ks{2, 4, 8};
    std::vector<int> trees; // empty: each source's own
    std::string draft;
    std::vector<std::string> refs;
    bool adaptive = false;
};
// Returns --adaptive (bench adds --adaptive-only beside it).
CLI::Option* add_spec_sweep_flags(CLI::App& cmd, SpecSweepFlags& f);

// How much to generate and when to stop.
struct OutputFlags {
    int64_t n_predict = 128;
    std::vector<std::string> stop;
    bool ignore_eos = false;

    // max_tokens, stop strings (escapes resolved) and stop_at_eog, with `sampler`.
    GenerateOptions generate_options(const SamplerOptions& sampler) const;
};
// Which of the group's flags a subcommand takes: -n always.
enum OutputFlag : unsigned { kStop = 1, kIgnoreEos = 2 };
void add_output_flags(CLI::App& cmd, OutputFlags& f, unsigned which);

// "\n", "\t" and "\\" in a command-line string stand for newline, tab and backslash.
std::string unescape(const std::string& s);

// A prompt given on the command line or in a file.
struct PromptFlags {
    std::string prompt;
    std::string file;
    // The prompt text (read from --file, at most kMaxPromptFileBytes, when given).
    std::string text() const;
};
// Returns -p (bench makes it exclude --workload); `file`, when given, receives -f (excluding -p).
CLI::Option* add_prompt_flags(CLI::App& cmd, std::string& prompt, std::string* file);

// A conversation's system message and chat template.
struct ChatFlags {
    std::string system;        // an optional system message before the first user message
    std::string chat_template; // a built-in format name or, with @FILE, a template's text
    // The template override: the name or text given, or @FILE's contents; empty when not given.
    std::string template_text() const;
};
// `needs`: the flag they need (generate's --chat), or null. Returns --chat-template.
CLI::Option* add_chat_flags(CLI::App& cmd, ChatFlags& f, CLI::Option* needs, bool with_system = true);
// --chat-template-file: a file holding a template's text (tokenize, make-dummy).
CLI::Option* add_chat_template_file_flag(CLI::App& cmd, std::string& path);

// Workload files and the batch decoder's settings (batch, bench --concurrency).
struct WorkloadFlags {
    std::vector<std::string> workloads;
    int64_t items = 0; // first N items of each file (0: all)
    // Every file's items, in order. Throws what bench::load_workload throws.
    std::vector<bench::WorkItem> load() const;
};
// Returns --workload (batch makes it required, bench excludes -p with it).
CLI::Option* add_workload_flags(CLI::App& cmd, WorkloadFlags& f);

struct BatchingFlags {
    int64_t prefill_chunk = 64;
    int64_t pass_tokens = 0;
    bool cost_model = false;
    std::vector<double> pass_cost_ms; // --pass-cost FIXED_MS,PER_ROW_MS (empty: fitted)
    int64_t kv_budget_mib = 0;
    std::string kv_type = "auto"; // kv_type_of: auto = f16
    // The batch run's options from these flags, `sampler`, `max_tokens` and the model flags
    // (a draft loaded from --draft). Throws rwd::Error (argument), prefixed with `who`, on a
    // malformed --pass-cost or a negative budget.
    bench::BatchRunOptions batch_options(const char* who, const SamplerOptions& sampler, int64_t max_tokens) const;
};
// With --kv-type (bench: for every measurement, not only --concurrency's); `with_budget` adds
// --kv-budget-mib (batch).
void add_batching_flags(CLI::App& cmd, BatchingFlags& f, bool with_budget);
// --concurrency: one level (batch), or a list of levels each measured (bench), described by
// `bench_help` after the shared description.
void add_concurrency_flag(CLI::App& cmd, int& concurrency);
void add_concurrency_sweep_flag(CLI::App& cmd, std::vector<int>& levels, const std::string& bench_help);

} // namespace rwd::cli

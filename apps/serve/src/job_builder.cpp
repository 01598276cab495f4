// JobBuilder: prompts, sampling settings and guess sources of the requests. Source names map to
// the library's kinds through parse_source_kind; "none" is plain decoding.
#include "job_builder.h"

#include "prediction_counter.h"
#include "tool_grammar.h"
#include "rewind/chat_tools.h"
#include "rewind/error.h"

namespace rwd::serve {

namespace sp = rwd::speculate;

JobBuilder::JobBuilder(const ServerOptions& opts, std::shared_ptr<const Model> model, std::shared_ptr<const Model> draft,
                       std::shared_ptr<ThreadPool> pool, int64_t context)
    : opts_(opts), model_(std::move(model)), draft_(std::move(draft)), pool_(std::move(pool)),
      suffix_cache_(std::make_shared<sp::SuffixCache>()), context_(context),
      grammars_(std::make_unique<OutputGrammars>(model_->tokenizer())) {
    try {
        chat_format_ = resolve_chat_format(opts_.chat_template, model_->file().gguf());
    } catch (const Error& e) {
        chat_error_ = e.what();
    }
}

const ChatFormat& JobBuilder::chat_format() const {
    if (!chat_format_)
        throw ApiError(400, "chat completions need a chat template: " + chat_error_ + " (start the server with --chat-template NAME)",
                       "messages");
    return *chat_format_;
}

ChatOptions JobBuilder::chat_options(const ServeRequest& r) const {
    ChatOptions co;
    fill_token_texts(co, tokenizer());
    co.enable_thinking = r.enable_thinking;
    co.tools = r.tools;
    return co;
}

std::string JobBuilder::render_chat(const ServeRequest& r) const {
    const ChatFormat& f = chat_format();
    try {
        return format_chat(f, r.messages, chat_options(r));
    } catch (const Error& e) {
        throw ApiError(400, e.what(), "messages");
    }
}

std::vector<TokenId> JobBuilder::completion_ids(const ServeRequest& r) const {
    const Tokenizer& tok = tokenizer();
    if (!r.prompt_is_ids) return tok.encode(r.prompt_text);
    std::vector<TokenId> ids;
    for (size_t i = 0; i < r.prompt_ids.size(); ++i) {
        if (r.prompt_ids[i] >= tok.n_vocab())
            throw ApiError(400, "'prompt[" + std::to_string(i) + "]' is " + std::to_string(r.prompt_ids[i]) +
                                    ", outside the vocabulary of " + std::to_string(tok.n_vocab()) + " tokens",
                           "prompt");
        ids.push_back(static_cast<TokenId>(r.prompt_ids[i]));
    }
    return ids;
}

std::vector<TokenId> JobBuilder::prompt_of(const ServeRequest& r) const {
    if (r.endpoint != Endpoint::Chat) return completion_ids(r);
    const ChatFormat& f = chat_format();
    if (!r.tools.empty() && !f.qwen_tools) {
        const std::string name = chat_format_name(f);
        throw ApiError(400, "'tools' need a chat format with tool support (Qwen2.5's or Qwen3's); the server's" +
                                (name.empty() ? std::string() : " ('" + name + "')") + " has none",
                       "tools");
    }
    try {
        return tokenize_chat(tokenizer(), f, r.messages, chat_options(r));
    } catch (const Error& e) {
        throw ApiError(400, e.what(), "messages");
    }
}

JobBuilder::SourcePlan JobBuilder::plan_source(const ServeRequest& r) const {
    SourcePlan p;
    p.name = r.speculation.source.empty() ? opts_.spec : r.speculation.source;
    // The one draft check, here rather than at admission: before a stream has begun, the client
    // gets a 400 rather than an error event inside the stream.
    if (p.name == "draft" && !draft_)
        throw ApiError(400, "speculation.source 'draft' needs a server started with --draft", "speculation.source");
    p.references = r.speculation.references;
    if (r.prediction && !r.prediction->empty()) p.prediction = r.prediction;
    p.branches = r.speculation.tree > 0 ? r.speculation.tree : opts_.tree;
    return p;
}

std::shared_ptr<Job> JobBuilder::build(const ServeRequest& r) const {
    auto job = std::make_shared<Job>();
    job->endpoint = r.endpoint;
    job->prompt = prompt_of(r);
    GenerateOptions& g = job->generate;
    g.max_tokens = check_lengths(static_cast<int64_t>(job->prompt.size()), r.max_tokens, context_,
                                 r.endpoint == Endpoint::Chat ? "messages" : "prompt");
    set_sampling(r, g);
    g.stop_strings = r.stop;
    if (r.endpoint == Endpoint::Chat && !r.tools.empty() && r.tool_choice != ToolChoice::None)
        job->tool_format = chat_format();
    job->parallel_tool_calls = r.parallel_tool_calls;
    job->make_constraint = constraint_of(r);
    SourcePlan plan = plan_source(r);
    job->source = plan.name;
    job->k = r.speculation.k > 0 ? r.speculation.k : opts_.k;
    job->has_prediction = r.prediction.has_value();
    if (plan.prediction)
        job->prediction_tokens = static_cast<int64_t>(tokenizer().encode(*plan.prediction, AddBos::No).size());
    job->make_source = [this, plan = std::move(plan), hits = job->prediction_hits] { return make_source(plan, hits); };
    return job;
}

ConstraintMaker JobBuilder::constraint_of(const ServeRequest& r) const {
    // tool_choice auto (a response_format aside): free text, and each call, from its opening tag
    // on, held to the grammar of a forced call; parallel_tool_calls false: one call, then the end.
    if (r.endpoint == Endpoint::Chat && !r.tools.empty() && r.tool_choice == ToolChoice::Auto && r.format.kind == OutputKind::Text)
        return grammars_->compile_triggered({OutputKind::Grammar, tool_call_gbnf(r.tools, "", false), "tools"},
                                            std::string(kToolCallOpen), r.parallel_tool_calls ? 0 : 1);
    return grammars_->compile(output_format(r));
}

OutputFormat JobBuilder::output_format(const ServeRequest& r) const {
    if (r.tool_choice != ToolChoice::Required && r.tool_choice != ToolChoice::Function) return r.format;
    if (r.format.kind != OutputKind::Text)
        throw ApiError(400, "'" + r.format.param + "' cannot be combined with tool_choice 'required' or a named function",
                       r.format.param);
    const bool only = r.tool_choice == ToolChoice::Function;
    return {OutputKind::Grammar, tool_call_gbnf(r.tools, only ? r.tool_choice_name : "", r.parallel_tool_calls && !only),
            "tool_choice"};
}

void JobBuilder::set_sampling(const ServeRequest& r, GenerateOptions& g) const {
    g.sampler = opts_.sampling; // the server's defaults (its sampling flags), then the request's fields
    g.sampler.temperature = r.temperature.value_or(g.sampler.temperature);
    g.sampler.top_p = r.top_p.value_or(g.sampler.top_p);
    g.sampler.top_k = r.top_k.value_or(g.sampler.top_k);
    g.sampler.min_p = r.min_p.value_or(g.sampler.min_p);
    g.sampler.repeat_penalty = r.repeat_penalty.value_or(g.sampler.repeat_penalty);
    g.sampler.repeat_last_n = r.repeat_last_n.value_or(g.sampler.repeat_last_n);
    g.sampler.frequency_penalty = r.frequency_penalty.value_or(g.sampler.frequency_penalty);
    g.sampler.presence_penalty = r.presence_penalty.value_or(g.sampler.presence_penalty);
    g.sampler.seed = r.seed.value_or(g.sampler.seed);
    const int64_t n_vocab = tokenizer().n_vocab();
    for (const auto& [id, bias] : r.logit_bias) {
        if (id >= n_vocab)
            throw ApiError(400, "'logit_bias' names token " + std::to_string(id) + ", outside the vocabulary of " +
                                    std::to_string(n_vocab) + " tokens",
                           "logit_bias");
        g.sampler.logit_bias.emplace_back(static_cast<TokenId>(id), bias);
    }
    // The model's own distribution (raw log-softmax), as OpenAI reports and plain decoding gives.
    g.logprobs.enabled = r.logprobs;
    g.logprobs.top_n = r.top_logprobs;
}

sp::SourceSpec JobBuilder::spec_of(sp::SourceKind kind, const SourcePlan& plan) const {
    sp::SourceSpec s;
    s.kind = kind;
    s.branches = plan.branches;
    if (kind == sp::SourceKind::Suffix) s.suffix_cache = suffix_cache_;
    if (kind == sp::SourceKind::Draft || kind == sp::SourceKind::Auto) {
        s.draft = draft_; // Auto without a draft: ref and ngram only
        s.draft_options.context = ContextOptions{.n_threads = opts_.threads, .pool = pool_};
        s.draft_options.cache_type = opts_.kv_type;
    }
    return s;
}

std::unique_ptr<sp::GuessSource> JobBuilder::make_source(const SourcePlan& plan,
                                                         const std::shared_ptr<std::atomic<int64_t>>& hits) const {
    auto build = [&](const sp::SourceSpec& spec) { return sp::make_guess_source(spec, *model_, context_); };
    auto ref_of = [&](std::vector<std::string> docs) {
        sp::SourceSpec s = spec_of(sp::SourceKind::Ref, plan);
        s.references = std::move(docs);
        return s;
    };
    std::vector<std::unique_ptr<sp::GuessSource>> members;
    if (plan.prediction)
        members.push_back(std::make_unique<PredictionCounter>(build(ref_of({*plan.prediction})), hits));
    sp::SourceSpec named;
    const bool has_named = plan.name != "none";
    if (has_named) sp::parse_source_kind(plan.name, named);
    // "ref" and "auto" take the documents themselves; beside any other source they are a ref member.
    const bool own_refs = has_named && (named.kind == sp::SourceKind::Ref || named.kind == sp::SourceKind::Auto);
    if (!plan.references.empty() && !own_refs) members.push_back(build(ref_of(plan.references)));
    if (has_named && (named.kind != sp::SourceKind::Ref || !plan.references.empty())) {
        sp::SourceSpec s = spec_of(named.kind, plan);
        s.compose = named.compose;
        if (own_refs) s.references = plan.references;
        members.push_back(build(s));
    }
    if (members.empty()) return nullptr;
    if (members.size() == 1) return std::move(members[0]);
    return std::make_unique<sp::CompositeSource>(std::move(members), sp::ComposePolicy::Longest);
}

} // namespace rwd::serve

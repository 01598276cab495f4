// The mapping from a validated API request to a Job: the prompt (chat template or completion
// text or ids), the generation and sampling settings, and the guess source, built through the
// library's source factory with the request's prediction composed in.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "job.h"
#include "output_grammar.h"
#include "rewind/chat.h"
#include "rewind/kernels/thread_pool.h"
#include "rewind/model.h"
#include "rewind/serve/api.h"
#include "rewind/serve/server.h"
#include "rewind/speculate/source_factory.h"

namespace rwd::serve {

// Immutable once built (by Server::load()): build() and the rest are called from any HTTP worker
// at once. The SourceMaker a job carries points back here; the builder must outlive the jobs'
// admission (the scheduler stops first).
class JobBuilder {
public:
    // `context`: positions per request. `pool`: the target context's, shared with draft contexts.
    // Resolves the chat format (opts.chat_template, else the file's); without one, chat requests
    // are refused with the reason.
    JobBuilder(const ServerOptions& opts, std::shared_ptr<const Model> model, std::shared_ptr<const Model> draft,
               std::shared_ptr<ThreadPool> pool, int64_t context);

    const Tokenizer& tokenizer() const { return model_->tokenizer(); }
    int64_t context() const { return context_; }

    // The job answering `r`, not yet submitted. Throws ApiError (400) naming the field: no chat
    // template, a message the template refuses, a token id outside the vocabulary, lengths past
    // the context, a source the server cannot build (draft without --draft), a logit_bias id
    // outside the vocabulary, a schema keyword the engine lacks or a grammar that does not parse.
    std::shared_ptr<Job> build(const ServeRequest& r) const;
    // The text the chat template makes of r.messages (/apply-template). Throws ApiError (400).
    std::string render_chat(const ServeRequest& r) const;

private:
    // What a job's guess source is made of; resolved on the worker, built on the scheduler.
    struct SourcePlan {
        std::string name; // kSourceNames
        std::vector<std::string> references;
        std::optional<std::string> prediction;
        int branches = 0;
    };
    const ChatFormat& chat_format() const;
    ChatOptions chat_options(const ServeRequest& r) const;
    std::vector<TokenId> prompt_of(const ServeRequest& r) const;
    std::vector<TokenId> completion_ids(const ServeRequest& r) const;
    SourcePlan plan_source(const ServeRequest& r) const;
    speculate::SourceSpec spec_of(speculate::SourceKind kind, const SourcePlan& plan) const;
    std::unique_ptr<speculate::GuessSource> make_source(const SourcePlan& plan,
                                                        const std::shared_ptr<std::atomic<int64_t>>& hits) const;

    void set_sampling(const ServeRequest& r, GenerateOptions& g) const;
    // The request's format, or the forced tool call's grammar (tool_choice required / named).
    OutputFormat output_format(const ServeRequest& r) const;
    // The constraint of the answer: output_format's, or with tools under tool_choice auto the
    // call grammar triggered by the opening tag. Throws as build().
    ConstraintMaker constraint_of(const ServeRequest& r) const;

    const ServerOptions& opts_;
    std::shared_ptr<const Model> model_;
    std::shared_ptr<const Model> draft_; // null: no --draft
    std::shared_ptr<ThreadPool> pool_;
    std::shared_ptr<speculate::SuffixCache> suffix_cache_; // shared by every request's suffix source
    int64_t context_;
    std::optional<ChatFormat> chat_format_;
    std::string chat_error_; // why there is no chat format
    // Thread-safe itself: the one per server, so a repeated schema is compiled once.
    std::unique_ptr<OutputGrammars> grammars_;
};

} // namespace rwd::serve

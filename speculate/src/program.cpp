// Program: append() is Session::append_text; gen() compiles the constraint first (so a bad one
// changes nothing), runs plain or speculative decoding on the session, then applies the
// end-of-generation and stop-string rules of program.h to the session and the captured text.
#include "rewind/speculate/program.h"

#include <algorithm>

#include "rewind/speculate/speculative_session.h"

namespace rwd::speculate {
namespace {

// The generated text cut before the earliest stop string in it (all of it when none occurs).
std::string cut_at_stop(std::string text, const std::vector<std::string>& stops) {
    size_t cut = text.size();
    for (const std::string& s : stops)
        if (const size_t at = text.find(s); at != std::string::npos) cut = std::min(cut, at);
    text.resize(cut);
    return text;
}

} // namespace

Program::Program(Context& ctx, Session& session, GuessSource* source, ProgramOptions opts)
    : ctx_(ctx), session_(session), source_(source), opts_(opts),
      own_(opts.compiler ? nullptr : std::make_unique<ConstraintCompiler>(session.model().tokenizer())),
      compiler_(opts.compiler ? opts.compiler : own_.get()) {}

void Program::append(std::string_view text) { session_.append_text(ctx_, text); }

GenResult Program::gen(const GenSpec& spec) {
    const Tokenizer& tok = session_.model().tokenizer();
    const std::unique_ptr<TokenConstraint> constraint =
        compiler_->compile({.regex = spec.regex, .json_schema = spec.json_schema,
                           .json_whitespace = spec.json_whitespace, .grammar = spec.grammar});
    GenerateOptions go;
    go.max_tokens = spec.max_tokens;
    go.sampler = spec.sampler;
    go.stop_strings = spec.stop;
    go.stop_at_eog = spec.stop_at_eog;
    go.logprobs = spec.logprobs;
    // A finished constraint admits only the end token: stop after the token that finished it
    // rather than spend a pass deciding that token (the decoders stop both ways at the same token,
    // so plain and speculative decoding still agree).
    TokenConstraint* c = constraint.get();
    bool finished = false;
    TokenCallback on_token = spec.on_token;
    if (c)
        on_token = [c, &finished, &user = spec.on_token](TokenId t) {
            const bool go_on = user ? user(t) : true;
            finished = c->is_finished();
            return go_on && !finished;
        };

    const std::string before = session_.text();
    GenResult r;
    if (source_) {
        SpeculativeOptions so;
        so.generate = go;
        so.k = opts_.k;
        so.k_policy = opts_.k_policy;
        static_cast<SpeculativeResult&>(r) = generate_speculative(ctx_, session_, *source_, so, on_token, c);
    } else {
        static_cast<GenerateResult&>(r) = session_.generate(ctx_, go, on_token, c);
        r.stats.passes = r.stats.emitted = static_cast<int64_t>(r.tokens.size()); // one token a pass
        r.stats.prompt_seconds = r.prompt_seconds;
        r.stats.total_seconds = r.prompt_seconds + r.generate_seconds;
    }
    if (finished && r.stop == StopReason::Cancelled) r.stop = StopReason::EndOfGeneration;
    r.complete = !c || c->is_complete();
    // Appended text must not follow an end token: take it out of the session and the result.
    if (r.stop == StopReason::EndOfGeneration && !r.tokens.empty() && tok.is_eog(r.tokens.back())) {
        session_.truncate(static_cast<int64_t>(session_.tokens().size()) - 1);
        r.tokens.pop_back();
        if (r.logprobs.size() > r.tokens.size()) r.logprobs.pop_back();
    }
    const std::string after = session_.text();
    r.text = after.compare(0, before.size(), before) == 0 ? after.substr(before.size()) : tok.decode(r.tokens);
    if (r.stop == StopReason::StopString) r.text = cut_at_stop(std::move(r.text), spec.stop);
    return r;
}

} // namespace rwd::speculate

// Plain generation: run the uncached prompt suffix, then decode one token per forward pass,
// with the stop rules in StopChecker (shared with the speculative decoder).
#include "rewind/generate.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "rewind/error.h"

namespace rwd {

const char* stop_reason_name(StopReason r) {
    switch (r) {
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::EndOfGeneration: return "end_of_generation";
    case StopReason::StopString: return "stop_string";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Callback: return "callback";
    }
    return "unknown";
}

StopChecker::StopChecker(const GenerateOptions& opts, const Tokenizer& tok, int64_t capacity)
    : max_tokens_(opts.max_tokens), stop_strings_(opts.stop_strings), stop_at_eog_(opts.stop_at_eog), tok_(tok),
      capacity_(capacity) {
    if (max_tokens_ < 0) throw Error("generate: max_tokens must be >= 0, got " + std::to_string(max_tokens_));
    for (const std::string& s : stop_strings_) {
        if (s.empty()) throw Error("generate: a stop string must not be empty");
        max_stop_len_ = std::max(max_stop_len_, s.size());
    }
}

bool StopChecker::push(TokenId id, int64_t pos) {
    ++count_;
    bool hit_string = false;
    if (!stop_strings_.empty()) {
        const std::string piece = tok_.token_to_piece(id);
        tail_ += piece;
        for (const std::string& s : stop_strings_) {
            // Only a match that ends inside this token's piece is new.
            const size_t reach = piece.size() + s.size() - 1;
            const size_t from = tail_.size() > reach ? tail_.size() - reach : 0;
            if (tail_.find(s, from) != std::string::npos) hit_string = true;
        }
        if (tail_.size() >= max_stop_len_) tail_.erase(0, tail_.size() - (max_stop_len_ - 1));
    }
    if (stop_at_eog_ && tok_.is_eog(id)) reason_ = StopReason::EndOfGeneration;
    else if (hit_string) reason_ = StopReason::StopString;
    else if (count_ >= max_tokens_) reason_ = StopReason::MaxTokens;
    else if (pos + 1 >= capacity_) reason_ = StopReason::ContextFull;
    else return false;
    return true;
}

GenerateResult generate_plain(Context& ctx, KvCache& cache, const std::vector<TokenId>& prompt,
                              const GenerateOptions& opts, const TokenCallback& on_token) {
    using clock = std::chrono::steady_clock;
    const Model& model = ctx.model();
    const auto P = static_cast<int64_t>(prompt.size());
    const int64_t n0 = cache.size();
    if (P == 0) throw Error("generate: the prompt is empty");
    if (n0 >= P)
        throw Error(ErrorCode::state, "generate: the cache already holds " + std::to_string(n0) + " positions for a prompt of " +
                    std::to_string(P) + " tokens (at least the last prompt token must be run)");
    if (P > cache.capacity())
        throw Error(ErrorCode::capacity, "generate: the prompt of " + std::to_string(P) + " tokens does not fit the KV cache capacity " +
                    std::to_string(cache.capacity()));
    for (int64_t i = 0; i < P; ++i) {
        if (!model.tokenizer().valid(prompt[static_cast<size_t>(i)]) || prompt[static_cast<size_t>(i)] >= model.n_vocab())
            throw Error("generate: prompt token " + std::to_string(i) + " has id " +
                        std::to_string(prompt[static_cast<size_t>(i)]) + ", outside the vocabulary");
    }
    Sampler sampler(opts.sampler, model.n_vocab());
    StopChecker checker(opts, model.tokenizer(), cache.capacity());

    GenerateResult res;
    const std::span<const TokenId> pending(prompt.data() + n0, static_cast<size_t>(P - n0));
    const auto t0 = clock::now();
    if (opts.max_tokens == 0 || P == cache.capacity()) {
        // Nothing can be generated: run the prompt but its last token, which stays held back.
        if (pending.size() > 1) ctx.forward(cache, pending.first(pending.size() - 1), Logits::None);
        res.prompt_tokens = P - n0 - 1;
        res.prompt_seconds = std::chrono::duration<double>(clock::now() - t0).count();
        res.stop = opts.max_tokens == 0 ? StopReason::MaxTokens : StopReason::ContextFull;
        return res;
    }
    std::span<const float> logits = ctx.forward(cache, pending, Logits::Last);
    const auto t1 = clock::now();
    res.prompt_tokens = P - n0;
    res.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();

    std::vector<TokenId> history(prompt);
    history.reserve(static_cast<size_t>(std::min(P + opts.max_tokens, cache.capacity())));
    for (;;) {
        const auto pos = static_cast<int64_t>(history.size());
        const TokenId id = sampler.sample(logits.data(), pos, history);
        history.push_back(id);
        res.tokens.push_back(id);
        const bool stop = checker.push(id, pos);
        const bool go_on = on_token ? on_token(id) : true;
        if (stop) {
            res.stop = checker.reason();
            break;
        }
        if (!go_on) {
            res.stop = StopReason::Callback;
            break;
        }
        logits = ctx.forward(cache, std::span<const TokenId>(&id, 1), Logits::Last);
    }
    res.generate_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return res;
}

} // namespace rwd

// Plain generation: run the uncached prompt suffix, then decode one token per forward pass
// through DecodeState (the verification core every decoder shares), and the stop rules.
#include "rewind/generate.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "rewind/decode_state.h"
#include "rewind/error.h"

namespace rwd {

const char* stop_reason_name(StopReason r) {
    switch (r) {
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::EndOfGeneration: return "end_of_generation";
    case StopReason::StopString: return "stop_string";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Cancelled: return "cancelled";
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

void StopChecker::reset() {
    count_ = 0;
    tail_.clear();
    reason_ = StopReason::MaxTokens;
}

GenerateResult generate_plain(Context& ctx, KvCache& cache, const std::vector<TokenId>& prompt,
                              const GenerateOptions& opts, const TokenCallback& on_token,
                              TokenConstraint* constraint) {
    using clock = std::chrono::steady_clock;
    const auto P = static_cast<int64_t>(prompt.size());
    const int64_t n0 = cache.size();
    check_prompt(ctx.model(), prompt, n0, cache.capacity(), "generate");
    DecodeState seq(ctx.model(), opts, cache.capacity());
    seq.start(prompt, constraint);

    GenerateResult res;
    const std::span<const TokenId> pending(prompt.data() + n0, static_cast<size_t>(P - n0));
    const auto t0 = clock::now();
    if (seq.nothing_to_generate(P)) {
        // Nothing can be generated: run the prompt but its last token, which stays held back.
        if (pending.size() > 1) ctx.forward(cache, pending.first(pending.size() - 1), Logits::None);
        res.prompt_tokens = P - n0 - 1;
        res.prompt_seconds = std::chrono::duration<double>(clock::now() - t0).count();
        res.stop = seq.stop();
        return res;
    }
    // The whole uncached prompt in one call (Numerics::LlamaCpp's logits depend on the pass
    // size, as llama.cpp's do): its last row is judged as a pass of the last prompt token alone.
    std::span<const float> logits = ctx.forward(cache, pending, Logits::Last);
    const auto t1 = clock::now();
    res.prompt_tokens = P - n0;
    res.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    for (int64_t pc = P - 1;;) {
        seq.begin_pass(pc, {}, {}, {}, 0);
        seq.judge(logits, on_token);
        if (seq.done()) break;
        const TokenId id = seq.tokens().back();
        pc = cache.size();
        logits = ctx.forward(cache, std::span<const TokenId>(&id, 1), Logits::Last);
    }
    res.tokens.assign(seq.generated().begin(), seq.generated().end());
    res.logprobs.assign(seq.logprobs().begin(), seq.logprobs().end());
    res.stop = seq.stop();
    res.generate_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return res;
}

} // namespace rwd

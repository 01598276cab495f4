// One completion request as the HTTP worker answering it and the scheduler decoding it share it:
// what to decode (fixed before it is queued) and what has been decoded so far (under its mutex).
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "rewind/chat.h"
#include "rewind/generate.h"
#include "rewind/serve/api.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/guess_source.h"
#include "output_grammar.h"

namespace rwd::serve {

using Clock = std::chrono::steady_clock;

// Builds a job's guess source (null: plain decoding). Called once, on the scheduler thread, when
// the job is admitted (a draft source's KV is only allocated for a running request). Throws
// ApiError or rwd::Error; the job then fails with that error.
using SourceMaker = std::function<std::unique_ptr<speculate::GuessSource>()>;

struct Job {
    // ---- Set by the worker before Scheduler::submit(); read-only afterwards (the queue's mutex
    // orders the writes before the scheduler's reads).
    Endpoint endpoint = Endpoint::Chat;
    std::vector<TokenId> prompt;
    GenerateOptions generate;
    std::string source;      // the guess source's name (kSourceNames), for the metrics
    SourceMaker make_source; // empty: plain decoding
    int k = 8;               // guesses per pass
    ConstraintMaker make_constraint; // empty: the answer is free (response_format text)
    bool has_prediction = false;
    int64_t prediction_tokens = 0; // the prediction's length in tokens
    // Chat with tools and tool_choice "auto": the format whose <tool_call> blocks are read out of
    // the answer into tool_calls; empty: the answer is text.
    std::optional<ChatFormat> tool_format;
    bool parallel_tool_calls = true;
    // n > 1: the request's first choice, whose prompt this one shares. The scheduler admits this
    // job only once the leader has its first token (its cache then holds the prompt), so the
    // batch decoder copies the prompt's KV from it instead of computing it again.
    std::shared_ptr<Job> leader;
    Clock::time_point enqueued = Clock::now();

    // ---- Shared without a lock.
    std::atomic<bool> cancel{false}; // set by the worker (its client left); the scheduler cancels
                                     // the request at its next pass
    // Completion tokens the prediction foresaw: added to by the prediction's source on the
    // scheduler thread, read by the worker once `done`.
    std::shared_ptr<std::atomic<int64_t>> prediction_hits = std::make_shared<std::atomic<int64_t>>(0);

    // ---- Written by the scheduler under m (notifying cv); the worker waits on cv.
    std::mutex m;
    std::condition_variable cv;
    std::vector<TokenId> tokens; // generated so far
    std::vector<TokenLogprob> logprobs; // [tokens] when generate.logprobs.enabled, else empty
    bool done = false;
    std::optional<ApiError> error; // set with done when the request failed
    speculate::BatchResult result; // once done (without its cache)
    int64_t cached_tokens = 0;     // prompt positions reused from a cache
    double ttft_seconds = -1;      // enqueue to first token; < 0: none yet

    // OpenAI's accepted_prediction_tokens (0 without a prediction). Once done.
    int64_t accepted_prediction_tokens() const {
        return has_prediction ? std::min<int64_t>(*prediction_hits, prediction_tokens) : 0;
    }
};

} // namespace rwd::serve

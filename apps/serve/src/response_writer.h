// OpenAI's response bodies for a job: one JSON answer once it has ended, or server-sent events
// (chunks, then usage, then [DONE]) as it decodes. Finished jobs are counted into the metrics here.
#pragma once
#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "job.h"
#include "metrics.h"
#include "text_stream.h"
#include "tool_stream.h"

namespace rwd::serve {

// What every body or chunk of one response repeats.
struct ResponseHeader {
    Endpoint endpoint = Endpoint::Chat;
    std::string id;      // "chatcmpl-N" or "cmpl-N"
    int64_t created = 0; // Unix seconds
    std::string model;
};

// The OpenAI error body of `e` as res, with its status.
void send_error(httplib::Response& res, const ApiError& e);

// Waits for every choice's job to end, then writes the answer (or the first error) into `res`:
// choice i from jobs[i]. `tok` decodes them, `stop` cuts them.
void write_answer(httplib::Response& res, const std::vector<std::shared_ptr<Job>>& jobs, const ResponseHeader& h,
                  const Tokenizer& tok, const std::vector<std::string>& stop, Metrics& metrics);

// One streamed response of one or more choices (chunks carry the choice's index). cpp-httplib
// calls step() from the one worker thread serving the connection, over and over until it returns
// false or the stream is done.
class SseWriter {
public:
    // `jobs`: choice i's job at i (>= 1). `wake` tells the scheduler that the jobs' cancel flags
    // were set. `tok` and `metrics` must outlive the stream.
    SseWriter(std::vector<std::shared_ptr<Job>> jobs, ResponseHeader h, const Tokenizer& tok,
              const std::vector<std::string>& stop, bool include_usage, Metrics& metrics, std::function<void()> wake);
    // Waits up to 200 ms for new tokens and writes the text now safe to send, per choice; as each
    // choice ends, its last chunk with finish_reason; after the last, the usage chunk if asked,
    // and [DONE]. False: the client is gone (the jobs are cancelled, freeing their slots at the
    // next pass).
    bool step(httplib::DataSink& sink);
    // The connection ended before the stream did: cancels the jobs.
    void abandon();

private:
    using json = nlohmann::ordered_json;
    // One choice's progress through the stream.
    struct Choice {
        Choice(std::shared_ptr<Job> j, const Tokenizer& tok, const std::vector<std::string>& stop) : job(std::move(j)), text(tok, stop) {}
        std::shared_ptr<Job> job;
        TextStream text;
        std::optional<ToolCallStream> tools; // a request whose answer is read for tool calls
        size_t sent_tokens = 0;              // job tokens already decoded into text
        bool first = true;                   // no chunk written yet
        bool ended = false;                  // its finish_reason chunk written
        std::vector<TokenLogprob> pending_lp; // logprobs of decoded tokens not yet in a chunk
        size_t lp_offset = 0;                 // completions' text_offset of the next logprob
    };
    bool write(httplib::DataSink& sink, const json& j);
    bool write_done(httplib::DataSink& sink);
    // 0: the choice goes on; 1: it ended; -1: the client is gone; 2: it failed (error written).
    int step_choice(httplib::DataSink& sink, size_t i);
    bool write_choice_end(httplib::DataSink& sink, size_t i);
    bool write_delta(httplib::DataSink& sink, size_t i, json delta);
    void attach_logprobs(json& choice_json, Choice& c);

    std::vector<std::unique_ptr<Choice>> choices_;
    ResponseHeader header_;
    bool include_usage_;
    Metrics& metrics_;
    std::function<void()> wake_;
    const Tokenizer* tok_;
};

// The logprobs of `lps` as a choice carries them: chat's {"content": [...]} or the completions'
// legacy {tokens, token_logprobs, top_logprobs, text_offset} (offsets from *offset, advanced).
nlohmann::ordered_json logprobs_json(Endpoint ep, std::span<const TokenLogprob> lps, const Tokenizer& tok, size_t* offset);

// Makes `res` the event stream `writer` writes; `streams` counts the streams not yet ended.
void start_stream(httplib::Response& res, std::shared_ptr<SseWriter> writer, std::atomic<int64_t>& streams);

} // namespace rwd::serve

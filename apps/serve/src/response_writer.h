// OpenAI's response bodies for a job: one JSON answer once it has ended, or server-sent events
// (chunks, then usage, then [DONE]) as it decodes. Finished jobs are counted into the metrics here.
#pragma once
#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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

// Waits for `job` to end, then writes its answer (or its error) into `res`. `tok` decodes it,
// `stop` cuts it.
void write_answer(httplib::Response& res, Job& job, const ResponseHeader& h, const Tokenizer& tok,
                  std::vector<std::string> stop, Metrics& metrics);

// One streamed response. cpp-httplib calls step() from the one worker thread serving the
// connection, over and over until it returns false or the stream is done.
class SseWriter {
public:
    // `wake` tells the scheduler that the job's cancel flag was set. `tok` and `metrics` must
    // outlive the stream.
    SseWriter(std::shared_ptr<Job> job, ResponseHeader h, const Tokenizer& tok, std::vector<std::string> stop,
              bool include_usage, Metrics& metrics, std::function<void()> wake);
    // Waits up to 200 ms for new tokens and writes the text now safe to send; at the end, the
    // last chunk with finish_reason, the usage chunk if asked, and [DONE]. False: the client is
    // gone (the job is cancelled, freeing its slot at the next pass).
    bool step(httplib::DataSink& sink);
    // The connection ended before the stream did: cancels the job.
    void abandon();

private:
    using json = nlohmann::ordered_json;
    bool write(httplib::DataSink& sink, const json& j);
    bool write_done(httplib::DataSink& sink);
    bool write_end(httplib::DataSink& sink);
    bool write_delta(httplib::DataSink& sink, json delta);

    std::shared_ptr<Job> job_;
    ResponseHeader header_;
    TextStream text_;
    std::optional<ToolCallStream> tools_; // a request whose answer is read for tool calls
    bool include_usage_;
    Metrics& metrics_;
    std::function<void()> wake_;
    size_t sent_tokens_ = 0; // job tokens already decoded into text_
    bool first_ = true;      // no chunk written yet
};

// Makes `res` the event stream `writer` writes; `streams` counts the streams not yet ended.
void start_stream(httplib::Response& res, std::shared_ptr<SseWriter> writer, std::atomic<int64_t>& streams);

} // namespace rwd::serve

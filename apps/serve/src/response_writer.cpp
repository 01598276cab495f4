// Response bodies: the envelope, choices and usage of OpenAI's chat and text completions, whole
// or as chunks of server-sent events.
#include "response_writer.h"

#include <optional>

#include "rewind/version.h"

namespace rwd::serve {

namespace sp = rwd::speculate;
using json = nlohmann::ordered_json;

namespace {

const char* finish_reason(const sp::BatchResult& r, bool tool_calls = false) {
    if (tool_calls) return "tool_calls";
    switch (r.stop) {
    case StopReason::MaxTokens:
    case StopReason::ContextFull: return "length";
    default: return "stop";
    }
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json envelope(const ResponseHeader& h, bool chunk) {
    json j;
    j["id"] = h.id;
    j["object"] = h.endpoint == Endpoint::Chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    j["created"] = h.created;
    j["model"] = h.model;
    j["system_fingerprint"] = std::string("rewind-") + REWIND_VERSION_STRING;
    return j;
}

// One choice: a chat message or delta, or a completion's text.
json choice(Endpoint ep, const std::string& text, const char* finish, bool chunk, bool first) {
    json c;
    c["index"] = 0;
    if (ep == Endpoint::Chat) {
        if (chunk) {
            json d = json::object();
            if (first) d["role"] = "assistant";
            if (!text.empty() || first) d["content"] = text;
            c["delta"] = d;
        } else {
            c["message"] = {{"role", "assistant"}, {"content", text}};
        }
    } else {
        c["text"] = text;
    }
    c["logprobs"] = nullptr;
    c["finish_reason"] = finish ? json(finish) : json(nullptr);
    return c;
}

// "call_N_": the ids of the calls in response "chatcmpl-N" (then "call_N_0", "call_N_1", ...).
std::string call_id_prefix(const ResponseHeader& h) { return "call_" + h.id.substr(h.id.find('-') + 1) + "_"; }

// tool_calls as OpenAI writes them; a chunk's carry their index.
json tool_calls_json(const std::vector<ChatToolCall>& calls, bool chunk) {
    json a = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        json c;
        if (chunk) c["index"] = i;
        c["id"] = calls[i].id;
        c["type"] = "function";
        c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
        a.push_back(std::move(c));
    }
    return a;
}

// A whole chat answer's message: content null when the answer is calls only.
json message_of(const ParsedToolCalls& p) {
    json m = {{"role", "assistant"}};
    m["content"] = p.calls.empty() || !p.content.empty() ? json(p.content) : json(nullptr);
    if (!p.calls.empty()) m["tool_calls"] = tool_calls_json(p.calls, false);
    return m;
}

json usage_of(const Job& job) {
    const auto completion = static_cast<int64_t>(job.result.tokens.size());
    const auto prompt = static_cast<int64_t>(job.prompt.size());
    json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
    u["prompt_tokens_details"] = {{"cached_tokens", job.cached_tokens}};
    const int64_t accepted = job.accepted_prediction_tokens();
    u["completion_tokens_details"] = {{"reasoning_tokens", 0},
                                      {"accepted_prediction_tokens", accepted},
                                      {"rejected_prediction_tokens", job.has_prediction ? job.prediction_tokens - accepted : 0}};
    return u;
}

void record_finished(Metrics& metrics, const Job& job) {
    const int64_t accepted = job.accepted_prediction_tokens();
    const auto n = static_cast<int64_t>(job.result.tokens.size());
    const sp::BatchResult& r = job.result;
    metrics.add_request(static_cast<int64_t>(job.prompt.size()), job.cached_tokens, n, accepted,
                        job.has_prediction ? job.prediction_tokens - accepted : 0, job.source, r.stats.proposed,
                        r.stats.accepted, job.ttft_seconds,
                        n > 1 ? (r.latency_seconds - r.queue_to_first_token_seconds) / static_cast<double>(n - 1) : -1);
}

} // namespace

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(error_body(e), "application/json");
}

void write_answer(httplib::Response& res, Job& job, const ResponseHeader& h, const Tokenizer& tok,
                  std::vector<std::string> stop, Metrics& metrics) {
    std::unique_lock lk(job.m);
    job.cv.wait(lk, [&] { return job.done; });
    if (job.error) return send_error(res, *job.error);
    record_finished(metrics, job);
    TextStream ts(tok, std::move(stop));
    const std::string text = ts.push(job.result.tokens, true);
    json j = envelope(h, false);
    json c = choice(h.endpoint, text, finish_reason(job.result), false, false);
    if (job.tool_format) {
        const ParsedToolCalls p = split_tool_calls(*job.tool_format, text, call_id_prefix(h), job.parallel_tool_calls);
        c["message"] = message_of(p);
        c["finish_reason"] = finish_reason(job.result, !p.calls.empty());
    }
    j["choices"] = json::array({std::move(c)});
    j["usage"] = usage_of(job);
    res.set_content(dump(j), "application/json");
}

SseWriter::SseWriter(std::shared_ptr<Job> job, ResponseHeader h, const Tokenizer& tok, std::vector<std::string> stop,
                     bool include_usage, Metrics& metrics, std::function<void()> wake)
    : job_(std::move(job)), header_(std::move(h)), text_(tok, std::move(stop)), include_usage_(include_usage),
      metrics_(metrics), wake_(std::move(wake)) {
    if (job_->tool_format) tools_.emplace(*job_->tool_format, call_id_prefix(header_), job_->parallel_tool_calls);
}

bool SseWriter::write_delta(httplib::DataSink& sink, json delta) {
    json j = envelope(header_, true);
    j["choices"] = json::array({choice(header_.endpoint, "", nullptr, true, false)});
    j["choices"][0]["delta"] = std::move(delta);
    return write(sink, j);
}

bool SseWriter::write(httplib::DataSink& sink, const json& j) {
    const std::string s = "data: " + dump(j) + "\n\n";
    return sink.write(s.data(), s.size());
}

bool SseWriter::write_done(httplib::DataSink& sink) {
    static const std::string kDone = "data: [DONE]\n\n";
    sink.write(kDone.data(), kDone.size());
    sink.done();
    return true;
}

void SseWriter::abandon() {
    job_->cancel = true;
    wake_();
}

bool SseWriter::step(httplib::DataSink& sink) {
    std::vector<TokenId> fresh;
    bool done = false;
    std::optional<ApiError> err;
    {
        std::unique_lock lk(job_->m);
        job_->cv.wait_for(lk, std::chrono::milliseconds(200), [&] { return job_->done || job_->tokens.size() > sent_tokens_; });
        fresh.assign(job_->tokens.begin() + static_cast<std::ptrdiff_t>(sent_tokens_), job_->tokens.end());
        sent_tokens_ = job_->tokens.size();
        done = job_->done;
        err = job_->error;
    }
    if (err) {
        write(sink, json{{"error", json::parse(error_body(*err))["error"]}});
        return write_done(sink);
    }
    std::string text = text_.push(fresh, done);
    if (tools_) text = tools_->push(text);
    if (!text.empty() || (first_ && header_.endpoint == Endpoint::Chat)) {
        json j = envelope(header_, true);
        j["choices"] = json::array({choice(header_.endpoint, text, nullptr, true, first_)});
        // With tools the first chunk says no content yet: the answer may be calls only (content null).
        if (tools_ && text.empty()) j["choices"][0]["delta"].erase("content");
        first_ = false;
        if (!write(sink, j)) {
            abandon(); // the client is gone: free its slot and KV at the next pass
            return false;
        }
    }
    if (done) return write_end(sink);
    if (fresh.empty() && !sink.is_writable()) {
        abandon();
        return false;
    }
    return true;
}

bool SseWriter::write_end(httplib::DataSink& sink) {
    // done was read under the job's mutex: what the scheduler wrote before it is visible.
    record_finished(metrics_, *job_);
    bool calls = false;
    if (tools_) {
        // The rest of the content, then each call whole in one chunk (id, name, arguments).
        const ParsedToolCalls p = tools_->finish();
        if (!p.content.empty()) write_delta(sink, json{{"content", p.content}});
        for (size_t i = 0; i < p.calls.size(); ++i) {
            json call = tool_calls_json({p.calls[i]}, true);
            call[0]["index"] = i;
            write_delta(sink, json{{"tool_calls", std::move(call)}});
        }
        calls = !p.calls.empty();
    }
    json j = envelope(header_, true);
    j["choices"] = json::array({choice(header_.endpoint, "", finish_reason(job_->result, calls), true, false)});
    if (header_.endpoint == Endpoint::Chat) j["choices"][0]["delta"] = json::object();
    write(sink, j);
    if (include_usage_) {
        json u = envelope(header_, true);
        u["choices"] = json::array();
        u["usage"] = usage_of(*job_);
        write(sink, u);
    }
    return write_done(sink);
}

void start_stream(httplib::Response& res, std::shared_ptr<SseWriter> writer, std::atomic<int64_t>& streams) {
    res.set_header("Cache-Control", "no-cache");
    ++streams;
    res.set_chunked_content_provider(
        "text/event-stream", [writer](size_t, httplib::DataSink& sink) { return writer->step(sink); },
        [writer, &streams](bool success) {
            if (!success) writer->abandon();
            --streams;
        });
}

} // namespace rwd::serve

// Response bodies: the envelope, choices and usage of OpenAI's chat and text completions, whole
// or as chunks of server-sent events.
#include "response_writer.h"

#include <cmath>
#include <optional>
#include <span>

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
json choice(Endpoint ep, const std::string& text, const char* finish, bool chunk, bool first, size_t index = 0) {
    json c;
    c["index"] = index;
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

// One token's text and bytes as OpenAI's logprobs entries carry them.
json token_entry(const Tokenizer& tok, TokenId id, float logprob) {
    const std::string piece = tok.token_to_piece(id, true);
    json b = json::array();
    for (unsigned char ch : piece) b.push_back(static_cast<int>(ch));
    return {{"token", piece}, {"logprob", logprob}, {"bytes", std::move(b)}};
}

} // namespace

// Chat: {"content": [{token, logprob, bytes, top_logprobs}]}. Completions (the legacy form):
// {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}, offsets counted from
// `*offset` (advanced). A -inf logprob (a token the constraint forbade) is written as -9999, as
// JSON has no infinity.
json logprobs_json(Endpoint ep, std::span<const TokenLogprob> lps, const Tokenizer& tok, size_t* offset) {
    auto finite = [](float v) { return std::isfinite(v) ? v : -9999.0f; };
    if (ep == Endpoint::Chat) {
        json content = json::array();
        for (const TokenLogprob& lp : lps) {
            json e = token_entry(tok, lp.token, finite(lp.logprob));
            json top = json::array();
            for (const TopLogprob& t : lp.alternatives()) top.push_back(token_entry(tok, t.token, finite(t.logprob)));
            e["top_logprobs"] = std::move(top);
            content.push_back(std::move(e));
        }
        return {{"content", std::move(content)}, {"refusal", nullptr}};
    }
    json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
    for (const TokenLogprob& lp : lps) {
        const std::string piece = tok.token_to_piece(lp.token, true);
        tokens.push_back(piece);
        values.push_back(finite(lp.logprob));
        json top = json::object();
        for (const TopLogprob& t : lp.alternatives()) top[tok.token_to_piece(t.token, true)] = finite(t.logprob);
        tops.push_back(std::move(top));
        offsets.push_back(*offset);
        *offset += piece.size();
    }
    return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(values)}, {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offsets)}};
}

namespace {

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

// The prompt once (the choices share it), the completions of every choice summed.
json usage_of(const std::vector<const Job*>& jobs) {
    const Job& first = *jobs.front();
    int64_t completion = 0, accepted = 0, rejected = 0;
    for (const Job* job : jobs) {
        completion += static_cast<int64_t>(job->result.tokens.size());
        accepted += job->accepted_prediction_tokens();
        rejected += job->has_prediction ? job->prediction_tokens - job->accepted_prediction_tokens() : 0;
    }
    const auto prompt = static_cast<int64_t>(first.prompt.size());
    json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
    u["prompt_tokens_details"] = {{"cached_tokens", first.cached_tokens}};
    u["completion_tokens_details"] = {
        {"reasoning_tokens", 0}, {"accepted_prediction_tokens", accepted}, {"rejected_prediction_tokens", rejected}};
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
    if (r.stats.forced_proposed > 0) metrics.add_forced(job.source, r.stats.forced_proposed, r.stats.forced_accepted);
}

} // namespace

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(error_body(e), "application/json");
}

// One finished job's choice of a whole answer.
json answer_choice(const Job& job, const ResponseHeader& h, const Tokenizer& tok, const std::vector<std::string>& stop,
                   size_t index) {
    TextStream ts(tok, stop);
    const std::string text = ts.push(job.result.tokens, true);
    json c = choice(h.endpoint, text, finish_reason(job.result), false, false, index);
    if (job.generate.logprobs.enabled) {
        size_t offset = 0;
        c["logprobs"] = logprobs_json(h.endpoint, job.result.logprobs, tok, &offset);
    }
    if (job.tool_format) {
        const std::string prefix = call_id_prefix(h) + (index > 0 ? std::to_string(index) + "_" : "");
        const ParsedToolCalls p = split_tool_calls(*job.tool_format, text, prefix, job.parallel_tool_calls);
        c["message"] = message_of(p);
        c["finish_reason"] = finish_reason(job.result, !p.calls.empty());
    }
    return c;
}

void write_answer(httplib::Response& res, const std::vector<std::shared_ptr<Job>>& jobs, const ResponseHeader& h,
                  const Tokenizer& tok, const std::vector<std::string>& stop, Metrics& metrics) {
    json choices = json::array();
    std::vector<const Job*> done;
    std::optional<ApiError> err;
    for (size_t i = 0; i < jobs.size(); ++i) {
        Job& job = *jobs[i];
        std::unique_lock lk(job.m);
        job.cv.wait(lk, [&] { return job.done; });
        if (job.error) {
            if (!err) err = job.error;
            continue;
        }
        record_finished(metrics, job);
        choices.push_back(answer_choice(job, h, tok, stop, i));
        done.push_back(&job);
    }
    if (err) return send_error(res, *err);
    json j = envelope(h, false);
    j["choices"] = std::move(choices);
    j["usage"] = usage_of(done);
    res.set_content(dump(j), "application/json");
}

SseWriter::SseWriter(std::vector<std::shared_ptr<Job>> jobs, ResponseHeader h, const Tokenizer& tok,
                     const std::vector<std::string>& stop, bool include_usage, Metrics& metrics, std::function<void()> wake)
    : header_(std::move(h)), include_usage_(include_usage), metrics_(metrics), wake_(std::move(wake)), tok_(&tok) {
    for (size_t i = 0; i < jobs.size(); ++i) {
        auto c = std::make_unique<Choice>(std::move(jobs[i]), tok, stop);
        if (c->job->tool_format)
            c->tools.emplace(*c->job->tool_format, call_id_prefix(header_) + (i > 0 ? std::to_string(i) + "_" : ""),
                             c->job->parallel_tool_calls);
        choices_.push_back(std::move(c));
    }
}

bool SseWriter::write(httplib::DataSink& sink, const json& j) {
    const std::string s = "data: " + dump(j) + "\n\n";
    return sink.write(s.data(), s.size());
}

bool SseWriter::write_delta(httplib::DataSink& sink, size_t i, json delta) {
    json j = envelope(header_, true);
    j["choices"] = json::array({choice(header_.endpoint, "", nullptr, true, false, i)});
    j["choices"][0]["delta"] = std::move(delta);
    return write(sink, j);
}

bool SseWriter::write_done(httplib::DataSink& sink) {
    static const std::string kDone = "data: [DONE]\n\n";
    sink.write(kDone.data(), kDone.size());
    sink.done();
    return true;
}

void SseWriter::abandon() {
    for (const auto& c : choices_) c->job->cancel = true;
    wake_();
}

int SseWriter::step_choice(httplib::DataSink& sink, size_t i) {
    Choice& c = *choices_[i];
    std::vector<TokenId> fresh;
    bool done = false;
    std::optional<ApiError> err;
    {
        std::lock_guard lk(c.job->m);
        fresh.assign(c.job->tokens.begin() + static_cast<std::ptrdiff_t>(c.sent_tokens), c.job->tokens.end());
        if (c.job->logprobs.size() > c.sent_tokens)
            c.pending_lp.insert(c.pending_lp.end(), c.job->logprobs.begin() + static_cast<std::ptrdiff_t>(c.sent_tokens),
                                c.job->logprobs.end());
        c.sent_tokens = c.job->tokens.size();
        done = c.job->done;
        err = c.job->error;
    }
    if (err) {
        write(sink, json{{"error", json::parse(error_body(*err))["error"]}});
        return 2;
    }
    std::string text = c.text.push(fresh, done);
    if (c.tools) text = c.tools->push(text);
    if (!text.empty() || (c.first && header_.endpoint == Endpoint::Chat)) {
        json j = envelope(header_, true);
        j["choices"] = json::array({choice(header_.endpoint, text, nullptr, true, c.first, i)});
        // With tools the first chunk says no content yet: the answer may be calls only (content null).
        if (c.tools && text.empty()) j["choices"][0]["delta"].erase("content");
        attach_logprobs(j["choices"][0], c);
        c.first = false;
        if (!write(sink, j)) return -1;
    }
    if (!done) return 0;
    write_choice_end(sink, i);
    return 1;
}

bool SseWriter::step(httplib::DataSink& sink) {
    // Wait on the first choice still going: the choices decode in the same passes.
    for (const auto& c : choices_) {
        if (c->ended) continue;
        std::unique_lock lk(c->job->m);
        c->job->cv.wait_for(lk, std::chrono::milliseconds(200),
                            [&] { return c->job->done || c->job->tokens.size() > c->sent_tokens; });
        break;
    }
    bool any_fresh = false, all_ended = true;
    for (size_t i = 0; i < choices_.size(); ++i) {
        if (choices_[i]->ended) continue;
        const size_t before = choices_[i]->sent_tokens;
        const int r = step_choice(sink, i);
        if (r == 2) {
            abandon(); // one choice failed: the others end too
            return write_done(sink);
        }
        if (r < 0) {
            abandon(); // the client is gone: free the slots and KV at the next pass
            return false;
        }
        choices_[i]->ended = r == 1;
        any_fresh = any_fresh || choices_[i]->sent_tokens > before;
        all_ended = all_ended && choices_[i]->ended;
    }
    if (all_ended) {
        if (include_usage_) {
            std::vector<const Job*> jobs;
            for (const auto& c : choices_) jobs.push_back(c->job.get());
            json u = envelope(header_, true);
            u["choices"] = json::array();
            u["usage"] = usage_of(jobs);
            write(sink, u);
        }
        return write_done(sink);
    }
    if (!any_fresh && !sink.is_writable()) {
        abandon();
        return false;
    }
    return true;
}

bool SseWriter::write_choice_end(httplib::DataSink& sink, size_t i) {
    Choice& c = *choices_[i];
    // done was read under the job's mutex: what the scheduler wrote before it is visible.
    record_finished(metrics_, *c.job);
    bool calls = false;
    if (c.tools) {
        // The rest of the content, then each call whole in one chunk (id, name, arguments).
        const ParsedToolCalls p = c.tools->finish();
        if (!p.content.empty()) write_delta(sink, i, json{{"content", p.content}});
        for (size_t k = 0; k < p.calls.size(); ++k) {
            json call = tool_calls_json({p.calls[k]}, true);
            call[0]["index"] = k;
            write_delta(sink, i, json{{"tool_calls", std::move(call)}});
        }
        calls = !p.calls.empty();
    }
    json j = envelope(header_, true);
    j["choices"] = json::array({choice(header_.endpoint, "", finish_reason(c.job->result, calls), true, false, i)});
    if (header_.endpoint == Endpoint::Chat) j["choices"][0]["delta"] = json::object();
    attach_logprobs(j["choices"][0], c);
    return write(sink, j);
}

void SseWriter::attach_logprobs(json& choice_json, Choice& c) {
    // A chunk carries the logprobs of the tokens decoded since the last chunk: they reassemble to
    // the whole answer's, even where a chunk's text was held back (a possible stop string).
    if (!c.job->generate.logprobs.enabled || c.pending_lp.empty()) return;
    choice_json["logprobs"] = logprobs_json(header_.endpoint, c.pending_lp, *tok_, &c.lp_offset);
    c.pending_lp.clear();
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

// rewind serve's HTTP front (cpp-httplib) and scheduler: HTTP workers parse, validate, tokenize
// and enqueue; the one scheduler thread admits requests into the BatchDecoder, runs its passes,
// publishes each request's new tokens to the worker streaming it, and keeps finished requests'
// caches in an LRU prefix cache so that a later request sharing their prefix skips recomputing it.
#include "rewind/serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "metrics.h"
#include "rewind/chat.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/model.h"
#include "rewind/serve/api.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/composite_source.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/version.h"

namespace rwd::serve {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
namespace sp = rwd::speculate;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Wraps the prediction's reference source and counts, at each accept(), how many of its last
// proposal's tokens the sequence now holds (following the tree down along the accepted tokens):
// the completion tokens the prediction foresaw, OpenAI's accepted_prediction_tokens. Counted
// whether or not the composite chose this member's proposal: a token that appeared where the
// prediction put it was predicted either way.
class PredictionCounter final : public sp::GuessSource {
public:
    PredictionCounter(std::unique_ptr<sp::GuessSource> inner, std::shared_ptr<std::atomic<int64_t>> hits)
        : inner_(std::move(inner)), hits_(std::move(hits)) {}
    std::string_view name() const override { return inner_->name(); }
    void reset(const sp::GenerationStart& start) override {
        last_.clear();
        inner_->reset(start);
    }
    void propose(std::span<const TokenId> context, int k, sp::Proposal& out) override {
        inner_->propose(context, k, out);
        last_ = out;
        base_ = context.size();
    }
    void accept(std::span<const TokenId> context) override {
        int32_t node = -1;
        int64_t n = 0;
        for (size_t pos = base_; pos < context.size(); ++pos) {
            int32_t next = -2;
            for (size_t i = 0; i < last_.tokens.size(); ++i)
                if (last_.parent(i) == node && last_.tokens[i] == context[pos]) {
                    next = static_cast<int32_t>(i);
                    break;
                }
            if (next == -2) break;
            node = next;
            ++n;
        }
        *hits_ += n;
        last_.clear();
        inner_->accept(context);
    }

private:
    std::unique_ptr<sp::GuessSource> inner_;
    std::shared_ptr<std::atomic<int64_t>> hits_;
    sp::Proposal last_;
    size_t base_ = 0;
};

// One request from its worker's point of view, shared with the scheduler.
struct Job {
    // Set by the worker before enqueueing; read by the scheduler.
    Endpoint endpoint = Endpoint::Chat;
    std::vector<TokenId> prompt;
    GenerateOptions generate;
    std::string source;                  // none, ngram, ref, auto, draft, suffix
    std::vector<std::string> references;
    std::optional<std::string> prediction;
    int k = 8;
    int tree = 0; // continuations per node (SourceSpec::branches; 0: each source's own)
    Clock::time_point enqueued = Clock::now();
    std::atomic<bool> cancel{false};
    // Written by the scheduler under m; the worker waits on cv.
    std::mutex m;
    std::condition_variable cv;
    std::vector<TokenId> tokens;
    bool done = false;
    std::optional<ApiError> error;
    sp::BatchResult result;
    int64_t cached_tokens = 0;
    int64_t prediction_tokens = 0;
    std::shared_ptr<std::atomic<int64_t>> prediction_hits = std::make_shared<std::atomic<int64_t>>(0);
    double ttft_seconds = -1;
};

// Finished requests' caches, least recently used first out, within a byte budget.
struct PrefixEntry {
    std::vector<TokenId> tokens;
    std::shared_ptr<KvCache> cache;
    uint64_t bytes = 0;
};

// The text a request's tokens spell, released to the client only once no stop string can still
// begin in it; cut before the first stop string (OpenAI leaves it out).
class TextStream {
public:
    TextStream(const Tokenizer& tok, std::vector<std::string> stops) : dec_(tok, false), stops_(std::move(stops)) {
        for (const auto& s : stops_) hold_ = std::max(hold_, s.size() - 1);
    }
    // The text newly safe to send after `ids` were appended (final: the request has ended).
    std::string push(std::span<const TokenId> ids, bool final) {
        for (TokenId id : ids) text_ += dec_.push(id);
        if (final) text_ += dec_.flush();
        if (!stopped_) {
            size_t cut = std::string::npos;
            for (const auto& s : stops_) cut = std::min(cut, text_.find(s));
            if (cut != std::string::npos) {
                text_.resize(cut);
                stopped_ = true;
            }
        }
        size_t safe = text_.size();
        if (!final && !stopped_) safe = text_.size() > hold_ ? text_.size() - hold_ : 0;
        safe = std::max(safe, sent_);
        std::string out = text_.substr(sent_, safe - sent_);
        sent_ = safe;
        return out;
    }
    const std::string& text() const { return text_; }

private:
    Utf8StreamDecoder dec_;
    std::vector<std::string> stops_;
    std::string text_;
    size_t sent_ = 0, hold_ = 0;
    bool stopped_ = false;
};

const char* finish_reason(const sp::BatchResult& r) {
    switch (r.stop) {
    case StopReason::MaxTokens:
    case StopReason::ContextFull: return "length";
    default: return "stop";
    }
}

} // namespace

struct Server::Impl {
    ServerOptions opts;
    httplib::Server svr;
    Metrics metrics;

    enum class State { Loading, Ready, Failed };
    std::atomic<State> state{State::Loading};
    std::string load_error;
    std::shared_ptr<const Model> model;
    std::shared_ptr<const Model> draft;
    std::unique_ptr<Context> ctx;
    std::unique_ptr<sp::BatchDecoder> decoder;
    std::shared_ptr<sp::SuffixCache> suffix_cache;
    std::optional<ChatFormat> chat_format;
    std::string chat_error;
    int64_t context = 0;
    std::string model_id;
    int port = -1;
    int listen_fd = -1; // the listening socket (bind())

    // The queue, shared by workers and the scheduler.
    std::mutex qm;
    std::condition_variable qcv;
    std::deque<std::shared_ptr<Job>> queue;
    bool stop_scheduler = false;
    std::atomic<bool> draining{false};
    std::atomic<bool> cancel_all{false};
    std::atomic<size_t> running_count{0};
    std::atomic<int64_t> unfinished{0}; // enqueued and not yet finished: shutdown() waits for 0
    std::atomic<int64_t> streams{0};    // SSE responses not yet written to their end
    std::thread scheduler;
    std::once_flag shutdown_once;

    // Scheduler-only state.
    std::map<uint64_t, std::shared_ptr<Job>> running;
    std::list<PrefixEntry> prefix_cache; // most recently used first
    uint64_t prefix_bytes = 0;
    uint64_t next_seq = 1;
    std::atomic<uint64_t> completion_counter{0};

    explicit Impl(ServerOptions o) : opts(std::move(o)) {}

    // ---- scheduler ----------------------------------------------------------------------
    std::unique_ptr<sp::GuessSource> build_source(Job& job) {
        std::vector<std::unique_ptr<sp::GuessSource>> members;
        const int64_t cap = context;
        auto make = [&](sp::SourceKind kind, std::vector<std::string> refs) {
            sp::SourceSpec s;
            s.kind = kind;
            s.references = std::move(refs);
            s.branches = job.tree;
            if (kind == sp::SourceKind::Suffix) s.suffix_cache = suffix_cache;
            if (kind == sp::SourceKind::Draft) {
                s.draft = draft;
                s.draft_options.context = ContextOptions{.n_threads = opts.threads, .pool = ctx->options().pool};
            }
            return sp::make_guess_source(s, *model, cap);
        };
        if (job.prediction && !job.prediction->empty()) {
            job.prediction_tokens = static_cast<int64_t>(model->tokenizer().encode(*job.prediction, AddBos::No).size());
            members.push_back(std::make_unique<PredictionCounter>(make(sp::SourceKind::Ref, {*job.prediction}),
                                                                  job.prediction_hits));
        }
        if (!job.references.empty()) members.push_back(make(sp::SourceKind::Ref, job.references));
        const std::string& s = job.source;
        if (s == "ngram" || s == "auto") members.push_back(make(sp::SourceKind::Ngram, {}));
        if (s == "suffix") members.push_back(make(sp::SourceKind::Suffix, {}));
        if ((s == "draft" || s == "auto") && draft) members.push_back(make(sp::SourceKind::Draft, {}));
        if (s == "draft" && !draft) throw ApiError(400, "speculation.source 'draft' needs a server started with --draft", "speculation.source");
        if (members.empty()) return nullptr;
        if (members.size() == 1) return std::move(members[0]);
        return std::make_unique<sp::CompositeSource>(std::move(members), sp::ComposePolicy::Longest);
    }

    void finish(Job& job, std::optional<ApiError> err, sp::BatchResult* res) {
        std::lock_guard lk(job.m);
        if (res) {
            job.tokens = res->tokens;
            job.result = std::move(*res);
            job.result.cache.reset();
        }
        job.error = std::move(err);
        job.done = true;
        job.cv.notify_all();
        --unfinished;
    }

    // The longest cached prefix of `prompt`, moved to the front (most recently used).
    const PrefixEntry* lookup_prefix(const std::vector<TokenId>& prompt) {
        auto best = prefix_cache.end();
        size_t best_n = 0;
        for (auto it = prefix_cache.begin(); it != prefix_cache.end(); ++it) {
            const size_t lim = std::min(it->tokens.size(), prompt.size());
            size_t n = 0;
            while (n < lim && it->tokens[n] == prompt[n]) ++n;
            if (n > best_n) {
                best_n = n;
                best = it;
            }
        }
        if (best == prefix_cache.end()) return nullptr;
        prefix_cache.splice(prefix_cache.begin(), prefix_cache, best);
        return &prefix_cache.front();
    }

    void keep_prefix(sp::BatchResult& r) {
        if (!r.cache || r.cache_tokens.empty()) return;
        const uint64_t bytes = decoder->kv_bytes_for(r.cache->capacity());
        if (bytes > opts.cache_budget_bytes) return;
        // An entry whose tokens this one extends says nothing more: drop it.
        for (auto it = prefix_cache.begin(); it != prefix_cache.end();) {
            if (it->tokens.size() <= r.cache_tokens.size() &&
                std::equal(it->tokens.begin(), it->tokens.end(), r.cache_tokens.begin())) {
                prefix_bytes -= it->bytes;
                it = prefix_cache.erase(it);
            } else {
                ++it;
            }
        }
        while (!prefix_cache.empty() && prefix_bytes + bytes > opts.cache_budget_bytes) {
            prefix_bytes -= prefix_cache.back().bytes;
            prefix_cache.pop_back();
        }
        prefix_cache.push_front(PrefixEntry{std::move(r.cache_tokens), std::move(r.cache), bytes});
        prefix_bytes += bytes;
    }

    // Admits queued jobs while there is a slot; returns when none more fits.
    void admit() {
        while (running.size() < static_cast<size_t>(opts.parallel)) {
            std::shared_ptr<Job> job;
            {
                std::lock_guard lk(qm);
                if (queue.empty()) return;
                job = queue.front();
                queue.pop_front();
            }
            if (job->cancel || cancel_all) {
                sp::BatchResult r;
                r.stop = StopReason::Cancelled;
                finish(*job, std::nullopt, &r);
                continue;
            }
            try {
                sp::BatchRequest br;
                br.prompt = job->prompt;
                br.generate = job->generate;
                br.source = build_source(*job);
                br.k = job->k;
                if (const PrefixEntry* e = opts.cache_budget_bytes ? lookup_prefix(job->prompt) : nullptr) {
                    br.prefix_cache = e->cache.get();
                    br.prefix_tokens = e->tokens;
                }
                const uint64_t id = decoder->submit(std::move(br));
                running.emplace(id, job);
                if (const sp::BatchResult* p = decoder->progress(id)) job->cached_tokens = p->prompt_tokens_shared;
            } catch (const ApiError& e) {
                finish(*job, e, nullptr);
            } catch (const Error& e) {
                if (e.code() == ErrorCode::capacity && !running.empty()) {
                    // The KV budget is busy: wait for a running request to retire.
                    std::lock_guard lk(qm);
                    queue.push_front(job);
                    return;
                }
                const int status = e.code() == ErrorCode::capacity ? 503 : 400;
                finish(*job, ApiError(status, e.what(), "", "", status == 503 ? "kv_budget_exhausted" : ""), nullptr);
            }
        }
    }

    void publish_progress() {
        for (auto& [id, job] : running) {
            const sp::BatchResult* p = decoder->progress(id);
            if (!p) continue;
            std::lock_guard lk(job->m);
            if (p->tokens.size() > job->tokens.size()) {
                if (job->tokens.empty()) job->ttft_seconds = seconds_since(job->enqueued);
                job->tokens = p->tokens;
                job->cv.notify_all();
            }
        }
    }

    void schedule() {
        for (;;) {
            {
                std::unique_lock lk(qm);
                qcv.wait(lk, [&] { return stop_scheduler || !queue.empty() || !running.empty(); });
                if (stop_scheduler && queue.empty() && running.empty()) return;
            }
            admit();
            for (auto& [id, job] : running)
                if (job->cancel || cancel_all) decoder->cancel(id);
            running_count = running.size();
            metrics.set_queue(queue_size(), running.size(), decoder->kv_bytes_in_use(), prefix_bytes);
            if (running.empty()) {
                // Everything queued was refused or cancelled; sleep until something changes.
                std::unique_lock lk(qm);
                if (queue.empty() && !stop_scheduler) continue;
                if (stop_scheduler && queue.empty()) return;
                continue;
            }
            std::vector<sp::BatchResult> done;
            try {
                done = decoder->step();
            } catch (const std::exception& e) {
                // A pass that failed as a whole fails every running request; the server goes on.
                for (auto& [id, job] : running) finish(*job, ApiError(500, std::string("decoding failed: ") + e.what()), nullptr);
                for (auto& [id, job] : running) decoder->cancel(id);
                (void)decoder->step();
                running.clear();
                continue;
            }
            metrics.add_pass();
            publish_progress();
            if (opts.throttle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opts.throttle_ms));
            for (sp::BatchResult& r : done) {
                auto it = running.find(r.id);
                if (it == running.end()) continue;
                std::shared_ptr<Job> job = it->second;
                running.erase(it);
                {
                    std::lock_guard lk(job->m);
                    if (job->ttft_seconds < 0 && !r.tokens.empty()) job->ttft_seconds = seconds_since(job->enqueued);
                }
                if (!r.failed && r.stop != StopReason::Cancelled) keep_prefix(r);
                if (r.stop == StopReason::Cancelled) metrics.add_cancelled();
                if (r.failed) {
                    finish(*job, ApiError(r.error_code == ErrorCode::capacity ? 503 : 500, r.error), &r);
                } else {
                    finish(*job, std::nullopt, &r);
                }
            }
            running_count = running.size();
            metrics.set_queue(queue_size(), running.size(), decoder->kv_bytes_in_use(), prefix_bytes);
        }
    }

    size_t queue_size() {
        std::lock_guard lk(qm);
        return queue.size();
    }

    // ---- HTTP -----------------------------------------------------------------------------
    static void send_error(httplib::Response& res, const ApiError& e) {
        res.status = e.status;
        res.set_content(error_body(e), "application/json");
    }

    bool authorized(const httplib::Request& req) const {
        if (opts.api_key.empty()) return true;
        const std::string h = req.get_header_value("Authorization");
        static constexpr std::string_view kBearer = "Bearer ";
        if (h.size() < kBearer.size() || h.compare(0, kBearer.size(), kBearer) != 0) return false;
        return constant_time_equal(std::string_view(h).substr(kBearer.size()), opts.api_key);
    }

    void require_ready() const {
        if (state != State::Ready)
            throw ApiError(503, state == State::Loading ? "the model is loading" : "the model failed to load: " + load_error,
                           "", "server_error", "model_not_ready");
        if (draining) throw ApiError(503, "the server is shutting down", "", "server_error", "shutting_down");
    }

    std::vector<TokenId> prompt_of(const ServeRequest& r) const {
        const Tokenizer& tok = model->tokenizer();
        if (r.endpoint == Endpoint::Chat) {
            if (!chat_format)
                throw ApiError(400, "chat completions need a chat template: " + chat_error +
                                        " (start the server with --chat-template NAME)",
                               "messages");
            ChatOptions co;
            fill_token_texts(co, tok);
            co.enable_thinking = r.enable_thinking;
            try {
                return tokenize_chat(tok, *chat_format, r.messages, co);
            } catch (const Error& e) {
                throw ApiError(400, e.what(), "messages");
            }
        }
        if (r.prompt_is_ids) {
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
        return tok.encode(r.prompt_text);
    }

    std::shared_ptr<Job> enqueue(const ServeRequest& r) {
        auto job = std::make_shared<Job>();
        job->endpoint = r.endpoint;
        job->prompt = prompt_of(r);
        const int64_t max_tokens = check_lengths(static_cast<int64_t>(job->prompt.size()), r.max_tokens, context,
                                               r.endpoint == Endpoint::Chat ? "messages" : "prompt");
        GenerateOptions& g = job->generate;
        g.max_tokens = max_tokens;
        g.sampler = opts.sampling;
        g.sampler.temperature = r.temperature.value_or(g.sampler.temperature);
        g.sampler.top_p = r.top_p.value_or(g.sampler.top_p);
        g.sampler.top_k = r.top_k.value_or(g.sampler.top_k);
        g.sampler.min_p = r.min_p.value_or(g.sampler.min_p);
        g.sampler.seed = r.seed.value_or(g.sampler.seed);
        g.stop_strings = r.stop;
        job->source = r.speculation.source.empty() ? opts.spec : r.speculation.source;
        // Refused here, before a stream has begun, rather than as an error event inside it.
        if (job->source == "draft" && !draft)
            throw ApiError(400, "speculation.source 'draft' needs a server started with --draft", "speculation.source");
        job->references = r.speculation.references;
        job->prediction = r.prediction;
        job->k = r.speculation.k > 0 ? r.speculation.k : opts.k;
        job->tree = r.speculation.tree > 0 ? r.speculation.tree : opts.tree;
        {
            std::lock_guard lk(qm);
            if (queue.size() >= opts.max_queue)
                throw ApiError(503, "the queue is full (" + std::to_string(queue.size()) + " requests waiting)", "",
                               "server_error", "queue_full");
            queue.push_back(job);
            ++unfinished;
        }
        qcv.notify_all();
        return job;
    }

    json usage_of(const Job& job) const {
        const auto completion = static_cast<int64_t>(job.result.tokens.size());
        const auto prompt = static_cast<int64_t>(job.prompt.size());
        json u = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
        u["prompt_tokens_details"] = {{"cached_tokens", job.cached_tokens}};
        const int64_t accepted = job.prediction ? std::min<int64_t>(*job.prediction_hits, job.prediction_tokens) : 0;
        const int64_t rejected = job.prediction ? job.prediction_tokens - accepted : 0;
        u["completion_tokens_details"] = {{"reasoning_tokens", 0},
                                          {"accepted_prediction_tokens", accepted},
                                          {"rejected_prediction_tokens", rejected}};
        return u;
    }

    void record_finished(const Job& job) {
        const int64_t accepted = job.prediction ? std::min<int64_t>(*job.prediction_hits, job.prediction_tokens) : 0;
        const auto n = static_cast<int64_t>(job.result.tokens.size());
        metrics.add_request(static_cast<int64_t>(job.prompt.size()), job.cached_tokens, n,
                            job.prediction ? accepted : 0, job.prediction ? job.prediction_tokens - accepted : 0,
                            std::string(job.source), job.result.stats.proposed, job.result.stats.accepted,
                            job.ttft_seconds, n > 1 ? (job.result.latency_seconds - job.result.queue_to_first_token_seconds) / static_cast<double>(n - 1) : -1);
    }

    json envelope(const Job& job, const std::string& id, int64_t created, bool chunk) const {
        json j;
        j["id"] = id;
        j["object"] = job.endpoint == Endpoint::Chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
        j["created"] = created;
        j["model"] = model_id;
        j["system_fingerprint"] = std::string("rewind-") + REWIND_VERSION_STRING;
        return j;
    }

    json choice(const Job& job, const std::string& text, const char* finish, bool chunk, bool first) const {
        json c;
        c["index"] = 0;
        if (job.endpoint == Endpoint::Chat) {
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

    void handle_completion(Endpoint ep, const httplib::Request& req, httplib::Response& res) {
        ServeRequest r;
        std::shared_ptr<Job> job;
        try {
            require_ready();
            r = parse_request(ep, req.body);
            job = enqueue(r);
        } catch (const ApiError& e) {
            send_error(res, e);
            if (e.status == 503) res.set_header("Retry-After", "1");
            return;
        }
        const std::string id = (ep == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + std::to_string(++completion_counter);
        const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
        if (!r.stream) {
            std::unique_lock lk(job->m);
            job->cv.wait(lk, [&] { return job->done; });
            if (job->error) return send_error(res, *job->error);
            record_finished(*job);
            TextStream ts(model->tokenizer(), r.stop);
            const std::string text = ts.push(job->result.tokens, true);
            json j = envelope(*job, id, created, false);
            j["choices"] = json::array({choice(*job, text, finish_reason(job->result), false, false)});
            j["usage"] = usage_of(*job);
            res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
            return;
        }
        auto ts = std::make_shared<TextStream>(model->tokenizer(), r.stop);
        auto sent_tokens = std::make_shared<size_t>(0);
        auto first = std::make_shared<bool>(true);
        const bool include_usage = r.include_usage;
        res.set_header("Cache-Control", "no-cache");
        ++streams;
        res.set_chunked_content_provider(
            "text/event-stream", [this, job, ts, sent_tokens, first, id, created, include_usage](size_t, httplib::DataSink& sink) {
                auto write = [&](const json& j) {
                    const std::string s = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
                    return sink.write(s.data(), s.size());
                };
                std::vector<TokenId> fresh;
                bool done = false;
                std::optional<ApiError> err;
                {
                    std::unique_lock lk(job->m);
                    job->cv.wait_for(lk, std::chrono::milliseconds(200),
                                     [&] { return job->done || job->tokens.size() > *sent_tokens; });
                    fresh.assign(job->tokens.begin() + static_cast<std::ptrdiff_t>(*sent_tokens), job->tokens.end());
                    *sent_tokens = job->tokens.size();
                    done = job->done;
                    err = job->error;
                }
                if (err) {
                    write(json{{"error", json::parse(error_body(*err))["error"]}});
                    const std::string d = "data: [DONE]\n\n";
                    sink.write(d.data(), d.size());
                    sink.done();
                    return true;
                }
                const std::string text = ts->push(fresh, done);
                if (!text.empty() || (*first && job->endpoint == Endpoint::Chat)) {
                    json j = envelope(*job, id, created, true);
                    j["choices"] = json::array({choice(*job, text, nullptr, true, *first)});
                    *first = false;
                    if (!write(j)) {
                        job->cancel = true; // the client is gone: free its slot and KV at the next pass
                        qcv.notify_all();
                        return false;
                    }
                }
                if (!done) {
                    if (fresh.empty() && !sink.is_writable()) {
                        job->cancel = true;
                        qcv.notify_all();
                        return false;
                    }
                    return true;
                }
                record_finished(*job);
                json j = envelope(*job, id, created, true);
                j["choices"] = json::array({choice(*job, "", finish_reason(job->result), true, false)});
                if (job->endpoint == Endpoint::Chat) j["choices"][0]["delta"] = json::object();
                write(j);
                if (include_usage) {
                    json u = envelope(*job, id, created, true);
                    u["choices"] = json::array();
                    u["usage"] = usage_of(*job);
                    write(u);
                }
                const std::string d = "data: [DONE]\n\n";
                sink.write(d.data(), d.size());
                sink.done();
                return true;
            },
            [this, job](bool success) {
                if (!success) {
                    job->cancel = true;
                    qcv.notify_all();
                }
                --streams;
            });
    }

    static json parse_body(const httplib::Request& req) {
        json j = json::parse(req.body, nullptr, false);
        if (j.is_discarded() || !j.is_object()) throw ApiError(400, "the body must be a JSON object", "", "invalid_request_error", "invalid_json");
        return j;
    }

    void routes() {
        svr.set_payload_max_length(opts.max_body_bytes);
        svr.set_read_timeout(opts.read_timeout_s, 0);
        svr.set_write_timeout(opts.write_timeout_s, 0);
        svr.set_tcp_nodelay(true); // SSE chunks are small: Nagle would hold each for the peer's delayed ACK
        svr.set_keep_alive_timeout(2); // an idle connection also delays the end of a shutdown this long
        const int n = opts.http_threads;
        svr.new_task_queue = [n] { return new httplib::ThreadPool(static_cast<size_t>(n)); };

        svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (draining && req.path != "/health" && req.path != "/metrics") {
                send_error(res, ApiError(503, "the server is shutting down", "", "server_error", "shutting_down"));
                return httplib::Server::HandlerResponse::Handled;
            }
            if (req.path == "/health" || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
            send_error(res, ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", "", "authentication_error",
                                     "invalid_api_key"));
            return httplib::Server::HandlerResponse::Handled;
        });
        svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            std::string msg = "HTTP " + std::to_string(res.status);
            if (res.status == 413) msg = "the request body is larger than the server's limit";
            if (res.status == 404) msg = "no such endpoint";
            if (res.status == 408) msg = "the request was not received in time";
            send_error(res, ApiError(res.status, msg));
            return httplib::Server::HandlerResponse::Handled;
        }));
        svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            try {
                std::rethrow_exception(ep);
            } catch (const ApiError& e) {
                send_error(res, e);
            } catch (const std::exception& e) {
                send_error(res, ApiError(500, e.what()));
            } catch (...) {
                send_error(res, ApiError(500, "internal error"));
            }
        });
        svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            static const char* const kPaths[] = {"/health", "/v1/models", "/v1/chat/completions", "/v1/completions",
                                                 "/metrics", "/tokenize", "/detokenize", "/apply-template"};
            std::string path = "other"; // unknown paths share one label: clients cannot grow the metrics
            for (const char* p : kPaths)
                if (req.path == p) path = p;
            metrics.count_http(path, res.status);
        });

        svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            switch (state.load()) {
            case State::Ready:
                res.set_content(draining ? R"({"status":"shutting down"})" : R"({"status":"ok"})", "application/json");
                if (draining) res.status = 503;
                break;
            case State::Loading:
                res.status = 503;
                res.set_content(R"({"status":"loading model"})", "application/json");
                break;
            case State::Failed:
                res.status = 503;
                res.set_content(json{{"status", "error"}, {"error", load_error}}.dump(), "application/json");
                break;
            }
        });
        svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            json m = {{"id", model_id.empty() ? std::filesystem::path(opts.model_path).filename().string() : model_id},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "rewind"}};
            if (state == State::Ready) m["context_length"] = context;
            res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
        });
        svr.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& s) { handle_completion(Endpoint::Chat, q, s); });
        svr.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& s) { handle_completion(Endpoint::Completions, q, s); });
        svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics.render(opts.kv_budget_bytes, opts.cache_budget_bytes), "text/plain; version=0.0.4");
        });
        svr.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
            require_ready();
            const json j = parse_body(req);
            const auto c = j.find("content");
            if (c == j.end() || !c->is_string()) throw ApiError(400, "'content' must be a string", "content");
            bool special = false;
            if (const auto a = j.find("add_special"); a != j.end()) {
                if (!a->is_boolean()) throw ApiError(400, "'add_special' must be a boolean", "add_special");
                special = a->get<bool>();
            }
            const auto ids = model->tokenizer().encode(c->get<std::string>(), special ? AddBos::Default : AddBos::No);
            res.set_content(json{{"tokens", ids}}.dump(), "application/json");
        });
        svr.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
            require_ready();
            const json j = parse_body(req);
            const auto t = j.find("tokens");
            if (t == j.end() || !t->is_array()) throw ApiError(400, "'tokens' must be a list of token ids", "tokens");
            std::vector<TokenId> ids;
            for (const auto& v : *t) {
                if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= model->tokenizer().n_vocab())
                    throw ApiError(400, "'tokens' holds " + v.dump() + ", not a token id of this vocabulary", "tokens");
                ids.push_back(static_cast<TokenId>(v.get<int64_t>()));
            }
            Utf8StreamDecoder dec(model->tokenizer(), false);
            std::string text;
            for (TokenId id : ids) text += dec.push(id);
            text += dec.flush();
            res.set_content(json{{"content", text}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
        });
        svr.Post("/apply-template", [this](const httplib::Request& req, httplib::Response& res) {
            require_ready();
            const ServeRequest r = parse_request(Endpoint::Chat, req.body);
            if (!chat_format) throw ApiError(400, "no chat template: " + chat_error, "messages");
            ChatOptions co;
            fill_token_texts(co, model->tokenizer());
            co.enable_thinking = r.enable_thinking;
            std::string prompt;
            try {
                prompt = format_chat(*chat_format, r.messages, co);
            } catch (const Error& e) {
                throw ApiError(400, e.what(), "messages");
            }
            res.set_content(json{{"prompt", prompt}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
        });
    }
};

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
    const ServerOptions& o = impl_->opts;
    if (o.parallel < 1) throw Error("serve: --parallel must be >= 1");
    if (o.k < 1 || o.k > 16) throw Error("serve: -k must be in [1, 16]");
    if (o.tree < 0 || o.tree > 16) throw Error("serve: --tree must be in [0, 16]");
    if (o.threads < 1) throw Error("serve: --threads must be >= 1");
    if (o.ctx < 0) throw Error("serve: --ctx must be >= 0");
    if (o.port < 0 || o.port > 65535) throw Error("serve: --port must be in [0, 65535]");
    if (o.spec != "none" && o.spec != "ngram" && o.spec != "auto" && o.spec != "draft" && o.spec != "suffix")
        throw Error("serve: --spec must be none, ngram, auto, draft or suffix");
    if (o.spec == "draft" && o.draft_path.empty()) throw Error("serve: --spec draft needs --draft MODEL");
    if (o.http_threads < 2) throw Error("serve: --http-threads must be >= 2");
    if (o.throttle_ms < 0 || o.throttle_ms > 10000) throw Error("serve: --throttle-ms must be in [0, 10000]");
    impl_->model_id = o.model_id.empty() ? std::filesystem::path(o.model_path).filename().string() : o.model_id;
    impl_->routes();
}

Server::~Server() {
    shutdown();
    {
        std::lock_guard lk(impl_->qm);
        impl_->stop_scheduler = true;
        impl_->cancel_all = true;
    }
    impl_->qcv.notify_all();
    if (impl_->scheduler.joinable()) impl_->scheduler.join();
}

void Server::bind() {
    Impl& m = *impl_;
    // SO_REUSEADDR (a restart finds the port free of TIME_WAIT), not cpp-httplib's default
    // SO_REUSEPORT, which would let a second process bind the same port and take connections.
    // The listening socket is kept, to deepen its accept queue below.
    m.svr.set_socket_options([&m](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        m.listen_fd = static_cast<int>(sock);
    });
    if (m.opts.port == 0) {
        m.port = m.svr.bind_to_any_port(m.opts.host);
    } else {
        m.port = m.svr.bind_to_port(m.opts.host, m.opts.port) ? m.opts.port : -1;
    }
    if (m.port < 0) throw Error(ErrorCode::io, "serve: cannot listen on " + m.opts.host + ":" + std::to_string(m.opts.port));
    // cpp-httplib 0.11 listens with a backlog of 5: a burst of new clients (16 at once in the load
    // test) overflows it and the dropped SYNs are retried after 1 s. Listening again on the same
    // socket only resizes its queue (Linux).
    if (m.listen_fd >= 0) ::listen(m.listen_fd, 512);
}

int Server::bound_port() const { return impl_->port; }

void Server::load() {
    Impl& m = *impl_;
    try {
        m.model = Model::load(m.opts.model_path);
        if (!m.opts.draft_path.empty()) m.draft = Model::load(m.opts.draft_path);
        const int64_t n_ctx = m.model->hparams().n_ctx_train;
        m.context = m.opts.ctx > 0 ? std::min(m.opts.ctx, n_ctx) : n_ctx;
        ContextOptions co;
        co.n_threads = m.opts.threads;
        co.pool = std::make_shared<ThreadPool>(m.opts.threads);
        m.ctx = std::make_unique<Context>(m.model, co);
        sp::BatchOptions bo;
        bo.kv_budget_bytes = m.opts.kv_budget_bytes;
        bo.keep_caches = m.opts.cache_budget_bytes > 0;
        m.decoder = std::make_unique<sp::BatchDecoder>(*m.ctx, bo);
        m.suffix_cache = std::make_shared<sp::SuffixCache>();
        try {
            m.chat_format = resolve_chat_format(m.opts.chat_template, m.model->file().gguf());
        } catch (const Error& e) {
            m.chat_error = e.what();
        }
    } catch (const Error& e) {
        m.load_error = e.what();
        m.state = Impl::State::Failed;
        throw;
    }
    m.scheduler = std::thread([&m] { m.schedule(); });
    m.state = Impl::State::Ready;
}

void Server::run() {
    impl_->svr.listen_after_bind();
}

void Server::shutdown() {
    Impl& m = *impl_;
    std::call_once(m.shutdown_once, [&m] {
        // New requests get 503 from here on. The listening socket stays open until the end:
        // cpp-httplib stops writing every streamed response once it is closed.
        m.draining = true;
        auto wait_until = [](double seconds, auto done) {
            const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
            while (!done() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        };
        wait_until(m.opts.shutdown_timeout_s, [&m] { return m.unfinished == 0; });
        m.cancel_all = true; // what is left ends at the next pass, its stream with finish_reason and [DONE]
        m.qcv.notify_all();
        wait_until(5.0, [&m] { return m.unfinished == 0; });
        wait_until(2.0, [&m] { return m.streams == 0; });
        m.svr.stop(); // run() returns once the open connections are done
    });
}

} // namespace rwd::serve

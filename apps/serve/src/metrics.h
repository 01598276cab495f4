// rewind serve's counters, gauges and histograms, rendered in Prometheus' text format at
// /metrics. One mutex: updates come once per request or pass, far from any hot loop.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace rwd::serve {

class Metrics {
public:
    void count_http(const std::string& path, int status) {
        std::lock_guard lk(m_);
        ++http_[{path, status}];
    }
    void add_pass() {
        std::lock_guard lk(m_);
        ++passes_;
    }
    void add_cancelled() {
        std::lock_guard lk(m_);
        ++cancelled_;
    }
    // One finished completion. ttft / tpot < 0: not measured (no token, or one).
    void add_request(int64_t prompt, int64_t cached, int64_t generated, int64_t pred_accepted, int64_t pred_rejected,
                     const std::string& source, int64_t proposed, int64_t accepted, double ttft, double tpot) {
        std::lock_guard lk(m_);
        prompt_ += prompt;
        cached_ += cached;
        generated_ += generated;
        pred_accepted_ += pred_accepted;
        pred_rejected_ += pred_rejected;
        auto& s = sources_[source];
        s.first += proposed;
        s.second += accepted;
        if (ttft >= 0) ttft_.add(ttft);
        if (tpot >= 0) tpot_.add(tpot);
    }
    // Of a finished completion's guesses, those that were text its constraint forced (under a
    // constraint every source is composed with forced text).
    void add_forced(const std::string& source, int64_t proposed, int64_t accepted) {
        std::lock_guard lk(m_);
        auto& f = forced_[source];
        f.first += proposed;
        f.second += accepted;
    }
    void set_queue(size_t queued, size_t running, uint64_t kv_used, uint64_t prefix_bytes) {
        std::lock_guard lk(m_);
        queued_ = queued;
        running_ = running;
        kv_used_ = kv_used;
        prefix_bytes_ = prefix_bytes;
    }

    std::string render(uint64_t kv_budget, uint64_t cache_budget) const {
        std::lock_guard lk(m_);
        std::string o;
        auto line = [&](const std::string& s) { o += s + "\n"; };
        auto num = [](auto v) { return std::to_string(v); };
        header(o, "rewind_http_requests_total", "HTTP requests by path and status.", "counter");
        for (const auto& [k, v] : http_)
            line("rewind_http_requests_total{path=\"" + escape(k.first) + "\",status=\"" + num(k.second) + "\"} " + num(v));
        counter(o, "rewind_prompt_tokens_total", "Prompt tokens of finished completions.", prompt_);
        counter(o, "rewind_cached_prompt_tokens_total", "Prompt tokens reused from a cache instead of computed.", cached_);
        counter(o, "rewind_generated_tokens_total", "Tokens generated.", generated_);
        counter(o, "rewind_passes_total", "Batched forward passes.", passes_);
        counter(o, "rewind_requests_cancelled_total", "Requests cancelled while decoding (client gone, shutdown).", cancelled_);
        counter(o, "rewind_prediction_tokens_accepted_total", "Predicted Outputs: prediction tokens that appeared in the completion.", pred_accepted_);
        counter(o, "rewind_prediction_tokens_rejected_total", "Predicted Outputs: prediction tokens that did not.", pred_rejected_);
        header(o, "rewind_guesses_proposed_total", "Guesses verified, by the request's source.", "counter");
        for (const auto& [k, v] : sources_) line("rewind_guesses_proposed_total{source=\"" + escape(k) + "\"} " + num(v.first));
        header(o, "rewind_guesses_accepted_total", "Guesses the target agreed with, by the request's source.", "counter");
        for (const auto& [k, v] : sources_) line("rewind_guesses_accepted_total{source=\"" + escape(k) + "\"} " + num(v.second));
        header(o, "rewind_forced_guesses_proposed_total", "Of the guesses verified, text a constraint forced, by the request's source.", "counter");
        for (const auto& [k, v] : forced_) line("rewind_forced_guesses_proposed_total{source=\"" + escape(k) + "\"} " + num(v.first));
        header(o, "rewind_forced_guesses_accepted_total", "Of the guesses accepted, text a constraint forced, by the request's source.", "counter");
        for (const auto& [k, v] : forced_) line("rewind_forced_guesses_accepted_total{source=\"" + escape(k) + "\"} " + num(v.second));
        gauge(o, "rewind_queue_depth", "Requests waiting for a slot.", queued_);
        gauge(o, "rewind_running_requests", "Requests decoding.", running_);
        gauge(o, "rewind_kv_bytes_used", "KV cache bytes of running requests.", kv_used_);
        gauge(o, "rewind_kv_budget_bytes", "KV budget of running requests (0: none).", kv_budget);
        gauge(o, "rewind_prefix_cache_bytes", "KV bytes kept by the prefix cache.", prefix_bytes_);
        gauge(o, "rewind_prefix_cache_budget_bytes", "The prefix cache's budget.", cache_budget);
        ttft_.render(o, "rewind_time_to_first_token_seconds", "From enqueueing to the first generated token.");
        tpot_.render(o, "rewind_time_per_output_token_seconds", "Per generated token after the first.");
        return o;
    }

private:
    struct Histogram {
        static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                           0.25,  0.5,    1,     2.5,  5,     10,  30};
        std::array<uint64_t, kBounds.size()> counts{};
        uint64_t count = 0;
        double sum = 0;
        void add(double v) {
            for (size_t i = 0; i < kBounds.size(); ++i)
                if (v <= kBounds[i]) ++counts[i];
            ++count;
            sum += v;
        }
        void render(std::string& o, const std::string& name, const std::string& help) const {
            header(o, name, help, "histogram");
            for (size_t i = 0; i < kBounds.size(); ++i) {
                char b[32];
                std::snprintf(b, sizeof b, "%g", kBounds[i]);
                o += name + "_bucket{le=\"" + b + "\"} " + std::to_string(counts[i]) + "\n";
            }
            o += name + "_bucket{le=\"+Inf\"} " + std::to_string(count) + "\n";
            char s[64];
            std::snprintf(s, sizeof s, "%.6f", sum);
            o += name + "_sum " + s + "\n" + name + "_count " + std::to_string(count) + "\n";
        }
    };
    static std::string escape(const std::string& s) {
        std::string o;
        for (char c : s) {
            if (c == '"' || c == '\\') o += '\\';
            if (c == '\n') {
                o += "\\n";
                continue;
            }
            o += c;
        }
        return o;
    }
    template <class T>
    static void counter(std::string& o, const std::string& name, const std::string& help, T v) {
        header(o, name, help, "counter");
        o += name + " " + std::to_string(v) + "\n";
    }
    template <class T>
    static void gauge(std::string& o, const std::string& name, const std::string& help, T v) {
        header(o, name, help, "gauge");
        o += name + " " + std::to_string(v) + "\n";
    }
    // A metric family's HELP and TYPE lines (its samples follow).
    static void header(std::string& o, const std::string& name, const std::string& help, const char* type) {
        o += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    }

    mutable std::mutex m_;
    std::map<std::pair<std::string, int>, uint64_t> http_;
    int64_t cancelled_ = 0, prompt_ = 0, cached_ = 0, generated_ = 0, passes_ = 0, pred_accepted_ = 0, pred_rejected_ = 0;
    std::map<std::string, std::pair<int64_t, int64_t>> sources_, forced_; // (proposed, accepted) by source
    size_t queued_ = 0, running_ = 0;
    uint64_t kv_used_ = 0, prefix_bytes_ = 0;
    Histogram ttft_, tpot_;
};

} // namespace rwd::serve

// rewind serve: an OpenAI-compatible HTTP server over continuous batching. One scheduler thread
// owns the model's context and the BatchDecoder; HTTP worker threads only parse, validate,
// tokenize, enqueue and stream. Every answer equals `rewind generate`'s for the same prompt and
// settings, whatever else is running (batch invariance and exact verification).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "rewind/kv_cache.h"
#include "rewind/sampler.h"

namespace rwd::serve {

struct ServerOptions {
    std::string model_path;
    std::string draft_path;        // optional draft model (spec draft / auto)
    std::string model_id;          // the name /v1/models reports; empty: the file's base name
    std::string host = "127.0.0.1";
    int port = 8080;               // 0: an ephemeral port (bound_port() tells which)
    int parallel = 4;              // requests decoding at once, >= 1
    int64_t ctx = 0;               // context positions per request; 0: the model's
    uint64_t kv_budget_bytes = 0;  // KV of running requests; 0: no limit
    uint64_t cache_budget_bytes = 64ull << 20; // prefix cache of finished requests; 0: none
    // Storage of every request's KV cache (and a draft's): half precision by default, as
    // `rewind generate` uses, so an answer equals generate's at its defaults bit for bit.
    KvType kv_type = KvType::F16;
    std::string api_key;           // non-empty: every endpoint but /health needs it
    std::string spec = "ngram";    // default guess source: none, ngram, auto, draft, suffix
    int k = 8;                     // default guesses per pass, [1, 16]
    int tree = 0;                  // default continuations per node of the sources (token trees),
                                   // [0, 16]; 0: each source's own (SourceSpec::branches)
    int threads = 1;
    // Sampling of requests that omit a field (temperature, top_p, top_k, min_p, repeat_penalty,
    // repeat_last_n, seed); OpenAI's defaults unless `rewind serve` is given sampling flags, as
    // llama-server does.
    SamplerOptions sampling = openai_sampling();
    static SamplerOptions openai_sampling() {
        SamplerOptions o;
        o.temperature = 1.0f; // OpenAI's default temperature; the rest are SamplerOptions' own
        return o;
    }
    std::string chat_template;     // a built-in chat format name, or a template's text; empty: the file's
    size_t max_body_bytes = 8u << 20;
    size_t max_queue = 64;         // requests waiting for a slot; more get 503 with Retry-After
    int read_timeout_s = 30;
    int write_timeout_s = 30;
    double shutdown_timeout_s = 10; // running requests get this long to finish after shutdown()
    int http_threads = 32;          // streaming connections held at once
    // Sleep this long after each pass (0: never). For tests of disconnects and shutdown, which
    // need requests that last longer than a small model takes to answer; never for serving.
    int throttle_ms = 0;
    // This process's name among replicas behind a load balancer (empty: none): sent as the
    // X-Rewind-Replica header of every response and as rewind_replica_info{replica} in /metrics.
    // At most 64 characters of [A-Za-z0-9._-], so it is safe in a header and a label.
    std::string replica_id;
};

class Server {
public:
    // Nothing is loaded or bound yet. Throws rwd::Error (argument) for options out of range.
    explicit Server(ServerOptions opts);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds host:port. Throws rwd::Error (io) if it cannot. Then run() serves: /health answers
    // 503 until load() has finished.
    void bind();
    int bound_port() const;
    // Loads the model(s) and starts the scheduler. Throws rwd::Error (the server then answers
    // 503 until shutdown()).
    void load();
    // Serves until shutdown(); blocks. Call after bind(), from one thread.
    void run();
    // Stops accepting, lets running and queued requests finish for up to shutdown_timeout_s,
    // then cancels the rest; run() returns once every connection is done. Thread-safe; call it
    // from a thread other than run()'s (e.g. the one that waits for SIGTERM). Idempotent.
    void shutdown();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace rwd::serve

// What rewind serve's threads share: the options, the metrics, the phase of the server's life,
// and what load() builds (the model, its context, the job builder and the scheduler).
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "job_builder.h"
#include "metrics.h"
#include "rewind/context.h"
#include "rewind/model.h"
#include "rewind/serve/server.h"
#include "scheduler.h"

namespace rwd::serve {

struct ServerState {
    explicit ServerState(ServerOptions o)
        : opts(std::move(o)),
          model_id(opts.model_id.empty() ? std::filesystem::path(opts.model_path).filename().string() : opts.model_id) {}

    const ServerOptions opts;
    const std::string model_id; // what /v1/models and every answer name
    Metrics metrics;            // thread-safe (its own mutex)

    enum class Phase { Loading, Ready, Failed };
    std::atomic<Phase> phase{Phase::Loading};
    std::string load_error; // written by load() before phase becomes Failed; read-only after

    // Written by load() before phase becomes Ready; read-only after (the HTTP workers check
    // phase first). Declared so that the scheduler, which uses the context, the metrics and the
    // job builder's sources, is destroyed (and its thread joined) first.
    std::shared_ptr<const Model> model;
    std::unique_ptr<Context> ctx;
    int64_t context = 0; // positions per request
    std::unique_ptr<JobBuilder> jobs;
    std::unique_ptr<Scheduler> scheduler;

    std::atomic<bool> draining{false};    // set by shutdown(): new requests get 503
    std::atomic<int64_t> streams{0};      // SSE responses not yet written to their end
    std::atomic<uint64_t> completions{0}; // numbers the completions' ids
};

} // namespace rwd::serve

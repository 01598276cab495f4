// rewind serve's scheduler: one thread that owns the batch decoder, the running jobs and the
// prefix cache. It admits queued jobs between passes, runs the passes, publishes each job's new
// tokens after every pass and keeps finished jobs' caches for later prompts sharing a prefix.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "job.h"
#include "metrics.h"
#include "prefix_cache.h"
#include "rewind/context.h"
#include "rewind/speculate/batch_decoder.h"

namespace rwd::serve {

struct SchedulerOptions {
    int parallel = 4;                // jobs decoding at once, >= 1
    size_t max_queue = 64;           // jobs waiting for a slot
    uint64_t cache_budget_bytes = 0; // prefix cache; 0: none
    int throttle_ms = 0;             // sleep after each pass (tests of disconnects only)
};

// Threads: submit(), wake(), cancel_all() and unfinished() are called from any thread; the rest
// runs on the scheduler's own thread. Locks: qm_ guards queue_ and stop_; each Job's m guards
// what the scheduler writes into it (see job.h); the decoder, running_ and prefix_ are the
// scheduler thread's alone and need none. The scheduler never holds qm_ and a job's m at once.
class Scheduler {
public:
    // `ctx` (the target's context, used by the decoder's passes) and `metrics` must outlive this.
    Scheduler(Context& ctx, const speculate::BatchOptions& batch, SchedulerOptions opts, Metrics& metrics);
    // Stops the thread: queued jobs are cancelled, running ones end at the next pass.
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    void start(); // starts the thread; once

    // Queues `job`. Throws ApiError (503, queue_full) when max_queue jobs already wait.
    void submit(std::shared_ptr<Job> job);
    // Wakes the thread after a job's cancel flag was set, so that it acts at once.
    void wake();
    // Cancels every queued and running job at the next pass (their answers end "stop" early).
    void cancel_all();
    // Jobs submitted and not yet finished (shutdown waits for 0).
    int64_t unfinished() const { return unfinished_; }

private:
    void run();
    bool wait_for_work(); // false: stopped with nothing left
    void admit();
    bool admit_one(const std::shared_ptr<Job>& job); // false: no room for it yet (requeued)
    bool admit_deferred(); // false: no room left
    bool ends_early(const std::shared_ptr<Job>& job); // cancelled before admission: finished here
    void cancel_marked();
    bool pass(); // one step(); false if it failed as a whole (every running job failed)
    void retire(std::vector<speculate::BatchResult>& done);
    void publish_progress();
    void finish(Job& job, std::optional<ApiError> err, speculate::BatchResult* res);
    void report_gauges();
    size_t queue_size();

    SchedulerOptions opts_;
    Metrics& metrics_;
    // The scheduler thread's alone.
    std::unique_ptr<speculate::BatchDecoder> decoder_;
    std::map<uint64_t, std::shared_ptr<Job>> running_; // by the decoder's request id
    PrefixCache prefix_;
    // Choices after a request's first, waiting for it to have prefilled the prompt they share.
    std::deque<std::shared_ptr<Job>> deferred_;
    // Guarded by qm_.
    std::mutex qm_;
    std::condition_variable qcv_;
    std::deque<std::shared_ptr<Job>> queue_;
    bool stop_ = false;
    // Any thread.
    std::atomic<bool> cancel_all_{false};
    std::atomic<int64_t> unfinished_{0};
    std::thread thread_;
};

} // namespace rwd::serve

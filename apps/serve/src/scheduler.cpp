// Scheduler: the loop of the one thread that decodes (admit, cancel, pass, publish, retire), and
// the queue the HTTP workers feed it through.
#include "scheduler.h"

#include <string>

#include "rewind/error.h"

namespace rwd::serve {

namespace sp = rwd::speculate;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A follower may start: its leader has a token (its cache holds the prompt) or has ended.
bool leader_started(const Job& job) {
    if (!job.leader) return true;
    std::lock_guard lk(job.leader->m);
    return job.leader->done || !job.leader->tokens.empty();
}

} // namespace

Scheduler::Scheduler(Context& ctx, const sp::BatchOptions& batch, SchedulerOptions opts, Metrics& metrics)
    : opts_(opts), metrics_(metrics), decoder_(std::make_unique<sp::BatchDecoder>(ctx, batch)),
      prefix_(opts.cache_budget_bytes) {}

Scheduler::~Scheduler() {
    {
        std::lock_guard lk(qm_);
        stop_ = true;
    }
    cancel_all_ = true;
    qcv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void Scheduler::start() {
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void Scheduler::submit(std::shared_ptr<Job> job) {
    {
        std::lock_guard lk(qm_);
        if (queue_.size() >= opts_.max_queue)
            throw ApiError(503, "the queue is full (" + std::to_string(queue_.size()) + " requests waiting)", "",
                           "server_error", "queue_full");
        queue_.push_back(std::move(job));
        ++unfinished_;
    }
    qcv_.notify_all();
}

void Scheduler::wake() { qcv_.notify_all(); }

void Scheduler::cancel_all() {
    cancel_all_ = true;
    qcv_.notify_all();
}

size_t Scheduler::queue_size() {
    std::lock_guard lk(qm_);
    return queue_.size();
}

void Scheduler::report_gauges() {
    metrics_.set_queue(queue_size(), running_.size(), decoder_->kv_bytes_in_use(), prefix_.bytes());
}

bool Scheduler::wait_for_work() {
    std::unique_lock lk(qm_);
    qcv_.wait(lk, [&] { return stop_ || !queue_.empty() || !running_.empty() || !deferred_.empty(); });
    return !(stop_ && queue_.empty() && running_.empty() && deferred_.empty());
}

void Scheduler::run() {
    while (wait_for_work()) {
        admit();
        cancel_marked();
        report_gauges();
        if (running_.empty()) continue; // everything queued was refused or cancelled
        if (!pass()) continue;
        report_gauges();
    }
}

void Scheduler::finish(Job& job, std::optional<ApiError> err, sp::BatchResult* res) {
    std::lock_guard lk(job.m);
    if (res) {
        if (job.ttft_seconds < 0 && !res->tokens.empty()) job.ttft_seconds = seconds_since(job.enqueued);
        job.tokens = res->tokens;
        job.logprobs = res->logprobs;
        job.result = std::move(*res);
        job.result.cache.reset();
    }
    job.error = std::move(err);
    job.done = true;
    job.cv.notify_all();
    --unfinished_;
}

bool Scheduler::ends_early(const std::shared_ptr<Job>& job) {
    if (!job->cancel && !cancel_all_) return false;
    sp::BatchResult r;
    r.stop = StopReason::Cancelled;
    finish(*job, std::nullopt, &r);
    return true;
}

bool Scheduler::admit_deferred() {
    for (auto it = deferred_.begin(); it != deferred_.end();) {
        if (running_.size() >= static_cast<size_t>(opts_.parallel)) return false;
        const std::shared_ptr<Job> job = *it;
        if (ends_early(job)) {
            it = deferred_.erase(it);
        } else if (leader_started(*job)) {
            it = deferred_.erase(it);
            if (!admit_one(job)) return false; // requeued
        } else {
            ++it;
        }
    }
    return true;
}

void Scheduler::admit() {
    if (!admit_deferred()) return;
    while (running_.size() < static_cast<size_t>(opts_.parallel)) {
        std::shared_ptr<Job> job;
        {
            std::lock_guard lk(qm_);
            if (queue_.empty()) return;
            job = queue_.front();
            queue_.pop_front();
        }
        if (ends_early(job)) continue;
        if (!leader_started(*job)) {
            deferred_.push_back(std::move(job)); // after its leader's first pass: the prompt's KV is copied
            continue;
        }
        if (!admit_one(job)) return;
    }
}

bool Scheduler::admit_one(const std::shared_ptr<Job>& job) {
    try {
        sp::BatchRequest br;
        br.prompt = job->prompt;
        br.generate = job->generate;
        if (job->make_source) br.source = job->make_source();
        if (job->make_constraint) br.constraint = job->make_constraint();
        br.k = job->k;
        if (const PrefixCache::Entry* e = prefix_.enabled() ? prefix_.lookup(job->prompt) : nullptr) {
            br.prefix_cache = e->cache.get();
            br.prefix_tokens = e->tokens;
        }
        const uint64_t id = decoder_->submit(std::move(br));
        running_.emplace(id, job);
        if (const sp::BatchResult* p = decoder_->progress(id)) {
            std::lock_guard lk(job->m);
            job->cached_tokens = p->prompt_tokens_shared;
        }
    } catch (const ApiError& e) {
        finish(*job, e, nullptr);
    } catch (const Error& e) {
        if (e.code() == ErrorCode::capacity && !running_.empty()) {
            // The KV budget is busy: wait for a running request to retire.
            std::lock_guard lk(qm_);
            queue_.push_front(job);
            return false;
        }
        const int status = e.code() == ErrorCode::capacity ? 503 : 400;
        finish(*job, ApiError(status, e.what(), "", "", status == 503 ? "kv_budget_exhausted" : ""), nullptr);
    }
    return true;
}

void Scheduler::cancel_marked() {
    for (auto& [id, job] : running_)
        if (job->cancel || cancel_all_) decoder_->cancel(id);
}

bool Scheduler::pass() {
    std::vector<sp::BatchResult> done;
    try {
        done = decoder_->step();
    } catch (const std::exception& e) {
        // A pass that failed as a whole fails every running request; the server goes on.
        for (auto& [id, job] : running_) finish(*job, ApiError(500, std::string("decoding failed: ") + e.what()), nullptr);
        for (auto& [id, job] : running_) decoder_->cancel(id);
        (void)decoder_->step();
        running_.clear();
        return false;
    }
    metrics_.add_pass();
    publish_progress();
    if (opts_.throttle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opts_.throttle_ms));
    retire(done);
    return true;
}

void Scheduler::publish_progress() {
    for (auto& [id, job] : running_) {
        const sp::BatchResult* p = decoder_->progress(id);
        if (!p) continue;
        std::lock_guard lk(job->m);
        if (p->tokens.size() > job->tokens.size()) {
            if (job->tokens.empty()) job->ttft_seconds = seconds_since(job->enqueued);
            job->tokens = p->tokens;
            // Appended, not copied whole: an entry is about 170 bytes, and a long answer has many passes.
            if (p->logprobs.size() > job->logprobs.size())
                job->logprobs.insert(job->logprobs.end(), p->logprobs.begin() + static_cast<std::ptrdiff_t>(job->logprobs.size()),
                                     p->logprobs.end());
            job->cv.notify_all();
        }
    }
}

void Scheduler::retire(std::vector<sp::BatchResult>& done) {
    for (sp::BatchResult& r : done) {
        auto it = running_.find(r.id);
        if (it == running_.end()) continue;
        std::shared_ptr<Job> job = it->second;
        running_.erase(it);
        if (!r.failed && r.stop != StopReason::Cancelled && r.cache) {
            const uint64_t bytes = decoder_->kv_bytes_for(r.cache->capacity()); // before r.cache is moved
            prefix_.keep(std::move(r.cache_tokens), std::move(r.cache), bytes);
        }
        if (r.stop == StopReason::Cancelled) metrics_.add_cancelled();
        if (r.failed) {
            finish(*job, ApiError(r.error_code == ErrorCode::capacity ? 503 : 500, r.error), &r);
        } else {
            finish(*job, std::nullopt, &r);
        }
    }
}

} // namespace rwd::serve

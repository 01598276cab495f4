// Persistent worker threads for the kernels. A job is published as one atomic ticket (job id,
// next chunk, chunk count); every thread, the caller included, claims chunks from it by CAS. The
// caller never waits for a worker that has not started: if workers are slow to wake (or the
// machine is oversubscribed) the caller simply runs the remaining chunks itself. Idle workers
// spin briefly, then sleep on a condition variable.
#include "rewind/kernels/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "rewind/error.h"

namespace rwd {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

// How long a worker keeps spinning for the next job before it sleeps. A forward pass dispatches
// every few microseconds, so workers stay hot through a pass and sleep between requests.
constexpr auto kSpinFor = std::chrono::microseconds(300);

// Ticket layout: job id (32 bits) | next chunk to claim (16) | chunk count (16).
constexpr uint64_t pack(uint32_t job, uint32_t next, uint32_t total) {
    return (uint64_t(job) << 32) | (uint64_t(next) << 16) | uint64_t(total);
}
constexpr uint32_t job_of(uint64_t t) { return uint32_t(t >> 32); }
constexpr uint32_t next_of(uint64_t t) { return uint32_t(t >> 16) & 0xffffu; }
constexpr uint32_t total_of(uint64_t t) { return uint32_t(t) & 0xffffu; }

} // namespace

struct ThreadPool::Impl {
    int n_threads = 1;
    std::vector<std::thread> workers;

    // The job: written by the dispatcher before the ticket is published (release); read only by
    // a thread that has claimed one of its chunks (acquire), and the dispatcher does not return,
    // so never rewrites these, before every claimed chunk is done.
    const RangeFn* fn = nullptr;
    int64_t n = 0;
    int64_t chunk = 0; // indices per chunk: chunk i covers [i*chunk, min(n, (i+1)*chunk))

    alignas(64) std::atomic<uint64_t> ticket{0};
    alignas(64) std::atomic<uint32_t> done{0};  // chunks of the current job finished
    alignas(64) std::atomic<int> sleepers{0};
    std::atomic<bool> stop{false};
    std::atomic<bool> busy{false};  // a parallel_for is in flight (guards re-entry)

    std::mutex mu;
    std::condition_variable cv;

    // One slot per chunk, so a throwing task needs no lock; preallocated so parallel_for never
    // allocates.
    std::vector<std::exception_ptr> errors;

    // Claims and runs chunks of job `job` until none is left. Returns false if the ticket moved
    // on to another job meanwhile.
    void run_chunks(uint32_t job) {
        uint64_t t = ticket.load(std::memory_order_acquire);
        for (;;) {
            if (job_of(t) != job || next_of(t) >= total_of(t)) return;
            if (!ticket.compare_exchange_weak(t, t + (uint64_t(1) << 16), std::memory_order_acq_rel,
                                              std::memory_order_acquire))
                continue; // t now holds the current ticket
            const int64_t index = next_of(t);
            const int64_t b = index * chunk;
            const int64_t e = std::min(n, b + chunk);
            try {
                (*fn)(b, e);
            } catch (...) {
                errors[size_t(index)] = std::current_exception();
            }
            done.fetch_add(1, std::memory_order_acq_rel);
            t = ticket.load(std::memory_order_acquire);
        }
    }

    // Waits until the ticket carries a job other than `seen`; returns its id.
    uint32_t wait_for_job(uint32_t seen) {
        const auto start = std::chrono::steady_clock::now();
        for (uint32_t spins = 0;; ++spins) {
            const uint32_t j = job_of(ticket.load(std::memory_order_acquire));
            if (j != seen) return j;
            cpu_relax();
            if ((spins & 255u) == 255u) {
                if (std::chrono::steady_clock::now() - start > kSpinFor) break;
                // More threads than cores (a test with 3 threads on 2 cores, a busy machine).
                std::this_thread::yield();
            }
        }
        std::unique_lock<std::mutex> lock(mu);
        // seq_cst pairing with publish(): either this load sees the new ticket, or publish()
        // sees sleepers > 0 and notifies under the mutex.
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        cv.wait(lock, [&] { return job_of(ticket.load(std::memory_order_seq_cst)) != seen; });
        sleepers.fetch_sub(1, std::memory_order_seq_cst);
        return job_of(ticket.load(std::memory_order_acquire));
    }

    void worker_main() {
        uint32_t seen = 0;
        for (;;) {
            seen = wait_for_job(seen);
            if (stop.load(std::memory_order_acquire)) return;
            run_chunks(seen);
        }
    }

    void publish(uint64_t t) {
        ticket.store(t, std::memory_order_seq_cst);
        if (sleepers.load(std::memory_order_seq_cst) > 0) {
            { std::lock_guard<std::mutex> lock(mu); }
            cv.notify_all();
        }
    }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
    if (n_threads < 1 || n_threads > 0xffff)
        throw Error("ThreadPool: n_threads must be in [1, 65535], got " + std::to_string(n_threads));
    impl_->n_threads = n_threads;
    // One error slot per chunk; the ticket counts chunks in 16 bits.
    impl_->errors.resize(std::min<size_t>(size_t(n_threads) * size_t(kMaxChunksPerThread), 0xffff));
    impl_->workers.reserve(size_t(n_threads - 1));
    try {
        for (int i = 1; i < n_threads; ++i) impl_->workers.emplace_back([this] { impl_->worker_main(); });
    } catch (...) {
        impl_->stop.store(true, std::memory_order_release);
        impl_->publish(pack(job_of(impl_->ticket.load()) + 1, 0, 0));
        for (auto& w : impl_->workers) w.join();
        throw;
    }
}

ThreadPool::~ThreadPool() {
    impl_->stop.store(true, std::memory_order_release);
    impl_->publish(pack(job_of(impl_->ticket.load()) + 1, 0, 0));
    for (auto& w : impl_->workers) w.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t grain, int64_t max_chunks) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    Impl& p = *impl_;
    const int64_t most = static_cast<int64_t>(p.errors.size());
    if (max_chunks <= 0) max_chunks = p.n_threads;
    const int64_t units = (n + grain - 1) / grain;
    const int64_t n_chunks = std::min<int64_t>(std::min(max_chunks, most), units);
    const int64_t chunk = ((units + n_chunks - 1) / n_chunks) * grain;
    const int64_t total = (n + chunk - 1) / chunk; // chunks that are not empty

    // One chunk, or a re-entrant / concurrent call (a task calling parallel_for, two callers
    // sharing a pool): run the same chunks here, in order. Chunking only decides who computes an
    // index, never what it computes.
    if (total == 1 || p.busy.exchange(true, std::memory_order_acquire)) {
        for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk));
        return;
    }

    p.fn = &fn;
    p.n = n;
    p.chunk = chunk;
    p.done.store(0, std::memory_order_relaxed);
    const uint32_t job = job_of(p.ticket.load(std::memory_order_relaxed)) + 1;
    p.publish(pack(job, 0, uint32_t(total)));

    p.run_chunks(job);
    // Every chunk is claimed; wait for the ones workers are still running.
    for (uint32_t spins = 0; p.done.load(std::memory_order_acquire) != uint32_t(total); ++spins) {
        cpu_relax();
        if ((spins & 255u) == 255u) std::this_thread::yield();
    }

    std::exception_ptr first;
    for (int64_t i = 0; i < total; ++i) {
        auto& e = p.errors[size_t(i)];
        if (e && !first) first = e;
        e = nullptr;
    }
    p.busy.store(false, std::memory_order_release);
    if (first) std::rethrow_exception(first);
}

} // namespace rwd

// Persistent worker threads for the kernels. A dispatch is an atomic generation bump that spinning
// workers see within a microsecond or so; idle workers fall back to a condition variable after a
// short spin so a quiet pool costs no CPU.
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

namespace rewind {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

// How long a worker keeps spinning for the next job before it sleeps. A forward pass dispatches
// every few microseconds, so workers stay hot through a pass and sleep between requests.
constexpr auto kSpinFor = std::chrono::microseconds(300);

} // namespace

struct ThreadPool::Impl {
    int n_threads = 1;
    std::vector<std::thread> workers;

    // The job being run; written by the dispatcher before `generation` is bumped (release) and
    // read by workers after they observe the bump (acquire).
    const RangeFn* fn = nullptr;
    int64_t n = 0;
    int64_t chunk = 0;  // indices per chunk; chunk i covers [i*chunk, min(n, (i+1)*chunk))

    alignas(64) std::atomic<uint32_t> generation{0};
    alignas(64) std::atomic<int> pending{0};  // workers that have not yet finished this job
    alignas(64) std::atomic<int> sleepers{0};
    std::atomic<bool> stop{false};
    std::atomic<bool> busy{false};  // a parallel_for is in flight (guards re-entry)

    std::mutex mu;
    std::condition_variable cv;

    // One slot per chunk, so a throwing task never needs a lock; preallocated so parallel_for
    // never allocates.
    std::vector<std::exception_ptr> errors;

    void run_chunk(int index) {
        const int64_t b = int64_t(index) * chunk;
        if (b >= n) return;
        const int64_t e = std::min(n, b + chunk);
        try {
            (*fn)(b, e);
        } catch (...) {
            errors[size_t(index)] = std::current_exception();
        }
    }

    // Waits until `generation` moves past `seen`; returns the new value.
    uint32_t wait_for_job(uint32_t seen) {
        const auto start = std::chrono::steady_clock::now();
        for (uint32_t spins = 0;; ++spins) {
            const uint32_t g = generation.load(std::memory_order_acquire);
            if (g != seen) return g;
            cpu_relax();
            if ((spins & 255u) == 255u) {
                if (std::chrono::steady_clock::now() - start > kSpinFor) break;
                // More threads than cores (e.g. a test with 3 threads on 2 cores): let others run.
                std::this_thread::yield();
            }
        }
        std::unique_lock<std::mutex> lock(mu);
        // seq_cst pairing with the dispatcher: either we see the new generation here, or the
        // dispatcher sees sleepers > 0 and notifies under the mutex.
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        cv.wait(lock, [&] { return generation.load(std::memory_order_seq_cst) != seen; });
        sleepers.fetch_sub(1, std::memory_order_seq_cst);
        return generation.load(std::memory_order_acquire);
    }

    void worker_main(int index) {
        uint32_t seen = 0;
        for (;;) {
            seen = wait_for_job(seen);
            if (stop.load(std::memory_order_acquire)) return;
            run_chunk(index);
            pending.fetch_sub(1, std::memory_order_acq_rel);
        }
    }

    void publish() {
        generation.fetch_add(1, std::memory_order_seq_cst);
        if (sleepers.load(std::memory_order_seq_cst) > 0) {
            { std::lock_guard<std::mutex> lock(mu); }
            cv.notify_all();
        }
    }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
    if (n_threads < 1) throw Error("ThreadPool: n_threads must be >= 1, got " + std::to_string(n_threads));
    impl_->n_threads = n_threads;
    impl_->errors.resize(size_t(n_threads));
    impl_->workers.reserve(size_t(n_threads - 1));
    try {
        for (int i = 1; i < n_threads; ++i) impl_->workers.emplace_back([this, i] { impl_->worker_main(i); });
    } catch (...) {
        impl_->stop.store(true, std::memory_order_release);
        impl_->publish();
        for (auto& w : impl_->workers) w.join();
        throw;
    }
}

ThreadPool::~ThreadPool() {
    impl_->stop.store(true, std::memory_order_release);
    impl_->publish();
    for (auto& w : impl_->workers) w.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t grain) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    Impl& p = *impl_;
    const int64_t units = (n + grain - 1) / grain;
    const int64_t n_chunks = std::min<int64_t>(p.n_threads, units);
    const int64_t chunk = ((units + n_chunks - 1) / n_chunks) * grain;

    // Single thread, a single chunk, or a re-entrant / concurrent call (a task calling
    // parallel_for, or two callers sharing a pool): run the same chunks here, in order. The
    // chunking only decides who computes an index, never what it computes.
    if (n_chunks == 1 || p.busy.exchange(true, std::memory_order_acquire)) {
        for (int64_t b = 0; b < n; b += chunk) fn(b, std::min(n, b + chunk));
        return;
    }

    p.fn = &fn;
    p.n = n;
    p.chunk = chunk;
    p.pending.store(p.n_threads - 1, std::memory_order_relaxed);
    p.publish();

    p.run_chunk(0);

    // Every worker acknowledges every job (even one with no chunk for it), so the job fields are
    // never rewritten while a late worker still reads them.
    for (uint32_t spins = 0; p.pending.load(std::memory_order_acquire) != 0; ++spins) {
        cpu_relax();
        if ((spins & 255u) == 255u) std::this_thread::yield();
    }

    std::exception_ptr first;
    for (auto& e : p.errors) {
        if (e && !first) first = e;
        e = nullptr;
    }
    p.busy.store(false, std::memory_order_release);
    if (first) std::rethrow_exception(first);
}

} // namespace rewind

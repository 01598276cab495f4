// A fixed pool of worker threads for splitting kernels by output rows. One pool per context
// (target and draft each own one): no process-global state. parallel_for never allocates.
#pragma once
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace rwd {

// A non-owning reference to a callable `void(int64_t begin, int64_t end)`.
class RangeFn {
public:
    template <class F>
    RangeFn(F& f) : obj_(static_cast<void*>(&f)), call_([](void* o, int64_t b, int64_t e) { (*static_cast<F*>(o))(b, e); }) {}
    void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

private:
    void* obj_;
    void (*call_)(void*, int64_t, int64_t);
};

class ThreadPool {
public:
    // n_threads >= 1 (the calling thread counts as one); throws rwd::Error (argument) otherwise.
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const;
    // Most chunks one call may be split into, per thread.
    static constexpr int64_t kMaxChunksPerThread = 8;
    // Splits [0, n) into at most max_chunks contiguous chunks (default and upper bound: size(),
    // resp. kMaxChunksPerThread * size(); each a multiple of `grain` except the last) and runs
    // fn(begin, end) on each; threads claim chunks as they come free, so with more chunks than
    // threads a descheduled worker holds up only its current chunk. Returns when all are done.
    // The split never changes what a single index computes, only who computes it.
    void parallel_for(int64_t n, RangeFn fn, int64_t grain = 1, int64_t max_chunks = 0);
    template <class F>
    void run(int64_t n, F&& f, int64_t grain = 1, int64_t max_chunks = 0) {
        parallel_for(n, RangeFn(f), grain, max_chunks);
    }

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Runs fn over [0, n) on `pool`, or inline on the caller when pool is null.
template <class F>
inline void parallel_rows(ThreadPool* pool, int64_t n, F&& f, int64_t grain = 1) {
    if (pool && pool->size() > 1 && n > 1) pool->run(n, f, grain);
    else if (n > 0) f(int64_t{0}, n);
}

} // namespace rwd

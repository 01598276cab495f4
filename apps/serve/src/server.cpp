// rewind serve's Server: checks the options, binds, loads the model and starts the scheduler,
// serves, and shuts down in order. The parts live beside it: routes (HTTP), job_builder (request
// to job), scheduler (decoding, prefix cache), response_writer (JSON and SSE).
#include "rewind/serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "rewind/error.h"
#include "routes.h"
#include "server_state.h"

namespace rwd::serve {

struct Server::Impl {
    explicit Impl(ServerOptions o) : s(std::move(o)) {}
    ServerState s;
    httplib::Server svr; // after s: its handlers refer to s
    int port = -1;
    int listen_fd = -1; // the listening socket (bind())
    std::once_flag shutdown_once;
};

namespace {

void check_options(const ServerOptions& o) {
    if (o.parallel < 1) throw Error("serve: --parallel must be >= 1");
    if (o.k < 1 || o.k > 16) throw Error("serve: -k must be in [1, 16]");
    if (o.tree < 0 || o.tree > 16) throw Error("serve: --tree must be in [0, 16]");
    if (o.threads < 1) throw Error("serve: --threads must be >= 1");
    if (o.ctx < 0) throw Error("serve: --ctx must be >= 0");
    if (o.port < 0 || o.port > 65535) throw Error("serve: --port must be in [0, 65535]");
    // "ref" copies from the request's documents: it cannot be every request's source.
    if (!is_source_name(o.spec) || o.spec == "ref") throw Error("serve: --spec must be one of " + source_choices() + " but ref");
    if (o.spec == "draft" && o.draft_path.empty()) throw Error("serve: --spec draft needs --draft MODEL");
    if (o.http_threads < 2) throw Error("serve: --http-threads must be >= 2");
    if (o.throttle_ms < 0 || o.throttle_ms > 10000) throw Error("serve: --throttle-ms must be in [0, 10000]");
    if (o.replica_id.size() > 64 || o.replica_id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                                   "0123456789._-") != std::string::npos)
        throw Error("serve: --replica-id must be at most 64 characters of A-Z a-z 0-9 . _ -");
}

// Waits until done() or `seconds` have passed.
template <class Done>
void wait_until(double seconds, Done done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

} // namespace

Server::Server(ServerOptions opts) {
    check_options(opts);
    impl_ = std::make_unique<Impl>(std::move(opts));
    add_routes(impl_->svr, impl_->s);
}

Server::~Server() {
    shutdown();
    impl_->s.scheduler.reset(); // cancels what is left and joins its thread
}

void Server::bind() {
    Impl& m = *impl_;
    const ServerOptions& o = m.s.opts;
    // SO_REUSEADDR (a restart finds the port free of TIME_WAIT), not cpp-httplib's default
    // SO_REUSEPORT, which would let a second process bind the same port and take connections.
    // The listening socket is kept, to deepen its accept queue below.
    m.svr.set_socket_options([&m](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        m.listen_fd = static_cast<int>(sock);
    });
    if (o.port == 0) {
        m.port = m.svr.bind_to_any_port(o.host);
    } else {
        m.port = m.svr.bind_to_port(o.host, o.port) ? o.port : -1;
    }
    if (m.port < 0) throw Error(ErrorCode::io, "serve: cannot listen on " + o.host + ":" + std::to_string(o.port));
    // cpp-httplib 0.11 listens with a backlog of 5: a burst of new clients (16 at once in the load
    // test) overflows it and the dropped SYNs are retried after 1 s. Listening again on the same
    // socket only resizes its queue (Linux).
    if (m.listen_fd >= 0) ::listen(m.listen_fd, 512);
}

int Server::bound_port() const { return impl_->port; }

void Server::load() {
    ServerState& s = impl_->s;
    const ServerOptions& o = s.opts;
    try {
        s.model = Model::load(o.model_path);
        std::shared_ptr<const Model> draft = o.draft_path.empty() ? nullptr : Model::load(o.draft_path);
        const int64_t n_ctx = s.model->hparams().n_ctx_train;
        s.context = o.ctx > 0 ? std::min(o.ctx, n_ctx) : n_ctx;
        ContextOptions co;
        co.n_threads = o.threads;
        co.pool = std::make_shared<ThreadPool>(o.threads);
        s.ctx = std::make_unique<Context>(s.model, co);
        s.jobs = std::make_unique<JobBuilder>(o, s.model, std::move(draft), co.pool, s.context);
        speculate::BatchOptions bo;
        bo.kv_budget_bytes = o.kv_budget_bytes;
        bo.kv_type = o.kv_type;
        bo.keep_caches = o.cache_budget_bytes > 0;
        const SchedulerOptions so{.parallel = o.parallel, .max_queue = o.max_queue,
                                  .cache_budget_bytes = o.cache_budget_bytes, .throttle_ms = o.throttle_ms};
        s.scheduler = std::make_unique<Scheduler>(*s.ctx, bo, so, s.metrics);
    } catch (const Error& e) {
        s.load_error = e.what();
        s.phase = ServerState::Phase::Failed;
        throw;
    }
    s.scheduler->start();
    s.phase = ServerState::Phase::Ready;
}

void Server::run() { impl_->svr.listen_after_bind(); }

void Server::shutdown() {
    Impl& m = *impl_;
    std::call_once(m.shutdown_once, [&m] {
        ServerState& s = m.s;
        // New requests get 503 from here on. The listening socket stays open until the end:
        // cpp-httplib stops writing every streamed response once it is closed.
        s.draining = true;
        if (Scheduler* sched = s.phase == ServerState::Phase::Ready ? s.scheduler.get() : nullptr) {
            wait_until(s.opts.shutdown_timeout_s, [sched] { return sched->unfinished() == 0; });
            sched->cancel_all(); // what is left ends at the next pass, its stream with finish_reason and [DONE]
            wait_until(5.0, [sched] { return sched->unfinished() == 0; });
        }
        wait_until(2.0, [&s] { return s.streams == 0; });
        m.svr.stop(); // run() returns once the open connections are done
    });
}

} // namespace rwd::serve

// `rewind serve`: the OpenAI-compatible HTTP server (apps/serve). This file is only the command
// line and the process's signals: SIGINT/SIGTERM start a graceful shutdown (stop accepting, let
// running requests finish up to --shutdown-timeout, cancel the rest, exit 0).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <pthread.h>

#include "commands.h"
#include "options.h"
#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/serve/server.h"

namespace rwd::cli {
namespace {

struct ServeFlags {
    serve::ServerOptions o;
    ModelFlags model;
    SpecFlags spec;
    ChatFlags chat;
    std::string api_key_file;
    uint64_t cache_budget_mib = 64;
    std::string kv_type = "auto";

    ServeFlags() { spec.spec = o.spec; spec.k = o.k; spec.tree = o.tree; }
    // The shared groups' flags into the server's options.
    void apply() {
        o.model_path = model.model;
        o.threads = model.threads;
        o.spec = spec.spec;
        o.k = spec.k;
        o.tree = spec.tree;
        o.draft_path = spec.draft;
        o.chat_template = chat.template_text();
        o.write_timeout_s = o.read_timeout_s;
        o.kv_type = kv_type_of(kv_type);
    }
};

int run_serve(ServeFlags& f) {
    if (!f.api_key_file.empty()) {
        std::string key = read_file_limited(f.api_key_file, 4096, "API key file");
        while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ')) key.pop_back();
        if (key.empty()) throw Error("serve: the API key file is empty");
        f.o.api_key = key;
    }
    f.o.cache_budget_bytes = f.cache_budget_mib << 20;
    // Signals go to one thread that waits for them (blocked here, before any thread starts, so
    // every thread inherits the mask); a peer that hangs up must not kill the process (SIGPIPE).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    serve::Server server(f.o);
    server.bind();
    std::fprintf(stderr, "rewind serve: listening on http://%s:%d (loading %s)\n", f.o.host.c_str(), server.bound_port(),
                 f.o.model_path.c_str());
    std::thread http([&server] { server.run(); });
    std::atomic<bool> ending{false};
    std::thread waiter([&server, &ending, set] {
        int sig = 0;
        sigwait(&set, &sig);
        if (ending) return; // woken by run_serve itself: the server has stopped
        std::fprintf(stderr, "rewind serve: signal %d: draining\n", sig);
        server.shutdown();
    });
    int rc = 0;
    try {
        server.load();
        std::fprintf(stderr, "rewind serve: ready on http://%s:%d\n", f.o.host.c_str(), server.bound_port());
    } catch (const Error& e) {
        std::fprintf(stderr, "rewind serve: %s\n", e.what());
        rc = 1;
        server.shutdown();
    }
    http.join();
    // The waiter may still be in sigwait: send it SIGTERM itself (blocked, so it is only queued).
    if (waiter.joinable()) {
        ending = true;
        pthread_kill(waiter.native_handle(), SIGTERM);
        waiter.join();
    }
    std::fprintf(stderr, "rewind serve: stopped\n");
    return rc;
}

// The server's own flags: where it listens, what it admits, its limits and timeouts.
void add_server_flags(CLI::App& cmd, ServeFlags& f) {
    serve::ServerOptions& o = f.o;
    cmd.add_option("--alias", o.model_id, "The model name /v1/models reports (default: the file name)");
    cmd.add_option("--host", o.host, "Address to bind")->capture_default_str();
    cmd.add_option("--port", o.port, "Port (0: any free port, printed on stderr)")->capture_default_str();
    cmd.add_option("--parallel", o.parallel, "Requests decoding at once")->capture_default_str();
    cmd.add_option("-c,--ctx", o.ctx, "Context positions per request; 0 = the model's")->capture_default_str();
    cmd.add_option("--kv-budget", o.kv_budget_bytes, "KV cache bytes of the running requests; 0 = no limit")
        ->capture_default_str();
    add_kv_type_flag(cmd, f.kv_type);
    cmd.add_option("--cache-budget-mib", f.cache_budget_mib,
                   "KV cache of finished requests kept for prefix reuse, MiB; 0 = none")
        ->capture_default_str();
    auto* key = cmd.add_option("--api-key", o.api_key, "Require Authorization: Bearer KEY (all but /health)");
    cmd.add_option("--api-key-file", f.api_key_file, "Read the API key from this file")->excludes(key)->check(CLI::ExistingFile);
    cmd.add_option("--max-body", o.max_body_bytes, "Largest request body in bytes (413 above)")->capture_default_str();
    cmd.add_option("--max-queue", o.max_queue, "Requests waiting for a slot (503 above)")->capture_default_str();
    cmd.add_option("--timeout", o.read_timeout_s, "Read and write timeout of a connection, seconds")->capture_default_str();
    cmd.add_option("--shutdown-timeout", o.shutdown_timeout_s,
                   "Seconds running requests get to finish after SIGINT/SIGTERM")
        ->capture_default_str();
    cmd.add_option("--http-threads", o.http_threads, "Connections served at once")->capture_default_str();
    cmd.add_option("--replica-id", o.replica_id,
                   "This replica's name behind a load balancer: the X-Rewind-Replica header of every response "
                   "and rewind_replica_info in /metrics");
    cmd.add_option("--throttle-ms", o.throttle_ms, "Sleep this long after each pass (tests of disconnects and shutdown only)")
        ->capture_default_str();
}

} // namespace

void register_serve(CLI::App& app, Runner& run) {
    auto f = std::make_shared<ServeFlags>();
    CLI::App* cmd = app.add_subcommand(
        "serve", "Serve the model over an OpenAI-compatible HTTP API (continuous batching); the sampling and "
                 "speculation flags are the defaults of requests that do not set them");
    add_model_flags(*cmd, f->model, kModelPath | kThreads);
    add_server_flags(*cmd, *f);
    add_sampling_flags(*cmd, f->o.sampling);
    add_spec_flags(*cmd, f->spec, 0);
    add_chat_flags(*cmd, f->chat, nullptr, /*with_system=*/false);
    cmd->callback([f, &run] {
        run = [f] {
            f->apply();
            return run_serve(*f);
        };
    });
}

} // namespace rwd::cli

// rewind serve in this process on an ephemeral loopback port, for the server tests: bound, run on
// a thread of its own and loaded on construction; shut down and joined on destruction.
#pragma once
#include <httplib.h>

#include <memory>
#include <thread>

#include "rewind/serve/server.h"

namespace rwd::serve {

class LoopbackServer {
public:
    // `read_timeout_s`: how long the client waits for an answer.
    explicit LoopbackServer(const ServerOptions& o, int read_timeout_s = 60) : server_(std::make_unique<Server>(o)) {
        server_->bind();
        runner_ = std::thread([this] { server_->run(); });
        server_->load();
        client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->bound_port());
        client_->set_read_timeout(read_timeout_s, 0);
    }
    ~LoopbackServer() {
        server_->shutdown();
        runner_.join();
    }
    LoopbackServer(const LoopbackServer&) = delete;
    LoopbackServer& operator=(const LoopbackServer&) = delete;

    Server& server() { return *server_; }
    httplib::Client& client() { return *client_; }

private:
    std::unique_ptr<Server> server_;
    std::thread runner_;
    std::unique_ptr<httplib::Client> client_;
};

} // namespace rwd::serve

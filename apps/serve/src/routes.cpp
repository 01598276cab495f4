// The routes: each handler parses and validates (api.h), has the JobBuilder map the request to a
// job, submits it to the scheduler and hands the job to a response writer.
#include "routes.h"

#include <chrono>

#include <nlohmann/json.hpp>

#include "response_writer.h"

namespace rwd::serve {

namespace {

using json = nlohmann::ordered_json;
using Handled = httplib::Server::HandlerResponse;

void require_ready(const ServerState& s) {
    const ServerState::Phase p = s.phase;
    if (p != ServerState::Phase::Ready)
        throw ApiError(503, p == ServerState::Phase::Loading ? "the model is loading" : "the model failed to load: " + s.load_error,
                       "", "server_error", "model_not_ready");
    if (s.draining) throw ApiError(503, "the server is shutting down", "", "server_error", "shutting_down");
}

bool authorized(const ServerState& s, const httplib::Request& req) {
    if (s.opts.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    static constexpr std::string_view kBearer = "Bearer ";
    if (h.size() < kBearer.size() || h.compare(0, kBearer.size(), kBearer) != 0) return false;
    return constant_time_equal(std::string_view(h).substr(kBearer.size()), s.opts.api_key);
}

json parse_body(const httplib::Request& req) {
    json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw ApiError(400, "the body must be a JSON object", "", "invalid_request_error", "invalid_json");
    return j;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void configure(httplib::Server& svr, const ServerOptions& o) {
    svr.set_payload_max_length(o.max_body_bytes);
    svr.set_read_timeout(o.read_timeout_s, 0);
    svr.set_write_timeout(o.write_timeout_s, 0);
    svr.set_tcp_nodelay(true); // SSE chunks are small: Nagle would hold each for the peer's delayed ACK
    svr.set_keep_alive_timeout(2); // an idle connection also delays the end of a shutdown this long
    const int n = o.http_threads;
    svr.new_task_queue = [n] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    // Every response, errors and streams included, says which replica made it.
    if (!o.replica_id.empty()) svr.set_default_headers({{"X-Rewind-Replica", o.replica_id}});
}

// The drain and key guards before routing; OpenAI error bodies for what httplib refuses or throws.
void add_guards(httplib::Server& svr, ServerState& s) {
    svr.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
        if (s.draining && req.path != "/health" && req.path != "/metrics") {
            send_error(res, ApiError(503, "the server is shutting down", "", "server_error", "shutting_down"));
            return Handled::Handled;
        }
        if (req.path == "/health" || authorized(s, req)) return Handled::Unhandled;
        send_error(res, ApiError(401, "a valid API key is required (Authorization: Bearer KEY)", "", "authentication_error",
                                 "invalid_api_key"));
        return Handled::Handled;
    });
    svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return Handled::Unhandled;
        std::string msg = "HTTP " + std::to_string(res.status);
        if (res.status == 413) msg = "the request body is larger than the server's limit";
        if (res.status == 404) msg = "no such endpoint";
        if (res.status == 408) msg = "the request was not received in time";
        send_error(res, ApiError(res.status, msg));
        return Handled::Handled;
    }));
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
            std::rethrow_exception(ep);
        } catch (const ApiError& e) {
            send_error(res, e);
        } catch (const std::exception& e) {
            send_error(res, ApiError(500, e.what()));
        } catch (...) {
            send_error(res, ApiError(500, "internal error"));
        }
    });
    svr.set_logger([&s](const httplib::Request& req, const httplib::Response& res) {
        static const char* const kPaths[] = {"/health", "/v1/models", "/v1/chat/completions", "/v1/completions",
                                             "/metrics", "/tokenize", "/detokenize", "/apply-template"};
        std::string path = "other"; // unknown paths share one label: clients cannot grow the metrics
        for (const char* p : kPaths)
            if (req.path == p) path = p;
        s.metrics.count_http(path, res.status);
    });
}

void health(const ServerState& s, httplib::Response& res) {
    switch (s.phase.load()) {
    case ServerState::Phase::Ready:
        res.set_content(s.draining ? R"({"status":"shutting down"})" : R"({"status":"ok"})", "application/json");
        if (s.draining) res.status = 503;
        break;
    case ServerState::Phase::Loading:
        res.status = 503;
        res.set_content(R"({"status":"loading model"})", "application/json");
        break;
    case ServerState::Phase::Failed:
        res.status = 503;
        res.set_content(json{{"status", "error"}, {"error", s.load_error}}.dump(), "application/json");
        break;
    }
}

void add_info(httplib::Server& svr, ServerState& s) {
    svr.Get("/health", [&s](const httplib::Request&, httplib::Response& res) { health(s, res); });
    svr.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
        json m = {{"id", s.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "rewind"}};
        if (s.phase == ServerState::Phase::Ready) m["context_length"] = s.context;
        res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
    });
    svr.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
        std::string text = s.metrics.render(s.opts.kv_budget_bytes, s.opts.cache_budget_bytes);
        if (!s.opts.replica_id.empty()) // an info metric: join it on the scrape's instance label
            text += "# HELP rewind_replica_info This replica's --replica-id.\n# TYPE rewind_replica_info gauge\n"
                    "rewind_replica_info{replica=\"" + s.opts.replica_id + "\"} 1\n";
        res.set_content(text, "text/plain; version=0.0.4");
    });
}

void tokenize(const ServerState& s, const httplib::Request& req, httplib::Response& res) {
    require_ready(s);
    const json j = parse_body(req);
    const auto c = j.find("content");
    if (c == j.end() || !c->is_string()) throw ApiError(400, "'content' must be a string", "content");
    bool special = false;
    if (const auto a = j.find("add_special"); a != j.end()) {
        if (!a->is_boolean()) throw ApiError(400, "'add_special' must be a boolean", "add_special");
        special = a->get<bool>();
    }
    const auto ids = s.jobs->tokenizer().encode(c->get<std::string>(), special ? AddBos::Default : AddBos::No);
    res.set_content(json{{"tokens", ids}}.dump(), "application/json");
}

void detokenize(const ServerState& s, const httplib::Request& req, httplib::Response& res) {
    require_ready(s);
    const json j = parse_body(req);
    const auto t = j.find("tokens");
    if (t == j.end() || !t->is_array()) throw ApiError(400, "'tokens' must be a list of token ids", "tokens");
    const Tokenizer& tok = s.jobs->tokenizer();
    Utf8StreamDecoder dec(tok, false);
    std::string text;
    for (const auto& v : *t) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.n_vocab())
            throw ApiError(400, "'tokens' holds " + v.dump() + ", not a token id of this vocabulary", "tokens");
        text += dec.push(static_cast<TokenId>(v.get<int64_t>()));
    }
    text += dec.flush();
    res.set_content(dump(json{{"content", text}}), "application/json");
}

void add_text_tools(httplib::Server& svr, ServerState& s) {
    svr.Post("/tokenize", [&s](const httplib::Request& q, httplib::Response& r) { tokenize(s, q, r); });
    svr.Post("/detokenize", [&s](const httplib::Request& q, httplib::Response& r) { detokenize(s, q, r); });
    svr.Post("/apply-template", [&s](const httplib::Request& req, httplib::Response& res) {
        require_ready(s);
        const std::string prompt = s.jobs->render_chat(parse_request(Endpoint::Chat, req.body));
        res.set_content(dump(json{{"prompt", prompt}}), "application/json");
    });
}

// The jobs answering `r`: one per choice, choice i seeded seed + i; the choices after the first
// wait for it to prefill the prompt they share (Job::leader).
std::vector<std::shared_ptr<Job>> build_choices(const ServerState& s, const ServeRequest& r) {
    std::vector<std::shared_ptr<Job>> jobs;
    ServeRequest ri = r;
    const uint64_t seed = r.seed.value_or(s.opts.sampling.seed); // the request's, else the server's default
    for (int i = 0; i < r.n; ++i) {
        ri.seed = seed + static_cast<uint64_t>(i);
        jobs.push_back(s.jobs->build(ri));
        if (i > 0) jobs.back()->leader = jobs.front();
    }
    return jobs;
}

void complete(ServerState& s, Endpoint ep, const httplib::Request& req, httplib::Response& res) {
    ServeRequest r;
    std::vector<std::shared_ptr<Job>> jobs;
    size_t submitted = 0;
    try {
        require_ready(s);
        r = parse_request(ep, req.body);
        jobs = build_choices(s, r);
        for (; submitted < jobs.size(); ++submitted) s.scheduler->submit(jobs[submitted]);
    } catch (const ApiError& e) {
        for (size_t i = 0; i < submitted; ++i) jobs[i]->cancel = true; // a full queue took only some choices
        if (submitted > 0) s.scheduler->wake();
        send_error(res, e);
        if (e.status == 503) res.set_header("Retry-After", "1");
        return;
    }
    ResponseHeader h;
    h.endpoint = ep;
    h.id = (ep == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + std::to_string(++s.completions);
    h.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    h.model = s.model_id;
    if (!r.stream) return write_answer(res, jobs, h, s.jobs->tokenizer(), r.stop, s.metrics);
    Scheduler* scheduler = s.scheduler.get();
    auto writer = std::make_shared<SseWriter>(std::move(jobs), std::move(h), s.jobs->tokenizer(), r.stop, r.include_usage,
                                              s.metrics, [scheduler] { scheduler->wake(); });
    start_stream(res, std::move(writer), s.streams);
}

} // namespace

void add_routes(httplib::Server& svr, ServerState& s) {
    configure(svr, s.opts);
    add_guards(svr, s);
    add_info(svr, s);
    add_text_tools(svr, s);
    svr.Post("/v1/chat/completions", [&s](const httplib::Request& q, httplib::Response& r) { complete(s, Endpoint::Chat, q, r); });
    svr.Post("/v1/completions", [&s](const httplib::Request& q, httplib::Response& r) { complete(s, Endpoint::Completions, q, r); });
}

} // namespace rwd::serve

// Parsing and validation of the OpenAI-compatible request bodies: every field rewind reads is
// type- and range-checked here, and every field it would have to ignore to answer is refused.
#include "rewind/serve/api.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rwd::serve {

// Ordered: tools and tool-call arguments keep the key order the client sent, which the chat
// template's `tojson` renders.
using json = nlohmann::ordered_json;

namespace {

const char* type_for(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "server_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
    throw ApiError(400, "'" + param + "' " + message, param);
}

const char* type_name(const json& v) {
    return v.type_name(); // "null", "object", "array", "string", "boolean", "number"
}

std::string get_string(const json& v, const std::string& param) {
    if (!v.is_string()) bad(param, std::string("must be a string, not ") + type_name(v));
    return v.get<std::string>();
}

bool get_bool(const json& v, const std::string& param) {
    if (!v.is_boolean()) bad(param, std::string("must be a boolean, not ") + type_name(v));
    return v.get<bool>();
}

double get_number(const json& v, const std::string& param, double lo, double hi) {
    if (!v.is_number()) bad(param, std::string("must be a number, not ") + type_name(v));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
        bad(param, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " + v.dump());
    return d;
}

int64_t get_int(const json& v, const std::string& param, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) bad(param, std::string("must be an integer, not ") + v.dump().substr(0, 40));
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        // (JSON's non-negative integers arrive unsigned: the lower bound counts for them too.)
        if (u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
            bad(param, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return static_cast<int64_t>(u);
    }
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) bad(param, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return i;
}

// OpenAI content: a string, or a list of {"type": "text", "text": ...} parts (joined).
std::string text_or_parts(const json& v, const std::string& param, std::string* unsupported = nullptr) {
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) bad(param, std::string("must be a string or a list of text parts, not ") + type_name(v));
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string p = param + "[" + std::to_string(i) + "]";
        const json& part = v[i];
        if (!part.is_object()) bad(p, "must be an object {\"type\": \"text\", \"text\": ...}");
        const auto t = part.find("type");
        if (t == part.end()) bad(p + ".type", "is required");
        const std::string type = get_string(*t, p + ".type");
        if (type != "text") {
            if (unsupported) {
                *unsupported = "content parts of type '" + type + "'";
                return {};
            }
            bad(p + ".type", "must be 'text' (rewind takes text only), got '" + type + "'");
        }
        const auto x = part.find("text");
        if (x == part.end()) bad(p + ".text", "is required");
        out += get_string(*x, p + ".text");
    }
    return out;
}

// Fields that would change what the client gets and that rewind does not implement.
void refuse_unimplemented(const json& j, Endpoint ep) {
    static const char* const kRefused[] = {"functions", "function_call", "audio", "modalities", "suffix", "best_of",
                                           "echo", "web_search_options"};
    for (const char* f : kRefused) {
        const auto it = j.find(f);
        if (it == j.end() || it->is_null()) continue;
        // Neutral values change nothing: accept them, as clients send them by default.
        const std::string name = f;
        if (name == "echo" && it->is_boolean() && !it->get<bool>()) continue;
        if (name == "best_of" && it->is_number_integer() && it->get<int64_t>() == 1) continue;
        if (name == "functions" && it->is_array() && it->empty()) continue;
        throw ApiError(400, "'" + name + "' is not supported by rewind serve", name, "invalid_request_error", "unsupported_parameter");
    }
    if (ep == Endpoint::Completions)
        for (const char* f : {"tools", "tool_choice", "top_logprobs"})
            if (const auto it = j.find(f); it != j.end() && !it->is_null())
                throw ApiError(400, std::string("'") + f + "' is only for chat completions", f);
}

// A field's value, or null when absent or JSON null (OpenAI's clients send null for "unset").
const json* field(const json& j, const char* name) {
    const auto it = j.find(name);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

// An assistant message's tool_calls[i]: {id, type: "function", function: {name, arguments}}, the
// arguments OpenAI's JSON string (or, as Hugging Face has it, the object itself).
ChatToolCall parse_tool_call(const json& c, const std::string& p) {
    if (!c.is_object()) bad(p, "must be an object {id, type, function}");
    ChatToolCall call;
    if (const auto id = c.find("id"); id != c.end() && !id->is_null()) call.id = get_string(*id, p + ".id");
    if (const auto t = c.find("type"); t != c.end() && !t->is_null() && get_string(*t, p + ".type") != "function")
        bad(p + ".type", "must be 'function'");
    const auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) bad(p + ".function", "must be an object {name, arguments}");
    const auto name = fn->find("name");
    if (name == fn->end()) bad(p + ".function.name", "is required");
    call.name = get_string(*name, p + ".function.name");
    const auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) bad(p + ".function.arguments", "is required");
    if (args->is_object()) {
        call.arguments = args->dump();
    } else {
        call.arguments = get_string(*args, p + ".function.arguments");
        const json parsed = json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded() || !parsed.is_object())
            bad(p + ".function.arguments", "must be a JSON object's text, got " + json(call.arguments.substr(0, 40)).dump());
    }
    return call;
}

ChatMessage parse_message(const json& msg, const std::string& p) {
    if (!msg.is_object()) bad(p, "must be an object {role, content}");
    ChatMessage cm;
    const auto role = msg.find("role");
    if (role == msg.end()) bad(p + ".role", "is required");
    cm.role = get_string(*role, p + ".role");
    if (cm.role == "developer") cm.role = "system"; // OpenAI's newer name for it
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
        bad(p + ".role", "must be system, user, assistant or tool, got '" + cm.role + "'");
    const json* calls = field(msg, "tool_calls");
    if (calls && cm.role != "assistant") bad(p + ".tool_calls", "is only allowed on assistant messages");
    if (calls && !calls->is_array()) bad(p + ".tool_calls", "must be a list");
    const auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
        if (cm.role != "assistant") bad(p + ".content", "is required");
    } else {
        cm.content = text_or_parts(*content, p + ".content");
    }
    if (calls)
        for (size_t i = 0; i < calls->size(); ++i)
            cm.tool_calls.push_back(parse_tool_call((*calls)[i], p + ".tool_calls[" + std::to_string(i) + "]"));
    if (const json* id = field(msg, "tool_call_id")) cm.tool_call_id = get_string(*id, p + ".tool_call_id");
    return cm;
}

// tools (function tools only), tool_choice, parallel_tool_calls.
void parse_tools(const json& j, ServeRequest& r) {
    const json* tools = field(j, "tools");
    if (tools) {
        if (!tools->is_array()) bad("tools", std::string("must be a list, not ") + type_name(*tools));
        for (size_t i = 0; i < tools->size(); ++i) {
            const std::string p = "tools[" + std::to_string(i) + "]";
            const json& t = (*tools)[i];
            if (!t.is_object()) bad(p, "must be an object {type, function}");
            const auto type = t.find("type");
            if (type == t.end() || get_string(*type, p + ".type") != "function") bad(p + ".type", "must be 'function'");
            const auto fn = t.find("function");
            if (fn == t.end() || !fn->is_object()) bad(p + ".function", "must be an object {name, description, parameters}");
            const auto name = fn->find("name");
            if (name == fn->end() || get_string(*name, p + ".function.name").empty()) bad(p + ".function.name", "is required");
        }
        if (!tools->empty()) r.tools = tools->dump();
    }
    if (const json* c = field(j, "tool_choice")) {
        if (c->is_object()) {
            const auto t = c->find("type");
            if (t == c->end() || get_string(*t, "tool_choice.type") != "function") bad("tool_choice.type", "must be 'function'");
            const auto fn = c->find("function");
            if (fn == c->end() || !fn->is_object()) bad("tool_choice.function", "must be an object {name}");
            const auto name = fn->find("name");
            if (name == fn->end()) bad("tool_choice.function.name", "is required");
            r.tool_choice = ToolChoice::Function;
            r.tool_choice_name = get_string(*name, "tool_choice.function.name");
            bool known = false;
            if (tools)
                for (const json& t2 : *tools) known = known || t2["function"]["name"] == r.tool_choice_name;
            if (!known) bad("tool_choice.function.name", "names '" + r.tool_choice_name + "', which is not among the tools");
        } else {
            const std::string v = get_string(*c, "tool_choice");
            if (v != "auto" && v != "none" && v != "required")
                bad("tool_choice", "must be 'none', 'auto', 'required' or {\"type\": \"function\", ...}");
            r.tool_choice = v == "none" ? ToolChoice::None : v == "required" ? ToolChoice::Required : ToolChoice::Auto;
            if (r.tool_choice == ToolChoice::Required && r.tools.empty()) bad("tool_choice", "'required' needs tools");
        }
    }
    if (const json* v = field(j, "parallel_tool_calls")) r.parallel_tool_calls = get_bool(*v, "parallel_tool_calls");
}

void parse_messages(const json& j, ServeRequest& r, const ParseLimits& limits) {
    const json* m = field(j, "messages");
    if (!m) bad("messages", "is required");
    if (!m->is_array()) bad("messages", std::string("must be a list, not ") + type_name(*m));
    if (m->empty()) bad("messages", "must hold at least one message");
    if (m->size() > limits.max_messages) bad("messages", "holds more than " + std::to_string(limits.max_messages) + " messages");
    for (size_t i = 0; i < m->size(); ++i) r.messages.push_back(parse_message((*m)[i], "messages[" + std::to_string(i) + "]"));
}

void parse_prompt(const json& j, ServeRequest& r) {
    const json* p = field(j, "prompt");
    if (!p) bad("prompt", "is required");
    if (p->is_string()) {
        r.prompt_text = p->get<std::string>();
    } else if (p->is_array()) {
        if (p->empty()) bad("prompt", "must not be empty");
        if ((*p)[0].is_string()) {
            if (p->size() != 1) bad("prompt", "a list of several prompts is not supported (one per request)");
            r.prompt_text = (*p)[0].get<std::string>();
        } else {
            r.prompt_is_ids = true;
            for (size_t i = 0; i < p->size(); ++i)
                r.prompt_ids.push_back(get_int((*p)[i], "prompt[" + std::to_string(i) + "]", 0, std::numeric_limits<int32_t>::max()));
        }
    } else {
        bad("prompt", std::string("must be a string or a list of token ids, not ") + type_name(*p));
    }
    if (!r.prompt_is_ids && r.prompt_text.empty()) bad("prompt", "must not be empty");
}

// max_tokens and the sampling settings.
void parse_sampling(const json& j, ServeRequest& r) {
    const json* mt = field(j, "max_completion_tokens");
    const char* mt_name = "max_completion_tokens";
    if (!mt) {
        mt = field(j, "max_tokens");
        mt_name = "max_tokens";
    }
    if (mt) r.max_tokens = get_int(*mt, mt_name, 0, std::numeric_limits<int32_t>::max());
    if (const json* v = field(j, "temperature")) r.temperature = static_cast<float>(get_number(*v, "temperature", 0, 2));
    if (const json* v = field(j, "top_p")) {
        r.top_p = static_cast<float>(get_number(*v, "top_p", 0, 1));
        if (*r.top_p <= 0) bad("top_p", "must be > 0");
    }
    if (const json* v = field(j, "top_k")) r.top_k = static_cast<int32_t>(get_int(*v, "top_k", 0, 1 << 20));
    if (const json* v = field(j, "min_p")) r.min_p = static_cast<float>(get_number(*v, "min_p", 0, 1));
    if (const json* v = field(j, "repeat_penalty")) {
        r.repeat_penalty = static_cast<float>(get_number(*v, "repeat_penalty", 0, 10));
        if (*r.repeat_penalty <= 0) bad("repeat_penalty", "must be > 0 (1: off)");
    }
    if (const json* v = field(j, "repeat_last_n")) {
        const int64_t n = get_int(*v, "repeat_last_n", -1, std::numeric_limits<int32_t>::max());
        r.repeat_last_n = n < 0 ? std::numeric_limits<int32_t>::max() : static_cast<int32_t>(n);
    }
    if (const json* v = field(j, "n")) r.n = static_cast<int>(get_int(*v, "n", 1, 16));
    if (const json* v = field(j, "seed")) {
        if (!v->is_number_integer()) bad("seed", "must be an integer");
        r.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
    }
}

void parse_stop(const json& j, ServeRequest& r, const ParseLimits& limits) {
    if (const json* v = field(j, "stop")) {
        if (v->is_string()) {
            r.stop.push_back(v->get<std::string>());
        } else if (v->is_array()) {
            for (size_t i = 0; i < v->size(); ++i) r.stop.push_back(get_string((*v)[i], "stop[" + std::to_string(i) + "]"));
        } else {
            bad("stop", std::string("must be a string or a list of strings, not ") + type_name(*v));
        }
        if (r.stop.size() > limits.max_stop) bad("stop", "holds more than " + std::to_string(limits.max_stop) + " strings");
        for (const std::string& s : r.stop) {
            if (s.empty()) bad("stop", "must not hold an empty string");
            if (s.size() > limits.max_stop_bytes) bad("stop", "strings are at most " + std::to_string(limits.max_stop_bytes) + " bytes");
        }
    }
}

// stream, stream_options, user, prediction.
void parse_delivery(const json& j, ServeRequest& r) {
    if (const json* v = field(j, "stream")) r.stream = get_bool(*v, "stream");
    if (const json* v = field(j, "stream_options")) {
        if (!v->is_object()) bad("stream_options", "must be an object");
        if (!r.stream) bad("stream_options", "is only allowed with stream: true");
        const auto u = v->find("include_usage");
        if (u != v->end() && !u->is_null()) r.include_usage = get_bool(*u, "stream_options.include_usage");
    }
    if (const json* v = field(j, "user")) r.user = get_string(*v, "user");
    if (const json* v = field(j, "prediction")) {
        if (!v->is_object()) bad("prediction", "must be an object {\"type\": \"content\", \"content\": ...}");
        const auto t = v->find("type");
        if (t == v->end()) bad("prediction.type", "is required");
        if (get_string(*t, "prediction.type") != "content") bad("prediction.type", "must be 'content'");
        const auto c = v->find("content");
        if (c == v->end() || c->is_null()) bad("prediction.content", "is required");
        r.prediction = text_or_parts(*c, "prediction.content");
    }
}

void parse_speculation(const json& j, ServeRequest& r, const ParseLimits& limits) {
    if (const json* v = field(j, "speculation")) {
        if (!v->is_object()) bad("speculation", "must be an object {source, k, tree, references}");
        for (const auto& [key, val] : v->items()) {
            if (key == "source") {
                r.speculation.source = get_string(val, "speculation.source");
                if (!is_source_name(r.speculation.source)) bad("speculation.source", "must be one of " + source_choices());
            } else if (key == "k") {
                r.speculation.k = static_cast<int>(get_int(val, "speculation.k", 1, limits.max_k));
            } else if (key == "tree") {
                r.speculation.tree = static_cast<int>(get_int(val, "speculation.tree", 1, limits.max_tree));
            } else if (key == "references") {
                if (!val.is_array()) bad("speculation.references", "must be a list of strings");
                if (val.size() > limits.max_references)
                    bad("speculation.references", "holds more than " + std::to_string(limits.max_references) + " documents");
                for (size_t i = 0; i < val.size(); ++i) {
                    std::string doc = get_string(val[i], "speculation.references[" + std::to_string(i) + "]");
                    if (doc.empty()) bad("speculation.references[" + std::to_string(i) + "]", "must not be empty");
                    r.speculation.references.push_back(std::move(doc));
                }
            } else {
                bad("speculation." + key, "is not a speculation field (source, k, tree, references)");
            }
        }
        if (r.speculation.source == "ref" && r.speculation.references.empty() && !r.prediction)
            bad("speculation.references", "is required by source 'ref' (or give a prediction)");
        const std::string& src = r.speculation.source;
        if (!r.speculation.references.empty() && !src.empty() && src != "ref" && src != "auto")
            bad("speculation.references", "is only used by the sources 'ref' and 'auto'");
    }
}

// frequency_penalty, presence_penalty, logit_bias.
void parse_penalties(const json& j, ServeRequest& r) {
    if (const json* v = field(j, "frequency_penalty")) r.frequency_penalty = static_cast<float>(get_number(*v, "frequency_penalty", -2, 2));
    if (const json* v = field(j, "presence_penalty")) r.presence_penalty = static_cast<float>(get_number(*v, "presence_penalty", -2, 2));
    if (const json* v = field(j, "logit_bias")) {
        if (!v->is_object()) bad("logit_bias", "must be an object {\"token id\": bias}");
        if (v->size() > 1024) bad("logit_bias", "holds more than 1024 tokens");
        for (const auto& [key, val] : v->items()) {
            const std::string p = "logit_bias." + key;
            int64_t id = -1;
            const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
            if (digits) id = std::stoll(key);
            if (!digits || id > std::numeric_limits<int32_t>::max()) bad(p, "must be keyed by a token id (a decimal integer)");
            r.logit_bias.emplace_back(id, static_cast<float>(get_number(val, p, -100, 100)));
        }
    }
}

// Chat: logprobs (boolean) and top_logprobs ([0, 20], with logprobs only). Completions: the
// legacy logprobs: N (the sampled token and N alternatives).
void parse_logprobs(const json& j, ServeRequest& r) {
    const json* lp = field(j, "logprobs");
    if (r.endpoint == Endpoint::Completions) {
        if (lp) {
            r.top_logprobs = static_cast<int>(get_int(*lp, "logprobs", 0, 20));
            r.logprobs = true;
        }
        return;
    }
    if (lp) r.logprobs = get_bool(*lp, "logprobs");
    if (const json* t = field(j, "top_logprobs")) {
        r.top_logprobs = static_cast<int>(get_int(*t, "top_logprobs", 0, 20));
        if (!r.logprobs) bad("top_logprobs", "needs logprobs: true");
    }
}

// A JSON Schema given as an object (or a boolean schema), kept as its text.
std::string schema_text(const json& v, const std::string& param) {
    if (!v.is_object() && !v.is_boolean()) bad(param, std::string("must be a JSON Schema object, not ") + type_name(v));
    return v.dump();
}

OutputFormat parse_response_format(const json& v) {
    if (!v.is_object()) bad("response_format", "must be an object {\"type\": ...}");
    const auto t = v.find("type");
    if (t == v.end()) bad("response_format.type", "is required");
    const std::string type = get_string(*t, "response_format.type");
    OutputFormat f;
    f.param = "response_format";
    if (type == "text") return f;
    if (type == "json_object") {
        f.kind = OutputKind::JsonObject;
        return f;
    }
    if (type != "json_schema") bad("response_format.type", "must be 'text', 'json_object' or 'json_schema', got '" + type + "'");
    const auto js = v.find("json_schema");
    if (js == v.end() || !js->is_object()) bad("response_format.json_schema", "must be an object {name, schema, strict}");
    const auto name = js->find("name");
    if (name == js->end()) bad("response_format.json_schema.name", "is required");
    get_string(*name, "response_format.json_schema.name");
    if (const auto st = js->find("strict"); st != js->end() && !st->is_null()) get_bool(*st, "response_format.json_schema.strict");
    if (const auto d = js->find("description"); d != js->end() && !d->is_null()) get_string(*d, "response_format.json_schema.description");
    const auto schema = js->find("schema");
    f.kind = OutputKind::JsonSchema;
    // OpenAI: an absent schema is any JSON object.
    f.text = schema == js->end() || schema->is_null() ? std::string("{\"type\":\"object\"}")
                                                      : schema_text(*schema, "response_format.json_schema.schema");
    f.param = "response_format.json_schema.schema";
    return f;
}

// response_format (chat), or llama.cpp's grammar / json_schema (both endpoints): one at most.
void parse_output_format(const json& j, ServeRequest& r) {
    const json* rf = field(j, "response_format");
    const json* gr = field(j, "grammar");
    const json* js = field(j, "json_schema");
    if ((gr ? 1 : 0) + (js ? 1 : 0) + (rf ? 1 : 0) > 1)
        bad(gr ? "grammar" : "json_schema", "cannot be combined with another of response_format, grammar, json_schema");
    if (rf) r.format = parse_response_format(*rf);
    if (gr) {
        r.format = {OutputKind::Grammar, get_string(*gr, "grammar"), "grammar"};
        if (r.format.text.empty()) bad("grammar", "must not be empty");
    }
    if (js) r.format = {OutputKind::JsonSchema, schema_text(*js, "json_schema"), "json_schema"};
}

void parse_template_kwargs(const json& j, ServeRequest& r) {
    if (const json* v = field(j, "chat_template_kwargs")) {
        if (!v->is_object()) bad("chat_template_kwargs", "must be an object");
        for (const auto& [key, val] : v->items()) {
            if (key == "enable_thinking") r.enable_thinking = get_bool(val, "chat_template_kwargs.enable_thinking");
            else bad("chat_template_kwargs." + key, "is not supported (rewind's templates take enable_thinking)");
        }
    }
}

} // namespace

bool is_source_name(std::string_view name) {
    return std::find(kSourceNames.begin(), kSourceNames.end(), name) != kSourceNames.end();
}

std::string source_choices() {
    std::string out;
    for (std::string_view n : kSourceNames) out += (out.empty() ? "" : ", ") + std::string(n);
    return out;
}

ApiError::ApiError(int status_, std::string message, std::string param_, std::string type_, std::string code_)
    : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)),
      code(std::move(code_)) {}

std::string error_body(const ApiError& e) {
    json err = {{"message", e.what()},
                {"type", e.type.empty() ? type_for(e.status) : e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
    return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ServeRequest parse_request(Endpoint endpoint, std::string_view body, const ParseLimits& limits) {
    json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw ApiError(400, "the body is not valid JSON", "", "invalid_request_error", "invalid_json");
    if (!j.is_object()) throw ApiError(400, "the body must be a JSON object", "", "invalid_request_error", "invalid_json");
    refuse_unimplemented(j, endpoint);

    ServeRequest r;
    r.endpoint = endpoint;
    if (const json* v = field(j, "model")) r.model = get_string(*v, "model");
    if (endpoint == Endpoint::Chat) {
        parse_messages(j, r, limits);
        parse_tools(j, r);
    } else {
        parse_prompt(j, r);
    }
    parse_sampling(j, r);
    parse_penalties(j, r);
    parse_logprobs(j, r);
    parse_output_format(j, r);
    parse_stop(j, r, limits);
    parse_delivery(j, r);
    parse_speculation(j, r, limits);
    parse_template_kwargs(j, r);
    return r;
}

int64_t check_lengths(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t context,
                      const char* prompt_param) {
    if (prompt_tokens >= context)
        throw ApiError(400,
                       "the prompt is " + std::to_string(prompt_tokens) + " tokens, but the context holds " +
                           std::to_string(context) + " (at least one must be left to generate)",
                       prompt_param, "invalid_request_error", "context_length_exceeded");
    if (max_tokens && prompt_tokens + *max_tokens > context)
        throw ApiError(400,
                       "max_tokens is " + std::to_string(*max_tokens) + " and the prompt " + std::to_string(prompt_tokens) +
                           " tokens, but the context holds " + std::to_string(context) + " (at most " +
                           std::to_string(context - prompt_tokens) + " tokens can be generated)",
                       "max_tokens", "invalid_request_error", "context_length_exceeded");
    return max_tokens ? *max_tokens : context - prompt_tokens;
}

bool constant_time_equal(std::string_view given, std::string_view expected) {
    // Every byte of the longer one is read whatever matches: no early exit on the first difference.
    const size_t n = std::max(given.size(), expected.size());
    unsigned diff = given.size() == expected.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
        const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
        const unsigned char b = i < expected.size() ? static_cast<unsigned char>(expected[i]) : 0;
        diff |= static_cast<unsigned>(a ^ b);
    }
    return diff == 0;
}

} // namespace rwd::serve

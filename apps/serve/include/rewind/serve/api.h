// rewind serve's request model: the JSON bodies of the OpenAI-compatible endpoints parsed and
// validated into a ServeRequest, or refused with an OpenAI-style error naming the field. Pure (no
// model, no sockets), so it is unit-tested and fuzzed on its own.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "rewind/chat.h"

namespace rwd::serve {

// An error the client gets as {"error": {"message", "type", "param", "code"}} with HTTP `status`.
struct ApiError : std::runtime_error {
    ApiError(int status, std::string message, std::string param = {}, std::string type = {}, std::string code = {});
    int status;
    std::string type;  // "invalid_request_error", "authentication_error", ...; empty: by status
    std::string param; // the field at fault ("messages[1].content"), or empty
    std::string code;  // OpenAI's machine-readable code, or empty
};
// The OpenAI error body of `e`.
std::string error_body(const ApiError& e);

enum class Endpoint { Chat, Completions };

// Limits a request is checked against before anything is tokenized.
struct ParseLimits {
    int max_k = 16;                  // speculation.k in [1, max_k]
    int max_tree = 16;               // speculation.tree in [1, max_tree]
    size_t max_stop = 4;             // stop strings at most (OpenAI: 4)
    size_t max_stop_bytes = 256;     // per stop string
    size_t max_references = 8;       // speculation.references at most
    size_t max_messages = 4096;
};

// The one list of guess sources a request may name (speculation.source), and the server's
// default among them (--spec: all but "ref", which needs the request's documents). "none" is
// plain decoding; the others are the library's source kinds (speculate/source_factory.h).
// "forced" guesses only the text a request's constraint forces (nothing without one); under a
// constraint every other source is composed with it anyway.
inline constexpr std::array<std::string_view, 7> kSourceNames = {"none", "ngram", "ref", "auto", "suffix", "draft",
                                                                 "forced"};
bool is_source_name(std::string_view name);
// "none, ngram, ref, auto, suffix, draft, forced": the choices, for messages.
std::string source_choices();

struct SpeculationRequest {
    std::string source;                  // empty: the server's; else one of kSourceNames
    int k = 0;                           // 0: the server's
    int tree = -1;                       // continuations per node, [1, 16]; -1: the server's
    std::vector<std::string> references; // documents to copy guesses from
};

// tool_choice: "auto" (free text; the answer's calls are read into tool_calls), "none" (the tools
// are still rendered, as OpenAI and llama-server do, but the answer is text), "required" (a grammar
// forces one call, or with parallel_tool_calls one or more, of any of the tools, its arguments an
// instance of that function's parameters) or a named function (the same, that function only).
enum class ToolChoice { Auto, None, Required, Function };

// What the answer is constrained to (response_format, or llama.cpp's grammar / json_schema fields).
//   Text:       free text (response_format {"type": "text"}, or none given);
//   JsonObject: a JSON object (OpenAI's json_object: "valid JSON", which its API and every peer
//               take to mean an object), compact;
//   JsonSchema: an instance of `text`, a JSON Schema (response_format json_schema, or json_schema);
//   Grammar:    the GBNF grammar `text` (llama.cpp's grammar field; start rule root).
enum class OutputKind { Text, JsonObject, JsonSchema, Grammar };
struct OutputFormat {
    OutputKind kind = OutputKind::Text;
    std::string text; // JsonSchema: the schema's JSON text; Grammar: the GBNF; else empty
    std::string param; // the field it came from ("response_format", "grammar", ...), for errors
};

// A validated request. Sampling fields absent from it take the server's defaults, which are
// OpenAI's (temperature 1, top_p 1) unless `rewind serve` was given sampling flags; the default
// seed is 0, so an answer is reproducible unless the client varies the seed.
struct ServeRequest {
    Endpoint endpoint = Endpoint::Chat;
    std::string model;
    std::vector<ChatMessage> messages;   // Chat
    std::string prompt_text;             // Completions, a string
    std::vector<int64_t> prompt_ids;     // Completions, token ids (then prompt_is_ids)
    bool prompt_is_ids = false;
    std::optional<int64_t> max_tokens;   // absent: up to the context
    // Sampling; absent: the server's defaults (ServerOptions::sampling).
    std::optional<float> temperature;
    std::optional<float> top_p;
    std::optional<int32_t> top_k;
    std::optional<float> min_p;
    std::optional<float> repeat_penalty;   // llama.cpp's field, (0, 10]; 1: off
    std::optional<int32_t> repeat_last_n;  // llama.cpp's field: the tokens the penalty looks back on
                                           // (0: none; the request's -1: the whole sequence)
    std::optional<uint64_t> seed;
    std::optional<float> frequency_penalty; // [-2, 2]
    std::optional<float> presence_penalty;  // [-2, 2]
    // logit_bias: (token id, bias in [-100, 100]), ids as sent (checked against the vocabulary
    // when the job is built).
    std::vector<std::pair<int64_t, float>> logit_bias;
    // logprobs: per generated token (chat's logprobs: true, completions' logprobs: N), with
    // top_logprobs alternatives ([0, 20]).
    bool logprobs = false;
    int top_logprobs = 0;
    OutputFormat format;
    std::vector<std::string> stop;
    bool stream = false;
    bool include_usage = false;
    std::string user;
    std::optional<std::string> prediction; // Predicted Outputs: the text expected to repeat
    SpeculationRequest speculation;
    bool enable_thinking = true;           // chat_template_kwargs.enable_thinking
    // Chat: the function tools as JSON text, key order as sent (empty: none; an empty list is none).
    std::string tools;
    ToolChoice tool_choice = ToolChoice::Auto;
    std::string tool_choice_name; // ToolChoice::Function: the function's name (one of the tools)
    bool parallel_tool_calls = true; // false: only the answer's first call is returned
    // Choices, [1, 16]: choice i is the answer to this request with n = 1 and seed + i.
    int n = 1;
};

// Parses and validates `body` for `endpoint`. Throws ApiError (400) for malformed JSON, a field of
// the wrong type or out of range (naming it), a required field missing, and fields rewind does not
// implement that would change the answer (n outside [1, 16], tool_choice naming an unknown function,
// echo, suffix, best_of > 1, ...), and assistant tool-call arguments that are not JSON. A schema
// keyword the engine lacks is refused when the job is built (JobBuilder), naming the keyword.
// Unknown fields that change nothing are ignored, as OpenAI's own server does.
ServeRequest parse_request(Endpoint endpoint, std::string_view body, const ParseLimits& limits = {});

// Throws ApiError (400) naming both lengths unless a prompt of `prompt_tokens` and `max_tokens`
// (absent: none asked for) fit a context of `context` positions. Returns the tokens to generate at
// most: max_tokens, or what is left of the context. `prompt_param` names the prompt's field in the
// error ("messages" or "prompt").
int64_t check_lengths(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t context,
                      const char* prompt_param = "messages");

// True when `given` equals `expected`, in time that depends only on their lengths (API keys).
bool constant_time_equal(std::string_view given, std::string_view expected);

} // namespace rwd::serve

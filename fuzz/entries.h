// Fuzz entry points: each feeds arbitrary bytes to one parser of outside input through the same
// function a user's file reaches, and checks what that parser promises. The libFuzzer targets
// (fuzz_<name>.cpp) and the regression suite (tests/test_fuzz_regressions.cpp) both call these.
// rwd::Error is the expected answer to bad input; any other exception, a sanitizer report or a
// crash is a finding. A broken property (e.g. a tokenizer round trip) throws PropertyFailure.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace rwd::fuzz {

struct PropertyFailure : std::logic_error {
    using std::logic_error::logic_error;
};

// GGUF reader and model loader (Model::load_from_memory: header, metadata, tensor table, hparams,
// tokenizer); a model that loads also runs one short forward pass.
void gguf(std::span<const uint8_t> data);
// Tokenizers: byte 0 picks one of the fixture vocabularies (SPM and BPE kinds, each pre-tokenizer),
// byte 1 whether special tokens are parsed; the rest is text. Encode, decode, stream-decode; on
// valid UTF-8 text, decode(encode(text)) == text.
void tokenizer(std::span<const uint8_t> data);
// KV state file loader (KvCache::load_from_memory) for pycode-600k.
void kv_state(std::span<const uint8_t> data);
// Workload JSON lines of `rewind bench`.
void workload(std::span<const uint8_t> data);
// Reference documents: '\x01'-separated texts, the last being the context; every proposal must be
// a span copied from one reference.
void reference(std::span<const uint8_t> data);

// rewind serve's request bodies: byte 0 picks the endpoint (even: chat, odd: completions), the
// rest is the body. parse_request either validates it, every field within its documented range,
// or refuses it with an ApiError whose status is 400 and whose body is OpenAI's error JSON.
void serve_request(std::span<const uint8_t> data);

// The GBNF front end: the bytes before the first NUL are a grammar, those after it a text. A
// grammar parses or is refused with rwd::Error (within GbnfLimits: bounded time and memory); one
// that parses prints back as GBNF that parses to as many rules, and its matcher (small limits)
// checks the text and finds its forced bytes.
void gbnf(std::span<const uint8_t> data);
// The JSON Schema front end: byte 0's low bit picks the whitespace mode, the rest is the schema.
// Either GBNF (ASCII text, one `name ::= body` line per rule, `root` first) or rwd::Error.
void json_schema(std::span<const uint8_t> data);
// The regex front end: the bytes are the pattern; GBNF as above or rwd::Error.
void regex(std::span<const uint8_t> data);

// Loads the fixtures the named entry uses (tokenizers, a model), so the first input is not
// charged for them (libFuzzer's per-input timeout); entries also load them on first use.
void prepare(std::string_view name);

// By name ("gguf", "tokenizer", ...); nullptr for an unknown name.
using Entry = void (*)(std::span<const uint8_t>);
Entry entry(std::string_view name);

} // namespace rwd::fuzz

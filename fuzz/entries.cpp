// Fuzz entry points (see entries.h). Fixtures come from ../shared and are loaded once, on first
// use (function-local statics: initialised thread-safely).
#include "entries.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <memory>
#include <sstream>
#include <vector>

#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/gguf.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/bench/bench_workload.h"
#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/matcher.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/regex.h"
#include "rewind/serve/api.h"
#include "rewind/speculate/reference_source.h"
#include "rewind/tokenizer.h"

namespace rwd::fuzz {
namespace {

const std::string kShared = REWIND_SHARED_DIR;

void check(bool ok, const std::string& what) {
    if (!ok) throw PropertyFailure(what);
}

std::string_view as_text(std::span<const uint8_t> d) {
    return {reinterpret_cast<const char*>(d.data()), d.size()};
}

// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = 0;
        uint32_t cp = 0;
        if (c < 0x80) { ++i; continue; }
        if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
        else return false;
        if (i + n >= s.size()) return false; // the sequence runs past the end
        for (size_t j = 1; j <= n; ++j) {
            const auto cc = static_cast<unsigned char>(s[i + j]);
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

// The bytes a tokenizer cannot keep: a byte-level vocabulary may lack the symbol of a byte
// (StarCoder's has none for 0xF1), and encode drops it as llama.cpp does. Found by encoding the
// shortest valid UTF-8 sequence that holds each byte and counting the byte in the decoded text.
std::array<bool, 256> lost_bytes(const Tokenizer& tok) {
    std::array<bool, 256> lost{};
    for (int b = 0; b < 256; ++b) {
        const char c = static_cast<char>(b);
        std::string seq;
        if (b < 0x80) seq = std::string(1, c);
        else if (b < 0xC0) seq = std::string("\xC2") + c;
        else if (b >= 0xC2 && b < 0xE0) seq = std::string(1, c) + "\x80";
        else if (b == 0xE0) seq = "\xE0\xA0\x80";
        else if (b > 0xE0 && b < 0xF0) seq = std::string(1, c) + "\x80\x80";
        else if (b == 0xF0) seq = "\xF0\x90\x80\x80";
        else if (b > 0xF0 && b < 0xF5) seq = std::string(1, c) + "\x80\x80\x80";
        else continue; // never part of valid UTF-8
        const std::string back = tok.decode(tok.encode(seq, AddBos::No));
        lost[static_cast<size_t>(b)] = std::count(back.begin(), back.end(), c) < std::count(seq.begin(), seq.end(), c);
    }
    return lost;
}

struct Tokenizers {
    std::vector<std::unique_ptr<Tokenizer>> all;
    std::vector<std::array<bool, 256>> lost; // per tokenizer, see lost_bytes
    Tokenizers() {
        for (const char* v : {"llama-spm", "phi-3", "gpt-2", "starcoder", "llama-bpe", "qwen2"})
            all.push_back(Tokenizer::from_gguf(GgufFile::open(kShared + "/vocab/ggml-vocab-" + v + ".gguf")));
        // SPM with add_space_prefix (aidreams) and without (pycode).
        for (const char* m : {"aidreams260K", "pycode-600k"})
            all.push_back(Tokenizer::from_gguf(GgufFile::open(kShared + "/models/" + m + ".gguf")));
        for (const auto& t : all) lost.push_back(lost_bytes(*t));
    }
};

const Tokenizers& tokenizers() {
    static const Tokenizers t;
    return t;
}

// pycode's tokenizer alone (what `rewind generate --ref` uses with the pycode models).
const Tokenizer& pycode_tokenizer() {
    static const std::unique_ptr<Tokenizer> t =
        Tokenizer::from_gguf(GgufFile::open(kShared + "/models/pycode-600k.gguf"));
    return *t;
}

const Model& small_model() {
    static const std::shared_ptr<const Model> m = Model::load(kShared + "/models/pycode-600k.gguf");
    return *m;
}

} // namespace

void gguf(std::span<const uint8_t> data) {
    // The metadata rendering `rewind inspect` does, over whatever parses.
    try {
        const GgufFile g = GgufFile::from_memory("fuzz.gguf", data);
        for (const GgufKeyValue& kv : g.metadata()) (void)gguf_value_to_string(kv.value);
        for (const GgufTensorInfo& t : g.tensors()) (void)tensor_type_name(t.type);
    } catch (const Error&) {
        return;
    }
    std::shared_ptr<const Model> model;
    try {
        model = Model::load_from_memory(std::as_bytes(data), "fuzz.gguf");
    } catch (const Error&) {
        return;
    }
    // A model that loads must run: its shapes were all checked against its data.
    Context ctx(model, ContextOptions{.n_threads = 1, .max_batch = 4});
    KvCache cache(*model, KvCacheOptions{.capacity = std::min<int64_t>(4, model->hparams().n_ctx_train)});
    const TokenId toks[2] = {0, static_cast<TokenId>(model->n_vocab() - 1)};
    const auto n = static_cast<size_t>(std::min<int64_t>(2, cache.capacity()));
    const auto logits = ctx.forward(cache, std::span<const TokenId>(toks, n), Logits::All);
    check(logits.size() == n * static_cast<size_t>(model->n_vocab()), "forward returned the wrong number of logits");
}

void tokenizer(std::span<const uint8_t> data) {
    if (data.size() < 2) return;
    const auto& all = tokenizers().all;
    const size_t which = data[0] % all.size();
    const Tokenizer& tok = *all[which];
    const std::array<bool, 256>& lost = tokenizers().lost[which];
    const SpecialTokens special = (data[1] & 1) ? SpecialTokens::Parse : SpecialTokens::AsText;
    const std::string_view text = as_text(data.subspan(2));
    std::vector<TokenId> ids;
    try {
        ids = tok.encode(text, AddBos::No, special);
    } catch (const Error&) {
        return; // a clear refusal is allowed (none is expected)
    }
    for (TokenId id : ids) check(tok.valid(id), "encode produced an out-of-range id");
    const std::string back = tok.decode(ids);
    Utf8StreamDecoder stream(tok);
    std::string streamed;
    for (TokenId id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    check(valid_utf8(streamed), "the stream decoder produced invalid UTF-8");
    // Where decode's text is valid UTF-8 the stream decoder must give exactly that text.
    if (valid_utf8(back)) check(streamed == back, "the stream decoder disagrees with decode on valid UTF-8 text");
    // SPM writes a space as U+2581 and decodes every U+2581 as a space (llama.cpp does the
    // same), so text that already holds U+2581 comes back with spaces in its place; a byte the
    // vocabulary lacks is dropped. Special tokens parsed from text decode to "" (not rendered).
    const bool spm_marker = tok.model() == TokenizerModel::Spm && text.find("\xE2\x96\x81") != text.npos;
    const bool has_lost_byte =
        std::any_of(text.begin(), text.end(), [&](char c) { return lost[static_cast<unsigned char>(c)]; });
    if (valid_utf8(text) && special == SpecialTokens::AsText && !spm_marker && !has_lost_byte)
        check(back == text, "decode(encode(text)) != text for valid UTF-8 text");
}

void kv_state(std::span<const uint8_t> data) {
    const Model& model = small_model();
    try {
        KvCache c = KvCache::load_from_memory(std::as_bytes(data), "fuzz.kv", model, KvCacheOptions{.capacity = 64});
        check(c.size() >= 0 && c.size() <= c.capacity(), "loaded cache size out of range");
        check(c.belongs_to(model), "loaded cache does not belong to the model");
    } catch (const Error&) {
    }
}

void workload(std::span<const uint8_t> data) {
    std::istringstream in{std::string(as_text(data))};
    try {
        const auto items = bench::parse_workload(in, "fuzz.jsonl");
        for (const auto& it : items)
            check(!it.id.empty() && !it.prompt.empty() && it.max_tokens > 0, "accepted an item it should refuse");
    } catch (const Error&) {
    }
}

void reference(std::span<const uint8_t> data) {
    const Tokenizer& tok = pycode_tokenizer();
    std::vector<std::string> parts{""};
    for (uint8_t b : data) {
        if (b == 1) parts.emplace_back();
        else parts.back() += static_cast<char>(b);
    }
    const std::string context_text = parts.back();
    parts.pop_back();
    std::vector<std::vector<TokenId>> refs;
    for (const auto& p : parts) refs.push_back(tok.encode(p, AddBos::No));
    // A chain (one branch) and a tree (several): every path from the context is a span of a reference.
    for (int branches : {1, 4}) {
        std::unique_ptr<speculate::ReferenceSource> src;
        try {
            speculate::ReferenceSourceOptions opts;
            opts.branches = branches;
            src = std::make_unique<speculate::ReferenceSource>(speculate::ReferenceSource::from_texts(tok, parts, opts));
        } catch (const Error&) {
            return;
        }
        const std::vector<TokenId> context = tok.encode(context_text, AddBos::No);
        speculate::Proposal out;
        std::vector<TokenId> path;
        for (int k : {1, 3, 16}) {
            for (size_t cut : {size_t{0}, context.size() / 2, context.size()}) {
                out.clear();
                src->propose(std::span<const TokenId>(context.data(), cut), k, out);
                check(out.tokens.size() <= static_cast<size_t>(k), "proposed more than k tokens");
                try {
                    speculate::check_proposal("ref", out);
                } catch (const Error&) {
                    check(false, "a malformed proposal");
                }
                for (size_t i = 0; i < out.tokens.size(); ++i) {
                    path.clear();
                    for (int32_t at = static_cast<int32_t>(i); at >= 0; at = out.parent(static_cast<size_t>(at)))
                        path.insert(path.begin(), out.tokens[static_cast<size_t>(at)]);
                    const bool copied = std::any_of(refs.begin(), refs.end(), [&](const std::vector<TokenId>& r) {
                        return std::search(r.begin(), r.end(), path.begin(), path.end()) != r.end();
                    });
                    check(copied, "a proposal is not a span of any reference");
                }
            }
        }
    }
}

void prepare(std::string_view name) {
    if (name == "tokenizer") (void)tokenizers();
    if (name == "reference") (void)pycode_tokenizer();
    if (name == "kv_state") (void)small_model();
}

void serve_request(std::span<const uint8_t> data) {
    if (data.empty()) return;
    const auto ep = data[0] % 2 ? serve::Endpoint::Completions : serve::Endpoint::Chat;
    const std::string_view body = as_text(data.subspan(1));
    try {
        const serve::ServeRequest r = serve::parse_request(ep, body);
        check(r.endpoint == ep, "endpoint changed");
        if (ep == serve::Endpoint::Chat) {
            check(!r.messages.empty(), "accepted a chat without messages");
            for (const auto& m : r.messages) {
                check(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
                      "accepted an unknown role");
                check(m.tool_calls.empty() || m.role == "assistant", "accepted tool_calls on a non-assistant message");
                for (const auto& c : m.tool_calls)
                    check(nlohmann::json::accept(c.arguments) && nlohmann::json::parse(c.arguments).is_object(),
                          "accepted tool-call arguments that are not a JSON object");
            }
            check(r.tools.empty() || nlohmann::json::parse(r.tools).is_array(), "accepted tools that are not a list");
            check(r.tool_choice != serve::ToolChoice::Required || !r.tools.empty(), "accepted tool_choice required without tools");
            if (r.tool_choice == serve::ToolChoice::Function) {
                bool known = false;
                for (const auto& t : nlohmann::json::parse(r.tools)) known = known || t["function"]["name"] == r.tool_choice_name;
                check(known, "accepted a named tool_choice that is not among the tools");
            }
        } else {
            check(r.tools.empty(), "accepted tools on a completion");
            check(r.prompt_is_ids ? !r.prompt_ids.empty() : !r.prompt_text.empty(), "accepted an empty prompt");
            for (int64_t id : r.prompt_ids) check(id >= 0 && id <= INT32_MAX, "accepted a token id out of range");
        }
        check(!r.max_tokens || *r.max_tokens >= 0, "accepted a negative max_tokens");
        const float temperature = r.temperature.value_or(1), top_p = r.top_p.value_or(1), min_p = r.min_p.value_or(0);
        check(temperature >= 0 && temperature <= 2 && top_p > 0 && top_p <= 1 && min_p >= 0 && min_p <= 1,
              "accepted a sampling value out of range");
        check(r.top_k.value_or(0) >= 0 && r.repeat_penalty.value_or(1) > 0 && r.repeat_penalty.value_or(1) <= 10 &&
                  r.repeat_last_n.value_or(0) >= 0,
              "accepted a top_k or repetition penalty out of range");
        check(r.stop.size() <= 4, "accepted more than 4 stop strings");
        check(r.n >= 1 && r.n <= 16, "accepted n out of range");
        for (const auto& s : r.stop) check(!s.empty(), "accepted an empty stop string");
        check(r.speculation.k >= 0 && r.speculation.k <= 16, "accepted speculation.k out of range");
        check(r.speculation.source.empty() || serve::is_source_name(r.speculation.source), "accepted an unknown source");
        check(!r.include_usage || r.stream, "accepted stream_options without stream");
        check(std::abs(r.frequency_penalty.value_or(0)) <= 2 && std::abs(r.presence_penalty.value_or(0)) <= 2,
              "accepted a frequency or presence penalty out of [-2, 2]");
        for (const auto& [id, bias] : r.logit_bias)
            check(id >= 0 && id <= INT32_MAX && std::abs(bias) <= 100, "accepted a logit_bias id or bias out of range");
        check(r.top_logprobs >= 0 && r.top_logprobs <= 20 && (r.logprobs || r.top_logprobs == 0),
              "accepted top_logprobs out of range or without logprobs");
        check((r.format.kind == serve::OutputKind::Text) == r.format.text.empty() ||
                  r.format.kind == serve::OutputKind::JsonObject,
              "a response format without its schema or grammar text");
        if (r.format.kind == serve::OutputKind::JsonSchema)
            check(nlohmann::json::accept(r.format.text), "a json_schema that is not JSON text");
        // The lengths check of a validated request answers or refuses, never anything else.
        try {
            (void)serve::check_lengths(3, r.max_tokens, 512);
        } catch (const serve::ApiError& e) {
            check(e.status == 400 && r.max_tokens && *r.max_tokens > 509, "refused lengths that fit");
        }
    } catch (const serve::ApiError& e) {
        check(e.status == 400, "a parse error that is not a 400");
        const auto j = nlohmann::json::parse(serve::error_body(e));
        check(j.at("error").at("message").is_string() && j.at("error").at("type") == "invalid_request_error",
              "an error body without message or type");
    }
}

void gbnf(std::span<const uint8_t> data) {
    const std::string_view all = as_text(data);
    const size_t nul = all.find('\0');
    const std::string_view text = all.substr(0, nul);
    const std::string_view sample = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1, 256);
    try {
        grammar::Grammar g = grammar::parse_gbnf(text);
        const std::string printed = g.to_gbnf();
        const grammar::Grammar again = grammar::parse_gbnf(printed);
        check(again.rules.size() == g.rules.size(), "printed grammar has another number of rules");
        grammar::MatcherLimits limits;
        limits.max_states = 4096;
        limits.max_frames = size_t{1} << 16;
        limits.max_stacks = 256;
        grammar::Matcher m(std::make_shared<grammar::CompiledGrammar>(std::move(g)), limits);
        const size_t n = m.valid_prefix_length(sample);
        check(n <= sample.size(), "valid prefix longer than the text");
        check(m.accept_bytes(sample.substr(0, n)), "a valid prefix was refused");
        const std::string forced = m.forced_bytes(64);
        check(m.valid_prefix_length(forced) == forced.size(), "forced bytes refused");
    } catch (const Error&) {
    }
}

namespace {

// What both grammar front ends promise of their output.
void check_gbnf(const std::string& g) {
    check(g.rfind("root ::= ", 0) == 0, "GBNF without root first");
    check(!g.empty() && g.back() == '\n', "GBNF not ending with a newline");
    size_t line_start = 0;
    for (size_t i = 0; i < g.size(); ++i) {
        const auto c = static_cast<unsigned char>(g[i]);
        check((c >= 0x20 && c < 0x7F) || c == '\n', "GBNF with a byte outside printable ASCII");
        if (c == '\n') {
            check(g.find(" ::= ", line_start) < i, "a GBNF line without ' ::= '");
            line_start = i + 1;
        }
    }
}

} // namespace

void json_schema(std::span<const uint8_t> data) {
    if (data.empty()) return;
    grammar::JsonGrammarOptions opts;
    opts.whitespace = data[0] & 1 ? grammar::JsonWhitespace::Free : grammar::JsonWhitespace::Compact;
    try {
        check_gbnf(grammar::json_schema_to_gbnf(as_text(data.subspan(1)), opts));
    } catch (const Error&) {
    }
}

void regex(std::span<const uint8_t> data) {
    try {
        check_gbnf(grammar::regex_to_gbnf(as_text(data)));
    } catch (const Error&) {
    }
}

Entry entry(std::string_view name) {
    if (name == "gbnf") return gbnf;
    if (name == "json_schema") return json_schema;
    if (name == "regex") return regex;
    if (name == "gguf") return gguf;
    if (name == "tokenizer") return tokenizer;
    if (name == "kv_state") return kv_state;
    if (name == "workload") return workload;
    if (name == "reference") return reference;
    if (name == "serve_request") return serve_request;
    return nullptr;
}

} // namespace rwd::fuzz

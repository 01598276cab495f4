// The C API (rewind_c.h) over the C++ library: opaque handles wrap the C++ objects, every entry
// point catches everything and turns it into a status and a thread-local message.
#include "rewind_c.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rewind/chat.h"
#include "rewind/chat_session.h"
#include "rewind/context.h"
#include "rewind/device.h"
#include "rewind/error.h"
#include "rewind/generate.h"
#include "rewind/gguf.h"
#include "rewind/kernels/dtype.h"
#include "rewind/kernels/ops.h"
#include "rewind/kernels/simd.h"
#include "rewind/kv_cache.h"
#include "rewind/model.h"
#include "rewind/session.h"
#include "rewind/speculate/batch_decoder.h"
#include "rewind/speculate/constraint_compiler.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/program.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/speculative_session.h"
#include "rewind/version.h"

struct rewind_model {
    std::shared_ptr<const rwd::Model> model;
};

// A context and the constraints compiled for its model's vocabulary (kept across calls, so a
// repeated grammar, schema or regex costs a lookup).
struct rewind_context {
    rewind_context(std::shared_ptr<const rwd::Model> m, const rwd::ContextOptions& o)
        : ctx(std::move(m), o), constraints(ctx.model().tokenizer()) {}
    rwd::Context ctx;
    rwd::speculate::ConstraintCompiler constraints;
};

// A sequence and the KV cache of all of it but its newest token: a Session, which borrows the
// caller's context for each call, as the C functions take one.
struct rewind_cache {
    rwd::Session session;
    std::string gen_text{}; // the last rewind_gen's captured text
};

// A batch: its own context (BatchDecoder keeps a reference to it for its whole life), the
// decoder, and one entry per request until the caller takes or releases it.
struct rewind_batch {
    struct Entry {
        uint64_t id = 0;
        int64_t prompt_size = 0;
        rewind_request_state state = REWIND_REQUEST_RUNNING;
        bool cancel_asked = false;
        rwd::speculate::BatchResult result; // once ended
    };
    std::shared_ptr<const rwd::Model> model;
    rwd::KvType kv_type = rwd::KvType::F32;
    std::unique_ptr<rwd::Context> ctx;
    std::unique_ptr<rwd::speculate::BatchDecoder> dec;
    std::unique_ptr<rwd::speculate::ConstraintCompiler> constraints; // over ctx's vocabulary
    std::vector<Entry> entries; // by id (= the order requests were added)
    bool broken = false;        // a step failed in the middle of a pass: refuse add and step
};

// A chat session and its last reply (kept here so that reading it cannot fail a turn).
struct rewind_chat {
    rwd::ChatSession chat;
    std::string reply;
};

namespace {

using rwd::Error;
using rwd::ErrorCode;

thread_local std::string t_last_error;

rewind_status status_of(ErrorCode c) {
    switch (c) {
    case ErrorCode::io: return REWIND_ERR_IO;
    case ErrorCode::format: return REWIND_ERR_FORMAT;
    case ErrorCode::unsupported: return REWIND_ERR_UNSUPPORTED;
    case ErrorCode::shape: return REWIND_ERR_SHAPE;
    case ErrorCode::capacity: return REWIND_ERR_CAPACITY;
    case ErrorCode::argument: return REWIND_ERR_ARGUMENT;
    case ErrorCode::state: return REWIND_ERR_STATE;
    }
    return REWIND_ERR_INTERNAL;
}

// Runs f; any exception becomes a status and this thread's last error. Nothing escapes.
template <class F>
rewind_status guarded(const char* fn, F&& f) noexcept {
    try {
        f();
        return REWIND_OK;
    } catch (const Error& e) {
        try {
            t_last_error = std::string(fn) + ": " + e.what();
        } catch (...) {
        }
        return status_of(e.code());
    } catch (const std::bad_alloc&) {
        try {
            t_last_error = std::string(fn) + ": out of memory";
        } catch (...) {
        }
        return REWIND_ERR_INTERNAL;
    } catch (const std::exception& e) {
        try {
            t_last_error = std::string(fn) + ": " + e.what();
        } catch (...) {
        }
        return REWIND_ERR_INTERNAL;
    } catch (...) {
        return REWIND_ERR_INTERNAL;
    }
}

void need(const void* p, const char* what) {
    if (!p) throw Error(ErrorCode::argument, std::string(what) + " is NULL");
}

// Copies ids into a caller's buffer of `capacity`, or reports the size needed.
void copy_out(const std::vector<rwd::TokenId>& ids, rewind_token* out, size_t capacity, size_t* n) {
    need(n, "the count pointer");
    if (ids.size() > capacity) {
        *n = ids.size();
        throw Error(ErrorCode::capacity, std::to_string(ids.size()) + " ids do not fit a buffer of " +
                                             std::to_string(capacity));
    }
    if (!ids.empty()) {
        need(out, "the id buffer");
        std::copy(ids.begin(), ids.end(), out);
    }
    *n = ids.size();
}

rwd::KvCacheOptions cache_options(int64_t capacity, int kv_f16) {
    return {.capacity = capacity, .type = kv_f16 ? rwd::KvType::F16 : rwd::KvType::F32};
}

void check_pair(const rewind_context* ctx, const rewind_cache* cache) {
    need(ctx, "the context");
    need(cache, "the cache");
    if (!cache->session.cache().belongs_to(ctx->ctx.model()))
        throw Error(ErrorCode::state, "the cache belongs to " + cache->session.model().path() + ", the context runs " +
                                          ctx->ctx.model().path());
}

// The C context options as ContextOptions; names are checked here, the rest by Context.
rwd::ContextOptions context_options(const rewind_context_options* opts) {
    const rewind_context_options o = opts ? *opts : rewind_context_default_options();
    rwd::ContextOptions co;
    co.n_threads = o.n_threads;
    co.max_batch = o.max_batch;
    if (o.numerics) {
        const std::string_view n = o.numerics;
        if (n == "exact")
            co.numerics = rwd::Numerics::Exact;
        else if (n == "llamacpp")
            co.numerics = rwd::Numerics::LlamaCpp;
        else
            throw Error(ErrorCode::argument, "unknown numerics '" + std::string(n) + "' (expected exact or llamacpp)");
    }
    if (o.simd) co.simd = rwd::parse_simd(o.simd);
    if (o.device) co.device = rwd::parse_device(o.device);
    return co;
}

// A C callback as a TokenCallback (empty when there is none).
rwd::TokenCallback token_callback(const rewind_generate_options* o) {
    if (!o->on_token) return {};
    return [f = o->on_token, user = o->user_data](rwd::TokenId t) { return f(t, user) != 0; };
}

rwd::GenerateOptions generate_options(const rewind_generate_options* o, size_t out_capacity) {
    need(o, "the generate options");
    if (o->max_tokens < 0) throw Error(ErrorCode::argument, "max_tokens must be >= 0");
    if (static_cast<uint64_t>(o->max_tokens) > out_capacity)
        throw Error(ErrorCode::argument, "max_tokens " + std::to_string(o->max_tokens) +
                                             " exceeds the output buffer's capacity " + std::to_string(out_capacity));
    rwd::GenerateOptions g;
    g.max_tokens = o->max_tokens;
    g.sampler.temperature = o->temperature;
    g.sampler.top_k = o->top_k;
    g.sampler.top_p = o->top_p;
    g.sampler.min_p = o->min_p;
    g.sampler.repeat_penalty = o->repeat_penalty;
    g.sampler.repeat_last_n = o->repeat_last_n;
    g.sampler.seed = o->seed;
    g.sampler.frequency_penalty = o->frequency_penalty;
    g.sampler.presence_penalty = o->presence_penalty;
    if (o->n_logit_bias > 0) {
        need(o->logit_bias_tokens, "logit_bias_tokens");
        need(o->logit_bias_values, "logit_bias_values");
    }
    for (size_t i = 0; i < o->n_logit_bias; ++i) g.sampler.logit_bias.emplace_back(o->logit_bias_tokens[i], o->logit_bias_values[i]);
    if (const rewind_logprobs* lp = o->logprobs) {
        if (lp->top_n < 0 || lp->top_n > rwd::LogprobOptions::kMaxTop)
            throw Error(ErrorCode::argument, "logprobs: top_n must be in [0, 20], got " + std::to_string(lp->top_n));
        if (out_capacity > 0) {
            need(lp->logprob, "logprobs->logprob");
            if (lp->top_n > 0) {
                need(lp->top_tokens, "logprobs->top_tokens");
                need(lp->top_logprobs, "logprobs->top_logprobs");
            }
        }
        g.logprobs = {.enabled = true, .top_n = lp->top_n, .processed = lp->processed != 0};
    }
    g.stop_at_eog = o->stop_at_eog != 0;
    if (o->n_stop_strings > 0) need(o->stop_strings, "stop_strings");
    for (size_t i = 0; i < o->n_stop_strings; ++i) {
        need(o->stop_strings[i], "a stop string");
        g.stop_strings.emplace_back(o->stop_strings[i]);
    }
    return g;
}

// The constraint opts names (null: none), compiled through `compiler`.
std::unique_ptr<rwd::TokenConstraint> constraint_of(const rewind_generate_options* o,
                                                    rwd::speculate::ConstraintCompiler& compiler) {
    if (o->json_whitespace != 0 && o->json_whitespace != 1)
        throw Error(ErrorCode::argument, "json_whitespace must be 0 (compact) or 1 (free), got " +
                                             std::to_string(o->json_whitespace));
    auto text = [](const char* p) { return p ? std::string_view(p) : std::string_view(); };
    return compiler.compile({.regex = text(o->regex),
                             .json_schema = text(o->json_schema),
                             .json_whitespace = o->json_whitespace ? rwd::grammar::JsonWhitespace::Free
                                                                   : rwd::grammar::JsonWhitespace::Compact,
                             .grammar = text(o->grammar)});
}

bool names_constraint(const rewind_generate_options* o) {
    return (o->grammar && *o->grammar) || (o->json_schema && *o->json_schema) || (o->regex && *o->regex);
}

int32_t stop_of(rwd::StopReason r) {
    switch (r) {
    case rwd::StopReason::MaxTokens: return REWIND_STOP_MAX_TOKENS;
    case rwd::StopReason::EndOfGeneration: return REWIND_STOP_END_OF_GENERATION;
    case rwd::StopReason::StopString: return REWIND_STOP_STRING;
    case rwd::StopReason::ContextFull: return REWIND_STOP_CONTEXT_FULL;
    case rwd::StopReason::Cancelled: return REWIND_STOP_CANCELLED;
    }
    return REWIND_STOP_MAX_TOKENS;
}

// The common tail of both generate calls: the output.
void finish(const rwd::GenerateResult& r, rewind_token* out, size_t* n_out, const rewind_generate_options* o) {
    std::copy(r.tokens.begin(), r.tokens.end(), out);
    *n_out = r.tokens.size();
    const rewind_logprobs* lp = o->logprobs;
    if (!lp) return;
    const auto n_top = static_cast<size_t>(lp->top_n);
    for (size_t i = 0; i < r.logprobs.size(); ++i) {
        const rwd::TokenLogprob& t = r.logprobs[i];
        lp->logprob[i] = t.logprob;
        for (size_t j = 0; j < n_top; ++j) {
            const bool has = j < static_cast<size_t>(t.n_top);
            lp->top_tokens[i * n_top + j] = has ? t.top[j].token : -1;
            lp->top_logprobs[i * n_top + j] = has ? t.top[j].logprob : -std::numeric_limits<float>::infinity();
        }
    }
}

void fill_stats(rewind_stats* s, const rwd::GenerateResult& r) {
    *s = rewind_stats{};
    s->emitted = static_cast<int64_t>(r.tokens.size());
    s->passes = s->emitted;
    s->prompt_tokens = r.prompt_tokens;
    s->prompt_seconds = r.prompt_seconds;
    s->generate_seconds = r.generate_seconds;
    s->stop = stop_of(r.stop);
}

rwd::KPolicy k_policy_of(int p) {
    switch (p) {
    case REWIND_K_FIXED: return rwd::KPolicy::Fixed;
    case REWIND_K_ADAPTIVE: return rwd::KPolicy::Adaptive;
    case REWIND_K_COST: return rwd::KPolicy::Cost;
    }
    throw Error(ErrorCode::argument, "unknown k_policy " + std::to_string(p) +
                                         " (REWIND_K_FIXED, REWIND_K_ADAPTIVE or REWIND_K_COST)");
}

// What rewind_spec_options describe, for the source factory (which checks the rest).
rwd::speculate::SourceSpec source_spec(const rewind_spec_options* spec, rwd::KvType cache_type) {
    need(spec->source, "the source name");
    rwd::speculate::SourceSpec ss;
    rwd::speculate::parse_source_kind(spec->source, ss);
    if (spec->branches < 0 || spec->branches > 64)
        throw Error(ErrorCode::argument, "branches must be in [0, 64], got " + std::to_string(spec->branches));
    ss.branches = spec->branches;
    if (spec->n_references > 0) need(spec->references, "references");
    for (size_t i = 0; i < spec->n_references; ++i) {
        need(spec->references[i], "a reference");
        ss.references.emplace_back(spec->references[i]);
    }
    if (spec->draft) ss.draft = spec->draft->model;
    ss.draft_options.cache_type = cache_type;
    return ss;
}

// The entry of request `id`, which the batch must hold (entries are sorted by id).
template <class B>
auto& entry_of(B* batch, uint64_t id) {
    auto& es = batch->entries;
    const auto it = std::lower_bound(es.begin(), es.end(), id, [](const auto& e, uint64_t v) { return e.id < v; });
    if (it == es.end() || it->id != id)
        throw Error(ErrorCode::argument, "the batch holds no request " + std::to_string(id) +
                                             " (never added, or already taken or released)");
    return *it;
}

// A request's result: the decoder's progress while it runs, its own copy once ended.
const rwd::speculate::BatchResult& result_of(const rewind_batch* batch, const rewind_batch::Entry& e) {
    if (e.state != REWIND_REQUEST_RUNNING) return e.result;
    const rwd::speculate::BatchResult* r = batch->dec->progress(e.id);
    if (!r) throw Error(ErrorCode::state, "request " + std::to_string(e.id) + " is not in the decoder");
    return *r;
}

const char* state_name(rewind_request_state s) {
    switch (s) {
    case REWIND_REQUEST_RUNNING: return "running";
    case REWIND_REQUEST_DONE: return "done";
    case REWIND_REQUEST_FAILED: return "failed";
    case REWIND_REQUEST_CANCELLED: return "cancelled";
    }
    return "unknown";
}

void fill_info(rewind_request_info* out, const rewind_batch::Entry& e, const rwd::speculate::BatchResult& r) {
    rewind_request_info info{};
    info.state = e.state;
    info.status = e.state == REWIND_REQUEST_FAILED ? status_of(r.error_code) : REWIND_OK;
    info.n_tokens = static_cast<int64_t>(r.tokens.size());
    info.prompt_tokens_shared = r.prompt_tokens_shared;
    info.first_token_seconds = r.queue_to_first_token_seconds;
    info.latency_seconds = e.state == REWIND_REQUEST_RUNNING ? 0.0 : r.latency_seconds;
    info.stats.emitted = r.stats.emitted;
    info.stats.passes = r.stats.passes;
    info.stats.proposed = r.stats.proposed;
    info.stats.accepted = r.stats.accepted;
    info.stats.prompt_tokens = e.prompt_size - r.prompt_tokens_shared;
    info.stats.prompt_seconds = r.stats.prompt_seconds;
    info.stats.generate_seconds = r.stats.propose_seconds + r.stats.verify_seconds;
    info.stats.stop = stop_of(r.stop);
    *out = info;
}

void check_usable(const rewind_batch* batch) {
    if (batch->broken)
        throw Error(ErrorCode::state, "the batch failed in the middle of a step (out of memory) and can no longer "
                                      "run; free it");
}

// Copies text and a NUL into a caller's buffer of `buf_size`, or reports the length needed.
void copy_text(const std::string& text, char* buf, size_t buf_size, size_t* n_bytes) {
    need(n_bytes, "n_bytes");
    if (text.size() + 1 > buf_size || !buf) {
        *n_bytes = text.size();
        throw Error(ErrorCode::capacity, std::to_string(text.size()) + " bytes and a NUL do not fit a buffer of " +
                                             std::to_string(buf_size));
    }
    std::memcpy(buf, text.data(), text.size());
    buf[text.size()] = '\0';
    *n_bytes = text.size();
}

// The format the options name (or the file's template) and the ChatOptions they give; empty
// BOS/EOS texts become the tokenizer's, as ChatSession does.
rwd::ChatFormat chat_format_of(const rwd::Model& model, const rewind_chat_options& o) {
    return rwd::resolve_chat_format(o.chat_template ? o.chat_template : "", model.file().gguf());
}

rwd::ChatOptions chat_options_of(const rwd::Model& model, const rewind_chat_options& o) {
    rwd::ChatOptions c;
    c.add_generation_prompt = o.add_generation_prompt != 0;
    c.bos_token = o.bos_token ? o.bos_token : "";
    c.eos_token = o.eos_token ? o.eos_token : "";
    rwd::fill_token_texts(c, model.tokenizer());
    c.enable_thinking = o.enable_thinking != 0;
    c.date_string = o.date_string ? o.date_string : "";
    return c;
}

std::vector<rwd::ChatMessage> chat_messages(const rewind_chat_message* messages, size_t n) {
    if (n > 0) need(messages, "messages");
    std::vector<rwd::ChatMessage> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        if (!messages[i].role) throw Error(ErrorCode::argument, "message " + std::to_string(i) + ": role is NULL");
        if (!messages[i].content)
            throw Error(ErrorCode::argument, "message " + std::to_string(i) + " (" + messages[i].role +
                                                 "): content is NULL");
        out.push_back(rwd::ChatMessage{.role = messages[i].role, .content = messages[i].content});
    }
    return out;
}

// What a Hugging Face past_key_values must match for `m`, and whether its key rows are
// permuted relative to rewind's (llama files: the GGUF converter permuted Q/K for adjacent-pair rope).
struct HfLayout {
    int64_t n_layer, n_head_kv, head_dim;
    bool permuted;
};

HfLayout hf_layout(const rwd::Model& m) {
    const rwd::LlamaHparams& hp = m.hparams();
    return {hp.n_layer, hp.n_head_kv, hp.head_dim(), hp.arch != nullptr && hp.arch->rope == rwd::RopeMode::Norm};
}

// The dtype comes as an int: a C caller may pass any value, and only a checked one becomes a
// rewind_dtype (loading an enum from an out-of-range value is undefined in C++).
rewind_dtype check_dtype(int dtype) {
    if (dtype != REWIND_DTYPE_F32 && dtype != REWIND_DTYPE_F16)
        throw Error(ErrorCode::argument, "unknown dtype " + std::to_string(dtype) +
                                             " (expected REWIND_DTYPE_F32 or REWIND_DTYPE_F16)");
    return static_cast<rewind_dtype>(dtype);
}

// Layer count and head shape against the model's (shape, both named).
void check_hf_shape(const HfLayout& L, const rwd::Model& m, size_t n_layers, int64_t n_head_kv, int64_t head_dim) {
    auto refuse = [&](const char* what, int64_t got, int64_t want) {
        throw Error(ErrorCode::shape, std::string("past_key_values has ") + what + " " + std::to_string(got) +
                                          ", the model (" + m.path() + ", " + m.hparams().architecture + ") has " +
                                          std::to_string(want));
    };
    if (n_layers != static_cast<size_t>(L.n_layer)) refuse("layer count", static_cast<int64_t>(n_layers), L.n_layer);
    if (n_head_kv != L.n_head_kv) refuse("KV head count", n_head_kv, L.n_head_kv);
    if (head_dim != L.head_dim) refuse("head dimension", head_dim, L.head_dim);
}

void need_layers(const void* const* keys, const void* const* values, size_t n_layers) {
    need(keys, "keys");
    need(values, "values");
    for (size_t l = 0; l < n_layers; ++l) {
        if (!keys[l]) throw Error(ErrorCode::argument, "the key of layer " + std::to_string(l) + " is NULL");
        if (!values[l]) throw Error(ErrorCode::argument, "the value of layer " + std::to_string(l) + " is NULL");
    }
}

float read_elem(const void* p, size_t i, rewind_dtype t) {
    return t == REWIND_DTYPE_F32 ? static_cast<const float*>(p)[i] : rwd::fp16_to_fp32(static_cast<const uint16_t*>(p)[i]);
}

void write_elem(void* p, size_t i, rewind_dtype t, float x) {
    if (t == REWIND_DTYPE_F32)
        static_cast<float*>(p)[i] = x;
    else
        static_cast<uint16_t*>(p)[i] = rwd::fp32_to_fp16(x);
}

// The element of head dimension d in rewind's row that holds Hugging Face's element `hf_d`.
int64_t rewind_dim(int64_t hf_d, int64_t head_dim, bool permuted) {
    if (!permuted) return hf_d;
    const int64_t half = head_dim / 2;
    return hf_d < half ? 2 * hf_d : 2 * (hf_d - half) + 1;
}

} // namespace

extern "C" {

const char* rewind_status_name(rewind_status s) {
    switch (s) {
    case REWIND_OK: return "ok";
    case REWIND_ERR_IO: return "io";
    case REWIND_ERR_FORMAT: return "format";
    case REWIND_ERR_UNSUPPORTED: return "unsupported";
    case REWIND_ERR_SHAPE: return "shape";
    case REWIND_ERR_CAPACITY: return "capacity";
    case REWIND_ERR_ARGUMENT: return "argument";
    case REWIND_ERR_STATE: return "state";
    case REWIND_ERR_INTERNAL: return "internal";
    }
    return "unknown";
}

const char* rewind_last_error(void) { return t_last_error.c_str(); }

const char* rewind_version(void) { return REWIND_VERSION_STRING; }

rewind_status rewind_model_load(const char* path, rewind_model** out) {
    return guarded("rewind_model_load", [&] {
        need(out, "out");
        *out = nullptr;
        need(path, "path");
        auto m = std::make_unique<rewind_model>();
        m->model = rwd::Model::load(path);
        *out = m.release();
    });
}

void rewind_model_free(rewind_model* model) { delete model; }

int32_t rewind_model_n_vocab(const rewind_model* m) { return m ? static_cast<int32_t>(m->model->n_vocab()) : 0; }
int32_t rewind_model_n_ctx(const rewind_model* m) {
    return m ? static_cast<int32_t>(m->model->hparams().n_ctx_train) : 0;
}
rewind_token rewind_model_bos(const rewind_model* m) { return m ? m->model->tokenizer().bos() : -1; }
rewind_token rewind_model_eos(const rewind_model* m) { return m ? m->model->tokenizer().eos() : -1; }

rewind_status rewind_tokenize(const rewind_model* model, const char* text, size_t text_len, int add_bos,
                              rewind_token* tokens, size_t capacity, size_t* n_tokens) {
    return guarded("rewind_tokenize", [&] {
        need(model, "the model");
        need(n_tokens, "n_tokens");
        if (text_len > 0) need(text, "text");
        if (add_bos < -1 || add_bos > 1) throw Error(ErrorCode::argument, "add_bos must be -1, 0 or 1");
        const rwd::AddBos bos = add_bos < 0 ? rwd::AddBos::Default : add_bos ? rwd::AddBos::Yes : rwd::AddBos::No;
        const auto ids = model->model->tokenizer().encode(std::string_view(text ? text : "", text_len), bos);
        copy_out(ids, tokens, capacity, n_tokens);
    });
}

rewind_status rewind_detokenize(const rewind_model* model, const rewind_token* tokens, size_t n_tokens, char* buf,
                                size_t buf_size, size_t* n_bytes) {
    return guarded("rewind_detokenize", [&] {
        need(model, "the model");
        need(n_bytes, "n_bytes");
        if (n_tokens > 0) need(tokens, "tokens");
        const rwd::Tokenizer& tok = model->model->tokenizer();
        std::vector<rwd::TokenId> ids(tokens, tokens + n_tokens);
        for (size_t i = 0; i < n_tokens; ++i)
            if (!tok.valid(ids[i]))
                throw Error(ErrorCode::argument, "token " + std::to_string(i) + " has id " + std::to_string(ids[i]) +
                                                     ", outside the vocabulary");
        const std::string text = tok.decode(ids);
        if (text.size() + 1 > buf_size || !buf) {
            *n_bytes = text.size();
            throw Error(ErrorCode::capacity, std::to_string(text.size()) + " bytes and a NUL do not fit a buffer of " +
                                                 std::to_string(buf_size));
        }
        std::memcpy(buf, text.data(), text.size());
        buf[text.size()] = '\0';
        *n_bytes = text.size();
    });
}

rewind_context_options rewind_context_default_options(void) {
    const rwd::ContextOptions d;
    rewind_context_options o{};
    o.n_threads = d.n_threads;
    o.max_batch = d.max_batch;
    o.numerics = "exact";
    o.simd = nullptr;
    o.device = "cpu";
    return o;
}

rewind_status rewind_context_new(const rewind_model* model, const rewind_context_options* opts,
                                 rewind_context** out) {
    return guarded("rewind_context_new", [&] {
        need(out, "out");
        *out = nullptr;
        need(model, "the model");
        *out = new rewind_context(model->model, context_options(opts));
    });
}

void rewind_context_free(rewind_context* ctx) { delete ctx; }

rewind_status rewind_cache_new(const rewind_model* model, int64_t capacity, int kv_f16, rewind_cache** out) {
    return guarded("rewind_cache_new", [&] {
        need(out, "out");
        *out = nullptr;
        need(model, "the model");
        *out = new rewind_cache{rwd::Session(model->model, cache_options(capacity, kv_f16))};
    });
}

void rewind_cache_free(rewind_cache* cache) { delete cache; }

int64_t rewind_cache_n_tokens(const rewind_cache* c) { return c ? static_cast<int64_t>(c->session.tokens().size()) : 0; }
int64_t rewind_cache_capacity(const rewind_cache* c) { return c ? c->session.cache().capacity() : 0; }

rewind_status rewind_cache_tokens(const rewind_cache* cache, rewind_token* tokens, size_t capacity, size_t* n) {
    return guarded("rewind_cache_tokens", [&] {
        need(cache, "the cache");
        copy_out(cache->session.tokens(), tokens, capacity, n);
    });
}

rewind_status rewind_cache_truncate(rewind_cache* cache, int64_t n) {
    return guarded("rewind_cache_truncate", [&] {
        need(cache, "the cache");
        cache->session.truncate(n);
    });
}

rewind_status rewind_cache_save(const rewind_cache* cache, const char* path) {
    return guarded("rewind_cache_save", [&] {
        need(cache, "the cache");
        need(path, "path");
        cache->session.cache().save(path);
    });
}

rewind_status rewind_cache_load(const rewind_model* model, const char* path, int64_t capacity, int kv_f16,
                                const rewind_token* tokens, size_t n_tokens, rewind_cache** out) {
    return guarded("rewind_cache_load", [&] {
        need(out, "out");
        *out = nullptr;
        need(model, "the model");
        need(path, "path");
        if (n_tokens > 0) need(tokens, "tokens");
        rwd::KvCache kv = rwd::KvCache::load(path, *model->model, cache_options(capacity, kv_f16));
        try {
            *out = new rewind_cache{rwd::Session(model->model, std::move(kv),
                                                 std::vector<rwd::TokenId>(tokens, tokens + n_tokens))};
        } catch (const Error& e) {
            throw Error(e.code(), std::string(path) + ": " + e.what());
        }
    });
}

rewind_status rewind_model_kv_shape(const rewind_model* model, rewind_kv_shape* out) {
    return guarded("rewind_model_kv_shape", [&] {
        need(model, "the model");
        need(out, "out");
        const HfLayout L = hf_layout(*model->model);
        *out = rewind_kv_shape{L.n_layer, L.n_head_kv, L.head_dim, L.permuted ? 1 : 0,
                               model->model->hparams().architecture.c_str()};
    });
}

rewind_status rewind_cache_import_hf(const rewind_model* model, int64_t capacity, int kv_f16, int dtype_code,
                                     const void* const* keys, const void* const* values, size_t n_layers,
                                     int64_t n_head_kv, int64_t n_positions, int64_t head_dim,
                                     const rewind_token* tokens, size_t n_tokens, rewind_cache** out) {
    return guarded("rewind_cache_import_hf", [&] {
        need(out, "out");
        *out = nullptr;
        need(model, "the model");
        const rwd::Model& m = *model->model;
        const rewind_dtype dtype = check_dtype(dtype_code);
        if (n_positions < 0) throw Error(ErrorCode::argument, "n_positions must be >= 0");
        const HfLayout L = hf_layout(m);
        check_hf_shape(L, m, n_layers, n_head_kv, head_dim);
        const auto pos = static_cast<uint64_t>(n_positions);
        if (n_tokens != pos && n_tokens != pos + 1)
            throw Error(ErrorCode::state, std::to_string(n_tokens) + " token ids for a cache of " +
                                              std::to_string(n_positions) + " positions: expected " +
                                              std::to_string(n_positions) + " (its ids) or " +
                                              std::to_string(n_positions + 1) + " (its ids and the next one)");
        if (n_tokens > 0) need(tokens, "tokens");
        // The capacity first: a huge n_positions is refused before anything of its size is allocated.
        const int64_t n_ctx = m.hparams().n_ctx_train;
        const int64_t cap = capacity == 0 ? std::min<int64_t>(n_ctx, rwd::kDefaultKvCapacity) : capacity;
        if (static_cast<uint64_t>(n_tokens) > static_cast<uint64_t>(std::max<int64_t>(cap, 0)))
            throw Error(ErrorCode::capacity, std::to_string(n_tokens) + " tokens do not fit a cache of capacity " +
                                                 std::to_string(cap) + " (the model's context: " +
                                                 std::to_string(n_ctx) + ")");
        if (n_positions > 0) need_layers(keys, values, n_layers);
        // Positions the cache keeps: all, or all but the last when its token is the newest.
        const int64_t keep = n_tokens == pos ? std::max<int64_t>(n_positions - 1, 0) : n_positions;
        const int64_t H = L.n_head_kv, D = L.head_dim;
        const size_t per_layer = static_cast<size_t>(keep * H * D);
        std::vector<float> k(per_layer * static_cast<size_t>(L.n_layer)), v(k.size());
        for (int64_t l = 0; l < L.n_layer && keep > 0; ++l)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t t = 0; t < keep; ++t) {
                    const size_t src = static_cast<size_t>((h * n_positions + t) * D);
                    const size_t dst = static_cast<size_t>(l) * per_layer + static_cast<size_t>((t * H + h) * D);
                    for (int64_t d = 0; d < D; ++d) {
                        k[dst + rewind_dim(d, D, L.permuted)] = read_elem(keys[l], src + d, dtype);
                        v[dst + d] = read_elem(values[l], src + d, dtype);
                    }
                }
        rwd::KvCache kv = rwd::KvCache::import(m, keep, k, v, cache_options(capacity, kv_f16));
        *out = new rewind_cache{
            rwd::Session(model->model, std::move(kv), std::vector<rwd::TokenId>(tokens, tokens + n_tokens))};
    });
}

int64_t rewind_cache_n_positions(const rewind_cache* c) { return c ? c->session.cache().size() : 0; }

rewind_status rewind_cache_export_hf(const rewind_cache* cache, int dtype_code, void* const* keys,
                                     void* const* values, size_t n_layers, int64_t n_head_kv, int64_t n_positions,
                                     int64_t head_dim) {
    return guarded("rewind_cache_export_hf", [&] {
        need(cache, "the cache");
        const rewind_dtype dtype = check_dtype(dtype_code);
        const rwd::Model& m = cache->session.model();
        const HfLayout L = hf_layout(m);
        check_hf_shape(L, m, n_layers, n_head_kv, head_dim);
        const int64_t n = cache->session.cache().size();
        if (n_positions != n)
            throw Error(ErrorCode::shape, "arrays of " + std::to_string(n_positions) + " positions for a cache of " +
                                              std::to_string(n));
        if (n == 0) return;
        need_layers(keys, values, n_layers);
        std::vector<float> k, v;
        cache->session.cache().export_kv(k, v);
        const int64_t H = L.n_head_kv, D = L.head_dim;
        const size_t per_layer = static_cast<size_t>(n * H * D);
        for (int64_t l = 0; l < L.n_layer; ++l)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t t = 0; t < n; ++t) {
                    const size_t dst = static_cast<size_t>((h * n + t) * D);
                    const size_t src = static_cast<size_t>(l) * per_layer + static_cast<size_t>((t * H + h) * D);
                    for (int64_t d = 0; d < D; ++d) {
                        write_elem(keys[l], dst + d, dtype, k[src + rewind_dim(d, D, L.permuted)]);
                        write_elem(values[l], dst + d, dtype, v[src + d]);
                    }
                }
    });
}

rewind_status rewind_append(rewind_context* ctx, rewind_cache* cache, const rewind_token* tokens, size_t n_tokens) {
    return guarded("rewind_append", [&] {
        check_pair(ctx, cache);
        if (n_tokens == 0) return;
        need(tokens, "tokens");
        cache->session.append_tokens(ctx->ctx, std::span<const rwd::TokenId>(tokens, n_tokens));
    });
}

rewind_status rewind_next_logits(rewind_context* ctx, rewind_cache* cache, const float** logits, size_t* n_vocab) {
    return guarded("rewind_next_logits", [&] {
        check_pair(ctx, cache);
        need(logits, "logits");
        need(n_vocab, "n_vocab");
        const std::vector<rwd::TokenId>& ids = cache->session.tokens();
        if (ids.empty()) throw Error(ErrorCode::state, "the cache holds no tokens (append a prompt first)");
        // Run the held-back token as generation's first pass does (alone, Logits::Last), then
        // drop its K/V: the session holds exactly what it held.
        rwd::KvCache& kv = cache->session.cache();
        const int64_t held = kv.size();
        const std::span<const float> l = ctx->ctx.forward(kv, std::span<const rwd::TokenId>(&ids.back(), 1),
                                                          rwd::Logits::Last);
        kv.truncate(held);
        *logits = l.data();
        *n_vocab = l.size();
    });
}

rewind_generate_options rewind_generate_default_options(void) {
    const rwd::GenerateOptions g;
    rewind_generate_options o{};
    o.max_tokens = g.max_tokens;
    o.temperature = g.sampler.temperature;
    o.top_k = g.sampler.top_k;
    o.top_p = g.sampler.top_p;
    o.min_p = g.sampler.min_p;
    o.repeat_penalty = g.sampler.repeat_penalty;
    o.repeat_last_n = g.sampler.repeat_last_n;
    o.seed = g.sampler.seed;
    o.stop_at_eog = g.stop_at_eog ? 1 : 0;
    o.stop_strings = nullptr;
    o.n_stop_strings = 0;
    o.on_token = nullptr;
    o.user_data = nullptr;
    o.frequency_penalty = g.sampler.frequency_penalty;
    o.presence_penalty = g.sampler.presence_penalty;
    o.logit_bias_tokens = nullptr;
    o.logit_bias_values = nullptr;
    o.n_logit_bias = 0;
    o.logprobs = nullptr;
    o.grammar = nullptr;
    o.json_schema = nullptr;
    o.regex = nullptr;
    o.json_whitespace = 0;
    return o;
}

rewind_status rewind_generate(rewind_context* ctx, rewind_cache* cache, const rewind_generate_options* opts,
                              rewind_token* out_tokens, size_t out_capacity, size_t* n_out, rewind_stats* stats) {
    return guarded("rewind_generate", [&] {
        check_pair(ctx, cache);
        need(n_out, "n_out");
        const rwd::GenerateOptions g = generate_options(opts, out_capacity);
        if (g.max_tokens > 0) need(out_tokens, "out_tokens");
        const auto constraint = constraint_of(opts, ctx->constraints);
        const rwd::GenerateResult r = cache->session.generate(ctx->ctx, g, token_callback(opts), constraint.get());
        finish(r, out_tokens, n_out, opts);
        if (stats) fill_stats(stats, r);
    });
}

rewind_spec_options rewind_spec_default_options(void) {
    rewind_spec_options o{};
    o.source = "ngram";
    o.k = 8;
    o.k_policy = REWIND_K_FIXED;
    o.branches = 0;
    o.references = nullptr;
    o.n_references = 0;
    o.draft = nullptr;
    return o;
}

rewind_status rewind_generate_speculative(rewind_context* ctx, rewind_cache* cache,
                                          const rewind_generate_options* opts, const rewind_spec_options* spec,
                                          rewind_token* out_tokens, size_t out_capacity, size_t* n_out,
                                          rewind_stats* stats) {
    namespace sp = rwd::speculate;
    return guarded("rewind_generate_speculative", [&] {
        check_pair(ctx, cache);
        need(n_out, "n_out");
        need(spec, "the speculation options");
        need(spec->source, "the source name");
        sp::SpeculativeOptions so;
        so.generate = generate_options(opts, out_capacity);
        if (so.generate.max_tokens > 0) need(out_tokens, "out_tokens");
        so.k = spec->k;
        so.k_policy = k_policy_of(spec->k_policy);
        const rwd::KvCache& kv = cache->session.cache();
        const sp::SourceSpec ss = source_spec(spec, kv.type());
        if (cache->session.tokens().empty())
            throw Error(ErrorCode::state, "the cache holds no tokens (append a prompt first)");
        auto source = sp::make_guess_source(ss, ctx->ctx.model(), kv.capacity());
        const auto constraint = constraint_of(opts, ctx->constraints);
        const sp::SpeculativeResult r =
            sp::generate_speculative(ctx->ctx, cache->session, *source, so, token_callback(opts), constraint.get());
        finish(r, out_tokens, n_out, opts);
        if (stats) {
            fill_stats(stats, r);
            stats->passes = r.stats.passes;
            stats->proposed = r.stats.proposed;
            stats->accepted = r.stats.accepted;
        }
    });
}

rewind_status rewind_append_text(rewind_context* ctx, rewind_cache* cache, const char* text, size_t text_len) {
    return guarded("rewind_append_text", [&] {
        check_pair(ctx, cache);
        if (text_len == 0) return;
        need(text, "text");
        cache->session.append_text(ctx->ctx, std::string_view(text, text_len));
    });
}

rewind_status rewind_gen(rewind_context* ctx, rewind_cache* cache, const rewind_generate_options* opts,
                         const rewind_spec_options* spec, rewind_gen_result* result) {
    namespace sp = rwd::speculate;
    return guarded("rewind_gen", [&] {
        check_pair(ctx, cache);
        const rewind_generate_options go = opts ? *opts : rewind_generate_default_options();
        if (go.logprobs) throw Error(ErrorCode::argument, "rewind_gen takes no logprobs buffers");
        const rwd::GenerateOptions g = generate_options(&go, SIZE_MAX); // no output buffer
        auto text = [](const char* p) { return p ? std::string(p) : std::string(); };
        if (go.json_whitespace != 0 && go.json_whitespace != 1)
            throw Error(ErrorCode::argument, "json_whitespace must be 0 (compact) or 1 (free), got " +
                                                 std::to_string(go.json_whitespace));
        sp::GenSpec gs{.regex = text(go.regex),
                       .json_schema = text(go.json_schema),
                       .json_whitespace = go.json_whitespace ? rwd::grammar::JsonWhitespace::Free
                                                             : rwd::grammar::JsonWhitespace::Compact,
                       .grammar = text(go.grammar),
                       .stop = g.stop_strings,
                       .max_tokens = g.max_tokens,
                       .sampler = g.sampler,
                       .stop_at_eog = g.stop_at_eog,
                       .logprobs = {},
                       .on_token = token_callback(&go)};
        std::unique_ptr<sp::GuessSource> source;
        sp::ProgramOptions po{.compiler = &ctx->constraints};
        if (spec) {
            need(spec->source, "the source name");
            po.k = spec->k;
            po.k_policy = k_policy_of(spec->k_policy);
            const rwd::KvCache& kv = cache->session.cache();
            if (cache->session.tokens().empty())
                throw Error(ErrorCode::state, "the cache holds no tokens (append a prompt first)");
            source = sp::make_guess_source(source_spec(spec, kv.type()), ctx->ctx.model(), kv.capacity());
        }
        const auto n_before = static_cast<int64_t>(cache->session.tokens().size());
        sp::Program program(ctx->ctx, cache->session, source.get(), po);
        sp::GenResult r = program.gen(gs);
        cache->gen_text = std::move(r.text); // nothing below can fail
        if (!result) return;
        fill_stats(&result->stats, r);
        result->stats.passes = r.stats.passes;
        result->stats.proposed = r.stats.proposed;
        result->stats.accepted = r.stats.accepted;
        result->forced_proposed = r.stats.forced_proposed;
        result->forced_accepted = r.stats.forced_accepted;
        result->n_tokens = static_cast<int64_t>(cache->session.tokens().size()) - n_before;
        result->text_bytes = cache->gen_text.size();
        result->complete = r.complete ? 1 : 0;
    });
}

rewind_status rewind_gen_text(const rewind_cache* cache, char* buf, size_t buf_size, size_t* n_bytes) {
    return guarded("rewind_gen_text", [&] {
        need(cache, "the cache");
        copy_text(cache->gen_text, buf, buf_size, n_bytes);
    });
}

// ---- Continuous batching ----

rewind_batch_options rewind_batch_default_options(void) {
    const rwd::speculate::BatchOptions d;
    rewind_batch_options o{};
    o.kv_budget_bytes = d.kv_budget_bytes;
    o.kv_f16 = d.kv_type == rwd::KvType::F16 ? 1 : 0;
    o.prefill_chunk = d.prefill_chunk;
    o.pass_tokens = d.pass_tokens;
    o.share_prefixes = d.share_prefixes ? 1 : 0;
    o.cost_model = d.cost_model ? 1 : 0;
    o.pass_fixed_seconds = d.pass_fixed_seconds;
    o.pass_row_seconds = d.pass_row_seconds;
    return o;
}

rewind_status rewind_batch_new(const rewind_model* model, const rewind_context_options* ctx_opts,
                               const rewind_batch_options* opts, rewind_batch** out) {
    return guarded("rewind_batch_new", [&] {
        need(out, "out");
        *out = nullptr;
        need(model, "the model");
        const rewind_batch_options bo = opts ? *opts : rewind_batch_default_options();
        auto b = std::make_unique<rewind_batch>();
        b->model = model->model;
        b->kv_type = bo.kv_f16 ? rwd::KvType::F16 : rwd::KvType::F32;
        b->ctx = std::make_unique<rwd::Context>(model->model, context_options(ctx_opts));
        b->dec = std::make_unique<rwd::speculate::BatchDecoder>(
            *b->ctx, rwd::speculate::BatchOptions{.kv_budget_bytes = bo.kv_budget_bytes,
                                                  .kv_type = b->kv_type,
                                                  .prefill_chunk = bo.prefill_chunk,
                                                  .pass_tokens = bo.pass_tokens,
                                                  .share_prefixes = bo.share_prefixes != 0,
                                                  .cost_model = bo.cost_model != 0,
                                                  .pass_fixed_seconds = bo.pass_fixed_seconds,
                                                  .pass_row_seconds = bo.pass_row_seconds});
        *out = b.release();
    });
}

void rewind_batch_free(rewind_batch* batch) {
    if (!batch) return;
    batch->dec.reset(); // before the context it refers to
    delete batch;
}

rewind_status rewind_batch_add(rewind_batch* batch, const rewind_token* prompt, size_t n_prompt,
                               const rewind_generate_options* opts, const rewind_spec_options* spec,
                               uint64_t* request_id) {
    namespace sp = rwd::speculate;
    return guarded("rewind_batch_add", [&] {
        need(batch, "the batch");
        need(request_id, "request_id");
        check_usable(batch);
        if (n_prompt == 0) throw Error(ErrorCode::argument, "the prompt is empty (a request needs at least one id)");
        need(prompt, "the prompt");
        const rwd::Model& model = *batch->model;
        const int64_t n_ctx = model.hparams().n_ctx_train;
        sp::BatchRequest req;
        if (opts && opts->logprobs)
            throw Error(ErrorCode::argument, "a batch request takes no logprobs buffers (not yet supported in C)");
        req.generate = generate_options(opts, SIZE_MAX); // no output buffer: any max_tokens >= 0
        if (opts->on_token)
            throw Error(ErrorCode::argument, "a batch request takes no on_token callback (read its tokens with "
                                             "rewind_batch_request_tokens between steps)");
        req.prompt.assign(prompt, prompt + n_prompt);
        if (names_constraint(opts)) {
            if (!batch->constraints)
                batch->constraints = std::make_unique<sp::ConstraintCompiler>(model.tokenizer());
            req.constraint = constraint_of(opts, *batch->constraints);
        }
        if (spec) {
            if (spec->k < 1 || spec->k > sp::SpeculativeOptions::kMaxK)
                throw Error(ErrorCode::argument, "k must be in [1, " + std::to_string(sp::SpeculativeOptions::kMaxK) +
                                                     "], got " + std::to_string(spec->k));
            const sp::SourceSpec ss = source_spec(spec, batch->kv_type);
            // The positions the request's cache will have (as BatchDecoder::submit sizes it).
            const auto P = static_cast<int64_t>(n_prompt);
            const int64_t cap = P >= n_ctx || req.generate.max_tokens >= n_ctx - P ? n_ctx : P + req.generate.max_tokens;
            req.source = sp::make_guess_source(ss, model, std::max<int64_t>(cap, 1));
            req.k = spec->k;
            req.k_policy = k_policy_of(spec->k_policy);
        }
        // Room first, so that recording the request after submit() cannot fail.
        auto& es = batch->entries;
        if (es.size() == es.capacity()) es.reserve(std::max<size_t>(8, 2 * es.size()));
        rewind_batch::Entry e;
        e.prompt_size = static_cast<int64_t>(n_prompt);
        e.id = batch->dec->submit(std::move(req));
        batch->entries.push_back(std::move(e));
        *request_id = batch->entries.back().id;
    });
}

rewind_status rewind_batch_step(rewind_batch* batch, int64_t* n_active) {
    return guarded("rewind_batch_step", [&] {
        need(batch, "the batch");
        need(n_active, "n_active");
        check_usable(batch);
        std::vector<rwd::speculate::BatchResult> ended;
        try {
            ended = batch->dec->step();
        } catch (...) {
            // step() handles every request's own failure; what escapes it (out of memory) may
            // have left a pass half judged.
            batch->broken = true;
            throw;
        }
        for (rwd::speculate::BatchResult& r : ended) {
            rewind_batch::Entry& e = entry_of(batch, r.id);
            e.state = r.failed ? REWIND_REQUEST_FAILED : r.stop == rwd::StopReason::Cancelled ? REWIND_REQUEST_CANCELLED : REWIND_REQUEST_DONE;
            e.result = std::move(r);
        }
        *n_active = static_cast<int64_t>(batch->dec->active());
    });
}

rewind_status rewind_batch_cancel(rewind_batch* batch, uint64_t request_id) {
    return guarded("rewind_batch_cancel", [&] {
        need(batch, "the batch");
        rewind_batch::Entry& e = entry_of(batch, request_id);
        if (e.state != REWIND_REQUEST_RUNNING)
            throw Error(ErrorCode::state, "request " + std::to_string(request_id) + " has already ended (" +
                                              state_name(e.state) + ")");
        if (!batch->dec->cancel(request_id))
            throw Error(ErrorCode::state, "request " + std::to_string(request_id) + " is not in the decoder");
        e.cancel_asked = true;
    });
}

int64_t rewind_batch_n_active(const rewind_batch* b) { return b ? static_cast<int64_t>(b->dec->active()) : 0; }
uint64_t rewind_batch_kv_bytes(const rewind_batch* b) { return b ? b->dec->kv_bytes_in_use() : 0; }

rewind_status rewind_batch_request_info(const rewind_batch* batch, uint64_t request_id, rewind_request_info* out) {
    return guarded("rewind_batch_request_info", [&] {
        need(batch, "the batch");
        need(out, "out");
        const rewind_batch::Entry& e = entry_of(batch, request_id);
        fill_info(out, e, result_of(batch, e));
    });
}

rewind_status rewind_batch_request_tokens(const rewind_batch* batch, uint64_t request_id, rewind_token* tokens,
                                          size_t capacity, size_t* n_tokens) {
    return guarded("rewind_batch_request_tokens", [&] {
        need(batch, "the batch");
        need(n_tokens, "n_tokens");
        const rewind_batch::Entry& e = entry_of(batch, request_id);
        copy_out(result_of(batch, e).tokens, tokens, capacity, n_tokens);
    });
}

rewind_status rewind_batch_request_error(const rewind_batch* batch, uint64_t request_id, char* buf, size_t buf_size,
                                         size_t* n_bytes) {
    return guarded("rewind_batch_request_error", [&] {
        need(batch, "the batch");
        need(n_bytes, "n_bytes");
        const rewind_batch::Entry& e = entry_of(batch, request_id);
        const std::string empty;
        const std::string& msg = e.state == REWIND_REQUEST_FAILED ? e.result.error : empty;
        if (msg.size() + 1 > buf_size || !buf) {
            *n_bytes = msg.size();
            throw Error(ErrorCode::capacity, std::to_string(msg.size()) + " bytes and a NUL do not fit a buffer of " +
                                                 std::to_string(buf_size));
        }
        std::memcpy(buf, msg.data(), msg.size());
        buf[msg.size()] = '\0';
        *n_bytes = msg.size();
    });
}

rewind_status rewind_batch_finished(const rewind_batch* batch, uint64_t* ids, size_t capacity, size_t* n_ids) {
    return guarded("rewind_batch_finished", [&] {
        need(batch, "the batch");
        need(n_ids, "n_ids");
        size_t n = 0;
        for (const auto& e : batch->entries) n += e.state != REWIND_REQUEST_RUNNING ? 1 : 0;
        *n_ids = n;
        if (n > capacity)
            throw Error(ErrorCode::capacity,
                        std::to_string(n) + " ids do not fit a buffer of " + std::to_string(capacity));
        if (n > 0) need(ids, "the id buffer");
        size_t i = 0;
        for (const auto& e : batch->entries)
            if (e.state != REWIND_REQUEST_RUNNING) ids[i++] = e.id;
    });
}

rewind_status rewind_batch_take(rewind_batch* batch, uint64_t request_id, rewind_token* tokens, size_t capacity,
                                size_t* n_tokens, rewind_request_info* info) {
    return guarded("rewind_batch_take", [&] {
        need(batch, "the batch");
        need(n_tokens, "n_tokens");
        rewind_batch::Entry& e = entry_of(batch, request_id);
        if (e.state == REWIND_REQUEST_RUNNING)
            throw Error(ErrorCode::state, "request " + std::to_string(request_id) +
                                              " is still running (step until it ends, or cancel it)");
        copy_out(e.result.tokens, tokens, capacity, n_tokens);
        if (info) fill_info(info, e, e.result);
        batch->entries.erase(batch->entries.begin() + (&e - batch->entries.data()));
    });
}

rewind_status rewind_batch_release(rewind_batch* batch, uint64_t request_id) {
    return guarded("rewind_batch_release", [&] {
        need(batch, "the batch");
        rewind_batch::Entry& e = entry_of(batch, request_id);
        if (e.state == REWIND_REQUEST_RUNNING)
            throw Error(ErrorCode::state, "request " + std::to_string(request_id) +
                                              " is still running (cancel it and step first)");
        batch->entries.erase(batch->entries.begin() + (&e - batch->entries.data()));
    });
}

// ---- Chat ----

rewind_chat_options rewind_chat_default_options(void) {
    const rwd::ChatOptions d;
    rewind_chat_options o{};
    o.chat_template = nullptr;
    o.add_generation_prompt = d.add_generation_prompt ? 1 : 0;
    o.bos_token = nullptr;
    o.eos_token = nullptr;
    o.enable_thinking = d.enable_thinking ? 1 : 0;
    o.date_string = nullptr;
    return o;
}

rewind_status rewind_chat_format(const rewind_model* model, const rewind_chat_options* opts,
                                 const rewind_chat_message* messages, size_t n_messages, char* buf, size_t buf_size,
                                 size_t* n_bytes) {
    return guarded("rewind_chat_format", [&] {
        need(model, "the model");
        need(n_bytes, "n_bytes");
        const rewind_chat_options o = opts ? *opts : rewind_chat_default_options();
        const auto msgs = chat_messages(messages, n_messages);
        const rwd::Model& m = *model->model;
        const std::string text = rwd::format_chat(chat_format_of(m, o), msgs, chat_options_of(m, o));
        copy_text(text, buf, buf_size, n_bytes);
    });
}

rewind_status rewind_chat_tokenize(const rewind_model* model, const rewind_chat_options* opts,
                                   const rewind_chat_message* messages, size_t n_messages, rewind_token* tokens,
                                   size_t capacity, size_t* n_tokens) {
    return guarded("rewind_chat_tokenize", [&] {
        need(model, "the model");
        need(n_tokens, "n_tokens");
        const rewind_chat_options o = opts ? *opts : rewind_chat_default_options();
        const auto msgs = chat_messages(messages, n_messages);
        const rwd::Model& m = *model->model;
        const auto ids = rwd::tokenize_chat(m.tokenizer(), chat_format_of(m, o), msgs, chat_options_of(m, o));
        copy_out(ids, tokens, capacity, n_tokens);
    });
}

rewind_status rewind_chat_new(const rewind_model* model, const rewind_chat_options* opts, const char* system,
                              int64_t capacity, int kv_f16, rewind_chat** out) {
    return guarded("rewind_chat_new", [&] {
        need(out, "out");
        *out = nullptr;
        need(model, "the model");
        const rewind_chat_options o = opts ? *opts : rewind_chat_default_options();
        const rwd::Model& m = *model->model;
        rwd::ChatSessionOptions so;
        so.cache = cache_options(capacity, kv_f16);
        so.chat = chat_options_of(m, o);
        so.system = system ? system : "";
        *out = new rewind_chat{rwd::ChatSession(model->model, chat_format_of(m, o), std::move(so)), std::string()};
    });
}

void rewind_chat_free(rewind_chat* chat) { delete chat; }

rewind_status rewind_chat_say(rewind_context* ctx, rewind_chat* chat, const char* user,
                              const rewind_generate_options* opts, const rewind_spec_options* spec,
                              rewind_chat_turn* turn) {
    namespace sp = rwd::speculate;
    return guarded("rewind_chat_say", [&] {
        need(ctx, "the context");
        need(chat, "the chat");
        need(user, "the user text");
        rwd::Session& session = chat->chat.session();
        if (!session.cache().belongs_to(ctx->ctx.model()))
            throw Error(ErrorCode::state, "the chat belongs to " + session.model().path() + ", the context runs " +
                                              ctx->ctx.model().path());
        const rewind_generate_options go = opts ? *opts : rewind_generate_default_options();
        if (go.logprobs) throw Error(ErrorCode::argument, "a chat turn takes no logprobs buffers (not yet supported in C)");
        const rwd::GenerateOptions g = generate_options(&go, SIZE_MAX); // no output buffer
        const rwd::TokenCallback cb = token_callback(&go);
        // Compiled before the turn is added, so that a bad constraint leaves the conversation as
        // it was; a fresh constraint each turn: every reply is one sentence of its language.
        const std::unique_ptr<rwd::TokenConstraint> constraint = constraint_of(&go, ctx->constraints);
        rwd::ChatTurn t;
        if (!spec) {
            t = chat->chat.say(ctx->ctx, user,
                               [&](rwd::Session& s) { return s.generate(ctx->ctx, g, cb, constraint.get()); });
        } else {
            need(spec->source, "the source name");
            sp::SpeculativeOptions so;
            so.generate = g;
            so.k = spec->k;
            so.k_policy = k_policy_of(spec->k_policy);
            const rwd::KvCache& kv = session.cache();
            const sp::SourceSpec ss = source_spec(spec, kv.type());
            auto source = sp::make_guess_source(ss, ctx->ctx.model(), kv.capacity());
            sp::SpeculativeResult sr;
            t = chat->chat.say(ctx->ctx, user, [&](rwd::Session& s) -> rwd::GenerateResult {
                sr = sp::generate_speculative(ctx->ctx, s, *source, so, cb, constraint.get());
                return sr;
            });
            if (turn) {
                fill_stats(&turn->stats, t.result);
                turn->stats.passes = sr.stats.passes;
                turn->stats.proposed = sr.stats.proposed;
                turn->stats.accepted = sr.stats.accepted;
            }
        }
        // Nothing below can fail: the turn is recorded, and the reply is moved, not copied.
        chat->reply = std::move(t.reply);
        if (turn) {
            if (!spec) fill_stats(&turn->stats, t.result);
            turn->prompt_tokens = t.prompt_tokens;
            turn->reused_tokens = t.reused_tokens;
            turn->run_tokens = t.run_tokens;
            turn->prefill_seconds = t.prefill_seconds;
        }
    });
}

rewind_status rewind_chat_reply(const rewind_chat* chat, char* buf, size_t buf_size, size_t* n_bytes) {
    return guarded("rewind_chat_reply", [&] {
        need(chat, "the chat");
        copy_text(chat->reply, buf, buf_size, n_bytes);
    });
}

size_t rewind_chat_n_messages(const rewind_chat* chat) { return chat ? chat->chat.messages().size() : 0; }

rewind_status rewind_chat_reset(rewind_chat* chat) {
    return guarded("rewind_chat_reset", [&] {
        need(chat, "the chat");
        chat->chat.reset();
        chat->reply.clear();
    });
}

} // extern "C"

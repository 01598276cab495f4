// BatchDecoder: per pass, the next prompt chunk of every request still prefilling, and for the
// others: propose -> guesses trimmed to the pass budget -> one Context::forward_batch over all
// chunks and [pending token, guesses] -> each request's rows judged and its cache rolled back by
// its own DecodeState (the core plain and speculative decoding share). Retirement frees a
// request's cache (and its share of the KV budget).
#include "rewind/speculate/batch_decoder.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "pass_cost_model.h"
#include "rewind/speculate/forced_source.h"

namespace rwd::speculate {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

} // namespace

// One admitted request: its cache and its decoding state (tokens, sampler, stop rules, k).
struct BatchDecoder::Request {
    uint64_t id = 0;
    BatchRequest req;
    KvCache cache;
    DecodeState seq;
    Proposal proposal;
    std::unique_ptr<ForcedSource> forced; // req.source behind forced text, under a constraint
    GuessSource* source = nullptr;        // what guesses: req.source (or forced wrapping it), or null
    BatchResult res;              // tokens and stats mirrored from seq after each pass
    uint64_t kv_bytes = 0;
    size_t m = 0;                 // guesses kept this pass (trim_guesses)
    int64_t rejections = 0;       // passes in which a guess was refused (acceptance estimate)
    double next_gain = 0;         // trim_guesses: chance that the next kept guess stands
    bool failed = false;
    Clock::time_point admitted;

    bool done() const { return failed || seq.done(); }
    int64_t prompt_size() const { return static_cast<int64_t>(req.prompt.size()); }
    // Prompt tokens but the last are not all in the cache yet (the last one is the first pass's
    // pending token, as in decoding).
    bool prefilling() const { return !done() && cache.size() < prompt_size() - 1; }

    Request(const Model& model, BatchRequest r, KvCacheOptions kv, int k_max)
        : req(std::move(r)), cache(model, kv),
          seq(model, req.generate, cache.capacity(),
              Speculation{.k_max = k_max, .k_policy = req.k_policy, .verify = req.verify}) {}

    // res.tokens and res.stats follow seq (progress() and retirement read res).
    void mirror() {
        const std::span<const TokenId> gen = seq.generated();
        if (res.tokens.empty() && !gen.empty())
            res.queue_to_first_token_seconds = std::chrono::duration<double>(Clock::now() - admitted).count();
        res.tokens.insert(res.tokens.end(), gen.begin() + static_cast<std::ptrdiff_t>(res.tokens.size()), gen.end());
        const std::span<const TokenLogprob> lp = seq.logprobs();
        res.logprobs.insert(res.logprobs.end(), lp.begin() + static_cast<std::ptrdiff_t>(res.logprobs.size()), lp.end());
        res.stats = seq.stats();
        if (seq.done()) res.stop = seq.stop();
    }
};

BatchDecoder::BatchDecoder(Context& ctx, BatchOptions opts) : ctx_(ctx), opts_(opts) {
    if (ctx_.options().numerics != Numerics::Exact)
        throw Error(ErrorCode::state, "batch decoding: the context uses Numerics::LlamaCpp, whose results change with the "
                                      "pass size; batching needs Numerics::Exact");
    if (opts_.kv_type != KvType::F32 && opts_.kv_type != KvType::F16) throw Error("batch decoding: unknown KvType");
    if (opts_.prefill_chunk < 1)
        throw Error("batch decoding: prefill_chunk must be >= 1, got " + std::to_string(opts_.prefill_chunk));
    if (!(opts_.pass_fixed_seconds >= 0) || !(opts_.pass_row_seconds >= 0) ||
        std::isinf(opts_.pass_fixed_seconds) || std::isinf(opts_.pass_row_seconds))
        throw Error("batch decoding: pass_fixed_seconds and pass_row_seconds must be finite and >= 0");
    if (opts_.pass_tokens < 0)
        throw Error("batch decoding: pass_tokens must be >= 0 (0: max_batch), got " + std::to_string(opts_.pass_tokens));
    const auto B = static_cast<size_t>(ctx_.options().max_batch);
    items_.reserve(B);
    in_pass_.reserve(B);
    active_.reserve(B);
    decode_levels_.resize(B + 1);
    cost_ = std::make_unique<PassCostModel>(opts_.pass_fixed_seconds, opts_.pass_row_seconds);
}

BatchDecoder::~BatchDecoder() = default;

uint64_t BatchDecoder::kv_bytes_for(int64_t positions) const {
    const LlamaHparams& hp = ctx_.model().hparams();
    const uint64_t elem = opts_.kv_type == KvType::F32 ? 4 : 2;
    return 2 * static_cast<uint64_t>(hp.n_layer) * static_cast<uint64_t>(positions) *
           static_cast<uint64_t>(hp.n_head_kv * hp.head_dim()) * elem;
}

uint64_t BatchDecoder::submit(BatchRequest req) {
    const Model& model = ctx_.model();
    const auto P = static_cast<int64_t>(req.prompt.size());
    const int64_t n_ctx = model.hparams().n_ctx_train;
    if (P > n_ctx)
        throw Error(ErrorCode::capacity, "batch decoding: the prompt of " + std::to_string(P) +
                                             " tokens exceeds the model's context length " + std::to_string(n_ctx));
    check_prompt(model, req.prompt, 0, n_ctx, "batch decoding");
    if (req.generate.max_tokens < 0)
        throw Error("batch decoding: max_tokens must be >= 0, got " + std::to_string(req.generate.max_tokens));
    if (req.source && (req.k < 1 || req.k > SpeculativeOptions::kMaxK))
        throw Error("batch decoding: k must be in [1, " + std::to_string(SpeculativeOptions::kMaxK) + "], got " +
                    std::to_string(req.k));
    // Sampler, stop and verification options are checked by DecodeState's constructor, before any
    // cache is allocated.
    (void)DecodeState(model, req.generate, n_ctx, Speculation{.k_policy = req.k_policy, .verify = req.verify});
    if (static_cast<int64_t>(active_.size()) >= ctx_.options().max_batch)
        throw Error(ErrorCode::capacity, "batch decoding: " + std::to_string(active_.size()) +
                                             " requests are active, the most a pass of max_batch " +
                                             std::to_string(ctx_.options().max_batch) + " tokens can carry");
    // As many positions as plain decoding could fill: then stops (ContextFull included) fall
    // exactly where generate_plain's do with a cache of the whole context.
    // (Written so that a huge max_tokens, e.g. INT64_MAX from the C API, cannot overflow.)
    const int64_t capacity = req.generate.max_tokens >= n_ctx - P ? n_ctx : P + req.generate.max_tokens;
    const uint64_t need = kv_bytes_for(capacity);
    if (opts_.kv_budget_bytes > 0 && need > opts_.kv_budget_bytes - std::min(kv_in_use_, opts_.kv_budget_bytes))
        throw Error(ErrorCode::capacity, "batch decoding: admitting a request of " + std::to_string(capacity) +
                                             " positions needs " + std::to_string(need) + " bytes of KV cache; " +
                                             std::to_string(kv_in_use_) + " of the budget of " +
                                             std::to_string(opts_.kv_budget_bytes) + " bytes are in use by " +
                                             std::to_string(active_.size()) + " active requests");

    // Built aside; joins active_ only when everything has succeeded.
    const int k_max = req.source ? static_cast<int>(std::min<int64_t>(req.k, ctx_.options().max_batch - 1)) : 0;
    auto r = std::make_unique<Request>(model, std::move(req), KvCacheOptions{.capacity = capacity, .type = opts_.kv_type},
                                       k_max);
    r->admitted = Clock::now();
    r->kv_bytes = need;
    const std::vector<TokenId>& prompt = r->req.prompt;
    r->seq.start(prompt, r->req.constraint.get());
    if (opts_.share_prefixes) {
        // The longest run of prompt tokens from position 0 that another cache holds (all but the
        // last prompt token at most: that one is the first pass's pending token).
        const Request* donor = nullptr;
        int64_t best = 0;
        for (const auto& d : active_) {
            const int64_t lim = std::min({d->cache.size(), P - 1, r->cache.capacity()});
            int64_t n = 0;
            const std::vector<TokenId>& held = d->seq.tokens();
            while (n < lim && held[static_cast<size_t>(n)] == prompt[static_cast<size_t>(n)]) ++n;
            if (n > best && d->cache.type() == r->cache.type()) {
                best = n;
                donor = d.get();
            }
        }
        if (donor) {
            r->cache.copy_prefix(donor->cache, best);
            r->res.prompt_tokens_shared = best;
        }
    }
    if (const KvCache* pc = r->req.prefix_cache;
        pc && pc->belongs_to(model) && pc->type() == r->cache.type()) {
        const std::span<const TokenId> held = r->req.prefix_tokens;
        const int64_t lim = std::min({pc->size(), static_cast<int64_t>(held.size()), P - 1, r->cache.capacity()});
        int64_t n = 0;
        while (n < lim && held[static_cast<size_t>(n)] == prompt[static_cast<size_t>(n)]) ++n;
        if (n > r->res.prompt_tokens_shared) {
            r->cache.copy_prefix(*pc, n);
            r->res.prompt_tokens_shared = n;
        }
    }
    // The caller's prefix is not ours to keep.
    r->req.prefix_cache = nullptr;
    r->req.prefix_tokens = {};
    // As generate_plain: a request with nothing to generate retires at the next step.
    if (r->req.source) r->source = &with_forced(*r->req.source, r->req.constraint.get(), r->forced);
    if (!r->seq.nothing_to_generate(P) && r->source)
        r->source->reset(GenerationStart{r->seq.tokens(), r->req.verify, r->req.generate.sampler, r->req.constraint.get()});
    r->mirror();
    r->id = next_id_++;
    r->res.id = r->id;
    kv_in_use_ += need;
    active_.push_back(std::move(r));
    return active_.back()->id;
}

const BatchResult* BatchDecoder::progress(uint64_t id) const {
    for (const auto& r : active_)
        if (r->id == id) return &r->res;
    return nullptr;
}

bool BatchDecoder::cancel(uint64_t id) {
    for (auto& r : active_) {
        if (r->id != id) continue;
        // Asking again before the next step() retires it is harmless.
        const bool cancelled = !r->failed && r->seq.done() && r->seq.stop() == StopReason::Cancelled;
        if (r->done() && !cancelled) return false;
        r->seq.cancel(); // no further pass: it retires at the next step()
        return true;
    }
    return false;
}

void BatchDecoder::fail(Request& r, ErrorCode code, const std::string& what) {
    r.res.failed = true;
    r.res.error_code = code;
    r.res.error = what;
    r.failed = true;
}

// Judges r's rows (logits [r.m + 1, n_vocab]) through its DecodeState, rolls its cache back and
// tells its source where the text now stands.
void BatchDecoder::judge(Request& r, std::span<const float> logits) {
    const int accepted = r.seq.judge(logits);
    r.seq.commit(r.cache);
    emitted_this_pass_ += r.seq.emitted_last();
    if (accepted < static_cast<int>(r.seq.guesses())) ++r.rejections;
    if (r.source) { // after its last pass too: a source that remembers outputs sees all of it
        try {
            r.source->accept(r.seq.tokens());
        } catch (const Error& e) {
            fail(r, e.code(), std::string("guess source '") + std::string(r.source->name()) + "': " + e.what());
        }
    }
}

// Keeps at most `budget` guesses in all: one at a time, the guess most likely to stand among
// the next unkept guess of every request, where a request's guess j (0-based) stands with its
// estimated per-guess acceptance p to the power j + 1 (p from its own passes so far, with one
// accepted and one refused guess as the prior). Ties go to the older request. With the cost
// model, it stops at the first guess whose chance does not pay for its row (batch_decoder.h).
void BatchDecoder::trim_guesses(int64_t budget, int64_t rows, size_t first) {
    // Only the decoding requests (in_pass_[first..]) have guesses; each yields one token for certain.
    const std::span<Request* const> dec(in_pass_.data() + first, in_pass_.size() - first);
    int64_t total = 0;
    const auto sure = static_cast<double>(dec.size()); // tokens the pass yields for certain
    for (Request* r : dec) {
        total += static_cast<int64_t>(r->m);
        const DecodeStats& st = r->seq.stats();
        r->next_gain = static_cast<double>(st.accepted + 1) / static_cast<double>(st.accepted + r->rejections + 2);
    }
    double a = 0, b = 0;
    const bool costed = opts_.cost_model && cost_->cost(a, b);
    if (total <= budget && !costed) return;
    // Reuse the proposals' sizes (batch) as the ceilings and count kept guesses in m.
    for (Request* r : dec) r->m = 0;
    double expected = sure;
    auto rows_now = static_cast<double>(rows);
    for (int64_t kept = 0; kept < budget; ++kept) {
        Request* best = nullptr;
        for (Request* r : dec) {
            if (r->m >= r->seq.guesses()) continue;
            if (!best || r->next_gain > best->next_gain) best = r;
        }
        if (!best) break;
        if (costed && !PassCostModel::pays(best->next_gain, expected, rows_now, a, b)) break;
        expected += best->next_gain;
        rows_now += 1;
        ++best->m;
        const DecodeStats& st = best->seq.stats();
        best->next_gain *= static_cast<double>(st.accepted + 1) / static_cast<double>(st.accepted + best->rejections + 2);
    }
    for (Request* r : dec) r->seq.keep_guesses(r->m);
}

// Prompt chunks, oldest request first. At most max_batch - decoding rows are left for them, and
// every active request holds at most one row of max_batch, so a prefilling request always finds
// one. Chunks stop before the last prompt token: that one is the first decoding pass's pending
// token, verified with the first guesses, exactly as SpeculativeDecoder starts (so rejection
// mode draws the same tokens batched as alone).
void BatchDecoder::prefill_chunks(int64_t decoding, int64_t& prefill_rows) {
    int64_t left = std::min(opts_.prefill_chunk, ctx_.options().max_batch - decoding);
    for (auto& rp : active_) {
        Request& r = *rp;
        if (!r.prefilling() || left == 0) continue;
        const int64_t c0 = r.cache.size();
        const int64_t n = std::min(left, r.prompt_size() - 1 - c0);
        r.m = 0;
        const auto chunk = std::span<const TokenId>(r.req.prompt).subspan(static_cast<size_t>(c0), static_cast<size_t>(n));
        items_.push_back(BatchItem{&r.cache, chunk, Logits::None, {}});
        in_pass_.push_back(&r);
        left -= n;
        prefill_rows += n;
    }
}

// A decoding request's guesses for this pass (up to its own k and the pass's guess budget),
// and its rows [pending token, guesses...]. A source that throws fails the request alone.
void BatchDecoder::propose(Request& r, int64_t guess_budget) {
    const int64_t pc = r.cache.size();
    const int room = r.source ? r.seq.room(pc, guess_budget) : 0;
    r.proposal.clear();
    if (room >= 1) {
        try {
            r.source->propose(r.seq.tokens(), room, r.proposal);
        } catch (const Error& e) {
            fail(r, e.code(), std::string("guess source '") + std::string(r.source->name()) + "': " + e.what());
            return;
        }
    }
    try {
        r.seq.begin_pass(pc, r.proposal.tokens, r.proposal.parents, r.proposal.probs, room,
                         r.source ? r.source->name() : std::string_view("guess source"), r.proposal.forced);
    } catch (const Error& e) {
        fail(r, e.code(), e.what());
        return;
    }
    r.m = r.seq.guesses();
    in_pass_.push_back(&r);
}

std::vector<BatchResult> BatchDecoder::step() {
    const int64_t max_batch = ctx_.options().max_batch;
    items_.clear();
    in_pass_.clear();
    int64_t decoding = 0;
    for (auto& rp : active_)
        if (!rp->done() && !rp->prefilling()) ++decoding;

    const auto t_start = Clock::now();
    int64_t prefill_rows = 0;
    prefill_chunks(decoding, prefill_rows);
    // Guesses: each decoding request proposes up to its own k; together they are trimmed to the
    // pass budget (after one pending row per request) and to what max_batch leaves.
    const int64_t budget = opts_.pass_tokens > 0 ? std::min(opts_.pass_tokens, max_batch) : max_batch;
    const int64_t guess_budget = std::max<int64_t>(0, std::min(budget - decoding, max_batch - decoding - prefill_rows));
    const size_t first_decode = in_pass_.size();
    for (auto& rp : active_)
        if (!rp->done() && !rp->prefilling()) propose(*rp, guess_budget);
    trim_guesses(guess_budget, decoding + prefill_rows, first_decode);
    for (size_t j = first_decode; j < in_pass_.size(); ++j)
        items_.push_back(BatchItem{&in_pass_[j]->cache, in_pass_[j]->seq.rows(), Logits::All, {}, in_pass_[j]->seq.parents()});
    if (!items_.empty()) run_pass(first_decode, t_start);
    return retire();
}

// One forward_batch over items_ (or, when it is refused, each request alone, so that a refusal
// is its own), the judging, and the pass's timings.
void BatchDecoder::run_pass(size_t first_decode, Clock::time_point t_start) {
    const double propose_seconds = seconds_between(t_start, Clock::now());
    emitted_this_pass_ = 0;
    const uint64_t rows_before = ctx_.tokens_processed();
    const auto t_verify = Clock::now();
    bool batched = true;
    try {
        ctx_.forward_batch(items_);
        ++passes_;
    } catch (const Error&) {
        batched = false; // refused before anything changed: find out whose input it was
    }
    for (size_t j = 0; j < items_.size(); ++j) {
        Request& r = *in_pass_[j];
        try {
            const BatchItem& it = items_[j];
            const auto logits = batched              ? it.logits
                                : it.parents.empty() ? ctx_.forward(r.cache, it.tokens, it.which)
                                                     : ctx_.forward_tree(r.cache, it.tokens, it.parents);
            if (!batched) ++passes_;
            if (j >= first_decode) judge(r, logits); // a prompt chunk yields no token
        } catch (const Error& e) {
            fail(r, e.code(), e.what());
        }
    }
    const auto t_end = Clock::now();
    const double verify_seconds = seconds_between(t_verify, t_end);
    if (first_decode == 0) {
        const double sec = seconds_between(t_start, t_end);
        const auto rows = static_cast<int64_t>(ctx_.tokens_processed() - rows_before);
        ++decode_passes_;
        decode_seconds_ += sec;
        decode_tokens_ += emitted_this_pass_;
        DecodeLevel& lv = decode_levels_[in_pass_.size()];
        ++lv.passes;
        lv.seconds += sec;
        lv.tokens += emitted_this_pass_;
        lv.rows += rows;
        cost_->observe(static_cast<double>(rows), sec);
    }
    for (size_t j = 0; j < in_pass_.size(); ++j) {
        Request& r = *in_pass_[j];
        DecodeStats& st = r.seq.stats();
        if (j < first_decode) {
            // A prompt chunk: the prefill time runs until the prompt is in (or it failed).
            if (!r.prefilling()) st.prompt_seconds = seconds_between(r.admitted, t_end);
        } else {
            st.verify_seconds += verify_seconds;
            st.propose_seconds += propose_seconds;
        }
        r.mirror(); // once per pass, after the timings: what progress() and retirement read
    }
}

// Retires the finished, cancelled and failed requests, in admission order; the rest keep theirs.
std::vector<BatchResult> BatchDecoder::retire() {
    std::vector<BatchResult> out;
    const auto now = Clock::now();
    size_t keep = 0;
    for (size_t i = 0; i < active_.size(); ++i) {
        Request& r = *active_[i];
        if (r.done()) {
            r.mirror();
            r.res.latency_seconds = seconds_between(r.admitted, now);
            r.res.stats.total_seconds = r.res.latency_seconds;
            kv_in_use_ -= r.kv_bytes;
            if (opts_.keep_caches) {
                const int64_t n = std::min(r.cache.size(), static_cast<int64_t>(r.seq.tokens().size()));
                r.res.cache_tokens.assign(r.seq.tokens().begin(), r.seq.tokens().begin() + n);
                r.res.cache = std::make_shared<KvCache>(std::move(r.cache));
            }
            out.push_back(std::move(r.res));
            active_[i].reset();
        } else {
            active_[keep++] = std::move(active_[i]);
        }
    }
    active_.resize(keep);
    return out;
}

} // namespace rwd::speculate

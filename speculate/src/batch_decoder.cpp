// BatchDecoder: per pass, the next prompt chunk of every request still prefilling, and for the
// others: propose -> guesses trimmed to the pass budget -> one Context::forward_batch over all
// chunks and [pending token, guesses] -> each request's rows judged in order through its own
// StopChecker -> each cache truncated to its own emitted prefix. Retirement frees a request's
// cache (and its share of the KV budget).
#include "rewind/speculate/batch_decoder.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "k_controller.h"

namespace rwd::speculate {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

} // namespace

// One admitted request: its cache, sampler, stop rules and speculation state.
struct BatchDecoder::Request {
    uint64_t id = 0;
    BatchRequest req;
    KvCache cache;
    Sampler sampler;
    StopChecker checker;
    KController kc;
    std::vector<TokenId> tokens;  // prompt + everything emitted (the last one pending in the cache)
    std::vector<TokenId> batch;   // this pass: [pending token, guesses]
    Proposal proposal;
    BatchResult res;
    uint64_t kv_bytes = 0;
    size_t m = 0;                 // guesses verified this pass
    bool judging = false;         // this pass yields tokens (false: a prompt chunk without logits)
    int64_t rejections = 0;       // passes in which a guess was refused (acceptance estimate)
    double next_gain = 0;         // trim_guesses: chance that the next kept guess stands
    bool done = false, cancelled = false;
    Clock::time_point admitted;

    int64_t prompt_size() const { return static_cast<int64_t>(req.prompt.size()); }
    // Prompt tokens but the last are not all in the cache yet (the last one is the first pass's
    // pending token, as in decoding).
    bool prefilling() const { return !done && cache.size() < prompt_size() - 1; }

    Request(const Model& model, BatchRequest r, KvCacheOptions kv, int k_max)
        : req(std::move(r)), cache(model, kv), sampler(req.generate.sampler, model.n_vocab()),
          checker(req.generate, model.tokenizer(), cache.capacity()), kc(req.k_policy, k_max) {}
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
    if (P == 0) throw Error("batch decoding: the prompt is empty");
    for (int64_t i = 0; i < P; ++i) {
        const TokenId id = req.prompt[static_cast<size_t>(i)];
        if (!model.tokenizer().valid(id) || id >= model.n_vocab())
            throw Error("batch decoding: prompt token " + std::to_string(i) + " has id " + std::to_string(id) +
                        ", outside the vocabulary");
    }
    if (P > n_ctx)
        throw Error(ErrorCode::capacity, "batch decoding: the prompt of " + std::to_string(P) +
                                             " tokens exceeds the model's context length " + std::to_string(n_ctx));
    if (req.generate.max_tokens < 0)
        throw Error("batch decoding: max_tokens must be >= 0, got " + std::to_string(req.generate.max_tokens));
    if (req.source && (req.k < 1 || req.k > SpeculativeOptions::kMaxK))
        throw Error("batch decoding: k must be in [1, " + std::to_string(SpeculativeOptions::kMaxK) + "], got " +
                    std::to_string(req.k));
    // Sampler and stop options are checked by their constructors, before any cache is allocated.
    (void)Sampler(req.generate.sampler, model.n_vocab());
    (void)StopChecker(req.generate, model.tokenizer(), n_ctx);
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
    r->res.stats.proposed_at.assign(static_cast<size_t>(k_max), 0);
    r->res.stats.accepted_at.assign(static_cast<size_t>(k_max), 0);
    const std::vector<TokenId>& prompt = r->req.prompt;
    if (opts_.share_prefixes) {
        // The longest run of prompt tokens from position 0 that another cache holds (all but the
        // last prompt token at most: that one is the first pass's pending token).
        const Request* donor = nullptr;
        int64_t best = 0;
        for (const auto& d : active_) {
            const int64_t lim = std::min({d->cache.size(), P - 1, r->cache.capacity()});
            int64_t n = 0;
            while (n < lim && d->tokens[static_cast<size_t>(n)] == prompt[static_cast<size_t>(n)]) ++n;
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
    r->tokens.assign(prompt.begin(), prompt.end());
    r->tokens.reserve(static_cast<size_t>(capacity + k_max + 1));
    r->batch.reserve(static_cast<size_t>(k_max + 1));
    if (r->req.generate.max_tokens == 0 || P == capacity) {
        // Nothing can be generated (as generate_plain): retires at the next step.
        r->res.stop = r->req.generate.max_tokens == 0 ? StopReason::MaxTokens : StopReason::ContextFull;
        r->done = true;
    } else if (r->req.source) {
        r->req.source->reset(GenerationStart{r->tokens, VerifyMode::Exact, r->req.generate.sampler});
    }
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
        if (r->id == id && !r->done) {
            r->cancelled = true;
            return true;
        }
    }
    return false;
}

void BatchDecoder::fail(Request& r, ErrorCode code, const std::string& what) {
    r.res.failed = true;
    r.res.error_code = code;
    r.res.error = what;
    r.done = true;
}

// Judges r's rows (logits [r.m + 1, n_vocab]) in order, as SpeculativeDecoder does in exact
// mode: the target's own token at each position; a guess stands iff it is that token.
void BatchDecoder::judge(Request& r, std::span<const float> logits) {
    const auto n_vocab = static_cast<size_t>(ctx_.model().n_vocab());
    SpecStats& st = r.res.stats;
    const int64_t pc = r.cache.size() - static_cast<int64_t>(r.m) - 1; // where the pending token went
    ++st.passes;
    st.proposed += static_cast<int64_t>(r.m);
    if (r.m == 0) ++st.empty_passes;
    for (size_t i = 0; i < r.m; ++i) ++st.proposed_at[i];
    int accepted = 0;
    int64_t emitted = 0;
    for (size_t i = 0; i <= r.m; ++i) {
        const auto pos = static_cast<int64_t>(r.tokens.size());
        const TokenId t = r.sampler.sample(logits.data() + i * n_vocab, pos, r.tokens);
        const bool stands = i < r.m && t == r.proposal.tokens[i];
        if (stands) {
            ++accepted;
            ++st.accepted_at[i];
        }
        r.tokens.push_back(t);
        r.res.tokens.push_back(t);
        if (r.res.tokens.size() == 1) r.res.queue_to_first_token_seconds = seconds_between(r.admitted, Clock::now());
        ++emitted;
        if (r.checker.push(t, pos)) {
            r.res.stop = r.checker.reason();
            r.done = true;
            break;
        }
        if (!stands) break;
    }
    // Keep the emitted tokens but the last (the next pass's pending token).
    r.cache.truncate(pc + emitted);
    st.accepted += accepted;
    st.emitted += emitted;
    emitted_this_pass_ += emitted;
    if (accepted < static_cast<int>(r.m)) ++r.rejections;
    r.kc.observe(static_cast<int>(r.m), accepted);
    if (!r.done && r.req.source) {
        try {
            r.req.source->accept(r.tokens);
        } catch (const Error& e) {
            fail(r, e.code(), std::string("guess source '") + std::string(r.req.source->name()) + "': " + e.what());
        }
    }
}

// Keeps at most `budget` guesses in all: one at a time, the guess most likely to stand among
// the next unkept guess of every request, where a request's guess j (0-based) stands with its
// estimated per-guess acceptance p to the power j + 1 (p from its own passes so far, with one
// accepted and one refused guess as the prior). Ties go to the older request.
// The fitted pass time a + b * rows (seconds), when there is one: at least two row counts seen
// and both terms positive.
bool BatchDecoder::pass_cost(double& a, double& b) const {
    if (opts_.pass_fixed_seconds > 0 && opts_.pass_row_seconds > 0) {
        a = opts_.pass_fixed_seconds;
        b = opts_.pass_row_seconds;
        return true;
    }
    const double var = fit_n_ * fit_xx_ - fit_x_ * fit_x_;
    if (fit_n_ < 2 || var <= 1e-9 * fit_n_ * fit_xx_) return false;
    b = (fit_n_ * fit_xy_ - fit_x_ * fit_y_) / var;
    a = (fit_y_ - b * fit_x_) / fit_n_;
    return a > 0 && b > 0;
}

// Keeps at most `budget` guesses in all: one at a time, the guess most likely to stand among
// the next unkept guess of every request, where a request's guess j (0-based) stands with its
// estimated per-guess acceptance p to the power j + 1 (p from its own passes so far, with one
// accepted and one refused guess as the prior). Ties go to the older request. With the cost
// model, it stops at the first guess whose chance does not pay for its row (batch_decoder.h).
void BatchDecoder::trim_guesses(int64_t budget, int64_t rows, size_t first) {
    // Only the decoding requests (in_pass_[first..]) have guesses; a prompt's last chunk yields
    // one token for certain.
    const std::span<Request* const> dec(in_pass_.data() + first, in_pass_.size() - first);
    int64_t total = 0;
    double sure = 0; // tokens the pass yields for certain: one per judged request
    for (Request* r : in_pass_) sure += r->judging ? 1 : 0;
    for (Request* r : dec) {
        total += static_cast<int64_t>(r->m);
        const SpecStats& st = r->res.stats;
        r->next_gain = static_cast<double>(st.accepted + 1) / static_cast<double>(st.accepted + r->rejections + 2);
    }
    double a = 0, b = 0;
    const bool costed = opts_.cost_model && pass_cost(a, b);
    if (total <= budget && !costed) return;
    // Reuse the proposals' sizes (batch) as the ceilings and count kept guesses in m.
    for (Request* r : dec) r->m = 0;
    double expected = sure;
    auto rows_now = static_cast<double>(rows);
    for (int64_t kept = 0; kept < budget; ++kept) {
        Request* best = nullptr;
        for (Request* r : dec) {
            if (r->m + 1 >= r->batch.size()) continue;
            if (!best || r->next_gain > best->next_gain) best = r;
        }
        if (!best) break;
        if (costed && best->next_gain <= expected * b / (a + b * rows_now)) break;
        expected += best->next_gain;
        rows_now += 1;
        ++best->m;
        const SpecStats& st = best->res.stats;
        best->next_gain *= static_cast<double>(st.accepted + 1) / static_cast<double>(st.accepted + best->rejections + 2);
    }
    for (Request* r : dec) r->batch.resize(r->m + 1);
}

std::vector<BatchResult> BatchDecoder::step() {
    const Model& model = ctx_.model();
    const Tokenizer& tok = model.tokenizer();
    const int64_t max_batch = ctx_.options().max_batch;
    items_.clear();
    in_pass_.clear();
    int64_t decoding = 0;
    for (auto& rp : active_) {
        if (rp->cancelled) {
            rp->res.cancelled = true;
            rp->res.stop = StopReason::Callback;
            rp->done = true;
        }
        if (!rp->done && !rp->prefilling()) ++decoding;
    }

    // Prompt chunks, oldest request first. At most max_batch - decoding rows are left for them,
    // and every active request holds at most one row of max_batch, so a prefilling request
    // always finds one. A chunk that reaches the end of its prompt takes the last prompt token
    // too and yields the request's first token (Logits::Last, no guesses).
    int64_t prefill_left = std::min(opts_.prefill_chunk, max_batch - decoding);
    int64_t prefill_rows = 0;
    const auto t_start = Clock::now();
    for (auto& rp : active_) {
        Request& r = *rp;
        if (!r.prefilling() || prefill_left == 0) continue;
        const int64_t c0 = r.cache.size();
        const int64_t rest = r.prompt_size() - 1 - c0; // >= 1
        const bool last = prefill_left >= rest + 1;
        const int64_t n = last ? rest + 1 : std::min(prefill_left, rest);
        r.m = 0;
        r.judging = last;
        items_.push_back(BatchItem{&r.cache,
                                   std::span<const TokenId>(r.req.prompt).subspan(static_cast<size_t>(c0),
                                                                                 static_cast<size_t>(n)),
                                   last ? Logits::Last : Logits::None,
                                   {}});
        in_pass_.push_back(&r);
        prefill_left -= n;
        prefill_rows += n;
    }

    // Guesses: each decoding request proposes up to its own k; together they are trimmed to the
    // pass budget (after one pending row per request) and to what max_batch leaves.
    const int64_t budget = opts_.pass_tokens > 0 ? std::min(opts_.pass_tokens, max_batch) : max_batch;
    const int64_t guess_budget = std::max<int64_t>(0, std::min(budget - decoding, max_batch - decoding - prefill_rows));
    const size_t first_decode = in_pass_.size();
    for (auto& rp : active_) {
        Request& r = *rp;
        if (r.done || r.prefilling()) continue;
        const int64_t pc = r.cache.size();
        const auto generated = static_cast<int64_t>(r.res.tokens.size());
        // Every guess must land inside the cache, and a pass emits at most m + 1 tokens.
        const int64_t room = r.req.source ? std::min<int64_t>({r.kc.next(), r.cache.capacity() - 1 - pc,
                                                               r.req.generate.max_tokens - generated - 1, guess_budget})
                                          : 0;
        r.proposal.clear();
        if (room >= 1) {
            try {
                r.req.source->propose(r.tokens, static_cast<int>(room), r.proposal);
            } catch (const Error& e) {
                fail(r, e.code(), std::string("guess source '") + std::string(r.req.source->name()) + "': " + e.what());
                continue;
            }
        }
        r.m = std::min(r.proposal.tokens.size(), static_cast<size_t>(std::max<int64_t>(room, 0)));
        for (size_t i = 0; i < r.m; ++i) {
            const TokenId g = r.proposal.tokens[i];
            if (!tok.valid(g) || g >= model.n_vocab()) r.m = i; // a guess the model cannot run ends the run
        }
        r.batch.clear();
        r.batch.push_back(r.tokens.back());
        r.batch.insert(r.batch.end(), r.proposal.tokens.begin(),
                       r.proposal.tokens.begin() + static_cast<std::ptrdiff_t>(r.m));
        r.judging = true;
        in_pass_.push_back(&r);
    }
    trim_guesses(guess_budget, decoding + prefill_rows, first_decode);
    for (size_t j = first_decode; j < in_pass_.size(); ++j)
        items_.push_back(BatchItem{&in_pass_[j]->cache, in_pass_[j]->batch, Logits::All, {}});
    const double propose_seconds = seconds_between(t_start, Clock::now());

    emitted_this_pass_ = 0;
    const uint64_t rows_before = ctx_.tokens_processed();
    if (!items_.empty()) {
        const auto t_verify = Clock::now();
        bool batched = true;
        try {
            ctx_.forward_batch(items_);
            ++passes_;
        } catch (const Error&) {
            batched = false; // refused before anything changed: find out whose input it was
        }
        if (batched) {
            for (size_t j = 0; j < items_.size(); ++j)
                if (in_pass_[j]->judging) judge(*in_pass_[j], items_[j].logits);
        } else {
            // Each request alone: the bits are the same, and a refusal is its own.
            for (size_t j = 0; j < items_.size(); ++j) {
                Request& r = *in_pass_[j];
                try {
                    const auto logits = ctx_.forward(r.cache, items_[j].tokens, items_[j].which);
                    ++passes_;
                    if (r.judging) judge(r, logits);
                } catch (const Error& e) {
                    fail(r, e.code(), e.what());
                }
            }
        }
        const auto t_end = Clock::now();
        const double verify_seconds = seconds_between(t_verify, t_end);
        if (first_decode == 0) {
            ++decode_passes_;
            const double sec = seconds_between(t_start, t_end);
            decode_seconds_ += sec;
            decode_tokens_ += emitted_this_pass_;
            DecodeLevel& lv = decode_levels_[in_pass_.size()];
            ++lv.passes;
            lv.seconds += sec;
            lv.tokens += emitted_this_pass_;
            lv.rows += static_cast<int64_t>(ctx_.tokens_processed() - rows_before);
            // The cost model's fit, recent passes weighted most (about the last 30).
            constexpr double kDecay = 0.967;
            const auto x = static_cast<double>(ctx_.tokens_processed() - rows_before);
            fit_n_ = kDecay * fit_n_ + 1;
            fit_x_ = kDecay * fit_x_ + x;
            fit_y_ = kDecay * fit_y_ + sec;
            fit_xx_ = kDecay * fit_xx_ + x * x;
            fit_xy_ = kDecay * fit_xy_ + x * sec;
        }
        for (size_t j = 0; j < in_pass_.size(); ++j) {
            Request& r = *in_pass_[j];
            if (j < first_decode) {
                // A prompt chunk: the prefill time runs until the prompt is in (or it failed).
                if (r.judging || !r.prefilling()) r.res.stats.prompt_seconds = seconds_between(r.admitted, t_end);
                continue;
            }
            r.res.stats.verify_seconds += verify_seconds;
            r.res.stats.propose_seconds += propose_seconds;
        }
    }

    // Retire, in admission order; the rest keep their order.
    std::vector<BatchResult> out;
    const auto now = Clock::now();
    size_t keep = 0;
    for (size_t i = 0; i < active_.size(); ++i) {
        Request& r = *active_[i];
        if (r.done) {
            r.res.latency_seconds = seconds_between(r.admitted, now);
            r.res.stats.total_seconds = r.res.latency_seconds;
            kv_in_use_ -= r.kv_bytes;
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

// guidance_example: the library in a few lines. A Session keeps text, tokens and KV cache
// together: append a prompt, generate, append more text, generate again. Every token is run
// through the model once; the prefix is reused, never recomputed. The same steps again with
// speculative decoding (prompt lookup) give the same text in fewer forward passes.
//
//   guidance_example [MODEL.gguf]   (default: the bundled pycode-4m-q8_0.gguf)
#include <cstdio>
#include <exception>
#include <string>

#include "rewind/model.h"
#include "rewind/session.h"
#include "rewind/speculate/source_factory.h"
#include "rewind/speculate/speculative_session.h"

namespace {

// What one generate() call did: tokens produced, tokens run, tokens reused from the cache.
void show(const char* what, const rwd::GenerateResult& r, const rwd::Context& ctx, uint64_t processed_before) {
    std::printf("[%s] generated %zu tokens (stop: %s); this call ran %llu tokens through the model, "
                "reusing %zu cached ones\n",
                what, r.tokens.size(), rwd::stop_reason_name(r.stop),
                static_cast<unsigned long long>(ctx.tokens_processed() - processed_before),
                static_cast<size_t>(processed_before));
}

} // namespace

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";
    try {
        auto model = rwd::Model::load(path);
        // The context runs the model; sessions borrow it for each call (several may share one).
        rwd::Context ctx(model, {.n_threads = 1});
        rwd::Session session(model, {.capacity = 512});

        rwd::GenerateOptions opts;
        opts.max_tokens = 40;
        opts.stop_strings = {"\n\n"};

        // 1. A prompt, then generation.
        session.append_text(ctx, "def read_config(path):\n    \"\"\"");
        uint64_t before = ctx.tokens_processed();
        auto r1 = session.generate(ctx, opts);
        show("first generate", r1, ctx, before);

        // 2. More text of our own, then generation again: only the new tokens are run.
        before = ctx.tokens_processed();
        session.append_text(ctx, "\n\ndef write_config(path, config):\n    ");
        const uint64_t appended = ctx.tokens_processed() - before;
        before = ctx.tokens_processed();
        auto r2 = session.generate(ctx, opts);
        std::printf("[append] ran %llu new tokens\n", static_cast<unsigned long long>(appended));
        show("second generate", r2, ctx, before);

        std::printf("\n--- session text (%zu tokens, %llu run through the model in all) ---\n%s\n",
                    session.tokens().size(), static_cast<unsigned long long>(ctx.tokens_processed()),
                    session.text().c_str());

        // 3. The same steps in a session that speculates: a guess source from the library's
        //    factory, and generate_speculative instead of generate. The text is identical.
        rwd::Context spec_ctx(model, {.n_threads = 1});
        rwd::Session spec_session(model, {.capacity = 512});
        rwd::speculate::SourceSpec spec; // ngram: prompt lookup, no documents or draft needed
        auto source = rwd::speculate::make_guess_source(spec, *model, spec_session.cache().capacity());
        rwd::speculate::SpeculativeOptions so;
        so.generate = opts;
        so.k = 4;
        int64_t passes = 0;
        spec_session.append_text(spec_ctx, "def read_config(path):\n    \"\"\"");
        passes += rwd::speculate::generate_speculative(spec_ctx, spec_session, *source, so).stats.passes;
        spec_session.append_text(spec_ctx, "\n\ndef write_config(path, config):\n    ");
        passes += rwd::speculate::generate_speculative(spec_ctx, spec_session, *source, so).stats.passes;
        std::printf("\n[speculative session] same text: %s; %zu generated tokens in %lld forward passes\n",
                    spec_session.tokens() == session.tokens() ? "yes" : "NO",
                    r1.tokens.size() + r2.tokens.size(), static_cast<long long>(passes));
        if (spec_session.tokens() != session.tokens()) return 1;
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "guidance_example: %s\n", e.what());
        return 1;
    }
}

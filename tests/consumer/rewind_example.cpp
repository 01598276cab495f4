// rewind as a library, the whole of it: load a model, generate speculatively with the `auto`
// guess source (reference copy when documents are given, n-gram lookup, and a draft model when
// one is given; the longest proposal wins), print the text and what speculation did. The output
// is exactly plain decoding's. CI builds this file against the installed package
// (tests/consumer/CMakeLists.txt: find_package(rewind)) and compares its output with
// `rewind generate --spec auto` on the same settings.
//
//   rewind_example MODEL.gguf PROMPT [N_TOKENS] [DRAFT.gguf]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <rewind/rewind.h>

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT [N_TOKENS] [DRAFT.gguf]\n", argv[0]);
        return 2;
    }
    const std::string prompt = argv[2];
    const int64_t n_tokens = argc > 3 ? std::atoll(argv[3]) : 64;
    namespace sp = rwd::speculate;
    try {
        // The model is shared, read-only; a context runs it; the KV cache holds one sequence.
        std::shared_ptr<const rwd::Model> model = rwd::Model::load(argv[1]);
        rwd::Context ctx(model, {.n_threads = 2});
        rwd::KvCache cache(*model); // capacity: the model's context length, at most 4096 positions

        // The guess source, by name, from the one factory the CLI and the harness use too.
        sp::SourceSpec spec;
        sp::parse_source_kind("auto", spec);
        if (argc > 4) spec.draft = rwd::Model::load(argv[4]);
        std::unique_ptr<sp::GuessSource> source = sp::make_guess_source(spec, *model, cache.capacity());

        sp::SpeculativeOptions opts;
        opts.generate.max_tokens = n_tokens; // greedy: opts.generate.sampler is left as is
        opts.k = 4;                          // guesses verified per forward pass

        const rwd::Tokenizer& tok = model->tokenizer();
        rwd::Utf8StreamDecoder text(tok, /*at_text_start=*/false);
        std::fputs(prompt.c_str(), stdout);
        sp::SpeculativeResult r = sp::generate_speculative(ctx, cache, tok.encode(prompt), *source, opts,
                                                           [&](rwd::TokenId id) {
                                                               std::fputs(text.push(id).c_str(), stdout);
                                                               return true; // false would stop here
                                                           });
        std::printf("%s\n", text.flush().c_str());

        const rwd::DecodeStats& s = r.stats;
        std::fprintf(stderr, "rewind %s, source %s: %lld tokens in %lld passes (%.2f per pass), %lld/%lld guesses "
                             "accepted, stop: %s\n",
                     REWIND_VERSION_STRING, std::string(source->name()).c_str(), static_cast<long long>(s.emitted),
                     static_cast<long long>(s.passes), s.tokens_per_pass(), static_cast<long long>(s.accepted),
                     static_cast<long long>(s.proposed), rwd::stop_reason_name(r.stop));
        return 0;
    } catch (const rwd::Error& e) {
        // Every failure says what and where; the code says which kind (io, format, state, ...).
        std::fprintf(stderr, "error (%s): %s\n", rwd::error_code_name(e.code()), e.what());
        return 1;
    }
}

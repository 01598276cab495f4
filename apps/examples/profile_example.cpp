// profile_example: a guidance-style program in the spirit of guidance's acceleration notebook: a
// character profile whose template text is appended (one pass per piece, the KV reused) and whose
// fields are generated under constraints (a name pattern, an enum class, numbers, a list of items
// as a JSON Schema, free text up to a stop string). It runs once plainly and once speculating
// (prompt lookup plus the text each constraint forces) and prints forward passes against tokens;
// the two texts are the same.
//
//   profile_example [MODEL.gguf]   (default: the bundled pycode-4m-q8_0.gguf)
#include <cstdio>
#include <exception>
#include <string>

#include "rewind/model.h"
#include "rewind/session.h"
#include "rewind/speculate/program.h"
#include "rewind/speculate/source_factory.h"

namespace {

using rwd::speculate::GenSpec;

constexpr int64_t kMaxBatch = 256;

// What a run did: generated tokens and the passes that decided them, appended tokens and theirs.
struct Totals {
    int64_t gen_tokens = 0, gen_passes = 0, appended = 0, append_passes = 0;
    int64_t proposed = 0, accepted = 0, forced_proposed = 0, forced_accepted = 0;
};

// The character profile: template text and gen() calls, in order.
std::string run(rwd::Context& ctx, rwd::speculate::GuessSource* source, Totals& t) {
    rwd::Session session(ctx.model_ptr(), {.capacity = 512});
    rwd::speculate::Program p(ctx, session, source, {.k = 8});
    auto append = [&](const char* text) {
        const size_t tokens_before = session.tokens().size();
        const uint64_t run_before = ctx.tokens_processed();
        p.append(text);
        t.appended += static_cast<int64_t>(session.tokens().size() - tokens_before);
        const auto ran = static_cast<int64_t>(ctx.tokens_processed() - run_before);
        t.append_passes += (ran + kMaxBatch - 1) / kMaxBatch; // forward() runs max_batch rows a pass
    };
    auto gen = [&](const GenSpec& spec) {
        const rwd::speculate::GenResult r = p.gen(spec);
        t.gen_tokens += static_cast<int64_t>(r.tokens.size());
        t.gen_passes += r.stats.passes;
        t.proposed += r.stats.proposed;
        t.accepted += r.stats.accepted;
        t.forced_proposed += r.stats.forced_proposed;
        t.forced_accepted += r.stats.forced_accepted;
    };
    append("# A character profile for an RPG game, as a Python dict.\n"
           "profile = {\n    \"id\": \"e1f491f7\",\n    \"description\": \"A quick and nimble fighter.\",\n"
           "    \"name\": \"");
    gen({.regex = "[A-Z][a-z]{2,11}", .max_tokens = 8});
    append("\",\n    \"age\": ");
    gen({.regex = "[1-9][0-9]?", .max_tokens = 3});
    append(",\n    \"class\": \"");
    gen({.regex = "(warrior|mage|rogue|ranger|cleric)", .max_tokens = 6});
    append("\",\n    \"mantra\": \"");
    gen({.regex = "[A-Za-z ,.!']{3,30}", .max_tokens = 12});
    append("\",\n    \"strength\": ");
    gen({.regex = "[0-9]{1,3}", .max_tokens = 4});
    append(",\n    \"items\": ");
    gen({.json_schema = R"({"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 14},
                             "minItems": 3, "maxItems": 3})",
         .max_tokens = 40});
    append("\n}\nprint(profile[\"name\"], \"says:\", ");
    gen({.stop = {"\n"}, .max_tokens = 24}); // the stop string stays in the session, not in the capture
    return session.text();
}

void print(const char* what, const Totals& t) {
    std::printf("%-12s generated %lld tokens in %lld forward passes (%.2f tokens/pass); template text: %lld "
                "tokens in %lld passes; guesses accepted %lld of %lld (forced text: %lld of %lld)\n",
                what, static_cast<long long>(t.gen_tokens), static_cast<long long>(t.gen_passes),
                t.gen_passes ? static_cast<double>(t.gen_tokens) / static_cast<double>(t.gen_passes) : 0.0,
                static_cast<long long>(t.appended), static_cast<long long>(t.append_passes),
                static_cast<long long>(t.accepted), static_cast<long long>(t.proposed),
                static_cast<long long>(t.forced_accepted), static_cast<long long>(t.forced_proposed));
}

} // namespace

int main(int argc, char** argv) {
    const std::string path = argc > 1 ? argv[1] : std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf";
    try {
        auto model = rwd::Model::load(path);
        rwd::Context ctx(model, {.n_threads = 1, .max_batch = kMaxBatch});
        Totals plain, spec;
        const std::string text = run(ctx, nullptr, plain);
        rwd::speculate::SourceSpec ss; // ngram: prompt lookup; under a constraint, forced text too
        auto source = rwd::speculate::make_guess_source(ss, *model, 512);
        const std::string spec_text = run(ctx, source.get(), spec);
        std::printf("%s\n", text.c_str());
        print("plain:", plain);
        print("speculative:", spec);
        std::printf("same text: %s\n", spec_text == text ? "yes" : "NO");
        return spec_text == text ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "profile_example: %s\n", e.what());
        return 1;
    }
}

// Guidance-style programs (speculate/program.h): appended text run once with the KV reused, gen()
// under a regex, a JSON Schema, a grammar or stop strings, the same text with every guess source
// as with plain decoding, captured texts in their language, errors before anything runs.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "rewind/context.h"
#include "rewind/error.h"
#include "rewind/session.h"
#include "rewind/speculate/program.h"
#include "rewind/speculate/source_factory.h"

using namespace rwd;
using namespace rwd::speculate;

namespace {

constexpr int64_t kCapacity = 512;
const char* const kRegex = "[0-9]{1,3}";
const char* const kSchema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
  "size": {"type": "integer", "minimum": 0, "maximum": 999}}, "required": ["name", "size"], "additionalProperties": false})";

std::shared_ptr<const Model> target() { return model_test::load("bundled"); }

std::unique_ptr<GuessSource> source_of(const std::string& kind) {
    SourceSpec spec;
    parse_source_kind(kind, spec);
    if (kind == "ref") spec.references = {"config = {\"name\":\"server\",\"size\":8}\n"};
    if (kind == "draft" || kind == "auto") spec.draft = model_test::load("pycode-600k");
    return make_guess_source(spec, *target(), kCapacity);
}

// The program every source runs: append, gen regex, append, gen json_schema, append, gen stop.
struct ProgramRun {
    std::vector<GenResult> gens;
    std::vector<TokenId> tokens;
    std::vector<uint64_t> appended_runs;  // tokens_processed during each append
    std::vector<size_t> appended_counts;  // the session's growth in each append
};

ProgramRun run_program(GuessSource* source, float temperature = 0.0f) {
    const auto m = target();
    Context ctx(m, {.n_threads = 1});
    Session session(m, {.capacity = kCapacity});
    Program p(ctx, session, source, {.k = 6});
    ProgramRun run;
    SamplerOptions so;
    so.temperature = temperature;
    so.seed = 7;
    auto append = [&](const char* text) {
        const uint64_t before = ctx.tokens_processed();
        const size_t n = session.tokens().size();
        p.append(text);
        run.appended_runs.push_back(ctx.tokens_processed() - before);
        run.appended_counts.push_back(session.tokens().size() - n);
    };
    append("def scale(x):\n    return x * ");
    run.gens.push_back(p.gen({.regex = kRegex, .max_tokens = 8, .sampler = so}));
    append("\n\nconfig = ");
    run.gens.push_back(p.gen({.json_schema = kSchema, .max_tokens = 40, .sampler = so}));
    append("\n# ");
    run.gens.push_back(p.gen({.stop = {"\n"}, .max_tokens = 30, .sampler = so}));
    run.tokens = session.tokens();
    return run;
}

void expect_valid(const ProgramRun& r) {
    ASSERT_EQ(r.gens.size(), 3u);
    EXPECT_EQ(r.gens[0].stop, StopReason::EndOfGeneration);
    EXPECT_TRUE(std::regex_match(r.gens[0].text, std::regex(kRegex))) << r.gens[0].text;
    if (r.gens[1].stop == StopReason::EndOfGeneration) {
        const auto j = nlohmann::json::parse(r.gens[1].text);
        EXPECT_EQ(j.size(), 2u);
        EXPECT_LE(j.at("name").get<std::string>().size(), 12u);
        EXPECT_TRUE(j.at("size").is_number_integer());
        EXPECT_GE(j.at("size").get<int>(), 0);
        EXPECT_LE(j.at("size").get<int>(), 999);
    }
    EXPECT_EQ(r.gens[2].text.find('\n'), std::string::npos);
}

} // namespace

// Every source, forced text alone included, gives plain decoding's text and tokens, and the
// captured texts are in their languages.
TEST(Program, SpeculationGivesPlainDecodingsText) {
    for (const float temp : {0.0f, 0.8f}) {
        const ProgramRun plain = run_program(nullptr, temp);
        expect_valid(plain);
        for (const std::string kind : {"forced", "ngram", "suffix", "ref", "draft", "auto"}) {
            SCOPED_TRACE(kind + " at temperature " + std::to_string(temp));
            const auto src = source_of(kind);
            const ProgramRun spec = run_program(src.get(), temp);
            EXPECT_EQ(spec.tokens, plain.tokens);
            for (size_t i = 0; i < plain.gens.size(); ++i) {
                EXPECT_EQ(spec.gens[i].text, plain.gens[i].text);
                EXPECT_EQ(spec.gens[i].tokens, plain.gens[i].tokens);
                EXPECT_EQ(spec.gens[i].stop, plain.gens[i].stop);
                EXPECT_LE(spec.gens[i].stats.passes, plain.gens[i].stats.passes);
            }
        }
    }
}

// Log-probabilities of a program's gens are the same bits with speculation as without, one per
// token kept (an end token taken out takes its entry with it).
TEST(Program, LogprobsAreTheSameBits) {
    const auto m = target();
    auto run = [&](GuessSource* source) {
        Context ctx(m);
        Session session(m, {.capacity = kCapacity});
        Program p(ctx, session, source, {.k = 5});
        p.append("config = ");
        const LogprobOptions lp{.enabled = true, .top_n = 3, .processed = true};
        std::vector<GenResult> out;
        out.push_back(p.gen({.json_schema = kSchema, .max_tokens = 40, .logprobs = lp}));
        p.append("\nx = ");
        SamplerOptions seeded;
        seeded.temperature = 0.7f;
        seeded.seed = 3;
        out.push_back(p.gen({.regex = "[a-z]+", .max_tokens = 6, .sampler = seeded, .logprobs = lp}));
        return out;
    };
    const auto plain = run(nullptr);
    const auto src = source_of("ngram");
    const auto spec = run(src.get());
    for (size_t i = 0; i < plain.size(); ++i) {
        ASSERT_EQ(plain[i].logprobs.size(), plain[i].tokens.size());
        ASSERT_EQ(spec[i].tokens, plain[i].tokens);
        ASSERT_EQ(spec[i].logprobs.size(), plain[i].logprobs.size());
        for (size_t j = 0; j < plain[i].logprobs.size(); ++j) {
            EXPECT_EQ(std::memcmp(&spec[i].logprobs[j].logprob, &plain[i].logprobs[j].logprob, sizeof(float)), 0);
            EXPECT_EQ(spec[i].logprobs[j].top[0].token, plain[i].logprobs[j].top[0].token);
        }
    }
}

// Forced text (the schema's keys and punctuation) is guessed and mostly stands, so the JSON takes
// fewer passes than tokens even with no other source.
TEST(Program, ForcedGuessesAreCounted) {
    const auto src = source_of("forced");
    const ProgramRun r = run_program(src.get());
    const GenResult& json = r.gens[1];
    EXPECT_GT(json.stats.forced_proposed, 0);
    EXPECT_GT(json.stats.forced_accepted, 0);
    EXPECT_LT(json.stats.passes, static_cast<int64_t>(json.tokens.size()));
    const ProgramRun plain = run_program(nullptr);
    EXPECT_EQ(plain.gens[1].stats.passes, static_cast<int64_t>(plain.gens[1].tokens.size()));
    EXPECT_EQ(plain.gens[1].stats.proposed, 0);
}

// Each appended token is run once (the held-back token of the text before it with it), however
// the earlier text was generated.
TEST(Program, AppendRunsEachTokenOnce) {
    for (const bool speculate : {false, true}) {
        const auto src = source_of("ngram");
        const ProgramRun r = run_program(speculate ? src.get() : nullptr);
        ASSERT_EQ(r.appended_runs.size(), 3u);
        // The first append holds its last token back; each later one runs the one held before it.
        EXPECT_EQ(r.appended_runs[0] + 1, r.appended_counts[0]);
        for (size_t i = 1; i < 3; ++i) EXPECT_EQ(r.appended_runs[i], r.appended_counts[i]) << "append " << i;
    }
}

// A grammar that completes ends the gen at once (no pass for an end token, none kept), and the
// captured text is a sentence; a stop string is left out of the captured text but stays in the
// session, which has seen it.
TEST(Program, CompletionAndStopStringRules) {
    const auto m = target();
    Context ctx(m);
    Session session(m, {.capacity = kCapacity});
    Program p(ctx, session);
    p.append("# is this fast? answer: ");
    GenResult yn = p.gen({.regex = "(yes|no)", .max_tokens = 10});
    EXPECT_EQ(yn.stop, StopReason::EndOfGeneration);
    EXPECT_TRUE(yn.text == "yes" || yn.text == "no") << yn.text;
    for (TokenId t : yn.tokens) EXPECT_FALSE(m->tokenizer().is_eog(t));
    EXPECT_EQ(yn.stats.passes, static_cast<int64_t>(yn.tokens.size()));
    EXPECT_TRUE(session.text().ends_with("answer: " + yn.text));

    p.append("\ndef main():\n    ");
    const std::string before = session.text();
    GenResult line = p.gen({.stop = {"\n", "00"}, .max_tokens = 40});
    ASSERT_EQ(line.stop, StopReason::StopString) << line.text;
    EXPECT_EQ(line.text.find('\n'), std::string::npos);
    EXPECT_EQ(line.text.find("00"), std::string::npos);
    const std::string after = session.text();
    ASSERT_TRUE(after.starts_with(before + line.text + "\n") || after.starts_with(before + line.text + "00")) << after;
    EXPECT_EQ(m->tokenizer().decode(line.tokens), after.substr(before.size()));
}

// The model may end a growable sentence itself: its end token is not kept, and the program goes
// on after the sentence.
TEST(Program, AnEndTokenIsNotKept) {
    const auto m = target();
    Context ctx(m);
    Session session(m, {.capacity = kCapacity});
    Program p(ctx, session);
    p.append("x = 1\n");
    const std::string before = session.text();
    // A grammar whose only sentence so far is complete at once: the end token is all it allows.
    GenResult r = p.gen({.grammar = "root ::= \"\" | \"a\"+", .max_tokens = 5,
                         .sampler = {.logit_bias = {{m->tokenizer().eos(), 100.0f}}}});
    EXPECT_EQ(r.stop, StopReason::EndOfGeneration);
    EXPECT_TRUE(r.tokens.empty());
    EXPECT_EQ(r.text, "");
    EXPECT_EQ(session.text(), before);
    p.append("y = 2\n");
    EXPECT_TRUE(session.text().ends_with("x = 1\ny = 2\n"));
}

// A repeated regex or schema is converted and compiled once.
TEST(Program, RepeatedConstraintsAreCompiledOnce) {
    const auto m = target();
    Context ctx(m);
    Session session(m, {.capacity = kCapacity});
    Program p(ctx, session);
    p.append("a = ");
    for (int i = 0; i < 3; ++i) {
        p.gen({.regex = kRegex, .max_tokens = 4});
        p.append(", ");
        p.gen({.json_schema = kSchema, .max_tokens = 30});
        p.append("\nb = ");
    }
    EXPECT_EQ(p.compiler().conversions(), 2);
    EXPECT_EQ(p.compiler().compilations(), 2);
    p.gen({.json_schema = kSchema, .json_whitespace = grammar::JsonWhitespace::Free, .max_tokens = 1});
    EXPECT_EQ(p.compiler().conversions(), 3);
}

// Errors are thrown before anything runs and leave the session as it was.
TEST(Program, ErrorsChangeNothing) {
    const auto m = target();
    Context ctx(m);
    Session session(m, {.capacity = kCapacity});
    Program p(ctx, session);
    EXPECT_THROW(p.gen({.max_tokens = 4}), Error); // an empty session
    p.append("def f():\n    return ");
    const std::vector<TokenId> tokens = session.tokens();
    const uint64_t processed = ctx.tokens_processed();
    auto code_of = [&](const GenSpec& spec) {
        try {
            p.gen(spec);
        } catch (const Error& e) {
            return std::string(error_code_name(e.code())) + ": " + e.what();
        }
        return std::string("no error");
    };
    EXPECT_EQ(code_of({.regex = "[0-9]+", .json_schema = "{}"}).rfind("argument: name at most one", 0), 0u);
    EXPECT_EQ(code_of({.regex = "[0-9]+", .grammar = "root ::= \"a\""}).rfind("argument:", 0), 0u);
    EXPECT_EQ(code_of({.regex = "(ab"}).rfind("argument: regex:", 0), 0u);
    const std::string kw = code_of({.json_schema = R"({"type": "object", "minProperties": 1})"});
    EXPECT_EQ(kw.rfind("argument: json_schema:", 0), 0u) << kw;
    EXPECT_NE(kw.find("minProperties"), std::string::npos) << kw;
    EXPECT_EQ(code_of({.json_schema = "{not json"}).rfind("format: json_schema:", 0), 0u);
    EXPECT_EQ(code_of({.grammar = "root ::= ("}).rfind("argument: grammar:", 0), 0u);
    EXPECT_EQ(code_of({.stop = {""}}).rfind("argument:", 0), 0u);
    EXPECT_EQ(code_of({.max_tokens = -1}).rfind("argument:", 0), 0u);
    EXPECT_EQ(session.tokens(), tokens);
    EXPECT_EQ(ctx.tokens_processed(), processed);
}

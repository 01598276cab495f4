// Guidance-style programs: fixed text appended to a session (one multi-token pass, the KV cache
// reused) interleaved with generations held to a regex, a JSON Schema, a GBNF grammar or stop
// strings, each speculating with the session's guess source and the text the constraint forces.
// It lives in speculate/ because it composes guessing with grammars; the runtime's Session knows
// neither (it only takes a Continuation and a TokenConstraint).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/generate.h"
#include "rewind/session.h"
#include "rewind/speculate/constraint_compiler.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

// One gen() call, written with designated initialisers: gen({.regex = "[0-9]{1,3}", .max_tokens = 4}).
struct GenSpec {
    // At most one of regex, json_schema and grammar (none: the text is free).
    std::string regex{};     // matched as a whole (grammar/regex.h's subset)
    std::string json_schema{}; // JSON text; properties come in the order the schema declares them
    ::rwd::grammar::JsonWhitespace json_whitespace = ::rwd::grammar::JsonWhitespace::Compact;
    std::string grammar{};   // GBNF, start rule `root`
    std::vector<std::string> stop{}; // the generation ends at the first of these (none empty)
    int64_t max_tokens = 128;      // >= 0
    SamplerOptions sampler{};      // greedy by default; seeded sampling is exact too
    bool stop_at_eog = true;       // without a constraint: end on EOS/EOT (under one, always)
    LogprobOptions logprobs{};     // per-token log-probabilities in the result (off by default)
    TokenCallback on_token{};      // each token as it is decided; false stops (StopReason::Cancelled)
};

// What gen() did: `text` is the captured text; tokens, stop reason and (for plain decoding,
// passes == emitted and no guesses) the speculation statistics, forced guesses included.
struct GenResult : SpeculativeResult {
    std::string text;
    // The generated text (the captured text, and what a stop string cut off) is a sentence of the
    // constraint's language; always true without a constraint.
    bool complete = true;
};

struct ProgramOptions {
    int k = 8;                         // guesses per pass (the ceiling unless Fixed), 1..kMaxK
    KPolicy k_policy = KPolicy::Fixed;
    // Compiles the constraints, for the session's vocabulary; share one (with its GrammarCache)
    // between programs on a model. Null: the program's own. Not owned.
    ConstraintCompiler* compiler = nullptr;
};

// A program over a session and the context it runs on (both borrowed, and `source` too, which
// may be null: plain decoding). Any source speculates exactly: the text equals plain decoding's
// with the same GenSpecs. Threads: one at a time, as the session and context it borrows.
class Program {
public:
    Program(Context& ctx, Session& session, GuessSource* source = nullptr, ProgramOptions opts = {});

    // Appends `text` (tokenized on its own, BOS only if the session is empty) in one multi-token
    // pass over the tokens not yet run: the prefix's KV cache is reused, so each appended token
    // is run once. Throws as Session::append_text (capacity: nothing changed).
    void append(std::string_view text);

    // Generates from the session's end under `spec` and returns what it captured.
    // Where it ends, first rule that applies:
    //  - the constraint is finished (nothing but end of generation may follow): it stops right
    //    after the token that finished it, without a pass for the end token;
    //  - the model chose end of generation (under a constraint only where the text is complete);
    //  - a stop string appeared, max_tokens, a full context, spec.on_token returned false.
    // The first two report StopReason::EndOfGeneration, and then the captured text is exactly a
    // sentence of the constraint's language. Captured text: the generated text, cut before the
    // first stop string when a stop string ended it.
    // The session afterwards (the KV rule): it keeps every generated token the model saw, so the
    // text after a stop string that ended it, the stop string included, stays in the session and
    // the next append() follows it (result.tokens is that); only an end-of-generation token is
    // taken out (result.tokens leaves it out too), so that appended text never follows an EOS: the
    // token before it, whose K/V is dropped with it, is run again by the next call.
    // Throws rwd::Error before anything runs, the session unchanged: argument (two constraints
    // named, a regex or grammar that does not parse, a schema keyword not implemented, an empty
    // stop string, max_tokens < 0, bad sampler options), format (a schema that is not JSON),
    // state (an empty session), as generate_speculative for k.
    GenResult gen(const GenSpec& spec);

    Session& session() { return session_; }
    Context& context() { return ctx_; }
    ConstraintCompiler& compiler() { return *compiler_; }

private:
    Context& ctx_;
    Session& session_;
    GuessSource* source_;
    ProgramOptions opts_;
    std::unique_ptr<ConstraintCompiler> own_;
    ConstraintCompiler* compiler_;
};

} // namespace rwd::speculate

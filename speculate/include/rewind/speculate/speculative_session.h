// Speculation inside a Session: guidance-style programs (append text, generate, append more,
// generate again, the prefix reused) get the speculative decoder too, with output identical to
// Session::generate's in exact verify mode.
//
// Why it lives here and not in runtime/: dependencies point apps -> speculate -> runtime, and the
// runtime must not know who guesses. Session (runtime) only knows rwd::Continuation, an abstract
// "continue these tokens on this context and cache" step; this file supplies the speculative one.
// The session keeps owning its text, tokens and KV cache; the guess source keeps its own state
// (a draft model's cache) and is told each time where the text now stands.
#pragma once
#include <vector>

#include "rewind/session.h"
#include "rewind/speculate/decoder.h"
#include "rewind/speculate/guess_source.h"

namespace rwd::speculate {

// Generates from the session's current state on `target` with `source` guessing and `opts`
// (sampling, max tokens and stops in opts.generate, exactly as Session::generate takes them); the
// generated tokens become part of the session, as with Session::generate. The source is reset to the whole
// session text as its prompt (a draft model keeps the prefix its cache shares with it, so it runs
// only what was appended since). `source` may be used again for later calls, on this session or
// another. Throws rwd::Error, with the session unchanged, if the session is empty or the options
// are invalid (see generate_speculative in decoder.h). `constraint` (null: none; not owned)
// restricts the generated tokens from its present state, as Session::generate's does.
SpeculativeResult generate_speculative(Context& target, Session& session, GuessSource& source,
                                       const SpeculativeOptions& opts, const TokenCallback& on_token = {},
                                       TokenConstraint* constraint = nullptr);

} // namespace rwd::speculate

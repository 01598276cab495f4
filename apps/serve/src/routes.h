// rewind serve's HTTP routes on cpp-httplib: the key and drain guards, OpenAI's error bodies for
// every failure, and the endpoints (completions, models, health, metrics, tokenize, ...).
#pragma once
#include <httplib.h>

#include "server_state.h"

namespace rwd::serve {

// Sets `svr`'s limits and handlers from s.opts. The handlers run on cpp-httplib's worker
// threads and read `s`, which must outlive `svr`'s serving.
void add_routes(httplib::Server& svr, ServerState& s);

} // namespace rwd::serve

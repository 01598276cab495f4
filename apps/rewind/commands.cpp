// The list of `rewind`'s subcommands, shared by main() and the test that compares their flags.
#include "commands.h"

namespace rwd::cli {

void register_commands(CLI::App& app, Runner& run) {
    register_inspect(app, run);
    register_tokenize(app, run);
    register_generate(app, run);
    register_chat(app, run);
    register_bench(app, run);
    register_batch(app, run);
    register_make_dummy(app, run);
    register_serve(app, run);
    register_grammar(app, run);
}

} // namespace rwd::cli

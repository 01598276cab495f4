// Entry point of the `rewind` CLI: parses the command line, runs the chosen subcommand, and
// turns any error into a one-line message and a non-zero exit.
#include <cstdio>
#include <exception>

#include "commands.h"

namespace rwd::cli {
std::string default_model_path() { return std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf"; }
} // namespace rwd::cli

int main(int argc, char** argv) {
    CLI::App app{"rewind: lossless speculative decoding for llama-family GGUF models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "rewind 0.1.0");
    rwd::cli::Runner run;
    rwd::cli::register_inspect(app, run);
    rwd::cli::register_tokenize(app, run);
    rwd::cli::register_generate(app, run);
    rwd::cli::register_bench(app, run);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        return run ? run() : 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rewind: error: %s\n", e.what());
        return 1;
    }
}

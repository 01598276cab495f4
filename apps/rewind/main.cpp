// Entry point of the `rewind` CLI: parses the command line, runs the chosen subcommand, and
// turns any error into a one-line message and an exit status that says which kind it was.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "rewind/error.h"

namespace rwd::cli {
std::string default_model_path() { return std::string(REWIND_ASSETS_DIR) + "/pycode-4m-q8_0.gguf"; }

// One exit status per rwd::ErrorCode; 1 is any other failure, 2 a lossless mismatch in `bench`.
int exit_status(ErrorCode c) {
    switch (c) {
    case ErrorCode::io: return 3;
    case ErrorCode::format: return 4;
    case ErrorCode::unsupported: return 5;
    case ErrorCode::shape: return 6;
    case ErrorCode::capacity: return 7;
    case ErrorCode::argument: return 8;
    case ErrorCode::state: return 9;
    }
    return 1;
}

const char* kExitStatuses =
    "Exit status:\n"
    "  0  success\n"
    "  1  unexpected failure\n"
    "  2  bench: speculative output differed from plain decoding\n"
    "  3  io: a file cannot be opened, read or written\n"
    "  4  format: a malformed, truncated or corrupted file\n"
    "  5  unsupported: an architecture, tensor type, tokenizer or CPU level rewind does not handle\n"
    "  6  shape: tensor or buffer sizes disagree\n"
    "  7  capacity: the KV cache, a batch or a context length would be exceeded\n"
    "  8  argument: an option or value out of range\n"
    "  9  state: a cache from another model, a draft that does not match the target\n"
    "  100+ command-line usage errors (CLI11)";
} // namespace rwd::cli

int main(int argc, char** argv) {
    CLI::App app{"rewind: lossless speculative decoding for llama-family GGUF models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "rewind 0.1.0");
    app.footer(rwd::cli::kExitStatuses);
    rwd::cli::Runner run;
    rwd::cli::register_inspect(app, run);
    rwd::cli::register_tokenize(app, run);
    rwd::cli::register_generate(app, run);
    rwd::cli::register_chat(app, run);
    rwd::cli::register_bench(app, run);
    rwd::cli::register_batch(app, run);
    rwd::cli::register_make_dummy(app, run);
    rwd::cli::register_serve(app, run);
    rwd::cli::register_grammar(app, run);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        return run ? run() : 0;
    } catch (const rwd::Error& e) {
        std::fprintf(stderr, "rewind: error (%s): %s\n", rwd::error_code_name(e.code()), e.what());
        return rwd::cli::exit_status(e.code());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rewind: error: %s\n", e.what());
        return 1;
    }
}

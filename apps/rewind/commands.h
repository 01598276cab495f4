// The `rewind` command line: each subcommand lives in its own cmd_<name>.cpp and registers
// itself on the CLI11 app (its flags from the shared groups of options.h). A subcommand returns
// the process exit code.
#pragma once
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace rwd::cli {

// Registers the subcommand on `app`; sets `run` to the function main() calls when it is chosen.
using Runner = std::function<int()>;
void register_inspect(CLI::App& app, Runner& run);
void register_tokenize(CLI::App& app, Runner& run);
void register_generate(CLI::App& app, Runner& run);
void register_chat(CLI::App& app, Runner& run);
void register_bench(CLI::App& app, Runner& run);
void register_batch(CLI::App& app, Runner& run);
void register_make_dummy(CLI::App& app, Runner& run);
void register_serve(CLI::App& app, Runner& run);
void register_grammar(CLI::App& app, Runner& run);

// Every subcommand above, in the order `rewind --help` lists them.
void register_commands(CLI::App& app, Runner& run);

} // namespace rwd::cli

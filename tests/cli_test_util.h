// Running the built `rewind` binary from a test: its exit code and output, and scratch files for
// its inputs (the CLI tests of grammars and of constrained decoding).
#pragma once
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace rwd::test {

inline const std::string kRewindBinary = std::string(REWIND_BINARY_DIR) + "/bin/rewind";

struct CliRun {
    int status = -1;  // the exit code; -1 when the process did not exit normally
    std::string out;  // stdout, and stderr when asked for
};

// Runs `rewind ARGS` through the shell (ARGS is quoted by the caller).
inline CliRun run_rewind(const std::string& args, bool with_stderr) {
    CliRun r;
    FILE* p = ::popen((kRewindBinary + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf{};
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    const int st = ::pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

// Writes `text` to a file in the temporary directory named after `prefix`, this process and
// `name`; returns its path.
inline std::string write_temp(const std::string& prefix, const std::string& name, const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()) + "_" + name);
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
}

} // namespace rwd::test

// `rewind make-dummy`: writes a GGUF file of a real model's shape with seeded random weights, so
// rewind and llama.cpp can be timed on the same file at real scale. The work is rwd::write_dummy_model.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "options.h"
#include "rewind/dummy_model.h"
#include "rewind/file_io.h"

namespace rwd::cli {

namespace {

struct MakeDummyOptions {
    std::string shape, type, vocab, out;
    uint64_t seed = 0;
    int threads = 0;
    int64_t row_pool = 0;
    std::string chat_template_file;
    std::string arch; // "": the shape's own
};

int run_make_dummy(const MakeDummyOptions& o) {
    DummyOptions d;
    d.shape = o.shape;
    d.arch = o.arch;
    d.file_type = o.type;
    d.vocab_path = o.vocab.empty() ? default_model_path() : o.vocab;
    d.seed = o.seed;
    d.threads = o.threads;
    d.row_pool = o.row_pool;
    d.out_path = o.out;
    if (!o.chat_template_file.empty())
        d.chat_template = read_file_limited(o.chat_template_file, kMaxPromptFileBytes, "chat template");
    const bool tty = isatty(STDERR_FILENO);
    int last_pct = -1;
    const auto t0 = std::chrono::steady_clock::now();
    const DummyReport r = write_dummy_model(d, [&](uint64_t done, uint64_t total) {
        const int pct = total ? static_cast<int>(100 * done / total) : 100;
        if (tty && pct != last_pct) std::fprintf(stderr, "\rwriting %s: %d%%", o.out.c_str(), pct);
        last_pct = pct;
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty) std::fprintf(stderr, "\r\x1b[K");
    std::string types;
    for (const auto& [t, n] : r.tensor_types) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + tensor_type_name(t);
    std::printf("wrote %s: shape %s, type %s, %.3f B parameters, vocabulary %lld (from %s), seed %llu\n",
                o.out.c_str(), o.shape.c_str(), o.type.c_str(), static_cast<double>(r.n_params) / 1e9,
                static_cast<long long>(r.n_vocab), d.vocab_path.c_str(), static_cast<unsigned long long>(o.seed));
    std::printf("  %llu bytes (%.2f GB) in %.1f s; tensors: %s\n", static_cast<unsigned long long>(r.file_bytes),
                static_cast<double>(r.file_bytes) / 1e9, s, types.c_str());
    return 0;
}

} // namespace

void register_make_dummy(CLI::App& app, Runner& run) {
    auto o = std::make_shared<MakeDummyOptions>();
    CLI::App* cmd = app.add_subcommand(
        "make-dummy", "Write a GGUF file of a real model's shape with seeded random weights (llama architecture)");
    cmd->add_option("--shape", o->shape,
                    "tiny, llama-1b, llama-3b, llama-8b, qwen-0.5b, qwen-7b (qwen: written as llama, no biases); with experts: "
                    "qwen3-30b-a3b, qwen3-moe-tiny (qwen3moe), mixtral-tiny (llama)")
        ->required();
    cmd->add_option("--type", o->type, "f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k (per-tensor types as llama-quantize picks them)")
        ->required();
    cmd->add_option("--vocab", o->vocab, "GGUF file whose tokenizer (and so vocabulary size) to use; default: the bundled model");
    cmd->add_option("--seed", o->seed, "Seed of the random weights")->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "Threads generating weights (0: all the machine's)")->capture_default_str();
    cmd->add_option("--row-pool", o->row_pool,
                    "N > 0: each tensor's rows repeat its first N generated rows (benchmark files in minutes; 0: every row generated)")
        ->capture_default_str();
    cmd->add_option("-o,--output", o->out, "Output file (written under a temporary name, then renamed)")->required();
    cmd->add_option("--arch", o->arch,
                    "Architecture written: llama, qwen2, qwen3, phi3, gemma3 or qwen3moe (its tensors and keys); default: "
                    "the shape's (llama for the dense shapes)");
    // Written as the file's tokenizer.chat_template.
    add_chat_template_file_flag(*cmd, o->chat_template_file);
    cmd->callback([o, &run] { run = [o] { return run_make_dummy(*o); }; });
}

} // namespace rwd::cli

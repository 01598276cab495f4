// `rewind grammar`: for people writing grammars. Prints a grammar back as GBNF, says whether a
// text is a complete sentence, a valid prefix or where it is rejected, and with a vocabulary the
// tokens allowed next (and mask timings along a text's tokens).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "grammar_timing.h"
#include "options.h"
#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/gguf.h"
#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/token_mask.h"
#include "rewind/tokenizer.h"

namespace rwd::cli {

namespace {

struct GrammarOptions {
    ConstraintFlags source; // --grammar, --json-schema or --regex (one of them)
    bool print = false;
    std::string text, file, tokens;
    std::string texts; // a file of JSON strings, one per line, each checked
    bool have_text = false;
    std::string vocab;
    bool mask = false, mask_each = false, time_masks = false;
    WorkloadTiming timing; // --time-masks --mask-workload
};

// The grammar's GBNF text, from whichever source was given.
std::string gbnf_text(const GrammarOptions& o) {
    if (!o.source.used()) throw Error("grammar: give the grammar with --grammar FILE, --json-schema FILE|TEXT or --regex RE");
    return o.source.gbnf();
}

std::vector<TokenId> parse_ids(const std::string& list) {
    std::vector<TokenId> ids;
    std::stringstream ss(list);
    for (std::string item; std::getline(ss, item, ',');) {
        if (item.empty()) continue;
        size_t used = 0;
        long long v = -1;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || v < 0 || v > 0x7FFFFFFF) throw Error(ErrorCode::argument, "--tokens: '" + item + "' is not a token id");
        ids.push_back(static_cast<TokenId>(v));
    }
    return ids;
}

void print_mask(grammar::TokenMatcher& tm) {
    std::vector<uint32_t> mask(static_cast<size_t>((tm.vocab().n_vocab() + 31) / 32));
    tm.fill_mask(mask);
    std::string line = "allowed:";
    for (TokenId t = 0; t < tm.vocab().n_vocab(); ++t)
        if ((mask[static_cast<size_t>(t) / 32] >> (t % 32)) & 1u) line += " " + std::to_string(t);
    std::printf("%s\n", line.c_str());
}

const char* verdict(const grammar::Matcher& m) { return m.is_complete() ? "complete" : "prefix"; }

// The byte-level verdict on `text` from a fresh start: "complete", "prefix" or "rejected at byte N".
std::string check_text(grammar::Matcher& m, const std::string& text) {
    m.reset();
    if (const size_t n = m.valid_prefix_length(text); n < text.size()) return "rejected at byte " + std::to_string(n);
    m.accept_bytes(text);
    return verdict(m);
}

// --texts: one verdict line per JSON string line of the file (for checkers with many texts: the
// grammar is compiled once).
void check_texts(grammar::Matcher& m, const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(ErrorCode::io, "grammar: cannot open --texts file " + path);
    int64_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.empty()) continue;
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (!j.is_string())
            throw Error(ErrorCode::format, "grammar: " + path + ":" + std::to_string(line_no) + ": not a JSON string");
        std::printf("%s\n", check_text(m, j.get<std::string>()).c_str());
    }
}

int run_with_vocab(const GrammarOptions& o, const std::string& gbnf, const std::string& text) {
    const auto tok = Tokenizer::from_gguf(GgufFile::open(o.vocab));
    if (o.time_masks) {
        time_text_masks(gbnf, *tok, text);
        return 0;
    }
    grammar::GrammarCache cache;
    const auto vocab = cache.vocab(*tok);
    const auto g = cache.grammar(gbnf, *tok);
    grammar::TokenMatcher tm(g, vocab);
    if (o.mask_each) { // for oracles: the tokens never matched by their bytes (control, EOG, empty)
        std::string line = "not-text:";
        for (TokenId t = 0; t < vocab->n_vocab(); ++t)
            if (vocab->bytes(t).empty()) line += " " + std::to_string(t);
        std::printf("%s\n", line.c_str());
    }
    if (!o.tokens.empty()) {
        const std::vector<TokenId> ids = parse_ids(o.tokens);
        for (size_t i = 0; i < ids.size(); ++i) {
            if (o.mask_each) print_mask(tm);
            if (!tm.accept(ids[i])) {
                std::printf("rejected at token %zu\n", i);
                return 0;
            }
        }
    } else if (const size_t n = tm.matcher().valid_prefix_length(text); n < text.size()) {
        std::printf("rejected at byte %zu\n", n);
        return 0;
    } else {
        tm.matcher().accept_bytes(text);
    }
    std::printf("%s\n", verdict(tm.matcher()));
    if (o.mask || o.mask_each) print_mask(tm);
    return 0;
}

int run_grammar(const GrammarOptions& o) {
    if (!o.timing.workload.empty()) {
        if (!o.time_masks || o.vocab.empty()) throw Error(ErrorCode::argument, "grammar: --mask-workload needs --time-masks and --vocab");
        time_workload_masks(o.timing, *Tokenizer::from_gguf(GgufFile::open(o.vocab)));
        return 0;
    }
    const std::string gbnf = gbnf_text(o);
    const grammar::Grammar parsed = grammar::parse_gbnf(gbnf);
    if (o.print) std::printf("%s", parsed.to_gbnf().c_str());
    std::string text = o.text;
    if (!o.file.empty()) text = read_file_limited(o.file, kMaxPromptFileBytes, "text file");
    const bool check = o.have_text || !o.file.empty() || !o.tokens.empty();
    if (!o.vocab.empty() && (check || o.mask || o.time_masks)) return run_with_vocab(o, gbnf, text);
    if (!check && o.texts.empty()) return 0;
    grammar::Matcher m(std::make_shared<grammar::CompiledGrammar>(parsed));
    if (!o.texts.empty()) check_texts(m, o.texts);
    else std::printf("%s\n", check_text(m, text).c_str());
    return 0;
}

} // namespace

void register_grammar(CLI::App& app, Runner& run) {
    auto o = std::make_shared<GrammarOptions>();
    CLI::App* cmd = app.add_subcommand(
        "grammar", "Check a GBNF grammar, JSON Schema or regex: print its GBNF, test a text against it, list the tokens it allows");
    add_constraint_flags(*cmd, o->source, 0);
    cmd->add_flag("--print", o->print,
                  "Print the grammar as GBNF (a schema or regex as compiled; groups and repetitions as generated rules)");
    CLI::Option* t = cmd->add_option("--text", o->text, "Text to check: prints 'complete', 'prefix' or 'rejected at byte N'");
    CLI::Option* f = cmd->add_option("--file", o->file, "Read the text to check from this file (at most 8 MiB)");
    CLI::Option* ids = cmd->add_option("--tokens", o->tokens, "With --vocab: token ids (comma-separated) to accept as tokens instead of a text");
    CLI::Option* many = cmd->add_option("--texts", o->texts, "Check many texts: a file of JSON strings, one per line; prints one verdict line each");
    t->excludes(f)->excludes(ids)->excludes(many);
    f->excludes(ids)->excludes(many);
    CLI::Option* v = cmd->add_option("--vocab", o->vocab, "GGUF file with a tokenizer (vocabulary-only files work)");
    many->excludes(v);
    ids->needs(v);
    cmd->add_flag("--mask", o->mask, "With --vocab: print the token ids allowed after the text")->needs(v);
    cmd->add_flag("--mask-each", o->mask_each, "With --vocab and --tokens: a line 'not-text:' (ids matched by name only: control, end of generation, empty), then the allowed ids before each token and after the last")->needs(ids);
    cmd->add_flag("--time-masks", o->time_masks,
                  "With --vocab and a text: time a mask at each of the text's tokens; with --mask-workload: along random "
                  "paths through each item's grammar, first run against cached runs")->needs(v);
    cmd->add_option("--mask-workload", o->timing.workload, "With --time-masks: a JSON-lines workload (items with json_schema, grammar or regex)")
        ->needs(v);
    cmd->add_option("--rounds", o->timing.rounds, "With --mask-workload: rounds, each with fresh caches (default 3)")->check(CLI::Range(1, 1000));
    cmd->add_option("--steps", o->timing.steps, "With --mask-workload: tokens per random path at most (default 150)")->check(CLI::Range(1, 100000));
    cmd->add_option("--slowest", o->timing.slowest, "With --mask-workload: list this many slowest first-run masks (default 8)")
        ->check(CLI::Range(0, 10000));
    cmd->callback([o, t, &run] {
        o->have_text = t->count() > 0;
        run = [o] { return run_grammar(*o); };
    });
}

} // namespace rwd::cli

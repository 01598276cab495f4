// `rewind tokenize`: prints the token ids (or ids with their pieces) of a text, read from -p, a
// file or standard input. Needs only the tokenizer, so vocabulary-only GGUF files work too.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/gguf.h"
#include "rewind/tokenizer.h"

namespace rwd::cli {

namespace {

struct TokenizeOptions {
    std::string model;
    std::string prompt;
    std::string file;
    bool have_prompt = false;
    bool no_bos = false;
    bool pieces = false;
    bool special = false;
};

// Length of the well-formed UTF-8 sequence at `i`, or 0 if there is none.
size_t utf8_at(const std::string& s, size_t i) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    return n;
}

// A piece as a quoted, one-line string: control characters and bytes that are not (complete)
// UTF-8, such as a lone byte-fallback token, are written as escapes.
std::string quote(const std::string& s) {
    std::string out = "'";
    char buf[8];
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\\' || c == '\'') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c >= 0x20 && c < 0x7F) {
            out += static_cast<char>(c);
        } else if (const size_t n = c >= 0x80 ? utf8_at(s, i) : 0; n > 0) {
            out.append(s, i, n);
            i += n;
            continue;
        } else {
            std::snprintf(buf, sizeof buf, "\\x%02X", c);
            out += buf;
        }
        ++i;
    }
    return out + "'";
}

int run_tokenize(const TokenizeOptions& o) {
    std::string text;
    if (!o.file.empty()) {
        text = read_file_limited(o.file, kMaxPromptFileBytes, "text file");
    } else if (!o.have_prompt || o.prompt == "-") {
        text = read_file_limited("/dev/stdin", kMaxPromptFileBytes, "text on standard input");
    } else {
        text = o.prompt;
    }

    const std::string path = o.model.empty() ? default_model_path() : o.model;
    const GgufFile gguf = GgufFile::open(path);
    const auto tok = Tokenizer::from_gguf(gguf);
    const auto ids = tok->encode(text, o.no_bos ? AddBos::No : AddBos::Default,
                                 o.special ? SpecialTokens::Parse : SpecialTokens::AsText);

    std::ostringstream out;
    if (o.pieces) {
        for (TokenId id : ids) out << id << '\t' << quote(tok->token_to_piece(id, true)) << '\n';
    } else {
        for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
        out << '\n';
    }
    const std::string s = out.str();
    std::fwrite(s.data(), 1, s.size(), stdout);
    return 0;
}

} // namespace

void register_tokenize(CLI::App& app, Runner& run) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
    cmd->add_option("-m,--model", o->model, "GGUF file with a tokenizer (vocabulary-only files work); default: the bundled model");
    CLI::Option* p = cmd->add_option("-p,--prompt", o->prompt, "Text to tokenize; '-' (or no -p/-f) reads standard input");
    CLI::Option* f = cmd->add_option("-f,--file", o->file, "Read the text from this file (at most 8 MiB)");
    p->excludes(f);
    cmd->add_flag("--no-bos", o->no_bos, "Do not add the BOS token");
    cmd->add_flag("--pieces", o->pieces, "Print one token per line: id and piece");
    cmd->add_flag("--special", o->special, "Match control tokens written in the text (e.g. <s>) as those tokens");
    cmd->callback([o, p, &run] {
        o->have_prompt = p->count() > 0;
        run = [o] { return run_tokenize(*o); };
    });
}

} // namespace rwd::cli

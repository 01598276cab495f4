// Tokenizer construction from GGUF metadata and the steps both kinds share: checking the
// vocabulary, special-token splitting, BOS/EOS, pieces, decoding and the UTF-8 stream decoder.
#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>

#include "rewind/error.h"
#include "rewind/gguf.h"
#include "tokenizer_impl.h"
#include "unicode.h"

namespace rwd {

namespace {

const char* kModelKey = "tokenizer.ggml.model";
const char* kTokensKey = "tokenizer.ggml.tokens";
const char* kScoresKey = "tokenizer.ggml.scores";
const char* kTypesKey = "tokenizer.ggml.token_type";

[[noreturn]] void fail(const std::string& what, ErrorCode code = ErrorCode::format) {
    throw Error(code, "tokenizer: " + what);
}

// A special-token id from metadata: absent -> the kind's default (if the vocabulary has it);
// negative or 0xFFFFFFFF (how converters write "none" into a uint32) -> none.
TokenId special_id(const std::optional<int64_t>& value, TokenId fallback, const char* key, size_t n_vocab) {
    if (!value) return fallback >= 0 && static_cast<size_t>(fallback) < n_vocab ? fallback : -1;
    const int64_t v = *value;
    if (v < 0 || v == 0xFFFFFFFFll) return -1;
    if (static_cast<uint64_t>(v) >= n_vocab)
        fail(std::string(key) + " = " + std::to_string(v) + " is outside the vocabulary of " +
             std::to_string(n_vocab) + " tokens");
    return static_cast<TokenId>(v);
}

// from_spec's work on a spec it may consume (from_gguf's own).
std::unique_ptr<Tokenizer> build(TokenizerSpec& spec) {
    if (spec.model == "llama") return detail::make_spm_tokenizer(spec);
    if (spec.model == "gpt2") return detail::make_bpe_tokenizer(spec);
    if (spec.model.empty()) fail(std::string(kModelKey) + " is missing");
    fail(std::string(kModelKey) + " = '" + spec.model +
         "' is not supported (supported: 'llama' SentencePiece, 'gpt2' byte-level BPE)",
         ErrorCode::unsupported);
}

bool is_c_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

} // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& gguf) {
    // The getters' own errors (a key of the wrong type) already name the file.
    const auto missing = [&](const char* key, const char* why) {
        return Error(ErrorCode::format, gguf.path() + ": tokenizer: " + key + " is missing" + why);
    };
    TokenizerSpec spec;
    auto model = gguf.get_string(kModelKey);
    if (!model) throw missing(kModelKey, ": the file holds no tokenizer");
    spec.model = *model;
    auto tokens = gguf.get_string_array(kTokensKey);
    if (!tokens) throw missing(kTokensKey, "");
    spec.tokens = std::move(*tokens);
    if (auto v = gguf.get_float_array(kScoresKey)) spec.scores = std::move(*v);
    if (auto v = gguf.get_int_array(kTypesKey)) spec.token_types = std::move(*v);
    if (auto v = gguf.get_string_array("tokenizer.ggml.merges")) spec.merges = std::move(*v);
    if (auto v = gguf.get_string("tokenizer.ggml.pre")) spec.pre = *v;
    if (auto v = gguf.get_string("general.name")) spec.name = *v;
    spec.bos = gguf.get_int("tokenizer.ggml.bos_token_id");
    spec.eos = gguf.get_int("tokenizer.ggml.eos_token_id");
    spec.eot = gguf.get_int("tokenizer.ggml.eot_token_id");
    spec.unk = gguf.get_int("tokenizer.ggml.unknown_token_id");
    spec.pad = gguf.get_int("tokenizer.ggml.padding_token_id");
    spec.eom = gguf.get_int("tokenizer.ggml.eom_token_id");
    // The older prefix/suffix/middle keys are read after the fim_* ones and win, as in llama.cpp.
    const auto either = [&](const char* older, const char* newer) {
        auto v = gguf.get_int(older);
        return v ? v : gguf.get_int(newer);
    };
    spec.fim_pre = either("tokenizer.ggml.prefix_token_id", "tokenizer.ggml.fim_pre_token_id");
    spec.fim_suf = either("tokenizer.ggml.suffix_token_id", "tokenizer.ggml.fim_suf_token_id");
    spec.fim_mid = either("tokenizer.ggml.middle_token_id", "tokenizer.ggml.fim_mid_token_id");
    spec.fim_pad = gguf.get_int("tokenizer.ggml.fim_pad_token_id");
    spec.fim_rep = gguf.get_int("tokenizer.ggml.fim_rep_token_id");
    spec.fim_sep = gguf.get_int("tokenizer.ggml.fim_sep_token_id");
    spec.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token");
    spec.add_eos = gguf.get_bool("tokenizer.ggml.add_eos_token");
    spec.add_space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix");
    try {
        return build(spec);
    } catch (const Error& e) {
        throw Error(e.code(), gguf.path() + ": " + e.what());
    }
}

std::unique_ptr<Tokenizer> Tokenizer::from_spec(const TokenizerSpec& spec) {
    TokenizerSpec copy = spec;
    return build(copy);
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool render_special) const {
    std::string out;
    // SentencePiece put a space before the text (add_space_prefix); take it off the first piece.
    bool strip = add_space_prefix_;
    for (TokenId id : ids) {
        std::string p = token_to_piece(id, render_special);
        if (p.empty()) continue;
        if (strip && p[0] == ' ') p.erase(0, 1);
        strip = false;
        out += p;
    }
    return out;
}

std::string Utf8StreamDecoder::push(TokenId id) {
    std::string p = tok_.token_to_piece(id);
    if (p.empty()) return {};
    if (first_ && tok_.add_space_prefix() && p[0] == ' ') p.erase(0, 1);
    first_ = false;
    pending_ += p;
    std::string out;
    pending_.erase(0, unicode::take_valid_utf8(pending_, out));
    return out;
}

std::string Utf8StreamDecoder::flush() {
    std::string out;
    pending_.erase(0, unicode::take_valid_utf8(pending_, out));
    if (!pending_.empty()) { // an incomplete sequence that will never complete
        unicode::append_utf8(out, unicode::kReplacement);
        pending_.clear();
    }
    return out;
}

namespace detail {

VocabTokenizer::VocabTokenizer(TokenizerSpec& spec, TokenizerModel kind) {
    const size_t n = spec.tokens.size();
    if (n == 0) fail(std::string(kTokensKey) + " is missing or empty");
    if (n > static_cast<size_t>(std::numeric_limits<TokenId>::max()))
        fail(std::string(kTokensKey) + " has " + std::to_string(n) + " entries, more than token ids can address");
    if (!spec.scores.empty() && spec.scores.size() != n)
        fail(std::string(kScoresKey) + " has " + std::to_string(spec.scores.size()) + " entries but " + kTokensKey +
             " has " + std::to_string(n));
    if (!spec.token_types.empty() && spec.token_types.size() != n)
        fail(std::string(kTypesKey) + " has " + std::to_string(spec.token_types.size()) + " entries but " +
             kTokensKey + " has " + std::to_string(n));

    pieces_ = std::move(spec.tokens);
    scores_ = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);
    kinds_.assign(n, TokenKind::Normal);
    for (size_t i = 0; i < spec.token_types.size(); ++i) {
        const int64_t t = spec.token_types[i];
        if (t < 0 || t > static_cast<int64_t>(TokenKind::Byte))
            fail(std::string(kTypesKey) + "[" + std::to_string(i) + "] = " + std::to_string(t) +
                 " is not a known token type (0..6)");
        kinds_[i] = static_cast<TokenKind>(t);
    }

    by_text_.build(pieces_);

    // llama.cpp's defaults when a key is absent: SentencePiece files come from Llama's tokenizer
    // (<unk>=0, <s>=1, </s>=2, BOS added, leading space added). For byte-level BPE llama.cpp
    // guesses id 11 for BOS/EOS, which is a comma in GPT-2's vocabulary; we assume none instead.
    const bool spm = kind == TokenizerModel::Spm;
    bos_ = special_id(spec.bos, spm ? 1 : -1, "tokenizer.ggml.bos_token_id", n);
    eos_ = special_id(spec.eos, spm ? 2 : -1, "tokenizer.ggml.eos_token_id", n);
    unk_ = special_id(spec.unk, spm ? 0 : -1, "tokenizer.ggml.unknown_token_id", n);
    pad_ = special_id(spec.pad, -1, "tokenizer.ggml.padding_token_id", n);
    add_bos_ = spec.add_bos.value_or(spm);
    add_eos_ = spec.add_eos.value_or(false);
    // The byte-level BPE encoder never adds a space, so it must not strip one either.
    add_space_prefix_ = spm && spec.add_space_prefix.value_or(true);
    if (add_bos_ && bos_ < 0) fail("tokenizer.ggml.add_bos_token is true but there is no BOS token");
    if (add_eos_ && eos_ < 0) fail("tokenizer.ggml.add_eos_token is true but there is no EOS token");

    mark_control_and_eog(spec);

    for (size_t i = 0; i < n; ++i) {
        const TokenKind k = kinds_[i];
        if ((k == TokenKind::Control || k == TokenKind::UserDefined || k == TokenKind::Unknown ||
             (flags_[i] & kControlFlag)) &&
            !pieces_[i].empty())
            specials_.push_back(static_cast<TokenId>(i));
    }
    // Longer pieces claim text first, so "<|end|>" is not cut short by a shorter piece inside it.
    std::stable_sort(specials_.begin(), specials_.end(), [this](TokenId a, TokenId b) {
        return pieces_[static_cast<size_t>(a)].size() > pieces_[static_cast<size_t>(b)].size();
    });

    // llama.cpp, keyed on the model name: Phi-3's special tokens swallow the whitespace after
    // them (its chat template writes "<|user|>\n"), except <unk>, <s> and <|endoftext|>.
    std::string name = spec.name;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    strip_.assign(n, 0);
    if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
        for (TokenId id : specials_) strip_[static_cast<size_t>(id)] = 2;
        for (const char* t : {"<unk>", "<s>", "<|endoftext|>"})
            if (TokenId id = find(t); id >= 0) strip_[static_cast<size_t>(id)] = 0;
        if (TokenId id = find("</s>"); id >= 0) strip_[static_cast<size_t>(id)] = 2;
    }
}

// llama.cpp's rules, applied after the special ids are read: a token whose text marks the end of a
// turn or fill-in-the-middle becomes control whatever the file calls it (so Phi-3's user-defined
// "</s>" is not matched in plain text), and the end-of-generation set collects those texts
// plus EOS, EOT and EOM. An EOT/EOM/FIM id absent from the metadata is found by its text; where
// several texts of one list are present llama.cpp takes whichever its hash map yields first, we
// take the first in list order.
void VocabTokenizer::mark_control_and_eog(const TokenizerSpec& spec) {
    const size_t n = pieces_.size();
    flags_.assign(n, 0);
    for (size_t i = 0; i < n; ++i)
        if (kinds_[i] == TokenKind::Control) flags_[i] |= kControlFlag;

    // Returns the id from metadata, else the first listed text present (which becomes control).
    const auto detect = [&](const std::optional<int64_t>& value, const char* key,
                            std::initializer_list<const char*> texts) -> TokenId {
        const TokenId id = special_id(value, -1, key, n);
        if (id >= 0) return id;
        for (const char* t : texts)
            if (const TokenId found = find(t); found >= 0) {
                flags_[static_cast<size_t>(found)] |= kControlFlag;
                return found;
            }
        return -1;
    };
    const std::string fw_bar = "\xEF\xBD\x9C", lower_block = "\xE2\x96\x81"; // U+FF5C, U+2581
    const std::string ds_end = "<" + fw_bar + "end" + lower_block + "of" + lower_block + "sentence" + fw_bar + ">";
    const std::string ds_begin = "<" + fw_bar + "fim" + lower_block + "begin" + fw_bar + ">";
    const std::string ds_hole = "<" + fw_bar + "fim" + lower_block + "hole" + fw_bar + ">";
    const std::string ds_fim_end = "<" + fw_bar + "fim" + lower_block + "end" + fw_bar + ">";
    const std::string pre_sp = lower_block + "<PRE>", suf_sp = lower_block + "<SUF>", mid_sp = lower_block + "<MID>";

    eot_ = detect(spec.eot, "tokenizer.ggml.eot_token_id",
                  {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
                   "_<EOT>", "[EOT]", ds_end.c_str(), "<end_of_utterance>"});
    const TokenId eom = detect(spec.eom, "tokenizer.ggml.eom_token_id", {"<|eom_id|>"});
    detect(spec.fim_pre, "tokenizer.ggml.fim_pre_token_id",
           {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", ds_begin.c_str(), "<PRE>", pre_sp.c_str(),
            "<|code_prefix|>", "<|prefix|>"});
    detect(spec.fim_suf, "tokenizer.ggml.fim_suf_token_id",
           {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", ds_hole.c_str(), "<SUF>", suf_sp.c_str(),
            "<|code_suffix|>", "<|suffix|>"});
    detect(spec.fim_mid, "tokenizer.ggml.fim_mid_token_id",
           {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", ds_fim_end.c_str(), "<MID>", mid_sp.c_str(),
            "<|code_middle|>", "<|middle|>"});
    const TokenId fim_pad = detect(spec.fim_pad, "tokenizer.ggml.fim_pad_token_id",
                                   {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
    const TokenId fim_rep = detect(spec.fim_rep, "tokenizer.ggml.fim_rep_token_id",
                                   {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
    const TokenId fim_sep = detect(spec.fim_sep, "tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"});

    const auto add_eog = [&](TokenId id) {
        if (id >= 0) flags_[static_cast<size_t>(id)] |= kEogFlag;
    };
    for (TokenId id : {fim_pad, fim_rep, fim_sep, eos_, eot_, eom}) add_eog(id);
    // (llama.cpp then drops "<|end|>" from the set for gpt-oss's harmony vocabulary and "</s>" for
    // Gemma 4's; rewind refuses both vocabularies' tokenizers, so those two exceptions are not here.)
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                          "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                          "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                          ds_end.c_str(), "[e~["})
        if (const TokenId id = find(t); id >= 0) flags_[static_cast<size_t>(id)] |= kControlFlag | kEogFlag;
    for (size_t i = 0; i < n; ++i)
        if (flags_[i] & kEogFlag) eog_ids_.push_back(static_cast<TokenId>(i));
}

std::string VocabTokenizer::token_to_piece(TokenId id, bool render_special) const {
    if (!valid(id)) throw Error("tokenizer: token id " + std::to_string(id) + " is outside the vocabulary of " +
                                std::to_string(n_vocab()) + " tokens");
    const auto i = static_cast<size_t>(id);
    if ((flags_[i] & kControlFlag) || kinds_[i] == TokenKind::Unknown)
        return render_special ? pieces_[i] : std::string();
    // Rendered on demand: cheap per token, and it keeps 100k+ strings out of loading.
    const TokenKind k = kinds_[i];
    if (k == TokenKind::Normal || k == TokenKind::Byte || k == TokenKind::UserDefined) return render_token(id);
    return {}; // unused and undefined tokens render as nothing, as in llama.cpp
}

std::vector<TokenId> VocabTokenizer::encode(std::string_view text, AddBos add_bos, SpecialTokens special) const {
    std::vector<TokenId> out;
    const bool with_bos = add_bos == AddBos::Default ? add_bos_ : add_bos == AddBos::Yes;
    if (with_bos) {
        if (bos_ < 0) throw Error(ErrorCode::unsupported, "tokenizer: a BOS token was requested but the vocabulary has none");
        out.push_back(bos_);
    }
    bool after_special = true;
    for (const Fragment& f : split_special(text, special)) {
        if (f.token >= 0) {
            out.push_back(f.token);
            after_special = true;
        } else {
            encode_text(text.substr(f.begin, f.end - f.begin), after_special, out);
            after_special = false;
        }
    }
    if (add_bos != AddBos::No && add_eos_) out.push_back(eos_);
    return out;
}

// llama.cpp's order of matching: each special piece in turn (longest first) is cut out of every
// stretch of text still plain, left to right. Which pieces can match: user-defined always, control
// (see is_control) and unknown only when parsing specials.
std::vector<VocabTokenizer::Fragment> VocabTokenizer::split_special(std::string_view text,
                                                                    SpecialTokens special) const {
    std::vector<Fragment> frags;
    if (text.empty()) return frags;
    frags.push_back({0, text.size(), -1});
    std::vector<Fragment> next;
    for (TokenId id : specials_) {
        const auto i = static_cast<size_t>(id);
        if (special == SpecialTokens::AsText && ((flags_[i] & kControlFlag) || kinds_[i] == TokenKind::Unknown))
            continue;
        const std::string& p = pieces_[i];
        next.clear();
        bool changed = false;
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            size_t begin = f.begin;
            const size_t end = f.end;
            while (begin < end) {
                const size_t m = text.substr(0, end).find(p, begin);
                if (m == std::string_view::npos) break;
                changed = true;
                size_t left_end = m;
                if (strip_[i] & 1)
                    while (left_end > begin && is_c_space(text[left_end - 1])) --left_end;
                if (left_end > begin) next.push_back({begin, left_end, -1});
                next.push_back({0, 0, id});
                begin = m + p.size();
                if (strip_[i] & 2)
                    while (begin < end && is_c_space(text[begin])) ++begin;
            }
            if (begin < end) next.push_back({begin, end, -1});
        }
        if (changed) frags.swap(next);
    }
    return frags;
}

std::vector<MergeSymbol> utf8_symbols(std::string_view text) {
    std::vector<MergeSymbol> sym;
    sym.reserve(text.size());
    for (size_t off = 0; off < text.size();) {
        const size_t n = std::min(unicode::utf8_seq_len(static_cast<unsigned char>(text[off])), text.size() - off);
        const int idx = static_cast<int>(sym.size());
        off += n;
        sym.push_back({idx - 1, off == text.size() ? -1 : idx + 1, off - n, n});
    }
    return sym;
}

} // namespace detail

} // namespace rwd

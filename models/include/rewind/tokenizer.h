// Tokenizers built from GGUF metadata: SentencePiece-style BPE ("llama": scores, byte fallback)
// and GPT-2 byte-level BPE ("gpt2": merges, pre-tokenizer split). Encode, decode, special ids.
// Threads: a Tokenizer is immutable once built; every const call may run from many threads at
// once. A Utf8StreamDecoder belongs to one thread at a time.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rwd {

class GgufFile;

using TokenId = int32_t;

// Token attribute as stored in tokenizer.ggml.token_type.
enum class TokenKind : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

enum class TokenizerModel { Spm, Bpe };

// Whether text that spells a control or unknown token (e.g. "<s>") is matched as that token
// (longest pieces first). User-defined tokens are matched either way, as llama.cpp and Hugging Face
// tokenizers do, unless llama.cpp treats them as control (see Tokenizer::is_control).
enum class SpecialTokens { AsText, Parse };
enum class AddBos { Default, Yes, No }; // Default: the file's tokenizer.ggml.add_bos_token

// The tokenizer.ggml.* metadata as plain data (what from_gguf reads), so a tokenizer can also be
// built without a file. Absent optional values take llama.cpp's defaults for the model kind.
struct TokenizerSpec {
    std::string model;                // tokenizer.ggml.model: "llama" (SPM) or "gpt2" (BPE)
    std::string pre;                  // tokenizer.ggml.pre; "" when absent
    std::string name;                 // general.name (llama.cpp keys Phi-3's whitespace rule on it)
    std::vector<std::string> tokens;  // required
    std::vector<float> scores;        // empty: all 0
    std::vector<int64_t> token_types; // empty: all Normal
    std::vector<std::string> merges;  // "left right", required for "gpt2"
    std::optional<int64_t> bos, eos, eot, unk, pad; // negative or 0xFFFFFFFF: none
    // End-of-message and fill-in-the-middle markers (tokenizer.ggml.eom_token_id, fim_*_token_id
    // or the older prefix/suffix/middle_token_id). Absent or none: found by text, as llama.cpp does.
    std::optional<int64_t> eom, fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    std::optional<bool> add_bos, add_eos, add_space_prefix;
};

class Tokenizer {
public:
    // Reads tokenizer.ggml.* from `gguf`. Throws rwd::Error naming the key when a required
    // array is missing, lengths disagree (format), or the model kind or pre-tokenizer is
    // unsupported (unsupported).
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& gguf);
    // Same checks and errors as from_gguf.
    static std::unique_ptr<Tokenizer> from_spec(const TokenizerSpec& spec);
    virtual ~Tokenizer() = default;

    virtual TokenizerModel model() const = 0;
    // AddBos::Default and Yes also append EOS when the file's add_eos_token says so; No adds neither.
    // A byte that a byte-level BPE vocabulary has no token for is dropped, as llama.cpp does
    // (StarCoder's lacks 0xF1, for instance); SPM falls back to byte tokens, then the unknown one.
    virtual std::vector<TokenId> encode(std::string_view text, AddBos add_bos = AddBos::Default,
                                        SpecialTokens special = SpecialTokens::AsText) const = 0;
    // The bytes of one token's piece as it appears in text (byte pieces give their byte;
    // control tokens give "" unless `render_special`).
    virtual std::string token_to_piece(TokenId id, bool render_special = false) const = 0;
    // Concatenated pieces, with SPM's leading-space rule applied at the start of text: with
    // add_space_prefix, one space comes off the first non-empty piece (so decode(encode(s)) == s,
    // except that SPM decodes a U+2581 already present in s as a space, exactly as llama.cpp does).
    std::string decode(const std::vector<TokenId>& ids, bool render_special = false) const;

    int64_t n_vocab() const { return static_cast<int64_t>(pieces_.size()); }
    const std::string& piece(TokenId id) const { return pieces_.at(static_cast<size_t>(id)); } // raw vocab string
    TokenKind kind(TokenId id) const { return kinds_.at(static_cast<size_t>(id)); } // as the file says
    // Control in llama.cpp's sense: the file's control kind, or a token llama.cpp promotes to control
    // by its text whatever its kind (end-of-generation and fill-in-the-middle markers such as
    // "<|eot_id|>", "<|im_end|>", "</s>"). Control tokens are matched in text only with
    // SpecialTokens::Parse and render as "" unless asked. False for an invalid id.
    bool is_control(TokenId id) const { return valid(id) && (flags_[static_cast<size_t>(id)] & kControlFlag); }
    TokenId bos() const { return bos_; }
    TokenId eos() const { return eos_; }
    TokenId eot() const { return eot_; } // from the metadata, else found by its text as llama.cpp does
    TokenId unk() const { return unk_; }
    TokenId pad() const { return pad_; }
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; } // appended unless the caller passes AddBos::No
    bool add_space_prefix() const { return add_space_prefix_; } // SPM only
    // End of generation: EOS, EOT, EOM, the FIM pad/repo/file-separator markers, and every token
    // whose text llama.cpp lists as ending generation ("<|eot_id|>", "<|im_end|>", "<|end|>", ...).
    bool is_eog(TokenId id) const { return valid(id) && (flags_[static_cast<size_t>(id)] & kEogFlag); }
    const std::vector<TokenId>& eog_ids() const { return eog_ids_; } // ascending
    bool valid(TokenId id) const { return id >= 0 && id < n_vocab(); }

protected:
    static constexpr uint8_t kControlFlag = 1, kEogFlag = 2;

    std::vector<std::string> pieces_;
    std::vector<TokenKind> kinds_;
    std::vector<uint8_t> flags_; // per token: kControlFlag | kEogFlag
    std::vector<TokenId> eog_ids_;
    TokenId bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1, pad_ = -1;
    bool add_bos_ = false;
    bool add_eos_ = false;
    bool add_space_prefix_ = false;
};

// Turns a stream of tokens into valid UTF-8 text: bytes of an incomplete multi-byte sequence are
// held back until the sequence completes (or flushed as U+FFFD at flush()).
// `at_text_start`: the first token begins the text, so SPM's leading-space rule applies to it; pass
// false when streaming a continuation (e.g. generated tokens after a prompt).
class Utf8StreamDecoder {
public:
    explicit Utf8StreamDecoder(const Tokenizer& tok, bool at_text_start = true)
        : tok_(tok), first_(at_text_start) {}
    // Returns the text that became complete with this token (possibly empty).
    std::string push(TokenId id);
    std::string flush();

private:
    const Tokenizer& tok_;
    std::string pending_;
    bool first_;
};

} // namespace rwd

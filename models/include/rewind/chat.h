// Chat formatting: a conversation -> the prompt text (and ids) a model's chat template would give,
// written per family in C++ (Llama 3, ChatML/Qwen, Phi-3, Gemma), detection from a file's
// tokenizer.chat_template, and tokenization where message text can never become a control token.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rewind/tokenizer.h"

namespace rwd {

class GgufFile;

// The families whose templates rewind reproduces byte for byte (checked against the publishers'
// templates rendered by @huggingface/jinja, tests/test_chat.cpp).
enum class ChatFamily {
    Llama3, // Llama 3, 3.1, 3.2, 3.3: <|start_header_id|>role<|end_header_id|>\n\n text <|eot_id|>
    ChatMl, // Qwen2, Qwen2.5, Qwen2.5-Coder, Qwen3: <|im_start|>role\n text <|im_end|>\n
    Phi3,   // Phi-3, Phi-3.5: <|role|>\n text <|end|>\n
    Gemma,  // Gemma 2, 3: <start_of_turn>user|model\n text <end_of_turn>\n, system merged into the first user turn
};

// A family and the variants within it that change the text.
struct ChatFormat {
    ChatFamily family = ChatFamily::ChatMl;
    // Llama3: Llama 3.0's template, which ends with the assistant header even when
    // add_generation_prompt is false (3.1 and later honour it).
    bool always_generation_prompt = false;
    // Llama3: Meta's 3.1, 3.2 and 3.3 templates: a system turn always comes first, opening with
    // "Cutting Knowledge Date: December 2023\nToday Date: <date>\n\n" and then the conversation's
    // system message (trimmed), if it starts with one.
    bool date_preamble = false;
    // ChatMl: the system message a conversation that does not start with one gets (Qwen2: "You are
    // a helpful assistant.", Qwen2.5: "You are Qwen, created by Alibaba Cloud. You are a helpful
    // assistant."); empty: none (Qwen3, plain ChatML).
    std::string default_system;
    // ChatMl: Qwen3's reasoning rules: <think>...</think> is taken out of assistant turns before the
    // last user query, the turns after it get a think block (empty when they had none and are
    // last), and enable_thinking = false adds an empty think block after the generation prompt.
    bool qwen3_thinking = false;
    // ChatMl: the template renders tools, assistant tool calls and tool results in Qwen's
    // <tool_call> format (Qwen2.5, Qwen3); other formats refuse them.
    bool qwen_tools = false;

    bool operator==(const ChatFormat&) const = default;
};

// One function call an assistant message made (OpenAI's tool_calls[i], Hugging Face convention).
struct ChatToolCall {
    std::string id;        // the caller's id; Qwen's templates do not write it
    std::string name;      // the function's name
    std::string arguments; // JSON text, normally an object (a caller holding OpenAI's argument
                           // string passes that string's text); its key order is kept
};

struct ChatMessage {
    // "system", "user", "assistant", or "tool" (a tool's result; formats with tool support only);
    // anything else is refused
    std::string role;
    std::string content; // plain text
    // Non-empty: the caller's message held something other than one plain text, which rewind does
    // not format yet; says what ("a list of content parts", "content that is a number"). Such a
    // message is refused, naming this, never flattened.
    std::string unsupported{};
    std::vector<ChatToolCall> tool_calls{}; // assistant: the calls it made (formats with tool support only)
    std::string tool_call_id{};             // tool: the call this result answers (not rendered by Qwen)
};

struct ChatOptions {
    bool add_generation_prompt = true; // end with the assistant's header, ready for its reply
    std::string bos_token, eos_token;  // the texts the template writes for them (see tokenize_chat)
    bool enable_thinking = true;       // Qwen3 only: false adds "<think>\n\n</think>\n\n" to the prompt
    // Llama 3.1+ with the date preamble: its "Today Date"; empty: "26 Jul 2024", what the templates
    // write when they are given none (Llama 3.2's asks the renderer for today's date first: pass it).
    std::string date_string;
    // The tools offered to the model: JSON text of OpenAI's list of function tools
    // ([{"type": "function", "function": {"name", "description", "parameters"}}, ...]), rendered as
    // the template's `tojson` (Python's json.dumps: ", " and ": ", key order as given, non-ASCII
    // kept). Empty or "[]": none. A format without tool support refuses a non-empty list.
    std::string tools;
};

// One span of the formatted text: what the template writes itself (markers: control tokens and
// the fixed text around them) or what a message says (content). format_chat concatenates them.
struct ChatSegment {
    enum class Kind { Bos, Eos, Marker, Content };
    Kind kind = Kind::Marker;
    std::string text; // Bos, Eos: the options' bos_token / eos_token
};

// The built-in formats by name: "llama3" (3.0), "llama3.1" ("llama3.2", "llama3.3": Meta's templates,
// with the date preamble), "llama3-simple" (the Llama 3 turns, honouring add_generation_prompt, no
// preamble), "chatml" (no default system message), "qwen2", "qwen2.5" ("qwen2.5-coder"), "qwen3",
// "phi3" ("phi3.5"), "gemma" ("gemma2", "gemma3"). Throws rwd::Error (argument) listing them for
// any other name.
ChatFormat parse_chat_format_name(std::string_view name);
// The name parse_chat_format_name gives back this format for; "" for a ChatMl format whose default
// system message is none of the built-in ones.
std::string chat_format_name(const ChatFormat& format);

// The family of a chat template by the markers it contains (as llama.cpp does), and its variant by
// what it says: Llama 3.0 (no add_generation_prompt), the default system message of a ChatML
// template, Qwen3 (enable_thinking), Llama 3.1's date preamble. Throws rwd::Error (unsupported)
// quoting the first 40 characters of a template it does not recognise, or naming a variant it does
// not reproduce (a reasoning template other than Qwen3's, Phi-4).
ChatFormat detect_chat_format(std::string_view template_text);

// The format to use: `override_name_or_template` when given (a built-in name, else a template's
// text to detect), else detected from `file_template` (a file's tokenizer.chat_template). Throws as
// the two above, and rwd::Error (unsupported) when both are empty.
ChatFormat resolve_chat_format(std::string_view override_name_or_template, std::string_view file_template);
// The same with `file`'s tokenizer.chat_template; the error for a file without one names it.
ChatFormat resolve_chat_format(std::string_view override_name_or_template, const GgufFile& file);

// The conversation as the format's template renders it, as segments. Throws rwd::Error, naming the
// message by index and role: argument for an empty conversation, an unknown role, or roles that do
// not alternate where the template requires it (Gemma: user, assistant, user, ... after an
// optional first system message), tools that are not a JSON list of objects, tool-call arguments
// that are not JSON; unsupported, naming the format, for tools, tool calls or "tool" messages given
// to a format without tool support, and for a message marked `unsupported` or a role rewind does
// not format ("ipython", "function").
std::vector<ChatSegment> chat_segments(const ChatFormat& format, std::span<const ChatMessage> messages,
                                       const ChatOptions& options = {});
// The concatenated segments: the exact text the family's template gives. Throws as chat_segments.
std::string format_chat(const ChatFormat& format, std::span<const ChatMessage> messages,
                        const ChatOptions& options = {});

// The formatted conversation as ids, with the template's markers as control tokens and message
// text as text: "<|im_end|>" typed in a message stays those characters. Exactly one BOS first when
// the template writes one or the tokenizer adds one (or both), none otherwise; never an EOS but the
// one a template writes (Phi-3 without a generation prompt: the tokenizer's EOS unless
// options.eos_token names another). options.bos_token is not used. Messages that spell no control
// token give exactly the ids of encoding the whole text with SpecialTokens::Parse, as llama.cpp
// does; around a message that does, the text is cut there (for SentencePiece vocabularies with
// add_space_prefix, that message's first piece then gets the prefix space). Throws as chat_segments,
// and rwd::Error (unsupported) when the template writes a BOS the vocabulary lacks.
// Fills an empty options.bos_token / eos_token with the text of `tokenizer`'s BOS / EOS token
// (what a model's own template is rendered with); a vocabulary without one leaves it empty.
void fill_token_texts(ChatOptions& options, const Tokenizer& tokenizer);

std::vector<TokenId> tokenize_chat(const Tokenizer& tokenizer, const ChatFormat& format,
                                   std::span<const ChatMessage> messages, const ChatOptions& options = {});

} // namespace rwd

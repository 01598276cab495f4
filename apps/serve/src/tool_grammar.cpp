// tool_call_gbnf: each function's parameters through the JSON Schema front end (compact JSON),
// its rules renamed apart, under one root that writes the <tool_call> block around them.
#include "tool_grammar.h"

#include <nlohmann/json.hpp>

#include "rewind/error.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/serve/api.h"

namespace rwd::serve {

namespace {

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Copies the delimited run at gbnf[i] (a literal "...", a class [...]) up to its closing
// `close`, backslash escapes included; returns the index after it.
size_t copy_delimited(std::string_view gbnf, size_t i, char close, std::string& out) {
    out += gbnf[i++];
    while (i < gbnf.size() && gbnf[i] != close) {
        if (gbnf[i] == '\\' && i + 1 < gbnf.size()) out += gbnf[i++];
        out += gbnf[i++];
    }
    if (i < gbnf.size()) out += gbnf[i++];
    return i;
}

// A GBNF string literal of `text`.
std::string gbnf_literal(std::string_view text) {
    std::string out = "\"";
    for (char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') out += "\\n";
        else out += c;
    }
    return out + "\"";
}

} // namespace

std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix) {
    std::string out;
    out.reserve(gbnf.size() * 5 / 4);
    size_t i = 0;
    while (i < gbnf.size()) {
        const char c = gbnf[i];
        if (c == '"') {
            i = copy_delimited(gbnf, i, '"', out);
        } else if (c == '[') {
            i = copy_delimited(gbnf, i, ']', out);
        } else if (c == '{') {
            i = copy_delimited(gbnf, i, '}', out);
        } else if (c == '#') {
            while (i < gbnf.size() && gbnf[i] != '\n') out += gbnf[i++];
        } else if (is_name_char(c)) {
            out += prefix;
            while (i < gbnf.size() && is_name_char(gbnf[i])) out += gbnf[i++];
        } else {
            out += gbnf[i++];
        }
    }
    return out;
}

std::string tool_call_gbnf(const std::string& tools, std::string_view only, bool parallel) {
    const nlohmann::ordered_json list = nlohmann::ordered_json::parse(tools);
    std::string rules, alternatives;
    for (size_t i = 0; i < list.size(); ++i) {
        const auto& fn = list[i]["function"];
        const std::string name = fn["name"];
        if (!only.empty() && name != only) continue;
        const auto params = fn.find("parameters");
        const std::string schema = params == fn.end() || params->is_null() ? std::string(R"({"type":"object"})") : params->dump();
        const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
        std::string args;
        try {
            args = grammar::json_schema_to_gbnf(schema);
        } catch (const Error& e) {
            throw ApiError(400, "'" + param + "': " + e.what(), param);
        }
        std::string prefix = "f"; // (built in steps: g++ 12 warns falsely on "f" + to_string)
        prefix.append(std::to_string(i)).append("-");
        rules += prefix_gbnf_rules(args, prefix) + "\n";
        const std::string head = "<tool_call>\n{\"name\": " + nlohmann::json(name).dump() + ", \"arguments\": ";
        rules += prefix + "call ::= " + gbnf_literal(head) + " " + prefix + "root " + gbnf_literal("}\n</tool_call>") + "\n";
        if (!alternatives.empty()) alternatives += " | ";
        alternatives.append(prefix).append("call");
    }
    if (alternatives.empty())
        throw ApiError(400, "'tool_choice' names the function '" + std::string(only) + "', which is not among the tools",
                       "tool_choice");
    rules += "call ::= " + alternatives + "\n";
    rules += parallel ? "root ::= call (\"\\n\" call)*\n" : "root ::= call\n";
    return rules;
}

} // namespace rwd::serve

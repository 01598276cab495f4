// Python-style JSON writing (", " and ": " separators, key order as given, non-ASCII kept, the
// control characters escaped as json.dumps escapes them): what the publishers' `tojson` renders.
#include "chat_json.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "rewind/error.h"

namespace rwd::chat_json {

namespace {

using ojson = nlohmann::ordered_json;

void write_string(std::string& out, const std::string& s) {
    out += '"';
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            if (c < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", c);
                out += buf;
            } else {
                out += ch; // UTF-8 passes through (ensure_ascii=False)
            }
        }
    }
    out += '"';
}

void write(std::string& out, const ojson& v) {
    switch (v.type()) {
    case ojson::value_t::object: {
        out += '{';
        bool first = true;
        for (const auto& [key, val] : v.items()) {
            if (!first) out += ", ";
            first = false;
            write_string(out, key);
            out += ": ";
            write(out, val);
        }
        out += '}';
        break;
    }
    case ojson::value_t::array: {
        out += '[';
        for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            write(out, v[i]);
        }
        out += ']';
        break;
    }
    case ojson::value_t::string: write_string(out, v.get_ref<const std::string&>()); break;
    default: out += v.dump(); break; // numbers (shortest round trip, as Python's repr), booleans, null
    }
}

ojson parse(std::string_view text, const std::string& where, const char* what) {
    ojson j = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw Error(ErrorCode::argument, where + ": " + what + " are not valid JSON");
    return j;
}

} // namespace

std::vector<std::string> tool_texts(std::string_view tools_json, const std::string& where) {
    if (tools_json.empty()) return {};
    const ojson tools = parse(tools_json, where, "the tools");
    if (!tools.is_array()) throw Error(ErrorCode::argument, where + ": the tools must be a JSON list");
    std::vector<std::string> out;
    for (size_t i = 0; i < tools.size(); ++i) {
        if (!tools[i].is_object())
            throw Error(ErrorCode::argument, where + ": tool " + std::to_string(i) + " is not a JSON object");
        std::string text;
        write(text, tools[i]);
        out.push_back(std::move(text));
    }
    return out;
}

std::string arguments_text(std::string_view arguments_json, bool string_as_is, const std::string& where) {
    const ojson args = parse(arguments_json, where, "the tool call's arguments");
    if (string_as_is && args.is_string()) return args.get<std::string>();
    std::string out;
    write(out, args);
    return out;
}

} // namespace rwd::chat_json

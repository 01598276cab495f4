// Workload JSON-lines parsing for the benchmark harness. Every malformed line is reported with
// its file and line number, since workloads are hand-edited and a silent skip would bias results.
#include "rewind/bench/bench_workload.h"

#include <filesystem>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "rewind/error.h"
#include "rewind/file_io.h"
#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/regex.h"

namespace rwd::bench {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, int64_t line, const std::string& what) {
    throw Error(ErrorCode::format, source + ":" + std::to_string(line) + ": " + what);
}

std::string required_string(const json& obj, const char* key, const std::string& source, int64_t line) {
    auto it = obj.find(key);
    if (it == obj.end()) fail(source, line, std::string("missing \"") + key + "\"");
    if (!it->is_string()) fail(source, line, std::string("\"") + key + "\" must be a string");
    return it->get<std::string>();
}

// The item's constraint as GBNF: "grammar" as it is, "json_schema" or "regex" compiled (each
// distinct source once per file, through `compiled`).
std::string constraint_gbnf(const json& obj, const std::string& source, int64_t line,
                            std::unordered_map<std::string, std::string>& compiled) {
    std::string gbnf;
    int given = 0;
    for (const char* key : {"grammar", "json_schema", "regex"}) {
        auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) continue;
        if (++given > 1) fail(source, line, "give at most one of \"grammar\", \"json_schema\" and \"regex\"");
        const bool schema = std::string_view(key) == "json_schema";
        if (!schema && !it->is_string()) fail(source, line, std::string("\"") + key + "\" must be a string");
        const std::string text = schema ? it->dump() : it->get<std::string>();
        if (std::string_view(key) == "grammar") {
            try {
                (void)grammar::parse_gbnf(text); // a bad grammar is this line's error, not a run's
            } catch (const Error& e) {
                fail(source, line, std::string("\"grammar\": ") + e.what());
            }
            gbnf = text;
            continue;
        }
        const std::string memo_key = std::string(key) + '\n' + text;
        if (auto m = compiled.find(memo_key); m != compiled.end()) {
            gbnf = m->second;
            continue;
        }
        try {
            gbnf = schema ? grammar::json_schema_to_gbnf(text) : grammar::regex_to_gbnf(text);
        } catch (const Error& e) {
            fail(source, line, std::string("\"") + key + "\": " + e.what());
        }
        compiled.emplace(memo_key, gbnf);
    }
    return gbnf;
}

WorkItem parse_item(const std::string& text, const std::string& source, const std::string& stem,
                    int64_t line, std::unordered_map<std::string, std::string>& compiled) {
    json obj;
    try {
        obj = json::parse(text);
    } catch (const json::exception& e) { // parse_error, and out_of_range for a number like 8e888
        fail(source, line, std::string("not valid JSON (") + e.what() + ")");
    }
    if (!obj.is_object()) fail(source, line, "expected a JSON object");

    WorkItem item;
    item.workload = stem;
    auto id = obj.find("id");
    if (id == obj.end()) fail(source, line, "missing \"id\"");
    // Ids are labels: accept numbers too, but keep them as text.
    if (id->is_string()) item.id = id->get<std::string>();
    else if (id->is_number_integer()) item.id = std::to_string(id->get<int64_t>());
    else fail(source, line, "\"id\" must be a string or an integer");
    if (item.id.empty()) fail(source, line, "\"id\" is empty");

    item.prompt = required_string(obj, "prompt", source, line);
    if (item.prompt.empty()) fail(source, line, "\"prompt\" is empty");

    if (auto kind = obj.find("kind"); kind != obj.end() && !kind->is_null()) {
        if (!kind->is_string()) fail(source, line, "\"kind\" must be a string");
        item.kind = kind->get<std::string>();
    }
    if (auto refs = obj.find("references"); refs != obj.end() && !refs->is_null()) {
        if (!refs->is_array()) fail(source, line, "\"references\" must be an array of strings");
        for (const auto& r : *refs) {
            if (!r.is_string()) fail(source, line, "\"references\" must be an array of strings");
            item.references.push_back(r.get<std::string>());
        }
    }
    auto mt = obj.find("max_tokens");
    if (mt == obj.end()) fail(source, line, "missing \"max_tokens\"");
    if (!mt->is_number_integer()) fail(source, line, "\"max_tokens\" must be an integer");
    item.max_tokens = mt->get<int64_t>();
    if (item.max_tokens <= 0) fail(source, line, "\"max_tokens\" must be positive");
    item.grammar = constraint_gbnf(obj, source, line, compiled);
    return item;
}

} // namespace

std::vector<WorkItem> parse_workload(std::istream& in, const std::string& source) {
    const std::string stem = std::filesystem::path(source).stem().string();
    std::vector<WorkItem> items;
    std::unordered_set<std::string> seen;
    std::unordered_map<std::string, std::string> compiled; // "key\nsource" -> GBNF
    std::string text;
    int64_t line = 0;
    while (std::getline(in, text)) {
        ++line;
        if (!text.empty() && text.back() == '\r') text.pop_back();
        if (text.find_first_not_of(" \t") == std::string::npos) continue;
        items.push_back(parse_item(text, source, stem, line, compiled));
        // Results are keyed by id, so two items with one id would be merged in the report.
        if (!seen.insert(items.back().id).second)
            fail(source, line, "duplicate id \"" + items.back().id + "\"");
    }
    return items;
}

std::vector<WorkItem> load_workload(const std::string& path) {
    std::istringstream in(read_file_limited(path, kMaxWorkloadFileBytes, "workload file"));
    auto items = parse_workload(in, path);
    if (items.empty()) throw Error(ErrorCode::format, path + ": workload has no items");
    return items;
}

std::vector<WorkItem> take_first(std::vector<WorkItem> items, int64_t n) {
    if (n > 0 && static_cast<size_t>(n) < items.size()) items.resize(static_cast<size_t>(n));
    return items;
}

} // namespace rwd::bench

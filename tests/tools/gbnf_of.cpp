// Prints the GBNF that rewind's JSON Schema or regex front end makes, for outside checks (the
// node tests in scripts/json-schema feed it to other tools).

//   gbnf_of --json-schema TEXT [--free] | --regex PATTERN | --any-json [--free]
//   gbnf_of --batch: JSON lines {"json_schema": S, "free": bool} or {"regex": P} on stdin, one
//   JSON line out each: {"gbnf": TEXT} or {"error": MESSAGE, "code": NAME}.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "rewind/error.h"
#include "rewind/grammar/json_schema.h"
#include "rewind/grammar/regex.h"

namespace {

nlohmann::ordered_json convert(const nlohmann::ordered_json& req) {
    using namespace rwd::grammar;
    JsonGrammarOptions opts;
    if (req.value("free", false)) opts.whitespace = JsonWhitespace::Free;
    try {
        if (req.contains("regex")) return {{"gbnf", regex_to_gbnf(req["regex"].get<std::string>())}};
        if (req.contains("any_json")) return {{"gbnf", any_json_gbnf(opts)}};
        const auto& s = req["json_schema"];
        return {{"gbnf", json_schema_to_gbnf(s.is_string() ? s.get<std::string>() : s.dump(), opts)}};
    } catch (const rwd::Error& e) {
        return {{"error", e.what()}, {"code", rwd::error_code_name(e.code())}};
    }
}

} // namespace

int main(int argc, char** argv) {
    nlohmann::ordered_json req = nlohmann::ordered_json::object();
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--batch") {
            std::string line;
            while (std::getline(std::cin, line)) std::cout << convert(nlohmann::ordered_json::parse(line)).dump() << "\n" << std::flush;
            return 0;
        }
        if (a == "--free") req["free"] = true;
        else if (a == "--any-json") req["any_json"] = true;
        else if ((a == "--json-schema" || a == "--regex") && i + 1 < argc) req[a == "--regex" ? "regex" : "json_schema"] = std::string(argv[++i]);
        else { std::cerr << "usage: gbnf_of --json-schema TEXT [--free] | --regex PATTERN | --any-json | --batch\n"; return 2; }
    }
    const auto out = convert(req);
    if (out.contains("error")) { std::cerr << out["error"].get<std::string>() << "\n"; return 1; }
    std::cout << out["gbnf"].get<std::string>();
    return 0;
}

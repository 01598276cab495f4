// JSON Schema strings (lengths, pattern and format together, by intersection) and numbers
// (exact digit grammars for bounds).
#include <cstdio>

#include "json_chars.h"
#include "number_grammar.h"
#include "regex_ast.h"
#include "rewind/error.h"
#include "schema_compiler.h"
#include "string_automaton.h"

namespace rwd::grammar::detail {
namespace {

constexpr const char* kLeapYear = "([0-9][0-9](0[48]|[2468][048]|[13579][26])|(00|0[48]|[2468][048]|[13579][26])00)";
constexpr const char* kDate =
    "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
    "|LEAP-02-29)";
constexpr const char* kTime = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";

int64_t length_keyword(const Json& s, const std::string& key, const std::string& ptr) {
    const Json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != static_cast<double>(static_cast<int64_t>(v.get<double>())))
        schema_error(pointer_join(ptr, key), key + " must be a non-negative integer");
    if (v.get<double>() > 1e15) schema_error(pointer_join(ptr, key), key + " too large");
    return static_cast<int64_t>(v.get<double>());
}

std::string quant(int64_t lo, int64_t hi) {
    if (hi == kUnbounded) return lo == 0 ? "*" : lo == 1 ? "+" : cat("{", std::to_string(lo), ",}");
    if (lo == hi) return cat("{", std::to_string(lo), "}");
    return cat("{", std::to_string(lo), ",", std::to_string(hi), "}");
}

Decimal bound_value(const Json& s, const std::string& key, const std::string& ptr) {
    const auto text = number_text(s[key]);
    if (!text) schema_error(pointer_join(ptr, key), key + " must be a number");
    return parse_decimal(*text);
}

// The tighter of `minimum` (with draft 4's boolean exclusiveMinimum) and a numeric
// exclusiveMinimum; likewise for the maximum (`upper`).
std::optional<Bound> bound_of(const Json& s, const std::string& ptr, bool upper) {
    const std::string inc = upper ? "maximum" : "minimum", exc = upper ? "exclusiveMaximum" : "exclusiveMinimum";
    std::optional<Bound> b;
    bool draft4_exclusive = false;
    if (s.contains(exc) && s[exc].is_boolean()) draft4_exclusive = s[exc].get<bool>();
    else if (s.contains(exc)) b = Bound{bound_value(s, exc, ptr), true};
    if (s.contains(inc)) {
        const Bound m{bound_value(s, inc, ptr), draft4_exclusive};
        const int c = b ? compare(m.value, b->value) : 0;
        if (!b || (upper ? c < 0 : c > 0)) b = m;
    } else if (draft4_exclusive) {
        schema_error(pointer_join(ptr, exc), exc + ": true without " + inc);
    }
    return b;
}

// Lengths folded into the pattern itself where that is exact and simple: each alternative is
// anchored at both ends and is fixed-length parts around one repetition of a character set, so
// `^[a-z_][a-z0-9_]*$` with maxLength 40 becomes `[a-z_] [a-z0-9_]{0,39}` instead of an automaton
// unrolled 40 times. Returns false (changing nothing) when a branch has another shape.
bool fold_lengths(std::vector<RegexBranch>& branches, bool search, int64_t min, int64_t max) {
    std::vector<RegexNode*> reps;
    std::vector<int64_t> fixed;
    for (auto& b : branches) {
        if (search && !(b.anchored_start && b.anchored_end)) return false;
        if (b.body->kind != RegexNode::Kind::seq) return false;
        RegexNode* rep = nullptr;
        int64_t len = 0;
        for (auto& k : b.body->kids) {
            const bool single_set_repeat = k->kind == RegexNode::Kind::repeat && k->kids[0]->kind == RegexNode::Kind::set;
            if (single_set_repeat && k->min != k->max && !rep) { rep = k.get(); continue; }
            const int64_t lo = regex_min_length(*k), hi = regex_max_length(*k);
            if (lo != hi) return false;
            len += lo;
        }
        if (!rep) return false;
        reps.push_back(rep);
        fixed.push_back(len);
    }
    std::vector<int64_t> lo(reps.size()), hi(reps.size());
    size_t nonempty = 0;
    for (size_t i = 0; i < reps.size(); ++i) {
        lo[i] = std::max(reps[i]->min, min - fixed[i]);
        hi[i] = reps[i]->max;
        if (max != kUnbounded) hi[i] = hi[i] == kUnbounded ? max - fixed[i] : std::min(hi[i], max - fixed[i]);
        if (hi[i] == kUnbounded || hi[i] >= lo[i]) ++nonempty;
    }
    if (nonempty != reps.size()) return false; // a branch without an allowed length: the automaton says so
    for (size_t i = 0; i < reps.size(); ++i) {
        reps[i]->min = lo[i];
        reps[i]->max = hi[i];
    }
    return true;
}

} // namespace

std::optional<std::string> format_regex(const std::string& f) {
    std::string date = kDate;
    date.replace(date.find("LEAP"), 4, kLeapYear);
    if (f == "date") return date;
    if (f == "time") return std::string(kTime);
    if (f == "date-time") return date + "[Tt ]" + kTime;
    if (f == "uuid") return std::string("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
    if (f == "email")
        return std::string("[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
                           "([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\\.)+[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?");
    return std::nullopt;
}

std::string SchemaCompiler::canonical_char(const CharSet& set) {
    CharSet special = CharSet::of(0, 0x1F);
    special.add('"', '"');
    special.add('\\', '\\');
    const CharSet s = set.minus(CharSet::of(0xD800, 0xDFFF));
    std::string body;
    const auto alt = [&](const std::string& a) { body += cat(body.empty() ? "" : " | ", a); };
    const CharSet raw = s.minus(special);
    if (!raw.empty()) alt(gbnf_class(raw));
    static constexpr std::pair<uint32_t, const char*> kShort[] = {{'"', "\\\\\\\""}, {'\\', "\\\\\\\\"}, {8, "\\\\b"},
                                                                  {12, "\\\\f"}, {10, "\\\\n"}, {13, "\\\\r"}, {9, "\\\\t"}};
    std::vector<uint32_t> escaped = {'"', '\\'};
    for (uint32_t cp = 0; cp < 0x20; ++cp) escaped.push_back(cp);
    for (uint32_t cp : escaped) {
        if (!s.contains(cp)) continue;
        const char* short_form = nullptr;
        for (const auto& [c, esc] : kShort)
            if (c == cp) short_form = esc;
        if (short_form) {
            alt(cat("\"", short_form, "\""));
        } else {
            char buf[16];
            std::snprintf(buf, sizeof buf, "\"\\\\u%04x\"", static_cast<unsigned>(cp));
            alt(buf);
        }
    }
    if (body.empty()) throw Error(ErrorCode::argument, "a character class that matches no Unicode character");
    return w_.add("kchar", body);
}

std::string SchemaCompiler::string_value(const Json& s, const std::string& ptr) {
    const int64_t min = s.contains("minLength") ? length_keyword(s, "minLength", ptr) : 0;
    const int64_t max = s.contains("maxLength") ? length_keyword(s, "maxLength", ptr) : kUnbounded;
    if (max != kUnbounded && min > max) schema_error(ptr, "minLength is above maxLength");
    // (pattern, search semantics) and format (whole match), parsed.
    std::vector<std::pair<std::vector<RegexBranch>, bool>> regexes;
    const auto parse = [&](const std::string& key, const std::string& text, bool search) {
        try {
            regexes.emplace_back(parse_regex(text), search);
        } catch (const Error& e) {
            schema_error(pointer_join(ptr, key), e.what());
        }
    };
    if (s.contains("pattern")) {
        if (!s["pattern"].is_string()) schema_error(pointer_join(ptr, "pattern"), "pattern must be a string");
        parse("pattern", s["pattern"].get<std::string>(), true);
    }
    if (s.contains("format")) {
        if (!s["format"].is_string()) schema_error(pointer_join(ptr, "format"), "format must be a string");
        const auto re = format_regex(s["format"].get<std::string>());
        if (!re) schema_error(pointer_join(ptr, "format"), "unsupported format '" + s["format"].get<std::string>() + "'");
        parse("format", *re, false);
    }
    const auto json_char = [this](const CharSet& set) {
        auto it = json_chars_.find(set);
        if (it == json_chars_.end()) it = json_chars_.emplace(set, json_char_rule(set, w_)).first;
        return it->second;
    };
    const std::string quote = "\"\\\"\"";
    if (regexes.empty()) return cat(quote, " ", json_char(CharSet::all()), quant(min, max), " ", quote);
    if (regexes.size() == 1) {
        // The lengths add nothing when every match of the regex already has an allowed length.
        int64_t rmin = INT64_MAX, rmax = 0;
        for (const auto& b : regexes[0].first) {
            const bool open = regexes[0].second && !(b.anchored_start && b.anchored_end);
            rmin = std::min(rmin, regex_min_length(*b.body));
            const int64_t m = open ? kUnbounded : regex_max_length(*b.body);
            rmax = rmax == kUnbounded || m == kUnbounded ? kUnbounded : std::max(rmax, m);
        }
        if ((rmin >= min && (max == kUnbounded || (rmax != kUnbounded && rmax <= max))) ||
            fold_lengths(regexes[0].first, regexes[0].second, min, max))
            return cat(quote, " ", w_.add("str", regex_expr(regexes[0].first, regexes[0].second, json_char)), " ", quote);
    }
    std::vector<Nfa> nfas;
    for (const auto& [branches, search] : regexes) nfas.push_back(regex_nfa(branches, search, max));
    const auto start = emit_intersection(nfas, min, max, json_char, w_, "str");
    if (!start) schema_error(ptr, "no string satisfies pattern, format and lengths together");
    return cat(quote, " ", *start, " ", quote);
}

std::string SchemaCompiler::integer_value(const Json& s, const std::string& ptr) {
    const auto lo = bound_of(s, ptr, false), hi = bound_of(s, ptr, true);
    if (!lo && !hi) return "(\"0\" | \"-\"? [1-9] [0-9]*)";
    std::optional<Decimal> ilo, ihi;
    if (lo) ilo = lo->exclusive ? add_int(floor_of(lo->value), 1) : ceil_of(lo->value);
    if (hi) ihi = hi->exclusive ? add_int(ceil_of(hi->value), -1) : floor_of(hi->value);
    const auto e = integer_range_expr(ilo, ihi);
    if (!e) schema_error(ptr, "no integer lies between the bounds");
    return w_.add("int", *e);
}

std::string SchemaCompiler::number_value(const Json& s, const std::string& ptr) {
    const auto lo = bound_of(s, ptr, false), hi = bound_of(s, ptr, true);
    if (!lo && !hi) return w_.add("number", "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?");
    const auto e = decimal_range_expr(lo, hi, w_, "num");
    if (!e) schema_error(ptr, "no number lies between the bounds");
    return w_.add("num", *e);
}

} // namespace rwd::grammar::detail

// JSON Schema to GBNF: keyword checks, $ref, anyOf/oneOf, enum/const, objects and arrays (see
// rewind/grammar/json_schema.h). Strings and numbers are in json_schema_scalars.cpp.
#include "rewind/grammar/json_schema.h"

#include <algorithm>

#include "json_chars.h"
#include "number_grammar.h"
#include "rewind/error.h"
#include "schema_compiler.h"

namespace rwd::grammar {
namespace detail {
namespace {

constexpr int kMaxDepth = 512;      // schema levels
constexpr int kMaxJsonDepth = 2048; // JSON nesting of the document (a few per schema level)

const std::set<std::string>& annotations() {
    static const std::set<std::string> k = {"title", "description", "$schema", "$id", "id", "default", "examples",
                                            "$comment", "readOnly", "writeOnly", "deprecated", "$defs", "definitions"};
    return k;
}
const std::set<std::string>& assertions() {
    static const std::set<std::string> k = {
        "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required", "additionalProperties",
        "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength",
        "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    return k;
}
const std::vector<std::string>& type_names() {
    static const std::vector<std::string> k = {"null", "boolean", "integer", "number", "string", "array", "object"};
    return k;
}

// The assertion keywords of `s` other than those in `allowed`.
std::vector<std::string> other_assertions(const Json& s, const std::set<std::string>& allowed) {
    std::vector<std::string> out;
    for (const auto& [k, v] : s.items())
        if (assertions().count(k) && !allowed.count(k)) out.push_back(k);
    return out;
}

std::string hint_of(const std::string& ptr) {
    const size_t slash = ptr.rfind('/');
    std::string h = slash == std::string::npos ? ptr : ptr.substr(slash + 1);
    if (h.empty() || (h[0] >= '0' && h[0] <= '9')) h = "v" + h;
    return h.size() > 24 ? h.substr(0, 24) : h;
}

std::string percent_decoded(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
            out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16)));
            i += 2;
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

// Marks a number kept as text (see number_text).
constexpr std::string_view kNumberMark = "\x01rewind-number:";

// The schema text with every number of more than 15 digits turned into a marked string, so that
// bounds and enum values keep all their digits (a double keeps about 16). Refuses (capacity)
// documents nested deeper than kMaxJsonDepth before they are parsed.
std::string mark_long_numbers(std::string_view text) {
    std::string out;
    bool in_string = false;
    int depth = 0;
    for (size_t i = 0; i < text.size();) {
        const char c = text[i];
        if (in_string) {
            out.push_back(c);
            if (c == '\\' && i + 1 < text.size()) out.push_back(text[++i]);
            else if (c == '"') in_string = false;
            ++i;
            continue;
        }
        if (c == '"') in_string = true;
        if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                throw Error(ErrorCode::capacity, "JSON Schema: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        } else if (c == ']' || c == '}') {
            --depth;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i, digits = 0;
            while (j < text.size() && std::string_view("+-.eE0123456789").find(text[j]) != std::string_view::npos)
                digits += (text[j++] >= '0' && text[j - 1] <= '9') ? 1 : 0;
            const std::string_view token = text.substr(i, j - i);
            if (digits > 15) out += cat("\"\\u0001", kNumberMark.substr(1), token, "\"");
            else out.append(token);
            i = j;
            continue;
        }
        out.push_back(c);
        ++i;
    }
    return out;
}

// The schema's text without its annotations: equal texts, equal languages. (The copy lives only
// here, not across the recursion into subschemas.)
std::string memo_key(const Json& s) {
    bool annotated = false;
    for (const auto& [k, v] : s.items()) annotated = annotated || annotations().count(k) > 0;
    if (!annotated) return s.dump();
    Json key = s;
    for (const auto& k : annotations()) key.erase(k);
    return key.dump();
}

// The JSON type of an instance ("integer" for integral numbers).
std::string type_of(const Json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (const auto t = number_text(v)) return parse_decimal(*t).is_integer() ? "integer" : "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
}

// JSON.stringify's spelling: compact, integers without fraction or exponent.
std::string canonical_json(const Json& v, const std::string& ptr, int depth) {
    if (depth > kMaxDepth) throw Error(ErrorCode::capacity, ptr + ": value nested deeper than 512 levels");
    if (const auto t = number_text(v)) {
        const Decimal d = parse_decimal(*t);
        if (d.is_integer()) return (d.neg ? "-" : "") + d.ip;
        return v.is_number() ? v.dump() : *t;
    }
    if (v.is_array()) {
        std::string s = "[";
        for (size_t i = 0; i < v.size(); ++i) s += cat(i ? "," : "", canonical_json(v[i], ptr, depth + 1));
        return s + "]";
    }
    if (v.is_object()) {
        std::string s = "{";
        bool first = true;
        for (const auto& [k, x] : v.items()) {
            s += cat(first ? "" : ",", Json(k).dump(), ":", canonical_json(x, ptr, depth + 1));
            first = false;
        }
        return s + "}";
    }
    return v.dump();
}

} // namespace

[[noreturn]] void schema_error(const std::string& ptr, const std::string& what) {
    throw Error(ErrorCode::argument, "JSON Schema at '" + (ptr.empty() ? std::string("#") : "#" + ptr) + "': " + what);
}

std::string pointer_join(const std::string& ptr, const std::string& key) {
    std::string k;
    for (char c : key) {
        if (c == '~') k += "~0";
        else if (c == '/') k += "~1";
        else k.push_back(c);
    }
    return ptr + "/" + k;
}

bool is_false_schema(const Json& s) { return s.is_boolean() && !s.get<bool>(); }

std::optional<std::string> number_text(const Json& v) {
    if (v.is_number()) return v.dump();
    if (v.is_string()) {
        const auto& s = v.get_ref<const std::string&>();
        if (s.rfind(kNumberMark, 0) == 0) return s.substr(kNumberMark.size());
    }
    return std::nullopt;
}

SchemaCompiler::SchemaCompiler(const Json& root, const JsonGrammarOptions& opts) : root_(root), opts_(opts) {
    w_.reserve("root");
    if (opts_.whitespace == JsonWhitespace::Free)
        ws_rule_ = w_.add("ws", "[ \\t\\n\\r]{0," + std::to_string(kMaxJsonWhitespace) + "}");
}

std::string SchemaCompiler::sep(const std::string& a, const std::string& b) const {
    if (a.empty()) return b;
    if (b.empty()) return a;
    return ws_rule_.empty() ? a + " " + b : a + " " + ws_rule_ + " " + b;
}

std::string SchemaCompiler::document(const std::string& value_rule) {
    w_.define("root", ws_rule_.empty() ? value_rule : ws_rule_ + " " + value_rule + " " + ws_rule_);
    return w_.text();
}

std::string SchemaCompiler::value(const Json& s, const std::string& ptr, int depth) {
    if (depth > kMaxDepth) throw Error(ErrorCode::capacity, "JSON Schema nested deeper than 512 levels at #" + ptr);
    if (s.is_boolean()) {
        if (s.get<bool>()) return any_value();
        schema_error(ptr, "the schema false admits no value here");
    }
    if (!s.is_object()) schema_error(ptr, "a schema must be an object or a boolean");
    bool any_assertion = false;
    for (const auto& [k, v] : s.items()) {
        if (assertions().count(k)) any_assertion = true;
        else if (!annotations().count(k)) schema_error(pointer_join(ptr, k), "unsupported keyword '" + k + "'");
    }
    if (!any_assertion) return any_value();
    const std::string text = memo_key(s);
    if (auto it = memo_.find(text); it != memo_.end()) return it->second;
    std::string rule;
    if (s.contains("allOf")) rule = all_of(s, ptr, depth);
    else if (s.contains("$ref")) rule = ref_value(s, ptr, depth);
    else if (s.contains("anyOf") && s.contains("oneOf")) schema_error(ptr, "anyOf together with oneOf is not supported");
    else if (s.contains("anyOf")) rule = alternatives(s, "anyOf", ptr, depth);
    else if (s.contains("oneOf")) rule = alternatives(s, "oneOf", ptr, depth);
    else rule = typed_value(s, ptr, depth);
    memo_.emplace(text, rule);
    return rule;
}

std::string SchemaCompiler::ref_value(const Json& s, const std::string& ptr, int depth) {
    const auto others = other_assertions(s, {"$ref"});
    if (!others.empty()) schema_error(ptr, "$ref together with '" + others[0] + "' is not supported");
    const std::string rptr = pointer_join(ptr, "$ref");
    if (!s["$ref"].is_string()) schema_error(rptr, "$ref must be a string");
    std::string target_ptr = s["$ref"].get<std::string>();
    std::set<std::string> seen;
    const Json* target = nullptr;
    for (;;) { // follow references to references, refusing cycles that never reach a schema
        if (target_ptr.empty() || target_ptr[0] != '#')
            schema_error(rptr, "only references inside the document ('#...') are supported: '" + target_ptr + "'");
        target_ptr = percent_decoded(target_ptr.substr(1));
        if (unguarded_.count(target_ptr))
            schema_error(rptr, "$ref cycle through '#" + target_ptr + "' that admits no text before recurring");
        if (auto it = refs_.find(target_ptr); it != refs_.end()) return it->second;
        if (!seen.insert(target_ptr).second) schema_error(rptr, "$ref cycle through '#" + target_ptr + "'");
        try {
            target = &root_.at(Json::json_pointer(target_ptr));
        } catch (const nlohmann::json::exception&) {
            schema_error(rptr, "$ref target '#" + target_ptr + "' not found");
        }
        if (!target->is_object() || !target->contains("$ref") || !other_assertions(*target, {"$ref"}).empty()) break;
        if (!(*target)["$ref"].is_string()) schema_error(target_ptr, "$ref must be a string");
        target_ptr = (*target)["$ref"].get<std::string>();
    }
    if (is_false_schema(*target)) schema_error(rptr, "$ref to the schema false admits no value");
    const std::string name = w_.reserve("ref-" + hint_of(target_ptr));
    refs_[target_ptr] = name;
    unguarded_.insert(target_ptr);
    w_.define(name, value(*target, target_ptr, depth + 1));
    unguarded_.erase(target_ptr);
    return name;
}

namespace {

// The types a schema's instances may have, when its keywords say so simply (nullopt: unknown).
std::optional<std::set<std::string>> types_of(const Json& s) {
    if (!s.is_object()) return std::nullopt;
    std::set<std::string> out;
    if (s.contains("const")) { out.insert(type_of(s["const"])); return out; }
    if (s.contains("enum") && s["enum"].is_array()) {
        for (const auto& v : s["enum"]) out.insert(type_of(v));
        return out;
    }
    if (!s.contains("type")) return std::nullopt;
    const Json& t = s["type"];
    if (t.is_string()) out.insert(t.get<std::string>());
    else if (t.is_array())
        for (const auto& x : t)
            if (x.is_string()) out.insert(x.get<std::string>());
    if (out.count("number")) out.insert("integer");
    return out;
}

std::optional<std::set<std::string>> values_of(const Json& s) {
    if (!s.is_object()) return std::nullopt;
    std::set<std::string> out;
    if (s.contains("const")) out.insert(canonical_json(s["const"], "", 0));
    else if (s.contains("enum") && s["enum"].is_array())
        for (const auto& v : s["enum"]) out.insert(canonical_json(v, "", 0));
    else return std::nullopt;
    return out;
}

bool disjoint(const std::set<std::string>& a, const std::set<std::string>& b) {
    for (const auto& x : a)
        if (b.count(x)) return false;
    return true;
}

// oneOf is compiled as anyOf, which is exact only when no value matches two branches; this
// accepts branches that differ in type or list disjoint enum/const values.
bool provably_disjoint(const Json& a, const Json& b) {
    const auto ta = types_of(a), tb = types_of(b);
    if (ta && tb && disjoint(*ta, *tb)) return true;
    const auto va = values_of(a), vb = values_of(b);
    return va && vb && disjoint(*va, *vb);
}

} // namespace

namespace {

// Keywords that read each other inside one schema object: a merge must not split them.
const std::vector<std::set<std::string>>& keyword_groups() {
    static const std::vector<std::set<std::string>> k = {
        {"properties", "additionalProperties"}, {"items", "prefixItems", "additionalItems"},
        {"minimum", "exclusiveMinimum"}, {"maximum", "exclusiveMaximum"}, {"enum", "const"}};
    return k;
}

// allOf(base, branch) as one schema, when that is exact: keywords on one side only (or equal on
// both), `type` intersected, no group of interacting keywords split between the two. nullopt
// when the types do not meet; rwd::Error naming the keyword otherwise.
std::optional<Json> merged(const Json& base, const Json& branch, const std::string& ptr) {
    Json out = branch;
    for (const auto& [k, v] : base.items()) {
        if (!assertions().count(k)) continue; // annotations and $defs stay where they were
        if (!out.contains(k)) { out[k] = v; continue; }
        if (out[k] == v) continue;
        if (k != "type") schema_error(ptr, "'" + k + "' both beside and inside a branch is not supported");
        const auto names = [](const Json& t) {
            std::set<std::string> n;
            if (t.is_string()) n.insert(t.get<std::string>());
            else for (const auto& x : t) if (x.is_string()) n.insert(x.get<std::string>());
            if (n.count("number")) n.insert("integer");
            return n;
        };
        const auto a = names(v), b = names(out[k]);
        Json both = Json::array();
        for (const auto& t : a)
            if (b.count(t) && !(t == "number" && !(a.count("number") && b.count("number")))) both.push_back(t);
        if (both.empty()) return std::nullopt;
        out[k] = both;
    }
    for (const auto& group : keyword_groups()) {
        bool in_base = false, in_branch = false;
        for (const auto& k : group) {
            in_base = in_base || (base.contains(k) && !(branch.contains(k) && branch[k] == base[k]));
            in_branch = in_branch || (branch.contains(k) && !(base.contains(k) && branch[k] == base[k]));
        }
        if (in_base && in_branch)
            schema_error(ptr, "'" + *group.begin() + "' and its related keywords split between a branch and its siblings");
    }
    return out;
}

} // namespace

// A branch with the sibling keywords of anyOf/oneOf (or what allOf gathered so far) merged in:
// their intersection; nullopt when it admits nothing. A branch that is a reference is read
// through it first, except when there is nothing to merge and `inline_refs` is false (a
// reference then stays one, so that recursion goes through its rule).
std::optional<Json> SchemaCompiler::branch_with(const Json& base, const Json& branch, const std::string& ptr,
                                                bool inline_refs) {
    if (is_false_schema(branch)) return std::nullopt;
    if (base.empty() && !inline_refs) return branch;
    const Json* b = &branch;
    std::set<std::string> seen;
    while (b->is_object() && b->contains("$ref") && other_assertions(*b, {"$ref"}).empty()) {
        if (!(*b)["$ref"].is_string()) schema_error(ptr, "$ref must be a string");
        const std::string r = (*b)["$ref"].get<std::string>();
        if (r.empty() || r[0] != '#') schema_error(ptr, "only references inside the document ('#...') are supported: '" + r + "'");
        if (!seen.insert(r).second) schema_error(ptr, "$ref cycle through '" + r + "'");
        try {
            b = &root_.at(Json::json_pointer(percent_decoded(r.substr(1))));
        } catch (const nlohmann::json::exception&) {
            schema_error(ptr, "$ref target '" + r + "' not found");
        }
    }
    if (is_false_schema(*b)) return std::nullopt;
    if (b->is_boolean()) return base;
    if (!b->is_object()) schema_error(ptr, "a schema must be an object or a boolean");
    return merged(base, *b, ptr);
}

// allOf: the schema and its branches merged into one (see branch_with), when that is exact.
std::string SchemaCompiler::all_of(const Json& s, const std::string& ptr, int depth) {
    const std::string kptr = pointer_join(ptr, "allOf");
    const Json& list = s["allOf"];
    if (!list.is_array() || list.empty()) schema_error(kptr, "allOf must be a non-empty array");
    Json acc = Json::object();
    for (const auto& [k, v] : s.items())
        if (k != "allOf" && assertions().count(k)) acc[k] = v;
    if (acc.contains("$ref")) schema_error(ptr, "allOf together with '$ref' is not supported");
    for (size_t i = 0; i < list.size(); ++i) {
        auto next = branch_with(acc, list[i], pointer_join(kptr, std::to_string(i)), true);
        if (!next) schema_error(kptr, "no value satisfies every branch");
        acc = std::move(*next);
    }
    if (acc.contains("allOf")) schema_error(kptr, "allOf nested inside allOf is not supported");
    return value(acc, ptr, depth + 1);
}

std::string SchemaCompiler::alternatives(const Json& s, const std::string& key, const std::string& ptr, int depth) {
    const std::string kptr = pointer_join(ptr, key);
    const Json& list = s[key];
    if (!list.is_array() || list.empty()) schema_error(kptr, key + " must be a non-empty array");
    Json base = Json::object();
    for (const auto& [k, v] : s.items())
        if (assertions().count(k) && k != key) base[k] = v;
    if (base.contains("$ref")) schema_error(ptr, key + " together with '$ref' is not supported");
    std::vector<Json> branches;
    std::vector<std::string> ptrs;
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string bptr = pointer_join(kptr, std::to_string(i));
        if (auto b = branch_with(base, list[i], bptr)) {
            branches.push_back(std::move(*b));
            ptrs.push_back(bptr);
        }
    }
    if (key == "oneOf")
        for (size_t i = 0; i < branches.size(); ++i)
            for (size_t j = 0; j < i; ++j)
                if (!provably_disjoint(branches[i], branches[j]))
                    schema_error(kptr, "branches #" + ptrs[j] + " and #" + ptrs[i] +
                                           " may both match a value; oneOf is supported when its branches differ "
                                           "in type or in enum/const values (use anyOf otherwise)");
    std::vector<std::string> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
        const std::string r = value(branches[i], ptrs[i], depth + 1);
        if (std::find(alts.begin(), alts.end(), r) == alts.end()) alts.push_back(r);
    }
    if (alts.empty()) schema_error(kptr, "no branch admits a value");
    std::string body;
    for (const auto& a : alts) body += cat(body.empty() ? "" : " | ", a);
    return w_.add(hint_of(ptr), body);
}

std::string SchemaCompiler::enum_value(const Json& s, const std::string& ptr, const std::set<std::string>& types) {
    const bool is_const = s.contains("const");
    if (is_const && s.contains("enum")) schema_error(ptr, "enum together with const is not supported");
    const auto others = other_assertions(s, {"type", "enum", "const"});
    if (!others.empty()) schema_error(ptr, "enum/const together with '" + others[0] + "' is not supported");
    const std::string kptr = pointer_join(ptr, is_const ? "const" : "enum");
    if (!is_const && !s["enum"].is_array()) schema_error(kptr, "enum must be an array");
    const Json values = is_const ? Json::array({s["const"]}) : s["enum"];
    std::vector<std::string> alts;
    for (const auto& v : values) {
        const std::string t = type_of(v);
        if (!types.count(t) && !(t == "integer" && types.count("number"))) continue;
        const std::string lit = gbnf_literal(canonical_json(v, kptr, 0));
        if (std::find(alts.begin(), alts.end(), lit) == alts.end()) alts.push_back(lit);
    }
    if (alts.empty()) schema_error(kptr, "no value is of an allowed type");
    std::string body;
    for (const auto& a : alts) body += cat(body.empty() ? "" : " | ", a);
    return w_.add(hint_of(ptr), body);
}

std::string SchemaCompiler::typed_value(const Json& s, const std::string& ptr, int depth) {
    std::set<std::string> types;
    if (s.contains("type")) {
        const Json& t = s["type"];
        const auto add = [&](const Json& x) {
            const auto& names = type_names();
            if (!x.is_string() || std::find(names.begin(), names.end(), x.get<std::string>()) == names.end())
                schema_error(pointer_join(ptr, "type"), "unknown type " + x.dump());
            types.insert(x.get<std::string>());
        };
        if (t.is_array()) for (const auto& x : t) add(x);
        else add(t);
        if (types.empty()) schema_error(pointer_join(ptr, "type"), "an empty type list admits no value");
    } else {
        types.insert(type_names().begin(), type_names().end());
    }
    if (s.contains("enum") || s.contains("const")) return enum_value(s, ptr, types);
    std::vector<std::string> alts;
    for (const auto& t : type_names()) {
        if (!types.count(t) || (t == "integer" && types.count("number"))) continue;
        if (t == "null") alts.push_back("\"null\"");
        else if (t == "boolean") alts.push_back("\"true\" | \"false\"");
        else if (t == "integer") alts.push_back(integer_value(s, ptr));
        else if (t == "number") alts.push_back(number_value(s, ptr));
        else if (t == "string") alts.push_back(string_value(s, ptr));
        else if (t == "array") alts.push_back(array_value(s, ptr, depth));
        else alts.push_back(object_value(s, ptr, depth));
    }
    std::string body;
    for (const auto& a : alts) body += cat(body.empty() ? "" : " | ", a);
    return w_.add(hint_of(ptr), body);
}

std::string SchemaCompiler::any_value() {
    if (!any_value_rule_.empty()) return any_value_rule_;
    any_value_rule_ = w_.reserve("value");
    const std::string member = cat(any_string(), wsp(), " \":\"", wsp(), " ", any_value_rule_);
    const std::string obj = w_.add("object", list_of("{", member, "}"));
    const std::string arr = w_.add("array", list_of("[", any_value_rule_, "]"));
    const std::string num = w_.add("number", "\"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?");
    w_.define(any_value_rule_, cat(obj, " | ", arr, " | ", any_string(), " | ", num, " | \"true\" | \"false\" | \"null\""));
    return any_value_rule_;
}

std::string SchemaCompiler::list_of(const std::string& open, const std::string& item, const std::string& close) const {
    return cat("\"", open, "\"", wsp(), " (", item, wsp(), " (\",\"", wsp(), " ", item, wsp(), ")*)? \"", close, "\"");
}

std::string SchemaCompiler::any_string() {
    return w_.add("string", cat("\"\\\"\" ", json_char_rule(CharSet::all(), w_), "* \"\\\"\""));
}

} // namespace detail

std::string json_schema_to_gbnf(std::string_view schema_json, const JsonGrammarOptions& opts) {
    detail::Json doc;
    try {
        doc = detail::Json::parse(detail::mark_long_numbers(schema_json));
    } catch (const nlohmann::json::exception& e) {
        throw Error(ErrorCode::format, std::string("JSON Schema: not JSON: ") + e.what());
    }
    detail::SchemaCompiler c(doc, opts);
    const std::string v = c.value(doc, "");
    return c.document(v);
}

std::string any_json_gbnf(const JsonGrammarOptions& opts) {
    const detail::Json doc = true;
    detail::SchemaCompiler c(doc, opts);
    const std::string v = c.any_value();
    return c.document(v);
}

} // namespace rwd::grammar

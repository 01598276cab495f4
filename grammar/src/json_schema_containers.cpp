// JSON Schema objects and arrays: properties in declared order with optional ones skippable,
// additional properties after them, and arrays with prefix items and item counts.
#include <algorithm>
#include <utility>

#include "json_chars.h"
#include "rewind/error.h"
#include "rewind/grammar/utf8.h"
#include "schema_compiler.h"

namespace rwd::grammar::detail {
namespace {

std::string quantifier(int64_t lo, std::optional<int64_t> hi) {
    if (!hi) return lo == 0 ? "*" : lo == 1 ? "+" : cat("{", std::to_string(lo), ",}");
    if (lo == 0 && *hi == 1) return "?";
    if (lo == *hi) return cat("{", std::to_string(lo), "}");
    return cat("{", std::to_string(lo), ",", std::to_string(*hi), "}");
}

int64_t count_keyword(const Json& s, const std::string& key, const std::string& ptr) {
    const Json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != static_cast<double>(static_cast<int64_t>(v.get<double>())))
        schema_error(pointer_join(ptr, key), key + " must be a non-negative integer");
    if (v.get<double>() > 1e15) schema_error(pointer_join(ptr, key), key + " too large");
    return static_cast<int64_t>(v.get<double>());
}

std::vector<uint32_t> code_points(const std::string& s) {
    std::vector<uint32_t> out;
    for (size_t i = 0; i < s.size();) {
        const Utf8Step st = decode_utf8(std::string_view(s).substr(i));
        out.push_back(st.code_point);
        i += st.length ? st.length : 1;
    }
    return out;
}

struct Property {
    std::string name;
    const Json* schema;
    bool required;
};

} // namespace

std::string SchemaCompiler::object_value(const Json& s, const std::string& ptr, int depth) {
    const auto outer = std::exchange(unguarded_, {}); // "{" comes first: recursion inside is guarded
    const std::string members = object_members(s, ptr, depth);
    unguarded_ = outer;
    return w_.add("obj-" + std::to_string(depth), cat("\"{\"", wsp(), " ", members, " \"}\""));
}

// Members after "{" ws: T(i, e) is the members from property i on, e saying whether one was
// written already (so a comma comes first); each member is followed by whitespace.
std::string SchemaCompiler::object_members(const Json& s, const std::string& ptr, int depth) {
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) schema_error(pointer_join(ptr, "properties"), "properties must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
        if (!s["required"].is_array()) schema_error(pointer_join(ptr, "required"), "required must be an array");
        for (const auto& r : s["required"]) {
            if (!r.is_string()) schema_error(pointer_join(ptr, "required"), "required must list strings");
            required.insert(r.get<std::string>());
        }
    }
    std::vector<Property> list;
    std::vector<std::string> declared;
    for (const auto& [name, sub] : props.items()) {
        declared.push_back(name);
        if (is_false_schema(sub)) {
            if (required.count(name)) schema_error(pointer_join(pointer_join(ptr, "properties"), name), "a required property with schema false");
            continue;
        }
        list.push_back({name, &sub, required.count(name) > 0});
    }
    // A required name that properties does not declare: a member whose value follows
    // additionalProperties, written after the declared ones (in the order `required` lists it).
    const Json any_schema = true;
    const Json& addl = s.contains("additionalProperties") ? s["additionalProperties"] : any_schema;
    for (const auto& r : s.contains("required") ? s["required"] : Json::array()) {
        const std::string name = r.get<std::string>();
        if (props.contains(name) || std::find(declared.begin(), declared.end(), name) != declared.end()) continue;
        if (is_false_schema(addl))
            schema_error(pointer_join(ptr, "required"), "required property '" + name + "' is neither declared nor allowed by additionalProperties");
        declared.push_back(name);
        list.push_back({name, &addl, true});
    }
    std::string tail_value; // the additional properties' values, if any are allowed
    const std::string aptr = pointer_join(ptr, "additionalProperties");
    if (!s.contains("additionalProperties")) tail_value = any_value();
    else if (!is_false_schema(s["additionalProperties"])) tail_value = value(s["additionalProperties"], aptr, depth + 1);
    std::string tail[2] = {"\"\"", "\"\""};
    if (!tail_value.empty()) {
        const std::string member = cat(additional_key(declared, aptr), wsp(), " \":\"", wsp(), " ", tail_value, wsp());
        const std::string more = cat("(\",\"", wsp(), " ", member, ")*");
        tail[1] = w_.add("more-" + std::to_string(depth), more);
        tail[0] = w_.add("members-" + std::to_string(depth), cat("(", member, " ", more, ")?"));
    }
    std::string next[2] = {tail[0], tail[1]};
    for (size_t i = list.size(); i-- > 0;) {
        const auto& p = list[i];
        const std::string pptr = pointer_join(pointer_join(ptr, "properties"), p.name);
        const std::string member = cat(gbnf_literal(Json(p.name).dump()), wsp(), " \":\"", wsp(), " ",
                                       value(*p.schema, pptr, depth + 1), wsp());
        std::string cur[2];
        for (int e = 0; e < 2; ++e) {
            std::string body = cat(e ? cat("\",\"", wsp(), " ") : "", member, next[1] == "\"\"" ? "" : " " + next[1]);
            if (!p.required) body = cat("(", body, ") | ", next[e]);
            cur[e] = w_.add("members-" + std::to_string(depth), body);
        }
        next[0] = cur[0];
        next[1] = cur[1];
    }
    return next[0] == "\"\"" ? "" : next[0];
}

// Keys of additional properties: any string but the declared names, each character spelled
// one way (JSON.stringify's), so that a declared name cannot come back in another spelling.
std::string SchemaCompiler::additional_key(const std::vector<std::string>& declared, const std::string& ptr) {
    (void)ptr;
    struct Node {
        std::map<uint32_t, size_t> kids;
        bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const auto& name : declared) {
        size_t n = 0;
        for (uint32_t cp : code_points(name)) {
            auto it = trie[n].kids.find(cp);
            if (it == trie[n].kids.end()) {
                trie.emplace_back();
                it = trie[n].kids.emplace(cp, trie.size() - 1).first;
            }
            n = it->second;
        }
        trie[n].terminal = true;
    }
    const std::string free = w_.add("key-rest", cat(canonical_char(CharSet::all()), "*"));
    std::vector<std::string> names(trie.size());
    for (auto& n : names) n = w_.reserve("key");
    for (size_t i = 0; i < trie.size(); ++i) {
        std::string body;
        CharSet others = CharSet::all();
        for (const auto& [cp, kid] : trie[i].kids) {
            body += cat(body.empty() ? "" : " | ", canonical_char(CharSet::of(cp, cp)), " ", names[kid]);
            others = others.minus(CharSet::of(cp, cp));
        }
        body += cat(body.empty() ? "" : " | ", canonical_char(others), " ", free);
        if (!trie[i].terminal) body += " | \"\"";
        w_.define(names[i], body);
    }
    return w_.add("key-string", cat("\"\\\"\" ", names[0], " \"\\\"\""));
}

std::string SchemaCompiler::array_value(const Json& s, const std::string& ptr, int depth) {
    const auto outer = std::exchange(unguarded_, {}); // "[" comes first: recursion inside is guarded
    std::string out = array_items(s, ptr, depth);
    unguarded_ = outer;
    return out;
}

std::string SchemaCompiler::array_items(const Json& s, const std::string& ptr, int depth) {
    std::vector<const Json*> prefix;
    const Json any = true;
    const Json* rest = &any;
    const auto list_of_schemas = [&](const std::string& key) {
        if (!s[key].is_array()) schema_error(pointer_join(ptr, key), key + " must be an array");
        for (const auto& x : s[key]) prefix.push_back(&x);
    };
    if (s.contains("items") && s["items"].is_array()) {
        if (s.contains("prefixItems")) schema_error(ptr, "prefixItems together with an items array");
        list_of_schemas("items");
        if (s.contains("additionalItems")) rest = &s["additionalItems"];
    } else {
        if (s.contains("prefixItems")) list_of_schemas("prefixItems");
        if (s.contains("items")) rest = &s["items"];
    }
    if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>()))
        schema_error(pointer_join(ptr, "uniqueItems"), "uniqueItems: true is not supported");
    const int64_t min = s.contains("minItems") ? count_keyword(s, "minItems", ptr) : 0;
    std::optional<int64_t> max;
    if (s.contains("maxItems")) max = count_keyword(s, "maxItems", ptr);
    for (size_t j = 0; j < prefix.size(); ++j)
        if (is_false_schema(*prefix[j])) { max = std::min<int64_t>(max.value_or(INT64_MAX), static_cast<int64_t>(j)); break; }
    if (is_false_schema(*rest)) max = std::min<int64_t>(max.value_or(INT64_MAX), static_cast<int64_t>(prefix.size()));
    if (max && min > *max) schema_error(ptr, "no array satisfies the item counts");
    const auto k = static_cast<int64_t>(prefix.size());
    // E(j): the elements from position j on, one being there; built from the last position back.
    std::string tail;
    if (!max || *max > k) {
        const bool tuple = s.contains("items") && s["items"].is_array();
        const std::string item = value(*rest, pointer_join(ptr, tuple ? "additionalItems" : "items"), depth + 1);
        const int64_t lo = std::max<int64_t>(0, min - k - 1);
        std::optional<int64_t> hi;
        if (max) hi = *max - k - 1;
        tail = cat(item, wsp());
        if (!hi || *hi > 0) tail += cat(" (\",\"", wsp(), " ", item, wsp(), ")", quantifier(lo, hi));
    }
    std::string e = tail;
    for (int64_t j = std::min<int64_t>(k, max.value_or(INT64_MAX)) - 1; j >= 0; --j) {
        const std::string key = s.contains("prefixItems") ? "prefixItems" : "items";
        const std::string item = value(*prefix[static_cast<size_t>(j)], pointer_join(pointer_join(ptr, key), std::to_string(j)), depth + 1);
        std::string body = cat(item, wsp());
        if (!e.empty()) {
            const std::string more = cat("\",\"", wsp(), " ", w_.add("items-" + std::to_string(depth), e));
            body += j + 1 < min ? cat(" ", more) : cat(" (", more, ")?");
        }
        e = body;
    }
    std::string list;
    if (!e.empty() && (!max || *max > 0)) list = min >= 1 ? cat(" ", w_.add("items-" + std::to_string(depth), e))
                                                          : cat(" (", w_.add("items-" + std::to_string(depth), e), ")?");
    return w_.add("arr-" + std::to_string(depth), cat("\"[\"", wsp(), list, " \"]\""));
}

} // namespace rwd::grammar::detail

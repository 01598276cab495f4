// JSON Schema to GBNF: languages checked through the GBNF-as-regex helper (exhaustively over
// ranges for the digit grammars, every subset and order for optional properties, every short
// string for pattern and length intersections), and refusals naming keyword and JSON pointer.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "gbnf_regex_util.h"
#include "rewind/error.h"
#include "rewind/grammar/json_schema.h"

namespace {

using rwd::grammar::json_schema_to_gbnf;
using rwd::grammar::JsonGrammarOptions;
using rwd::grammar::JsonWhitespace;

rwd::test::GbnfRegex compile(const std::string& schema, JsonWhitespace ws = JsonWhitespace::Compact) {
    return rwd::test::GbnfRegex(json_schema_to_gbnf(schema, JsonGrammarOptions{ws}));
}

// The error json_schema_to_gbnf throws for `schema` (fails the test when there is none).
rwd::Error error_of(const std::string& schema) {
    try {
        json_schema_to_gbnf(schema);
    } catch (const rwd::Error& e) {
        return e;
    }
    ADD_FAILURE() << schema << " was accepted";
    return rwd::Error("none");
}

TEST(JsonSchema, IntegerBoundsAreExactDigitGrammars) {
    struct Range {
        const char* schema;
        long lo, hi; // inclusive; LONG_MIN / LONG_MAX: unbounded
    };
    const std::vector<Range> ranges = {
        {R"({"type":"integer","minimum":1,"maximum":500})", 1, 500},
        {R"({"type":"integer","minimum":-13,"maximum":127})", -13, 127},
        {R"({"type":"integer","minimum":-1000,"maximum":-7})", -1000, -7},
        {R"({"type":"integer","exclusiveMinimum":9,"exclusiveMaximum":101})", 10, 100},
        {R"({"type":"integer","minimum":2.5,"maximum":19.5})", 3, 19},
        {R"({"type":"integer","minimum":95})", 95, LONG_MAX},
        {R"({"type":"integer","maximum":-95})", LONG_MIN, -95},
        {R"({"type":"integer","minimum":0,"maximum":0})", 0, 0},
        {R"({"type":"integer","minimum":5,"exclusiveMinimum":true})", 6, LONG_MAX}, // draft 4
        {R"({"type":"integer"})", LONG_MIN, LONG_MAX},
    };
    for (const auto& r : ranges) {
        const auto g = compile(r.schema);
        for (long v = -1500; v <= 1500; ++v)
            ASSERT_EQ(g.accepts(std::to_string(v)), v >= r.lo && v <= r.hi) << r.schema << " on " << v;
        // No digit-count limit on an unbounded side; JSON.stringify's spelling only.
        EXPECT_EQ(g.accepts("123456789012345678901234567890"), r.hi == LONG_MAX) << r.schema;
        EXPECT_EQ(g.accepts("-123456789012345678901234567890"), r.lo == LONG_MIN) << r.schema;
        EXPECT_FALSE(g.accepts("007")) << r.schema;
        EXPECT_FALSE(g.accepts("-0")) << r.schema;
        EXPECT_FALSE(g.accepts("5.0")) << r.schema;
    }
}

TEST(JsonSchema, HugeIntegerBoundsKeepEveryDigit) {
    const auto g = compile(R"({"type":"integer","minimum":123456789012345678901234567890})");
    EXPECT_TRUE(g.accepts("123456789012345678901234567890"));
    EXPECT_TRUE(g.accepts("123456789012345678901234567891"));
    EXPECT_TRUE(g.accepts("1000000000000000000000000000000"));
    EXPECT_FALSE(g.accepts("123456789012345678901234567889"));
    EXPECT_FALSE(g.accepts("99999999999999999999999999999"));
}

TEST(JsonSchema, NumberBoundsInFixedNotation) {
    struct Range {
        const char* schema;
        double lo, hi;
        bool lo_excl, hi_excl;
    };
    const std::vector<Range> ranges = {
        {R"({"type":"number","minimum":-2.5,"maximum":3.25})", -2.5, 3.25, false, false},
        {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", 0, 1, true, true},
        {R"({"type":"number","minimum":10.05})", 10.05, 1e300, false, false},
        {R"({"type":"number","maximum":-0.5})", -1e300, -0.5, false, false},
        {R"({"type":"number","minimum":7,"exclusiveMaximum":12})", 7, 12, false, true},
    };
    for (const auto& r : ranges) {
        const auto g = compile(r.schema);
        for (int i = -1500; i <= 1500; ++i) {
            for (const int scale : {1, 4, 100}) {
                const double v = static_cast<double>(i) / scale;
                char text[32];
                std::snprintf(text, sizeof text, scale == 100 ? "%.2f" : "%g", v);
                const double x = std::strtod(text, nullptr);
                if (std::string(text) == "-0" || std::string(text) == "-0.00") continue;
                const bool in = (r.lo_excl ? x > r.lo : x >= r.lo) && (r.hi_excl ? x < r.hi : x <= r.hi);
                ASSERT_EQ(g.accepts(text), in) << r.schema << " on " << text;
            }
        }
    }
    const auto g = compile(R"({"type":"number","minimum":10.05})");
    EXPECT_TRUE(g.accepts("10.0500000000000000001"));
    EXPECT_FALSE(g.accepts("10.0499999999999999999"));
    EXPECT_TRUE(g.accepts("99999999999999999999999.5"));
    // Without bounds every JSON spelling of a number.
    const auto any = compile(R"({"type":"number"})");
    for (const char* t : {"0", "-0", "1.5e10", "2E-3", "-12.0", "1e+2"}) EXPECT_TRUE(any.accepts(t)) << t;
    for (const char* t : {"01", "1.", ".5", "+1", "1e"}) EXPECT_FALSE(any.accepts(t)) << t;
}

TEST(JsonSchema, OptionalPropertiesInDeclaredOrder) {
    const auto g = compile(R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},
        "c":{"const":1}},"required":["b"],"additionalProperties":false})");
    const std::vector<std::string> members = {"\"a\":true", "\"b\":null", "\"c\":1"};
    // Every subset, in every order: accepted iff b is there and the order is a, b, c.
    std::vector<int> idx = {0, 1, 2};
    for (int mask = 0; mask < 8; ++mask) {
        std::vector<int> chosen;
        for (int i = 0; i < 3; ++i)
            if (mask & (1 << i)) chosen.push_back(i);
        std::sort(chosen.begin(), chosen.end());
        do {
            std::string text = "{";
            for (size_t k = 0; k < chosen.size(); ++k) text += (k ? "," : "") + members[static_cast<size_t>(chosen[k])];
            text += "}";
            const bool sorted = std::is_sorted(chosen.begin(), chosen.end());
            EXPECT_EQ(g.accepts(text), sorted && (mask & 2)) << text;
        } while (std::next_permutation(chosen.begin(), chosen.end()));
    }
    EXPECT_FALSE(g.accepts("{\"b\":null,\"d\":1}"));
}

TEST(JsonSchema, AdditionalPropertiesAfterDeclaredOnes) {
    const auto g = compile(R"({"type":"object","properties":{"ab":{"type":"null"}},"additionalProperties":{"type":"boolean"}})");
    EXPECT_TRUE(g.accepts("{}"));
    EXPECT_TRUE(g.accepts("{\"ab\":null,\"x\":true,\"a\":false,\"abc\":true}"));
    EXPECT_TRUE(g.accepts("{\"x\":true}"));
    EXPECT_FALSE(g.accepts("{\"ab\":true}"));      // a declared key never takes the additional schema
    EXPECT_FALSE(g.accepts("{\"x\":null}"));
    EXPECT_FALSE(g.accepts("{\"x\":true,\"ab\":null}"));
}

TEST(JsonSchema, RequiredNamesOutsideProperties) {
    const auto g = compile(R"({"type":"object","properties":{"a":{"type":"null"}},"required":["b"],
        "additionalProperties":{"type":"boolean"}})");
    EXPECT_TRUE(g.accepts("{\"b\":true}"));
    EXPECT_TRUE(g.accepts("{\"a\":null,\"b\":false,\"c\":true}"));
    EXPECT_FALSE(g.accepts("{\"a\":null}"));
    EXPECT_FALSE(g.accepts("{\"b\":null}"));
    EXPECT_FALSE(g.accepts("{\"b\":true,\"b\":true}"));
}

TEST(JsonSchema, ArraysWithPrefixItemsAndCounts) {
    const auto g = compile(R"({"type":"array","prefixItems":[{"type":"null"},{"type":"boolean"}],
        "items":{"const":0},"minItems":1,"maxItems":4})");
    for (const char* t : {"[null]", "[null,true]", "[null,false,0]", "[null,true,0,0]"}) EXPECT_TRUE(g.accepts(t)) << t;
    for (const char* t : {"[]", "[true]", "[null,0]", "[null,true,0,0,0]", "[null,true,1]"}) EXPECT_FALSE(g.accepts(t)) << t;
    const auto d4 = compile(R"({"type":"array","items":[{"type":"null"}],"additionalItems":false})");
    EXPECT_TRUE(d4.accepts("[null]"));
    EXPECT_TRUE(d4.accepts("[]"));
    EXPECT_FALSE(d4.accepts("[null,null]"));
}

TEST(JsonSchema, PatternWithLengthsIsTheIntersection) {
    struct Case {
        const char* schema;
        const char* pattern; // std::regex search
        size_t min, max;
    };
    const std::vector<Case> cases = {
        {R"({"type":"string","pattern":"^[ab]+$","minLength":2,"maxLength":4})", "^[ab]+$", 2, 4},
        {R"({"type":"string","pattern":"ba","maxLength":4})", "ba", 0, 4},
        {R"({"type":"string","pattern":"^(ab)*$","minLength":3,"maxLength":7})", "^(ab)*$", 3, 7},
        {R"({"type":"string","pattern":"a{2}|c","minLength":1,"maxLength":3})", "a{2}|c", 1, 3},
        {R"({"type":"string","pattern":"^.{0,1000000}$","maxLength":2})", "^.*$", 0, 2},
        {R"({"type":"string","minLength":2,"maxLength":3})", "", 2, 3},
    };
    std::vector<std::string> texts{""};
    for (size_t n = 0; texts.size() < 2000; ++n)
        for (char c : std::string("abc")) texts.push_back(texts[n] + c);
    for (const auto& c : cases) {
        const auto g = compile(c.schema);
        const std::regex re(c.pattern);
        for (const auto& t : texts) {
            const bool in = std::regex_search(t, re) && t.size() >= c.min && t.size() <= c.max;
            ASSERT_EQ(g.accepts("\"" + t + "\""), in) << c.schema << " on " << t;
        }
    }
    // Escaped spellings of a character count once.
    const auto g = compile(R"({"type":"string","maxLength":1})");
    EXPECT_TRUE(g.accepts("\"\\u0041\""));
    EXPECT_TRUE(g.accepts("\"\\n\""));
    EXPECT_FALSE(g.accepts("\"\\u00411\""));
    // Above U+FFFF: a surrogate pair is one character; a lone or reversed half is no character.
    EXPECT_TRUE(g.accepts("\"\\uD83D\\uDE00\""));
    EXPECT_TRUE(g.accepts("\"\\ud83d\\ude00\""));
    EXPECT_FALSE(g.accepts("\"\\uD83D\""));
    EXPECT_FALSE(g.accepts("\"\\uDE00\\uD83D\""));
    const auto emoji = compile(R"({"type":"string","pattern":"^[\\u{1F600}-\\u{1F64F}]$"})");
    EXPECT_TRUE(emoji.accepts("\"\\ud83d\\ude00\""));
    EXPECT_TRUE(emoji.accepts("\"\\uD83D\\uDE4F\""));
    EXPECT_FALSE(emoji.accepts("\"\\ud83d\\ude50\""));
    EXPECT_FALSE(emoji.accepts("\"\\ud83d\\uddff\""));
}

TEST(JsonSchema, Formats) {
    const auto date = compile(R"({"type":"string","format":"date"})");
    for (const char* t : {"2024-02-29", "2000-02-29", "2023-12-31", "0000-02-29", "2023-04-30"})
        EXPECT_TRUE(date.accepts(std::string("\"") + t + "\"")) << t;
    for (const char* t : {"2023-02-29", "1900-02-29", "2023-04-31", "2023-13-01", "2023-00-10", "2023-1-01"})
        EXPECT_FALSE(date.accepts(std::string("\"") + t + "\"")) << t;
    const auto dt = compile(R"({"type":"string","format":"date-time"})");
    EXPECT_TRUE(dt.accepts("\"2024-01-15T10:20:30.25+05:30\""));
    EXPECT_FALSE(dt.accepts("\"2024-01-15T24:20:30Z\""));
    const auto uuid = compile(R"({"type":"string","format":"uuid"})");
    EXPECT_TRUE(uuid.accepts("\"123e4567-e89b-12d3-a456-426614174000\""));
    EXPECT_FALSE(uuid.accepts("\"123e4567e89b12d3a456426614174000\""));
    const auto email = compile(R"({"type":"string","format":"email","maxLength":8})");
    EXPECT_TRUE(email.accepts("\"a@b.com\""));
    EXPECT_FALSE(email.accepts("\"ab@cd.com\""));
    EXPECT_FALSE(email.accepts("\"a@b\""));
}

TEST(JsonSchema, EnumConstTypesAndAnyOf) {
    const auto g = compile(R"({"anyOf":[{"enum":["x\"y",1.0,[1,{"k":null}]]},{"type":["null","boolean"]}]})");
    for (const char* t : {"\"x\\\"y\"", "1", "[1,{\"k\":null}]", "null", "true"}) EXPECT_TRUE(g.accepts(t)) << t;
    for (const char* t : {"1.0", "\"x\"", "2"}) EXPECT_FALSE(g.accepts(t)) << t;
    const auto typed = compile(R"({"type":"string","enum":["a",1,"b"]})");
    EXPECT_TRUE(typed.accepts("\"a\""));
    EXPECT_FALSE(typed.accepts("1"));
    // Sibling keywords hold in every branch (their intersection).
    const auto both = compile(R"({"type":"integer","anyOf":[{"minimum":10},{"maximum":-10},{"type":"string"}]})");
    for (int v = -30; v <= 30; ++v) EXPECT_EQ(both.accepts(std::to_string(v)), v >= 10 || v <= -10) << v;
    EXPECT_FALSE(both.accepts("\"a\""));
    const auto refd = compile(R"({"$defs":{"s":{"type":"string"}},"maxLength":1,"oneOf":[{"$ref":"#/$defs/s"},{"type":"null"}]})");
    EXPECT_TRUE(refd.accepts("\"a\""));
    EXPECT_FALSE(refd.accepts("\"ab\""));
    EXPECT_TRUE(refd.accepts("null"));
    const auto one = compile(R"({"oneOf":[{"type":"string","maxLength":1},{"type":"integer"}]})");
    EXPECT_TRUE(one.accepts("\"a\""));
    EXPECT_TRUE(one.accepts("7"));
}

TEST(JsonSchema, AllOfMergesItsBranches) {
    const auto g = compile(R"({"$defs":{"named":{"type":"object","properties":{"name":{"type":"string","maxLength":2}},
        "additionalProperties":false}},"allOf":[{"$ref":"#/$defs/named"},{"type":["object","null"]},true,
        {"required":["name"],"description":"x"}]})");
    EXPECT_TRUE(g.accepts("{\"name\":\"ab\"}"));
    EXPECT_FALSE(g.accepts("{\"name\":\"abc\"}"));
    EXPECT_FALSE(g.accepts("{\"name\":\"ab\",\"x\":1}"));
    EXPECT_FALSE(g.accepts("null"));
    EXPECT_FALSE(g.accepts("{}"));
}

TEST(JsonSchema, RefsAndDefinitions) {
    const auto g = compile(R"({"$defs":{"b":{"type":"boolean"},"l":{"$ref":"#/definitions/x"}},
        "definitions":{"x":{"type":"array","items":{"$ref":"#/$defs/b"},"maxItems":2}},
        "type":"object","properties":{"v":{"$ref":"#/$defs/l"}},"required":["v"],"additionalProperties":false})");
    EXPECT_TRUE(g.accepts("{\"v\":[true,false]}"));
    EXPECT_FALSE(g.accepts("{\"v\":[true,false,true]}"));
    // Recursion: a tree of any depth (the helper cannot expand it, so only the text is checked).
    const std::string tree = json_schema_to_gbnf(R"({"$defs":{"t":{"type":"object","properties":{"kids":{"type":"array",
        "items":{"$ref":"#/$defs/t"}}},"additionalProperties":false}},"$ref":"#/$defs/t"})");
    EXPECT_NE(tree.find("ref-t ::= "), std::string::npos) << tree;
}

TEST(JsonSchema, FreeWhitespaceInBoundedRuns) {
    const std::string schema =
        R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"null"}}},"additionalProperties":false})";
    const auto g = compile(schema, JsonWhitespace::Free);
    EXPECT_TRUE(g.accepts(" {\n  \"a\" : [ null ,\tnull ]\r\n} "));
    EXPECT_TRUE(g.accepts("{\"a\":[]}"));
    const std::string run(rwd::grammar::kMaxJsonWhitespace, ' ');
    EXPECT_TRUE(g.accepts("{" + run + "}"));
    EXPECT_FALSE(g.accepts("{" + run + " }"));
    EXPECT_FALSE(compile(schema).accepts("{ }"));
}

TEST(JsonSchema, TrueAndEmptySchemaMeanAnyValue) {
    const std::string any = rwd::grammar::any_json_gbnf();
    for (const char* s : {"{}", "true", R"({"title":"x","description":"y","$schema":"z","default":1,"examples":[]})"}) {
        const std::string g = json_schema_to_gbnf(s);
        for (const char* part : {"object", "array", "string", "number", "\"null\""})
            EXPECT_NE(g.find(part), std::string::npos) << s << "\n" << g;
    }
}

TEST(JsonSchema, RefusalsNameKeywordAndPointer) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"type":"object","properties":{"x":{"minProperties":1}}})", "#/properties/x/minProperties"},
        {R"({"type":"object","properties":{"x":{"minProperties":1}}})", "unsupported keyword 'minProperties'"},
        {R"({"allOf":[{"minimum":1},{"minimum":2}]})", "'minimum' both beside and inside"},
        {R"({"allOf":[{"type":"string"},{"type":"null"}]})", "no value satisfies every branch"},
        {R"({"allOf":[{"properties":{"a":{}}},{"additionalProperties":false}]})", "split between"},
        {R"({"type":"string","format":"hostname"})", "unsupported format 'hostname'"},
        {R"({"type":"integer","multipleOf":2})", "'multipleOf'"},
        {R"({"type":"array","uniqueItems":true})", "#/uniqueItems"},
        {R"({"$ref":"http://example.com/s.json"})", "only references inside the document"},
        {R"({"$ref":"#/$defs/missing"})", "not found"},
        {R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", "$ref cycle"},
        {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", "may both match"},
        {R"({"anyOf":[{"$ref":"#"},{"type":"null"}]})", "admits no text before recurring"},
        {R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"}]},"b":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})",
         "admits no text before recurring"},
        {R"j({"type":"string","pattern":"(?=a)"})j", "#/pattern"},
        {R"j({"type":"string","pattern":"(?=a)"})j", "lookahead"},
        {R"({"type":"integer","minimum":5,"maximum":4})", "no integer"},
        {R"({"type":"string","minLength":3,"maxLength":2})", "minLength"},
        {R"({"type":"string","pattern":"^a+$","maxLength":0,"minLength":0})", "no string"},
        {R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false})", "'b'"},
        {R"({"type":"strin"})", "unknown type"},
        {"false", "admits no value"},
        {R"({"properties":{"a":{}},"anyOf":[{"additionalProperties":false}]})", "split between a branch"},
        {R"({"minimum":1,"anyOf":[{"minimum":2}]})", "'minimum' both beside and inside"},
    };
    for (const auto& [schema, expected] : cases) {
        const rwd::Error e = error_of(schema);
        EXPECT_EQ(e.code(), rwd::ErrorCode::argument) << schema;
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << schema << ": " << e.what();
    }
    EXPECT_EQ(error_of("{\"type\":").code(), rwd::ErrorCode::format);
    EXPECT_EQ(error_of("[1,2]").code(), rwd::ErrorCode::argument);
}

TEST(JsonSchema, HostileInputsCostBoundedWork) {
    std::string deep;
    for (int i = 0; i < 5000; ++i) deep += R"({"type":"array","items":)";
    deep += "{}";
    for (int i = 0; i < 5000; ++i) deep += "}";
    EXPECT_EQ(error_of(deep).code(), rwd::ErrorCode::capacity);
    // A huge count under a length bound is cut to the bound; without one it stays a count.
    EXPECT_NO_THROW(json_schema_to_gbnf(R"({"type":"string","pattern":"^a{0,1000000}$","maxLength":5})"));
    EXPECT_LT(json_schema_to_gbnf(R"({"type":"string","pattern":"^a{0,1000000}$"})").size(), 2000u);
    // A repetition of one set takes the lengths as its count; other shapes need the automaton,
    // which has a state limit.
    EXPECT_NE(json_schema_to_gbnf(R"({"type":"string","pattern":"^a{0,1000000}$","minLength":3})").find("{3,1000000}"),
              std::string::npos);
    EXPECT_EQ(error_of(R"({"type":"string","pattern":"^(a|bc){0,1000000}$","minLength":3})").code(), rwd::ErrorCode::capacity);
}

} // namespace

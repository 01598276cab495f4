// Regex to GBNF: the whole-match language of each pattern equals std::regex's (ECMAScript) on
// ASCII texts, through the GBNF-as-regex helper; refused constructs name their byte offset.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "gbnf_regex_util.h"
#include "rewind/error.h"
#include "rewind/grammar/regex.h"

namespace {

using rwd::grammar::regex_to_gbnf;

// Every string over `alphabet` up to `max_len` characters.
std::vector<std::string> strings_over(const std::string& alphabet, size_t max_len) {
    std::vector<std::string> out{""};
    for (size_t begin = 0, len = 1; len <= max_len; ++len) {
        const size_t end = out.size();
        for (size_t i = begin; i < end; ++i)
            for (char c : alphabet) out.push_back(out[i] + c);
        begin = end;
    }
    return out;
}

struct Case {
    const char* pattern;
    const char* alphabet;
    const char* truth = nullptr; // the pattern for std::regex where it lacks the syntax
};

TEST(RegexGrammar, WholeMatchLanguageEqualsStdRegex) {
    const std::vector<Case> cases = {
        {"abc", "abc"},          {"a+b?", "ab"},         {"(?:ab|ba){1,2}c?", "abc"}, {"[^b]x", "abx"},
        {"\\d{2,}", "0a1"},      {"\\w\\W", "a_ -"},     {"a.c", "ac\n"},             {"(a|b)*c", "abc"},
        {"[a-c]{2}|b{3,4}", "abcd"}, {"x\\.y\\/z\\x41\\u0042", "x.y/zAB"}, {"colou?r", "colur"},
        {"^a*$", "ab"},          {"[\\-+]?\\d", "-+1"},  {"a{0}b", "ab"},            {"(?:a?){3}", "a"},
        {"\\s\\S", " \ta"},      {"[\\d\\s]+", "1 a"},   {"(?<n>ab)+", "ab", "(ab)+"},        {"a*?b+?", "ab"},
    };
    for (const auto& c : cases) {
        const std::regex truth(std::string("^(?:") + (c.truth ? c.truth : c.pattern) + ")$", std::regex::ECMAScript);
        const std::string gbnf = regex_to_gbnf(c.pattern);
        const rwd::test::GbnfRegex grammar(gbnf);
        for (const auto& s : strings_over(c.alphabet, 5))
            ASSERT_EQ(grammar.accepts(s), std::regex_match(s, truth)) << "/" << c.pattern << "/ on '" << s << "'\n" << gbnf;
    }
}

TEST(RegexGrammar, RootRuleFirstAndNonAsciiLiterals) {
    const std::string g = regex_to_gbnf("é+[α-ω]");
    EXPECT_EQ(g.rfind("root ::= ", 0), 0u) << g;
    EXPECT_NE(g.find("\\u00E9"), std::string::npos) << g;
    EXPECT_NE(g.find("[\\u03B1-\\u03C9]"), std::string::npos) << g;
    EXPECT_TRUE(rwd::test::GbnfRegex(regex_to_gbnf("\\u{1F600}|x")).accepts("x"));
}

TEST(RegexGrammar, EmptyClassMatchesNothing) {
    const rwd::test::GbnfRegex g(regex_to_gbnf("a[^\\d\\D]|b[]"));
    EXPECT_FALSE(g.accepts("a"));
    EXPECT_FALSE(g.accepts("ax"));
    EXPECT_FALSE(g.accepts("b"));
}

TEST(RegexGrammar, LargeCountsStayCounts) {
    // {0,1000000} is printed as a count, not unrolled.
    const std::string g = regex_to_gbnf("a{0,1000000}");
    EXPECT_LT(g.size(), 100u) << g;
    EXPECT_NE(g.find("{0,1000000}"), std::string::npos);
}

TEST(RegexGrammar, RefusedConstructsNameTheirOffset) {
    const std::vector<std::pair<const char*, const char*>> refused = {
        {"a(?=b)", "lookahead"}, {"(?!x)y", "lookahead"}, {"(?<=a)b", "lookbehind"}, {"(?<!a)b", "lookbehind"},
        {"(a)\\1", "backreference"}, {"\\k<n>", "backreference"}, {"\\bword", "word boundar"}, {"a^b", "'^'"},
        {"a$b", "'$'"}, {"(a$)", "'$'"}, {"[z-a]", "out of order"}, {"(ab", "missing ')'"}, {"ab)", "unbalanced"},
        {"a{2,1}", "out of order"}, {"*a", "nothing to repeat"}, {"a**", "nothing to repeat"}, {"[ab", "missing ']'"},
        {"\\", "at the end"}, {"\\q", "unknown escape"}, {"\\u12", "hexadecimal"}, {"\\uD800", "surrogate"},
    };
    for (const auto& [p, what] : refused) {
        try {
            regex_to_gbnf(p);
            ADD_FAILURE() << p << " was accepted";
        } catch (const rwd::Error& e) {
            EXPECT_EQ(e.code(), rwd::ErrorCode::argument) << p;
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << p << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find("at byte "), std::string::npos) << p << ": " << e.what();
        }
    }
}

TEST(RegexGrammar, AppendedRulesUseTheirPrefix) {
    std::string g = "root ::= x\n";
    rwd::grammar::append_regex_rules("[a-z]+", "x", true, g);
    EXPECT_NE(g.find("x ::= "), std::string::npos) << g;
    // Search semantics: anything may come before and after.
    const rwd::test::GbnfRegex grammar(g);
    EXPECT_TRUE(grammar.accepts("12ab34"));
    EXPECT_FALSE(grammar.accepts("1234"));
}

TEST(RegexGrammar, DeepNestingIsBounded) {
    EXPECT_THROW(regex_to_gbnf(std::string(100000, '(')), rwd::Error);
    EXPECT_NO_THROW(regex_to_gbnf(std::string(200, '(') + "a" + std::string(200, ')')));
}

} // namespace

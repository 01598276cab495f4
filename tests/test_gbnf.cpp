// The GBNF reader: llama.cpp's example grammars, every piece of syntax, printing back, and the
// errors (with locations) and limits that keep hostile text bounded.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rewind/error.h"
#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/matcher.h"

using namespace rwd::grammar;

namespace {

std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<std::string> sorted_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::sort(lines.begin(), lines.end());
    return lines;
}

Matcher make(const std::string& gbnf) { return Matcher(std::make_shared<CompiledGrammar>(parse_gbnf(gbnf))); }

// Whether `text` is a complete sentence of `gbnf`.
bool accepts(const std::string& gbnf, const std::string& text) {
    Matcher m(std::make_shared<CompiledGrammar>(parse_gbnf(gbnf)));
    return m.accept_bytes(text) && m.is_complete();
}

std::string error_of(const std::string& gbnf, const GbnfLimits& limits = {}) {
    try {
        parse_gbnf(gbnf, "root", limits);
    } catch (const rwd::Error& e) {
        EXPECT_EQ(e.code(), rwd::ErrorCode::argument);
        return e.what();
    }
    return "";
}

} // namespace

TEST(Gbnf, SharedGrammarsParseAndPrintBack) {
    const std::filesystem::path dir = std::filesystem::path(REWIND_SHARED_DIR) / "grammars";
    size_t n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".gbnf") continue;
        SCOPED_TRACE(entry.path().filename().string());
        const Grammar g = parse_gbnf(read_file(entry.path()));
        const std::string printed = g.to_gbnf();
        const Grammar again = parse_gbnf(printed);
        EXPECT_EQ(sorted_lines(again.to_gbnf()), sorted_lines(printed)); // the same rules (in another order)
        ++n;
    }
    EXPECT_EQ(n, 8u);
}

TEST(Gbnf, LiteralsEscapesAndClasses) {
    EXPECT_TRUE(accepts(R"(root ::= "a\n\t\"\\\x41\u00e9\U0001F600")", "a\n\t\"\\A\xC3\xA9\xF0\x9F\x98\x80"));
    EXPECT_TRUE(accepts(R"(root ::= [a-c] [^a-c] [\]\[\\] [é-ë])", "bd]\xC3\xAA"));
    EXPECT_FALSE(accepts(R"(root ::= [^a-c])", "b"));
    EXPECT_TRUE(accepts("root ::= . .", "\n\xE4\xB8\x80"));
    EXPECT_TRUE(accepts(R"(root ::= [ぁ-ゟ]+)", "\xE3\x81\x82\xE3\x81\x84"));
}

TEST(Gbnf, GroupsAlternationRepetition) {
    const std::string g = R"(root ::= ("ab" | "c")* "d"+ "e"? [0-9]{2} "x"{1,3} "y"{2,} "z"{,2})";
    EXPECT_TRUE(accepts(g, "abcabddd12xyy"));
    EXPECT_TRUE(accepts(g, "de12xxxyyyyzz"));
    EXPECT_FALSE(accepts(g, "d12xxxxyy"));
    EXPECT_FALSE(accepts(g, "d1xyy"));
    EXPECT_FALSE(accepts(g, "d12xyyzzz"));
    EXPECT_TRUE(accepts("root ::= \"\" | \"a\"", ""));
}

TEST(Gbnf, NewlinesCommentsAndRuleNames) {
    const std::string g = "# c\nroot ::=\n  a-b |\n  c_1 # trailing\nc_1 ::= (\n \"x\"\n | \"y\" )\na-b ::= \"q\"\n";
    EXPECT_TRUE(accepts(g, "q"));
    EXPECT_TRUE(accepts(g, "y"));
    EXPECT_NE(parse_gbnf("r ::= \"a\"\n", "r").rules.size(), 0u);
}

TEST(Gbnf, Tokens) {
    const Grammar g = parse_gbnf("root ::= <[128009]> !<|im_end|> <think>");
    ASSERT_EQ(g.tokens.size(), 3u);
    EXPECT_EQ(g.tokens[0].id, 128009);
    EXPECT_EQ(g.tokens[1].text, "<|im_end|>");
    EXPECT_EQ(g.rules[0].alternatives[0][1].kind, Element::Kind::NotToken);
    EXPECT_EQ(parse_gbnf(g.to_gbnf()).to_gbnf(), g.to_gbnf());
}

TEST(Gbnf, ErrorsSayWhatAndWhere) {
    EXPECT_NE(error_of("root ::= foo").find("undefined rule 'foo'"), std::string::npos);
    EXPECT_NE(error_of("root ::= foo").find("line 1, column 10"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\"\nx ::= \"b").find("line 2"), std::string::npos);
    EXPECT_NE(error_of("root ::= [a-").find("unterminated"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
    EXPECT_NE(error_of("root ::= (\"a\"").find("')'"), std::string::npos);
    EXPECT_NE(error_of("x ::= \"a\"").find("no rule named 'root'"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
    EXPECT_NE(error_of("root ::= * \"a\"").find("nothing to repeat"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
    EXPECT_NE(error_of("root ::= \"a\" )").find("line 1"), std::string::npos);
}

TEST(Gbnf, LeftRecursionIsRefusedWithTheCycle) {
    const std::string e = error_of("root ::= expr\nexpr ::= ws expr \"+\" | \"1\"\nws ::= \" \"?");
    EXPECT_NE(e.find("left recursion"), std::string::npos) << e;
    EXPECT_NE(e.find("expr -> expr"), std::string::npos) << e;
    EXPECT_NE(error_of("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"").find("a -> b -> a"), std::string::npos);
    EXPECT_EQ(error_of("root ::= \"(\" root \")\" | \"\""), ""); // recursion after input is fine
}

TEST(Gbnf, AlternativesThatNeverFinishAreDropped) {
    // "x" a can never end: "x" would be a prefix of no sentence.
    const std::string g = "root ::= a | \"y\" [^\\x00-\\U0010FFFF] | \"z\"\na ::= \"x\" a";
    EXPECT_EQ(make(g).valid_prefix_length("x"), 0u);
    EXPECT_EQ(make(g).valid_prefix_length("y"), 0u);
    EXPECT_TRUE(accepts(g, "z"));
    EXPECT_NE(error_of("root ::= \"x\" root").find("no finite sentence"), std::string::npos);
}

TEST(Gbnf, HostileInputIsRefusedWithinLimits) {
    EXPECT_NE(error_of("root ::= \"a\"{0,1000000}").find("limit"), std::string::npos);
    EXPECT_NE(error_of("root ::= " + std::string(1000, '(') + "\"a\"" + std::string(1000, ')')).find("nested deeper"),
              std::string::npos);
    GbnfLimits small;
    small.max_elements = 100;
    EXPECT_NE(error_of("root ::= (\"a\"{0,100}){0,100}", small).find("elements"), std::string::npos);
    small.max_text_bytes = 10;
    EXPECT_NE(error_of("root ::= \"abcdefgh\"", small).find("limit"), std::string::npos);
    // Just inside the limits: parses, and matching stays bounded.
    EXPECT_TRUE(accepts("root ::= \"a\"{0,10000}", std::string(10000, 'a')));
    EXPECT_FALSE(accepts("root ::= \"a\"{0,10000}", std::string(10001, 'a')));
}

// The grammar matcher: prefixes, completion, forced bytes, UTF-8 split inside characters,
// O(1) snapshot/rollback, token elements, and bounded work on ambiguous grammars.
#include <gtest/gtest.h>

#include "rewind/error.h"
#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/matcher.h"

using namespace rwd::grammar;

namespace {

Matcher make(const std::string& gbnf) { return Matcher(std::make_shared<CompiledGrammar>(parse_gbnf(gbnf))); }

const char* kJson = R"(root ::= value
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( string ":" value ( "," string ":" value )* )? "}"
array ::= "[" ( value ( "," value )* )? "]"
string ::= "\"" ( [^"\\] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? [0-9]+)";

} // namespace

TEST(GrammarMatcher, PrefixCompleteFinished) {
    Matcher m = make(kJson);
    EXPECT_FALSE(m.is_complete());
    EXPECT_TRUE(m.accept_bytes("{\"a\":[1,"));
    EXPECT_FALSE(m.is_complete());
    EXPECT_FALSE(m.accept_bytes("]"));        // refused: state unchanged
    EXPECT_TRUE(m.accept_bytes("true]}"));
    EXPECT_TRUE(m.is_complete());
    EXPECT_TRUE(m.is_finished());
    Matcher n = make(kJson);
    EXPECT_TRUE(n.accept_bytes("12"));
    EXPECT_TRUE(n.is_complete());
    EXPECT_FALSE(n.is_finished()); // more digits may follow
    EXPECT_EQ(n.valid_prefix_length("34x5"), 2u);
}

TEST(GrammarMatcher, ForcedBytes) {
    Matcher m = make(R"(root ::= "{\"name\": \"" [a-z]+ "\", \"age\": " [0-9] "}")");
    EXPECT_EQ(m.forced_bytes(), "{\"name\": \"");
    EXPECT_TRUE(m.accept_bytes("{\"name\": \"bob"));
    EXPECT_EQ(m.forced_bytes(), ""); // a letter or the closing quote
    EXPECT_TRUE(m.accept_bytes("\""));
    EXPECT_EQ(m.forced_bytes(), ", \"age\": ");
    EXPECT_EQ(m.forced_bytes(3), ", \"");
    Matcher u = make(R"(root ::= "é" [a-b])");
    EXPECT_EQ(u.forced_bytes(), "\xC3\xA9");
}

TEST(GrammarMatcher, Utf8SplitAcrossSteps) {
    Matcher m = make(R"(root ::= [à-ÿ]+ "!")"); // U+00E0..U+00FF: C3 A0 .. C3 BF
    EXPECT_TRUE(m.accept_bytes("\xC3"));        // an unfinished character that can still match
    EXPECT_FALSE(m.is_complete());
    EXPECT_FALSE(m.accept_bytes("\x80"));       // U+00C0: outside the class
    EXPECT_TRUE(m.accept_bytes("\xA9"));        // é
    EXPECT_FALSE(m.accept_bytes("\xC2"));       // U+0080..U+00BF: never in the class
    EXPECT_FALSE(m.accept_bytes("\xA9"));       // a stray continuation byte
    EXPECT_FALSE(m.accept_bytes("\xC3\xA9\xED\xA0\x80")); // a surrogate is not UTF-8
    EXPECT_TRUE(m.accept_bytes("!"));
    EXPECT_TRUE(m.is_finished());
    Matcher cjk = make(R"(root ::= [一-鿿])");
    EXPECT_EQ(cjk.valid_prefix_length("\xE4\xB8"), 2u);
    EXPECT_EQ(cjk.valid_prefix_length("\xE3\x81"), 0u); // hiragana: the lead byte E3 is below U+4E00
}

TEST(GrammarMatcher, SnapshotRollback) {
    Matcher m = make(kJson);
    ASSERT_TRUE(m.accept_bytes("[1"));
    const uint64_t s = m.snapshot();
    ASSERT_TRUE(m.accept_bytes(",2"));
    ASSERT_TRUE(m.accept_bytes("]"));
    EXPECT_TRUE(m.is_complete());
    m.rollback(s);
    EXPECT_FALSE(m.is_complete());
    EXPECT_EQ(m.valid_prefix_length(",\"x\"]"), 5u);
    ASSERT_TRUE(m.accept_bytes(",3"));
    const uint64_t later = m.snapshot();
    m.rollback(s);
    EXPECT_THROW(m.rollback(later), rwd::Error); // that path was undone
    m.reset();
    EXPECT_THROW(m.rollback(s), rwd::Error);     // taken before the reset
    try {
        m.rollback(s);
    } catch (const rwd::Error& e) {
        EXPECT_EQ(e.code(), rwd::ErrorCode::state);
    }
    EXPECT_EQ(m.depth(), 0u);
}

TEST(GrammarMatcher, TokenElements) {
    Matcher m(std::make_shared<CompiledGrammar>(parse_gbnf("root ::= <[7]> [a-z]* <[9]>\n")));
    std::vector<std::pair<int32_t, bool>> elems;
    m.token_elements(m.state(), elems);
    ASSERT_EQ(elems.size(), 1u);
    EXPECT_EQ(elems[0], std::make_pair(7, false));
    EXPECT_FALSE(m.accept_bytes("a"));
    EXPECT_FALSE(m.accept_token_element(8, false));
    EXPECT_TRUE(m.accept_token_element(7, true));
    EXPECT_TRUE(m.accept_bytes("abc"));
    EXPECT_TRUE(m.accept_token_element(9, true));
    EXPECT_TRUE(m.is_finished());
    Matcher neg(std::make_shared<CompiledGrammar>(parse_gbnf("root ::= !<[5]>* <[5]>\n")));
    EXPECT_TRUE(neg.accept_token(3, false, "x"));
    EXPECT_FALSE(neg.accept_token(4, true, ""));   // a control token never matches !<...>
    EXPECT_TRUE(neg.accept_token_element(5, true));
    EXPECT_TRUE(neg.is_complete());
}

TEST(GrammarMatcher, AmbiguousGrammarsStayBounded) {
    // Exponentially many parse trees; deduplicated stacks keep each step small.
    Matcher m = make("root ::= x*\nx ::= \"a\" | \"a\" \"a\" | \"a\" \"a\" \"a\" | y\ny ::= \"a\"+");
    EXPECT_TRUE(m.accept_bytes(std::string(5000, 'a')));
    EXPECT_TRUE(m.is_complete());
    EXPECT_LT(m.state_count(), 64u); // the same few states over and over
}

TEST(GrammarMatcher, LimitsThrowCapacity) {
    MatcherLimits limits;
    limits.max_states = 50;
    Matcher m(std::make_shared<CompiledGrammar>(parse_gbnf("root ::= \"(\" root \")\" | \"\"")), limits);
    try {
        m.accept_bytes(std::string(200, '('));
        FAIL() << "no capacity error";
    } catch (const rwd::Error& e) {
        EXPECT_EQ(e.code(), rwd::ErrorCode::capacity);
    }
    EXPECT_EQ(m.depth(), 0u); // state unchanged
}

// Where every class in play takes every character an unfinished one can become, the state keeps
// canonical bytes: equivalent characters share states, and the bytes' validity is still checked.
TEST(GrammarMatcher, Utf8WholeRangeStatesAreShared) {
    Matcher m = make(R"(root ::= [^"]* "\"")");
    ASSERT_TRUE(m.accept_bytes("\xE4"));
    const Matcher::StateId e4 = m.state();
    m.reset();
    ASSERT_TRUE(m.accept_bytes("\xE9\xBF"));
    const Matcher::StateId e9bf = m.state();
    m.reset();
    ASSERT_TRUE(m.accept_bytes("\xE5"));
    EXPECT_EQ(m.state(), e4);
    ASSERT_TRUE(m.accept_bytes("\x80"));
    EXPECT_EQ(m.state(), e9bf);
    EXPECT_FALSE(m.accept_bytes("A"));    // a continuation byte is still needed
    EXPECT_TRUE(m.accept_bytes("\x80"));  // U+5000
    m.reset();
    const size_t before = m.state_count();
    EXPECT_TRUE(m.accept_bytes("héllo wörld 一二三 ありがとう Привет 😀\""));
    EXPECT_TRUE(m.is_finished());
    EXPECT_LE(m.state_count(), before + 12); // a few per lead-byte kind, not one per character
    m.reset();
    // The lead bytes whose next byte has a narrower range keep their own states.
    EXPECT_FALSE(m.accept_bytes("\xE0\x80\x80"));  // overlong
    EXPECT_FALSE(m.accept_bytes("\xED\xA0\x80"));  // a surrogate
    EXPECT_FALSE(m.accept_bytes("\xF0\x80\x80\x80")); // overlong
    EXPECT_FALSE(m.accept_bytes("\xF4\x90\x80\x80")); // past U+10FFFF
    EXPECT_TRUE(m.accept_bytes("\xE0\xA0\x80\xED\x9F\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\""));
    EXPECT_TRUE(m.is_finished());
}

// A class that takes only part of the range keeps the real bytes until the range narrows into it
// (or out of it); stacks that differ on the character stay apart.
TEST(GrammarMatcher, Utf8PartialRangeKeepsBytes) {
    Matcher m = make(R"(root ::= [一-鿿] "!" | [^a] "?")"); // U+4E00..U+9FFF; anything but "a"
    ASSERT_TRUE(m.accept_bytes("\xE4"));
    const Matcher::StateId e4 = m.state();
    m.reset();
    ASSERT_TRUE(m.accept_bytes("\xE5"));
    EXPECT_NE(m.state(), e4); // [一-鿿] takes all of U+5000..U+5FFF but only part of U+4000..U+4FFF
    m.reset();
    EXPECT_TRUE(m.accept_bytes("\xE4\xB8\x80!"));  // U+4E00
    m.reset();
    EXPECT_FALSE(m.accept_bytes("\xE4\xB7\xBF!")); // U+4DFF: only the other alternative
    EXPECT_TRUE(m.accept_bytes("\xE4\xB7\xBF?"));
    m.reset();
    EXPECT_TRUE(m.accept_bytes("\xE5\x80\x80?"));  // both alternatives take U+5000
    m.reset();
    EXPECT_TRUE(m.accept_bytes("\xE5\x80\x80!"));
    Matcher n = make(R"(root ::= [^é] "x" | . "y")");
    ASSERT_TRUE(n.accept_bytes("\xC3"));
    EXPECT_FALSE(n.accept_bytes("\xA9x")); // é: only "." takes it
    EXPECT_TRUE(n.accept_bytes("\xA9y"));
    n.reset();
    EXPECT_TRUE(n.accept_bytes("\xC3\xA8x"));
}

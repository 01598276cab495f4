// The GBNF reader: text to a Grammar, groups and repetitions expanded into generated rules, with
// every error located by line and column and every size bounded by GbnfLimits.
#include <algorithm>
#include <unordered_map>

#include "gbnf_checks.h"
#include "rewind/error.h"
#include "rewind/grammar/gbnf.h"
#include "rewind/grammar/utf8.h"

namespace rwd::grammar {
namespace {

bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

class Parser {
public:
    Parser(std::string_view src, const GbnfLimits& limits) : src_(src), limits_(limits) {}

    Grammar run(std::string_view root_rule);

private:
    std::string_view src_;
    const GbnfLimits& limits_;
    size_t pos_ = 0;
    Grammar g_;
    std::unordered_map<std::string, uint32_t> ids_;
    std::vector<size_t> first_use_;  // per rule: where it was first named
    std::vector<bool> defined_;
    size_t elements_ = 0;

    [[noreturn]] void fail(const std::string& what, size_t at) const {
        throw Error(ErrorCode::argument, "GBNF " + location(src_, at) + ": " + what);
    }
    bool at_end() const { return pos_ >= src_.size(); }
    char peek(size_t ahead = 0) const { return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0'; }

    void skip_space(bool newline_ok);
    std::string parse_name();
    uint32_t rule_id(const std::string& name, size_t at);
    uint32_t new_rule(const std::string& parent);
    void count_elements(size_t n);
    void parse_rule();
    void parse_alternates(uint32_t rule, size_t depth);
    Sequence parse_sequence(uint32_t rule, size_t depth, bool nested);
    bool parse_atom(uint32_t rule, size_t depth, Sequence& seq, size_t& atom_start);
    uint32_t parse_code_point(bool in_class);
    void parse_literal(Sequence& seq);
    void parse_class(Sequence& seq);
    void parse_token(Sequence& seq, bool negated);
    uint32_t parse_count();
    void parse_repetition(uint32_t rule, Sequence& seq, size_t atom_start);
    void repeat(uint32_t rule, Sequence& seq, size_t atom_start, uint32_t min, uint32_t max, bool unbounded);
    uint32_t add_class(CharClass c);
};

void Parser::skip_space(bool newline_ok) {
    while (!at_end()) {
        const char c = peek();
        if (c == ' ' || c == '\t') {
            ++pos_;
        } else if (c == '#') {
            while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
        } else if ((c == '\n' || c == '\r') && newline_ok) {
            ++pos_;
        } else {
            break;
        }
    }
}

std::string Parser::parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_word_char(peek())) ++pos_;
    if (pos_ == start) fail("expected a rule name", start);
    return std::string(src_.substr(start, pos_ - start));
}

uint32_t Parser::rule_id(const std::string& name, size_t at) {
    if (auto it = ids_.find(name); it != ids_.end()) return it->second;
    if (g_.rules.size() >= limits_.max_rules)
        fail("more than " + std::to_string(limits_.max_rules) + " rules", at);
    const auto id = static_cast<uint32_t>(g_.rules.size());
    g_.rules.push_back(Rule{name, false, {}});
    first_use_.push_back(at);
    defined_.push_back(false);
    ids_.emplace(name, id);
    return id;
}

// A rule for a group or a repetition; named when parsing ends, so no user name is taken.
uint32_t Parser::new_rule(const std::string& parent) {
    if (g_.rules.size() >= limits_.max_rules)
        fail("more than " + std::to_string(limits_.max_rules) + " rules (repetitions expand to rules)", pos_);
    const auto id = static_cast<uint32_t>(g_.rules.size());
    g_.rules.push_back(Rule{parent, true, {}});
    first_use_.push_back(pos_);
    defined_.push_back(true);
    return id;
}

void Parser::count_elements(size_t n) {
    elements_ += n;
    if (elements_ > limits_.max_elements)
        fail("grammar larger than " + std::to_string(limits_.max_elements) + " elements once repetitions are expanded", pos_);
}

uint32_t Parser::add_class(CharClass c) {
    count_elements(1);
    g_.classes.push_back(std::move(c));
    return static_cast<uint32_t>(g_.classes.size() - 1);
}

void Parser::parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'", pos_);
    pos_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name, start);
    if (defined_[id]) fail("rule '" + name + "' defined twice", start);
    defined_[id] = true;
    parse_alternates(id, 0);
    if (!at_end()) {
        if (peek() == '\r' && peek(1) == '\n') pos_ += 2;
        else if (peek() == '\n' || peek() == '\r') ++pos_;
        else fail(std::string("unexpected '") + peek() + "': expected the end of the rule", pos_);
    }
    skip_space(true);
}

void Parser::parse_alternates(uint32_t rule, size_t depth) {
    const bool nested = depth > 0;
    std::vector<Sequence> alts;
    alts.push_back(parse_sequence(rule, depth, nested));
    while (!at_end() && peek() == '|') {
        ++pos_;
        skip_space(true);
        alts.push_back(parse_sequence(rule, depth, nested));
    }
    g_.rules[rule].alternatives = std::move(alts);
}

Sequence Parser::parse_sequence(uint32_t rule, size_t depth, bool nested) {
    Sequence seq;
    size_t atom_start = 0;
    bool have_atom = false;
    while (!at_end()) {
        const char c = peek();
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (!have_atom) fail(std::string("'") + c + "' with nothing to repeat", pos_);
            parse_repetition(rule, seq, atom_start);
            have_atom = false; // `a**` is refused, as in llama.cpp
        } else if (parse_atom(rule, depth, seq, atom_start)) {
            have_atom = true;
        } else {
            break;
        }
        skip_space(nested);
    }
    return seq;
}

// One literal, class, `.`, token, rule reference or group appended to `seq`; false if none starts here.
bool Parser::parse_atom(uint32_t rule, size_t depth, Sequence& seq, size_t& atom_start) {
    const char c = peek();
    const size_t start = pos_;
    atom_start = seq.size();
    if (c == '"') {
        parse_literal(seq);
    } else if (c == '[') {
        parse_class(seq);
    } else if (c == '.') {
        ++pos_;
        CharClass any;
        any.ranges = {{0, 0x10FFFF}};
        any.any = true;
        seq.push_back({Element::Kind::Chars, add_class(std::move(any))});
    } else if (c == '<' || (c == '!' && peek(1) == '<')) {
        parse_token(seq, c == '!');
    } else if (is_word_char(c)) {
        const std::string name = parse_name();
        count_elements(1);
        seq.push_back({Element::Kind::Rule, rule_id(name, start)});
    } else if (c == '(') {
        if (depth + 1 > limits_.max_nesting)
            fail("parentheses nested deeper than " + std::to_string(limits_.max_nesting), pos_);
        ++pos_;
        skip_space(true);
        const uint32_t sub = new_rule(g_.rules[rule].name);
        parse_alternates(sub, depth + 1);
        if (peek() != ')') fail("expected ')' to close the group opened", start);
        ++pos_;
        count_elements(1);
        seq.push_back({Element::Kind::Rule, sub});
    } else {
        return false;
    }
    return true;
}

uint32_t Parser::parse_code_point(bool in_class) {
    const size_t start = pos_;
    if (at_end()) fail("unexpected end of text", start);
    if (peek() != '\\') {
        const Utf8Step step = decode_utf8(src_.substr(pos_));
        if (!step.valid || step.length == 0) fail("invalid UTF-8 in the grammar text", start);
        pos_ += step.length;
        return step.code_point;
    }
    ++pos_;
    const char e = peek();
    ++pos_;
    size_t digits = 0;
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': return static_cast<uint8_t>(e);
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: fail(std::string("unknown escape '\\") + e + "'" + (in_class ? " in a character class" : ""), start);
    }
    uint64_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
        const int h = hex_value(peek());
        if (h < 0) fail("expected " + std::to_string(digits) + " hex digits after '\\" + e + "'", start);
        v = v * 16 + static_cast<uint64_t>(h);
        ++pos_;
    }
    if (v > 0x10FFFF) fail("code point past U+10FFFF", start);
    return static_cast<uint32_t>(v);
}

void Parser::parse_literal(Sequence& seq) {
    const size_t start = pos_;
    ++pos_;
    while (true) {
        if (at_end() || peek() == '\n' || peek() == '\r') fail("unterminated string literal", start);
        if (peek() == '"') break;
        const uint32_t cp = parse_code_point(false);
        CharClass c;
        c.ranges = c.written = {{cp, cp}};
        seq.push_back({Element::Kind::Chars, add_class(std::move(c))});
    }
    ++pos_;
}

void Parser::parse_class(Sequence& seq) {
    const size_t start = pos_;
    ++pos_;
    CharClass c;
    if (peek() == '^') {
        c.negated = true;
        ++pos_;
    }
    while (true) {
        if (at_end() || peek() == '\n' || peek() == '\r') fail("unterminated character class", start);
        if (peek() == ']') break;
        const uint32_t lo = parse_code_point(true);
        uint32_t hi = lo;
        if (peek() == '-' && peek(1) != ']' && peek(1) != '\n' && peek(1) != '\r' && pos_ + 1 < src_.size()) {
            ++pos_;
            hi = parse_code_point(true);
            if (hi < lo) fail("character range with its end before its start", start);
        }
        c.written.emplace_back(lo, hi);
    }
    ++pos_;
    c.ranges = normalize_ranges(c.written, c.negated);
    seq.push_back({Element::Kind::Chars, add_class(std::move(c))});
}

void Parser::parse_token(Sequence& seq, bool negated) {
    const size_t start = pos_;
    pos_ += negated ? 2 : 1;
    TokenRef ref;
    if (peek() == '[') {
        ++pos_;
        uint64_t v = 0;
        size_t n = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + static_cast<uint64_t>(peek() - '0');
            if (v > 0x7FFFFFFF) fail("token id too large", start);
            ++pos_;
            ++n;
        }
        if (n == 0 || peek() != ']' || peek(1) != '>') fail("expected a token id as <[123]>", start);
        pos_ += 2;
        ref.id = static_cast<int32_t>(v);
    } else {
        const size_t text_start = pos_;
        while (!at_end() && peek() != '>' && peek() != '\n' && peek() != '\r') ++pos_;
        if (peek() != '>' || pos_ == text_start) fail("expected a token's text as <text>", start);
        ref.text = src_.substr(text_start - 1, pos_ - text_start + 2); // the token's text, brackets included
        ++pos_;
    }
    count_elements(1);
    g_.tokens.push_back(std::move(ref));
    seq.push_back({negated ? Element::Kind::NotToken : Element::Kind::Token, static_cast<uint32_t>(g_.tokens.size() - 1)});
}

uint32_t Parser::parse_count() {
    const size_t start = pos_;
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
        v = v * 10 + static_cast<uint64_t>(peek() - '0');
        if (v > limits_.max_repeat)
            fail("repetition count above the limit of " + std::to_string(limits_.max_repeat), start);
        ++pos_;
    }
    return static_cast<uint32_t>(v);
}

void Parser::parse_repetition(uint32_t rule, Sequence& seq, size_t atom_start) {
    const char c = peek();
    const size_t start = pos_;
    ++pos_;
    if (c == '*') return repeat(rule, seq, atom_start, 0, 0, true);
    if (c == '+') return repeat(rule, seq, atom_start, 1, 0, true);
    if (c == '?') return repeat(rule, seq, atom_start, 0, 1, false);
    skip_space(true);
    const bool have_min = peek() >= '0' && peek() <= '9';
    const uint32_t min = have_min ? parse_count() : 0;
    skip_space(true);
    uint32_t max = min;
    bool unbounded = false;
    if (peek() == ',') {
        ++pos_;
        skip_space(true);
        if (peek() >= '0' && peek() <= '9') max = parse_count();
        else unbounded = true;
        skip_space(true);
    } else if (!have_min) {
        fail("expected a count in '{...}'", start);
    }
    if (peek() != '}') fail("expected '}' to close the repetition", start);
    ++pos_;
    if (!unbounded && max < min) fail("repetition {m,n} with n < m", start);
    repeat(rule, seq, atom_start, min, max, unbounded);
}

// Replaces seq[atom_start..] (the atom) by `min` copies then either a star rule or (max - min)
// nested optional copies: x{2,4} = x x (x (x)?)?. A multi-element atom becomes one rule first.
void Parser::repeat(uint32_t rule, Sequence& seq, size_t atom_start, uint32_t min, uint32_t max, bool unbounded) {
    Sequence atom(seq.begin() + static_cast<std::ptrdiff_t>(atom_start), seq.end());
    seq.resize(atom_start);
    if (atom.empty()) return; // "" repeated is ""
    if (atom.size() != 1) {
        const uint32_t sub = new_rule(g_.rules[rule].name);
        g_.rules[sub].alternatives = {std::move(atom)};
        atom = {Element{Element::Kind::Rule, sub}};
    }
    const Element x = atom[0];
    count_elements(size_t{min} + (unbounded ? 2 : 2 * size_t{max - min}));
    for (uint32_t i = 0; i < min; ++i) seq.push_back(x);
    if (unbounded) {
        const uint32_t star = new_rule(g_.rules[rule].name); // star ::= x star | ""
        g_.rules[star].alternatives = {{x, Element{Element::Kind::Rule, star}}, {}};
        seq.push_back({Element::Kind::Rule, star});
        return;
    }
    uint32_t tail = 0;
    bool have_tail = false;
    for (uint32_t i = min; i < max; ++i) { // built inside out: opt ::= x tail | ""
        const uint32_t opt = new_rule(g_.rules[rule].name);
        Sequence first{x};
        if (have_tail) first.push_back({Element::Kind::Rule, tail});
        g_.rules[opt].alternatives = {std::move(first), {}};
        tail = opt;
        have_tail = true;
    }
    if (have_tail) seq.push_back({Element::Kind::Rule, tail});
}

Grammar Parser::run(std::string_view root_rule) {
    if (src_.size() > limits_.max_text_bytes)
        throw Error(ErrorCode::argument, "GBNF: grammar text of " + std::to_string(src_.size()) +
                                             " bytes, more than the limit of " + std::to_string(limits_.max_text_bytes));
    skip_space(true);
    while (!at_end()) parse_rule();
    for (size_t r = 0; r < g_.rules.size(); ++r)
        if (!defined_[r]) fail("undefined rule '" + g_.rules[r].name + "'", first_use_[r]);
    const auto root = ids_.find(std::string(root_rule));
    if (root == ids_.end())
        throw Error(ErrorCode::argument, "GBNF: no rule named '" + std::string(root_rule) + "' (the start rule)");
    g_.root = root->second;
    name_generated_rules(g_);
    check_left_recursion(g_);
    prune_unfinishable(g_);
    return std::move(g_);
}

} // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root_rule, const GbnfLimits& limits) {
    return Parser(text, limits).run(root_rule);
}

} // namespace rwd::grammar

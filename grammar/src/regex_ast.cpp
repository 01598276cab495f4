// Recursive-descent parser for the regex subset (see regex_ast.h). Nesting depth and counts are
// bounded only by what the input holds; the parser recurses once per group level, which the
// depth check below keeps finite for hostile inputs.
#include "regex_ast.h"

#include <algorithm>
#include <string>

#include "rewind/error.h"
#include "rewind/grammar/utf8.h"

namespace rwd::grammar::detail {
namespace {

// Deeper nesting than this is refused: each level is one C++ frame here and in the printer.
constexpr int kMaxDepth = 256;

CharSet digits() { return CharSet::of('0', '9'); }
CharSet word() {
    CharSet s = CharSet::of('0', '9');
    s.add('A', 'Z');
    s.add('a', 'z');
    s.add('_', '_');
    return s;
}
CharSet space() {
    CharSet s = CharSet::of(0x09, 0x0D);
    for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) s.add(c, c);
    s.add(0x2000, 0x200A);
    return s;
}

std::unique_ptr<RegexNode> make_set(CharSet s) {
    auto n = std::make_unique<RegexNode>();
    n->kind = RegexNode::Kind::set;
    n->set = std::move(s);
    return n;
}

class Parser {
public:
    explicit Parser(std::string_view p) : p_(p) {}

    std::vector<RegexBranch> top() {
        std::vector<RegexBranch> out;
        for (;;) {
            RegexBranch b;
            if (peek() == '^') { ++i_; b.anchored_start = true; }
            b.body = sequence(0, &b.anchored_end);
            out.push_back(std::move(b));
            if (at_end()) break;
            if (peek() == ')') fail("unbalanced ')'");
            ++i_; // '|'
        }
        return out;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw Error(ErrorCode::argument, "regex: " + what + " at byte " + std::to_string(i_));
    }
    bool at_end() const { return i_ >= p_.size(); }
    char peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : '\0'; }

    // A sequence up to '|', ')' or the end. At top level (depth 0) a final '$' anchors the end.
    std::unique_ptr<RegexNode> sequence(int depth, bool* anchored_end) {
        auto seq = std::make_unique<RegexNode>();
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$') {
                const bool last = i_ + 1 == p_.size() || p_[i_ + 1] == '|' ;
                if (depth != 0 || !last) fail("'$' is supported only at the end of the pattern");
                ++i_;
                *anchored_end = true;
                break;
            }
            if (peek() == '^') fail("'^' is supported only at the start of the pattern");
            auto atom = this->atom(depth);
            seq->kids.push_back(quantified(std::move(atom)));
        }
        return seq;
    }

    std::unique_ptr<RegexNode> alternation(int depth) {
        auto alt = std::make_unique<RegexNode>();
        alt->kind = RegexNode::Kind::alt;
        for (;;) {
            bool unused = false;
            alt->kids.push_back(sequence(depth, &unused));
            if (peek() != '|') break;
            ++i_;
        }
        return alt;
    }

    std::unique_ptr<RegexNode> group(int depth) {
        if (depth >= kMaxDepth) fail("groups nested deeper than " + std::to_string(kMaxDepth));
        ++i_; // '('
        if (peek() == '?') {
            if (peek(1) == ':') i_ += 2;
            else if (peek(1) == '=' || peek(1) == '!') fail("lookahead is not supported");
            else if (peek(1) == '<' && (peek(2) == '=' || peek(2) == '!')) fail("lookbehind is not supported");
            else if (peek(1) == '<') { // a named group: the name is irrelevant to the language
                const size_t close = p_.find('>', i_);
                if (close == std::string_view::npos) fail("unterminated group name");
                i_ = close + 1;
            } else fail("unknown group syntax '(?'");
        }
        auto inner = alternation(depth + 1);
        if (peek() != ')') fail("missing ')'");
        ++i_;
        return inner;
    }

    std::unique_ptr<RegexNode> atom(int depth) {
        const char c = peek();
        if (c == '(') return group(depth);
        if (c == '[') return make_set(char_class());
        if (c == '.') { ++i_; return make_set(regex_dot()); }
        if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
        if (c == '{' && is_quantifier()) fail("nothing to repeat");
        if (c == '\\') return escape_atom();
        const uint32_t cp = literal_char();
        return make_set(CharSet::of(cp, cp));
    }

    uint32_t literal_char() {
        const Utf8Step st = decode_utf8(p_.substr(i_));
        if (!st.valid || st.length == 0) fail("invalid UTF-8");
        i_ += st.length;
        return st.code_point;
    }

    std::unique_ptr<RegexNode> escape_atom() {
        const char e = peek(1);
        if (e == 'b' || e == 'B') fail("word boundaries (\\b, \\B) are not supported");
        if (e >= '1' && e <= '9') fail("backreferences are not supported");
        if (e == 'k' && peek(2) == '<') fail("backreferences are not supported");
        return make_set(escape(false));
    }

    // After a '\\': a class escape or one character. `in_class`: inside [...] (\b is backspace).
    CharSet escape(bool in_class) {
        ++i_;
        if (at_end()) fail("'\\' at the end of the pattern");
        const char e = peek();
        ++i_;
        switch (e) {
        case 'd': return digits();
        case 'D': return digits().complement();
        case 'w': return word();
        case 'W': return word().complement();
        case 's': return space();
        case 'S': return space().complement();
        case 't': return CharSet::of(9, 9);
        case 'n': return CharSet::of(10, 10);
        case 'v': return CharSet::of(11, 11);
        case 'f': return CharSet::of(12, 12);
        case 'r': return CharSet::of(13, 13);
        case '0':
            if (peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
            return CharSet::of(0, 0);
        case 'x': { const uint32_t v = hex(2); return CharSet::of(v, v); }
        case 'u': { const uint32_t v = unicode_escape(); return CharSet::of(v, v); }
        case 'c': {
            const char l = peek();
            if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) fail("bad \\c escape");
            ++i_;
            return CharSet::of(static_cast<uint32_t>(l) % 32, static_cast<uint32_t>(l) % 32);
        }
        case 'b':
            if (in_class) return CharSet::of(8, 8);
            break;
        case '-':
            if (in_class) return CharSet::of('-', '-');
            break;
        default: break;
        }
        static constexpr std::string_view kSyntax = "^$\\.*+?()[]{}|/";
        if (kSyntax.find(e) == std::string_view::npos) {
            --i_;
            fail(std::string("unknown escape '\\") + e + "'");
        }
        return CharSet::of(static_cast<unsigned char>(e), static_cast<unsigned char>(e));
    }

    uint32_t hex(int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
            const char h = peek();
            const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) fail("bad hexadecimal escape");
            v = v * 16 + static_cast<uint32_t>(d);
            ++i_;
        }
        return v;
    }

    // \uHHHH, a surrogate pair \uHHHH\uHHHH, or \u{H...} (the 'u' flag's forms).
    uint32_t unicode_escape() {
        if (peek() == '{') {
            ++i_;
            uint32_t v = 0;
            int n = 0;
            while (peek() != '}') {
                if (++n > 6) fail("bad \\u{...} escape");
                v = v * 16 + hex(1);
            }
            ++i_;
            if (n == 0 || v > 0x10FFFF) fail("bad \\u{...} escape");
            return v;
        }
        const uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
            const size_t save = i_;
            i_ += 2;
            const uint32_t lo = hex(4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            i_ = save;
        }
        if (v >= 0xD800 && v <= 0xDFFF) fail("a lone surrogate matches no Unicode text");
        return v;
    }

    // One member of a class: a character (returned in `cp`, `single` true) or a class escape.
    CharSet class_member(uint32_t* cp, bool* single) {
        CharSet s;
        if (peek() == '\\') {
            s = escape(true);
        } else {
            const uint32_t c = literal_char();
            s = CharSet::of(c, c);
        }
        *single = s.ranges.size() == 1 && s.ranges[0].first == s.ranges[0].second;
        *cp = *single ? s.ranges[0].first : 0;
        return s;
    }

    CharSet char_class() {
        ++i_; // '['
        const bool negate = peek() == '^';
        if (negate) ++i_;
        CharSet set;
        while (peek() != ']') {
            if (at_end()) fail("missing ']'");
            uint32_t lo = 0, hi = 0;
            bool lo_single = false, hi_single = false;
            CharSet first = class_member(&lo, &lo_single);
            if (peek() == '-' && peek(1) != ']' && i_ + 1 < p_.size()) {
                ++i_;
                CharSet second = class_member(&hi, &hi_single);
                if (!lo_single || !hi_single) fail("a class escape cannot bound a range");
                if (hi < lo) fail("range out of order in character class");
                set.add(lo, hi);
            } else {
                set.add(first);
            }
        }
        ++i_;
        return negate ? set.complement() : set;
    }

    bool is_quantifier() const {
        size_t k = i_ + 1;
        const size_t start = k;
        while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') ++k;
        if (k == start) return false;
        if (k < p_.size() && p_[k] == ',') {
            ++k;
            while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9') ++k;
        }
        return k < p_.size() && p_[k] == '}';
    }

    int64_t number() {
        int64_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + (peek() - '0');
            if (v > (int64_t{1} << 40)) fail("repetition count too large");
            ++i_;
        }
        return v;
    }

    std::unique_ptr<RegexNode> quantified(std::unique_ptr<RegexNode> atom) {
        int64_t lo = 0, hi = 0;
        const char c = peek();
        if (c == '*') { lo = 0; hi = kUnbounded; ++i_; }
        else if (c == '+') { lo = 1; hi = kUnbounded; ++i_; }
        else if (c == '?') { lo = 0; hi = 1; ++i_; }
        else if (c == '{' && is_quantifier()) {
            ++i_;
            lo = number();
            hi = lo;
            if (peek() == ',') { ++i_; hi = peek() == '}' ? kUnbounded : number(); }
            ++i_; // '}'
            if (hi != kUnbounded && hi < lo) fail("numbers out of order in {} quantifier");
        } else {
            return atom;
        }
        if (peek() == '?') ++i_; // lazy: the same language
        const char n = peek();
        if (n == '*' || n == '+' || n == '?' || (n == '{' && is_quantifier())) fail("nothing to repeat");
        auto rep = std::make_unique<RegexNode>();
        rep->kind = RegexNode::Kind::repeat;
        rep->min = lo;
        rep->max = hi;
        rep->kids.push_back(std::move(atom));
        return rep;
    }

    std::string_view p_;
    size_t i_ = 0;
};

} // namespace

CharSet regex_dot() {
    CharSet s = CharSet::all();
    CharSet nl = CharSet::of(0x0A, 0x0A);
    nl.add(0x0D, 0x0D);
    nl.add(0x2028, 0x2029);
    return s.minus(nl);
}

std::vector<RegexBranch> parse_regex(std::string_view pattern) { return Parser(pattern).top(); }

int64_t regex_min_length(const RegexNode& n) {
    switch (n.kind) {
    case RegexNode::Kind::set: return 1;
    case RegexNode::Kind::seq: {
        int64_t s = 0;
        for (const auto& k : n.kids) s = std::min<int64_t>(s + regex_min_length(*k), int64_t{1} << 50);
        return s;
    }
    case RegexNode::Kind::alt: {
        int64_t m = int64_t{1} << 50;
        for (const auto& k : n.kids) m = std::min(m, regex_min_length(*k));
        return n.kids.empty() ? 0 : m;
    }
    case RegexNode::Kind::repeat:
        return std::min<int64_t>(n.min * regex_min_length(*n.kids[0]), int64_t{1} << 50);
    }
    return 0;
}

int64_t regex_max_length(const RegexNode& n) {
    const int64_t cap = int64_t{1} << 50;
    switch (n.kind) {
    case RegexNode::Kind::set: return 1;
    case RegexNode::Kind::seq: {
        int64_t s = 0;
        for (const auto& k : n.kids) {
            const int64_t m = regex_max_length(*k);
            if (m == kUnbounded) return kUnbounded;
            s = std::min(s + m, cap);
        }
        return s;
    }
    case RegexNode::Kind::alt: {
        int64_t m = 0;
        for (const auto& k : n.kids) {
            const int64_t x = regex_max_length(*k);
            if (x == kUnbounded) return kUnbounded;
            m = std::max(m, x);
        }
        return m;
    }
    case RegexNode::Kind::repeat: {
        const int64_t m = regex_max_length(*n.kids[0]);
        if (m == 0) return 0;
        if (n.max == kUnbounded || m == kUnbounded) return kUnbounded;
        return m > cap / std::max<int64_t>(n.max, 1) ? cap : m * n.max;
    }
    }
    return 0;
}

} // namespace rwd::grammar::detail

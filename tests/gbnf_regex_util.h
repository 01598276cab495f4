// Acceptance helper for the grammar front ends' tests: a GBNF text without recursion rewritten as
// one std::regex, to ask whether an ASCII text is in its language (classes keep their ASCII part;
// a recursive grammar is refused: the grammar layer's matcher is the tool for those).
#pragma once
#include <cstdint>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>

namespace rwd::test {

class GbnfRegex {
public:
    explicit GbnfRegex(const std::string& gbnf) {
        size_t pos = 0;
        while (pos < gbnf.size()) {
            size_t eol = gbnf.find('\n', pos);
            if (eol == std::string::npos) eol = gbnf.size();
            const std::string line = gbnf.substr(pos, eol - pos);
            pos = eol + 1;
            const size_t def = line.find(" ::= ");
            if (def == std::string::npos) continue;
            rules_[line.substr(0, def)] = line.substr(def + 5);
        }
        re_ = std::regex("^(?:" + expand("root") + ")$", std::regex::ECMAScript | std::regex::nosubs);
    }

    bool accepts(const std::string& text) const { return std::regex_match(text, re_); }

private:
    static std::string hex_byte(unsigned v) {
        static const char* d = "0123456789ABCDEF";
        return std::string("\\x") + d[(v >> 4) & 15] + d[v & 15];
    }
    // One (possibly escaped) character of a literal or class at s[i]; advances i.
    static uint32_t read_char(const std::string& s, size_t& i) {
        if (s[i] != '\\') {
            const auto b = static_cast<unsigned char>(s[i]);
            int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
            uint32_t cp = n == 1 ? b : b & (0x3F >> (n - 1));
            for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
            i += static_cast<size_t>(n);
            return cp;
        }
        const char e = s[i + 1];
        i += 2;
        const auto hex = [&](int n) {
            const uint32_t v = static_cast<uint32_t>(std::stoul(s.substr(i, static_cast<size_t>(n)), nullptr, 16));
            i += static_cast<size_t>(n);
            return v;
        };
        switch (e) {
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        default: return static_cast<unsigned char>(e);
        }
    }
    static std::string utf8_bytes(uint32_t cp) {
        std::string out;
        if (cp < 0x80) return hex_byte(cp);
        if (cp < 0x800) return hex_byte(0xC0 | (cp >> 6)) + hex_byte(0x80 | (cp & 0x3F));
        if (cp < 0x10000)
            return hex_byte(0xE0 | (cp >> 12)) + hex_byte(0x80 | ((cp >> 6) & 0x3F)) + hex_byte(0x80 | (cp & 0x3F));
        return hex_byte(0xF0 | (cp >> 18)) + hex_byte(0x80 | ((cp >> 12) & 0x3F)) + hex_byte(0x80 | ((cp >> 6) & 0x3F)) +
               hex_byte(0x80 | (cp & 0x3F));
    }
    static std::string ascii_class(const std::string& s, size_t& i) {
        ++i; // '['
        const bool negate = s[i] == '^';
        if (negate) ++i;
        std::string items;
        while (s[i] != ']') {
            const uint32_t lo = read_char(s, i);
            uint32_t hi = lo;
            if (s[i] == '-' && s[i + 1] != ']') { ++i; hi = read_char(s, i); }
            if (lo > 0x7F) continue;
            items += hex_byte(lo) + "-" + hex_byte(hi > 0x7F ? 0x7F : hi);
        }
        ++i;
        if (items.empty()) return negate ? "[\\s\\S]" : "[^\\s\\S]";
        return (negate ? "[^" : "[") + items + "]";
    }

    std::string expand(const std::string& name) {
        if (!rules_.count(name)) throw std::runtime_error("GbnfRegex: no rule " + name);
        if (open_.count(name)) throw std::runtime_error("GbnfRegex: recursive rule " + name);
        open_.insert(name);
        const std::string& b = rules_[name];
        std::string out;
        for (size_t i = 0; i < b.size();) {
            const char c = b[i];
            if (c == ' ') { ++i; continue; }
            if (c == '"') {
                ++i;
                out += "(?:";
                while (b[i] != '"') out += utf8_bytes(read_char(b, i));
                out += ")";
                ++i;
            } else if (c == '[') {
                out += ascii_class(b, i);
            } else if (c == '(') { out += "(?:"; ++i; }
            else if (c == ')' || c == '|' || c == '*' || c == '+' || c == '?') { out += c; ++i; }
            else if (c == '{') { const size_t e = b.find('}', i); out += b.substr(i, e - i + 1); i = e + 1; }
            else {
                size_t e = i;
                while (e < b.size() && (std::isalnum(static_cast<unsigned char>(b[e])) || b[e] == '-')) ++e;
                out += "(?:" + expand(b.substr(i, e - i)) + ")";
                i = e;
            }
        }
        open_.erase(name);
        return out;
    }

    std::map<std::string, std::string> rules_;
    std::set<std::string> open_;
    std::regex re_;
};

} // namespace rwd::test

// Digit grammars for numeric ranges (see number_grammar.h). Integers: one fixed-width range per
// digit count, split at the first digit that differs (the classic construction, any base).
// Fractions: a small automaton over (how much of the lower / upper bound's digits still binds).
#include "number_grammar.h"

#include <cstdio>
#include <map>
#include <vector>

#include "rewind/error.h"

namespace rwd::grammar::detail {
namespace {

int digit_value(char c) { return c >= 'a' ? c - 'a' + 10 : c - '0'; }
char digit_char(int v) { return static_cast<char>(v < 10 ? '0' + v : 'a' + v - 10); }

// Class of the digits lo..hi (values) in `base`; hex letters in both cases.
std::string digit_class(int lo, int hi, int base) {
    if (base == 10 && lo == hi) return std::string("\"") + digit_char(lo) + "\"";
    std::string s = "[";
    const auto part = [&](int a, int b, char first) {
        s.push_back(static_cast<char>(first + a));
        if (b > a) { if (b > a + 1) s.push_back('-'); s.push_back(static_cast<char>(first + b)); }
    };
    if (lo <= 9) part(lo, std::min(hi, 9), '0');
    if (hi >= 10) {
        part(std::max(lo, 10) - 10, hi - 10, 'a');
        part(std::max(lo, 10) - 10, hi - 10, 'A');
    }
    return s + "]";
}

std::string any_digits(int n, int base) {
    if (n == 0) return "";
    const std::string c = digit_class(0, base - 1, base);
    return n == 1 ? c : c + "{" + std::to_string(n) + "}";
}

std::string join_alts(const std::vector<std::string>& alts) {
    if (alts.size() == 1) return alts[0];
    std::string s = "(";
    for (size_t i = 0; i < alts.size(); ++i) s += (i ? " | " : "") + alts[i];
    return s + ")";
}

std::string seq(const std::string& a, const std::string& b) { return b.empty() ? a : a.empty() ? b : a + " " + b; }

// Same-width digit strings lo <= hi.
std::string fixed_range(const std::string& lo, const std::string& hi, int base) {
    const size_t w = lo.size();
    if (w == 0) return "";
    const int a = digit_value(lo[0]), b = digit_value(hi[0]);
    if (a == b) return seq(digit_class(a, a, base), fixed_range(lo.substr(1), hi.substr(1), base));
    const char top = digit_char(base - 1);
    const bool lo_min = lo.find_first_not_of('0', 1) == std::string::npos;
    const bool hi_max = hi.find_first_not_of(top, 1) == std::string::npos;
    std::vector<std::string> alts;
    int from = a, to = b;
    if (!lo_min) {
        alts.push_back(seq(digit_class(a, a, base), fixed_range(lo.substr(1), std::string(w - 1, top), base)));
        ++from;
    }
    if (!hi_max) --to;
    if (from <= to) alts.push_back(seq(digit_class(from, to, base), any_digits(static_cast<int>(w) - 1, base)));
    if (!hi_max) alts.push_back(seq(digit_class(b, b, base), fixed_range(std::string(w - 1, '0'), hi.substr(1), base)));
    return join_alts(alts);
}

int compare_mag(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
    return a < b ? -1 : a > b ? 1 : 0;
}

std::string inc_mag(std::string s) {
    for (size_t i = s.size(); i-- > 0;) {
        if (s[i] != '9') { ++s[i]; return s; }
        s[i] = '0';
    }
    return "1" + s;
}

std::string dec_mag(std::string s) { // s > 0
    for (size_t i = s.size(); i-- > 0;) {
        if (s[i] != '0') { --s[i]; break; }
        s[i] = '9';
    }
    const size_t nz = s.find_first_not_of('0');
    return nz == std::string::npos ? "0" : s.substr(nz);
}

// Canonical non-negative integers in [a, b] (b absent: unbounded), a <= b.
std::string nonneg_range(const std::string& a, const std::optional<std::string>& b) {
    const size_t la = a.size();
    if (b && b->size() == la) return fixed_range(a, *b, 10);
    std::vector<std::string> alts;
    alts.push_back(fixed_range(a, std::string(la, '9'), 10));
    if (b) {
        const size_t lb = b->size();
        if (lb >= la + 2) {
            const std::string rep = lb - 2 == la ? "{" + std::to_string(la) + "}"
                                                 : "{" + std::to_string(la) + "," + std::to_string(lb - 2) + "}";
            alts.push_back("[1-9] [0-9]" + rep);
        }
        alts.push_back(fixed_range("1" + std::string(lb - 1, '0'), *b, 10));
    } else {
        alts.push_back("[1-9] [0-9]{" + std::to_string(la) + ",}");
    }
    return join_alts(alts);
}

Decimal normalized(Decimal d) {
    const size_t nz = d.ip.find_first_not_of('0');
    d.ip = nz == std::string::npos ? "0" : d.ip.substr(nz);
    while (!d.fp.empty() && d.fp.back() == '0') d.fp.pop_back();
    if (d.ip == "0" && d.fp.empty()) d.neg = false;
    return d;
}

} // namespace

Decimal parse_decimal(std::string_view t) {
    const auto bad = [&] { return Error(ErrorCode::argument, "not a number: '" + std::string(t) + "'"); };
    Decimal d;
    size_t i = 0;
    if (i < t.size() && t[i] == '-') { d.neg = true; ++i; }
    std::string digits;
    long long point = -1;
    for (; i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.'); ++i) {
        if (t[i] == '.') { if (point >= 0) throw bad(); point = static_cast<long long>(digits.size()); }
        else digits.push_back(t[i]);
    }
    if (digits.empty()) throw bad();
    if (point < 0) point = static_cast<long long>(digits.size());
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
        ++i;
        bool eneg = false;
        if (i < t.size() && (t[i] == '+' || t[i] == '-')) eneg = t[i++] == '-';
        long long e = 0;
        if (i >= t.size()) throw bad();
        for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
            e = e * 10 + (t[i] - '0');
            if (e > 100000) throw Error(ErrorCode::argument, "number bound out of range: " + std::string(t));
        }
        point += eneg ? -e : e;
    }
    if (i != t.size()) throw bad();
    if (point < 0) { digits.insert(0, static_cast<size_t>(-point), '0'); point = 0; }
    if (point > static_cast<long long>(digits.size())) digits.append(static_cast<size_t>(point) - digits.size(), '0');
    d.ip = digits.substr(0, static_cast<size_t>(point));
    d.fp = digits.substr(static_cast<size_t>(point));
    return normalized(d);
}

int compare(const Decimal& a, const Decimal& b) {
    if (a.neg != b.neg) return a.neg ? -1 : 1;
    int c = compare_mag(a.ip, b.ip);
    if (c == 0) c = a.fp < b.fp ? -1 : a.fp > b.fp ? 1 : 0; // no trailing zeros: string order
    return a.neg ? -c : c;
}

Decimal add_int(const Decimal& d, int delta) {
    Decimal r = d;
    const bool away = (delta > 0) != d.neg; // magnitude grows
    if (away) r.ip = inc_mag(d.ip);
    else if (d.ip == "0") { r.ip = "1"; r.neg = delta < 0; }
    else r.ip = dec_mag(d.ip);
    return normalized(r);
}

Decimal floor_of(const Decimal& d) {
    Decimal r{d.neg, d.ip, ""};
    if (!d.fp.empty() && d.neg) r.ip = inc_mag(d.ip);
    return normalized(r);
}

Decimal ceil_of(const Decimal& d) {
    Decimal r{d.neg, d.ip, ""};
    if (!d.fp.empty() && !d.neg) r.ip = inc_mag(d.ip);
    return normalized(r);
}

std::optional<std::string> integer_range_expr(const std::optional<Decimal>& lo, const std::optional<Decimal>& hi) {
    if (lo && hi && compare(*lo, *hi) > 0) return std::nullopt;
    std::vector<std::string> alts;
    // Negative part: magnitudes in [mlo, mhi].
    if (!lo || lo->neg) {
        const std::string mlo = hi && hi->neg ? hi->ip : "1";
        std::optional<std::string> mhi;
        if (lo) mhi = lo->ip;
        if (!mhi || compare_mag(mlo, *mhi) <= 0) alts.push_back("\"-\" " + nonneg_range(mlo, mhi));
    }
    if (!hi || !hi->neg) {
        const std::string a = lo && !lo->neg ? lo->ip : "0";
        std::optional<std::string> b;
        if (hi) b = hi->ip;
        alts.push_back(nonneg_range(a, b));
    }
    if (alts.empty()) return std::nullopt;
    return join_alts(alts);
}

std::string hex_range_expr(uint32_t lo, uint32_t hi, int width) {
    char a[16], b[16];
    std::snprintf(a, sizeof a, "%0*x", width, static_cast<unsigned>(lo));
    std::snprintf(b, sizeof b, "%0*x", width, static_cast<unsigned>(hi));
    return fixed_range(a, b, 16);
}

namespace {

// Fractions: state of the lower bound (-1: no longer binds; 0..n-1: its digits matched so far;
// n: all matched and the bound is exclusive, so a non-zero digit must follow) and of the upper
// bound (-1: no longer binds; 0..n-1; n: all matched, only zeros may follow).
class FractionRules {
public:
    FractionRules(GbnfWriter& w, std::string prefix, std::string lo, bool lo_excl, std::string hi, bool hi_excl)
        : w_(w), prefix_(std::move(prefix)), lo_(std::move(lo)), hi_(std::move(hi)), lo_excl_(lo_excl), hi_excl_(hi_excl) {}

    static constexpr int kDead = -2;

    int norm_lo(int i) const { return i == static_cast<int>(lo_.size()) && !lo_excl_ ? -1 : i; }
    int norm_hi(int i) const { return i == static_cast<int>(hi_.size()) && hi_excl_ ? kDead : i; }
    bool can_end(int l, int h) const { return l == -1 && h != kDead; }

    std::pair<int, int> step(int l, int h, int d) const {
        int nl = l, nh = h;
        if (l >= 0) {
            const int g = l < static_cast<int>(lo_.size()) ? lo_[static_cast<size_t>(l)] - '0' : 0;
            nl = d > g ? -1 : d == g ? (l < static_cast<int>(lo_.size()) ? norm_lo(l + 1) : l) : kDead;
        }
        if (h >= 0) {
            const int g = h < static_cast<int>(hi_.size()) ? hi_[static_cast<size_t>(h)] - '0' : 0;
            nh = d < g ? -1 : d == g ? (h < static_cast<int>(hi_.size()) ? norm_hi(h + 1) : h) : kDead;
        }
        return {nl, nh};
    }

    // The rule for non-empty digit strings from state (l, h).
    std::string rule(int l, int h) {
        const auto key = std::make_pair(l, h);
        if (auto it = names_.find(key); it != names_.end()) return it->second;
        if (l == -1 && h == -1) return names_[key] = w_.add("digits", "[0-9]+");
        // The two states that loop on themselves, written as loops rather than recursion: all of
        // an exclusive lower bound's digits matched (zeros, then a non-zero digit, then anything),
        // all of an inclusive upper bound's digits matched (zeros only).
        if (l == static_cast<int>(lo_.size()) && h == -1) return names_[key] = w_.add("frac-pos", "\"0\"* [1-9] [0-9]*");
        if (h == static_cast<int>(hi_.size()) && l == -1) return names_[key] = w_.add("zeros", "\"0\"+");
        const std::string name = w_.reserve(prefix_ + "-frac");
        names_[key] = name;
        std::map<std::pair<int, int>, std::pair<int, int>> groups; // target -> digit range
        std::vector<std::pair<std::pair<int, int>, std::pair<int, int>>> order;
        for (int d = 0; d <= 9; ++d) {
            const auto t = step(l, h, d);
            if (t.first == kDead || t.second == kDead) continue;
            if (!order.empty() && order.back().first == t && order.back().second.second == d - 1)
                order.back().second.second = d;
            else
                order.push_back({t, {d, d}});
        }
        std::vector<std::string> alts;
        for (const auto& [t, r] : order) {
            std::string a = digit_class(r.first, r.second, 10);
            if (t.first == -1 && t.second == -1) alts.push_back(a + " [0-9]*");
            else alts.push_back(a + " " + rule(t.first, t.second) + (can_end(t.first, t.second) ? "?" : ""));
        }
        std::string body;
        for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
        w_.define(name, body.empty() ? "[^\\u0000-\\U0010FFFF]" : body);
        return name;
    }

private:
    GbnfWriter& w_;
    std::string prefix_, lo_, hi_;
    bool lo_excl_, hi_excl_;
    std::map<std::pair<int, int>, std::string> names_;
};

// The integer part `ip` written out, then the fraction given the bounds' fraction digits.
std::optional<std::string> with_fraction(const std::string& ip, const std::optional<Bound>& lo,
                                         const std::optional<Bound>& hi, GbnfWriter& w, const std::string& prefix) {
    FractionRules fr(w, prefix, lo ? lo->value.fp : "", lo && lo->exclusive, hi ? hi->value.fp : "", hi && hi->exclusive);
    const int l = lo ? fr.norm_lo(0) : -1;
    const int h = hi ? fr.norm_hi(0) : -1;
    if (h == FractionRules::kDead) return std::nullopt;
    const std::string lit = "\"" + ip + "\"";
    const std::string frac = "\".\" " + fr.rule(l, h);
    return fr.can_end(l, h) ? lit + " (" + frac + ")?" : lit + " " + frac;
}

// Non-negative fixed-notation numbers in [lo, hi] (lo present, non-negative).
std::optional<std::string> nonneg_decimal(const Bound& lo, const std::optional<Bound>& hi, GbnfWriter& w,
                                          const std::string& prefix) {
    if (hi && lo.value.ip == hi->value.ip) return with_fraction(lo.value.ip, lo, hi, w, prefix);
    std::vector<std::string> alts;
    if (auto a = with_fraction(lo.value.ip, lo, std::nullopt, w, prefix)) alts.push_back(*a);
    const std::string from = inc_mag(lo.value.ip);
    std::optional<std::string> to;
    if (hi) to = hi->value.ip == "0" ? "-1" : dec_mag(hi->value.ip);
    if (!to || (*to != "-1" && compare_mag(from, *to) <= 0))
        alts.push_back(nonneg_range(from, to) + " (\".\" [0-9]+)?");
    if (hi)
        if (auto a = with_fraction(hi->value.ip, std::nullopt, hi, w, prefix)) alts.push_back(*a);
    if (alts.empty()) return std::nullopt;
    return join_alts(alts);
}

Bound negated(const Bound& b) {
    Bound r = b;
    if (!(r.value.ip == "0" && r.value.fp.empty())) r.value.neg = !r.value.neg;
    return r;
}

} // namespace

std::optional<std::string> decimal_range_expr(const std::optional<Bound>& lo, const std::optional<Bound>& hi,
                                              GbnfWriter& w, const std::string& prefix) {
    const Decimal zero;
    std::vector<std::string> alts;
    // Negative numbers -y: y > 0 (or >= -hi when hi < 0), y <= -lo.
    if (!lo || lo->value.neg) {
        Bound ylo{zero, true};
        if (hi && hi->value.neg) ylo = negated(*hi);
        std::optional<Bound> yhi;
        if (lo) yhi = negated(*lo);
        const int c = yhi ? compare(ylo.value, yhi->value) : -1;
        if (c < 0 || (c == 0 && !ylo.exclusive && !yhi->exclusive))
            if (auto y = nonneg_decimal(ylo, yhi, w, prefix + "-neg")) alts.push_back("\"-\" " + *y);
    }
    if (!hi || !hi->value.neg) {
        Bound xlo{zero, false};
        if (lo && !lo->value.neg) xlo = *lo;
        const int c = hi ? compare(xlo.value, hi->value) : -1;
        if (c < 0 || (c == 0 && !xlo.exclusive && !hi->exclusive))
            if (auto x = nonneg_decimal(xlo, hi, w, prefix)) alts.push_back(*x);
    }
    if (alts.empty()) return std::nullopt;
    return join_alts(alts);
}

} // namespace rwd::grammar::detail

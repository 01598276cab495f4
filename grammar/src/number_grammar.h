// Exact digit grammars for numeric bounds: integers and fixed-notation decimals of any length in
// a range whose sides may be open, closed or absent; fixed-width hexadecimal ranges (\u escapes).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "gbnf_writer.h"

namespace rwd::grammar::detail {

// An exact decimal: sign, integer digits without leading zeros ("0" for zero), fraction digits
// without trailing zeros. Zero is never negative.
struct Decimal {
    bool neg = false;
    std::string ip = "0";
    std::string fp;
    bool is_integer() const { return fp.empty(); }
};

// Parses JSON number text (exponents shifted exactly). Throws rwd::Error (argument) when it is
// not a number or its exponent is beyond +-100000 (such a bound is no bound at all in practice,
// and would cost that many digits).
Decimal parse_decimal(std::string_view text);
int compare(const Decimal& a, const Decimal& b);
Decimal floor_of(const Decimal& d);
Decimal ceil_of(const Decimal& d);
Decimal add_int(const Decimal& d, int delta); // d integer, delta +1 or -1

// One side of a range.
struct Bound {
    Decimal value;
    bool exclusive = false;
};

// GBNF expression for the canonical integers (JSON.stringify's spelling) in [lo, hi]; either side
// absent means unbounded. Returns nullopt when no integer is in the range.
std::optional<std::string> integer_range_expr(const std::optional<Decimal>& lo, const std::optional<Decimal>& hi);

// GBNF expression for the numbers in fixed notation (-?int(.digits)?, any number of digits) in the
// range given by `lo` and `hi` (absent: unbounded); rules for fraction states go into `w`.
// nullopt when the range is empty.
std::optional<std::string> decimal_range_expr(const std::optional<Bound>& lo, const std::optional<Bound>& hi,
                                              GbnfWriter& w, const std::string& prefix);

// GBNF expression for the `width`-digit hexadecimal numbers (either letter case) in [lo, hi].
std::string hex_range_expr(uint32_t lo, uint32_t hi, int width);

} // namespace rwd::grammar::detail

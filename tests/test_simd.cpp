// CPU feature detection (cpuid/xgetbv) against what the kernel reports in /proc/cpuinfo, and the
// SIMD level against /proc/cpuinfo and the compiler's own CPU check.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "rewind/error.h"
#include "rewind/kernels/simd.h"

namespace {

std::set<std::string> proc_cpu_flags() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("flags", 0) != 0) continue;
        std::istringstream ss(line.substr(line.find(':') + 1));
        std::set<std::string> out;
        for (std::string w; ss >> w;) out.insert(w);
        return out;
    }
    return {};
}

TEST(Simd, FeaturesAgreeWithProcCpuinfo) {
    const auto flags = proc_cpu_flags();
    if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line (not Linux x86): nothing to compare with";
    const rwd::CpuFeatures& f = rwd::cpu_features();
    // The kernel lists a feature only when the OS also enables its register state.
    EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
    EXPECT_EQ(f.fma, flags.count("fma") == 1);
    EXPECT_EQ(f.f16c, flags.count("f16c") == 1);
    EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
    EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
    EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
    EXPECT_EQ(f.avx512dq, flags.count("avx512dq") == 1);
    EXPECT_EQ(f.avx512vnni, flags.count("avx512_vnni") == 1);
    EXPECT_EQ(f.avxvnni, flags.count("avx_vnni") == 1);
}

// The level the rule in simd.h gives for what the kernel lists in /proc/cpuinfo, and what the
// compiler's CPU check (__builtin_cpu_supports: its own cpuid and xgetbv reading) says: two
// readings of the CPU independent of cpu_features(), which the level is computed from.
TEST(Simd, LevelFollowsCpuinfo) {
    const auto flags = proc_cpu_flags();
    if (flags.empty()) GTEST_SKIP() << "/proc/cpuinfo has no flags line (not Linux x86): nothing to compare with";
    auto has = [&](const char* flag) { return flags.count(flag) == 1; };
    const bool avx2 = has("avx2") && has("fma") && has("f16c");
    const bool avx512 = avx2 && has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq");
    const bool avxvnni = avx2 && has("avx_vnni");
    std::vector<rwd::SimdLevel> want{rwd::SimdLevel::Scalar};
    if (avx2) want.push_back(rwd::SimdLevel::Avx2);
    if (avxvnni) want.push_back(rwd::SimdLevel::AvxVnni);
    if (avx512) want.push_back(rwd::SimdLevel::Avx512);
    const rwd::SimdLevel best = avx512 ? rwd::SimdLevel::Avx512 : avxvnni ? rwd::SimdLevel::AvxVnni
                                : avx2 ? rwd::SimdLevel::Avx2 : rwd::SimdLevel::Scalar;
    EXPECT_EQ(rwd::detect_simd(), best) << rwd::simd_name(rwd::detect_simd()) << " detected, " << rwd::simd_name(best)
                                        << " from /proc/cpuinfo";
    EXPECT_EQ(rwd::supported_simd_levels(), want);
    EXPECT_TRUE(rwd::simd_supported(rwd::SimdLevel::Scalar));
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::Avx2), avx2);
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::AvxVnni), avxvnni); // not implied by Avx512
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::Avx512), avx512);
    EXPECT_NO_THROW(rwd::require_simd(best));
    for (rwd::SimdLevel l : {rwd::SimdLevel::Avx2, rwd::SimdLevel::AvxVnni, rwd::SimdLevel::Avx512}) {
        if (!rwd::simd_supported(l)) {
            EXPECT_THROW(rwd::require_simd(l), rwd::Error) << rwd::simd_name(l);
        }
    }

#if defined(__x86_64__) || defined(__i386__)
    // The compiler's check (F16C is left out: clang's does not name it). Feature names both GCC
    // 12 and clang 14 know; AVX-VNNI only GCC's (clang 14 refuses the name at compile time).
    __builtin_cpu_init();
    const bool cc_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool cc_avx512 = cc_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::Avx2), cc_avx2 && has("f16c"));
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::Avx512), cc_avx512 && has("f16c"));
    EXPECT_EQ(rwd::cpu_features().avx512vnni, __builtin_cpu_supports("avx512vnni") != 0);
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::AvxVnni), cc_avx2 && has("f16c") && __builtin_cpu_supports("avxvnni"));
#endif
#endif
}

// Names, parsing and the refusal of a value that is no level.
TEST(Simd, NamesAndBadLevels) {
    for (rwd::SimdLevel l : rwd::supported_simd_levels()) {
        EXPECT_TRUE(rwd::simd_supported(l)) << rwd::simd_name(l);
        EXPECT_EQ(rwd::parse_simd(rwd::simd_name(l)), l);
    }
    EXPECT_EQ(rwd::parse_simd("avxvnni"), rwd::SimdLevel::AvxVnni);
    EXPECT_THROW(rwd::parse_simd("avx-512"), rwd::Error);
    EXPECT_THROW(rwd::parse_simd(nullptr), rwd::Error);
    EXPECT_STREQ(rwd::simd_name(static_cast<rwd::SimdLevel>(9)), "unknown");
    EXPECT_FALSE(rwd::simd_supported(static_cast<rwd::SimdLevel>(9)));
    EXPECT_THROW(rwd::require_simd(static_cast<rwd::SimdLevel>(9)), rwd::Error);
}

} // namespace

// CPU feature detection (cpuid/xgetbv) against what the kernel reports in /proc/cpuinfo, and the
// SIMD level derived from it.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

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

TEST(Simd, LevelFollowsFeatures) {
    const rwd::CpuFeatures& f = rwd::cpu_features();
    const bool avx2 = f.avx2 && f.fma && f.f16c;
    const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
    const rwd::SimdLevel want = avx512 ? rwd::SimdLevel::Avx512
                                : avx2 ? (f.avxvnni ? rwd::SimdLevel::AvxVnni : rwd::SimdLevel::Avx2)
                                       : rwd::SimdLevel::Scalar;
    EXPECT_EQ(rwd::detect_simd(), want);
    EXPECT_EQ(rwd::supported_simd_levels().back(), want);
    EXPECT_NO_THROW(rwd::require_simd(want));
    // Each level exactly where its features are (AvxVnni is not implied by Avx512).
    EXPECT_TRUE(rwd::simd_supported(rwd::SimdLevel::Scalar));
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::Avx2), avx2);
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::AvxVnni), avx2 && f.avxvnni);
    EXPECT_EQ(rwd::simd_supported(rwd::SimdLevel::Avx512), avx512);
    for (rwd::SimdLevel l : rwd::supported_simd_levels()) {
        EXPECT_TRUE(rwd::simd_supported(l)) << rwd::simd_name(l);
        EXPECT_EQ(rwd::parse_simd(rwd::simd_name(l)), l);
    }
    EXPECT_FALSE(rwd::simd_supported(static_cast<rwd::SimdLevel>(9)));
    EXPECT_THROW(rwd::require_simd(static_cast<rwd::SimdLevel>(9)), rwd::Error);
}

} // namespace

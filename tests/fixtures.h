// The fixtures folder (REWIND_SHARED_DIR, ../shared beside the checkout) may be missing from a
// clone: a test that needs one of its files and would not otherwise fail naming it skips, saying
// which file it lacks. (ctest reports a test skipped whose output names the missing folder.)
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

// Skips the current test, naming `path`, when that fixture file does not exist.
#define REWIND_NEED_FIXTURE(path)                                                                      \
    do {                                                                                               \
        const std::string rwd_fixture_path_ = (path);                                                  \
        if (!std::filesystem::exists(rwd_fixture_path_))                                               \
            GTEST_SKIP() << "fixture not found: " << rwd_fixture_path_ << " (the fixtures folder, "    \
                         << "REWIND_SHARED_DIR, is missing or incomplete)";                            \
    } while (0)

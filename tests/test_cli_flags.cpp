// Tests of the `rewind` command line's flags: a flag shared by several subcommands has the same
// spelling, type and description in each (the shared option groups of apps/rewind/options.h).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"

namespace {

// One subcommand's declaration of a flag, as its --help shows it (the default aside: the same
// flag may default differently, e.g. serve's temperature is OpenAI's 1).
struct Declared {
    std::string command;
    std::string spelling; // every name, e.g. "-s,--seed"
    std::string type;     // with its check, e.g. "TEXT:{exact,rejection}"
    std::string description;
    bool list = false;    // takes several values
};

// Every long flag of every subcommand, by its name.
std::map<std::string, std::vector<Declared>> flags_by_name(CLI::App& app) {
    std::map<std::string, std::vector<Declared>> by_name;
    for (const CLI::App* cmd : app.get_subcommands([](const CLI::App*) { return true; })) {
        for (const CLI::Option* o : cmd->get_options()) {
            if (o->get_lnames().empty() || o->get_lnames().front() == "help") continue;
            const Declared d{cmd->get_name(), o->get_name(false, true), o->get_type_name(), o->get_description(),
                             o->get_items_expected_max() > 1};
            for (const std::string& n : o->get_lnames()) by_name["--" + n].push_back(d);
        }
    }
    return by_name;
}

// Flags that mean something else in one subcommand, by design.
const std::set<std::pair<std::string, std::string>> kOwnMeaning = {
    {"bench", "--json"},         // writes a report file; generate's prints the result as JSON
    {"grammar", "--text"},       // a text to check against the grammar, not one to tokenize
    {"grammar", "--file"},       // likewise, read from a file (not a prompt)
    {"grammar", "--vocab"},      // a tokenizer for token masks; make-dummy's names the vocabulary to build
    {"make-dummy", "--seed"},    // the random weights' seed, not sampling's
    {"make-dummy", "--threads"}, // threads writing weights (0: all)
    {"tokenize", "--chat"},      // a conversation as JSON; generate's is a switch
};

// bench measures lists of these, each value as the other subcommands take one.
const std::set<std::string> kSwept = {"--spec", "--k", "--tree", "--adaptive", "--concurrency"};

struct CliFlags : ::testing::Test {
    CLI::App app{"rewind"};
    rwd::cli::Runner run;
    void SetUp() override { rwd::cli::register_commands(app, run); }
};

TEST_F(CliFlags, ASharedFlagIsTheSameInEverySubcommand) {
    int compared = 0;
    for (const auto& [name, decls] : flags_by_name(app)) {
        const Declared* ref = nullptr;
        for (const Declared& d : decls)
            if (!kOwnMeaning.contains({d.command, name}) && !(d.command == "bench" && kSwept.contains(name))) ref = &d;
        if (!ref) continue;
        for (const Declared& d : decls) {
            if (&d == ref || kOwnMeaning.contains({d.command, name})) continue;
            ++compared;
            const std::string where = name + " in " + d.command + " and " + ref->command;
            EXPECT_EQ(d.spelling, ref->spelling) << where;
            EXPECT_EQ(d.type, ref->type) << where;
            if (d.command == "bench" && kSwept.contains(name)) {
                if (name != "--adaptive") {
                    EXPECT_TRUE(d.list) << where;
                }
                EXPECT_TRUE(d.description.starts_with(ref->description)) << where << ": " << d.description;
                EXPECT_NE(d.description.find(" (bench: "), std::string::npos) << where;
            } else {
                EXPECT_EQ(d.list, ref->list) << where;
                EXPECT_EQ(d.description, ref->description) << where;
            }
        }
    }
    EXPECT_GT(compared, 80); // the groups are used, not declared once each
}

// Every decoding subcommand takes every sampling flag and the speculation basics; serve's are the
// defaults of requests that omit them.
TEST_F(CliFlags, DecodingSubcommandsTakeEverySamplingAndSpeculationFlag) {
    const auto by_name = flags_by_name(app);
    for (const char* cmd : {"generate", "chat", "batch", "bench", "serve"}) {
        for (const char* flag : {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n",
                                 "--seed", "--threads", "--model", "--spec", "--k", "--tree", "--draft",
                                 "--frequency-penalty", "--presence-penalty", "--logit-bias"}) {
            bool found = false;
            for (const Declared& d : by_name.at(flag)) found = found || d.command == cmd;
            EXPECT_TRUE(found) << cmd << " lacks " << flag;
        }
    }
    for (const char* cmd : {"generate", "chat"})
        for (const char* flag : {"--ref", "--adaptive", "--k-policy", "--verify", "--stop", "--ctx-size", "--numerics"}) {
            bool found = false;
            for (const Declared& d : by_name.at(flag)) found = found || d.command == cmd;
            EXPECT_TRUE(found) << cmd << " lacks " << flag;
        }
}

// Constrained output everywhere text is decoded (serve takes it per request instead).
TEST_F(CliFlags, DecodingSubcommandsTakeTheConstraintFlags) {
    const auto by_name = flags_by_name(app);
    auto takes = [&](const char* cmd, const char* flag) {
        for (const Declared& d : by_name.at(flag))
            if (d.command == cmd) return true;
        return false;
    };
    for (const char* cmd : {"generate", "chat", "batch", "bench", "grammar"})
        for (const char* flag : {"--grammar", "--json-schema", "--regex", "--json-whitespace"})
            EXPECT_TRUE(takes(cmd, flag)) << cmd << " lacks " << flag;
    EXPECT_TRUE(takes("generate", "--logprobs"));
    CLI::App one{"rewind"};
    rwd::cli::Runner r;
    rwd::cli::register_commands(one, r);
    EXPECT_THROW(one.parse("generate -p x --regex a --grammar g.gbnf", false), CLI::ExcludesError);
    EXPECT_THROW(one.parse("generate -p x --json-whitespace loose", false), CLI::ValidationError);
}

// chat --spec checks the name as generate does (a usage error, before anything is loaded).
TEST_F(CliFlags, AnUnknownGuessSourceIsAUsageErrorEverywhere) {
    for (const char* cmd : {"generate", "chat", "batch", "bench", "serve"}) {
        CLI::App one{"rewind"};
        rwd::cli::Runner r;
        rwd::cli::register_commands(one, r);
        EXPECT_THROW(one.parse(std::string(cmd) + " --spec nonsense", false), CLI::ValidationError) << cmd;
    }
}

} // namespace

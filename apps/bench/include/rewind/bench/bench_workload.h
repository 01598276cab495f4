// Workloads for `rewind bench`: prompts with optional reference documents, one JSON object per
// line ({"id", "kind"?, "prompt", "references"?, "max_tokens", and at most one of "json_schema"
// (an object or boolean), "grammar" (GBNF text) or "regex"}), as in shared/workloads/.
#pragma once
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace rwd::bench {

struct WorkItem {
    std::string id;
    std::string kind;                    // "" when the line has none
    std::string workload;                // the file (stem) the item came from, for the JSON report
    std::string prompt;
    std::vector<std::string> references; // documents for reference-copy guessing
    int64_t max_tokens = 0;
    // GBNF the output is constrained to ("" none): the item's "grammar", or its "json_schema"
    // (compact whitespace) or "regex" compiled to GBNF, once per distinct source in a file.
    std::string grammar;
};

// Parses JSON lines from `in`; blank lines are skipped. `source` names the input in errors, which
// are rwd::Error "edit.jsonl:7: ..." (the 1-based line number and what is wrong with it, an
// invalid schema or regex included).
std::vector<WorkItem> parse_workload(std::istream& in, const std::string& source);

// Reads a workload file; throws rwd::Error if it cannot be opened, holds more than
// kMaxWorkloadFileBytes (64 MiB; rewind/file_io.h), is malformed, or is empty.
std::vector<WorkItem> load_workload(const std::string& path);

// The first n items (all of them when n <= 0).
std::vector<WorkItem> take_first(std::vector<WorkItem> items, int64_t n);

} // namespace rwd::bench

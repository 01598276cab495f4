// CompositeSource: first non-empty proposal wins; members that did not answer are still told
// what was accepted, so a draft model that sat out catches up in one pass later.
#include "rewind/speculate/composite_source.h"

#include <algorithm>

#include "rewind/error.h"

namespace rwd::speculate {

CompositeSource::CompositeSource(std::vector<std::unique_ptr<GuessSource>> members)
    : members_(std::move(members)) {
    if (members_.empty()) throw Error("composite source: no member sources");
    for (const auto& m : members_) {
        if (!m) throw Error("composite source: null member source");
        if (!name_.empty()) name_ += '+';
        name_ += m->name();
    }
    answered_.assign(members_.size(), 0);
}

void CompositeSource::reset(const GenerationStart& start) {
    for (auto& m : members_) m->reset(start);
    std::fill(answered_.begin(), answered_.end(), 0);
}

void CompositeSource::propose(std::span<const TokenId> context, int k, Proposal& out) {
    check_k(name(), k);
    const size_t before = out.tokens.size();
    for (size_t i = 0; i < members_.size(); ++i) {
        members_[i]->propose(context, k, out);
        if (out.tokens.size() > before) {
            ++answered_[i];
            return;
        }
    }
}

void CompositeSource::accept(std::span<const TokenId> context) {
    for (auto& m : members_) m->accept(context);
}

} // namespace rwd::speculate

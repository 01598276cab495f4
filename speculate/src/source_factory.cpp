// make_guess_source: validates the whole description first, then builds the members ("auto":
// ref, ngram, draft, cheapest first). A shared draft source is wrapped so the composite can own
// its members while the draft is shared.
#include "rewind/speculate/source_factory.h"

#include "rewind/error.h"

namespace rwd::speculate {
namespace {

// Forwards to a source shared with others (one draft context and cache for many generations).
class SharedSource final : public GuessSource {
public:
    explicit SharedSource(std::shared_ptr<GuessSource> inner) : inner_(std::move(inner)) {}
    std::string_view name() const override { return inner_->name(); }
    void reset(const GenerationStart& start) override { inner_->reset(start); }
    void propose(std::span<const TokenId> context, int k, Proposal& out) override { inner_->propose(context, k, out); }
    void accept(std::span<const TokenId> context) override { inner_->accept(context); }

private:
    std::shared_ptr<GuessSource> inner_;
};

bool has_draft(const SourceSpec& spec) {
    return std::visit([](const auto& p) { return p != nullptr; }, spec.draft);
}

void check_spec(const SourceSpec& spec, const char* name) {
    const std::string who = std::string("guess source '") + name + "': ";
    const bool drafted = has_draft(spec);
    if (spec.suffix_cache && spec.kind != SourceKind::Suffix) throw Error(who + "a suffix cache is only used by 'suffix'");
    switch (spec.kind) {
    case SourceKind::Ngram:
        if (!spec.references.empty()) throw Error(who + "reference documents are only used by 'ref' and 'auto'");
        if (drafted) throw Error(who + "a draft model is only used by 'draft' and 'auto'");
        break;
    case SourceKind::Ref:
        if (spec.references.empty()) throw Error(who + "needs at least one reference document");
        if (drafted) throw Error(who + "a draft model is only used by 'draft' and 'auto'");
        break;
    case SourceKind::Draft:
        if (!drafted) throw Error(who + "needs a draft model");
        if (!spec.references.empty()) throw Error(who + "reference documents are only used by 'ref' and 'auto'");
        break;
    case SourceKind::Auto: break;
    case SourceKind::Suffix:
    case SourceKind::Forced:
        if (!spec.references.empty()) throw Error(who + "reference documents are only used by 'ref' and 'auto'");
        if (drafted) throw Error(who + "a draft model is only used by 'draft' and 'auto'");
        break;
    }
}

} // namespace

void parse_source_kind(std::string_view name, SourceSpec& spec) {
    if (name == "ngram") spec.kind = SourceKind::Ngram;
    else if (name == "ref") spec.kind = SourceKind::Ref;
    else if (name == "draft") spec.kind = SourceKind::Draft;
    else if (name == "suffix") spec.kind = SourceKind::Suffix;
    else if (name == "forced") spec.kind = SourceKind::Forced;
    else if (name == "auto" || name == "auto-first") {
        spec.kind = SourceKind::Auto;
        spec.compose = name == "auto" ? ComposePolicy::Longest : ComposePolicy::First;
    } else {
        std::string choices;
        for (const char* n : kSourceNames) choices += (choices.empty() ? "" : ", ") + std::string(n);
        throw Error("unknown guess source '" + std::string(name) + "' (choose from " + choices + ")");
    }
}

const char* source_kind_name(SourceKind kind, ComposePolicy compose) {
    switch (kind) {
    case SourceKind::Ngram: return "ngram";
    case SourceKind::Ref: return "ref";
    case SourceKind::Draft: return "draft";
    case SourceKind::Auto: return compose == ComposePolicy::First ? "auto-first" : "auto";
    case SourceKind::Suffix: return "suffix";
    case SourceKind::Forced: return "forced";
    }
    return "?";
}

std::unique_ptr<GuessSource> make_guess_source(const SourceSpec& given, const Model& target, int64_t target_capacity) {
    check_spec(given, source_kind_name(given.kind, given.compose));
    if (given.branches < 0)
        throw Error("guess source '" + std::string(source_kind_name(given.kind, given.compose)) +
                    "': branches must be >= 0 (0: the source's own), got " + std::to_string(given.branches));
    SourceSpec spec_copy;
    const SourceSpec* sp = &given;
    if (given.branches > 0) {
        spec_copy = given;
        spec_copy.ngram.branches = spec_copy.ref.branches = spec_copy.suffix.branches = given.branches;
        spec_copy.draft_options.branches = given.branches;
        sp = &spec_copy;
    }
    const SourceSpec& spec = *sp;
    auto make_ref = [&]() -> std::unique_ptr<GuessSource> {
        return std::make_unique<ReferenceSource>(ReferenceSource::from_texts(target.tokenizer(), spec.references, spec.ref));
    };
    auto make_draft = [&]() -> std::unique_ptr<GuessSource> {
        if (const auto* shared = std::get_if<std::shared_ptr<GuessSource>>(&spec.draft))
            return std::make_unique<SharedSource>(*shared);
        return std::make_unique<DraftSource>(std::get<std::shared_ptr<const Model>>(spec.draft), target, target_capacity,
                                             spec.draft_options);
    };
    switch (spec.kind) {
    case SourceKind::Ngram: return std::make_unique<NgramSource>(spec.ngram);
    case SourceKind::Ref: return make_ref();
    case SourceKind::Draft: return make_draft();
    case SourceKind::Auto: {
        std::vector<std::unique_ptr<GuessSource>> members;
        if (!spec.references.empty()) members.push_back(make_ref());
        members.push_back(std::make_unique<NgramSource>(spec.ngram));
        if (has_draft(spec)) members.push_back(make_draft());
        return std::make_unique<CompositeSource>(std::move(members), spec.compose);
    }
    case SourceKind::Suffix: return std::make_unique<SuffixSource>(spec.suffix_cache, spec.suffix);
    case SourceKind::Forced: return std::make_unique<ForcedSource>();
    }
    throw Error("guess source: unknown kind");
}

} // namespace rwd::speculate

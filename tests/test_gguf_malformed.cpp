// Malformed GGUF files, generated from a real model: truncations at every header boundary and at
// random points, corrupted magic/version/counts/lengths/offsets/types/dims/alignment. Each must
// raise rwd::Error that names the file and the problem — never crash or read out of bounds
// (this suite also runs under ASan/UBSan).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <set>

#include "gguf_test_util.h"
#include "rewind/gguf.h"

using namespace rwd;
using namespace gguf_test;

namespace {

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

class Malformed : public ::testing::Test {
protected:
    void SetUp() override {
        original_ = read_file(model_path("aidreams260K.gguf"));
        layout_ = scan(original_);
        path_ = dir_.file("patched.gguf");
        write_file(path_, original_);
        other_path_ = dir_.file("bad.gguf");
    }

    // Writes `bytes` to a fresh file and checks it (see check_file).
    void expect_error(const std::string& bytes, const std::vector<std::string>& words, const std::string& what) {
        write_file(other_path_, bytes);
        check_file(other_path_, words, what);
    }

    // Overwrites bytes of the pristine copy in place, checks it, and restores it: far cheaper than
    // writing a whole copy per case.
    void expect_patched_error(const std::vector<std::pair<uint64_t, std::string>>& patches,
                              const std::vector<std::string>& words, const std::string& what) {
        for (const auto& [at, bytes] : patches) overwrite(at, bytes);
        check_file(path_, words, what);
        for (const auto& [at, bytes] : patches) overwrite(at, original_.substr(at, bytes.size()));
    }
    template <class T>
    void expect_patched_error(uint64_t at, T value, const std::vector<std::string>& words, const std::string& what) {
        expect_patched_error({{at, raw<T>(value)}}, words, what);
    }

    void overwrite(uint64_t at, const std::string& bytes) {
        std::fstream f(path_, std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(static_cast<std::streamoff>(at));
        f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        ASSERT_TRUE(f.good());
    }

    // Truncates a full copy at each cut, longest first, so that each step only shrinks the file.
    void expect_truncations_fail(std::vector<uint64_t> cuts, const std::string& label) {
        std::sort(cuts.rbegin(), cuts.rend());
        std::string path = dir_.file("truncated.gguf");
        write_file(path, original_);
        for (uint64_t at : cuts) {
            ASSERT_LT(at, original_.size());
            std::filesystem::resize_file(path, at);
            std::vector<std::string> words;
            if (at < 4) words = {"truncated|too short"};
            else if (at < layout_.header_end) words = {"truncated|past the end|runs past"};
            else words = {"past the end|truncated"};
            check_file(path, words, label + " at " + std::to_string(at));
        }
    }

    // Opens `path` and checks for a rwd::Error whose message names the file and contains every
    // one of `words` (case-insensitive; "a|b" accepts either).
    void check_file(const std::string& path, const std::vector<std::string>& words, const std::string& what) {
        SCOPED_TRACE(what);
        std::string msg;
        try {
            GgufFile g = GgufFile::open(path);
            ADD_FAILURE() << what << ": opened without error (" << g.tensors().size() << " tensors)";
            return;
        } catch (const Error& e) {
            msg = e.what();
        } catch (const std::exception& e) {
            ADD_FAILURE() << what << ": threw a non-rewind exception: " << e.what();
            return;
        }
        EXPECT_NE(msg.find(path), std::string::npos) << what << ": message does not name the file: " << msg;
        std::string lm = lower(msg);
        for (const std::string& w : words) {
            bool found = false;
            size_t start = 0;
            while (start <= w.size()) {
                size_t bar = w.find('|', start);
                std::string alt = w.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
                if (lm.find(lower(alt)) != std::string::npos) found = true;
                if (bar == std::string::npos) break;
                start = bar + 1;
            }
            EXPECT_TRUE(found) << what << ": message lacks '" << w << "': " << msg;
        }
        ++checked_;
    }

    // The original file re-serialized with edits.
    Builder builder() const { return Builder::load(model_path("aidreams260K.gguf")); }

    const Layout::Tensor& tensor(const std::string& name) const {
        for (const Layout::Tensor& t : layout_.tensors)
            if (t.name == name) return t;
        throw std::runtime_error("fixture lacks " + name);
    }

    TempDir dir_;
    std::string path_;       // a pristine copy of the model, patched in place
    std::string other_path_; // for whole files written per case
    std::string original_;
    Layout layout_;
    int checked_ = 0;
};

} // namespace

TEST_F(Malformed, OriginalAndRoundTripAreValid) {
    write_file(path_, original_);
    EXPECT_NO_THROW(GgufFile::open(path_));
    builder().write(path_);
    GgufFile g = GgufFile::open(path_);
    EXPECT_EQ(g.tensors().size(), 39u);
    EXPECT_EQ(g.metadata().size(), 19u);
}

TEST_F(Malformed, TruncatedAtEveryBoundary) {
    std::set<uint64_t> cuts = {0, 1, 3, 4, 7, 8, 12, 16, 20, 24};
    for (const Layout::Kv& k : layout_.kvs) {
        for (uint64_t at : {k.start, k.start + 4, k.start + 8, k.start + 9, k.type_at - 1, k.type_at,
                            k.type_at + 2, k.value_at, k.value_at + 1, k.end - 1})
            cuts.insert(at);
        if (k.type == ARR) // inside the element type, the count, the first elements
            for (uint64_t d : {2, 4, 8, 12, 13, 16, 20, 21, 30}) cuts.insert(k.value_at + d);
    }
    for (const Layout::Tensor& t : layout_.tensors)
        for (uint64_t at : {t.start, t.start + 5, t.start + 8, t.n_dims_at, t.n_dims_at + 2, t.dims_at,
                            t.dims_at + 3, t.type_at, t.type_at + 1, t.offset_at, t.offset_at + 7})
            cuts.insert(at);
    cuts.insert(layout_.header_end);
    cuts.insert(layout_.header_end + 1);
    cuts.insert(layout_.data_start);
    cuts.insert(layout_.data_start + 1);
    for (const Layout::Tensor& t : layout_.tensors) {
        uint64_t begin = layout_.data_start + t.offset;
        cuts.insert(begin);
        cuts.insert(begin + 1);
        if (begin > 0) cuts.insert(begin - 1);
    }
    cuts.insert(original_.size() - 1);
    expect_truncations_fail(std::vector<uint64_t>(cuts.begin(), cuts.end()), "truncated");
    EXPECT_GT(checked_, 300);
}

TEST_F(Malformed, TruncatedAtRandomPoints) {
    std::mt19937_64 rng(20240607);
    std::uniform_int_distribution<uint64_t> in_header(0, layout_.header_end - 1);
    std::uniform_int_distribution<uint64_t> anywhere(0, original_.size() - 1);
    std::vector<uint64_t> cuts;
    for (int i = 0; i < 200; ++i) cuts.push_back(i < 150 ? in_header(rng) : anywhere(rng));
    expect_truncations_fail(cuts, "random truncation");
    EXPECT_GE(checked_, 200);
}

TEST_F(Malformed, BadMagic) {
    for (const char* magic : {"GGUG", "FUGG", "\0\0\0\0", "GGML", "ggu"}) {
        expect_patched_error({{0, std::string(magic, 4)}}, {"magic"}, std::string("magic ") + magic);
    }
    expect_error("PK\x03\x04 this is a zip file, not a model", {"magic"}, "zip");
}

TEST_F(Malformed, UnknownVersion) {
    for (uint32_t v : {0u, 1u, 4u, 99u, 0xFFFFFFFFu})
        expect_patched_error<uint32_t>(4, v, {"version"}, "version " + std::to_string(v));
    expect_patched_error<uint32_t>(4, 0x03000000u, {"big-endian"}, "byte-swapped version");
}

TEST_F(Malformed, HugeCounts) {
    for (uint64_t n : {~0ull, 1ull << 63, 1ull << 40, 1000000ull, 40ull}) {
        expect_patched_error<uint64_t>(8, n, {"tensor"}, "n_tensors " + std::to_string(n));
    }
    for (uint64_t n : {~0ull, 1ull << 63, 1ull << 40, 100000ull, 20ull}) {
        expect_patched_error<uint64_t>(16, n, {"metadata|truncated|past the end|value type"},
                     "n_kv " + std::to_string(n));
    }
    // Array lengths: the token list (strings), the scores (float32), the token types (int32).
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"}) {
        const Layout::Kv* k = layout_.kv(key);
        ASSERT_TRUE(k);
        for (uint64_t n : {~0ull, 1ull << 62, 1ull << 33, 10000000ull, 513ull}) {
            expect_patched_error<uint64_t>(k->value_at + 4, n, {"tokenizer.ggml|metadata"},
                         std::string(key) + " length " + std::to_string(n));
        }
    }
}

TEST_F(Malformed, StringLengthsPastTheEnd) {
    const uint64_t size = original_.size();
    for (uint64_t n : std::vector<uint64_t>{~0ull, 1ull << 63, size, size - 20}) {
        // The first key's length.
        expect_patched_error<uint64_t>(layout_.kvs[0].start, n, {"string length|truncated|past the end"},
                     "key length " + std::to_string(n));
        // A string value (general.name).
        const Layout::Kv* name = layout_.kv("general.name");
        expect_patched_error<uint64_t>(name->value_at, n, {"general.name"},
                     "general.name length " + std::to_string(n));
        // A string inside an array: tokens[0].
        const Layout::Kv* tokens = layout_.kv("tokenizer.ggml.tokens");
        expect_patched_error<uint64_t>(tokens->value_at + 12, n, {"tokenizer.ggml.tokens"},
                     "tokens[0] length " + std::to_string(n));
        // A tensor name.
        expect_patched_error<uint64_t>(layout_.tensors[5].start, n, {"tensor"},
                     "tensor name length " + std::to_string(n));
    }
}

TEST_F(Malformed, TensorOffsetsOutsideTheFile) {
    const uint64_t data_size = original_.size() - layout_.data_start;
    const Layout::Tensor& t = tensor("blk.2.attn_q.weight");
    for (uint64_t off : std::vector<uint64_t>{data_size, data_size - 32, data_size + 4096, (~0ull) & ~31ull, 1ull << 62}) {
        std::string m = "offset " + std::to_string(off);
        expect_patched_error<uint64_t>(t.offset_at, off, {"blk.2.attn_q.weight", "past the end"}, m);
    }
    // In range but on top of another tensor.
    expect_patched_error<uint64_t>(t.offset_at, tensor("blk.2.attn_k.weight").offset,
                 {"blk.2.attn_", "overlap"}, "overlapping tensors");
}

TEST_F(Malformed, MisalignedOffsets) {
    const Layout::Tensor& t = tensor("output_norm.weight");
    for (uint64_t delta : {1ull, 4ull, 16ull, 31ull})
        expect_patched_error<uint64_t>(t.offset_at, t.offset + delta, {"output_norm.weight", "align"},
                     "offset +" + std::to_string(delta));
}

TEST_F(Malformed, UnknownTensorType) {
    const Layout::Tensor& t = tensor("blk.0.attn_v.weight");
    for (uint32_t type : {4u, 5u, 16u, 23u, 29u, 31u, 39u, 1000u, 0xFFFFFFFFu})
        expect_patched_error<uint32_t>(t.type_at, type, {"blk.0.attn_v.weight", "type"},
                     "tensor type " + std::to_string(type));
    // A known block type whose block does not divide the row (64-wide rows, 256-element K-blocks).
    expect_patched_error<uint32_t>(t.type_at, static_cast<uint32_t>(TensorType::Q4_K),
                 {"blk.0.attn_v.weight", "block"}, "Q4_K rows of 64");
}

TEST_F(Malformed, UnknownValueType) {
    const Layout::Kv* k = layout_.kv("llama.block_count");
    for (uint32_t type : {13u, 14u, 100u, 0xFFFFFFFFu})
        expect_patched_error<uint32_t>(k->type_at, type, {"llama.block_count", "type"},
                     "value type " + std::to_string(type));
    const Layout::Kv* tokens = layout_.kv("tokenizer.ggml.tokens");
    for (uint32_t type : {13u, 0xFFFFFFFFu})
        expect_patched_error<uint32_t>(tokens->value_at, type, {"tokenizer.ggml.tokens", "type"},
                     "array element type " + std::to_string(type));
}

TEST_F(Malformed, DimsOverflow) {
    const Layout::Tensor& t = tensor("token_embd.weight"); // 2-D F32
    struct Case { uint64_t d0, d1; const char* word; };
    const Case cases[] = {
        {1ull << 32, 1ull << 32, "overflow"},         // element count wraps uint64
        {1ull << 63, 2, "overflow"},                  // a dim past int64
        {~0ull, 1, "overflow"},
        {3ull << 61, 2, "overflow"},                  // elements wrap int64
        {1ull << 31, 1ull << 31, "overflow"},         // 2^62 elements fit, 2^64 bytes do not
        {64, 1ull << 40, "past the end"},             // huge but representable: runs past the file
    };
    for (const Case& c : cases) {
        expect_patched_error({{t.dims_at, raw<uint64_t>(c.d0)}, {t.dims_at + 8, raw<uint64_t>(c.d1)}},
                             {"token_embd.weight", c.word}, "dims " + std::to_string(c.d0) + "x" + std::to_string(c.d1));
    }
    // n_dims out of range: 0, above ggml's 4, and absurd.
    for (uint32_t n : {0u, 5u, 0xFFFFFFFFu})
        expect_patched_error<uint32_t>(t.n_dims_at, n, {"token_embd.weight", "n_dims"},
                     "n_dims " + std::to_string(n));
}

TEST_F(Malformed, BadAlignment) {
    struct Case { uint32_t type; std::string value; const char* word; };
    const Case cases[] = {
        {U32, raw<uint32_t>(0), "power of two"},
        {U32, raw<uint32_t>(3), "power of two"},
        {U32, raw<uint32_t>(48), "power of two"},
        {I32, raw<int32_t>(-32), "power of two"},
        {U64, raw<uint64_t>(1ull << 63), "past the end|overflow"},
        {U32, raw<uint32_t>(512), "align"}, // a power of two the tensor offsets do not respect
        {STR, raw_str("32"), "type"},
        {F32, raw<float>(32.0f), "type"},
    };
    for (const Case& c : cases) {
        Builder b = builder();
        b.set("general.alignment", c.type, c.value);
        expect_error(b.serialize(), {"alignment|data section", c.word}, "alignment " + std::string(c.word));
    }
}

TEST_F(Malformed, StructuralOddities) {
    {
        Builder b = builder();
        b.kvs.push_back(b.kvs[3]);
        expect_error(b.serialize(), {"duplicate", b.kvs[3].key}, "duplicate key");
    }
    {
        Builder b = builder();
        b.tensors.push_back(b.tensors[7]);
        expect_error(b.serialize(), {"duplicate", b.tensors[7].name}, "duplicate tensor");
    }
    {
        Builder b = builder();
        b.set("flag", BOOL, raw<uint8_t>(2));
        expect_error(b.serialize(), {"flag", "bool"}, "bool value 2");
    }
    {
        // Arrays nested 1000 deep: must be refused without exhausting the stack.
        Builder b = builder();
        Enc e;
        for (int i = 0; i < 1000; ++i) e.u32(ARR).u64(1);
        e.u32(U8).u64(0);
        b.set("deep", ARR, e.b);
        expect_error(b.serialize(), {"deep", "nested"}, "deeply nested arrays");
    }
    {
        // A nested array whose inner length runs past the end.
        Builder b = builder();
        Enc e;
        e.u32(ARR).u64(2).u32(U32).u64(1ull << 60);
        b.set("inner", ARR, e.b);
        expect_error(b.serialize(), {"inner", "array length"}, "huge inner array");
    }
    {
        // More arrays of arrays than bytes left.
        Builder b = builder();
        Enc e;
        e.u32(ARR).u64(1ull << 59);
        b.set("outer", ARR, e.b);
        expect_error(b.serialize(), {"outer", "array length"}, "huge array of arrays");
    }
    {
        // A tensor whose data is not there at all: the file ends right after the header.
        Builder b = builder();
        std::string bytes = b.serialize();
        expect_error(bytes.substr(0, layout_.header_end), {"past the end"}, "no data section");
    }
    expect_error("", {"truncated|too short"}, "empty file");
    expect_error("GGUF", {"truncated"}, "magic only");
}

TEST_F(Malformed, RandomByteCorruptionNeverCrashes) {
    // Flipping header bytes may or may not yield a valid file; either way: no crash, and any
    // failure is a rwd::Error naming the file.
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<uint64_t> pos(0, layout_.header_end - 1);
    std::uniform_int_distribution<int> byte(0, 255);
    int errors = 0;
    for (int i = 0; i < 300; ++i) {
        std::vector<std::pair<uint64_t, std::string>> patches;
        for (int k = 0; k < 3; ++k) patches.push_back({pos(rng), std::string(1, static_cast<char>(byte(rng)))});
        for (const auto& [at, bytes] : patches) overwrite(at, bytes);
        try {
            GgufFile g = GgufFile::open(path_);
            // Whatever opened must have in-bounds views.
            for (const GgufTensorInfo& t : g.tensors()) {
                volatile uint8_t sink = 0;
                if (t.n_bytes) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
            }
        } catch (const Error& e) {
            ++errors;
            EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
        }
        // Restore in reverse so that repeated positions get their original byte back.
        for (auto it = patches.rbegin(); it != patches.rend(); ++it) overwrite(it->first, original_.substr(it->first, 1));
    }
    EXPECT_GT(errors, 0);
}

TEST_F(Malformed, NotAFile) {
    EXPECT_THROW(GgufFile::open(dir_.file("does-not-exist.gguf")), Error);
    try {
        GgufFile::open(dir_.file("does-not-exist.gguf"));
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does-not-exist.gguf"), std::string::npos);
    }
    std::filesystem::create_directories(dir_.file("a-directory.gguf"));
    EXPECT_THROW(GgufFile::open(dir_.file("a-directory.gguf")), Error);
}

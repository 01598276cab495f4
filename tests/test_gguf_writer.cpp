// GGUF writer: round trips through the reader (every value type, nested arrays, every tensor type,
// other alignments, data streamed in odd pieces, a real model re-written byte for byte) and its
// failure rules (bad path, disk full, short data): an rwd::Error and nothing under the final name.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "gguf_test_util.h"
#include "rewind/gguf.h"
#include "rewind/gguf_writer.h"

using namespace rwd;
using namespace gguf_test;

namespace {

std::shared_ptr<GgufArray> array(GgufValueType t, std::vector<GgufValue> v) {
    return std::make_shared<GgufArray>(GgufArray{t, std::move(v)});
}

// Files in `dir` other than `keep`: a failed write must leave no temporary file behind.
std::vector<std::string> listing(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
    return out;
}

std::string bytes_of(const GgufTensorInfo& t) { return std::string(reinterpret_cast<const char*>(t.data), t.n_bytes); }

} // namespace

TEST(GgufWriter, EveryValueTypeRoundTrips) {
    TempDir dir;
    const std::string path = dir.file("kv.gguf");
    {
        GgufWriter w(path);
        w.add("u8", uint8_t{200});
        w.add("i8", int8_t{-100});
        w.add("u16", uint16_t{60000});
        w.add("i16", int16_t{-30000});
        w.add("u32", uint32_t{4000000000u});
        w.add("i32", int32_t{-2000000000});
        w.add("f32", 1.5f);
        w.add("bool", true);
        w.add("str", std::string("h\xc3\xa9llo\n"));
        w.add("u64", uint64_t{1} << 60);
        w.add("i64", -(int64_t{1} << 60));
        w.add("f64", 0.1);
        w.add("arr.str", array(GgufValueType::String, {std::string("a"), std::string(""), std::string("ccc")}));
        w.add("arr.f32", array(GgufValueType::Float32, {1.0f, -2.0f}));
        w.add("arr.i32", array(GgufValueType::Int32, {int32_t{1}, int32_t{-7}}));
        w.add("arr.empty", array(GgufValueType::UInt8, {}));
        w.add("arr.nested", array(GgufValueType::Array, {array(GgufValueType::Bool, {true, false}),
                                                         array(GgufValueType::Bool, {})}));
        EXPECT_TRUE(w.has("u8"));
        w.finish();
        EXPECT_EQ(w.file_size(), std::filesystem::file_size(path));
    }
    GgufFile g = GgufFile::open(path);
    EXPECT_EQ(g.version(), 3u);
    EXPECT_EQ(g.metadata().size(), 17u);
    EXPECT_EQ(g.tensors().size(), 0u);
    EXPECT_EQ(std::get<uint8_t>(g.find("u8")->value), 200);
    EXPECT_EQ(std::get<int8_t>(g.find("i8")->value), -100);
    EXPECT_EQ(std::get<uint16_t>(g.find("u16")->value), 60000);
    EXPECT_EQ(std::get<int16_t>(g.find("i16")->value), -30000);
    EXPECT_EQ(*g.get_uint("u32"), 4000000000u);
    EXPECT_EQ(*g.get_int("i32"), -2000000000);
    EXPECT_EQ(*g.get_float("f32"), 1.5);
    EXPECT_EQ(*g.get_bool("bool"), true);
    EXPECT_EQ(*g.get_string("str"), "h\xc3\xa9llo\n");
    EXPECT_EQ(*g.get_uint("u64"), uint64_t{1} << 60);
    EXPECT_EQ(*g.get_int("i64"), -(int64_t{1} << 60));
    EXPECT_EQ(*g.get_float("f64"), 0.1);
    EXPECT_EQ(*g.get_string_array("arr.str"), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(*g.get_float_array("arr.f32"), (std::vector<float>{1.0f, -2.0f}));
    EXPECT_EQ(*g.get_int_array("arr.i32"), (std::vector<int64_t>{1, -7}));
    const auto& nested = std::get<std::shared_ptr<GgufArray>>(g.find("arr.nested")->value);
    ASSERT_EQ(nested->values.size(), 2u);
    EXPECT_EQ(std::get<std::shared_ptr<GgufArray>>(nested->values[0])->values.size(), 2u);
    // Keys come back in the order written.
    EXPECT_EQ(g.metadata().front().key, "u8");
    EXPECT_EQ(g.metadata().back().key, "arr.nested");
}

TEST(GgufWriter, TensorsOfEveryTypeStreamedInOddPieces) {
    const TensorType types[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0,
                                TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                                TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                TensorType::Q6_K, TensorType::Q8_K, TensorType::I8,   TensorType::I32};
    for (uint64_t alignment : {32u, 64u, 1u}) {
        SCOPED_TRACE(alignment);
        TempDir dir;
        const std::string path = dir.file("t.gguf");
        std::vector<std::string> data;
        {
            GgufWriter w(path, alignment);
            w.add("general.architecture", std::string("test"));
            int i = 0;
            for (TensorType t : types) {
                std::vector<uint64_t> dims{256, static_cast<uint64_t>(1 + i % 3)};
                if (i % 4 == 3) dims.push_back(2);
                std::string name = "t";
                name += std::to_string(i); // (not "t" + ...: g++ 12 warns -Wrestrict on that falsely)
                w.add_tensor(name, t, dims);
                std::string bytes(GgufWriter::tensor_bytes(t, dims), '\0');
                for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>(k * 31 + i);
                data.push_back(bytes);
                ++i;
            }
            w.add_tensor("vec", TensorType::F32, {3}); // 12 bytes: the next offset needs padding
            data.push_back(std::string("abcdefghijkl"));
            // One stream of all tensors, cut into pieces that straddle tensor boundaries.
            std::string all;
            for (const auto& d : data) all += d;
            size_t off = 0, piece = 1;
            while (off < all.size()) {
                const size_t k = std::min(piece, all.size() - off);
                w.write(all.data() + off, k);
                off += k;
                piece = piece * 3 + 1;
            }
            w.finish();
            EXPECT_EQ(w.file_size(), std::filesystem::file_size(path));
        }
        GgufFile g = GgufFile::open(path);
        EXPECT_EQ(g.alignment(), alignment);
        ASSERT_EQ(g.tensors().size(), data.size());
        for (size_t i = 0; i + 1 < data.size(); ++i) {
            const GgufTensorInfo& ti = g.tensors()[i];
            EXPECT_EQ(ti.name, std::string("t") + std::to_string(i));
            EXPECT_EQ(ti.type, types[i]);
            EXPECT_EQ(ti.dims[0], 256u);
            EXPECT_EQ(ti.offset % alignment, 0u);
            EXPECT_EQ(bytes_of(ti), data[i]) << ti.name;
        }
        EXPECT_EQ(bytes_of(*g.find_tensor("vec")), "abcdefghijkl");
    }
}

// A real llama.cpp file, re-written key by key and tensor by tensor, comes out byte-identical.
TEST(GgufWriter, RewritesARealModelByteForByte) {
    const std::string src = model_path("pycode-4m-q8_0.gguf");
    GgufFile in = GgufFile::open(src);
    TempDir dir;
    const std::string path = dir.file("copy.gguf");
    GgufWriter w(path);
    for (const GgufKeyValue& kv : in.metadata()) w.add(kv);
    for (const GgufTensorInfo& t : in.tensors()) w.add_tensor(t.name, t.type, t.dims);
    for (const GgufTensorInfo& t : in.tensors()) w.write(t.data, t.n_bytes);
    w.finish();
    EXPECT_EQ(read_file(path), read_file(src));
}

TEST(GgufWriter, RefusesBadInputWithClearErrors) {
    TempDir dir;
    const std::string path = dir.file("bad.gguf");
    GgufWriter w(path);
    w.add("a", 1.0f);
    EXPECT_NE(error_of([&] { w.add("a", 2.0f); }).find("duplicate key"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add("", 2.0f); }).find("empty"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add("arr", array(GgufValueType::Int32, {1.0f})); }).find("array element 0"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.add(GgufKeyValue{"k", GgufValueType::UInt32, std::string("x")}); }).find("declared type"),
              std::string::npos);
    EXPECT_NE(error_of([&] { w.add("general.alignment", uint32_t{64}); }).find("alignment"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("q", TensorType::Q8_0, {33, 2}); }).find("not a multiple"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("z", TensorType::F32, {4, 0}); }).find("dim 0"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("d", TensorType::F32, {}); }).find("dims"), std::string::npos);
    EXPECT_NE(error_of([&] { w.add_tensor("u", static_cast<TensorType>(99), {4}); }).find("unknown type"),
              std::string::npos);
    w.add_tensor("x", TensorType::F32, {4});
    EXPECT_NE(error_of([&] { w.add_tensor("x", TensorType::F32, {4}); }).find("duplicate name"), std::string::npos);
    EXPECT_NE(error_of([] { GgufWriter bad("/tmp/x.gguf", 48); }).find("power of two"), std::string::npos);
    // Too many bytes: refused, and the temporary file is gone at once.
    const float v[5] = {};
    EXPECT_NE(error_of([&] { w.write(v, sizeof v); }).find("more tensor data"), std::string::npos);
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_TRUE(listing(dir.file("")).empty());
}

TEST(GgufWriter, ShortDataLeavesNoFile) {
    TempDir dir;
    const std::string path = dir.file("short.gguf");
    GgufWriter w(path);
    w.add_tensor("x", TensorType::F32, {4});
    const float v[3] = {};
    w.write(v, sizeof v);
    const std::string err = error_of([&] { w.finish(); });
    EXPECT_NE(err.find("tensor 'x' has 12 of its 16 bytes written"), std::string::npos) << err;
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_TRUE(listing(dir.file("")).empty());
}

TEST(GgufWriter, AbandonedWriterLeavesNoFile) {
    TempDir dir;
    {
        GgufWriter w(dir.file("gone.gguf"));
        w.add_tensor("x", TensorType::F32, {4});
        w.write("abcd", 4);
    }
    EXPECT_TRUE(listing(dir.file("")).empty());
}

TEST(GgufWriter, BadPathIsAnError) {
    const std::string err = error_of([] { GgufWriter w("/nonexistent-dir-rewind/x.gguf"); });
    EXPECT_NE(err.find("/nonexistent-dir-rewind/x.gguf: cannot create a temporary file beside it"),
              std::string::npos)
        << err;
    // The final name is a directory: the rename fails, and the temporary file goes.
    TempDir dir;
    std::filesystem::create_directory(dir.file("sub"));
    GgufWriter w(dir.file("sub"));
    w.add("a", 1.0f);
    EXPECT_NE(error_of([&] { w.finish(); }).find("rename into place failed"), std::string::npos);
    EXPECT_EQ(listing(dir.file("")), std::vector<std::string>{"sub"});
}

// A full disk, simulated by a file size limit (writes past it fail with EFBIG as a full disk fails
// with ENOSPC): an error naming the file, and nothing left behind.
TEST(GgufWriter, DiskFullIsAnErrorAndLeavesNoFile) {
    TempDir dir;
    const std::string path = dir.file("big.gguf");
    struct rlimit old {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 1 << 20;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    std::string err;
    {
        GgufWriter w(path);
        w.add_tensor("x", TensorType::F32, {1024, 1024}); // 4 MiB, past the 1 MiB limit
        std::vector<float> row(1024, 1.0f);
        err = error_of([&] {
            for (int i = 0; i < 1024; ++i) w.write(row.data(), row.size() * sizeof(float));
            w.finish();
        });
    }
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    EXPECT_NE(err.find(path + ": write failed: "), std::string::npos) << err;
    EXPECT_NE(err.find("File too large"), std::string::npos) << err; // EFBIG, named
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_TRUE(listing(dir.file("")).empty());
}

// A write that fails over an existing file (disk full, simulated as above) leaves that file
// byte for byte as it was, and no temporary file beside it: the new file only ever replaces the
// old one whole, in finish().
TEST(GgufWriter, FailedRewriteKeepsThePreviousFile) {
    TempDir dir;
    const std::string path = dir.file("model.gguf");
    {
        GgufWriter w(path);
        w.add("general.architecture", std::string("old"));
        w.add_tensor("x", TensorType::F32, {4});
        const float v[4] = {1, 2, 3, 4};
        w.write(v, sizeof v);
        w.finish();
    }
    const std::string old = read_file(path);
    ASSERT_FALSE(old.empty());
    struct rlimit saved {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    auto old_handler = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = saved;
    lim.rlim_cur = 1 << 20;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    std::string err;
    {
        GgufWriter w(path);
        w.add("general.architecture", std::string("new"));
        w.add_tensor("x", TensorType::F32, {1024, 1024}); // 4 MiB, past the 1 MiB limit
        std::vector<float> row(1024, 1.0f);
        err = error_of([&] {
            for (int i = 0; i < 1024; ++i) w.write(row.data(), row.size() * sizeof(float));
            w.finish();
        });
        EXPECT_EQ(listing(dir.file("")), std::vector<std::string>{"model.gguf"}) << "temporary file removed at once";
        EXPECT_NE(error_of([&] { w.finish(); }).find("after a failure"), std::string::npos);
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old_handler);
    EXPECT_NE(err.find(path + ": write failed: "), std::string::npos) << err;
    EXPECT_NE(err.find("the previous file, if any, is unchanged"), std::string::npos) << err;
    EXPECT_EQ(read_file(path), old);
    EXPECT_EQ(GgufFile::open(path).get_string("general.architecture"), "old");
    EXPECT_EQ(listing(dir.file("")), std::vector<std::string>{"model.gguf"});
}

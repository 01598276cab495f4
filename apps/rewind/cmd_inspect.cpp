// `rewind inspect`: what a GGUF file holds — architecture, hyperparameters, tokenizer, tensors —
// and, with --metadata, every key/value. Works on vocabulary-only files too, and on any valid GGUF
// file rewind cannot run (unknown architecture, tensor types it cannot compute with): it says why.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <set>
#include <string>

#include "commands.h"
#include "options.h"
#include "rewind/chat.h"
#include "rewind/error.h"
#include "rewind/gguf.h"
#include "rewind/kernels/ops.h"
#include "rewind/kernels/packed.h"
#include "rewind/llama_model.h"
#include "rewind/model.h"
#include "rewind/tokenizer.h"

namespace rwd::cli {

namespace {

struct InspectOptions {
    std::string model;
    bool metadata = false;
};

std::string human_bytes(uint64_t n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

std::string human_count(uint64_t n) {
    char buf[32];
    if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.2f G", static_cast<double>(n) / 1e9);
    else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.2f M", static_cast<double>(n) / 1e6);
    else if (n >= 1000ull) std::snprintf(buf, sizeof buf, "%.1f K", static_cast<double>(n) / 1e3);
    else std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
    return buf;
}

std::string shape_string(const std::vector<uint64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
}

std::string pad(std::string s, size_t width) {
    if (s.size() < width) s.append(width - s.size(), ' ');
    return s;
}

void row(const std::string& label, const std::string& value) {
    std::cout << "  " << pad(label, 22) << value << "\n";
}

// Type column of the metadata dump: "uint32", "array[string; 4096]", ...
std::string type_label(const GgufKeyValue& kv) {
    if (kv.type != GgufValueType::Array) return gguf_value_type_name(kv.type);
    const auto& arr = std::get<std::shared_ptr<GgufArray>>(kv.value);
    return std::string("array[") + gguf_value_type_name(arr->type) + "; " +
           std::to_string(arr->values.size()) + "]";
}

void print_metadata(const GgufFile& g) {
    std::cout << "metadata (" << g.metadata().size() << " keys):\n";
    size_t key_w = 0, type_w = 0;
    for (const GgufKeyValue& kv : g.metadata()) {
        key_w = std::max(key_w, kv.key.size());
        type_w = std::max(type_w, type_label(kv).size());
    }
    constexpr size_t kMaxValueChars = 160; // chat templates and the like run to kilobytes
    for (const GgufKeyValue& kv : g.metadata()) {
        std::string v = gguf_value_to_string(kv.value, 8);
        if (v.size() > kMaxValueChars) v = v.substr(0, kMaxValueChars) + "... (" + std::to_string(v.size()) + " chars)";
        std::cout << "  " << pad(kv.key, key_w) << "  " << pad(type_label(kv), type_w) << "  " << v << "\n";
    }
}

std::string token_label(const Tokenizer& tok, TokenId id) {
    if (id < 0) return "none";
    if (!tok.valid(id)) return std::to_string(id) + " (out of range)";
    return std::to_string(id) + " " + gguf_value_to_string(GgufValue(tok.piece(id)));
}

void print_tokenizer(const GgufFile& g, const Tokenizer& tok) {
    std::cout << "tokenizer:\n";
    std::string kind = g.get_string("tokenizer.ggml.model").value_or("?");
    kind += tok.model() == TokenizerModel::Spm ? " (SentencePiece BPE)" : " (byte-level BPE)";
    row("model", kind);
    if (auto pre = g.get_string("tokenizer.ggml.pre")) row("pre-tokenizer", *pre);
    row("vocabulary", std::to_string(tok.n_vocab()) + " tokens");
    row("BOS", token_label(tok, tok.bos()));
    row("EOS", token_label(tok, tok.eos()));
    row("add BOS", tok.add_bos() ? "yes" : "no");
    if (tok.add_eos()) row("add EOS", "yes");
    if (tok.model() == TokenizerModel::Spm) {
        bool from_file = g.find("tokenizer.ggml.add_space_prefix") != nullptr;
        row("add space prefix", std::string(tok.add_space_prefix() ? "yes" : "no") + (from_file ? "" : " (default)"));
    } else {
        row("add space prefix", "no (byte-level BPE)");
    }
    // The chat format rewind formats conversations with (rewind/chat.h), detected from the file's
    // template as `generate --chat` and `tokenize --chat` would detect it.
    if (const auto tmpl = g.get_string("tokenizer.chat_template")) {
        try {
            row("chat format", chat_format_name(detect_chat_format(*tmpl)) + " (from tokenizer.chat_template)");
        } catch (const Error& e) {
            row("chat format", std::string("none: ") + e.what());
        }
    } else {
        row("chat format", "none (no tokenizer.chat_template)");
    }
}

void print_hparams(const LlamaModelFile& mf) {
    const LlamaHparams& hp = mf.hparams();
    const ArchInfo& arch = *hp.arch;
    const LlamaLayerWeights& l0 = mf.weights().layers.at(0);
    std::cout << "hyperparameters:\n";
    row("context length", std::to_string(hp.n_ctx_train));
    row("embedding length", std::to_string(hp.n_embd));
    row("layers", std::to_string(hp.n_layer));
    row("feed-forward length", std::to_string(hp.n_ff));
    row("heads", std::to_string(hp.n_head) + " (head dim " + std::to_string(hp.head_dim()) + ")");
    std::string kv = std::to_string(hp.n_head_kv);
    if (hp.n_head_kv != hp.n_head) kv += " (grouped-query, " + std::to_string(hp.n_head / hp.n_head_kv) + " heads per KV head)";
    row("KV heads", kv);
    std::ostringstream rope;
    rope << (arch.rope == RopeMode::Neox ? "neox (pairs i, i + n/2)" : "norm (adjacent pairs)") << ", " << hp.n_rot
         << " dims, base " << hp.rope_freq_base;
    if (mf.weights().rope_freqs.data) rope << ", frequency factors (rope_freqs)";
    row("rope", rope.str());
    std::ostringstream scaling;
    scaling << hp.rope_scaling;
    if (hp.rope_scaling == "linear") scaling << " (factor " << 1.0f / hp.rope_freq_scale << ")";
    row("rope scaling", scaling.str());
    std::ostringstream swa;
    if (hp.n_swa > 0) {
        swa << hp.n_swa << " positions on layers il % " << hp.swa_pattern << " < " << hp.swa_pattern - 1
            << " (local rope base " << hp.rope_freq_base_swa << ")";
    } else if (hp.n_swa_file > 0) {
        swa << "none (the file says " << hp.n_swa_file << "; not applied, as llama.cpp does for " << hp.architecture << ")";
    } else {
        swa << "none";
    }
    row("sliding window", swa.str());
    std::string attn = l0.wqkv.data ? "fused QKV" : "separate Q, K, V";
    if (l0.bq.data) attn += ", Q/K/V biases";
    if (l0.attn_q_norm.data) attn += ", per-head Q/K RMSNorm";
    if (arch.q_prescaled) attn += ", Q pre-scaled";
    if (l0.post_attn_norm.data) attn += ", post-attention norm";
    row("attention", attn);
    std::string ffn = arch.act == FfnAct::GeluTanh ? "GELU (tanh)" : "SiLU";
    ffn += hp.is_moe() ? " gate, up per expert" : l0.ffn_gate.data ? " gate, up" : " gate+up fused in ffn_up";
    if (l0.post_ffn_norm.data) ffn += ", post-FFN norm";
    row("feed-forward", ffn);
    if (hp.is_moe())
        row("experts", std::to_string(hp.n_expert) + " of width " + std::to_string(hp.n_ff_exp) + ", " +
                           std::to_string(hp.n_expert_used) + " used per token (router " +
                           tensor_type_name(l0.ffn_gate_inp.type) +
                           "; softmax, top " + std::to_string(hp.n_expert_used) +
                           " with ties to the lower index, weights renormalised)");
    if (arch.embd_scaled) row("embeddings", "scaled by sqrt(embedding length)");
    if (hp.final_logit_softcap > 0.0f) row("final logit soft-cap", std::to_string(hp.final_logit_softcap));
    std::ostringstream eps;
    eps << hp.rms_eps;
    row("RMS norm epsilon", eps.str());
    row("vocabulary", std::to_string(hp.n_vocab));
    std::string head = "separate (untied)";
    if (mf.weights().tied_output)
        head = mf.gguf().find_tensor("output.weight") ? "tied (output.weight is a byte copy of token_embd.weight)"
                                                      : "tied to token embeddings";
    row("output head", head);
    char fp[32];
    std::snprintf(fp, sizeof fp, "%016llx", static_cast<unsigned long long>(mf.fingerprint()));
    row("fingerprint", fp);
}

// Tensors whose type rewind cannot compute with are marked.
void print_tensors(const GgufFile& g) {
    const auto& ts = g.tensors();
    if (ts.empty()) {
        std::cout << "tensors: none (vocabulary-only file: it holds a tokenizer but no weights)\n";
        return;
    }
    size_t name_w = 4, type_w = 4, shape_w = 5;
    for (const GgufTensorInfo& t : ts) {
        name_w = std::max(name_w, t.name.size());
        type_w = std::max(type_w, tensor_type_name(t.type).size());
        shape_w = std::max(shape_w, shape_string(t.dims).size());
    }
    std::cout << "tensors (shape in ggml order: row length first):\n";
    std::cout << "  " << pad("name", name_w) << "  " << pad("type", type_w) << "  " << pad("shape", shape_w)
              << "  bytes\n";
    uint64_t total = 0, params = 0;
    for (const GgufTensorInfo& t : ts) {
        std::cout << "  " << pad(t.name, name_w) << "  " << pad(tensor_type_name(t.type), type_w) << "  "
                  << pad(shape_string(t.dims), shape_w) << "  " << t.n_bytes
                  << (llama_weight_type_supported(t.type) ? "" : "  (type not supported by rewind)") << "\n";
        total += t.n_bytes; // cannot overflow: every tensor lies inside the file
        params += t.n_elements;
    }
    std::cout << "  total: " << ts.size() << " tensors, " << human_count(params) << " parameters, "
              << human_bytes(total) << " (" << total << " bytes)\n";
}

// What Model::load's repacking (ModelOptions::repack) costs for this file: every matrix of a
// type repacked_at_load names but the token embedding goes into owned memory and the mapped
// original is released, so resident memory is replaced, not doubled; the 32-blocks widened to the
// Q8_0 layout (Q5_0, Q5_1; Q4_0, Q4_1 only when asked) grow.
void print_repack(const LlamaModelFile& mf) {
    const LlamaWeights& w = mf.weights();
    uint64_t packed = 0, original = 0, widened = 0, widened_from = 0, four = 0, four_packed = 0;
    std::set<std::string> packed_types, widened_types, four_types;
    auto add = [&](const WeightRef& r) {
        if (r.rows <= 0 || r.cols <= 0) return;
        const auto dt = tensor_dtype(r.type);
        if (!dt) return;
        const bool by_default = repacked_at_load(*dt, ModelOptions{});
        if (!by_default && !repacked_at_load(*dt, ModelOptions{.widen_q4 = true})) return;
        const bool q8 = packed_layout(*dt) == PackedLayout::Q8;
        if (r.cols % (q8 ? kQ8Block : 256) != 0) return; // the loader refuses these widths
        const uint64_t n = packed_bytes(*dt, r.rows, r.cols) * static_cast<uint64_t>(r.experts);
        if (!by_default) { // Q4_0 / Q4_1: widened only with ModelOptions::widen_q4 (--widen-q4)
            four += r.n_bytes;
            four_packed += n;
            four_types.insert(dtype_name(*dt));
            return;
        }
        if (q8 && *dt != DType::Q8_0) {
            widened += n;
            widened_from += r.n_bytes;
            widened_types.insert(dtype_name(*dt));
        }
        packed += n;
        original += r.n_bytes;
        packed_types.insert(dtype_name(*dt));
    };
    auto names = [](const std::set<std::string>& types) {
        std::string out;
        for (const std::string& t : types) out += (out.empty() ? "" : "/") + t;
        return out;
    };
    add(w.output);
    for (const LlamaLayerWeights& l : w.layers)
        for (const WeightRef* r : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.ffn_gate_inp,
                                   &l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps})
            add(*r);
    if (packed > 0) {
        std::cout << "repacked at load: " << human_bytes(packed) << " of " << names(packed_types) << " weights (" << packed
                  << " bytes) into memory the model owns, in place of " << human_bytes(original)
                  << " of the mapped file, which is released (--no-repack keeps the file's layout)\n";
        if (widened > 0)
            std::cout << "  of which " << names(widened_types) << " widened to the packed Q8_0 layout: " << human_bytes(widened) << " for "
                      << human_bytes(widened_from) << " in the file (+" << (100 * (widened - widened_from) + widened_from / 2) / widened_from
                      << " %; the same outputs, products at the Q8_0 bodies' speed)\n";
    }
    if (four > 0)
        std::cout << names(four_types) << " weights stay in the file's layout: " << human_bytes(four)
                  << "; --widen-q4 widens them to the packed Q8_0 layout (" << human_bytes(four_packed)
                  << ", the same outputs, faster products)\n";
}

int inspect(const InspectOptions& opt) {
    const std::string path = opt.model.empty() ? default_model_path() : opt.model;
    GgufFile g = GgufFile::open(path);

    // A model is validated in full (shapes, tokenizer) so that inspect also answers "will rewind
    // load this?"; a vocabulary-only file only needs its tokenizer.
    // A file rewind cannot run is still described, with the reason.
    std::unique_ptr<LlamaModelFile> mf;
    std::string cannot_run, tok_error;
    if (!g.tensors().empty()) {
        try {
            mf = LlamaModelFile::open(path);
        } catch (const Error& e) {
            cannot_run = e.what();
        }
    }
    std::unique_ptr<Tokenizer> own_tok;
    const Tokenizer* tok = mf ? &mf->tokenizer() : nullptr;
    if (!tok) {
        try {
            own_tok = Tokenizer::from_gguf(g);
            tok = own_tok.get();
        } catch (const Error& e) {
            tok_error = e.what();
        }
    }

    std::cout << "file:          " << path << "\n";
    std::cout << "format:        GGUF v" << g.version() << ", " << human_bytes(g.file_size()) << " ("
              << g.file_size() << " bytes), alignment " << g.alignment() << ", " << g.metadata().size()
              << " metadata keys, " << g.tensors().size() << " tensors\n";
    std::cout << "architecture:  " << g.get_string("general.architecture").value_or("(not set)") << "\n";
    if (auto name = g.get_string("general.name")) std::cout << "name:          " << *name << "\n";
    std::cout << "\n";

    if (mf) {
        print_hparams(*mf);
        std::cout << "\n";
    }
    if (tok) print_tokenizer(g, *tok);
    else std::cout << "tokenizer: cannot be read: " << tok_error << "\n";
    std::cout << "\n";
    if (opt.metadata || !mf) {
        print_metadata(g);
        std::cout << "\n";
    }
    print_tensors(g);
    if (!g.tensors().empty()) {
        std::cout << "\n";
        if (mf) {
            std::cout << "runtime:       rewind can run this model\n";
        } else {
            std::cout << "runtime:       rewind cannot run this file: " << cannot_run << "\n";
            std::vector<std::string> bad;
            for (const GgufTensorInfo& t : g.tensors())
                if (!llama_weight_type_supported(t.type)) bad.push_back(t.name + " (" + tensor_type_name(t.type) + ")");
            if (!bad.empty()) {
                std::cout << "               " << bad.size() << " tensor(s) of types it cannot compute with:";
                for (size_t i = 0; i < bad.size() && i < 8; ++i) std::cout << (i ? ", " : " ") << bad[i];
                if (bad.size() > 8) std::cout << ", ...";
                std::cout << "\n";
            }
        }
    }
    if (mf) print_repack(*mf);
    return 0;
}

} // namespace

void register_inspect(CLI::App& app, Runner& run) {
    auto opt = std::make_shared<InspectOptions>();
    CLI::App* cmd = app.add_subcommand(
        "inspect", "Show a GGUF file's architecture, hyperparameters, tokenizer and tensors");
    cmd->footer(
        "Models are checked the way `rewind generate` loads them (shapes, types, tokenizer), so a\n"
        "non-zero exit means rewind cannot run the file. Vocabulary-only files (no tensors) are shown\n"
        "with their tokenizer and full metadata.");
    CLI::Option* pos = cmd->add_option("MODEL", opt->model, "GGUF file to inspect (default: the bundled model)");
    CLI::Option* named = add_model_path_flag(*cmd, opt->model);
    pos->excludes(named);
    cmd->add_flag("--metadata", opt->metadata, "Also list every metadata key/value (arrays abbreviated)");
    cmd->callback([&run, opt] { run = [opt] { return inspect(*opt); }; });
}

} // namespace rwd::cli

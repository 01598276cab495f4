"""Test helpers for test_hf.py, numpy only: a small GGUF reader (F32 and F16 tensors) and a
reference forward pass of llama, qwen2 and qwen3moe models (and llama files with experts, as
Mixtral) in Hugging Face's convention, written from the transformers modeling code's equations
(not rewind's): Q/K weights un-permuted back from the GGUF converter's layout for llama,
rotate-half rope, keys stored after rope in past_key_values; qwen3moe's per-head Q/K RMSNorm;
the sparse MoE block (softmax over the router's logits, top-k, the k weights renormalised, the
weighted sum of the chosen experts' SwiGLU outputs). Computed in float64 so that it is a
reference, not another float32 implementation."""
import struct

import numpy as np

# GGUF metadata value types (the GGUF specification's gguf_metadata_value_type).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# Tensor types this reader takes (ggml_type): F32, F16.
_TENSOR_DTYPES = {0: np.float32, 1: np.float16}


class GGUF:
    """A GGUF file's metadata (`meta`: key -> value) and tensors (`tensor(name)`: a float64 array in
    numpy's row-major shape, i.e. ggml's dims reversed)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self._data = f.read()
        self._pos = 0
        if self._read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version = self._unpack("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version}")
        n_tensors = self._unpack("<Q")
        n_kv = self._unpack("<Q")
        self.meta = {}
        for _ in range(n_kv):
            key = self._string()
            self.meta[key] = self._value(self._unpack("<I"))
        self._infos = {}
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._unpack("<I")
            dims = [self._unpack("<Q") for _ in range(n_dims)]
            ttype = self._unpack("<I")
            offset = self._unpack("<Q")
            self._infos[name] = (dims, ttype, offset)
        align = int(self.meta.get("general.alignment", 32))
        self._base = (self._pos + align - 1) // align * align

    def _read(self, n):
        b = self._data[self._pos:self._pos + n]
        if len(b) != n:
            raise ValueError("truncated GGUF file")
        self._pos += n
        return b

    def _unpack(self, fmt):
        return struct.unpack(fmt, self._read(struct.calcsize(fmt)))[0]

    def _string(self):
        return self._read(self._unpack("<Q")).decode("utf-8", "replace")

    def _value(self, vtype):
        if vtype in _SCALARS:
            return self._unpack(_SCALARS[vtype])
        if vtype == _STRING:
            return self._string()
        if vtype == _ARRAY:
            itype = self._unpack("<I")
            n = self._unpack("<Q")
            return [self._value(itype) for _ in range(n)]
        raise ValueError(f"GGUF value type {vtype}")

    def has(self, name):
        return name in self._infos

    def tensor(self, name):
        dims, ttype, offset = self._infos[name]
        if ttype not in _TENSOR_DTYPES:
            raise ValueError(f"{name}: tensor type {ttype} (this reader takes F32 and F16)")
        dt = np.dtype(_TENSOR_DTYPES[ttype])
        count = int(np.prod(dims))
        start = self._base + offset
        a = np.frombuffer(self._data, dtype=dt, count=count, offset=start)
        return a.reshape(list(reversed(dims))).astype(np.float64)


def _unpermute(w, n_head):
    """Undoes the GGUF converter's permutation of llama Q/K rows (weights [n_head * hd, ...] or
    biases [n_head * hd]): within each head, GGUF row 2i + a holds Hugging Face row a * hd/2 + i."""
    rows = w.shape[0]
    hd = rows // n_head
    rest = w.shape[1:]
    return w.reshape(n_head, hd // 2, 2, *rest).swapaxes(1, 2).reshape(rows, *rest)


class Reference:
    """A llama, qwen2 or qwen3moe GGUF model in Hugging Face's convention (LlamaForCausalLM,
    MixtralForCausalLM when a llama file has experts, Qwen2ForCausalLM, Qwen3MoeForCausalLM with
    norm_topk_prob; no rope scaling)."""

    def __init__(self, path):
        g = GGUF(path)
        arch = g.meta["general.architecture"]
        if arch not in ("llama", "qwen2", "qwen3moe"):
            raise ValueError(f"{path}: the reference runs llama, qwen2 and qwen3moe, not {arch}")
        p = arch + "."
        self.n_layer = int(g.meta[p + "block_count"])
        self.n_head = int(g.meta[p + "attention.head_count"])
        self.n_head_kv = int(g.meta.get(p + "attention.head_count_kv", self.n_head))
        self.n_embd = int(g.meta[p + "embedding_length"])
        self.head_dim = int(g.meta.get(p + "attention.key_length", self.n_embd // self.n_head))
        self.eps = float(g.meta.get(p + "attention.layer_norm_rms_epsilon", 1e-5))
        self.rope_base = float(g.meta.get(p + "rope.freq_base", 10000.0))
        self.n_expert = int(g.meta.get(p + "expert_count", 0))
        self.n_expert_used = int(g.meta.get(p + "expert_used_count", 0))
        if g.has("rope_freqs.weight") or g.meta.get(p + "rope.scaling.type", "none") not in ("none",):
            raise ValueError(f"{path}: rope scaling is outside this reference")
        permuted = arch == "llama"  # the converter permutes llama's Q/K only
        self.embd = g.tensor("token_embd.weight")
        self.out_norm = g.tensor("output_norm.weight")
        self.out = g.tensor("output.weight") if g.has("output.weight") else self.embd
        self.layers = []
        for il in range(self.n_layer):
            t = lambda n: g.tensor(f"blk.{il}.{n}")  # noqa: E731
            opt = lambda n: g.tensor(f"blk.{il}.{n}") if g.has(f"blk.{il}.{n}") else None  # noqa: E731
            L = {"attn_norm": t("attn_norm.weight"), "wq": t("attn_q.weight"), "wk": t("attn_k.weight"),
                 "wv": t("attn_v.weight"), "wo": t("attn_output.weight"), "bq": opt("attn_q.bias"),
                 "bk": opt("attn_k.bias"), "bv": opt("attn_v.bias"), "ffn_norm": t("ffn_norm.weight"),
                 "q_norm": opt("attn_q_norm.weight"), "k_norm": opt("attn_k_norm.weight")}
            if self.n_expert > 0:  # [n_expert, n_embd]; [n_expert, rows, cols] per expert
                L.update({"router": t("ffn_gate_inp.weight"), "gate_exps": t("ffn_gate_exps.weight"),
                          "up_exps": t("ffn_up_exps.weight"), "down_exps": t("ffn_down_exps.weight")})
            else:
                L.update({"gate": t("ffn_gate.weight"), "up": t("ffn_up.weight"), "down": t("ffn_down.weight")})
            if permuted:
                L["wq"] = _unpermute(L["wq"], self.n_head)
                L["wk"] = _unpermute(L["wk"], self.n_head_kv)
                if L["bq"] is not None:
                    L["bq"] = _unpermute(L["bq"], self.n_head)
                if L["bk"] is not None:
                    L["bk"] = _unpermute(L["bk"], self.n_head_kv)
            self.layers.append(L)

    def _norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, positions):
        """transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, x [heads, T, hd]."""
        hd = self.head_dim
        inv_freq = 1.0 / (self.rope_base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        freqs = np.outer(positions, inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * np.cos(emb) + np.concatenate([-x2, x1], axis=-1) * np.sin(emb)

    @staticmethod
    def _swiglu(h, gate, up, down):
        g = h @ gate.T
        return ((g / (1 + np.exp(-g))) * (h @ up.T)) @ down.T

    def _moe(self, h, L):
        """The sparse MoE block, token by token: softmax over the router's logits, the top
        n_expert_used (torch.topk names no order for ties; a stable sort takes the lower index, as
        rewind does), their weights renormalised to sum 1, the weighted sum of those experts."""
        z = h @ L["router"].T
        p = np.exp(z - z.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            top = np.argsort(-p[t], kind="stable")[: self.n_expert_used]
            w = p[t, top] / p[t, top].sum()
            for e, we in zip(top, w):
                out[t] += we * self._swiglu(h[t:t + 1], L["gate_exps"][e], L["up_exps"][e], L["down_exps"][e])[0]
        return out

    def forward(self, ids):
        """The logits of every position of `ids` and the past_key_values of all of them: per layer
        (key, value) float64 arrays [1, n_head_kv, T, head_dim], keys after rope."""
        T = len(ids)
        hd, H, Hkv = self.head_dim, self.n_head, self.n_head_kv
        pos = np.arange(T, dtype=np.float64)
        x = self.embd[np.asarray(ids)]
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        pkv = []
        for L in self.layers:
            h = self._norm(x, L["attn_norm"])
            q = h @ L["wq"].T + (L["bq"] if L["bq"] is not None else 0)
            k = h @ L["wk"].T + (L["bk"] if L["bk"] is not None else 0)
            v = h @ L["wv"].T + (L["bv"] if L["bv"] is not None else 0)
            q, k = q.reshape(T, H, hd), k.reshape(T, Hkv, hd)
            if L["q_norm"] is not None:  # qwen3moe: RMSNorm of each head before rope
                q, k = self._norm(q, L["q_norm"]), self._norm(k, L["k_norm"])
            q = self._rope(q.transpose(1, 0, 2), pos)
            k = self._rope(k.transpose(1, 0, 2), pos)
            v = v.reshape(T, Hkv, hd).transpose(1, 0, 2)
            pkv.append((np.ascontiguousarray(k[None]), np.ascontiguousarray(v[None])))
            rep = H // Hkv
            kk, vv = np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0)
            s = q @ kk.transpose(0, 2, 1) / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            a = (s @ vv).transpose(1, 0, 2).reshape(T, H * hd)
            x = x + a @ L["wo"].T
            h = self._norm(x, L["ffn_norm"])
            x = x + (self._moe(h, L) if self.n_expert > 0 else self._swiglu(h, L["gate"], L["up"], L["down"]))
        logits = self._norm(x, self.out_norm) @ self.out.T
        return logits, pkv

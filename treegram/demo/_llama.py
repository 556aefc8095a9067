"""A Llama-architecture causal LM in plain torch, over the weights of a GGUF file.

The forward pass takes explicit positions and an attention mask over the new tokens plus a
KV cache of the verified prefix, so one call scores a plain sequence or a draft tree (the
interface of :class:`treegram.demo.TinyCausalLM`). No transformers at run time: the blocks
are RMSNorm, grouped-query attention with rotary embeddings, and a SwiGLU MLP; the LM head
is the token embedding (tied, as in SmolLM2).

**Exactness.** Speculative decoding must reproduce plain decoding token for token, so a
token's logits (and keys/values) must not depend on which other tokens share the forward
pass. In ``bfloat16`` mode the matrix products run in bfloat16 (oneDNN), split so that each
output row depends only on its input row: oneDNN picks its kernel, hence its summation
order, by shape and CPU (the LM head changes kernels past 32 rows on AMX machines, the
1536-wide down projection from 2 rows on AVX512-BF16 EPYC ones), so the split (rows per
call, and the inner dimension in blocks whose float32 partial sums are added) is probed
per shape on first use. The residual stream is float32, and the attention and the RMSNorm
statistics are computed in float64 (their sums run over a tree's masked-out nodes in one
pass and over the cache alone in the other: in float64 that reordering cannot move a
float32 or bfloat16 result). The result is bitwise the same
logits for a token scored inside a draft tree or alone (``tests/demo`` checks it).
``float32`` mode (full-precision matrix products, the mode compared with transformers'
reference forward) is not row-independent on every BLAS: there, speculative and plain
decoding agree up to float32 rounding.

GGUF stores the query and key projections of each head with the two halves of every rotary
pair interleaved (llama.cpp's layout); rotary embeddings are applied to adjacent pairs here,
which is the same attention as Hugging Face's rotate-half layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from treegram.demo._model import attention_mask
from treegram.errors import ArgumentError

__all__ = ["DTYPES", "LlamaConfig", "LlamaModel", "default_dtype"]

#: The matmul dtypes :class:`LlamaModel` runs in.
DTYPES = ("bfloat16", "float32")

# The most rows one bfloat16 matrix product is probed for, and the narrowest block of its
# inner dimension tried (see _product_plan).
_PROBE_ROWS = 32
_MIN_K_BLOCK = 128
# How each bfloat16 product is split, by (out, in, torch threads): probed once per process.
_PLANS: dict[tuple[int, int, int], tuple[int, int]] = {}


def default_dtype() -> str:
    """``"bfloat16"`` where the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX,
    read from ``/proc/cpuinfo``), else ``"float32"``."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"
    except OSError:
        pass
    return "float32"


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama model (read from GGUF metadata by :meth:`from_gguf_metadata`)."""

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    max_positions: int
    rope_base: float
    rms_eps: float
    dtype: str = "bfloat16"

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def cache_dtype(self) -> str:
        """The KV cache's dtype: float64, the attention's (keys and values are float32
        values, held exactly), so a step reads the cache without converting it."""
        return "float64"

    @classmethod
    def from_gguf_metadata(cls, meta: dict, *, dtype: str = "bfloat16") -> LlamaConfig:
        """The config of a ``general.architecture == "llama"`` file.

        Raises
        ------
        ArgumentError
            Another architecture, or a missing key.
        """
        arch = meta.get("general.architecture")
        if arch != "llama":
            raise ArgumentError(f"GGUF architecture {arch!r}: only 'llama' is supported")
        try:
            n_heads = int(meta["llama.attention.head_count"])
            vocab = meta.get("llama.vocab_size", len(meta["tokenizer.ggml.tokens"]))
            return cls(
                vocab_size=int(vocab),
                d_model=int(meta["llama.embedding_length"]),
                n_layers=int(meta["llama.block_count"]),
                n_heads=n_heads,
                n_kv_heads=int(meta.get("llama.attention.head_count_kv", n_heads)),
                d_ff=int(meta["llama.feed_forward_length"]),
                max_positions=int(meta["llama.context_length"]),
                rope_base=float(meta.get("llama.rope.freq_base", 10000.0)),
                rms_eps=float(meta["llama.attention.layer_norm_rms_epsilon"]),
                dtype=dtype,
            )
        except KeyError as exc:
            raise ArgumentError(f"GGUF metadata has no {exc.args[0]!r}") from None


class LlamaModel:
    """Llama blocks in torch over dequantized GGUF weights (see the module notes).

    Parameters
    ----------
    config : LlamaConfig
    weights : dict of str to numpy.ndarray
        float32 arrays under their GGUF names (``token_embd.weight``,
        ``blk.{i}.attn_q.weight``, ...), weight matrices as ``(out, in)``.

    Notes
    -----
    The weights are read-only and every call allocates its own activations: concurrent
    calls are safe.
    """

    def __init__(self, config: LlamaConfig, weights: dict[str, np.ndarray]) -> None:
        import torch

        if config.dtype not in DTYPES:
            raise ArgumentError(f"dtype must be one of {DTYPES}, got {config.dtype!r}")
        if config.n_heads % config.n_kv_heads or config.d_model % config.n_heads:
            raise ArgumentError("n_heads must divide d_model and be a multiple of n_kv_heads")
        self.config = config
        wdt = torch.bfloat16 if config.dtype == "bfloat16" else torch.float32
        self.matmul_dtype = wdt

        def mat(*names: str):
            parts = [torch.from_numpy(np.asarray(weights[n], dtype=np.float32)) for n in names]
            return torch.cat(parts).to(wdt).contiguous()

        def vec(name: str):
            return torch.from_numpy(np.array(weights[name], dtype=np.float32))

        self.embed = mat("token_embd.weight")  # also the LM head (tied)
        self.head = mat("output.weight") if "output.weight" in weights else self.embed
        self.out_norm = vec("output_norm.weight")
        self.layers = []
        for i in range(config.n_layers):
            p = f"blk.{i}."
            self.layers.append(
                {
                    "attn_norm": vec(p + "attn_norm.weight"),
                    "qkv": mat(p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"),
                    "o": mat(p + "attn_output.weight"),
                    "ffn_norm": vec(p + "ffn_norm.weight"),
                    "gate_up": mat(p + "ffn_gate.weight", p + "ffn_up.weight"),
                    "down": mat(p + "ffn_down.weight"),
                }
            )
        hd = config.head_dim
        inv = config.rope_base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        angles = np.arange(config.max_positions, dtype=np.float64)[:, None] * inv[None]
        self.cos = torch.from_numpy(np.cos(angles).astype(np.float32))  # [P, hd/2]
        self.sin = torch.from_numpy(np.sin(angles).astype(np.float32))
        self._blocks: dict[int, tuple] = {}  # id(weight) -> (weight, k_block, column blocks)

    # ---------------------------------------------------------------- pieces

    def _rms(self, x, w):
        import torch

        xd = x.double()
        return (xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + self.config.rms_eps)).float() * w

    @staticmethod
    def _rope(x, cos, sin):
        """Rotate adjacent pairs of ``x`` [b, t, heads, hd] by the angles [b, t, 1, hd/2]."""
        import torch

        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)

    def _linear(self, x, w):
        """``x @ w.T`` in float32, over the last axis of ``x`` (any leading shape), split as
        :func:`_product_plan` says so that each row's result is independent of the others."""
        flat = x.reshape(-1, x.shape[-1]).to(self.matmul_dtype)
        k_block, rows = _product_plan(w)
        if k_block == w.shape[1]:
            blocks = (w,)
        else:  # split once per weight; the entry keeps `w` alive, so its id stays its own
            entry = self._blocks.get(id(w))
            if entry is None or entry[0] is not w or entry[1] != k_block:
                entry = self._blocks[id(w)] = (w, k_block, _column_blocks(w, k_block))
            blocks = entry[2]
        out = _blocked_linear(flat, blocks, rows)
        return out.view(*x.shape[:-1], -1)

    # ---------------------------------------------------------------- forward

    def forward(self, tokens, positions, mask, past=None, *, layers: int | None = None):
        """Logits, keys and values of ``T`` new tokens per row.

        Parameters
        ----------
        tokens, positions : torch.Tensor of int64, shape [b, T]
        mask : torch.Tensor of bool, shape [b, T, T]
            ``mask[r, i, j]``: new token ``i`` of row ``r`` attends to new token ``j`` (every
            token must attend to itself).
        past : tuple (k, v, valid), optional
            Cached float64 keys/values ``[L, b, n_kv_heads, S, head_dim]`` (``L >= layers``) and
            which of them each row (``valid`` [b, S]) or each new token (``valid``
            [b, T, S]) attends to.
        layers : int, optional
            Run only the first ``layers`` blocks before the final norm and the LM head (the
            self-speculative draft); default all.

        Returns
        -------
        logits : torch.Tensor of float32, shape [b, T, vocab_size]
        k, v : torch.Tensor of float32, shape [layers, b, n_kv_heads, T, head_dim]
            (float32 values; the cache stores them as float64)
        """
        import torch
        from torch.nn import functional

        cfg = self.config
        n_layers = cfg.n_layers if layers is None else layers
        if not 1 <= n_layers <= cfg.n_layers:
            raise ArgumentError(f"layers must be in [1, {cfg.n_layers}], got {layers}")
        b, t = tokens.shape
        if int(positions.max()) >= cfg.max_positions:
            raise ArgumentError(
                f"position {int(positions.max())} is past the model's context "
                f"({cfg.max_positions} tokens)"
            )
        h, kvh, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        group = h // kvh
        full = attention_mask(mask, past)
        # query rows are ordered (group member, token): the mask repeats per member
        full = full[:, None, None].expand(b, 1, group, t, full.shape[-1])
        full = full.reshape(b, 1, group * t, -1)
        cos = self.cos[positions][:, :, None]
        sin = self.sin[positions][:, :, None]
        x = self.embed[tokens].float()
        dq, dk = cfg.d_model, kvh * hd
        scale = 1.0 / math.sqrt(hd)
        ks, vs = [], []
        for li in range(n_layers):
            layer = self.layers[li]
            qkv = self._linear(self._rms(x, layer["attn_norm"]), layer["qkv"])
            q = self._rope(qkv[..., :dq].view(b, t, h, hd), cos, sin)
            k = self._rope(qkv[..., dq : dq + dk].view(b, t, kvh, hd), cos, sin)
            v = qkv[..., dq + dk :].view(b, t, kvh, hd)
            k, v = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
            ks.append(k)
            vs.append(v)
            # [b, kvh, group * t, hd]: each kv head serves `group` query heads
            qg = q.view(b, t, kvh, group, hd).permute(0, 2, 3, 1, 4).reshape(b, kvh, -1, hd)
            qg = qg.double()
            kd, vd = k.double(), v.double()
            scores = qg @ kd.transpose(-1, -2)
            if past is not None:  # the cache is float64 already: no copy of it
                scores = torch.cat([qg @ past[0][li].transpose(-1, -2), scores], dim=-1)
            scores = (scores * scale).masked_fill(~full, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            if past is not None:
                s_past = past[0].shape[3]
                att = probs[..., :s_past] @ past[1][li] + probs[..., s_past:] @ vd
            else:
                att = probs @ vd
            att = att.view(b, kvh, group, t, hd).permute(0, 3, 1, 2, 4).reshape(b, t, dq)
            x = x + self._linear(att, layer["o"])
            gate_up = self._linear(self._rms(x, layer["ffn_norm"]), layer["gate_up"])
            gate, up = gate_up.split(cfg.d_ff, dim=-1)
            x = x + self._linear(functional.silu(gate) * up, layer["down"])
        logits = self._linear(self._rms(x, self.out_norm), self.head)
        return logits, torch.stack(ks), torch.stack(vs)

    def causal_logits(self, tokens):
        """Logits of every position of one plain sequence (no cache), float32 ``[T, V]``."""
        import torch

        t = len(tokens)
        ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64))[None]
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None]
        return self.forward(ids, torch.arange(t)[None], mask)[0][0]

    def num_parameters(self) -> int:
        """Parameters (the tied head counted once)."""
        n = self.embed.numel() + self.out_norm.numel()
        if self.head is not self.embed:
            n += self.head.numel()
        return n + sum(w.numel() for layer in self.layers for w in layer.values())


def load_weights(gguf_file: Any) -> dict[str, np.ndarray]:
    """Every tensor of an open :class:`treegram.demo.GGUFFile`, dequantized to float32."""
    return {name: gguf_file.tensor(name) for name in gguf_file.tensors}


def _product_plan(w) -> tuple[int, int]:
    """How a product with the weight ``w`` is split so that every output row is bitwise that
    row's product alone: ``(k_block, rows)``, the inner dimension in blocks of ``k_block``
    (partial products summed in float32) and at most ``rows`` rows per call.

    oneDNN picks its bfloat16 kernel, hence its summation order, by shape and CPU, not by
    values: the plan is probed once per shape and thread count, with ``w`` itself on random
    rows whose values span a wide range (a change of summation order then shows in the
    bfloat16 results). The inner dimension is halved while that buys more rows (a 1536-wide
    product changes order from 2 rows on AVX512-BF16 EPYC CPUs, its 768-wide halves never
    do). float32 weights claim no row independence: one call.
    """
    import torch

    if w.dtype != torch.bfloat16:
        return w.shape[1], 1 << 62
    key = (*w.shape, torch.get_num_threads())
    plan = _PLANS.get(key)
    if plan is None:
        gen = torch.Generator().manual_seed(0)
        shape = (_PROBE_ROWS, w.shape[1])
        scale = torch.exp2(torch.randint(-12, 12, shape, generator=gen).float())
        x = (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)
        plan = (w.shape[1], 0)
        k_block = w.shape[1]
        while True:
            rows = _independent_rows(x, _column_blocks(w, k_block))
            if rows > plan[1]:
                plan = (k_block, rows)
            if rows == _PROBE_ROWS or k_block <= _MIN_K_BLOCK:
                break
            k_block = (k_block + 1) // 2
        _PLANS[key] = plan
    return plan


def _blocked_linear(x, blocks, rows: int):
    """``x @ w.T`` in float32, ``w`` given as its column ``blocks`` (contiguous, in order):
    at most ``rows`` rows of ``x`` per call, the blocks' float32 partial products summed in
    order."""
    import torch
    from torch.nn import functional

    def product(part):
        out, k = None, 0
        for wb in blocks:
            p = functional.linear(part[:, k : k + wb.shape[1]], wb).float()
            out, k = (p if out is None else out + p), k + wb.shape[1]
        return out

    if x.shape[0] <= rows:
        return product(x)
    return torch.cat([product(x[i : i + rows]) for i in range(0, x.shape[0], rows)])


def _column_blocks(w, k_block: int) -> tuple:
    """``w``'s columns in contiguous blocks of ``k_block`` (the last may be narrower)."""
    return tuple(w[:, k : k + k_block].contiguous() for k in range(0, w.shape[1], k_block))


def _independent_rows(x, blocks) -> int:
    """The most leading rows of ``x`` (up to all) whose product with the column ``blocks``
    equals each row's product alone, for every row count up to it."""
    import torch

    alone = torch.cat([_blocked_linear(x[i : i + 1], blocks, 1) for i in range(x.shape[0])])
    for m in range(2, x.shape[0] + 1):
        if not torch.equal(_blocked_linear(x[:m], blocks, m), alone[:m]):
            return m - 1
    return x.shape[0]

"""A Llama-architecture causal LM in plain torch, over the weights of a GGUF file.

The forward pass takes explicit positions and an attention mask over the new tokens plus a
KV cache of the verified prefix, so one call scores a plain sequence or a draft tree (the
interface of :class:`treegram.demo.TinyCausalLM`). No transformers at run time: the blocks
are RMSNorm, grouped-query attention with rotary embeddings, and a SwiGLU MLP; the LM head
is the token embedding (tied, as in SmolLM2).

**Exactness.** Speculative decoding must reproduce plain decoding token for token, so a
token's logits (and keys/values) must not depend on which other tokens share the forward
pass. In ``bfloat16`` mode the matrix products run in bfloat16 (oneDNN; each output row
depends only on its input row, for every row count used here: the LM head runs in blocks
of at most 32 rows, past which oneDNN changes kernels), the residual stream is float32,
and the attention and the RMSNorm statistics are computed in float64 (their sums run over
a tree's masked-out nodes in one pass and over the cache alone in the other: in float64
that reordering cannot move a float32 or bfloat16 result). The result is bitwise the same
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

# oneDNN's bfloat16 GEMM picks another kernel for the LM head's shape past 32 rows.
_HEAD_ROWS = 32


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

    def _lm_head(self, h):
        import torch
        from torch.nn import functional

        flat = h.reshape(-1, h.shape[-1]).to(self.matmul_dtype)
        out = [
            functional.linear(flat[i : i + _HEAD_ROWS], self.head).float()
            for i in range(0, flat.shape[0], _HEAD_ROWS)
        ]
        return torch.cat(out).view(*h.shape[:-1], -1)

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
            y = self._rms(x, layer["attn_norm"]).to(self.matmul_dtype)
            qkv = functional.linear(y, layer["qkv"]).float()
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
            x = x + functional.linear(att.to(self.matmul_dtype), layer["o"]).float()
            y = self._rms(x, layer["ffn_norm"]).to(self.matmul_dtype)
            gate, up = functional.linear(y, layer["gate_up"]).float().split(cfg.d_ff, dim=-1)
            x = (
                x
                + functional.linear(
                    (functional.silu(gate) * up).to(self.matmul_dtype), layer["down"]
                ).float()
            )
        logits = self._lm_head(self._rms(x, self.out_norm))
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

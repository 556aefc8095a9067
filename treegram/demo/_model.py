"""A byte-level tokenizer and a tiny seeded causal LM with tree attention, for the demo.

Nothing here is downloaded: the tokenizer is 256 byte tokens plus a few merged JSON pieces
plus ``<eos>``, and the model's weights are drawn from a seeded generator. The model is
random, so what it "wants" to say is arbitrary; the grammar masks make every output valid.

Two deliberate choices keep the demo well-behaved and exact:

* **Logit bias.** Greedy decoding of a random model under a JSON grammar can loop (a string
  that never closes, whitespace forever, arrays nested without end). The model adds a fixed,
  documented bias to its logits (:func:`structural_logit_bias`): a push towards the quote,
  the closing brackets, the separators and ``<eos>``, and away from whitespace and
  backslashes, so that generations finish within a few hundred tokens. It is part of the
  model (both the speculative loop and plain greedy decoding see it), so it never changes
  the comparison between the two.
* **float64 arithmetic.** A node's logits computed inside a tree (with a KV cache and a
  tree attention mask) and the same position computed in a plain causal pass differ only
  by rounding; in float64 that is ~1e-16, far below any gap between the two best tokens,
  so greedy speculative decoding reproduces plain greedy decoding token for token. The
  logits are handed out as float32 (the dtypes the bitmask kernels take).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MERGED_TOKENS",
    "ByteTokenizer",
    "KVCache",
    "TinyCausalLM",
    "TinyLMConfig",
    "structural_logit_bias",
]

#: Multi-byte tokens added after the 256 byte tokens (common JSON pieces).
MERGED_TOKENS: tuple[bytes, ...] = (
    b'": "',
    b'", "',
    b'{"',
    b'"}',
    b'": ',
    b', "',
    b'["',
    b'"]',
    b'}, {"',
    b"}]",
    b"true",
    b"false",
    b"null",
)


class ByteTokenizer:
    """Byte tokens, a few merged JSON tokens and ``<eos>``; greedy longest-match encoding.

    Parameters
    ----------
    merges : sequence of bytes, optional
        Multi-byte tokens appended after the 256 byte tokens (default
        :data:`MERGED_TOKENS`). ``<eos>`` comes last.

    Attributes
    ----------
    tokens : list of bytes
        The bytes of every token id (``b"<eos>"`` for the stop token, which text never
        encodes to).
    eos_id : int
        The stop token.
    """

    def __init__(self, merges: Sequence[bytes] = MERGED_TOKENS) -> None:
        merges = [bytes(m) for m in merges]
        if any(len(m) < 2 for m in merges) or len(set(merges)) != len(merges):
            raise ValueError("merges must be distinct byte strings of at least 2 bytes")
        self.tokens: list[bytes] = [bytes([i]) for i in range(256)] + merges + [b"<eos>"]
        self.eos_id = len(self.tokens) - 1
        self._ids = {tok: i for i, tok in enumerate(self.tokens[: self.eos_id])}
        self._max_len = max(len(t) for t in self.tokens[: self.eos_id])

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return len(self.tokens)

    def encode(self, text: str | bytes) -> list[int]:
        """Greedy longest-match token ids of ``text`` (UTF-8); never produces ``<eos>``."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        ids, pos = [], 0
        while pos < len(data):
            for n in range(min(self._max_len, len(data) - pos), 0, -1):
                tid = self._ids.get(data[pos : pos + n])
                if tid is not None:
                    ids.append(tid)
                    pos += n
                    break
        return ids

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The bytes of ``ids``, stop tokens left out."""
        return b"".join(self.tokens[i] for i in ids if i != self.eos_id)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (UTF-8, invalid sequences replaced), stop tokens left out."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def tokenizer_info(self):
        """The :class:`treegram.TokenizerInfo` of this vocabulary (RAW, ``<eos>`` stops).

        Returns
        -------
        treegram.TokenizerInfo
        """
        from treegram import TokenizerInfo, VocabType

        return TokenizerInfo(
            self.tokens, VocabType.RAW, vocab_size=self.vocab_size, stop_token_ids=[self.eos_id]
        )


def structural_logit_bias(tokenizer: ByteTokenizer) -> tuple[tuple[int, float], ...]:
    """The fixed logit bias that makes greedy generations of the random model finish.

    Parameters
    ----------
    tokenizer : ByteTokenizer

    Returns
    -------
    tuple of (token id, bias)
        ``<eos>`` +6; tokens that close a string, object or array (``"``, ``}``, ``]`` and
        merged tokens that contain one) +3; separators and literals (``,``, ``:``, ``true``,
        ``false``, ``null``) +1; whitespace and the backslash (which opens escape
        sequences) -6. Nothing else is biased.
    """
    bias: dict[int, float] = {tokenizer.eos_id: 6.0}
    for tid, tok in enumerate(tokenizer.tokens[: tokenizer.eos_id]):
        if tok in (b" ", b"\t", b"\n", b"\r", b"\\"):
            bias[tid] = -6.0
        elif any(c in tok for c in b'"}]'):
            bias[tid] = 3.0
        elif tok in (b",", b":", b"true", b"false", b"null"):
            bias[tid] = 1.0
    return tuple(sorted(bias.items()))


@dataclass(frozen=True)
class TinyLMConfig:
    """Shape and seed of :class:`TinyCausalLM`.

    Parameters
    ----------
    vocab_size : int
    d_model : int, default 64
    n_heads : int, default 4
    n_layers : int, default 2
    d_ff : int, default 128
    max_positions : int, default 2048
    seed : int, default 0
        Seed of the weight generator: same config, same model, bit for bit.
    logit_scale : float, default 2.0
        Standard deviation the LM head's logits are drawn at.
    logit_bias : tuple of (int, float)
        Fixed per-token bias added to the logits (see :func:`structural_logit_bias`).
    """

    vocab_size: int
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    max_positions: int = 2048
    seed: int = 0
    logit_scale: float = 2.0
    logit_bias: tuple[tuple[int, float], ...] = ()

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads (one per attention head)."""
        return self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def cache_dtype(self) -> str:
        """The KV cache's dtype."""
        return "float64"

    @classmethod
    def for_tokenizer(cls, tokenizer: ByteTokenizer, *, seed: int = 0, **kwargs) -> TinyLMConfig:
        """A config for ``tokenizer``'s vocabulary with :func:`structural_logit_bias`."""
        return cls(
            vocab_size=tokenizer.vocab_size,
            seed=seed,
            logit_bias=structural_logit_bias(tokenizer),
            **kwargs,
        )


class KVCache:
    """Keys and values of the verified prefix of every request of a batch.

    Parameters
    ----------
    config : TinyLMConfig or LlamaConfig
        Anything with ``n_layers``, ``n_kv_heads``, ``head_dim`` and ``cache_dtype``.
    batch : int
        Number of requests (rows).
    capacity : int
        Most tokens a row can hold.

    Attributes
    ----------
    k, v : torch.Tensor, shape [n_layers, batch, n_kv_heads, capacity, head_dim]
        In ``config.cache_dtype``.
    lengths : numpy.ndarray of int64, shape [batch]
        Tokens held per row.
    """

    def __init__(self, config: TinyLMConfig, batch: int, capacity: int) -> None:
        import torch

        shape = (config.n_layers, batch, config.n_kv_heads, capacity, config.head_dim)
        dtype = getattr(torch, config.cache_dtype)
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)
        self.lengths = np.zeros(batch, dtype=np.int64)
        self.capacity = capacity

    def past(self, rows: Sequence[int]):
        """Keys, values and validity ``[b, S]`` of ``rows``, trimmed to their longest row
        (views of the cache when ``rows`` are consecutive, copies otherwise)."""
        import torch

        idx = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[idx]
        s = int(lengths.max()) if len(idx) else 0
        if len(idx) and np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))):
            sl = slice(int(idx[0]), int(idx[0]) + len(idx))
            k, v = self.k[:, sl, :, :s], self.v[:, sl, :, :s]
        else:
            rows_t = torch.from_numpy(idx)
            k, v = self.k[:, rows_t, :, :s], self.v[:, rows_t, :, :s]
        valid = torch.arange(s)[None, :] < torch.from_numpy(lengths)[:, None]
        return k, v, valid

    def append(self, row: int, k_new, v_new) -> None:
        """Append ``k_new``/``v_new`` (``[n_layers, n_kv_heads, n, head_dim]``) to ``row``."""
        n = k_new.shape[2]
        start = int(self.lengths[row])
        if start + n > self.capacity:
            raise ValueError(f"KV cache row {row} is full ({self.capacity} tokens)")
        self.k[:, row, :, start : start + n] = k_new
        self.v[:, row, :, start : start + n] = v_new
        self.lengths[row] = start + n


def attention_mask(mask, past=None):
    """The attention mask ``[b, T, S + T]`` of ``T`` new tokens over the ``S`` cached ones
    and themselves: the cache's validity (``[b, S]``, the same for every new token, or
    ``[b, T, S]``) of ``past = (k, v, valid)``, then ``mask`` (``[b, T, T]``)."""
    import torch

    if past is None:
        return mask
    b, t = mask.shape[:2]
    valid = past[2]
    if valid.dim() == 2:
        valid = valid[:, None, :].expand(b, t, -1)
    return torch.cat([valid, mask], dim=2)


class TinyCausalLM:
    """A 2-block pre-LayerNorm transformer with seeded random weights and tree attention.

    Parameters
    ----------
    config : TinyLMConfig

    Notes
    -----
    :meth:`forward` takes an explicit attention mask over the new tokens, so the same call
    scores a plain causal sequence (lower-triangular mask) or a draft tree
    (``mask[i, j]`` true iff ``j`` is an ancestor-or-self of ``i``); positions are given
    explicitly (prefix length + node depth for a tree). Arithmetic is float64.
    """

    def __init__(self, config: TinyLMConfig) -> None:
        import torch

        if config.d_model % config.n_heads:
            raise ValueError("d_model must be a multiple of n_heads")
        self.config = config
        g = torch.Generator().manual_seed(config.seed)
        d, f, v = config.d_model, config.d_ff, config.vocab_size

        def rand(*shape: int, std: float):
            return torch.randn(*shape, generator=g, dtype=torch.float64) * std

        self.embed = rand(v, d, std=1.0)
        self.pos = rand(config.max_positions, d, std=0.5)
        self.layers = [
            {
                "wqkv": rand(d, 3 * d, std=1.0 / math.sqrt(d)),
                "wo": rand(d, d, std=1.0 / math.sqrt(d)),
                "w1": rand(d, f, std=1.0 / math.sqrt(d)),
                "w2": rand(f, d, std=1.0 / math.sqrt(f)),
            }
            for _ in range(config.n_layers)
        ]
        self.head = rand(d, v, std=config.logit_scale / math.sqrt(d))
        self.bias = torch.zeros(v, dtype=torch.float64)
        for tid, b in config.logit_bias:
            self.bias[tid] = b

    def forward(self, tokens, positions, mask, past=None, *, layers: int | None = None):
        """Logits, keys and values of ``T`` new tokens per row.

        Parameters
        ----------
        tokens, positions : torch.Tensor of int64, shape [b, T]
        mask : torch.Tensor of bool, shape [b, T, T]
            ``mask[r, i, j]``: new token ``i`` of row ``r`` attends to new token ``j``.
            Every token must attend to itself.
        past : tuple (k, v, valid), optional
            Cached keys/values ``[L, b, n_heads, S, head_dim]`` (``L >= layers``) and which
            of them every row (``valid`` [b, S], see :meth:`KVCache.past`) or every new token
            (``valid`` [b, T, S]) attends to.
        layers : int, optional
            Run only the first ``layers`` blocks before the final norm and the head (a
            self-speculative draft); default all.

        Returns
        -------
        logits : torch.Tensor of float64, shape [b, T, vocab_size]
        k, v : torch.Tensor of float64, shape [layers, b, n_heads, T, head_dim]
        """
        import torch
        from torch.nn import functional

        cfg = self.config
        b, t = tokens.shape
        h, hd = cfg.n_heads, cfg.d_model // cfg.n_heads
        n_layers = cfg.n_layers if layers is None else layers
        if not 1 <= n_layers <= cfg.n_layers:
            raise ValueError(f"layers must be in [1, {cfg.n_layers}], got {layers}")
        full_mask = attention_mask(mask, past)[:, None]  # [b, 1, T, S + T]
        x = self.embed[tokens] + self.pos[positions]
        ks, vs = [], []
        for li, layer in enumerate(self.layers[:n_layers]):
            y = functional.layer_norm(x, (cfg.d_model,))
            q, k, v = (y @ layer["wqkv"]).split(cfg.d_model, dim=-1)
            q, k, v = (z.view(b, t, h, hd).transpose(1, 2) for z in (q, k, v))
            ks.append(k)
            vs.append(v)
            if past is not None:
                k = torch.cat([past[0][li], k], dim=2)
                v = torch.cat([past[1][li], v], dim=2)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
            scores = scores.masked_fill(~full_mask, float("-inf"))
            att = torch.softmax(scores, dim=-1) @ v
            x = x + att.transpose(1, 2).reshape(b, t, cfg.d_model) @ layer["wo"]
            y = functional.layer_norm(x, (cfg.d_model,))
            x = x + functional.gelu(y @ layer["w1"]) @ layer["w2"]
        logits = functional.layer_norm(x, (cfg.d_model,)) @ self.head + self.bias
        return logits, torch.stack(ks), torch.stack(vs)

    def causal_logits(self, tokens: Sequence[int]):
        """Logits of every position of one plain sequence (no cache), float64 ``[T, V]``."""
        import torch

        t = len(tokens)
        ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64))[None]
        pos = torch.arange(t)[None]
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None]
        return self.forward(ids, pos, mask)[0][0]

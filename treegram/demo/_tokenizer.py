"""A model's tokenizer rebuilt from the metadata of its GGUF file (no hub, no transformers).

A GGUF file of a byte-level BPE model (``tokenizer.ggml.model == "gpt2"``) holds the tokens
(in GPT-2's byte alphabet), the merges, a type per token (1 normal, 3 control, 4 user
defined, ...) and the special token ids. :class:`GGUFTokenizer` builds the equivalent
``tokenizers.Tokenizer``: a BPE model over those tokens and merges, the pre-tokenizer
llama.cpp uses for the file's ``tokenizer.ggml.pre`` (``smollm``: every digit is its own
piece, then GPT-2's split), the byte-level decoder, and the control tokens as special added
tokens (matched in prompt text, e.g. ``<|im_start|>``).

The grammar vocabulary (:meth:`GGUFTokenizer.tokenizer_info`) keeps the control tokens out
of grammar text (``exclude_special_tokens=True``): ``<|im_start|>`` is never allowed inside
a JSON string; the end-of-turn token (``tokenizer.ggml.eos_token_id``) stops generation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from treegram.errors import ArgumentError, MissingDependencyError

__all__ = ["CONTROL", "GGUFTokenizer", "render_chatml"]

#: llama.cpp's token type of control tokens (``<|im_start|>``, ``<|endoftext|>``, ...).
CONTROL = 3
_USER_DEFINED = 4

# Pre-tokenizers llama.cpp applies per ``tokenizer.ggml.pre`` that this module rebuilds:
# True means every digit is split off first (llama.cpp's "\p{N}" expression).
_PRE_TOKENIZERS = {"smollm": True, "starcoder": True, "refact": True, "gpt2": False}

_CHATML_TEMPLATE = re.compile(r"<\|im_start\|>.*<\|im_end\|>", re.DOTALL)


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise MissingDependencyError(
            "the model demo needs the tokenizers package: pip install 'treegram[model]'"
        ) from None
    return tokenizers


class GGUFTokenizer:
    """Byte-level BPE tokenizer of a GGUF file.

    Parameters
    ----------
    metadata : dict
        The file's metadata (:attr:`treegram.demo.GGUFFile.metadata`).

    Attributes
    ----------
    backend : tokenizers.Tokenizer
    tokens : list of str
        Token spelling by id (GPT-2 byte alphabet; control tokens as written).
    eos_id : int
        ``tokenizer.ggml.eos_token_id``: the stop token (``<|im_end|>`` for SmolLM2-Instruct).
    control_ids : list of int
        Tokens of type control.
    chat_template : str or None

    Raises
    ------
    ArgumentError
        The file's tokenizer is not byte-level BPE, or its pre-tokenizer is not one this
        module rebuilds.
    MissingDependencyError
        ``tokenizers`` is not installed.
    """

    def __init__(self, metadata: dict) -> None:
        model = metadata.get("tokenizer.ggml.model")
        pre = metadata.get("tokenizer.ggml.pre", "gpt2")
        if model != "gpt2":
            raise ArgumentError(
                f"GGUF tokenizer model {model!r}: only byte-level BPE ('gpt2') is rebuilt here"
            )
        if pre not in _PRE_TOKENIZERS:
            raise ArgumentError(
                f"GGUF pre-tokenizer {pre!r} is not rebuilt here (known: {sorted(_PRE_TOKENIZERS)})"
            )
        tk = _tokenizers()
        self.tokens: list[str] = list(metadata["tokenizer.ggml.tokens"])
        types = list(metadata.get("tokenizer.ggml.token_type", [1] * len(self.tokens)))
        merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
        self.eos_id = int(metadata["tokenizer.ggml.eos_token_id"])
        self.control_ids = [i for i, t in enumerate(types) if t == CONTROL]
        self.chat_template: str | None = metadata.get("tokenizer.chat_template")
        vocab = {tok: i for i, tok in enumerate(self.tokens)}
        backend = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if _PRE_TOKENIZERS[pre]:
            digits = tk.pre_tokenizers.Digits(individual_digits=True)
            backend.pre_tokenizer = tk.pre_tokenizers.Sequence([digits, byte_level])
        else:
            backend.pre_tokenizer = byte_level
        backend.decoder = tk.decoders.ByteLevel()
        added = [i for i, t in enumerate(types) if t in (CONTROL, _USER_DEFINED)]
        backend.add_special_tokens(
            [
                tk.AddedToken(self.tokens[i], special=types[i] == CONTROL, normalized=False)
                for i in added
            ]
        )
        self.backend = backend
        self._info = None

    @property
    def vocab_size(self) -> int:
        """Number of token ids."""
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; control tokens written in it (``<|im_start|>``) are matched."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """The bytes of ``ids`` as the grammar sees them (control tokens, the stop token
        included, are empty)."""
        vocab = self.tokenizer_info().decoded_vocab
        return b"".join(vocab[i] for i in ids)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (UTF-8, invalid sequences replaced), control tokens left out."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def tokenizer_info(self):
        """The grammar vocabulary: :meth:`treegram.TokenizerInfo.from_huggingface` on the
        rebuilt tokenizer, stop token ``eos_id``, control tokens kept out of grammar text.

        Returns
        -------
        treegram.TokenizerInfo
        """
        if self._info is None:
            from treegram import TokenizerInfo

            self._info = TokenizerInfo.from_huggingface(
                self.backend, stop_token_ids=[self.eos_id], exclude_special_tokens=True
            )
        return self._info

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        """``user`` as one ChatML turn, ready for the assistant's answer (see
        :func:`render_chatml`).

        Raises
        ------
        ArgumentError
            The file's chat template is not ChatML.
        """
        if self.chat_template is not None and not _CHATML_TEMPLATE.search(self.chat_template):
            raise ArgumentError("the model's chat template is not ChatML (<|im_start|>...)")
        return render_chatml(user, system)


#: The system prompt SmolLM2-Instruct's template inserts when there is none.
SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def render_chatml(user: str, system: str | None = None) -> str:
    """One user turn in ChatML, with the generation prompt of the assistant's turn.

    ``system`` defaults to SmolLM2-Instruct's default system prompt (what its template writes
    when the conversation has no system message).
    """
    sys_text = SMOLLM2_SYSTEM if system is None else system
    return (
        f"<|im_start|>system\n{sys_text}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )

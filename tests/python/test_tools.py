"""The analysis scripts of tools/scripts that the team runs on GPU results (no GPU needed here):
stall_report.py on a small Nsight Compute source-page table, bench_compare.py, path_report.py,
grid_report.py and bench_rows.py on small moekit-bench JSON files; pack_out.sh; rope_quant_bench.py's roof rate;
skeleton_floor.py and hscale_sim.py; and the provenance of a build
(stamp_tree.sh, cmake/moekit_build_info.cmake) in a scratch git repository."""

import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# What ncu prints: its own messages and the application's output, then the table (columns cut
# to the ones the report reads plus one it ignores).
NCU_CSV = """==PROF== Connected to process 1 (moekit-bench)
moekit-bench 0.1.0 ...
"Kernel Name","void tokmajor_sm90_kernel<0, 0, 0>(KernelParams)",
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed"
"0x00","      LDC R1, c[0x0][0x28]","2","2","10"
"0x10","      HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], R24","30","20","400"
"0x20","      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R31+URZ], R30","5","5","50"
"0x30","      @!P0  BRA 0x7f00","50","48","60"
"0x40","      FMUL R5, R5, R7","8","1","800"
"0x50","      @P1   STG.E.128 desc[UR20][R38.64], R40","5","4","100"
"""


def test_stall_report_reads_the_ncu_table_and_ranks_the_waits():
    sr = load_script("stall_report")
    rows = sr.load(NCU_CSV)
    assert [r[0] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert sum(r[2] for r in rows) == 100
    assert rows[4][3] == 800
    assert sr.opcode(rows[3][1]) == "BRA" and sr.opcode(rows[1][1]) == "HGMMA" and sr.opcode(rows[5][1]) == "STG"
    text = sr.report(rows, top=2, bin_size=2, min_share=0.1, span=(4, 6))
    lines = text.splitlines()
    assert lines[0] == "6 instructions, 100 samples"
    # The spinning branch first, named after the mbarrier wait it loops on; then the MMA.
    assert lines[4].startswith("| 3 | 50 | 50.0 % | 60 |") and "after: SYNCS.PHASECHK" in lines[4]
    assert lines[5].startswith("| 1 | 30 | 30.0 % | 400 |")
    # Bins of 2 instructions: [0,1] 32, [2,3] 55, [4,5] 13 -- all above 10 %.
    assert "| 0-1 | 32 | 32.0 % |" in text and "| 2-3 | 55 | 55.0 % |" in text and "| 4-5 | 13 | 13.0 % |" in text
    # The range table: FMUL and STG with their samples and executed counts.
    assert "instructions [4, 6): 13 samples (13.0 %), 900 executed" in text
    assert "| FMUL | 8 | 800 |" in text and "| STG | 5 | 100 |" in text


# The same with ncu's per-reason columns (the SourceCounters section's stall_* and their
# "(Not Issued)" subsets, which the report leaves out).
NCU_CSV_REASONS = """"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","stall_long_sb","stall_wait","stall_barrier","stall_long_sb (Not Issued)"
"0x00","      MOV R37, R18","60","50","100","57","3","0","50"
"0x10","      QGMMA.64x16x32.F32.E4M3.E4M3 R24, R32, gdesc[UR16], R24","30","20","100","0","20","10","0"
"0x20","      BAR.SYNC.DEFER_BLOCKING 0x0","10","10","10","","","10",""
"""


def test_stall_report_names_each_instructions_stall_reasons():
    sr = load_script("stall_report")
    rows = sr.load(NCU_CSV_REASONS)
    assert rows[0][4] == {"long_sb": 57, "wait": 3}  # "(Not Issued)" columns left out, zeros dropped
    assert rows[2][4] == {"barrier": 10}
    text = sr.report(rows, top=3)
    lines = text.splitlines()
    # Over the kernel: long_sb 57, wait 23, barrier 20 of 100 samples.
    assert "| long_sb | 57 | 57.0 % |" in text and "| wait | 23 | 23.0 % |" in text and "| barrier | 20 | 20.0 % |" in text
    top = [line for line in lines if line.startswith("| 0 |")][0]
    assert top.endswith("| MOV R37, R18 | long_sb 95 %, wait 5 % |")
    qg = [line for line in lines if line.startswith("| 1 |")][0]
    assert qg.endswith("| wait 67 %, barrier 33 % |")
    # Samples no column names (30 at an instruction whose columns add up to 3) are called so.
    assert sr.main_reasons({"wait": 2, "dispatch": 1}, 30) == "wait 7 %, dispatch 3 %, unnamed 90 %"
    # Without the columns the "why" cell says so, and there is no reason table.
    plain = sr.report(sr.load(NCU_CSV), top=1)
    assert "stall reason" not in plain and plain.splitlines()[4].endswith("| - |")


def test_stall_report_says_what_is_missing():
    sr = load_script("stall_report")
    with pytest.raises(ValueError, match="no source-page table"):
        sr.load("==PROF== nothing profiled\n")
    with pytest.raises(ValueError, match="Instructions Executed"):
        sr.load('"Address","Source","Warp Stall Sampling (All Samples)"\n"0x0","NOP","1"\n')


def bench_json(tmp_path, name, points):
    """A moekit-bench JSON file with rows {(preset, tp, scheme, tokens): (us, baseline_us)}."""
    rows = [dict(preset=p, tp=tp, scheme=s, tokens=m, path="auto", op="fused_experts", us=us, baseline_us=base)
            for (p, tp, s, m), (us, base) in points.items()]
    f = tmp_path / name
    f.write_text(json.dumps(dict(commit="x", rows=rows)))
    return str(f)


def test_bench_compare_takes_the_best_repeat_and_groups_the_points(tmp_path):
    bc = load_script("bench_compare")
    decode, prefill, only_a = ("m", 8, "bf16", 4), ("m", 1, "bf16", 4096), ("m", 1, "bf16", 1)
    a1 = bench_json(tmp_path, "a1.json", {decode: (100.0, 50.0), prefill: (2000.0, 4000.0), only_a: (9.0, 9.0)})
    a2 = bench_json(tmp_path, "a2.json", {decode: (110.0, 50.0), prefill: (2100.0, 4000.0), only_a: (9.0, 9.0)})
    b1 = bench_json(tmp_path, "b1.json", {decode: (80.0, 40.0), prefill: (2500.0, 4000.0)})
    b2 = bench_json(tmp_path, "b2.json", {decode: (90.0, 40.0), prefill: (2400.0, 4000.0)})
    rows = {r[0][:4]: r for r in bc.compare(bc.load([a1, a2]), bc.load([b1, b2]))}
    assert set(rows) == {decode, prefill}  # a point B lacks is left out
    _, a_us, b_us, speedup, norm, spread = rows[decode]
    assert (a_us, b_us) == (100.0, 80.0)  # each variant's best repeat
    assert speedup == pytest.approx(1.25)
    assert norm == pytest.approx((100.0 / 50.0) / (80.0 / 40.0))  # cuBLAS ran 20 % faster next to B
    assert spread == pytest.approx(90.0 / 80.0 - 1.0)  # the larger of the two variants' spreads
    assert rows[prefill][3] == pytest.approx(2000.0 / 2400.0)
    text = bc.summary(list(rows.values()))
    assert "| TP8 M<=256 | 1 | 1.250 |" in text and "| TP1 M>=512 | 1 | 0.833 |" in text
    assert "| all | 2 |" in text


def test_bench_compare_counts_the_points_at_the_target(tmp_path):
    bc = load_script("bench_compare")
    # roof 8.5 us: target 14 us. A: 14 (meets), 17 (1.21x), 30 (2.1x); B: 15 (1.07x), 14, 30.
    def grid(name, times):
        rows = [dict(preset="q", tp=8, scheme="bf16", tokens=m, path="auto", op="fused_experts", us=us,
                     baseline_us=10.0, roof_us=8.5) for m, us in times.items()]
        rows.append(dict(preset="q", tp=1, scheme="bf16", tokens=512, path="auto", op="fused_experts", us=1.0,
                         baseline_us=1.0, roof_us=8.5))  # M > 256: not counted
        f = tmp_path / name
        f.write_text(json.dumps(dict(commit="x", rows=rows)))
        return str(f)
    a = grid("a.json", {1: 14.0, 2: 17.0, 4: 30.0})
    b = grid("b.json", {1: 15.0, 2: 14.0, 4: 30.0})
    a_runs, b_runs = bc.load([a]), bc.load([b])
    text = bc.target_table(bc.compare(a_runs, b_runs), a_runs, b_runs)
    assert "| TP8 bf16 | 3 | 1 | 1 | 2 | 2 |" in text
    assert "| all | 3 |" in text
    assert "q TP8 bf16 M = 1: 1.000 -> 1.071 of the target" in text
    assert "q TP8 bf16 M = 2: 1.214 -> 1.000 of the target" in text
    assert "M = 4" not in text  # 2.1x in both: no change
    no_roof = bench_json(tmp_path, "n.json", {("q", 8, "bf16", 1): (10.0, 10.0)})
    assert bc.target_table(bc.compare(bc.load([no_roof]), bc.load([no_roof])), bc.load([no_roof]), bc.load([no_roof])) == ""


def test_path_report_finds_where_auto_loses(tmp_path):
    pr = load_script("path_report")
    def row(m, path, us, dispatch=""):
        return dict(preset="q", tp=8, scheme="bf16", tokens=m, path=path, us=us, dispatch=dispatch)
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps(dict(rows=[
        row(4, "swapab", 50.0), row(4, "tokmajor", 60.0), row(4, "mma", None),
        row(64, "swapab", 120.0), row(64, "tokmajor", 90.0), row(64, "tokmajor", 95.0),
        row(1024, "tokmajor", 400.0)])))
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(dict(rows=[row(4, "auto", 51.0, "gemm1=swapab gemm2=swapab"),
                                          row(64, "auto", 119.0, "gemm1=swapab gemm2=swapab")])))
    table_rows = {r[0][3]: r for r in pr.rows(pr.load([str(sweep)]), pr.load([str(grid)]))}
    assert table_rows[4][2] == "swapab" and table_rows[4][5] == pytest.approx(50.0 / 51.0)
    assert table_rows[64][1]["tokmajor"] == 90.0  # the faster of two repeats; mma's null time dropped
    assert table_rows[64][2] == "tokmajor" and table_rows[1024][3] is None  # no auto row there
    text = pr.report(list(table_rows.values()), 0.03)
    assert "1 points more than 3% slower" in text
    assert "q TP8 bf16 M=64: auto ran gemm1=swapab gemm2=swapab in 119.0 µs, tokmajor 90.0 µs (1.32x)" in text
    assert "M=4:" not in text  # 2 % slower is within the slack
    assert pr.main([str(sweep), "--auto", str(grid)]) == 0
    assert "| gemv |" not in text.splitlines()[0]  # only the paths the sweep has get a column


def test_path_report_names_the_gemv_kernel_and_drops_failed_checks(tmp_path):
    pr = load_script("path_report")
    def row(m, path, us, dispatch="", ok=True):
        return dict(preset="q", tp=8, scheme="fp8_per_tensor", tokens=m, path=path, us=us, dispatch=dispatch,
                    check_ran=True, check_passed=ok)
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps(dict(rows=[
        row(2, "gemv", 20.0, "gemv"), row(2, "gemv", 18.0, "gemv(mma)"), row(2, "decode", 19.0, "decode"),
        row(2, "swapab", 10.0, "gemm1=swapab gemm2=swapab", ok=False),  # failed its check: not a time
        row(2, "auto", 20.0, "gemv")])))
    [r] = pr.rows(pr.load([str(sweep)]), {})
    assert r[1] == {"gemv": 20.0, "gemv(mma)": 18.0, "decode": 19.0}
    assert r[2] == "gemv(mma)" and r[5] == pytest.approx(18.0 / 20.0)
    text = pr.report([r], 0.03)
    assert text.splitlines()[0].startswith("| preset | TP | scheme | M | decode | gemv | gemv(mma) | fastest")
    assert "q TP8 fp8_per_tensor M=2: auto ran gemv in 20.0 µs, gemv(mma) 18.0 µs (1.11x)" in text


def test_target_report_rates_each_path_against_the_brief_target(tmp_path, capsys, monkeypatch):
    tr = load_script("target_report")
    def row(m, path, us, roof, dispatch="", ok=True):
        return dict(preset="q", tp=8, scheme="bf16", tokens=m, path=path, us=us, roof_us=roof, dispatch=dispatch,
                    check_passed=ok)
    run = tmp_path / "run.json"
    # target = roof / 0.85 + 4: M=1 roof 1.7 -> 6.0 us; M=2 roof 8.5 -> 14.0 us; M=512 is past --max-tokens
    run.write_text(json.dumps(dict(rows=[
        row(1, "decode", 9.0, 1.7), row(1, "auto", 12.0, 1.7, "fused"),
        row(2, "decode", 13.0, 8.5), row(2, "auto", 16.0, 8.5, "gemm1=swapab gemm2=swapab", ok=False),
        row(512, "decode", 1.0, 1.7)])))
    monkeypatch.setattr(sys, "argv", ["target_report.py", str(run)])
    tr.main()
    out = capsys.readouterr().out
    assert "decode 9.0 (1.50x, ok); auto(fused) 12.0 (2.00x, ok)" in out
    assert "auto(gemm1=swapab) 16.0 (1.14x, FAIL)" in out
    assert "bf16: 1/2 points meet the target with their fastest path, 1/2 within 1.25x" in out
    assert " 512 " not in out


def test_decode_cluster_table_finds_the_fastest_size_and_the_model_loss(tmp_path, capsys, monkeypatch):
    ct = load_script("decode_cluster_table")
    def write(variant, rows):
        path = tmp_path / f"cluster-{variant}.json"
        path.write_text(json.dumps(dict(rows=[dict(preset="q", tp=8, scheme="bf16", tokens=m, us=us,
                                                   check_ran=True, check_passed=ok) for m, us, ok in rows])))
        return str(path)
    # M=1: the model (26.7) took the size that is 1.234x the fastest (c4 21.6); M=2: c2 is fastest
    # but failed its check, so c4 counts.
    files = [write("model", [(1, 26.7, True), (2, 30.0, True)]), write("1", [(1, 40.0, True), (2, 41.0, True)]),
             write("2", [(1, 28.3, True), (2, 20.0, False)]), write("4", [(1, 21.6, True), (2, 30.0, True)]),
             write("8", [(1, 26.7, True), (2, 33.0, True)])]
    monkeypatch.setattr(sys, "argv", ["decode_cluster_table.py"] + files)
    ct.main()
    out = capsys.readouterr().out
    assert "| q | 8 | bf16 | 1 | 26.7 | 40.0 | 28.3 | 21.6 | 26.7 | c4 | 1.236 |" in out
    assert "20.0 CHECK FAILED" in out and "| c4 | 1.000 |" in out
    assert "1 points lose more than 3 %" in out


# ---- per-scheme baselines and the --check summary (bench_rows.py, grid_report.py, bench_compare.py) ----

def grid_row(scheme, m, us, base, base8=None, tp=1, path="auto", **extra):
    r = dict(preset="q", tp=tp, scheme=scheme, tokens=m, path=path, op="fused_experts", us=us, roof_us=us / 2,
             baseline="cublas_grouped_bf16", baseline_us=base)
    if base8 is not None:
        r.update(baseline_fp8="cublaslt_fp8_e4m3_per_expert", baseline_fp8_us=base8)
    r.update(extra)
    return r


def test_bench_rows_pairs_each_scheme_with_its_own_precision():
    br = load_script("bench_rows")
    bf, fp = grid_row("bf16", 4, 10.0, 20.0), grid_row("fp8_per_tensor", 4, 10.0, 30.0, base8=15.0)
    assert br.like_for_like(bf) == ("cublas_grouped_bf16", 20.0)
    assert br.like_for_like(fp) == ("cublaslt_fp8_e4m3_per_expert", 15.0)
    old_fp8 = grid_row("fp8_per_tensor", 4, 10.0, 30.0)  # a grid recorded before the fp8 baseline
    assert br.like_for_like(old_fp8) == (None, None)
    text = br.ratio_table([bf, fp, grid_row("fp8_per_tensor", 8, 10.0, 40.0, base8=5.0)])
    lines = text.splitlines()
    assert "| bf16 | auto | cublas_grouped_bf16 | 1 | 2.00x |" in text
    # fp8 against cuBLASLt fp8: 1.5x and 0.5x, median 1.0x; faster at 1 of 2.
    assert "| fp8_per_tensor | auto | cublaslt_fp8_e4m3_per_expert | 2 | 1.00x | 0.50x | 1.50x | 1 of 2 |" in text
    # fp8 against cuBLAS bf16 only as a labelled extra line, never merged with bf16's.
    mixed = [l for l in lines if "not like for like" in l]
    assert len(mixed) == 1 and mixed[0].startswith("| fp8_per_tensor | auto | cublas_grouped_bf16: fp8 vs bf16")
    assert not any(l.startswith("| all") for l in lines)
    assert "cuBLASLt fp8: not measured in this run" in br.ratio_table([old_fp8])


def test_bench_rows_check_summary_counts_samples_and_failures():
    br = load_script("bench_rows")
    rows = [grid_row("bf16", 4, 1, 1, check_ran=True, check_tokens=4, check_passed=True, max_rel_err=2e-3, check_tol=1e-2),
            grid_row("fp8_per_tensor", 4096, 1, 1, check_ran=True, check_tokens=9, check_passed=False,
                     max_rel_err="inf", check_tol=0.1),
            grid_row("bf16", 8, 1, 1, check_ran=False)]
    text = br.check_summary(rows)
    assert text.startswith("--check: 2 of 3 rows checked against the CPU reference (1 on a token sample), 1 failed")
    assert "bf16 0.002" in text and "fp8_per_tensor inf" in text
    assert "q TP1 fp8_per_tensor M=4096 (inf > 0.1)" in text
    assert "did not run" in br.check_summary([grid_row("bf16", 1, 1, 1)])


def test_grid_report_prints_ratios_per_scheme(tmp_path, capsys):
    gr = load_script("grid_report")
    f = tmp_path / "grid.json"
    f.write_text(json.dumps(dict(commit="abc", dirty=True, date="d", gpu="g", rows=[
        grid_row("bf16", 4, 10.0, 11.0), grid_row("fp8_per_tensor", 4, 10.0, 20.0, base8=12.0),
        grid_row("bf16", 4, 30.0, 11.0, path="mma")])))
    gr.main([str(f)])
    out = capsys.readouterr().out
    assert "(commit abc, dirty tree, d, g)" in out
    assert "| bf16 | auto | cublas_grouped_bf16 | 1 | 1.10x |" in out
    assert "| fp8_per_tensor | auto | cublaslt_fp8_e4m3_per_expert | 1 | 1.20x |" in out
    assert "| mma |" not in out  # the verdict reads the auto path only


def test_grid_report_judges_the_in_graph_time_on_request(tmp_path, capsys):
    gr = load_script("grid_report")
    f = tmp_path / "grid.json"
    # roof_us = us / 2, so target = us / 1.7 + 4: us = 10 -> 9.88 (misses by 1.2 %); in graph 8 meets it.
    # us = 30 -> 21.6: 1.39x, not within 1.25x; in graph 26 -> 1.20x, within.
    f.write_text(json.dumps(dict(commit="abc", dirty=False, date="d", gpu="g", rows=[
        grid_row("bf16", 4, 10.0, 11.0, us_in_graph=8.0), grid_row("bf16", 8, 30.0, 11.0, us_in_graph=26.0)])))
    gr.main([str(f)])
    out = capsys.readouterr().out
    assert "**0 of 2 points meet BRIEF §4**." in out and "Within 1.25x of the target: 1 of 2." in out
    assert "Timed inside the graph (us_in_graph, 2 rows): 1 meet, 2 within 1.25x; us - us_in_graph median 4.00" in out
    gr.main([str(f), "--in-graph"])
    out = capsys.readouterr().out
    assert "**1 of 2 points meet BRIEF §4** (timed inside the graph: us_in_graph)." in out
    assert "Within 1.25x of the target: 2 of 2." in out
    # The baselines stay on the outer time (11 / 10 = 1.10x, not 11 / 8).
    assert "| bf16 | auto | cublas_grouped_bf16 | 2 | 0.73x | 0.37x | 1.10x |" in out
    # --previous is judged in graph too: the same grid again is a 1.00x speedup, with 1 met there.
    gr.main([str(f), "--in-graph", "--previous", str(f)])
    out = capsys.readouterr().out
    assert "1 met there; speedup median 1.00x" in out
    g = tmp_path / "old.json"
    g.write_text(json.dumps(dict(commit="abc", rows=[grid_row("bf16", 4, 10.0, 11.0)])))
    with pytest.raises(SystemExit):
        gr.main([str(g), "--in-graph"])
    with pytest.raises(SystemExit):  # a previous grid without the in-graph time
        gr.main([str(f), "--in-graph", "--previous", str(g)])


def test_bench_compare_normalizes_fp8_by_the_fp8_baseline_and_groups_by_scheme(tmp_path, capsys):
    bc = load_script("bench_compare")
    def doc(name, rows):
        f = tmp_path / name
        f.write_text(json.dumps(dict(commit="x", rows=rows)))
        return str(f)
    a = doc("a.json", [grid_row("bf16", 4, 100.0, 50.0), grid_row("fp8_per_tensor", 4, 100.0, 50.0, base8=100.0)])
    b = doc("b.json", [grid_row("bf16", 4, 50.0, 50.0), grid_row("fp8_per_tensor", 4, 50.0, 25.0, base8=100.0)])
    rows = {r[0][2]: r for r in bc.compare(bc.load([a]), bc.load([b]))}
    assert rows["bf16"][4] == pytest.approx(2.0)
    # fp8: the cuBLASLt fp8 baseline did not move, so the normalized speedup is the raw 2.0 (the
    # bf16 one, which ran 2x faster next to B, would have said 1.0).
    assert rows["fp8_per_tensor"][4] == pytest.approx(2.0)
    text = bc.summary(list(rows.values()))
    assert "| scheme bf16 | 1 | 2.000 |" in text and "| scheme fp8_per_tensor | 1 | 2.000 |" in text
    bc.main(["--a", a, "--b", b])
    out = capsys.readouterr().out
    assert "| fp8_per_tensor | auto | cublaslt_fp8_e4m3_per_expert | 1 | 2.00x |" in out


# ---- provenance: stamp_tree.sh and cmake/moekit_build_info.cmake, in a scratch git repository ----

def _have(*tools):
    return all(shutil.which(t) for t in tools)


def _scratch_repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tools" / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "scripts" / "stamp_tree.sh", repo / "tools" / "scripts" / "stamp_tree.sh")
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitignore").write_text("/build/\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "c"], check=True)
    return repo, git


def _stamp(repo, *args):
    out = subprocess.run(["bash", str(repo / "tools" / "scripts" / "stamp_tree.sh"), *args], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out) if args else json.loads((repo / "build-info.json").read_text())


def _build_info(src, out, env=None):
    r = subprocess.run(["cmake", f"-DSRC={src}", f"-DOUT={out}", "-P", str(ROOT / "cmake" / "moekit_build_info.cmake")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return out.read_text(), r.stderr


@pytest.mark.skipif(not _have("git", "cmake", "bash"), reason="needs git, cmake and bash")
def test_stamp_tree_hashes_the_working_tree_and_ignores_itself(tmp_path):
    repo, git = _scratch_repo(tmp_path)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD", "HEAD^{tree}"], capture_output=True, text=True,
                          check=True).stdout.split()
    clean = _stamp(repo)
    assert (clean["commit"], clean["tree"], clean["dirty"]) == (head[0], head[1], False)
    assert _stamp(repo, "--stdout")["tree"] == head[1]  # its own build-info.json is not part of the tree
    (repo / "a.txt").write_text("two\n")
    dirty = _stamp(repo, "--stdout")
    assert dirty["dirty"] and dirty["tree"] != head[1] and dirty["commit"] == head[0]
    (repo / "a.txt").write_text("one\n")
    (repo / "new.txt").write_text("untracked, not ignored\n")
    assert _stamp(repo, "--stdout")["dirty"]
    (repo / "new.txt").unlink()
    (repo / "build").mkdir()
    (repo / "build" / "x.o").write_text("ignored\n")
    assert _stamp(repo, "--stdout")["tree"] == head[1]
    status = subprocess.run(git[:3] + ["status", "--porcelain"], capture_output=True, text=True).stdout
    assert status.strip() == "?? build-info.json"  # the real index and HEAD did not move


@pytest.mark.skipif(not _have("git", "cmake", "bash"), reason="needs git, cmake and bash")
def test_build_info_reads_git_then_the_stamp_and_catches_a_stale_one(tmp_path):
    repo, git = _scratch_repo(tmp_path)
    out = tmp_path / "info.cpp"
    text, _ = _build_info(repo, out)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert f'"{head}"' in text and ", 0, " in text and '"git"' in text
    # The GPU machine: a copy without .git, with the stamp written before copying.
    stamp = _stamp(repo)
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    text, _ = _build_info(copy, out)
    assert f'"{stamp["commit"]}", "{stamp["tree"]}", 0,' in text and '"build-info.json"' in text
    (copy / "a.txt").write_text("edited after stamping\n")
    text, err = _build_info(copy, out)
    assert f'"stale:{stamp["tree"]}", 1,' in text and "stale" in err
    (copy / "build-info.json").unlink()
    text, err = _build_info(copy, out, env=dict(os.environ, MOEKIT_COMMIT="abc123"))
    assert '"abc123", "unknown", -1,' in text and "typed by hand" in err
    env = {k: v for k, v in os.environ.items() if k != "MOEKIT_COMMIT"}
    text, _ = _build_info(copy, out, env=env)
    assert '"unknown", "unknown", -1,' in text


@pytest.mark.skipif(not _have("git", "cmake", "bash"), reason="needs git, cmake and bash")
def test_stamp_omit_keeps_a_tree_without_its_records_clean_and_not_stale(tmp_path):
    # tools/scripts/ab_base.sh: a base tree without bench/results (STAMP_OMIT=bench/results): the
    # stamp keeps HEAD's tree and dirty 0, says what it omitted, hashes only the files present, and
    # the build of the copy reads it as not stale; an edit elsewhere is still dirty.
    repo, git = _scratch_repo(tmp_path)
    (repo / "bench" / "results").mkdir(parents=True)
    (repo / "bench" / "results" / "r.json").write_text("{}\n")
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "records"], check=True)
    head = subprocess.run(git[:3] + ["rev-parse", "HEAD", "HEAD^{tree}"], capture_output=True, text=True,
                          check=True).stdout.split()
    shutil.rmtree(repo / "bench" / "results")
    env = dict(os.environ, STAMP_OMIT="bench/results")
    subprocess.run(["bash", str(repo / "tools" / "scripts" / "stamp_tree.sh")], check=True, env=env,
                   capture_output=True)
    stamp = json.loads((repo / "build-info.json").read_text())
    assert (stamp["commit"], stamp["tree"], stamp["dirty"]) == (head[0], head[1], False)
    assert stamp["omitted"] == "bench/results" and not any(p.startswith("bench/results") for p in stamp["files"])
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    text, err = _build_info(copy, tmp_path / "info.cpp")
    assert f'"{head[0]}", "{head[1]}", 0,' in text and "stale" not in err
    (repo / "a.txt").write_text("edited\n")
    out = subprocess.run(["bash", str(repo / "tools" / "scripts" / "stamp_tree.sh"), "--stdout"], check=True, env=env,
                         capture_output=True, text=True).stdout
    assert json.loads(out)["dirty"]


@pytest.mark.skipif(not _have("git", "cmake", "bash"), reason="needs git, cmake and bash")
def test_build_info_of_a_tree_nested_in_another_checkout_reads_its_own_stamp(tmp_path):
    # An A/B's base unpacked into the checkout's ignored .ab/ (tools/scripts/ab_base.sh): git is
    # asked only at the top of a work tree, so the base records its own stamp, not the enclosing
    # checkout's commit and tree.
    repo, git = _scratch_repo(tmp_path)
    stamp = _stamp(repo)
    (repo / ".gitignore").write_text("/build/\n/.ab/\n")
    subprocess.run(git + ["commit", "-q", "-am", "ignore .ab"], check=True)
    nested = repo / ".ab" / "base"
    shutil.copytree(repo, nested, ignore=shutil.ignore_patterns(".git", ".ab"))
    (nested / ".gitignore").write_text("/build/\n")  # the stamped tree's files, as stamped
    out = tmp_path / "info.cpp"
    text, _ = _build_info(nested, out)
    assert f'"{stamp["commit"]}", "{stamp["tree"]}", 0,' in text and '"build-info.json"' in text


def test_host_overhead_stub_runs_the_cuda_host_path(tmp_path):
    """host_overhead_stub.py drives moekit's Python for CUDA tensors (views, the workspace-size
    cache, stream and device lookups, the positional binding call) on a stand-in torch: it runs
    here, without torch or a GPU, on the moekit this suite imports."""
    import moekit

    out = tmp_path / "stub.json"
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(moekit.__file__)))
    subprocess.run([sys.executable, str(ROOT / "tools" / "scripts" / "host_overhead_stub.py"), "--pythonpath", pkg_parent,
                    "--tokens", "1,3", "--iters", "20", "--repeats", "1", "--json", str(out)], check=True,
                   capture_output=True, text=True)
    rows = json.loads(out.read_text())["rows"]
    assert {(r["level"], r["tokens"]) for r in rows} == {
        (lv, m) for lv in ("fused_experts", "fused_experts_int64", "impl") for m in (1, 3)}
    assert all(r["us_per_call"] > 0 for r in rows)


def test_pack_out_bundles_a_folder_within_eight_files_and_repacks(tmp_path):
    # The device machines return at most 8 files of $OUT: an A/B of two repeats (four JSON, four
    # logs, compare.md) plus a suite log must come back as one archive and a few summaries, with
    # nothing lost, and a second run must fold in what was added since.
    out = tmp_path / "out"
    ab = out / "ab"
    (ab / "deep").mkdir(parents=True)
    for v in ("a", "b"):
        for i in (1, 2):
            (ab / f"{v}-{i}.json").write_text(json.dumps({"v": v, "i": i}))
            (ab / f"{v}-{i}.log").write_text(f"{v}{i}\n")
    (ab / "compare.md").write_text("# compare\n")
    (ab / "deep" / "x.txt").write_text("deep\n")
    (out / "suite.txt").write_text("suite\n")
    (out / "big.txt").write_text("x" * 70000)
    originals = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    script = ROOT / "tools" / "scripts" / "pack_out.sh"

    def unpack():
        dest = tmp_path / "unpacked"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        subprocess.run(["tar", "xzf", str(out / "out.tar.gz"), "-C", str(dest)], check=True)
        return {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*")
                if p.is_file() and p.name != ".pack_kept"}

    subprocess.run(["bash", str(script), str(out)], check=True, capture_output=True)
    left = sorted(p.name for p in out.iterdir())
    assert len(left) <= 8
    # The kept summaries: the compare.md (flattened name) and the small top-level text; not the big one.
    assert left == ["ab-compare.md", "out.tar.gz", "suite.txt"]
    assert (out / "ab-compare.md").read_text() == "# compare\n"
    assert unpack() == originals
    # Again, with a file added: the archive holds the old and the new, the kept copies stay copies.
    (out / "new.json").write_text("{}")
    subprocess.run(["bash", str(script), str(out)], check=True, capture_output=True)
    assert sorted(p.name for p in out.iterdir()) == ["ab-compare.md", "out.tar.gz", "suite.txt"]
    assert unpack() == {**originals, "new.json": b"{}"}


def test_rope_quant_bench_takes_the_gpus_rate_from_moekit_bench(tmp_path, capsys):
    # The torch comparison's roof uses moekit-bench's datasheet table (one table for both tools):
    # its answer when the bench runs, the override when given, BRIEF §4's H200 rate (and a
    # warning) when the bench cannot be run.
    module = load_script("rope_quant_bench")
    bench = tmp_path / "moekit-bench"
    bench.write_text('#!/bin/sh\n[ "$1" = --hbm-datasheet ] || exit 2\necho "3350 GB/s (datasheet: $2)"\n')
    bench.chmod(0o755)
    assert module.hbm_rate("NVIDIA H100 80GB HBM3", str(bench)) == (3350.0, "datasheet: NVIDIA H100 80GB HBM3")
    assert module.hbm_rate("NVIDIA H100 80GB HBM3", str(bench), override=3000) == (3000.0, "--hbm-gbps")
    gbps, source = module.hbm_rate("NVIDIA H200", str(tmp_path / "missing"))
    assert gbps == 4800.0 and source.startswith("BRIEF")
    assert "assumes an H200" in capsys.readouterr().err
    # The real table, where this checkout has built moekit-bench.
    if os.access(module.DEFAULT_BENCH, os.X_OK):
        assert module.hbm_rate("NVIDIA H100 80GB HBM3")[0] == 3350.0
        assert module.hbm_rate("NVIDIA H200")[0] == 4800.0


def test_skeleton_floor_lists_the_points_and_judges_each_structure(tmp_path, capsys):
    # tools/scripts/skeleton_floor.py: the --skeleton-points list of a grid's small points (the
    # experts each touched, capped at the skeleton's 256), then the floors joined back to the rows
    # with their ratio to the target (roof / 0.85 + 4 µs) and a verdict per point.
    sf = load_script("skeleton_floor")

    def row(preset, scheme, M, touched, roof, us, path="auto"):
        return dict(preset=preset, tp=8, scheme=scheme, tokens=M, touched_experts=touched, roof_us=roof, us=us,
                    path=path)

    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(dict(commit="abc1234", date="d", gpu="g", rows=[
        row("qwen3-30b-a3b", "fp8_per_tensor", 1, 8, 0.85, 14.0),   # target 5.0
        row("deepseek-v3", "bf16", 16, 300, 17.0, 40.0),            # target 24.0; 300 -> 256 (E)
        row("deepseek-v3", "bf16", 32, 100, 200.0, 300.0),          # past --max-tokens
        row("qwen3-30b-a3b", "bf16", 1, 8, 1.7, 20.0, path="mma"),  # a forced path: not a point
    ])))
    assert sf.main(["points", str(grid)]) == 0
    pts = capsys.readouterr().out.strip().split(",")
    assert pts == ["qwen3-30b-a3b:8:fp8:1:8", "deepseek-v3:8:bf16:16:256"]

    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps(dict(commit="def5678", dirty=1, date="d2", gpu="g", rows=[
        {"case": "skeleton-point qwen3-30b-a3b:8:fp8:1:8: no barrier (a lower bound)", "us": 7.0, "in_graph_us": 6.0},
        {"case": "skeleton-point qwen3-30b-a3b:8:fp8:1:8: cooperative launch, grid sync", "us": 8.0, "in_graph_us": 7.0},
        {"case": "skeleton-point deepseek-v3:8:bf16:16:256: no barrier (a lower bound)", "us": 20.0, "in_graph_us": 19.0},
        {"case": "skeleton-point deepseek-v3:8:bf16:16:256: cooperative launch, grid sync", "us": 32.0, "in_graph_us": 31.0},
        {"case": "skeleton-point deepseek-v3:8:bf16:16:256: plain launch, counter barrier, w2 to smem before GEMM1",
         "us": 26.0, "in_graph_us": 25.0},
        {"case": "skeleton-point deepseek-v3:8:bf16:16:256: two launches, GEMM1's then GEMM2's", "us": 34.5,
         "in_graph_us": 33.0},
        {"case": "empty kernel", "us": 3.0, "in_graph_us": 2.0},
    ])))
    out_md = tmp_path / "report.md"
    assert sf.main(["report", str(floor), str(grid), "--out", str(out_md)]) == 0
    out = capsys.readouterr().out
    assert out == out_md.read_text()
    assert "(commit def5678, dirty tree, d2, g)" in out and "(commit abc1234, d)" in out
    # fp8 M = 1: moekit 14.0 / 5.0, lower bound 7.0 / 5.0 = 1.40: no one-launch design reaches 1.25x.
    assert ("| qwen3-30b-a3b TP8 fp8_per_tensor M=1 | 8 | 14.0 | 2.80 | 7.0 | 1.40 | 8.0 | 1.60 | - | - | - | - | "
            "out of reach of any one-launch design") in out
    # bf16 M = 16: lower bound 20 / 24 = 0.83, grid sync 32 / 24 = 1.33 but w2 early 26 / 24 = 1.08:
    # the structure leaves room (the best barrier structure counts).
    assert "| 256 | 40.0 | 1.67 | 20.0 | 0.83 | 32.0 | 1.33 | 26.0 | 1.08 | 34.5 | 1.44 | the structure leaves room" in out
    assert "(the skeleton's launch boundary): median +2.50 µs (+2.50 to +2.50) over 1 points" in out
    assert "2 points: 1 beyond 1.25x for any one-launch design with a routing read, 0 beyond it with a grid-wide" in out
    assert "1 with room under it" in out
    # Without the w2-early row, the grid sync alone decides: out of reach with the barrier.
    rows = json.loads(floor.read_text())
    rows["rows"] = [r for r in rows["rows"] if "w2 to smem" not in r["case"]]
    floor.write_text(json.dumps(rows))
    assert sf.main(["report", str(floor), str(grid)]) == 0
    assert "| 1.33 | - | - | 34.5 | 1.44 | out of reach with a grid-wide barrier between the GEMMs" in capsys.readouterr().out
    # A floor file of another grid's points: nothing to join, an error.
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(rows=[row("mixtral-8x7b", "bf16", 1, 2, 18.0, 30.0)])))
    assert sf.main(["report", str(floor), str(other)]) == 1


def test_hscale_sim_compares_the_intermediate_scales(capsys):
    # tools/scripts/hscale_sim.py: per-unit, per-slot and bf16 intermediates against the reference's
    # per-tensor scale. One unit covering every slot of one expert is the per-tensor scale itself.
    hs = load_script("hscale_sim")
    ids, wts, w2q, h = hs.layer(M=6, E=1, k=1, K=64, N=16, seed=3)
    assert np.array_equal(hs.per_unit(h, ids, tile=6), hs.per_tensor(h, ids, tile=6))
    assert not np.array_equal(hs.per_unit(h, ids, tile=2), hs.per_tensor(h, ids, tile=2))
    res = hs.study(M=16, E=8, k=2, K=256, N=32, tile=8, seed=1)
    assert set(res) == {"per unit", "per slot", "bf16 h"}
    for med, mx, elem in res.values():
        assert 0.0 < med <= mx < 0.1 and 0.0 < elem < 1.0
    assert res["bf16 h"][0] < res["per unit"][0]  # the reference's own h rounding is all bf16 h differs by
    assert hs.main(["--tokens", "4", "--experts", "4", "--top-k", "2", "--hidden", "64", "--inter", "16",
                    "--tile", "4", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("| 4 | 1 |") == 3 and "row error median" in out


def tiny_cubin(kernels):
    """An ELF64 file whose only sections are `.text.<name>` for each (name, code) in `kernels`
    (what kernel_code.py reads of a cubin), with its section-name table."""
    import struct

    names = b"\0.shstrtab\0" + b"".join(b".text." + n.encode() + b"\0" for n, _ in kernels)
    body = names + b"".join(code for _, code in kernels)
    shoff = 64 + len(body)
    shoff += (-shoff) % 8
    headers = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
               struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, 64, len(names), 0, 0, 1, 0)]
    name_off, data_off = 11, 64 + len(names)
    for n, code in kernels:
        headers.append(struct.pack("<IIQQQQIIQQ", name_off, 1, 6, 0, data_off, len(code), 0, 0, 128, 0))
        name_off += len(".text.") + len(n) + 1
        data_off += len(code)
    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(headers), 1)
    data = ehdr + body
    return data + b"\0" * (shoff - len(data)) + b"".join(headers)


def test_kernel_code_sizes_and_compare_read_the_text_sections(tmp_path, capsys):
    # tools/scripts/kernel_code.py: per-kernel .text bytes of a cubin, and two builds' kernels
    # compared by name and by code (a kernel renamed by a new defaulted template argument).
    kc = load_script("kernel_code")
    a = tmp_path / "a.cubin"
    b = tmp_path / "b.cubin"
    a.write_bytes(tiny_cubin([("k_general", b"\x11" * 256), ("k_other", b"\x22" * 64), ("k_gone", b"\x33" * 32)]))
    b.write_bytes(tiny_cubin([("k_general_v2", b"\x11" * 256), ("k_other", b"\x23" * 64), ("k_new", b"\x44" * 16)]))
    assert [(n, m) for n, m, _ in kc.sizes(a)] == [(256, "k_general"), (64, "k_other"), (32, "k_gone")]
    assert [m for _, m, _ in kc.sizes(a, "other")] == ["k_other"]
    rows = {d: (v, na, nb) for v, d, na, nb in kc.compare(a, b)}
    assert rows["k_general_v2"] == ("renamed", 256, 256)
    assert rows["k_other"] == ("differ", 64, 64)
    assert rows["k_gone"] == ("only a", 32, None) and rows["k_new"] == ("only b", None, 16)
    assert "k_general" not in rows
    assert kc.main(["compare", str(a), str(b)]) == 0
    assert "differ: 1, only a: 1, only b: 1, renamed: 1" in capsys.readouterr().out
    with pytest.raises(ValueError):
        kc.text_sections(b"not an elf")

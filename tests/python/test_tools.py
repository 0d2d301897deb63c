"""The analysis scripts of tools/scripts that the team runs on GPU results (no GPU needed here):
stall_report.py on a small Nsight Compute source-page table, bench_compare.py and path_report.py on small
moekit-bench JSON files."""

import importlib.util
import json
import pathlib

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

"""A diagnostic, not a test (pytest never collects it): it looks into the segfault once seen in
str(moekit.describe_fused_experts(...)) (the first std::ostringstream moekit uses) in the installed
moekit, on the machine where it happened: symbol interposition between the extension's libstdc++
and the host's, import order against torch, struct layouts. Run it by hand after
tests/python/run.sh has installed the package, when a str()/repr() of a moekit object crashes:

    python3 tools/scripts/diagnose_str_crash.py

It prints what it finds and ends with one line, "DIAGNOSE: PASS" or "DIAGNOSE: FAIL (...)":
  1. the extension: its path, the libraries it needs, how many symbols it exports (the fix exports
     PyInit__C only and carries a hidden libstdc++: no libstdc++.so.6 among them);
  2. str() of a described problem in child processes, under faulthandler, in each import order
     (torch first, moekit first, no torch), then the whole of test_cpu_numpy.py;
  3. symbol interposition: LD_DEBUG=bindings of the moekit-first child, listing every binding from
     _C or libstdc++ to a library that is not libstdc++ / libc / libpython / _C / the CUDA runtime;
  4. layout: sizeof / offsetof of the public structs as g++ and as nvcc compile them;
  5. on a crash, the gdb / cuda-gdb command whose backtrace names the frames.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = r"""
import faulthandler, os, sys
faulthandler.enable()
order = sys.argv[-1]
if order == "torch-first":
    import torch
import numpy as np, ml_dtypes, moekit
if order == "moekit-first" and os.environ.get("MOEKIT_NO_TORCH") != "1":
    import torch
BF16 = np.dtype(ml_dtypes.bfloat16)
rng = np.random.default_rng(1)
M, E, k, K, N = 4, 5, 2, 96, 48
hidden = rng.standard_normal((M, K)).astype(BF16)
w13 = rng.standard_normal((E, 2 * N, K)).astype(BF16)
w2 = rng.standard_normal((E, K, N)).astype(BF16)
ids = np.array([rng.permutation(E)[:k] for _ in range(M)], dtype=np.int32)
w = rng.random((M, k)).astype(np.float32)
p = moekit.describe_fused_experts(hidden, w13, w2, w, ids)
print("num_tokens", p.num_tokens, flush=True)
s = str(p)
print("str:", s, flush=True)
print("preset:", moekit.preset_problem("qwen3-30b-a3b", 16, tp=2), flush=True)
print("torch loaded:", "torch" in sys.modules, flush=True)
assert "M=4" in s
print("CHILD OK", flush=True)
"""

LAYOUT = r"""
#include <cstddef>
#include <cstdio>
#include "moekit/moekit.hpp"
#define P(T) std::printf(#T " %zu %zu\n", sizeof(T), alignof(T))
#define O(T, m) std::printf(#T "::" #m " %zu\n", offsetof(T, m))
int main() {
  P(moekit::MoeProblem); P(moekit::TensorView); P(moekit::Options); P(moekit::FusedExpertsArgs);
  P(moekit::FusedMoeArgs); P(moekit::RouteArgs); P(moekit::ExpertWeights); P(moekit::RoutingConfig);
  P(moekit::ActivationConfig); P(std::string);
  O(moekit::MoeProblem, scheme); O(moekit::MoeProblem, activation); O(moekit::MoeProblem, has_expert_map);
  O(moekit::MoeProblem, routing); O(moekit::MoeProblem, logits_dtype); O(moekit::MoeProblem, has_correction_bias);
  return 0;
}
"""

failures = []


def run(cmd, env=None, timeout=600):
    try:
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, cwd=ROOT)
        return r.returncode, r.stdout
    except subprocess.TimeoutExpired as e:
        return "timeout", (e.stdout or "") if isinstance(e.stdout, str) else ""
    except FileNotFoundError as e:
        return "missing", str(e)


def section(title):
    print(f"\n==== {title}", flush=True)


def tail(text, n=25):
    return "\n".join(text.rstrip().splitlines()[-n:])


def main():
    section("environment")
    print("python", sys.version.split()[0], sys.executable)
    rc, out = run([sys.executable, "-c", "import torch; print(torch.__version__, torch.__file__)"])
    print("torch:", out.strip() if rc == 0 else "not importable")
    rc, out = run([sys.executable, "-c", "import moekit._C as c, moekit; print(c.__file__); "
                   "print('cuda_available', moekit.cuda_available())"], env=dict(os.environ, MOEKIT_NO_TORCH="1"))
    print(out.strip())
    if rc != 0:
        print(f"DIAGNOSE: FAIL (moekit does not import: rc {rc})")
        return 1
    so = out.strip().splitlines()[0]
    for tool in (["g++", "--version"], ["nvcc", "--version"]):
        rc, o = run(tool)
        print(" ".join(tool), "->", o.strip().splitlines()[0] if rc == 0 and o.strip() else rc,
              (o.strip().splitlines()[-1] if rc == 0 and tool[0] == "nvcc" else ""))
    print("CXXFLAGS=%r CUDAFLAGS=%r CMAKE_ARGS=%r" % (os.environ.get("CXXFLAGS"), os.environ.get("CUDAFLAGS"),
                                                      os.environ.get("CMAKE_ARGS")))
    cache = os.path.join(ROOT, os.environ.get("MOEKIT_PY_BUILD_DIR", "build/python"), "CMakeCache.txt")
    if os.path.exists(cache):
        for line in open(cache, errors="replace"):
            if re.match(r"(CMAKE_CXX_COMPILER|CMAKE_CUDA_COMPILER|CMAKE_CUDA_HOST_COMPILER|CMAKE_CXX_FLAGS|"
                        r"CMAKE_CUDA_FLAGS|MOEKIT_NCCL_LIBRARY|MOEKIT_HAVE_STATIC_LIBSTDCXX|"
                        r"MOEKIT_PYTHON_STATIC_LIBSTDCXX)[:=]", line):
                print("  cache:", line.strip())

    section("extension " + so)
    rc, o = run(["readelf", "-d", so])
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", o) if rc == 0 else []
    print("NEEDED:", needed, " RUNPATH:", re.findall(r"\((?:RUNPATH|RPATH)\).*\[(.*)\]", o))
    rc, o = run(["nm", "-D", "--defined-only", so])
    if rc == 0:
        syms = [l.split()[-1] for l in o.splitlines() if l.strip()]
        print(f"exported symbols: {len(syms)} {syms[:5]}{' ...' if len(syms) > 5 else ''}")
        fixed = syms == ["PyInit__C"]
        print("has the visibility fix (exports PyInit__C only):", fixed)
    print("links the shared libstdc++:", "libstdc++.so.6" in needed)

    section("str() in child processes (faulthandler on)")
    orders = [("torch-first", {}), ("moekit-first", {}), ("no-torch", {"MOEKIT_NO_TORCH": "1"})]
    crashed_order = None
    for order, extra in orders:
        rc, o = run([sys.executable, "-X", "faulthandler", "-c", CHILD, order], env=dict(os.environ, **extra))
        ok = rc == 0 and "CHILD OK" in o
        print(f"-- {order}: rc={rc} {'OK' if ok else 'FAILED'}")
        if not ok:
            print(tail(o))
            failures.append(f"{order} rc={rc}")
            crashed_order = crashed_order or order
        else:
            print("   " + "\n   ".join(l for l in o.splitlines() if l.startswith(("str:", "torch loaded"))))
    rc, o = run([sys.executable, "-X", "faulthandler", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                 "tests/python/test_cpu_numpy.py"])
    print(f"-- pytest tests/python/test_cpu_numpy.py: rc={rc}")
    print(tail(o, 6))
    if rc != 0:
        failures.append(f"test_cpu_numpy rc={rc}")

    section("symbol interposition (LD_DEBUG=bindings, moekit-first child)")
    rc, o = run([sys.executable, "-c", CHILD, "moekit-first"], env=dict(os.environ, LD_DEBUG="bindings"))
    benign = re.compile(r"/(libstdc\+\+\.so[^/]*|libc\.so[^/]*|libm\.so[^/]*|libgcc_s\.so[^/]*|ld-linux[^/]*|"
                        r"libpthread[^/]*|libdl[^/]*|librt[^/]*|libpython[^/]*|libcudart\.so[^/]*|libnccl[^/]*|"
                        r"_C\.cpython[^/]*|python3[^/]*)$")
    pat = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: \w+ symbol `([^']+)'")
    odd = {}
    for line in o.splitlines():
        m = pat.search(line)
        if not m:
            continue
        src, dst, sym = m.groups()
        if not ("moekit/_C" in src or "libstdc++" in src):
            continue
        if benign.search(dst):
            continue
        odd.setdefault((os.path.basename(src), os.path.basename(dst)), set()).add(sym)
    if not odd:
        print("none: every symbol _C and libstdc++ use binds to libstdc++ / libc / libpython / _C / libcudart")
    for (src, dst), syms in sorted(odd.items()):
        names = sorted(syms)
        rc, dm = run(["c++filt"] + names)
        shown = dm.splitlines() if rc == 0 and dm.strip() else names
        streamy = [n for n in shown if re.search(r"locale|ios_base|basic_ios|stream|stringbuf|num_put|facet", n)]
        print(f"{src} -> {dst}: {len(names)} symbols, e.g.\n    " + "\n    ".join(shown[:12]))
        if streamy:
            print(f"  SUSPECT: {len(streamy)} iostream / locale symbols bound outside libstdc++:\n    "
                  + "\n    ".join(streamy[:12]))

    section("struct layout: g++ vs nvcc")
    tmp = tempfile.mkdtemp(prefix="moekit_layout_")
    results = {}
    for name, cmd in (("g++", ["g++", "-std=c++17", "-x", "c++"]), ("nvcc", ["nvcc", "-std=c++17", "-x", "cu"])):
        if shutil.which(cmd[0]) is None:
            print(f"{name}: not found")
            continue
        src = os.path.join(tmp, "layout.cpp")
        open(src, "w").write(LAYOUT)
        exe = os.path.join(tmp, "layout_" + name.replace("+", "p"))
        rc, o = run(cmd + ["-I", os.path.join(ROOT, "include"), src, "-o", exe])
        if rc != 0:
            print(f"{name}: compile failed:\n{tail(o, 8)}")
            continue
        rc, o = run([exe])
        results[name] = o
    if len(results) == 2:
        same = results["g++"] == results["nvcc"]
        print("identical:", same)
        if not same:
            failures.append("layout differs between g++ and nvcc")
            print("g++:\n" + results["g++"] + "nvcc:\n" + results["nvcc"])
    shutil.rmtree(tmp, ignore_errors=True)

    if crashed_order:
        section("backtrace")
        dbg = shutil.which("cuda-gdb") or shutil.which("gdb") or "gdb"
        print("A stripped _C.so prints '??' frames: rebuild it with symbols first, then run the debugger:\n"
              "  CMAKE_ARGS=-DMOEKIT_PYTHON_NOSTRIP=ON MOEKIT_ENABLE_CUDA=ON MOEKIT_PIP_OFFLINE=1 "
              "bash tests/python/run.sh -x -q -k describe\n"
              f"  {dbg} -batch -ex run -ex 'bt 12' -ex 'info sharedlibrary' -ex 'x/6i $pc' "
              f"--args {sys.executable} tools/scripts/diagnose_str_crash.py --child {crashed_order}")

    print()
    if failures:
        print("DIAGNOSE: FAIL (" + "; ".join(failures) + ")")
        return 1
    print("DIAGNOSE: PASS")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":  # one child, in this process (for a debugger)
        exec(compile(CHILD, "<child>", "exec"))
        sys.exit(0)
    sys.exit(main())

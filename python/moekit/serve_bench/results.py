"""Provenance and files of moekit-serve-bench: commit (build-info.json from
tools/scripts/stamp_tree.sh, else git), date, GPU and library versions; JSON writing."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
from typing import Any, Dict, Optional

SCHEMA = "moekit-serve-bench/1"


def _find_build_info(start: str) -> Optional[str]:
    d = os.path.abspath(start)
    while True:
        p = os.path.join(d, "build-info.json")
        if os.path.isfile(p):
            return p
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def commit_info(path: Optional[str] = None) -> Dict[str, Any]:
    """{'commit', 'dirty', 'source'}: build-info.json when given; else the installed moekit's
    own provenance (baked in by its build, so right from any working directory); else a
    build-info.json found upwards of the working directory, `git rev-parse HEAD`, or unknown."""
    if path is None:
        try:
            from moekit import _C  # noqa: PLC0415 (the benchmark runs without a built moekit in tests)

            b = _C.build_info()
            if b.get("commit") and b["commit"] != "unknown":
                return {"commit": b["commit"], "dirty": {"1": True, "0": False}.get(b.get("dirty")),
                        "tree": b.get("tree"), "stamped": b.get("date"), "source": "moekit build (" + b.get("source", "") + ")"}
        except (ImportError, AttributeError):
            pass
    p = path or _find_build_info(os.getcwd())
    if p and os.path.isfile(p):
        try:
            with open(p) as f:
                info = json.load(f)
            return {"commit": info.get("commit"), "dirty": info.get("dirty"), "tree": info.get("tree"),
                    "stamped": info.get("date"), "source": os.path.basename(p)}
        except (OSError, ValueError):
            pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                    text=True, timeout=10).stdout.strip())
        return {"commit": commit, "dirty": dirty, "source": "git"}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "source": "unknown"}


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def environment() -> Dict[str, Any]:
    """GPU and versions (torch, transformers, moekit) of this process."""
    env: Dict[str, Any] = {}
    try:
        import torch  # noqa: PLC0415

        env["torch"] = torch.__version__
        env["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env["gpu"] = torch.cuda.get_device_name(0)
            env["gpu_memory_gib"] = round(p.total_memory / 2**30, 1)
            env["gpu_sm_count"] = p.multi_processor_count
            env["gpu_capability"] = list(torch.cuda.get_device_capability(0))
    except Exception as e:  # noqa: BLE001
        env["torch_error"] = str(e)
    for mod in ("transformers", "moekit"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001
            env[f"{mod}_error"] = str(e)
    return env


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def write_json(path: str, obj: Any) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def point_filename(model: str, impl: str, concurrency: int) -> str:
    return f"{slug(model)}__{slug(impl)}__c{concurrency}.json"

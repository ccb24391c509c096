"""One JSON and one markdown table from what ``benchmarks/gpu_check.sh`` left in a folder:
the paths (gpu.py), the plain loop on the GPU beside ``single --device cuda``, the
CUDA-gated tests' counts, and the vectorized-cohort benchmark when it ran. The device is
named in both, so a figure never travels without the card that gave it.

    python benchmarks/gpu_report.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import write_json  # noqa: E402
from gpu import table  # noqa: E402


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def test_counts(junit: Path) -> dict | None:
    """passed / failed / errors / skipped from a JUnit file, with the failing tests' names."""
    try:
        root = ElementTree.parse(junit).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    cases = root.iter("testcase")
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failing": []}
    for case in cases:
        outcome = next((child.tag for child in case
                        if child.tag in ("failure", "error", "skipped")), None)
        key = {"failure": "failed", "error": "errors", "skipped": "skipped"}.get(outcome,
                                                                                 "passed")
        counts[key] += 1
        if outcome in ("failure", "error"):
            counts["failing"].append(f"{case.get('classname')}::{case.get('name')}")
    return counts


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpu-check")
    paths = _json(out / "gpu.json") or {}
    plain = {layout: _json(out / f"plain-cuda-{layout}.json")
             for layout in ("nchw", "channels-last")}
    gated = test_counts(out / "gated-junit.xml")
    vectorized = _json(out / "fl_vectorized.json")
    gpu = paths.get("gpu", {})
    device = f"{gpu.get('name', 'unknown GPU')} ({gpu.get('memory_gib', '?')} GiB)"
    report = {"device": device, "machine": paths.get("machine"), "paths": paths.get("results"),
              "plain_loop_cuda": plain, "cuda_gated_tests": gated,
              "fl_vectorized": vectorized}
    write_json(out / "gpu-check.json", report)
    lines = [f"# GPU check on {device}", "", table(paths.get("results") or []), ""]
    single = next((r for r in paths.get("results") or [] if r["case"] == "single cuda"), {})
    for layout, result in plain.items():
        if result:
            ratio = (f"; single cuda / plain = "
                     f"{single['train_samples_per_s'] / result['samples_per_s']:.2f}"
                     if single.get("train_samples_per_s") else "")
            lines.append(f"- plain loop on the GPU ({layout}): "
                         f"{result['samples_per_s']:,.0f} samples/s{ratio}")
    if gated:
        lines.append(f"- CUDA-gated tests: {gated['passed']} passed, {gated['failed']} failed, "
                     f"{gated['errors']} errors, {gated['skipped']} skipped"
                     + (f" (failing: {', '.join(gated['failing'])})" if gated["failing"] else ""))
    if vectorized:
        lines.append(f"- fl_vectorized: see fl_vectorized.json "
                     f"({len(vectorized.get('results', []))} rows)")
    (out / "gpu-check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

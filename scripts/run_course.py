"""Run the whole course in real Jupyter kernels and record what a learner sees.

    python scripts/run_course.py [--json bench/results/course_h200.json] [CHAPTER ...]

Each notebook in notebooks/ is executed top to bottom by nbclient in a fresh
`python3` kernel, from notebooks/ as JupyterLab would. Every exercise is
answered: the skeleton runs as shipped (later cells may study it), then
`%run -i solutions/<chapter>.py` runs just before each `check(...)` cell, which
must then answer "correct". The run fails on any
cell error, any check that does not pass, and any `--check` that fails.

The JSON holds, per notebook: seconds, ok, the checks' verdicts, and every row
of every `--bench` table (kernel beside its PyTorch baseline, as the cell showed
it), plus the machine. On a GPU machine the notebooks pick CUDA themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT_S = 600
BENCH = "application/vnd.tilelab.bench+json"
CHECK = "application/vnd.tilelab.check+json"


def solved(notebook, chapter: str):
    """The notebook with the chapter's solutions run before every check cell."""
    import nbformat

    cells = []
    for cell in notebook.cells:
        if any(t.startswith("check-") for t in cell.get("metadata", {}).get("tags", [])):
            cells.append(nbformat.v4.new_code_cell(f"%run -i solutions/{chapter}.py"))
        cells.append(cell)
    notebook.cells = cells
    return notebook


def outputs(cell):
    return cell.get("outputs", [])


def run_chapter(path: Path, save: Path | None = None) -> dict:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    chapter = path.stem
    notebook = solved(nbformat.read(path, as_version=4), chapter)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    started = time.perf_counter()
    record: dict = {"notebook": path.name, "ok": True, "errors": [], "exercises": {},
                    "checks": [], "bench": []}
    try:
        client.execute()
    except CellExecutionError as err:
        record["ok"] = False
        # nbclient's message: the cell's source, then the traceback; keep the error lines
        lines = [ln for ln in str(err).splitlines() if "Error" in ln or "error" in ln]
        record["errors"].append("\n".join(lines[-6:])[:2000] or str(err)[-1000:])
    record["seconds"] = round(time.perf_counter() - started, 2)
    if save is not None:  # the executed notebook, outputs and all, to read what happened
        save.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, save / path.name)
    for index, cell in enumerate(notebook.cells):
        tags = cell.get("metadata", {}).get("tags", [])
        text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "")
                       for o in outputs(cell))
        for tag in tags:
            if tag.startswith("check-"):
                verdict_ok = "correct" in text and "not yet" not in text
                record["exercises"][tag.removeprefix("check-")] = \
                    "correct" if verdict_ok else text.strip()[:300]
                if not verdict_ok:
                    record["ok"] = False
        for output in outputs(cell):
            data = output.get("data", {})
            if output.get("output_type") == "error":
                record["ok"] = False
                record["errors"].append(f"cell {index}: {output.get('ename')}: "
                                        f"{output.get('evalue', '')[:300]}")
            if CHECK in data:
                check = data[CHECK]
                record["checks"].append({"cell": index, "passed": check["passed"],
                                         "reference": check.get("reference"),
                                         "max_abs_error": check.get("max_abs_error")})
                if not check["passed"] and chapter != "08_debugging":
                    record["ok"] = False
            if BENCH in data:
                bench = data[BENCH]
                for row in bench["rows"]:
                    record["bench"].append(dict(
                        cell=index, device=bench.get("device"), timing=bench.get("timing"),
                        **{k: row[k] for k in ("name", "median_ms", "speedup", "gbps",
                                               "tflops", "roofline_pct", "baseline_name")
                           if k in row}))
    return record


def machine() -> dict:
    info = {"host": platform.node(), "python": platform.python_version(),
            "cpus": os.cpu_count()}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="e.g. 04_gemm (default: all)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--save", type=Path, help="keep the executed notebooks in this folder")
    args = parser.parse_args()
    paths = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        paths = [p for p in paths if p.stem in args.chapters or p.stem[:2] in args.chapters]
    records = []
    for path in paths:
        record = run_chapter(path, args.save)
        records.append(record)
        status = "ok" if record["ok"] else "FAILED"
        print(f"{path.stem:22} {status:6} {record['seconds']:7.1f} s  "
              f"{len(record['exercises'])} exercises, {len(record['bench'])} bench rows",
              flush=True)
        for error in record["errors"]:
            print(f"    {error}")
        for exercise, verdict in record["exercises"].items():
            if verdict != "correct":
                print(f"    exercise {exercise}: {verdict}")
        for row in record["bench"]:
            rate = (f"{row['tflops']:.1f} TFLOP/s" if row.get("tflops") else
                    f"{row['gbps']:.0f} GB/s" if row.get("gbps") else "")
            print(f"    {row['name']:30.30} {row['median_ms']:9.4f} ms {rate:>15} "
                  f"speedup {row.get('speedup', 0):.2f}")
    result = {"command": "python scripts/run_course.py" + (f" --json {args.json}" if args.json
                                                            else ""),
              "date": time.strftime("%Y-%m-%d"), "machine": machine(), "notebooks": records,
              "ok": all(r["ok"] for r in records)}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"course: {sum(r['ok'] for r in records)}/{len(records)} notebooks ok")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

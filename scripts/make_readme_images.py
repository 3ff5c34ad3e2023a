"""Draw the README's pictures of the views, from a real compilation of the course GEMM.

    .venv/bin/python scripts/make_readme_images.py [--out docs/images]

Compiles the GEMM of notebooks/04_gemm.ipynb (examples/gemm.py) on the CPU
backend - whose Trace holds the GPU's layout and pipeline plans - and saves:

* gemm_c_fragment.{svg,png}  - the accumulator fragment: which thread holds each element;
* gemm_a_shared_banks.{svg,png} - bank conflicts of the swizzled A tile vs row-major;
* gemm_pipeline.{svg,png}    - the software pipeline replayed, 3 stages beside 2;
* pass_explorer.png          - the passes view's HTML (what a notebook without the
                               JupyterLab extension shows), screenshot by headless Chromium;
* check_and_bench.png        - a `--check` and `--bench` result, screenshot the same way.

The screenshots need /usr/bin/chromium (scripts/setup.sh installs it); without
it they are skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for examples/
# a cache of its own: the pictures show a compilation, not a cache hit
os.environ["TILELAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilelab-readme-images-")

import torch  # noqa: E402

import tilelab  # noqa: E402
from examples.gemm import gemm_kernel, reference  # noqa: E402
from tilelab.benchmark import compare  # noqa: E402
from tilelab.notebook.views import CheckView, PassesView  # noqa: E402
from tilelab.viz import bank_conflict_view, layout_view, pipeline_view  # noqa: E402

CHROMIUM = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "",
                             shutil.which("chromium-browser") or "") if p and Path(p).exists()),
                None)
PAGE_CSS = "body { margin: 12px; background: white; font-family: sans-serif; }"


def screenshot(html_fragment: str, path: Path, width: int = 1100, height: int = 1400) -> None:
    """Render an HTML fragment in headless Chromium and save it, cropped to its content."""
    from PIL import Image, ImageChops

    with tempfile.TemporaryDirectory() as scratch:
        page = Path(scratch) / "page.html"
        page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{PAGE_CSS}'
                        f"</style></head><body>{html_fragment}</body></html>", encoding="utf-8")
        raw = Path(scratch) / "shot.png"
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run",
                        f"--user-data-dir={Path(scratch) / 'profile'}",
                        f"--window-size={width},{height}", f"--screenshot={raw}",
                        page.as_uri()], check=True, capture_output=True, timeout=120)
        image = Image.open(raw).convert("RGB")
        background = Image.new("RGB", image.size, (255, 255, 255))
        box = ImageChops.difference(image, background).getbbox()
        if box:
            left, top, right, bottom = box
            image = image.crop((max(left - 12, 0), max(top - 12, 0),
                                min(right + 12, image.width), min(bottom + 12, image.height)))
        image.save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    # The course GEMM with 64 × 64 × 32 tiles (small enough to read cell by cell).
    blocks = {"block_m": 64, "block_n": 64, "block_k": 32}
    size = 256
    torch.manual_seed(0)
    a = torch.randn(size, size, dtype=torch.float16)
    b = torch.randn(size, size, dtype=torch.float16)
    three = gemm_kernel.compile(a, b, num_stages=3, **blocks)
    two = gemm_kernel.compile(a, b, num_stages=2, **blocks)
    torch.testing.assert_close(three(a, b), reference(a, b), rtol=1e-2, atol=1e-2)
    trace = three.trace

    saved = []
    for name, view in [("gemm_c_fragment", layout_view(trace, "c_fragment")),
                       ("gemm_a_shared_banks", bank_conflict_view(trace, "a_shared")),
                       ("gemm_pipeline", pipeline_view(trace, compare=two.trace))]:
        for suffix in (".svg", ".png"):
            saved.append(view.save(args.out / f"{name}{suffix}"))

    if CHROMIUM is None:
        print("chromium not found: pass_explorer.png and check_and_bench.png not made")
    else:
        passes = PassesView(trace)
        open_front_end = ("<script>document.querySelectorAll('details[data-pass=\"0\"]')"
                          ".forEach(function (d) { d.open = true; d.querySelectorAll('details')"
                          ".forEach(function (e) { e.open = true; }); });</script>")
        screenshot(passes._repr_mimebundle_()["text/html"] + open_front_end,
                   args.out / "pass_explorer.png")
        saved.append(args.out / "pass_explorer.png")

        comparison = compare(three(a, b), reference(a, b))
        check = CheckView(three.name, "(A.float() @ B.float()).half()", comparison)
        result = tilelab.bench(three, lambda x, y: x @ y, args=(a, b), name=three.name,
                               baseline_name="A @ B", flops=2 * size**3,
                               bytes=3 * size * size * 2)
        html = (check._repr_mimebundle_()["text/html"]
                + result._repr_mimebundle_()["text/html"])
        screenshot(html, args.out / "check_and_bench.png", height=900)
        saved.append(args.out / "check_and_bench.png")

    for path in saved:
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()

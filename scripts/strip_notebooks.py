"""Strip outputs from the course notebooks before they go into git.

Running a notebook fills it with outputs, execution counts and widget state:
large, machine-specific, and noise in every diff. The notebooks in git carry
none of it (tests/test_notebooks.py checks). After working on a notebook in
JupyterLab, run

    .venv/bin/python scripts/strip_notebooks.py            # strip notebooks/*.ipynb in place
    .venv/bin/python scripts/strip_notebooks.py --check    # only report; exit 1 if any has outputs

or name the notebooks to strip. Cell sources, cell tags and ids are kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
# notebook-level metadata worth keeping; the rest (widget state, ...) is per run
KEEP_METADATA = ("kernelspec", "language_info")
KEEP_CELL_METADATA = ("tags",)


def strip(notebook) -> bool:
    """Remove outputs and run-specific metadata in place; True if anything changed."""
    changed = False
    for cell in notebook.cells:
        if cell.cell_type == "code":
            if cell.get("outputs"):
                cell.outputs = []
                changed = True
            if cell.get("execution_count") is not None:
                cell.execution_count = None
                changed = True
        extra = [key for key in cell.metadata if key not in KEEP_CELL_METADATA]
        for key in extra:
            del cell.metadata[key]
            changed = True
    extra = [key for key in notebook.metadata if key not in KEEP_METADATA]
    for key in extra:
        del notebook.metadata[key]
        changed = True
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to strip (default: notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a notebook has outputs")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    dirty = []
    for path in paths:
        notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        if strip(notebook):
            dirty.append(path)
            if not args.check:
                nbformat.write(notebook, path)
    for path in dirty:
        print(f"{'has outputs' if args.check else 'stripped'}: {path}")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())

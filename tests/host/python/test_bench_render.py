"""CPU-only: bench_quant.py --render turns a saved results .json back into the table its run wrote
(bench/results/quant-*.md). Guards the renderer that the timed run and --render share, and that a
committed table's rows come from its json. Results files may carry notes and addenda after the
table (and annotated header lines), so the rows of the first table are compared."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
RESULTS = ROOT / "bench" / "results"
PAIRS = sorted(p for p in RESULTS.glob("quant-*.json") if p.with_suffix(".md").exists())


def first_table(text):
    """The lines of the first markdown table in text."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows


@pytest.mark.skipif(not PAIRS, reason="no quant-*.json with its .md in bench/results")
@pytest.mark.parametrize("js", PAIRS, ids=[p.stem for p in PAIRS])
def test_quant_table_renders_from_json(js):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_quant.py"), "--render", str(js)],
                         capture_output=True, text=True, check=True).stdout
    want = first_table(js.with_suffix(".md").read_text())
    assert len(want) > 2, f"{js.with_suffix('.md').name} has no table"
    assert first_table(out) == want, f"{js.name} does not render to the table of {js.with_suffix('.md').name}"

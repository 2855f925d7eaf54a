"""bench/results holds only result files that the documentation cites (CPU): a file that no page of README.md,
CHANGELOG.md or docs/ names by its file name is a stray (plots can be redrawn from their JSON with --plot)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _docs_text() -> str:
    pages = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
    docs = os.path.join(ROOT, "docs")
    pages += [os.path.join(docs, f) for f in sorted(os.listdir(docs)) if f.endswith(".md")]
    return "\n".join(open(p).read() for p in pages)


def test_every_result_file_is_cited():
    text = _docs_text()
    results = os.path.join(ROOT, "bench", "results")
    stray = [f for f in sorted(os.listdir(results)) if f not in text]
    assert not stray, f"bench/results files that README, CHANGELOG and docs/ never name: {stray}"


def test_every_cited_result_file_exists():
    import re

    cited = set(re.findall(r"\b(bench_(?:decode|quant|serving|variants)_\d{8}T\d{6}Z[\w.]*\.(?:json|png))", _docs_text()))
    missing = sorted(f for f in cited if not os.path.exists(os.path.join(ROOT, "bench", "results", f)))
    assert not missing, f"result files cited but not in bench/results: {missing}"

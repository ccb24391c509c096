"""The documentation's shape: the README stays a front page and benchmarks/README a summary
(issue 38), every manual page is reachable from the README (docs/bad-input.md was not, issue
43), and no relative link or #anchor points at a file or section that moved away."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BENCHMARKS_README = ROOT / "benchmarks" / "README.md"
NOTEBOOKS = sorted((ROOT / "benchmarks" / "results").glob("notebook-*.md"))
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
MARKDOWN = [README, BENCHMARKS_README, *DOC_PAGES, *NOTEBOOKS]

FENCED = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)


def prose(path: Path) -> str:
    """The file without its code blocks, where `](` and `#` mean nothing."""
    return FENCED.sub("", path.read_text(encoding="utf-8"))


def anchors(path: Path) -> set[str]:
    """The #fragments GitHub gives the file's headings: lower case, punctuation other than
    hyphens and underscores dropped, spaces to hyphens, -1, -2 ... for repeats."""
    seen: dict[str, int] = {}
    out = set()
    for title in HEADING.findall(prose(path)):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path)) if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_a_front_page():
    assert len(README.read_text(encoding="utf-8")) <= 12_000


def test_the_benchmarks_readme_is_a_summary_and_links_every_notebook_day():
    text = BENCHMARKS_README.read_text(encoding="utf-8")
    assert len(text) <= 20_000
    assert NOTEBOOKS, "the dated sittings live in benchmarks/results/notebook-DATE.md"
    linked = {(BENCHMARKS_README.parent / t.partition("#")[0]).resolve()
              for t in relative_links(BENCHMARKS_README)}
    assert [n.name for n in NOTEBOOKS if n.resolve() not in linked] == []


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(README)}
    assert [p.name for p in DOC_PAGES if p.resolve() not in linked] == []


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_their_anchors_resolve(path):
    broken = []
    for target in relative_links(path):
        file, _, fragment = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no such heading")
    assert broken == []


def test_the_anchor_rule_matches_githubs_on_headings_with_code_and_punctuation(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# GPU: `gpu.py` (what runs with `--device cuda`)\n\n## Notes\n\n## Notes\n")
    assert anchors(page) == {"gpu-gpupy-what-runs-with---device-cuda", "notes", "notes-1"}

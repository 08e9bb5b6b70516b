"""The README and docs/*.md stay true to the code: config snippets and key paths validate, links resolve.

Every ```yaml block is a complete config (parsed as `--suite-config` would); a YAML example that is not a
suite config belongs in a ```text block. Key paths: backticked `cases.<family>.<key>` and `timing.<key>`
spans, and the rows of a `| key |` table under a heading naming `cases.<family>`. Every link to a file of
the project, and to a heading in it, must resolve; so must every file a page names in its text (a path such as
`scripts/gpu-check.sh`, or a bare name such as `plugin.py` or REFERENCE.md), unless it is outside by nature.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from suite.config import json_schema, parse_config_text

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Pages other branches are writing now; links to them are checked once they exist.
PENDING_PAGES = {"gpu-check.md", "timing.md", "health.md", "reports.md", "adding-a-family.md"}

YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
# `cases.matmul.concurrent`, `timing.warmup_s`, also with a value: `cases.matmul.concurrent: true`.
KEY_PATH = re.compile(r"`((?:cases\.[a-z_]+|timing)(?:\.[a-z_]+)*)(?::[^`]*)?`")
# A table of keys (first header cell "key") under a heading that names its section: ## Config (`cases.x`).
KEY_TABLE = re.compile(r"^#+ .*`(cases\.[a-z_]+)`.*\n+\| key \|.*\n\|[- |]+\n((?:\|.*\n)+)", re.MULTILINE)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# A file a page names: a path from the repository root (`scripts/gpu-check.sh`), a path up from the page
# (`../shared/x.md`) or a bare name (`plugin.py`, REFERENCE.md). Not the tail of a longer path or of a URL
# (ml-engineering's network/README.md), not a <placeholder>; results (.json) are data, not citations.
_EXT = r"\.(?:py|md|ya?ml|sh|toml)"
CITED_FILE = re.compile(rf"(?<![\w./<>$-])((?:suite|scripts|docs|configs|benchmarks|tests)/[\w./-]*{_EXT}"
                        rf"|(?:\.\./)+[\w./-]*{_EXT}|[\w-]+{_EXT})(?![\w/-])")
# Files a page may name that are not in the repository, each outside it by nature; everything else must exist.
EXTERNAL_FILES = {
    "mamf-finder.py": "ml-engineering's MAMF script, cited in reference.md",
    "configs/my.yaml": "the reader's own config in command examples",
    "benchmarks/test_fill.py": "the test file adding-a-family.md has the reader write",
    "tests/test_fill.py": "the tests adding-a-family.md has the reader write",
}
# Folders whose files are not the project's (environments, caches, run outputs).
NOT_PROJECT = {".git", ".venv", "venv", "__pycache__", "results", "reports", "build", "dist", ".whl"}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def yaml_blocks() -> list:
    return [pytest.param(block, id=f"{rel(doc)}:{text[:m.start()].count(chr(10)) + 1}")
            for doc in DOCS for text in [doc.read_text(encoding="utf-8")]
            for m in YAML_BLOCK.finditer(text) for block in [m.group(1)]]


@pytest.mark.parametrize("block", yaml_blocks())
def test_every_yaml_block_is_a_valid_config(block):
    parse_config_text(block, "docs snippet")  # raises UserError naming the key path and value


def schema_has(path: str) -> bool:
    """Whether `a.b.c` is a key path of the config's JSON Schema (through $ref, anyOf and `cpu:` sections)."""
    schema = json_schema()
    defs = schema.get("$defs", {})

    def resolve(node: dict) -> list[dict]:
        if "$ref" in node:
            return resolve(defs[node["$ref"].rsplit("/", 1)[-1]])
        if "anyOf" in node:
            return [n for option in node["anyOf"] for n in resolve(option)]
        return [node]

    nodes = [schema]
    for part in path.split("."):
        nodes = [child for node in nodes for n in resolve(node)
                 for child in [n.get("properties", {}).get(part)] if child is not None]
        if not nodes:
            return False
    return True


def key_paths() -> list:
    found = {}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for path in KEY_PATH.findall(text):
            found.setdefault(path, rel(doc))
        for section, rows in KEY_TABLE.findall(text):
            for row in rows.splitlines():
                for key in re.findall(r"`([a-z_]+):?`", row.split("|")[1]):
                    found.setdefault(f"{section}.{key}", rel(doc))
    return [pytest.param(path, id=f"{where}:{path}") for path, where in sorted(found.items())]


def test_docs_name_key_paths():
    assert len(key_paths()) >= 5  # the pattern still finds what the pages write


@pytest.mark.parametrize("path", key_paths())
def test_every_key_path_named_in_the_docs_exists(path):
    assert schema_has(path), f"`{path}` is named in the docs but is not a config key"


def test_the_schema_check_rejects_a_key_that_does_not_exist():
    assert schema_has("cases.copy.cpu.sizes") and not schema_has("cases.copy.cpu.ops")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def links() -> list:
    out = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if not re.match(r"[a-z]+:", target):
                out.append(pytest.param(doc, target, id=f"{rel(doc)}->{target}"))
    return out


@pytest.mark.parametrize(("doc", "target"), links())
def test_every_link_between_the_pages_resolves(doc, target):
    file_part, _, anchor = target.partition("#")
    page = (doc.parent / file_part).resolve() if file_part else doc
    if not page.exists() and page.name in PENDING_PAGES and page.parent == ROOT / "docs":
        pytest.skip(f"{page.name} is being written on another branch")
    assert page.exists(), f"{rel(doc)} links to {target}, which does not exist"
    if anchor:
        assert anchor in anchors(page), f"{rel(doc)} links to {target}: no such heading in {rel(page)}"


def project_file_names() -> set[str]:
    names: set[str] = set()
    for folder, subfolders, files in os.walk(ROOT):
        # Prune in place: a virtual environment beside the checkout holds tens of thousands of files.
        subfolders[:] = [d for d in subfolders if d not in NOT_PROJECT and not d.endswith(".egg-info")]
        names.update(files)
    return names


def missing_citations(doc: Path, text: str, names: set[str]) -> list[str]:
    """The files `text` (of page `doc`) names that are neither in the repository nor in EXTERNAL_FILES."""
    missing = []
    for cited in dict.fromkeys(CITED_FILE.findall(text)):
        if cited in EXTERNAL_FILES:
            continue
        if "/" in cited:
            path = ((doc.parent if cited.startswith("..") else ROOT) / cited).resolve()
            found = path.is_relative_to(ROOT) and path.is_file()
        else:
            found = cited in names
        if not found:
            missing.append(cited)
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_every_file_a_page_names_is_in_the_repository(doc):
    missing = missing_citations(doc, doc.read_text(encoding="utf-8"), project_file_names())
    assert not missing, (f"{rel(doc)} names files that are not in the repository: {missing} (EXTERNAL_FILES "
                         "is only for files outside it by nature)")


def test_the_citation_check_finds_files_that_are_not_there():
    text = ("see `scripts/accuracy_cpu.py`, REFERENCE.md, ../shared/REFERENCE.md, `accuracy_cpu.py`;\n"
            "    python scripts/bench_timing.py # suite/plugin.py, families.md, network/README.md, <x>.md\n")
    missing = missing_citations(ROOT / "docs" / "timing.md", text, project_file_names())
    gone = ["scripts/accuracy_cpu.py", "REFERENCE.md", "../shared/REFERENCE.md", "accuracy_cpu.py"]
    assert missing == gone


def test_readme_links_every_page_in_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if f"(docs/{p.name})" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_github_anchor_matches_githubs_rule():
    assert github_anchor("Ceilings and % of peak") == "ceilings-and--of-peak"
    assert github_anchor("Config (`cases.collectives`)") == "config-casescollectives"

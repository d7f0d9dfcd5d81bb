"""The documentation's relative links resolve, and the README stays short.

Every relative Markdown link `[text](target)` in README.md, docs/*.md, experiments/README.md and
experiments/smollm2/README.md must name a file or folder that exists, relative to the linking file's folder;
a link with a `#fragment` into a Markdown file must name one of that file's headings by its GitHub anchor
(lowercase, punctuation other than hyphens and underscores dropped, spaces as hyphens, repeats numbered -1,
-2, ...). Links to http(s): and mailto: and links to an anchor of the same file alone are not checked; code
(fenced blocks, indented blocks, inline code spans) is not read. A negative control writes a broken link and a
broken anchor and checks that both are reported. README.md has at most 250 lines (issue 49)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def documentation_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "experiments" / "README.md", ROOT / "experiments" / "smollm2" / "README.md"]
    return [f for f in files if f.exists()]


def prose_lines(text: str) -> list[str]:
    """The lines outside code: fenced and indented blocks blanked (so line numbers hold), inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            lines.append("")
        elif fenced or line.startswith(("    ", "\t")):
            lines.append("")
        else:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    for line in lines:
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    """Each relative link of `path` whose file is missing or whose #fragment names no heading of its file."""
    problems = []
    for number, line in enumerate(prose_lines(path.read_text(encoding="utf-8")), 1):
        for target in LINK.findall(line):
            if re.match(r"^(https?:|mailto:)", target, re.IGNORECASE) or target.startswith("#"):
                continue
            file_part, _, fragment = target.partition("#")
            linked = (path.parent / file_part).resolve()
            if not linked.exists():
                problems.append(f"{path.name}:{number}: {target}: no such file {linked}")
            elif fragment and linked.suffix == ".md" and fragment.lower() not in anchors(linked):
                problems.append(f"{path.name}:{number}: {target}: no heading #{fragment} in {linked.name}")
    return problems


def test_every_relative_link_reaches_a_file_and_a_heading():
    files = documentation_files()
    assert ROOT / "README.md" in files and len(files) >= 4
    problems = [problem for path in files for problem in broken_links(path)]
    assert problems == []


def test_the_readme_fits_in_250_lines():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_the_checker_reports_a_broken_link_and_a_broken_anchor(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A real `section`: here\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "# Page",
        "[fine](docs/other.md#a-real-section-here) and [fine too](docs/other.md)",
        "[missing file](docs/missing.md) and [missing heading](docs/other.md#no-such-section)",
        "[web](https://example.org/nowhere) [mail](mailto:a@b.c) [here](#page)",
        "`[in code](docs/missing-in-code.md)`",
        "",
        "    [indented code](docs/missing-in-block.md)",
        "```",
        "[fenced code](docs/missing-in-fence.md)",
        "```",
    ]), encoding="utf-8")
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "docs/missing.md" in problems[0] and "no such file" in problems[0]
    assert "#no-such-section" in problems[1] and "no heading" in problems[1]


def test_anchors_are_githubs():
    assert slug("Where selection wins: draft capacity (issue 31, and issue 30's capacity sweep)") == \
        "where-selection-wins-draft-capacity-issue-31-and-issue-30s-capacity-sweep"
    assert slug("An EAGLE-3 head as the draft: `model.draft_kind=eagle3`") == \
        "an-eagle-3-head-as-the-draft-modeldraft_kindeagle3"
    assert slug("Fidelity: the official recipe and where the project differs") == \
        "fidelity-the-official-recipe-and-where-the-project-differs"

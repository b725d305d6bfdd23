"""README.md stays a map of the checkout: its Files tree is what tests/readme_tree.py generates from the
tracked files, and its contents list names every section, in order, with links that resolve."""
import re

from tests import readme_tree

REPO = readme_tree.REPO


def test_files_tree_is_the_tracked_modules():
    files = readme_tree.tracked()
    assert not readme_tree.uncovered(files), "tracked files with no line in the tree: add them to readme_tree.OTHER"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme_tree.readme_tree(readme) == readme_tree.render(files), \
        "README.md's Files tree is stale: run `python -m tests.readme_tree` and commit README.md"


def test_the_tree_follows_modules_and_docstrings():
    """The generator itself: a module appears with its docstring's first line, a package as its folder."""
    files = readme_tree.tracked()
    tree = readme_tree.render(files)
    assert re.search(r"\n    fxgraph.py +The graph a traced module is mapped into", tree)
    assert re.search(r"\n  lowering/ +compile a Problem's operator graph", tree)  # distill.lowering's docstring
    without = readme_tree.render([f for f in files if f != "distill/lowering/fxgraph.py"])
    assert "fxgraph.py" not in without
    assert readme_tree.uncovered(files + ["stray/file.py"]) == ["stray/file.py"]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_contents_list_every_section_in_order():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    prose = re.sub(r"```.*?```", "", readme, flags=re.S)  # a `# comment` in a code block is no heading
    sections = [h for h in re.findall(r"^## (.+)$", prose, flags=re.M) if h != "Contents"]
    contents = prose.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\[([^\]]+)\]\(#([^)]+)\)", contents)
    assert [text for text, _ in links] == sections
    assert [anchor for _, anchor in links] == [_anchor(s) for s in sections]

"""README.md's Python example, run as written (the README is the front page: its one example
must work on a machine without a GPU)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_python_example_runs(monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) == 1, "the README has one example"
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(blocks[0], str(ROOT / "README.md"), "exec"), namespace)
    assert namespace["mod"].target == "cpu"
    namespace["mod"].close()

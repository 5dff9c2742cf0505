"""The custom-rule example in docs/analyzer.md runs as documented (file and literal-tree test)."""

import re
from pathlib import Path

from deepcontext.analysis import load_rules_file

DOC = Path(__file__).parents[2] / "docs" / "analyzer.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)


def test_documented_rule_file_loads_and_its_test_passes(tmp_path):
    rule_src, test_src = python_blocks()[:2]
    path = tmp_path / "my_rules.py"
    path.write_text(rule_src)
    (rule,) = load_rules_file(path)
    assert rule.id == "many-distinct-ops"
    namespace = {"ManyDistinctOps": type(rule)}
    exec(compile(test_src, "docs-example", "exec"), namespace)  # asserts inside

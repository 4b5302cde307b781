"""docs/report.schema.json: the published JSON Schema of `--format json`'s report.

It is generated from the model (report/model.py `json_schema`), so the committed file
must be that text (scripts/report-schema writes it), and a real report must validate
against it with a validator that is not pydantic (the `jsonschema` library a consumer
would use). Control: a report the model would refuse is refused by the schema too.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from realcargo import DATA, make_report

from roteiro_py.compare import Against, compare
from roteiro_py.compare.diff import parse_diff
from roteiro_py.report import Finding, render
from roteiro_py.report.model import SCHEMA_FILE, json_schema

ROOT = Path(__file__).resolve().parents[3]
SAVED = DATA / "reports" / "demo-before-baseline.json"


def validator() -> Any:
    schema = json.loads((ROOT / SCHEMA_FILE).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_committed_schema_is_the_models() -> None:
    assert (ROOT / SCHEMA_FILE).read_text() == json_schema(), "run scripts/report-schema and commit"


def test_a_real_report_and_a_judged_one_validate() -> None:
    saved = json.loads(SAVED.read_text())
    assert saved["findings"], "the fixture has findings to check"
    validator().validate(saved)
    finding = Finding.model_validate({
        "code": "clippy::needless_return", "level": "warning", "message": "unneeded `return`",
        "path": "src/lib.rs", "line": 2, "column": 5, "end_line": 2, "end_column": 13})
    diff = parse_diff(b"diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n"
                      b"@@ -1,0 +2,1 @@\n+line 2\n")
    judged = compare(make_report([finding]), Against(changes=diff, diff_name="pr.diff"))
    document = json.loads(render(judged, "json"))
    assert document["comparison"]["diff"] == "pr.diff" and document["findings"][0]["in_diff"] is True
    validator().validate(document)


@pytest.mark.parametrize("mutate", [
    lambda d: d["findings"][0].update(level="catastrophic"),
    lambda d: d.pop("summary"),
    lambda d: d.update(unexpected=1),
    lambda d: d.update(schema_version=2),
], ids=["unknown level", "no summary", "unknown key", "another schema version"])
def test_a_report_the_model_refuses_is_refused_by_the_schema(mutate: Any) -> None:
    document = copy.deepcopy(json.loads(SAVED.read_text()))
    mutate(document)
    with pytest.raises(jsonschema.ValidationError):
        validator().validate(document)

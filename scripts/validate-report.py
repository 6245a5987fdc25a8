#!/usr/bin/env python3
"""Validates one JSON file Crest wrote against docs/report.schema.json.

    scripts/validate-report.py DEF FILE     DEF: Report, Comparison or Search

Prints each violation (at most 20, with its path) and exits 1 when there is any; exits 0
when the file fits the schema's $defs/DEF. The end-to-end tests call it on every
report.json, compare.json and search.json they read.
"""
import json
import pathlib
import sys

import jsonschema

def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    name, path = sys.argv[1], sys.argv[2]
    root = pathlib.Path(__file__).resolve().parent.parent
    schema = json.loads((root / "docs" / "report.schema.json").read_text())
    if name not in schema["$defs"]:
        print(f"validate-report: no $defs/{name} in the schema", file=sys.stderr)
        return 2
    validator = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]})
    errors = sorted(validator.iter_errors(json.loads(pathlib.Path(path).read_text())),
                    key=lambda e: list(map(str, e.absolute_path)))
    for e in errors[:20]:
        where = "/".join(map(str, e.absolute_path)) or "(root)"
        print(f"{path}: {where}: {e.message[:300]}", file=sys.stderr)
    return 1 if errors else 0

if __name__ == "__main__":
    sys.exit(main())

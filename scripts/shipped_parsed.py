#!/usr/bin/env python3
"""Write loader/shipped_parsed.json: the marked loader's reading of every shipped YAML file, by the
SHA-256 of its text (issue 13; see loader/yamlpos.py). Run it after editing a file under profiles/,
overlays/ or transcripts/; tests/transcripts/test_shipped_table.py fails until you do.

Usage: python scripts/shipped_parsed.py [--check]   (--check: exit 1 if the table is not current)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dsh.loader.yamlpos import SHIPPED_TABLE, shipped_table_entry

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("profiles", "overlays", "transcripts")


def table() -> str:
    documents = dict(sorted(shipped_table_entry(path) for kind in KINDS for path in sorted((ROOT / kind).glob("*.yaml"))))
    return json.dumps({"version": 1, "documents": documents}, ensure_ascii=False, indent=0) + "\n"


def main(argv: list[str]) -> int:
    wanted = table()
    target = ROOT / "loader" / SHIPPED_TABLE.name
    if argv[1:] == ["--check"]:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != wanted:
            print(f"{target} is stale: run python scripts/shipped_parsed.py", file=sys.stderr)
            return 1
        return 0
    target.write_text(wanted, encoding="utf-8")
    print(f"wrote {target} ({len(json.loads(wanted)['documents'])} documents)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

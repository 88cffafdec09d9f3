"""Fuzzing (issue 15 item 7): profiles, overlays and transcripts (loading only), through the real
`dsh config show` in-process. Invariants (see fuzz_kit): exit 0 or 2, no traceback, the refusal is
`dsh: ...` on stderr, the input and the home are unchanged, each case within the deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from cli_kit import subprocess_env
from fuzz_kit import TRACEBACK, check_cli_result, fast_dsh, tree_digest, yaml_bytes
from hypothesis import given
from hypothesis import strategies as st
from ruamel.yaml import YAML

from dsh.loader.shipped import shipped_dir

SECTIONS = {
    "model": ["provider", "baseUrl", "model", "apiKeyEnv", "maxTokens", "temperature", "connectTimeoutSeconds",
              "readTimeoutSeconds", "retry"],
    "agent": ["systemPrompt", "maxParallelToolCalls", "maxStepsPerTurn"],
    "subagents": ["reportDelivery", "maxDepth"],
    "persistence": ["batchDelayMs", "fsync"],
    "run": ["shutdownGraceSeconds", "parked"],
    "testing": ["fences", "fenceTimeoutSeconds"],
    "bogus": ["x"],
}
scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(10**80), 10**80), st.floats(),
    st.text(max_size=40), st.sampled_from(["wakeup", "quiet", "wait", "release", "replay", "http://x", ".inf"]),
)
value = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=12)
config_doc = st.dictionaries(
    st.sampled_from(sorted(SECTIONS)),
    st.one_of(value, st.sampled_from(sorted(SECTIONS)).flatmap(
        lambda s: st.dictionaries(st.sampled_from(SECTIONS[s]), value, max_size=4))),
    max_size=4,
)
config_input = st.one_of(yaml_bytes, config_doc.map(lambda d: json.dumps(d).encode()))


def _write(tmp_path, name: str, data: bytes):
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


DSH = fast_dsh()


def _run_config_show(tmp_path, flag: str, data: bytes) -> None:
    path = _write(tmp_path, "input.yaml", data)
    home = tmp_path / "home"
    before = tree_digest(tmp_path)

    result = DSH("config", "show", "--json", flag, path, env={"DSH_HOME": str(home)})

    check_cli_result(result, {0, 2})
    assert tree_digest(tmp_path) == before


@given(flag=st.sampled_from(["--profile", "--overlay"]), data=config_input)
def test_fuzz_profiles_and_overlays(tmp_path, flag, data):
    _run_config_show(tmp_path, flag, data)


def _shipped_transcripts() -> list[Any]:
    yaml = YAML(typ="safe", pure=True)
    return [yaml.load(p.read_text()) for p in sorted(shipped_dir("transcripts").glob("*.yaml"))]


SHIPPED = _shipped_transcripts()


def _mutate(doc: Any, steps: list[tuple[int, Any]]) -> Any:
    """Replace one node per step, walking down by the step's index through mappings and lists."""
    doc = json.loads(json.dumps(doc, default=str))
    for pick, new in steps:
        parent, key, node = None, None, doc
        for _ in range(pick % 6):
            if isinstance(node, dict) and node:
                key = sorted(node)[pick % len(node)]
            elif isinstance(node, list) and node:
                key = pick % len(node)
            else:
                break
            parent, node = node, node[key]
        if parent is None:
            doc = new if pick % 7 == 0 else doc
        else:
            parent[key] = new
    return doc


transcript_doc = st.builds(_mutate, st.sampled_from(SHIPPED), st.lists(st.tuples(st.integers(0, 1000), value), max_size=3))
transcript_input = st.one_of(yaml_bytes, transcript_doc.map(lambda d: json.dumps(d).encode()))


@given(data=transcript_input)
def test_fuzz_transcripts(tmp_path, data):
    _run_config_show(tmp_path, "--transcript", data)


def test_yaml_surfaces_smoke_in_a_subprocess(tmp_path):
    """One real process per YAML surface, with an alias bomb: one line, exit 2, quickly."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                    "c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n")
    for flag in ("--profile", "--overlay", "--transcript"):
        done = subprocess.run([sys.executable, "-c", "from dsh.cli.main import entry; entry()", "config", "show", flag, str(bomb)],
                              capture_output=True, text=True, timeout=30, env=subprocess_env())
        assert done.returncode == 2 and TRACEBACK not in done.stderr
        assert done.stderr == f"dsh: {bomb}:1:4: anchors are not supported (found &a)\n"

"""Positions for validation errors (`loader.yamlpos`, SPEC §14.2 item 5).

Lives beside the transcript tests because transcripts are its first user; configuration loading
reuses the same rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.loader.yamlpos import YamlProblem, key_path, load_yaml_with_marks, locate, plain, read_yaml

TEXT = """\
top:
  items:
    - a
    - {b: 1}
  flow: {x: 1}
"""


@pytest.fixture
def data(tmp_path: Path) -> object:
    path = tmp_path / "f.yaml"
    path.write_text(TEXT, encoding="utf-8")
    return load_yaml_with_marks(path)


def test_an_existing_key_is_located_at_the_key(data: object) -> None:
    assert locate(data, ("top", "flow")) == (5, 3)
    assert locate(data, ("top", "flow", "x")) == (5, 10)


def test_a_sequence_item_is_located_at_the_item(data: object) -> None:
    assert locate(data, ("top", "items", 1)) == (4, 7)
    assert key_path(data, ("top", "items", 1, "b")) == "top.items[1].b"


def test_a_missing_key_is_located_at_its_parent_but_named(data: object) -> None:
    assert locate(data, ("top", "missing")) == (1, 1)
    assert key_path(data, ("top", "missing")) == "top.missing"
    assert locate(data, ("nothing",)) == (1, 1)


def test_loc_parts_that_are_not_data_end_the_walk(data: object) -> None:
    assert locate(data, ("top", "items", 0, "str")) == (3, 7)
    assert key_path(data, ("top", "items", 0, "str")) == "top.items[0]"
    assert key_path(data, ("top", "flow", "[key]")) == "top.flow"


def test_plain_copies_into_builtin_types(data: object) -> None:
    copy = plain(data)

    assert copy == {"top": {"items": ["a", {"b": 1}], "flow": {"x": 1}}}
    assert type(copy) is dict and type(copy["top"]["items"]) is list


def test_malformed_yaml_raises_a_problem_with_a_one_based_position(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("a: 1\n b: 2\n", encoding="utf-8")

    with pytest.raises(YamlProblem) as info:
        load_yaml_with_marks(path)

    assert (info.value.line, info.value.col) == (2, 3)
    assert str(info.value).startswith(f"{path}:2:3: ")


# -- fast path (issue 13): JSON documents skip the round-trip loader, errors keep their positions --

JSON_CASES = [
    '{"a": [1, 2.5, -0, 1e5, true, false, null], "b": {"c": "x\\u00e9\\n\\/"}}',
    '[{"k": "v"}, [], {}]',
    '  \n{"nested": {"deeper": [[["x"]]]}}\n',
]


@pytest.mark.parametrize("text", JSON_CASES)
def test_a_json_document_reads_as_the_marked_loader_reads_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text, encoding="utf-8")
    document = read_yaml(path)
    assert document._has_marked is False  # the fast path built no marked tree
    assert document.data == plain(load_yaml_with_marks(path))
    assert [type(v) for v in document.data] == [type(v) for v in plain(load_yaml_with_marks(path))]


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        ('{"a": 1,\n "a": 2}', "2:2", "duplicate key"),
        ('{"a":' + "[" * 70 + "]" * 70 + "}", "1:", "nested deeper than 64"),
        ('{"n": ' + "9" * 80 + "}", "1:7", "integer longer than 64 digits"),
    ],
)
def test_json_the_fast_path_cannot_vouch_for_gets_the_marked_refusal(
    tmp_path: Path, text: str, position: str, problem: str
) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(YamlProblem) as caught:
        read_yaml(path)
    assert f"{path}:{position}" in str(caught.value)
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"s": "\\ud83d\\ude00"}', {"s": "\ud83d\ude00"}),  # ruamel keeps two code points; json pairs them
        ('{"n": [NaN]}', {"n": ["NaN"]}),  # not JSON; YAML reads a string
    ],
)
def test_escaped_surrogates_and_nan_take_the_marked_path(tmp_path: Path, text: str, expected: object) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text, encoding="utf-8")
    document = read_yaml(path)
    assert document.data == expected
    assert document._has_marked is True


def test_yaml_that_is_not_json_takes_the_marked_path(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(TEXT, encoding="utf-8")
    document = read_yaml(path)
    assert document.data == plain(load_yaml_with_marks(path))
    assert locate(document.marked(), ("top", "flow")) == (5, 3)


DEEP_CASES = {
    "flow-65": ("a: " + "[" * 65 + "]" * 65 + "\n", (1, 67)),
    "flow-300": ("a: " + "[" * 300 + "]" * 300 + "\n", (1, 67)),
    "flow-mappings": ("a: " + "{k: " * 70 + "1" + "}" * 70 + "\n", (1, 256)),
    "block-then-flow": ("a:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(40))
                        + "  " * 41 + "x: " + "[" * 30 + "]" * 30 + "\n", (42, 108)),
    "sequences-then-flow": ("".join("  " * i + "- \n" for i in range(10)) + "  " * 10 + "- "
                            + "[" * 60 + "]" * 60 + "\n", (11, 76)),
    "top-level-flow": ("[" * 70 + "]" * 70 + "\n", (1, 65)),
}


@pytest.mark.parametrize("name", sorted(DEEP_CASES))
def test_deep_nesting_is_refused_at_the_65th_open_collection(tmp_path, name):
    """The scanner refuses flow nesting as it reads (ruamel's simple-key lookahead is quadratic in
    the depth: 1,000 levels cost 1.3 s, now 4 ms), counting block and flow collections as the
    composer does: the refusal is the composer's, at the 65th open collection, wherever it is."""
    text, (line, col) = DEEP_CASES[name]
    path = tmp_path / "deep.yaml"
    path.write_text(text)

    with pytest.raises(YamlProblem) as exc:
        read_yaml(path)

    assert (exc.value.line, exc.value.col, exc.value.problem) == (line, col, "nested deeper than 64 levels")


def test_sixty_four_levels_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("a: " + "[" * 63 + "]" * 63 + "\n")  # the mapping and 63 sequences

    assert read_yaml(path) is not None

"""Positions for validation errors (`loader.yamlpos`, SPEC §14.2 item 5).

Lives beside the transcript tests because transcripts are its first user; configuration loading
reuses the same rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.loader.yamlpos import YamlProblem, key_path, load_yaml_with_marks, locate, plain

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

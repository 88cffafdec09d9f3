"""Placeholder resolution in reply strings (SPEC §15.2)."""

from __future__ import annotations

import pytest

from dsh.loader.transcripts import PlaceholderKind, UnresolvedPlaceholder, resolve_placeholders

LIVE = {("child", "start"): "c-1", ("session", "root"): "s-root"}


def lookup(kind: PlaceholderKind, name: str) -> str | None:
    return LIVE.get((kind, name))


def test_placeholders_resolve_in_nested_strings_and_mapping_keys() -> None:
    value = {"to": "{{child:start}}", "{{session:root}}": ["from {{session:root}}", 3, None]}

    assert resolve_placeholders(value, lookup) == {"to": "c-1", "s-root": ["from s-root", 3, None]}


def test_resolution_does_not_mutate_its_input() -> None:
    value = {"to": ["{{child:start}}"]}

    resolve_placeholders(value, lookup)

    assert value == {"to": ["{{child:start}}"]}


def test_other_double_brace_text_passes_through() -> None:
    text = "{{name}} and {{other:thing}} and {{ child:start }}"

    assert resolve_placeholders(text, lookup) == text


def test_an_unresolvable_placeholder_raises_naming_it() -> None:
    with pytest.raises(UnresolvedPlaceholder) as info:
        resolve_placeholders("ok {{child:start}} then {{session:ghost}}", lookup)

    assert info.value.placeholder == "{{session:ghost}}"


@pytest.mark.parametrize("value", [
    "{{child:start}}",
    {"k": ["x", {"deep": 'a {{session:quote"and\\\\slash}} b'}]},
    {"{{child:new\nline}}": 1},
    ["é {{session:ünï}}", None],
    {"t": "{{child:\u0001ctl\ud800}}"},
])
def test_may_hold_placeholders_finds_every_placeholder_whatever_json_escapes(value: object) -> None:
    """Issue 13: replies without placeholders skip the walk; the search of the JSON text must still
    see a placeholder in any string or key, whatever the escaping does to its name."""
    from dsh.loader.transcripts.placeholders import may_hold_placeholders

    assert may_hold_placeholders(value)


@pytest.mark.parametrize("value", [
    {"text": "reply 1", "tool_calls": None, "usage": {"input_tokens": 1}},
    "{{name}} and {{other:thing}} and {{ child:start }}",
    ["{{child:a}", "{b}}"],
])
def test_may_hold_placeholders_is_false_without_one(value: object) -> None:
    from dsh.loader.transcripts.placeholders import may_hold_placeholders

    assert not may_hold_placeholders(value)
    assert resolve_placeholders(value, lookup) == value

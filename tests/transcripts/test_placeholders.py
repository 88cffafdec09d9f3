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

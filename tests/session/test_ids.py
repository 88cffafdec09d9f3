"""The id formats (SPEC §5.1, issue 11 item 4): `session-<uuid4>` and bare uuid4 message ids.

Issue 13 builds them from `os.urandom` without a `UUID` object; each must still be exactly what
`str(uuid.uuid4())` gives: canonical lowercase form, version 4, the RFC 4122 variant.
"""

from __future__ import annotations

import uuid

from dsh.loader.ids import is_valid_session_id, new_child_id, new_message_id, new_root_id


def test_message_ids_are_canonical_version_4_uuids_and_distinct() -> None:
    ids = [new_message_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_session_ids_are_session_dash_uuid4_and_valid() -> None:
    for make in (new_root_id, new_child_id):
        sid = make()
        prefix, _, rest = sid.partition("-")
        assert prefix == "session" and is_valid_session_id(sid)
        parsed = uuid.UUID(rest)
        assert str(parsed) == rest and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_the_version_and_variant_bits_are_set_whatever_the_random_bytes(monkeypatch) -> None:
    """All-ones and all-zero random bytes: the fixed bits still come out as uuid4 sets them."""
    import os

    for fill in (b"\xff", b"\x00"):
        monkeypatch.setattr(os, "urandom", lambda n, fill=fill: fill * n)
        expected = str(uuid.UUID(bytes=fill * 16, version=4))
        assert new_message_id() == expected

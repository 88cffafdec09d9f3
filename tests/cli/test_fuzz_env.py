"""Fuzzing (issue 15 item 7): `DSH_*` environment values, through `dsh config show --json` (and
`dsh sessions list` for `DSH_HOME`, kept inside a scratch directory). Invariants: exit 0 or 2, no
traceback, no file changed, each case within the deadline.
"""

from __future__ import annotations

import subprocess
import sys

from cli_kit import subprocess_env
from fuzz_kit import TRACEBACK, check_cli_result, fast_dsh, tree_digest
from hypothesis import given
from hypothesis import strategies as st

DSH = fast_dsh()

NAMES = [
    "DSH_MODEL", "DSH_MODEL__BASE_URL", "DSH_MODEL__MAX_TOKENS", "DSH_MODEL__TEMPERATURE", "DSH_MODEL__RETRY",
    "DSH_MODEL__RETRY__MAX_ATTEMPTS", "DSH_MODEL__READ_TIMEOUT_SECONDS", "DSH_AGENT", "DSH_AGENT__MAX_STEPS_PER_TURN",
    "DSH_SUBAGENTS", "DSH_SUBAGENTS__REPORT_DELIVERY", "DSH_SUBAGENTS__MAX_DEPTH", "DSH_PERSISTENCE__BATCH_DELAY_MS",
    "DSH_RUN", "DSH_RUN__SHUTDOWN_GRACE_SECONDS", "DSH_RUN__PARKED", "DSH_TESTING__FENCES", "DSH_PROFILE",
    "DSH_MAX_INPUT_BYTES", "DSH_DEBUG", "DSH_NOPE__X", "DSH___", "DSH_MODEL____X", "dsh_model__model",
]
env_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=80)
json_like = st.one_of(
    st.sampled_from(['{"maxTokens": 1e999}', '{"x": NaN}', "[" * 5000, '{"maxTokens": ' + "9" * 5000 + "}",
                     '{"retry": {"maxAttempts": "3"}}', '{"baseUrl": "http://\\ud800"}', "null", "{}", "1"]),
    st.lists(st.sampled_from(['{', '}', '[', ']', '"a"', ':', ',', '1', 'true', '"maxTokens"', '"\\u0000"']),
             max_size=20).map("".join),
)
value = st.one_of(env_text, json_like, st.sampled_from(["", " ", "inf", "-1", "0", "1" * 70, "nan", "1e999"]))


@given(env=st.dictionaries(st.sampled_from(NAMES), value, min_size=1, max_size=4))
def test_fuzz_dsh_environment_values(tmp_path, env):
    before = tree_digest(tmp_path)

    result = DSH("config", "show", "--json", env={**env, "DSH_HOME": str(tmp_path / "home")})

    check_cli_result(result, {0, 2})
    assert tree_digest(tmp_path) == before


@given(home=env_text)
def test_fuzz_dsh_home_values(tmp_path, home):
    (tmp_path / "afile").write_text("")
    before = tree_digest(tmp_path)

    result = DSH("sessions", "list", env={"DSH_HOME": str(tmp_path / home.lstrip("/"))})

    check_cli_result(result, {0, 2})
    assert tree_digest(tmp_path) == before


def test_environment_smoke_in_a_subprocess(tmp_path):
    for name, value in (("DSH_MODEL", "[" * 100_000), ("DSH_MAX_INPUT_BYTES", "lots"),
                        ("DSH_RUN__SHUTDOWN_GRACE_SECONDS", "inf")):
        done = subprocess.run([sys.executable, "-c", "from dsh.cli.main import entry; entry()", "config", "show"],
                              capture_output=True, text=True, timeout=30, env=subprocess_env({name: value}))
        assert done.returncode == 2 and TRACEBACK not in done.stderr, (name, done.stderr)
        assert done.stderr.startswith("dsh: ")

"""The configuration schema (SPEC §14.1): one pydantic model per YAML section.

YAML keys are camelCase (`subagents.reportDelivery`); Python code uses the snake_case field names.
Every model derives from `_Schema`, which sets the alias generator, rejects unknown keys and freezes
instances: the composed `Config` is built once (in `headless` or `cli`) and passed down, so nothing
below may change it or read YAML or `os.environ` itself (STYLE §8).

`populate_by_name=True` exists for Python callers (`SubagentsConfig(report_delivery="quiet")`);
`loader.config.compose` validates YAML and environment layers with `by_name=False`, so a YAML file
must spell keys in camelCase and a snake_case key there is an unknown key.

Constraints live in the types, so a bad value fails validation with pydantic's message and
`compose` only has to say where it came from. `lean.py` holds the same schema as tables, which
`compose(lean=True)` validates without pydantic (issue 13); a test pins that the two agree.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dsh.loader.config.lean import MAX_DURATION_SECONDS, MAX_GRACE_SECONDS, MAX_WORKFLOW_TASK_SECONDS, env_name, http_url
from dsh.loader.texts import TEXTS

__all__ = [
    "AgentConfig",
    "Config",
    "LimitsConfig",
    "ModelConfig",
    "PersistenceConfig",
    "RetryConfig",
    "RunConfig",
    "SubagentsConfig",
    "TemporalConfig",
    "TestingConfig",
]

# Issue 15 item 7: no setting is infinite. `allow_inf_nan=False` refuses `.inf` and `.nan` in every
# float field, and durations have an upper bound, since a timeout of 1e300 s overflows the clocks
# and socket timeouts it reaches. The bounds and the two value checks live in `lean` (pydantic-free).
_http_url = http_url
_env_name = env_name


class _Schema(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, allow_inf_nan=False
    )


class RetryConfig(_Schema):
    """Provider retry policy for 429 / 5xx / network errors (§13.2)."""

    max_attempts: Annotated[int, Field(ge=1, le=10)] = 4
    initial_backoff_seconds: Annotated[float, Field(ge=0, le=MAX_DURATION_SECONDS)] = 1.0
    max_backoff_seconds: Annotated[float, Field(ge=0, le=MAX_DURATION_SECONDS)] = 30.0


class ModelConfig(_Schema):
    """Which model to call and how. The API key itself is never configurable, only the name of the
    environment variable holding it (`apiKeyEnv`), so no file or `config show` output can leak it.
    `apiKeyEnv: null` is a server that takes no key (a local Ollama or vLLM): no variable is read
    and no `Authorization` header is sent (issue 16 item 4)."""

    provider: Literal["openai-compatible", "replay"] = "openai-compatible"
    base_url: Annotated[str, AfterValidator(_http_url)] = "https://api.deepseek.com"
    model: Annotated[str, Field(min_length=1)] = "deepseek-chat"
    api_key_env: Annotated[str, AfterValidator(_env_name)] | None = "DEEPSEEK_API_KEY"
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    connect_timeout_seconds: Annotated[float, Field(gt=0, le=MAX_DURATION_SECONDS)] = 10.0
    read_timeout_seconds: Annotated[float, Field(gt=0, le=MAX_DURATION_SECONDS)] = 120.0
    retry: RetryConfig = RetryConfig()


class AgentConfig(_Schema):
    """`appendSystemPrompt` (issue 16, `--append-system-prompt`) is added after `systemPrompt`, as
    its own paragraph, for every agent of the tree: it extends the prompt without restating it."""

    system_prompt: str = TEXTS["T-SYSTEM-DEFAULT"]
    append_system_prompt: str | None = None
    max_parallel_tool_calls: Annotated[int, Field(ge=1, le=64)] = 10
    max_steps_per_turn: Annotated[int, Field(ge=1, le=1000)] = 100


class SubagentsConfig(_Schema):
    """`reportDelivery` has exactly two spellings (§11.1, §24 item 1); `maxDepth: 0` forbids starting
    children while the tool stays visible."""

    report_delivery: Literal["wakeup", "quiet"] = "wakeup"
    max_depth: Annotated[int, Field(ge=0, le=16)] = 3


class PersistenceConfig(_Schema):
    batch_delay_ms: Annotated[int, Field(ge=0, le=5000)] = 200
    fsync: bool = True


class RunConfig(_Schema):
    """`parked` decides what a stalled run does (§17.2); `compose` forces `release` under a
    transcript, because nobody is there to resume a parked child."""

    shutdown_grace_seconds: Annotated[float, Field(ge=0, le=MAX_GRACE_SECONDS)] = 5.0
    parked: Literal["wait", "release"] = "wait"


class LimitsConfig(_Schema):
    """Run-wide budgets (issue 15 finding 9; README "Run budgets"): spawns, model requests and
    tokens (input + output) per run. Finite by construction, so a runaway model stops."""

    max_children: Annotated[int, Field(ge=0, le=100_000)] = 200
    max_requests: Annotated[int, Field(ge=1, le=1_000_000)] = 2_000
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000_000)] = 2_000_000


class TestingConfig(_Schema):
    """Fence settings (§16). Accepted only on top of the shipped `test` profile (§14.2 item 6);
    `compose` enforces that, since the schema cannot know which profile a key came from."""

    __test__ = False  # not a pytest test class despite the name

    fences: bool = False
    fence_timeout_seconds: Annotated[float, Field(gt=0, le=MAX_DURATION_SECONDS)] = 10.0


class TemporalConfig(_Schema):
    """Where the Temporal engine (issue 12; loader/engines/README.md) finds its server. Read only
    when `engine: temporal`; the local engine never looks at it (nor imports temporalio)."""

    address: Annotated[str, Field(min_length=1)] = "localhost:7233"
    namespace: Annotated[str, Field(min_length=1)] = "default"
    task_queue: Annotated[str, Field(min_length=1)] = "dsh"
    # A child's workflow continues as new between turns once its history holds this many events
    # (before Temporal's own suggestion, which comes ahead of the 51,200-event / 50 MB limits).
    continue_as_new_after: Annotated[int, Field(ge=1)] | None = None
    # Any agent's workflow continues as new between turns once its run took this many updates (a
    # server caps a run at `history.maxTotalUpdates`, 2,000 by default; a root's children resident).
    continue_as_new_updates: Annotated[int, Field(ge=1)] = 1_000
    # A turn whose worker went silent this long is retried on another (issue 12 item 5); a live
    # worker heartbeats well within it (per model chunk, and a third of it apart while held).
    heartbeat_timeout_seconds: Annotated[float, Field(gt=0, le=MAX_DURATION_SECONDS)] = 60.0
    # Children of one agent's workflow run running at once. A server refuses the start command past
    # `limit.numPendingChildExecutions.error` (2,000 by default) and retries the workflow task
    # forever: a `subagent` or cold resume past this many is refused with RUNNING_LIMIT instead.
    max_running_children: Annotated[int, Field(ge=1)] = 2_000
    # Whose turns run in a workflow of their own, so the agent's run continues as new while one
    # long turn goes on (loader/engines/README.md "A turn across runs"): the root's (its history
    # takes the tree's charges and a fan-out's notices; the default), every agent's, or none (one
    # workflow fewer per turn; one turn then lives within one run's 51,200 events).
    turn_workflows: Literal["root", "all", "none"] = "root"
    # How long a worker may take over one workflow task of an agent's run before the server times
    # it out and hands it to a worker again (unset: the server's 10 s). A task that must replay a
    # long run's whole history (after an eviction) may need more: past it, every retry replays
    # again and times out again (a root holding thousands of children in one turn; README "Scale").
    workflow_task_timeout_seconds: Annotated[float, Field(gt=0, le=MAX_WORKFLOW_TASK_SECONDS)] | None = None


class Config(_Schema):
    """The composed configuration; every section and key has a default. `engine` picks who runs the
    tree: `local` (this process, the default) or `temporal` (workers, through `temporal.*`)."""

    engine: Literal["local", "temporal"] = "local"

    model: ModelConfig = ModelConfig()
    agent: AgentConfig = AgentConfig()
    subagents: SubagentsConfig = SubagentsConfig()
    persistence: PersistenceConfig = PersistenceConfig()
    run: RunConfig = RunConfig()
    limits: LimitsConfig = LimitsConfig()
    testing: TestingConfig = TestingConfig()
    temporal: TemporalConfig = TemporalConfig()

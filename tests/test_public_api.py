"""The public names come in tiers: ``tether.bridge`` holds what an agent author, someone
running or embedding a bridge, and a client of the gateway import (at most 45 names, issue
#46); the tiers below hold the gateway client's errors and records (``tether.bridge.client``),
the Store roles (``tether.bridge.custody``) and the pool's planner (``tether.bridge.pool``).
Changing a tier's names is a decision: these sets say what each audience gets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import tether.bridge
import tether.bridge.client
import tether.bridge.custody
import tether.bridge.pool
from tether.bridge.service import _config, _service, _store_status

AGENT_AUTHOR = {
    "Task",
    "Reply",
    "Retry",
    "Permanent",
    "TooLarge",
    "progress_of",
    "Progress",
    "conversation_of",
    "Conversation",
    "Turn",
    "run_of",
    "Run",
    "StepError",
    "StepMismatch",
    "AskTimeout",
    "AskUnsupported",
    "ChildFailed",
    "JoinTimeout",
    "WaitTimeout",
    "AgentFactory",
    "asyncio_agent",
    "trio_as_asyncio",
}
RUN_OR_EMBED = {
    "BridgeConfig",
    "load_config",
    "BridgeService",
    "WorkerConfig",
    "load_worker_config",
    "WorkerService",
    "ConfigError",
    "store_status",
    "render_store_status",
    "StoreStatus",
    "StatusEntry",
    "ensure_token_file",
    "read_token",
    "write_token",
    "TokenFileError",
}
OPEN_A_STORE = {
    "open_store",
    "StoreConfigError",
    "SqliteStore",
    "SchemaTooNew",
    "PostgresStore",
    "StoreConnectionLost",
    "StoreTimeout",
    "redact_dsn",
}
GATEWAY_CLIENT = {
    "GatewayClient",
    "GatewayError",
}
CLIENT_TIER = GATEWAY_CLIENT | {
    "GatewayAuthError",
    "GatewayRequestError",
    "GatewayProtocolError",
    "GatewayUnavailable",
    "GatewayTask",
    "ResultReceipt",
    "ConnectionStatus",
    "PROTOCOL_VERSION",
}
CUSTODY_BASICS = {"CustodyState", "in_custody", "TaskRecord"}
CUSTODY_TIER_ONLY = {"IN_CUSTODY", "TERMINAL", "UnknownTask", "InvalidTaskId"}
BRIDGE = AGENT_AUTHOR | RUN_OR_EMBED | OPEN_A_STORE | GATEWAY_CLIENT | CUSTODY_BASICS
NEEDS_PSYCOPG = {"PostgresStore", "StoreConnectionLost", "StoreTimeout"}

STORE_ROLES = {
    "Store",
    "StoreClock",
    "IngestStore",
    "PoolMemberStore",
    "WorkerStore",
    "LeadStore",
    "StallStore",
    "StateReader",
    "JournalStore",
    "PermitStore",
    "RunStore",
    "NewsStore",
    "QuestionStore",
    "LimitStore",
    "DeliveryStore",
    "DeadNoticeStore",
    "ReconcilerStore",
    "RetentionStore",
    "InspectStore",
    "OperatorStore",
    "ConversationStore",
    "RoomStore",
}
CUSTODY_RECORDS = {
    "Claim",
    "Result",
    "Assignment",
    "PendingTask",
    "PoolView",
    "WorkerInfo",
    "JournalEntry",
    "LeaseExpiry",
    "WaitingRetries",
    "WaitingRuns",
    "StepRecord",
    "AskRecord",
    "Question",
    "Suspects",
    "StallCandidate",
    "OperatorOutcome",
    "ReconcileReport",
    "RoomView",
    "ConversationCounts",
    "ForgottenRoom",
    "LimitSpec",
    "LimitView",
    "Granted",
    "NoPermit",
}
PLANNER = {
    "plan_sweep",
    "Assigned",
    "Deferred",
    "Returned",
    "SweepReport",
    "elect",
    "PoolLead",
    "PoolWorker",
    "Wakeup",
    "PoolWakeups",
    "StallWatcher",
    "StallPass",
    "RetryBackoff",
    "Parked",
    "Reconciler",
    "load_agent",
    "AgentLoadError",
}

PUBLIC = {
    "BridgeService": _service.BridgeService,
    "BridgeConfig": _config.BridgeConfig,
    "ConfigError": _config.ConfigError,
    "load_config": _config.load_config,
    "store_status": _store_status.store_status,
    "render_store_status": _store_status.render_store_status,
    "StoreStatus": _store_status.StoreStatus,
    "StatusEntry": _store_status.StatusEntry,
}


def public_names(module: ModuleType) -> set[str]:
    """A tier's names, loaded or not yet (a tier loads its names on first use, issue #56)."""
    return {
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), ModuleType)
    }


def test_tether_bridge_holds_exactly_what_its_three_readers_need() -> None:
    assert public_names(tether.bridge) | NEEDS_PSYCOPG == BRIDGE
    # 45 until the fourth wave: a join's two outcomes an author catches (ChildFailed,
    # JoinTimeout) joined the author's names; the rest of child runs is one tier down; so did
    # the wait for an event's (WaitTimeout); schedules and events are the custody tier's; and
    # the one failure of a run over a size bound (TooLarge, issue #53), a Permanent; and the
    # one of a run resumed under code that no longer matches its records (StepMismatch)
    assert len(BRIDGE) <= 50
    for name in BRIDGE:
        assert getattr(tether.bridge, name) is not None


def test_the_store_roles_and_records_are_the_implementers_tier_only() -> None:
    custody = public_names(tether.bridge.custody)
    assert custody >= STORE_ROLES | CUSTODY_RECORDS
    assert not (STORE_ROLES | CUSTODY_RECORDS) & public_names(tether.bridge)


def test_the_gateway_clients_tier_holds_its_errors_and_records() -> None:
    assert public_names(tether.bridge.client) == CLIENT_TIER
    assert not (CLIENT_TIER - GATEWAY_CLIENT) & public_names(tether.bridge)
    assert public_names(tether.bridge.custody) >= CUSTODY_TIER_ONLY


def test_the_planner_is_the_pools_tier_only() -> None:
    assert public_names(tether.bridge.pool) >= PLANNER
    assert not PLANNER & public_names(tether.bridge)


def test_a_name_in_two_tiers_is_one_object() -> None:
    """``tether.bridge`` re-exports the custody basics and the agent's names of its tiers."""
    for tier in (tether.bridge.client, tether.bridge.custody, tether.bridge.pool):
        shared = public_names(tier) & BRIDGE
        assert shared
        for name in shared:
            assert getattr(tether.bridge, name) is getattr(tier, name), name
    assert CUSTODY_BASICS | {"Task"} <= public_names(tether.bridge.custody)
    assert AGENT_AUTHOR - {"Task"} <= public_names(tether.bridge.pool)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_the_public_name_is_the_private_object(name: str) -> None:
    assert getattr(tether.bridge, name) is PUBLIC[name]


def test_a_fresh_interpreter_imports_the_public_names_from_the_package() -> None:
    """Not only through attributes the test process set up: a plain ``from tether.bridge
    import ...`` works in a new interpreter (no import cycle with ``tether``), without
    importing psycopg until a PostgreSQL name is used."""
    names = ", ".join(sorted(BRIDGE - NEEDS_PSYCOPG))
    code = (
        "import sys\n"
        f"from tether.bridge import {names}\n"
        "from tether.bridge.custody import Store\n"
        "from tether.bridge.pool import plan_sweep\n"
        "print(BridgeService.__module__, 'psycopg' in sys.modules)\n"
        "from tether.bridge import PostgresStore\n"
        "print(PostgresStore.__module__, 'psycopg' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "tether.bridge.service._service False",
        "tether.bridge.stores.postgres._store True",
    ]


def test_the_public_loader_merges_like_the_cli(tmp_path: Path) -> None:
    """``load_config`` (public) gives a user the CLI's precedence: TOML < env < flags."""
    toml = tmp_path / "bridge.toml"
    toml.write_text("[bridge]\nworkers = 2\nconcurrency = 3\n")
    config = tether.bridge.load_config(
        file=toml, environ={"TETHER_CONCURRENCY": "5"}, flags={"workers": None}
    )
    assert isinstance(config, tether.bridge.BridgeConfig)
    assert (config.workers, config.concurrency) == (2, 5)


@pytest.mark.parametrize(
    ("old", "new"), [("trio_side", "trio_as_asyncio"), ("render_status", "render_store_status")]
)
def test_a_renamed_public_name_still_works_and_says_its_new_name(old: str, new: str) -> None:
    """Issue #46 renamed two documented names so each says one thing; the old ones still
    resolve, to the same object, and warn with the name to use."""
    with pytest.warns(DeprecationWarning, match=f"use tether.bridge.{new}"):
        value = getattr(tether.bridge, old)
    assert value is getattr(tether.bridge, new)
    assert old not in dir(tether.bridge)

"""The shapes every ``tether`` subcommand's parser takes, written once.

Epilogs keep their line breaks, a command group requires its action word, and a service's settings
become flags defaulting to ``None``, so only a flag given wins over file and env.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
SettingsHelp: TypeAlias = Mapping[str, tuple[str, type[Any]]]
"""A setting's name -> (its help text, the type its flag parses to)."""


def add_command(
    sub: Subparsers,
    name: str,
    *,
    help: str,
    epilog: str,
    description: str | None = None,
    parents: Iterable[argparse.ArgumentParser] = (),
) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        parents=list(parents),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_group(sub: Subparsers, name: str, *, help: str, epilog: str, dest: str) -> Subparsers:
    """A command whose next word picks an action (``tether bridge run``), into ``dest``."""
    group = add_command(sub, name, help=help, epilog=epilog)
    return group.add_subparsers(dest=dest, required=True, metavar="ACTION")


def setting_flag(setting: str) -> str:
    return "--" + setting.replace("_", "-")


def add_settings(
    parser: argparse.ArgumentParser, table: SettingsHelp, names: Iterable[str] | None = None
) -> None:
    """``--config`` and one flag per setting in ``names`` (default: the whole table)."""
    parser.add_argument("--config", type=Path, default=None, help="a TOML config file")
    for setting in table if names is None else names:
        text, kind = table[setting]
        parser.add_argument(setting_flag(setting), dest=setting, type=kind, default=None, help=text)

"""The shapes every ``tether`` subcommand's parser takes, written once.

Epilogs keep their line breaks, a command group requires its action word, and a service's settings
become flags defaulting to ``None``, so only a flag given wins over file and env. Every parser is
a ``CommandParser``: a subcommand refuses an argument it does not know with its own usage.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[CommandParser]"
SettingsHelp: TypeAlias = Mapping[str, tuple[str, type[Any]]]
"""A setting's name -> (its help text, the type its flag parses to)."""


RENAMED_FLAGS: Final = {
    "--lead-beat-interval": "--lead-lease (seconds a leader's lease lasts, 3 beats each)"
}
"""Flags an earlier tether had, and what replaced them: an unknown flag says so."""


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that refuses the arguments it does not know itself."""

    siblings: Subparsers | None = None
    """The subcommands beside this one (to say which of them has an unknown flag)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._hint(extras)}")
        return parsed, extras

    def _hint(self, extras: list[str]) -> str:
        flag = next((word.partition("=")[0] for word in extras if word.startswith("--")), None)
        if flag is None:
            return ""
        # a sibling's exact flag first: `store status --state` is `store list`'s, not `--store`
        for parser in self.siblings.choices.values() if self.siblings is not None else ():
            if flag in parser._option_string_actions:
                return f" ({parser.prog} has {flag})"
        if flag in RENAMED_FLAGS:
            return f" ({flag} is now {RENAMED_FLAGS[flag]})"
        close = difflib.get_close_matches(flag, self._option_string_actions, n=1)
        return f" (did you mean {close[0]}?)" if close else ""


def add_command(
    sub: Subparsers,
    name: str,
    *,
    help: str,
    epilog: str,
    description: str | None = None,
    parents: Iterable[CommandParser] = (),
) -> CommandParser:
    parser = sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        parents=list(parents),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.siblings = sub
    return parser


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

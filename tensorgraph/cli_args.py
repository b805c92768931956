"""What every `tensorgraph` subcommand shares: the parser class, its usage error, and the
argparse value types that check a value where it enters.

Invariants: a bad value is refused by its argparse type (`argparse.ArgumentTypeError`,
naming the value and what was expected) before any work starts, and `_Parser.error`
raises `UsageError` instead of printing usage and exiting, so `main` reports it in one
line with exit code 2. Every option's help ends with its default (`_HelpFormatter`).
Seeds are non-negative ints, as NumPy's generators take them; a negative seed is refused
rather than silently mapped onto another one.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

BACKENDS = ("mlx", "numpy", "arena")


class UsageError(Exception):
    """Bad command-line usage: reported in one line, exit code 2."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default (`off` for a switch), unless the help
    text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS):
            return text
        if action.nargs == 0 and action.default is False:  # a store_true switch
            return f"{text} (default: off)"
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise UsageError(message)


def _parse_value(raw: str) -> object:
    """int, then float, then true/false, else the text itself (a dtype name)."""
    for parse in (int, float):
        try:
            return parse(raw)
        except ValueError:
            continue
    return {"true": True, "false": False}.get(raw, raw)


def _config(pairs: Sequence[str]) -> dict[str, object]:
    """`k=v` pairs as a dict of config overrides (UsageError names a malformed pair)."""
    config: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key or not raw:
            raise UsageError(f"--config expects key=value but got {pair!r}")
        config[key] = _parse_value(raw)
    return config


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expects a positive int but got {text!r}")
    return value


def _seed(text: str) -> int:
    """A seed for NumPy's generators: an int >= 0 (negative seeds are refused, not mapped)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expects a non-negative int but got {text!r}")
    return value


def _output_file(text: str) -> Path:
    """A file to write: its folder must exist and it must not be a folder itself (checked
    before any work, so a typo costs no compile)."""
    if not text:
        raise argparse.ArgumentTypeError("expects a file name but got ''")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    folder = path.parent
    if not folder.exists():
        raise argparse.ArgumentTypeError(f"no such directory {str(folder)!r} (for {text!r})")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{str(folder)!r} is not a directory (for {text!r})")
    return path


def _output_dir(text: str) -> Path:
    """A folder to write into: created if missing, so its nearest existing ancestor must
    be a folder (not a file)."""
    path = Path(text)
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{str(existing)!r} is a file, not a directory")
    return path


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"expects a positive number of seconds but got {text!r}")
    return value


def _power_of_two(text: str) -> int:
    """An alignment: a power of two (1, 2, 4, ... bytes)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or value & (value - 1):
        raise argparse.ArgumentTypeError(f"expects a power of two (bytes) but got {text!r}")
    return value

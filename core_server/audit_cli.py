"""`streameval audit ...`: checks of an adapter's honesty (docs/robustness.md)."""

from __future__ import annotations

import typer

audit_app = typer.Typer(help="Audit an adapter: causality.", no_args_is_help=True)

"""The one error type every command shows the same way."""

from __future__ import annotations

from typing import Any

import click


class UserError(click.ClickException):
    """A problem the user can fix; printed as `ce-bench: error: ...`, exit status 1, never a stack dump."""

    def show(self, file: Any = None) -> None:
        click.echo(f"ce-bench: error: {self.message}", err=True)

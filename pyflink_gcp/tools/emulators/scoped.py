"""``emulators_for``: the emulators the environment names, else a stack for one block."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

from pyflink_gcp.tools.emulators.stack import EmulatorStack

__all__ = ["emulators_for"]


@contextlib.contextmanager
def emulators_for(
    services: Iterable[str], *variables: str, **stack_options: Any
) -> Iterator[EmulatorStack | None]:
    """The emulators the environment already names, else a stack started for the block.

    If every one of ``variables`` is set, the block runs against those endpoints. Otherwise an
    :class:`EmulatorStack` of ``services`` starts (``stack_options`` go to it, logs are not
    kept), its variables are exported to ``os.environ`` for the block and removed after it, and
    the stack stops. Used by the examples and the benchmarks, which run against a developer's
    running emulators as well as alone.

    Yields:
        The stack started for the block, or None when the environment named the emulators.
    """
    if variables and all(os.environ.get(name) for name in variables):
        yield None
        return
    stack_options.setdefault("keep_logs", False)
    with EmulatorStack(services=tuple(services), **stack_options) as stack:
        os.environ.update(stack.env)
        try:
            yield stack
        finally:
            for name in stack.env:
                os.environ.pop(name, None)

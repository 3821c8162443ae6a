"""Fixtures of the Bigtable writer tests: the emulator, a fresh instance id, a checking proxy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pyflink_gcp.tools.emulators import EmulatorStack
from tests.integration.bigtable.support import BigtableProxy, unique


@pytest.fixture
def instance(stack: EmulatorStack) -> str:
    """A fresh instance id: the emulator creates instances implicitly, so each test is alone."""
    return unique("it-")


@pytest.fixture
def proxy(stack: EmulatorStack) -> Iterator[BigtableProxy]:
    with BigtableProxy() as running:
        yield running

"""Build hook: every wheel carries the Java bridge jar (``pyflink_gcp/jars/``).

The jar holds the checkpoint-marker operators (``java-bridge/``); without it an installed
package warns at every job and its writers wait at every bundle end. It is compiled with
``javac`` against the Flink jars of ``apache-flink-libraries``, which ``[build-system]
requires`` therefore lists: that package is the jars alone (no Python dependencies), so an
isolated build installs it instead of the whole ``apache-flink`` with Beam, pandas and pyarrow.

The compile reuses :func:`pyflink_gcp.tools.bridge_build.build` (the one ``pyflink-gcp bridge
build`` runs), loaded from its file with the two modules it imports, so that nothing else of the
package (which imports gRPC and PyFlink's Python side) is needed at build time. A jar
that ``make setup`` already built from the same sources against the same Flink version is used
as it is. Without a JDK the wheel build fails with a message saying so; an editable install
skips the hook (``make setup`` builds the jar in place there).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import types
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

_ROOT = Path(__file__).resolve().parent
_PACKAGE = _ROOT / "pyflink_gcp"


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _bridge_build_module() -> types.ModuleType:
    """``pyflink_gcp.tools.bridge_build`` and the two modules it imports, without their
    packages (whose ``__init__`` would import the whole library)."""
    packages = {
        "pyflink_gcp": _PACKAGE,
        "pyflink_gcp.core": _PACKAGE / "core",
        "pyflink_gcp.tools": _PACKAGE / "tools",
    }
    modules = {
        "pyflink_gcp.core.errors": _PACKAGE / "core" / "errors.py",
        "pyflink_gcp.core.bridge": _PACKAGE / "core" / "bridge.py",
        "pyflink_gcp.tools.bridge_build": _PACKAGE / "tools" / "bridge_build.py",
    }
    saved = {name: sys.modules.get(name) for name in [*packages, *modules]}
    for name, path in packages.items():
        stub = types.ModuleType(name)
        stub.__path__ = [str(path)]
        sys.modules[name] = stub
    try:
        loaded = [_load(name, path) for name, path in modules.items()]
        return loaded[-1]
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _pyflink_root() -> None:
    """Give a jars-only ``pyflink`` (apache-flink-libraries) the ``__file__`` the build reads.

    ``apache-flink-libraries`` installs ``pyflink/lib`` and ``pyflink/opt`` without
    ``pyflink/__init__.py`` (that comes with ``apache-flink``), so ``pyflink`` imports as a
    namespace package whose ``__file__`` is None.
    """
    try:
        import pyflink
    except ImportError as exc:
        raise SystemExit(
            "building the pyflink-gcp wheel needs apache-flink-libraries (the Flink jars the "
            "Java bridge compiles against); it is in [build-system] requires, so build with "
            "build isolation or install it first"
        ) from exc
    if getattr(pyflink, "__file__", None) is None:
        pyflink.__file__ = str(Path(next(iter(pyflink.__path__))) / "__init__.py")


class BuildPyWithBridge(build_py):
    """``build_py`` that first compiles the bridge jar into the package's ``jars/``."""

    def run(self) -> None:
        if getattr(self, "editable_mode", False):
            super().run()
            return
        _pyflink_root()
        bridge_build = _bridge_build_module()
        try:
            jar = Path(bridge_build.build())
        except bridge_build.ConfigurationError as exc:
            raise SystemExit(
                f"pyflink-gcp: cannot build the Java bridge jar the wheel must contain: {exc}. "
                "Install a JDK 11 or newer (javac on PATH or in JAVA_HOME/bin) and build again."
            ) from exc
        super().run()
        target = Path(self.build_lib) / "pyflink_gcp" / "jars" / jar.name
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(jar, target)


if __name__ == "__main__":  # setuptools runs this file as __main__; a test imports it
    setup(cmdclass={"build_py": BuildPyWithBridge})

"""The layers of docs/architecture.md: each package imports only the ones below it, the library
never imports the tools, and the command line loads the tools only when one of them runs.

The imports are read from the source (every ``import`` and ``from ... import`` statement,
wherever it sits, including the lazy ones inside functions), so the check covers code paths no
test happens to run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pyflink_gcp

PACKAGE = Path(pyflink_gcp.__file__).resolve().parent

#: The library's subpackages: what a job that writes to Google Cloud loads.
LIBRARY = ("core", "pubsub", "bigquery", "cloudtasks", "bigtable", "spanner", "routing", "table")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """Every module that ``path`` (the module named ``module``) imports, absolute, with its line."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from pyflink_gcp import tools` names the package in the alias.
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def _library_modules() -> list[Path]:
    modules = [PACKAGE / "__init__.py", PACKAGE / "_version.py"]
    for name in LIBRARY:
        modules += sorted((PACKAGE / name).rglob("*.py"))
    return modules


def _tools_imports(path: Path, module: str) -> dict[int, str]:
    """The lines of ``path`` that import the tools, and what each imports."""
    found: dict[int, str] = {}
    for line, target in _imports(path, module):
        if target == "pyflink_gcp.tools" or target.startswith("pyflink_gcp.tools."):
            found.setdefault(line, target)
    return found


def test_every_library_package_is_checked() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == {*LIBRARY, "tools"}, "a new subpackage: add it to LIBRARY or to tools/"
    assert len(_library_modules()) > 100


def test_the_library_never_imports_the_tools() -> None:
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
        for path in _library_modules()
        for line, target in _tools_imports(path, _module_name(path)).items()
    ]
    assert not offending, "\n".join(offending)


#: What each package may import of the others (docs/architecture.md draws it). The package
#: itself, ``pyflink_gcp`` (its ``__init__``) and ``_version`` are not listed.
SERVICES = ("pubsub", "bigquery", "cloudtasks", "bigtable", "spanner")
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    **{service: {"core"} for service in SERVICES},
    "routing": {"core", *SERVICES},
    "table": {"core", *SERVICES, "routing"},
    "tools": set(),
    "tools.emulators": set(),
    "tools.cluster": {"tools.emulators"},
    "tools.bridge_build": {"core"},
    "tools.sql_client": {"core", "tools.emulators", "tools.bridge_build"},
    "cli": {
        *LIBRARY,
        "tools",
        "tools.emulators",
        "tools.cluster",
        "tools.bridge_build",
        "tools.sql_client",
    },
}


def _package(module: str) -> str | None:
    """The package of ``pyflink_gcp.<package>...`` as ``MAY_IMPORT`` names it (each tool apart)."""
    parts = module.split(".")
    if parts[0] != "pyflink_gcp" or len(parts) == 1 or parts[1] in ("_version", "__version__"):
        return None
    if parts[1] == "tools" and len(parts) > 2:
        return f"tools.{parts[2]}"
    return parts[1]


def test_every_package_imports_only_the_layers_below_it() -> None:
    offending = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        source = _package(module)
        if source is None:
            continue
        allowed = MAY_IMPORT[source] | {source}
        lines: dict[int, str] = {}
        for line, target in _imports(path, module):
            package = _package(target)
            if package is not None and package not in allowed:
                lines.setdefault(line, target)
        where = path.relative_to(PACKAGE.parent)
        offending += [f"{where}:{line} imports {target}" for line, target in lines.items()]
    assert not offending, "\n".join(offending)


def test_the_check_sees_absolute_relative_and_lazy_imports(tmp_path: Path) -> None:
    # The same walker, on a module that imports the tools in each of the ways it must catch.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from pyflink_gcp import tools\n"
        "from pyflink_gcp import core\n"
        "def f():\n"
        "    import pyflink_gcp.tools.emulators\n"
        "    from ..tools.cluster import commands\n"
        "    from ..core import bridge\n"
    )
    assert _tools_imports(probe, "pyflink_gcp.core.probe") == {
        1: "pyflink_gcp.tools",
        4: "pyflink_gcp.tools.emulators",
        5: "pyflink_gcp.tools.cluster",
    }


@pytest.mark.parametrize("argv", [[], ["--help"], ["plan", "--help"]])
def test_the_command_line_loads_no_tool_until_one_runs(argv: list[str]) -> None:
    code = (
        "import sys\n"
        "import pyflink_gcp.cli as cli\n"
        f"argv = {argv!r}\n"
        "if argv:\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyflink_gcp.tools')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.splitlines()[-1] == "[]"


def test_the_tool_commands_still_run_from_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pyflink_gcp.cli", "emulators", "restart", "receiver"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "cannot restart 'receiver'; choose from pubsub" in done.stderr

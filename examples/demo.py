"""The `make demo` entry point: start the local emulators, then run every example job.

Each example is a standalone script that finds the emulators through the standard variables;
this script starts the stack, exports them, runs the examples one after the other and stops
everything at the end (also on Ctrl-C).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from pyflink_gcp.tools.emulators import ALL_SERVICES, EmulatorStack, setup_tools

HERE = os.path.dirname(os.path.abspath(__file__))

#: In the order they run; an example that is not there (yet) is skipped.
EXAMPLES = [
    "pubsub_dynamic_topics.py",
    "pubsub_live_rules.py",
    "lineage_listener.py",
    "bigquery_dynamic_tables.py",
    "bigquery_tenant_tables.py",
    "bigquery_file_loads.py",
    "bigquery_results_to_tasks.py",
    "bigtable_daily_tables.py",
    "cloudtasks_webhooks.py",
    "spanner_events.py",
    "sql_dynamic_tables.py",
]


def main() -> int:
    setup_tools(ALL_SERVICES)
    failed = []
    with EmulatorStack(services=ALL_SERVICES, project="demo-project") as stack:
        env = dict(os.environ, **stack.env)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [os.path.dirname(HERE), env.get("PYTHONPATH", "")] if p
        )
        print("emulators up:", ", ".join(f"{k}={v}" for k, v in sorted(stack.env.items())))
        for name in EXAMPLES:
            path = os.path.join(HERE, name)
            if not os.path.exists(path):
                continue
            print(f"\n=== {name} ===", flush=True)
            started = time.monotonic()
            code = subprocess.call([sys.executable, path], env=env)
            print(
                f"=== {name}: {'ok' if code == 0 else f'FAILED ({code})'} "
                f"in {time.monotonic() - started:.1f}s ===",
                flush=True,
            )
            if code != 0:
                failed.append(name)
    if failed:
        print("\nfailed examples:", ", ".join(failed))
        return 1
    print("\nall examples passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

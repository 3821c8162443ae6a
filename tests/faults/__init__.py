"""The fault suite of the standalone cluster (``python -m tests.faults``, ``make faults``).

Not collected by pytest (no ``test_*`` modules): its runs take minutes per sink, so it stays
out of ``make test``, which keeps the short version (``tests/cluster/test_taskmanager_kill.py``).
"""

"""Starts gcp-storage-emulator with a listen backlog for many clients (run by path).

The emulator serves one request at a time from Python's ``http.server.HTTPServer``, whose
listen backlog is 5 connections. A sink subtask uploads finished files on several threads and
its committer deletes loaded ones on several more; past five waiting connections the kernel
drops new ones, and a client then waits for its connect timeout (two minutes) before it retries.
This launcher, run with the emulator's own interpreter, raises the backlog so that connections
queue and are served in turn, then hands over to the emulator's command line. It changes no
result, only how many clients may wait.

Usage: ``<the emulator's python> gcs_queued.py [gcp-storage-emulator options]``.
"""

from __future__ import annotations

import sys

#: Connections the server's accept queue holds.
BACKLOG = 1024


def _patch() -> None:
    from http import server

    server.HTTPServer.request_queue_size = BACKLOG


if __name__ == "__main__":
    _patch()
    from gcp_storage_emulator.__main__ import main

    sys.argv[0] = "gcp-storage-emulator"
    main()

"""The soak: each sink for an hour on the standalone cluster, destinations churning, TaskManagers
killed, memory, threads, sockets and checkpoint durations sampled (``make soak``)."""

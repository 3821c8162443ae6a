"""The development tools that ship beside the library, for the ``pyflink-gcp`` command line.

* :mod:`pyflink_gcp.tools.emulators`: the local Google Cloud emulator stack
  (``pyflink-gcp emulators setup|up|restart``, :class:`~pyflink_gcp.tools.emulators.EmulatorStack`)
  that the tests, the examples and the benchmarks run against;
* :mod:`pyflink_gcp.tools.cluster`: a standalone Flink cluster from the apache-flink wheel
  (``pyflink-gcp cluster up|down``,
  :class:`~pyflink_gcp.tools.cluster.StandaloneCluster`);
* :mod:`pyflink_gcp.tools.bridge_build`: the ``javac`` build of the Java bridge jar, shared by
  ``setup.py`` and ``pyflink-gcp bridge build``;
* :mod:`pyflink_gcp.tools.sql_client`: Flink's SQL client from the apache-flink wheel with the
  SQL connectors (``pyflink-gcp sql-client``).

The library (``core``, the five services, ``routing``, ``table``) never imports this package: a
job that writes to Google Cloud loads none of it, and the tools may import the library but not
the other way round (``docs/architecture.md``).
"""

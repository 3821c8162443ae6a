package dev.pyflinkgcp.bridge.table;

/** {@code 'connector' = 'gcp-bigtable'}: rows written as cells by the Python Bigtable writer. */
public final class BigtableTableSinkFactory extends GcpTableSinkFactory {

    public BigtableTableSinkFactory() {
        super("gcp-bigtable");
    }
}

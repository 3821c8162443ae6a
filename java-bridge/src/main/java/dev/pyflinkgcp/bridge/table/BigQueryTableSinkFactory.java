package dev.pyflinkgcp.bridge.table;

/** {@code 'connector' = 'gcp-bigquery'}: rows appended by the Python BigQuery writer. */
public final class BigQueryTableSinkFactory extends GcpTableSinkFactory {

    public BigQueryTableSinkFactory() {
        super("gcp-bigquery");
    }
}

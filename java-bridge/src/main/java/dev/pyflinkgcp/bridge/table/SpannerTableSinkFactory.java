package dev.pyflinkgcp.bridge.table;

/** {@code 'connector' = 'gcp-spanner'}: rows upserted (and, with a primary key, deleted) by the Python Spanner writer. */
public final class SpannerTableSinkFactory extends GcpTableSinkFactory {

    public SpannerTableSinkFactory() {
        super("gcp-spanner");
    }
}

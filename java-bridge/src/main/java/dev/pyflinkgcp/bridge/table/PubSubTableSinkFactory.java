package dev.pyflinkgcp.bridge.table;

/** {@code 'connector' = 'gcp-pubsub'}: rows published by the Python Pub/Sub writer. */
public final class PubSubTableSinkFactory extends GcpTableSinkFactory {

    public PubSubTableSinkFactory() {
        super("gcp-pubsub");
    }
}

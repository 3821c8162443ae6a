package dev.pyflinkgcp.bridge.table;

/** {@code 'connector' = 'gcp-cloudtasks'}: one HTTP task per row, created by the Python Cloud Tasks writer. */
public final class CloudTasksTableSinkFactory extends GcpTableSinkFactory {

    public CloudTasksTableSinkFactory() {
        super("gcp-cloudtasks");
    }
}

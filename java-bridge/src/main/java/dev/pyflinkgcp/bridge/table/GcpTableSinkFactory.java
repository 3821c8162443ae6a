package dev.pyflinkgcp.bridge.table;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.python.PythonOptions;
import org.apache.flink.table.api.ValidationException;
import org.apache.flink.table.connector.sink.DynamicTableSink;
import org.apache.flink.table.factories.DynamicTableSinkFactory;
import org.apache.flink.table.factories.FactoryUtil;
import org.apache.flink.table.types.logical.RowType;

/**
 * The table sink factory of a pyflink-gcp connector: the rows of an {@code INSERT} go to the
 * same Python writer the DataStream sink of that service runs.
 *
 * <p>A connector is a subclass naming its identifier (listed in the jar's factory services
 * file); its options come from the generated option list ({@link TableOptions}), and what they
 * mean is decided on the Python side ({@code pyflink_gcp.table}). Everything the planner can
 * check is checked here, when the statement is planned: unknown and missing keys (Flink's
 * helper), values of every kind and template placeholders ({@link TableOptions#validate}), a
 * {@code PRIMARY KEY} on a connector that cannot write updates, and {@code
 * python.metric.enabled}, without which the writer's pre-barrier flush cannot run.
 */
public abstract class GcpTableSinkFactory implements DynamicTableSinkFactory {

    /** The option that carries rows across checkpoints ({@link #checkCarry}). */
    static final String MAX_CARRY_TIME = "sink.max-carry-time";

    private final String identifier;

    protected GcpTableSinkFactory(String identifier) {
        this.identifier = identifier;
    }

    @Override
    public String factoryIdentifier() {
        return identifier;
    }

    private TableOptions options() {
        return TableOptions.of(identifier);
    }

    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return options().required();
    }

    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        return options().optional();
    }

    @Override
    public DynamicTableSink createDynamicTableSink(Context context) {
        FactoryUtil.createTableFactoryHelper(this, context).validate();
        TableOptions options = options();
        Map<String, String> values = new LinkedHashMap<>(context.getCatalogTable().getOptions());
        values.remove(FactoryUtil.CONNECTOR.key());
        RowType rowType = (RowType) context.getPhysicalRowDataType().getLogicalType();
        List<String> columns = rowType.getFieldNames();
        options.validate(values, columns);
        String name = context.getObjectIdentifier().getObjectName();
        List<String> primaryKey = new ArrayList<>();
        for (int index : context.getPrimaryKeyIndexes()) {
            primaryKey.add(columns.get(index));
        }
        if (!primaryKey.isEmpty() && !options.upserts()) {
            throw new ValidationException(
                    String.format(
                            "sink '%s': connector '%s' is insert-only and takes no PRIMARY KEY;"
                                    + " only %s write updates and deletes of a table with one.",
                            name, identifier, String.join(" and ", TableOptions.upsertConnectors())));
        }
        checkCarry(options, values, name, primaryKey);
        ReadableConfig config = context.getConfiguration();
        if (!config.get(PythonOptions.PYTHON_METRIC_ENABLED)) {
            throw new ValidationException(
                    String.format(
                            "sink '%s': python.metric.enabled=false disables the pre-barrier flush"
                                    + " hook pyflink-gcp relies on for at-least-once delivery;"
                                    + " enable it.",
                            name));
        }
        return new GcpTableSink(identifier, name, values, rowType, primaryKey, config, options);
    }

    /**
     * Refuses {@value #MAX_CARRY_TIME} where carried rows could be misplaced or could not wait:
     * on a table with a primary key (the carried rows are operator state, which a new
     * parallelism hands out without regard to keys, so a key's upserts could change subtask
     * and order), and with a write method that commits after the checkpoint (exactly once: it
     * commits every row of a checkpoint after it). The DataStream sinks refuse the same.
     */
    private void checkCarry(
            TableOptions options, Map<String, String> values, String name, List<String> primaryKey) {
        if (options.value(values, MAX_CARRY_TIME) == null) {
            return;
        }
        String why = null;
        if (!primaryKey.isEmpty()) {
            why = "on a table with a PRIMARY KEY: the carried rows are operator state, which a new"
                    + " parallelism hands out without regard to keys, so a key's upserts could"
                    + " change subtask and order";
        } else if (options.committerParallelism(values) >= 0) {
            why = "with an exactly-once write method: it commits every row of a checkpoint"
                    + " after it, so none can wait";
        }
        if (why != null) {
            throw new ValidationException(
                    String.format(
                            "sink '%s': option '%s' of connector '%s' is not available %s;"
                                    + " leave it unset.",
                            name, MAX_CARRY_TIME, identifier, why));
        }
    }
}

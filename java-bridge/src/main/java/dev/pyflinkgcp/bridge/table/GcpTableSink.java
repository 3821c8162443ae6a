package dev.pyflinkgcp.bridge.table;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import dev.pyflinkgcp.bridge.CheckpointMarkerProcessOperator;
import dev.pyflinkgcp.bridge.CommitterProcessOperator;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.core.memory.ManagedMemoryUseCase;
import org.apache.flink.python.PythonOptions;
import org.apache.flink.python.util.PythonConfigUtil;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.DataStreamSink;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunction;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.typeinfo.python.PickledByteArrayTypeInfo;
import org.apache.flink.table.connector.ChangelogMode;
import org.apache.flink.table.connector.ProviderContext;
import org.apache.flink.table.connector.sink.DataStreamSinkProvider;
import org.apache.flink.table.connector.sink.DynamicTableSink;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.functions.python.PythonEnv;
import org.apache.flink.table.runtime.typeutils.InternalTypeInfo;
import org.apache.flink.table.types.logical.RowType;

/**
 * The sink of a pyflink-gcp connector: the planner's rows go to the bridge's typed
 * checkpoint-marker operator running the Python writer, then to a discarding sink.
 *
 * <p>The operator is the one the DataStream sinks use on typed streams, so the writer flushes
 * before each checkpoint barrier (and at the end of input) exactly as there. Its configuration
 * is the table configuration's Python part (as the planner's own Python nodes take it: it
 * carries {@code python.executable}, the files and the job options the Python coders need), in
 * process mode, with the connector's bundle size and time. Its input type is the sink's
 * physical row type, so Python sees the DDL's column names, with the timestamp handling of
 * {@link TableRows}.
 */
final class GcpTableSink implements DynamicTableSink {

    /** {@code FlinkFnApi.UserDefinedDataStreamFunction.FunctionType.PROCESS}. */
    private static final int PROCESS = 0;

    private final String identifier;
    private final String name;
    private final Map<String, String> options;
    private final RowType rowType;
    private final List<String> primaryKey;
    private final ReadableConfig config;
    private final TableOptions specs;

    GcpTableSink(
            String identifier,
            String name,
            Map<String, String> options,
            RowType rowType,
            List<String> primaryKey,
            ReadableConfig config,
            TableOptions specs) {
        this.identifier = identifier;
        this.name = name;
        this.options = options;
        this.rowType = rowType;
        this.primaryKey = primaryKey;
        this.config = config;
        this.specs = specs;
    }

    /**
     * Insert-only unless the table declares a primary key (accepted by the factory only for a
     * connector that writes updates): then upserts, so the planner sends {@code INSERT} and
     * {@code UPDATE_AFTER} as upserts of the key's row and {@code DELETE} as its deletion, and
     * no {@code UPDATE_BEFORE}. An updating query into an insert-only table is rejected when it
     * is planned, with Flink's message.
     */
    @Override
    public ChangelogMode getChangelogMode(ChangelogMode requestedMode) {
        return primaryKey.isEmpty() ? ChangelogMode.insertOnly() : ChangelogMode.upsert();
    }

    @Override
    public SinkRuntimeProvider getSinkRuntimeProvider(Context context) {
        return new DataStreamSinkProvider() {
            @Override
            public DataStreamSink<?> consumeDataStream(
                    ProviderContext provider, DataStream<RowData> stream) {
                return consume(provider, stream);
            }
        };
    }

    private DataStreamSink<?> consume(ProviderContext provider, DataStream<RowData> stream) {
        JsonNode document = TableOptions.load();
        TableRows rows = new TableRows(rowType);
        String parallelism = specs.value(options, "sink.parallelism");
        int writers = parallelism == null ? stream.getParallelism() : Integer.parseInt(parallelism.trim());

        Configuration conf = new Configuration(PythonConfigUtil.extractPythonConfiguration(config));
        conf.set(PythonOptions.PYTHON_EXECUTION_MODE, "process");
        conf.set(
                PythonOptions.MAX_BUNDLE_SIZE,
                Integer.parseInt(specs.value(options, "sink.buffer-flush.max-rows").trim()));
        conf.set(
                PythonOptions.MAX_BUNDLE_TIME_MILLS,
                Math.max(1L, TableOptions.durationMillis(specs.value(options, "sink.buffer-flush.interval"))));

        TypeInformation<RowData> recordType = InternalTypeInfo.of(rows.declared());
        DataStream<?> input = stream;
        if (rows.needsConversion()) {
            SingleOutputStreamOperator<RowData> converted =
                    stream.map(rows.conversion(), recordType)
                            .name(name + ": Timestamps")
                            .setParallelism(writers);
            provider.generateUid("timestamps").ifPresent(converted::uid);
            input = converted;
        }

        byte[] payload = payload(document, rows, "writer");
        DataStreamPythonFunctionInfo function =
                new DataStreamPythonFunctionInfo(
                        new DataStreamPythonFunction(payload, new PythonEnv(PythonEnv.ExecType.PROCESS)),
                        PROCESS);
        TypeInformation<byte[]> pickled = PickledByteArrayTypeInfo.PICKLED_BYTE_ARRAY_TYPE_INFO;
        CheckpointMarkerProcessOperator<byte[]> operator =
                new CheckpointMarkerProcessOperator<>(
                        conf,
                        function,
                        recordType,
                        pickled,
                        "typed",
                        true,
                        document.get("non_retriable_marker").asText());
        // The operator takes Objects (its records are wrapped with the markers).
        @SuppressWarnings("unchecked")
        DataStream<Object> records = (DataStream<Object>) input;
        SingleOutputStreamOperator<byte[]> writer =
                records.transform(name + ": Writer", pickled, operator).setParallelism(writers);
        provider.generateUid("writer").ifPresent(writer::uid);
        if (conf.get(PythonOptions.USE_MANAGED_MEMORY)) {
            // Table jobs never pass PythonConfigUtil.configPythonOperator, which declares it for
            // DataStream jobs; without it the worker runs on unmanaged memory.
            writer.getTransformation()
                    .declareManagedMemoryUseCaseAtSlotScope(ManagedMemoryUseCase.PYTHON);
        }
        SingleOutputStreamOperator<byte[]> last = writer;
        int committers = specs.committerParallelism(options);
        if (committers >= 0) {
            last = committer(provider, writer, document, conf, pickled, payload(document, rows, "committer"),
                    committers == 0 ? writers : committers);
        }
        DataStreamSink<byte[]> sink =
                last.sinkTo(new DiscardingSink<>())
                        .name(name + ": Discard")
                        .setParallelism(last.getParallelism());
        provider.generateUid("discard").ifPresent(sink::uid);
        return sink;
    }

    private byte[] payload(JsonNode document, TableRows rows, String role) {
        return WriterPayload.pickle(
                document.get(role + "_module").asText(),
                document.get(role + "_name").asText(),
                identifier,
                options,
                rows.schemaJson(name, primaryKey));
    }

    /**
     * The bridge's committer operator after the writer, in a chain of its own (as the DataStream
     * sinks add it): it keeps each checkpoint's committables in its state and has the Python
     * committer publish them once the checkpoint completed.
     */
    private SingleOutputStreamOperator<byte[]> committer(
            ProviderContext provider,
            SingleOutputStreamOperator<byte[]> writer,
            JsonNode document,
            Configuration conf,
            TypeInformation<byte[]> pickled,
            byte[] payload,
            int parallelism) {
        boolean checkpointing =
                writer.getExecutionEnvironment().getCheckpointConfig().isCheckpointingEnabled()
                        || config.getOptional(CheckpointingOptions.CHECKPOINTING_INTERVAL).isPresent();
        DataStreamPythonFunctionInfo function =
                new DataStreamPythonFunctionInfo(
                        new DataStreamPythonFunction(payload, new PythonEnv(PythonEnv.ExecType.PROCESS)),
                        PROCESS);
        CommitterProcessOperator<byte[]> operator =
                new CommitterProcessOperator<>(
                        conf,
                        function,
                        pickled,
                        pickled,
                        document.get("commit_tag").asText(),
                        checkpointing,
                        document.get("non_retriable_marker").asText());
        SingleOutputStreamOperator<byte[]> committer =
                writer.transform(name + ": Committer", pickled, operator)
                        .setParallelism(parallelism)
                        .startNewChain();
        provider.generateUid("committer").ifPresent(committer::uid);
        if (conf.get(PythonOptions.USE_MANAGED_MEMORY)) {
            committer.getTransformation()
                    .declareManagedMemoryUseCaseAtSlotScope(ManagedMemoryUseCase.PYTHON);
        }
        return committer;
    }

    @Override
    public DynamicTableSink copy() {
        return new GcpTableSink(
                identifier,
                name,
                new LinkedHashMap<>(options),
                rowType,
                new ArrayList<>(primaryKey),
                config,
                specs);
    }

    @Override
    public String asSummaryString() {
        return identifier;
    }
}

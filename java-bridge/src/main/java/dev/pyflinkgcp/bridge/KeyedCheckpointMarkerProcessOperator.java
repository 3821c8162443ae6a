package dev.pyflinkgcp.bridge;

import java.util.Map;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.operators.python.process.ExternalPythonKeyedProcessOperator;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.StreamTask;
import org.apache.flink.types.Row;

/**
 * {@link CheckpointMarkerProcessOperator} for a writer on a keyed stream.
 *
 * <p>The keyed operator's input is the row {@code (key, value)}, so a marker is the row of the
 * last key this subtask received and the marker of {@link CheckpointMarkers}: a key that belongs
 * to this subtask, and a value the Python side can tell from a record. Before the first record
 * there is nothing to flush, and no marker is sent. Typed values go to Python as they are, and a
 * marker as the row {@code (key, null)} whose watermark says it is one ({@link
 * CheckpointMarkers#bareMarkerWatermark}).
 */
public class KeyedCheckpointMarkerProcessOperator<OUT> extends ExternalPythonKeyedProcessOperator<OUT> {

    private static final long serialVersionUID = 1L;

    private final CheckpointMarkers markers;

    private final NonRetriableErrors errors;

    private final BundleSettings bundle;

    /** One more lease on the slot's Python worker ({@link SlotWorkerLease}). */
    private transient SlotWorkerLease slotWorker;

    /** The lineage datasets the writer reported ({@link LineageState}). */
    private transient LineageState lineage;

    private transient Object lastKey;

    /**
     * @param inputTypeInfo the keyed stream's row {@code (key, value)}
     * @param tag the first item of a pickled marker
     * @param typedValues whether the values are typed: a marker is then the row {@code (key,
     *     null)} with a marker's watermark
     * @param nonRetriableMarker the line a Python error a restart cannot fix carries: such a
     *     failure ends the job without restarts ({@link NonRetriableErrors})
     */
    public KeyedCheckpointMarkerProcessOperator(
            Configuration config,
            DataStreamPythonFunctionInfo pythonFunctionInfo,
            RowTypeInfo inputTypeInfo,
            TypeInformation<OUT> outputTypeInfo,
            String tag,
            boolean typedValues,
            String nonRetriableMarker) {
        super(
                config,
                pythonFunctionInfo,
                inputTypeInfo,
                outputTypeInfo);
        this.markers = new CheckpointMarkers(tag, typedValues);
        this.errors = new NonRetriableErrors(nonRetriableMarker);
        this.bundle = new BundleSettings(config);
    }

    /** The writer's lineage elements stay here ({@link LineageState}); the rest passes. */
    @Override
    protected void setup(
            StreamTask<?, ?> containingTask,
            StreamConfig config,
            Output<StreamRecord<OUT>> output) {
        super.setup(
                containingTask,
                config,
                new LineageState.Capturing<>(
                        output, value -> lineage != null && lineage.capture(value)));
    }

    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        lineage = LineageState.initialize(context);
    }

    /** Python's writer learns here what it reported before a restore ({@link LineageState}). */
    @Override
    public Map<String, String> getInternalParameters() {
        Map<String, String> parameters = super.getInternalParameters();
        if (lineage != null) {
            parameters.put(LineageState.PARAMETER, lineage.parameter());
        }
        return parameters;
    }

    /** The writer's bundle size and time win over the job's ({@link BundleSettings}). */
    @Override
    public void open() throws Exception {
        bundle.restore(config);
        try {
            super.open();
        } catch (Exception e) {
            throw errors.classify(e);
        }
        slotWorker =
                SlotWorkerLease.take(
                        getContainingTask().getEnvironment().getMemoryManager(),
                        getOperatorName());
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        Row row = element.getValue();
        lastKey = row.getField(0);
        try {
            super.processElement(element);
        } catch (Exception e) {
            throw errors.classify(e);
        }
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        mark(markers.idBeforeBarrier(checkpointId));
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() throws Exception {
        mark(markers.idAtEndOfInput());
        super.endInput();
    }

    /**
     * Puts the marker of {@code id} into the input under the last key: a pickled value's as the
     * row {@code (key, pickled marker)}, a typed value's as {@code (key, null)} without a timestamp
     * and with the marker's watermark.
     */
    private void mark(Long id) throws Exception {
        if (id != null && lastKey != null) {
            try {
                if (markers.typed()) {
                    super.processElement(
                            Long.MIN_VALUE,
                            CheckpointMarkers.bareMarkerWatermark(id),
                            Row.of(lastKey, null));
                } else {
                    super.processElement(new StreamRecord<>(Row.of(lastKey, markers.pickled(id))));
                }
            } catch (Exception e) {
                throw errors.classify(e);
            }
        }
    }

    /**
     * Lets a flush a cancel interrupted end before the runner closes ({@link RunningFlush}): a
     * flush abandoned there can end the TaskManager. The slot's Python worker is then closed by
     * whoever releases it last, which this operator's extra lease makes a thread of ours ({@link
     * SlotWorkerLease}).
     */
    @Override
    public void close() throws Exception {
        SlotWorkerLease lease = slotWorker;
        slotWorker = null;
        SlotWorkerLease.close(this, getContainingTask(), getOperatorName(), lease, super::close);
    }

    /** Every Python failure surfaces at a bundle end: one a restart cannot fix ends the job. */
    @Override
    protected void invokeFinishBundle() throws Exception {
        try {
            super.invokeFinishBundle();
        } catch (Exception e) {
            throw errors.classify(e);
        }
    }
}

package dev.pyflinkgcp.bridge;

import java.util.Map;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.operators.python.process.ExternalPythonProcessOperator;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.StreamTask;

/**
 * The process-mode Python operator of a pyflink-gcp writer, telling the Python side which bundle
 * end is a checkpoint.
 *
 * <p>PyFlink ends a Python bundle at every checkpoint barrier, but also every N records and every
 * T milliseconds, and the Python side cannot tell these apart: a writer that must be durable at
 * each barrier has to wait for its writes at every bundle end. This operator puts a marker element
 * into the input just before the barrier's bundle end (and one at the end of input), so the
 * writer waits only there and lets writes stay in flight across ordinary bundle ends. What a
 * marker is, and when one is due, is {@link CheckpointMarkers}.
 *
 * <p>The operator must not be fused by PyFlink into the Python operator before it (fusion copies
 * it into a plain Python operator), so after a Python operator it heads a chain of its own.
 * Instead, when the job is executed, pyflink-gcp may build it with the plain Python functions
 * before the writer as the inputs of its function info, each passing markers on untouched, and
 * put it in the writer's transformation in their place ({@link WriterFusion}); markers, bundle
 * settings, error classification and the slot-worker lease are the same.
 *
 * <p>It also keeps, in its state, the lineage datasets the writer reported ({@link LineageState})
 * and the records it carries across checkpoints ({@link CarryState}), and hands them back to the
 * writer after a restore.
 */
public class CheckpointMarkerProcessOperator<OUT> extends ExternalPythonProcessOperator<Object, OUT> {

    private static final long serialVersionUID = 1L;

    private final CheckpointMarkers markers;

    private final NonRetriableErrors errors;

    private final BundleSettings bundle;

    /** One more lease on the slot's Python worker ({@link SlotWorkerLease}). */
    private transient SlotWorkerLease slotWorker;

    /** The lineage datasets the writer reported ({@link LineageState}). */
    private transient LineageState lineage;

    /** The records the writer carries across checkpoints ({@link CarryState}). */
    private transient CarryState carry;

    /**
     * @param inputTypeInfo the input stream's type: Python's pickled byte array, or any type when
     *     {@code typed}
     * @param tag the first item of a pickled marker
     * @param typed whether the records are typed: they then go to Python as they are, and a marker
     *     as an element without a value ({@link CheckpointMarkers#bareMarkerWatermark})
     * @param nonRetriableMarker the line a Python error a restart cannot fix carries: such a
     *     failure ends the job without restarts ({@link NonRetriableErrors})
     */
    @SuppressWarnings("unchecked")
    public CheckpointMarkerProcessOperator(
            Configuration config,
            DataStreamPythonFunctionInfo pythonFunctionInfo,
            TypeInformation<?> inputTypeInfo,
            TypeInformation<OUT> outputTypeInfo,
            String tag,
            boolean typed,
            String nonRetriableMarker) {
        super(
                config,
                pythonFunctionInfo,
                (TypeInformation<Object>) inputTypeInfo,
                outputTypeInfo);
        this.markers = new CheckpointMarkers(tag, typed);
        this.errors = new NonRetriableErrors(nonRetriableMarker);
        this.bundle = new BundleSettings(config);
    }

    /**
     * The writer's lineage and carried-records elements stay here ({@link LineageState}, {@link
     * CarryState}); the rest passes.
     */
    @Override
    protected void setup(
            StreamTask<?, ?> containingTask,
            StreamConfig config,
            Output<StreamRecord<OUT>> output) {
        super.setup(
                containingTask,
                config,
                new LineageState.Capturing<>(
                        output,
                        value ->
                                (lineage != null && lineage.capture(value))
                                        || (carry != null && carry.capture(value))));
    }

    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        lineage = LineageState.initialize(context);
        carry = CarryState.initialize(context);
    }

    /**
     * Python's writer learns here what it reported and carried before a restore ({@link
     * LineageState}, {@link CarryState}).
     */
    @Override
    public Map<String, String> getInternalParameters() {
        Map<String, String> parameters = super.getInternalParameters();
        if (lineage != null) {
            parameters.put(LineageState.PARAMETER, lineage.parameter());
        }
        if (carry != null) {
            parameters.put(CarryState.PARAMETER, carry.parameter());
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
        if (carry != null) {
            carry.restoredTaken();
        }
        slotWorker =
                SlotWorkerLease.take(
                        getContainingTask().getEnvironment().getMemoryManager(),
                        getOperatorName());
    }

    @Override
    public void processElement(StreamRecord<Object> element) throws Exception {
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
     * Puts the marker of {@code id} into the input: a pickled one as an element, a typed stream's
     * as an element without a value and without a timestamp whose watermark says it is a marker
     * (results the writer emits there go out without a timestamp, as a pickled marker's do).
     */
    private void mark(Long id) throws Exception {
        if (id != null) {
            try {
                if (markers.typed()) {
                    super.processElement(
                            Long.MIN_VALUE, CheckpointMarkers.bareMarkerWatermark(id), null);
                } else {
                    super.processElement(new StreamRecord<>(markers.pickled(id)));
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

package dev.pyflinkgcp.bridge;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.TreeMap;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.runtime.state.StateSnapshotContext;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.operators.python.process.ExternalPythonProcessOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;

/**
 * The commit half of an exactly-once pyflink-gcp sink: keeps the writer's committables in Flink
 * state and hands them to the Python committer only once their checkpoint completed.
 *
 * <p>The writer operator ({@link CheckpointMarkerProcessOperator}) makes its writes durable but
 * invisible at each checkpoint's marker and emits what must still be done to make them visible
 * (committables: opaque pickled Python objects, such as a BigQuery stream and the offset to
 * flush it to) as its output, before the barrier. This operator receives them; they never reach
 * Python on arrival. Flink's rules for a sink's two phases hold here:
 *
 * <ul>
 *   <li>Committables received before the barrier of checkpoint {@code n} belong to {@code n}; they
 *       are part of this operator's state from {@code n} on, until committed.
 *   <li>When checkpoint {@code n} completes, everything of checkpoints up to {@code n} is
 *       committed, including what an aborted or declined earlier checkpoint left; nothing is
 *       committed for a checkpoint that never completes.
 *   <li>After a restore, every restored committable is committed once when the operator opens
 *       (the restored checkpoint completed); with a different parallelism Flink splits the list
 *       state, so each still reaches exactly one subtask.
 *   <li>At the end of input the committables go with Flink's final checkpoint, which a finished
 *       task waits for; a job without checkpointing commits at the end of input instead.
 * </ul>
 *
 * <p>A commit sends the committables to Python as the elements they were, then the pickle of
 * {@code (tag, checkpoint id, restored)}, and waits for the bundle: the Python committer commits
 * everything it received at that element, and a failure fails the task (the committables are
 * still in the last checkpoint, and a commit is idempotent, so the restored job commits them
 * again). A commit a restart cannot fix ends the job ({@link NonRetriableErrors}).
 *
 * <p>The operator must head a chain of its own, so PyFlink does not fuse it into the writer.
 */
public class CommitterProcessOperator<OUT> extends ExternalPythonProcessOperator<byte[], OUT> {

    private static final long serialVersionUID = 1L;

    /** The checkpoint id a commit of restored committables carries when none is known. */
    public static final long UNKNOWN_CHECKPOINT = -2L;

    private final String tag;

    private final boolean checkpointing;

    private final NonRetriableErrors errors;

    private final BundleSettings bundle;

    /** Received since the last snapshot: they belong to the next checkpoint. */
    private transient List<byte[]> received;

    /** Snapshotted, not yet committed, by checkpoint id. */
    private transient NavigableMap<Long, List<byte[]>> pending;

    private transient List<byte[]> restored;

    private transient long restoredCheckpointId;

    private transient ListState<Tuple2<Long, byte[]>> state;

    /**
     * @param inputTypeInfo Python's pickled byte array: the committables the writer emits
     * @param tag the first item of a commit element, chosen by the Python side
     * @param checkpointing whether the job checkpoints; without, the end of input commits
     * @param nonRetriableMarker the line a Python error a restart cannot fix carries
     */
    public CommitterProcessOperator(
            Configuration config,
            DataStreamPythonFunctionInfo pythonFunctionInfo,
            TypeInformation<byte[]> inputTypeInfo,
            TypeInformation<OUT> outputTypeInfo,
            String tag,
            boolean checkpointing,
            String nonRetriableMarker) {
        super(config, pythonFunctionInfo, inputTypeInfo, outputTypeInfo);
        this.tag = tag;
        this.checkpointing = checkpointing;
        this.errors = new NonRetriableErrors(nonRetriableMarker);
        this.bundle = new BundleSettings(config);
    }

    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        received = new ArrayList<>();
        pending = new TreeMap<>();
        restored = new ArrayList<>();
        state =
                context.getOperatorStateStore()
                        .getListState(
                                new ListStateDescriptor<>(
                                        "pyflink-gcp-committables",
                                        Types.TUPLE(
                                                Types.LONG,
                                                Types.PRIMITIVE_ARRAY(Types.BYTE))));
        restoredCheckpointId = context.getRestoredCheckpointId().orElse(UNKNOWN_CHECKPOINT);
        if (context.isRestored()) {
            for (Tuple2<Long, byte[]> entry : state.get()) {
                restored.add(entry.f1);
            }
        }
    }

    @Override
    public void open() throws Exception {
        bundle.restore(config);
        super.open();
        if (!restored.isEmpty()) {
            // No checkpoint can be taken before this returns: a failure here restores them again.
            commit(restoredCheckpointId, restored, true);
            restored.clear();
        }
    }

    /** A committable from the writer: kept, not sent to Python until its checkpoint completed. */
    @Override
    public void processElement(StreamRecord<byte[]> element) throws Exception {
        received.add(element.getValue());
    }

    @Override
    public void snapshotState(StateSnapshotContext context) throws Exception {
        super.snapshotState(context);
        if (!received.isEmpty()) {
            pending.computeIfAbsent(context.getCheckpointId(), id -> new ArrayList<>())
                    .addAll(received);
            received.clear();
        }
        List<Tuple2<Long, byte[]>> entries = new ArrayList<>();
        for (Map.Entry<Long, List<byte[]>> checkpoint : pending.entrySet()) {
            for (byte[] committable : checkpoint.getValue()) {
                entries.add(Tuple2.of(checkpoint.getKey(), committable));
            }
        }
        state.update(entries);
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) throws Exception {
        super.notifyCheckpointComplete(checkpointId);
        NavigableMap<Long, List<byte[]>> due = pending.headMap(checkpointId, true);
        if (due.isEmpty()) {
            return;
        }
        List<byte[]> committables = new ArrayList<>();
        for (List<byte[]> checkpoint : due.values()) {
            committables.addAll(checkpoint);
        }
        commit(checkpointId, committables, false);
        due.clear();
    }

    @Override
    public void endInput() throws Exception {
        super.endInput();
        if (!checkpointing && !received.isEmpty()) {
            commit(CheckpointMarkers.END_OF_INPUT, received, false);
            received.clear();
        }
    }

    /** Hands {@code committables} to the Python committer and waits until it committed them. */
    private void commit(long checkpointId, List<byte[]> committables, boolean wasRestored)
            throws Exception {
        try {
            for (byte[] committable : committables) {
                super.processElement(new StreamRecord<>(committable));
            }
            super.processElement(
                    new StreamRecord<>(commitElement(tag, checkpointId, wasRestored)));
            invokeFinishBundle();
        } catch (Exception e) {
            throw errors.classify(e);
        }
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

    /** Pickle protocol 2 of {@code (tag, id, restored)}: BINUNICODE, LONG1, NEWTRUE/NEWFALSE, TUPLE3. */
    static byte[] commitElement(String tag, long checkpointId, boolean wasRestored) {
        byte[] pair = CheckpointMarkers.pickle(tag, checkpointId);
        // (tag, id) ends with TUPLE2 and STOP: put the flag before a TUPLE3 instead.
        byte[] out = new byte[pair.length + 1];
        System.arraycopy(pair, 0, out, 0, pair.length - 2);
        out[pair.length - 2] = (byte) (wasRestored ? 0x88 : 0x89);
        out[pair.length - 1] = (byte) 0x87;
        out[pair.length] = '.';
        return out;
    }
}

package dev.pyflinkgcp.bridge;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.BooleanSupplier;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.SavepointType;
import org.apache.flink.runtime.checkpoint.SnapshotType;
import org.apache.flink.runtime.state.CheckpointStreamFactory;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.runtime.state.StateSnapshotContext;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.graph.StreamConfig;
import org.apache.flink.streaming.api.operators.OperatorSnapshotFutures;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.operators.python.process.ExternalPythonProcessOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.tasks.StreamTask;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The commit half of an exactly-once pyflink-gcp sink: keeps the writer's committables in Flink
 * state and hands them to the Python committer only once their checkpoint completed.
 *
 * <p>The writer operator ({@link CheckpointMarkerProcessOperator}) makes its writes durable but
 * invisible at each checkpoint's marker and emits what must still be done to make them visible
 * (committables: opaque pickled Python objects, such as a BigQuery stream and the offset to
 * flush it to) as its output, before the barrier. This operator receives them; they never reach
 * Python on arrival. The rules, which hold for aligned and unaligned checkpoints alike:
 *
 * <ul>
 *   <li><b>Commit sets.</b> What arrived since the previous snapshot is fixed as one set when the
 *       snapshot of checkpoint {@code n} is taken, and stored under {@code n}. A set is never
 *       merged with another, so a commit repeated after a failover hands Python exactly the
 *       same set. Under unaligned checkpoints a committable the barrier overtook arrives after
 *       the snapshot (or, after a restore, from the channel state) and joins the next set:
 *       nothing depends on it arriving before the barrier.
 *   <li>When checkpoint {@code n} completes, every stored set up to {@code n} is committed, one
 *       Python commit each, in checkpoint order, including what an aborted or declined earlier
 *       checkpoint left; nothing is committed for a checkpoint that never completes.
 *   <li>After a restore, every restored set is committed once when the operator opens (the
 *       restored checkpoint completed); with a different parallelism Flink splits the list
 *       state, so each committable still reaches exactly one subtask, in a set of its own key.
 *   <li>What Python returns from a commit is kept: it joins the next set, so work that is not
 *       due yet (files waiting for their load) is in every later checkpoint until done.
 *   <li>At the end of input the committables go with Flink's final checkpoint (the first
 *       snapshotted after the end of input), which a finished task waits for; a job without
 *       checkpointing (known when the task runs, not when the job was built) commits at the end
 *       of input instead. After the sets of that checkpoint, or of a stop-with-savepoint's
 *       savepoint, one more commit is final: it hands Python what the sets' commits kept, and
 *       tells it that nothing follows, so Python ends what it has going there and keeps nothing.
 *   <li><b>Results after the operators finished.</b> A commit that runs after this operator's
 *       {@code finish()} (the final checkpoint's, a stop-with-savepoint's, and any checkpoint
 *       notified after the end of input) has no one to emit to: Flink sent the end of data
 *       downstream when the operators finished, and a finished operator refuses records (a
 *       sink writer fails its task). Such a commit carries {@link #MODE_AFTER_FINISH}, so Python
 *       logs its write results instead of emitting them; a side output that comes anyway is
 *       dropped here, with a warning. The rows are committed all the same.
 * </ul>
 *
 * <p>A commit sends the set to Python as the elements they were, then the pickle of {@code
 * (tag, checkpoint id, mode)}, and waits for the bundle: the Python committer commits everything
 * it received at that element, and a failure fails the task (the set is still in the last
 * checkpoint, and a commit is idempotent, so the restored job commits it again). A commit a
 * restart cannot fix ends the job ({@link NonRetriableErrors}).
 *
 * <p>The operator must head a chain of its own, so PyFlink does not fuse it into the writer.
 */
public class CommitterProcessOperator<OUT> extends ExternalPythonProcessOperator<byte[], OUT> {

    private static final long serialVersionUID = 1L;

    /** The checkpoint id a commit of restored committables carries when none is known. */
    public static final long UNKNOWN_CHECKPOINT = -2L;

    /** A set of a completed checkpoint. */
    static final int MODE_COMPLETED = 0;

    /** A set from a restored checkpoint: its writers are gone. */
    static final int MODE_RESTORED = 1;

    /** The last commit: the end of input or a stop-with-savepoint; nothing may be kept. */
    static final int MODE_FINAL = 2;

    /**
     * Added to the mode of a commit after the operators finished: its write results cannot
     * reach any operator downstream.
     */
    static final int MODE_AFTER_FINISH = 4;

    private static final Logger LOG = LoggerFactory.getLogger(CommitterProcessOperator.class);

    private final String tag;

    private final boolean checkpointing;

    private final NonRetriableErrors errors;

    private final BundleSettings bundle;

    /** One more lease on the slot's Python worker ({@link SlotWorkerLease}). */
    private transient SlotWorkerLease slotWorker;

    /** Received since the last snapshot: the next checkpoint's set. */
    private transient List<byte[]> received;

    /** Snapshotted sets, not yet committed, by checkpoint id. */
    private transient NavigableMap<Long, List<byte[]>> pending;

    /** Restored sets by the checkpoint they were stored under, committed when opening. */
    private transient NavigableMap<Long, List<byte[]>> restored;

    /** What Python returned from the commit running now: kept, for the next set. */
    private transient List<byte[]> kept;

    /** The ids of stop-with-savepoint savepoints snapshotted and not yet notified. */
    private transient Set<Long> stopSavepoints;

    private transient long restoredCheckpointId;

    private transient boolean inputEnded;

    /** The first checkpoint snapshotted after the end of input; -1 before. */
    private transient long finalSnapshot;

    /** Whether the operators finished: downstream has its end of data, takes no record. */
    private transient boolean finished;

    /** Side-output records (write results) dropped because the operators had finished. */
    private transient int dropped;

    private transient ListState<Tuple2<Long, byte[]>> state;

    /**
     * @param inputTypeInfo Python's pickled byte array: the committables the writer emits
     * @param tag the first item of a commit element, chosen by the Python side
     * @param checkpointing whether the job checkpointed when it was built (the task checks the
     *     job's configuration again when it runs)
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

    /**
     * Python's output is what it keeps: captured here, never sent downstream. Its side output
     * (write results) goes downstream until the operators finished, and is dropped after.
     */
    @Override
    protected void setup(
            StreamTask<?, ?> containingTask,
            StreamConfig config,
            Output<StreamRecord<OUT>> output) {
        BooleanSupplier open = () -> !finished;
        super.setup(
                containingTask, config, new KeepingOutput<>(output, this::keep, open, this::drop));
    }

    private void drop() {
        dropped++;
    }

    private void keep(byte[] committable) {
        kept.add(committable);
    }

    @Override
    public void initializeState(StateInitializationContext context) throws Exception {
        super.initializeState(context);
        received = new ArrayList<>();
        pending = new TreeMap<>();
        restored = new TreeMap<>();
        kept = new ArrayList<>();
        stopSavepoints = new HashSet<>();
        finalSnapshot = -1L;
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
                restored.computeIfAbsent(entry.f0, id -> new ArrayList<>()).add(entry.f1);
            }
        }
    }

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
        // No checkpoint can be taken before this returns: a failure here restores them again.
        for (List<byte[]> set : restored.values()) {
            commit(restoredCheckpointId, set, MODE_RESTORED);
        }
        restored.clear();
    }

    /** A committable from the writer: kept, not sent to Python until its checkpoint completed. */
    @Override
    public void processElement(StreamRecord<byte[]> element) throws Exception {
        received.add(element.getValue());
    }

    /** Notes a stop-with-savepoint: its commit is the last one. */
    @Override
    public OperatorSnapshotFutures snapshotState(
            long checkpointId,
            long timestamp,
            CheckpointOptions checkpointOptions,
            CheckpointStreamFactory factory)
            throws Exception {
        SnapshotType type = checkpointOptions.getCheckpointType();
        if (type instanceof SavepointType && ((SavepointType) type).isSynchronous()) {
            stopSavepoints.add(checkpointId);
        }
        return super.snapshotState(checkpointId, timestamp, checkpointOptions, factory);
    }

    @Override
    public void snapshotState(StateSnapshotContext context) throws Exception {
        super.snapshotState(context);
        if (inputEnded && finalSnapshot < 0) {
            // Everything arrived before the end of input: this checkpoint holds all of it.
            finalSnapshot = context.getCheckpointId();
        }
        if (!received.isEmpty()) {
            pending.computeIfAbsent(context.getCheckpointId(), id -> new ArrayList<>())
                    .addAll(received);
            received = new ArrayList<>();
        }
        List<Tuple2<Long, byte[]>> entries = new ArrayList<>();
        for (Map.Entry<Long, List<byte[]>> set : pending.entrySet()) {
            for (byte[] committable : set.getValue()) {
                entries.add(Tuple2.of(set.getKey(), committable));
            }
        }
        state.update(entries);
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) throws Exception {
        super.notifyCheckpointComplete(checkpointId);
        boolean last =
                (finalSnapshot >= 0 && checkpointId >= finalSnapshot)
                        | stopSavepoints.remove(checkpointId);
        stopSavepoints.removeIf(id -> id < checkpointId);
        NavigableMap<Long, List<byte[]>> due = pending.headMap(checkpointId, true);
        while (!due.isEmpty()) {
            Map.Entry<Long, List<byte[]>> set = due.firstEntry();
            commit(set.getKey(), set.getValue(), MODE_COMPLETED);
            due.remove(set.getKey());
        }
        if (last) {
            // The last commit: what the sets' commits kept, and the word that nothing follows
            // (a committer ends what it has going only then, not in a set a later one goes on).
            List<byte[]> kept = received;
            received = new ArrayList<>();
            commit(checkpointId, kept, MODE_FINAL);
        }
    }

    /**
     * After this, Flink sends the end of data downstream: a later commit's results have no one
     * to go to ({@link #MODE_AFTER_FINISH}).
     */
    @Override
    public void finish() throws Exception {
        super.finish();
        finished = true;
    }

    @Override
    public void endInput() throws Exception {
        super.endInput();
        inputEnded = true;
        if (!checkpointing() && !received.isEmpty()) {
            List<byte[]> set = received;
            received = new ArrayList<>();
            commit(CheckpointMarkers.END_OF_INPUT, set, MODE_FINAL);
        }
    }

    /**
     * Whether the job checkpoints, read from the running job's configuration: a job that enabled
     * checkpointing after the sink was added still commits with its final checkpoint.
     */
    private boolean checkpointing() {
        if (checkpointing) {
            return true;
        }
        Configuration job = getContainingTask().getEnvironment().getJobConfiguration();
        Duration interval =
                job.getOptional(CheckpointingOptions.CHECKPOINTING_INTERVAL).orElse(null);
        return interval != null && !interval.isZero() && !interval.isNegative();
    }

    /**
     * Hands one set to the Python committer and waits until it committed it; what Python keeps
     * joins the next set.
     */
    private void commit(long checkpointId, List<byte[]> committables, int mode)
            throws Exception {
        kept.clear();
        dropped = 0;
        int sent = finished ? mode | MODE_AFTER_FINISH : mode;
        try {
            for (byte[] committable : committables) {
                super.processElement(new StreamRecord<>(committable));
            }
            super.processElement(new StreamRecord<>(commitElement(tag, checkpointId, sent)));
            invokeFinishBundle();
        } catch (Exception e) {
            throw errors.classify(e);
        }
        if (dropped > 0) {
            LOG.warn(
                    "{}: dropped {} write results of the commit of checkpoint {}: it ran after the"
                            + " operators finished, when no operator downstream takes a record",
                    getOperatorName(),
                    dropped,
                    checkpointId);
        }
        if (!kept.isEmpty()) {
            if (mode == MODE_FINAL) {
                LOG.warn(
                        "{}: the committer kept {} committables at a final commit (checkpoint"
                                + " {}); they stay in this operator's state",
                        getOperatorName(),
                        kept.size(),
                        checkpointId);
            }
            received.addAll(kept);
            kept.clear();
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

    /** Pickle protocol 2 of {@code (tag, id, mode)}: BINUNICODE, LONG1, BININT1, TUPLE3. */
    static byte[] commitElement(String tag, long checkpointId, int mode) {
        byte[] pair = CheckpointMarkers.pickle(tag, checkpointId);
        // (tag, id) ends with TUPLE2 and STOP: put the mode before a TUPLE3 instead.
        byte[] out = new byte[pair.length + 2];
        System.arraycopy(pair, 0, out, 0, pair.length - 2);
        out[pair.length - 2] = 'K';
        out[pair.length - 1] = (byte) mode;
        out[pair.length] = (byte) 0x87;
        out[pair.length + 1] = '.';
        return out;
    }
}

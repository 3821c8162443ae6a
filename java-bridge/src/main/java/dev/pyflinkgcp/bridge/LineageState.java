package dev.pyflinkgcp.bridge;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Predicate;

import org.apache.flink.api.common.state.BroadcastState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.typeinfo.BasicTypeInfo;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.runtime.state.StateInitializationContext;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;

/**
 * The lineage datasets a writer subtask reported, kept in its marker operator's state so that a
 * restored subtask does not report them again.
 *
 * <p>The Python writer reports each dataset it starts writing to once per subtask ({@code
 * pyflink_gcp.core.lineage}). At each checkpoint marker it hands the operator the datasets it
 * reported since the previous marker as one element of its output: the pickle of {@code (TAG,
 * keys, limit reached)}. The operator takes that element out of its output ({@link #capture}) and
 * keeps it as it is; only Python reads it. The marker comes before the barrier, so the snapshot
 * holds every dataset reported before it. A restored operator hands the elements back when the
 * writer opens, as the internal parameter {@link #PARAMETER} (the elements base64-encoded,
 * comma-separated), and Python seeds its reporter with them. The parameter is there, empty, on a
 * first start too: it tells Python the operator keeps the state, and Python emits no element
 * without it (under PyFlink's own operator).
 *
 * <p>The state is Flink's broadcast state: each subtask snapshots its own copy. Restored with
 * the same parallelism, each subtask gets its own; with another, subtask {@code i} gets old
 * subtask {@code i % old parallelism}'s (Flink's rule for broadcast state), so it does not report
 * what that subtask reported, and may report again what another reported. Each element names at
 * least one dataset or that the bound was reached, and Python reports at most its bound, so a
 * subtask keeps at most {@code max_lineage_datasets + 1} elements.
 */
final class LineageState {

    /** The first item of the element Python hands over (its {@code LINEAGE_STATE_TAG}). */
    static final String TAG = "\u0000pyflink-gcp:lineage";

    /** The internal parameter (a job parameter to Python) with the restored elements. */
    static final String PARAMETER = "pyflink-gcp.lineage.reported";

    private static final MapStateDescriptor<Integer, byte[]> DESCRIPTOR =
            new MapStateDescriptor<>(
                    "pyflink-gcp-lineage",
                    BasicTypeInfo.INT_TYPE_INFO,
                    PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO);

    private static final byte[] TAG_BYTES = TAG.getBytes(StandardCharsets.UTF_8);

    private final BroadcastState<Integer, byte[]> state;

    /** The elements restored, in the order they were kept. */
    private final List<byte[]> restored;

    /** The key of the next element kept. */
    private int next;

    private LineageState(BroadcastState<Integer, byte[]> state, List<byte[]> restored, int next) {
        this.state = state;
        this.restored = restored;
        this.next = next;
    }

    /** The operator's lineage state, with what a restore brought. */
    static LineageState initialize(StateInitializationContext context) throws Exception {
        BroadcastState<Integer, byte[]> state =
                context.getOperatorStateStore().getBroadcastState(DESCRIPTOR);
        TreeMap<Integer, byte[]> byKey = new TreeMap<>();
        for (Map.Entry<Integer, byte[]> entry : state.entries()) {
            byKey.put(entry.getKey(), entry.getValue());
        }
        int next = byKey.isEmpty() ? 0 : byKey.lastKey() + 1;
        return new LineageState(state, new ArrayList<>(byKey.values()), next);
    }

    /** The value of {@link #PARAMETER}: the restored elements, base64, comma-separated. */
    String parameter() {
        return StateParameter.of(restored);
    }

    /** Keeps {@code value} when it is Python's lineage element; whether it was one. */
    boolean capture(Object value) {
        if (!(value instanceof byte[]) || !isElement((byte[]) value)) {
            return false;
        }
        try {
            state.put(next, (byte[]) value);
        } catch (Exception e) {
            throw new IllegalStateException("could not keep the writer's lineage state", e);
        }
        next++;
        return true;
    }

    /**
     * Whether {@code pickle} is the pickle of a tuple whose first item is {@link #TAG}: after the
     * optional PROTO and FRAME opcodes, the tag as SHORT_BINUNICODE or BINUNICODE. A committable
     * (a Python object) starts with its class's module name instead.
     */
    static boolean isElement(byte[] pickle) {
        int at = 0;
        if (pickle.length >= 2 && (pickle[0] & 0xff) == 0x80) {
            at = 2;
        }
        if (pickle.length > at && (pickle[at] & 0xff) == 0x95) {
            at += 9;
        }
        if (pickle.length <= at) {
            return false;
        }
        int opcode = pickle[at] & 0xff;
        if (opcode == 0x8c) {
            if (pickle.length <= at + 1 || (pickle[at + 1] & 0xff) != TAG_BYTES.length) {
                return false;
            }
            at += 2;
        } else if (opcode == 'X') {
            if (pickle.length <= at + 4 || littleEndianInt(pickle, at + 1) != TAG_BYTES.length) {
                return false;
            }
            at += 5;
        } else {
            return false;
        }
        if (pickle.length < at + TAG_BYTES.length) {
            return false;
        }
        for (int i = 0; i < TAG_BYTES.length; i++) {
            if (pickle[at + i] != TAG_BYTES[i]) {
                return false;
            }
        }
        return true;
    }

    private static int littleEndianInt(byte[] bytes, int at) {
        return (bytes[at] & 0xff)
                | (bytes[at + 1] & 0xff) << 8
                | (bytes[at + 2] & 0xff) << 16
                | (bytes[at + 3] & 0xff) << 24;
    }

    /**
     * A marker operator's output: records {@code taken} accepts (the lineage elements) stay in the
     * operator; everything else passes.
     */
    static final class Capturing<OUT> extends ForwardingOutput<OUT> {

        private final Predicate<Object> taken;

        Capturing(Output<StreamRecord<OUT>> downstream, Predicate<Object> taken) {
            super(downstream);
            this.taken = taken;
        }

        @Override
        public void collect(StreamRecord<OUT> record) {
            if (!taken.test(record.getValue())) {
                downstream.collect(record);
            }
        }
    }
}

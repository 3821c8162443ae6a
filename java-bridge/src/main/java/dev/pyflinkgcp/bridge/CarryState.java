package dev.pyflinkgcp.bridge;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.runtime.state.StateInitializationContext;

/**
 * The records a writer subtask carries across checkpoints, kept in its marker operator's state
 * instead of sent before each barrier ({@code pyflink_gcp.core.carry}).
 *
 * <p>At a checkpoint marker the Python writer hands the operator one element of its output: a
 * Python {@code bytes} object (so the element is that object's pickle) starting with {@link #TAG},
 * then a chunk id (8 bytes, -1 for none), the count (4 bytes) and ids (8 bytes each) of chunks to
 * release, and the new chunk's pickle. The operator takes the element out of its output ({@link
 * #capture}), drops the released chunks and keeps the new one; only Python reads a chunk. The
 * marker comes before the barrier, so the snapshot holds every chunk the writer still needs.
 *
 * <p>A restored operator hands the chunks back when the writer opens, as the internal parameter
 * {@link #PARAMETER} (each chunk's id and pickle, base64, comma-separated), and starts with no
 * chunk: the writer carries the restored records as records of its own and hands them over again
 * at its first marker. The state is Flink's operator list state, redistributed on a new
 * parallelism so that each chunk goes to exactly one subtask: nothing is lost or doubled.
 */
final class CarryState {

    /** The bytes a carried-records element starts with (Python's {@code CARRY_STATE_TAG}). */
    static final byte[] TAG = "\u0000pyflink-gcp:carry\u0000".getBytes(StandardCharsets.UTF_8);

    /** The internal parameter (a job parameter to Python) with the restored chunks. */
    static final String PARAMETER = "pyflink-gcp.carry.restored";

    private static final ListStateDescriptor<byte[]> DESCRIPTOR =
            new ListStateDescriptor<>(
                    "pyflink-gcp-carry", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO);

    private final ListState<byte[]> state;

    /** The chunks restored: each its id (8 bytes) and pickle. */
    private final List<byte[]> restored;

    /** The chunks kept now, by id: each its id (8 bytes) and pickle. */
    private final Map<Long, byte[]> kept = new LinkedHashMap<>();

    private CarryState(ListState<byte[]> state, List<byte[]> restored) {
        this.state = state;
        this.restored = restored;
    }

    /** The operator's carry state, with what a restore brought; the state starts empty. */
    static CarryState initialize(StateInitializationContext context) throws Exception {
        ListState<byte[]> state = context.getOperatorStateStore().getListState(DESCRIPTOR);
        List<byte[]> restored = new ArrayList<>();
        Iterable<byte[]> entries = state.get();
        if (entries != null) {
            for (byte[] entry : entries) {
                restored.add(entry);
            }
        }
        state.clear();
        return new CarryState(state, restored);
    }

    /** The value of {@link #PARAMETER}: the restored chunks, base64, comma-separated. */
    String parameter() {
        return StateParameter.of(restored);
    }

    /** Releases the restored chunks once the writer took them (it opened). */
    void restoredTaken() {
        restored.clear();
    }

    /** Keeps what {@code value} says when it is Python's carried-records element; whether it was. */
    boolean capture(Object value) {
        if (!(value instanceof byte[])) {
            return false;
        }
        ByteBuffer element = pickledBytes((byte[]) value);
        if (element == null || !startsWithTag(element)) {
            return false;
        }
        element.position(element.position() + TAG.length);
        long chunk = element.getLong();
        int released = element.getInt();
        for (int i = 0; i < released; i++) {
            kept.remove(element.getLong());
        }
        if (chunk >= 0) {
            ByteBuffer entry = ByteBuffer.allocate(8 + element.remaining());
            entry.putLong(chunk);
            entry.put(element);
            kept.put(chunk, entry.array());
        }
        try {
            state.update(new ArrayList<>(kept.values()));
        } catch (Exception e) {
            throw new IllegalStateException("could not keep the writer's carried records", e);
        }
        return true;
    }

    private static boolean startsWithTag(ByteBuffer element) {
        if (element.remaining() < TAG.length + 12) {
            return false;
        }
        int at = element.position();
        for (int i = 0; i < TAG.length; i++) {
            if (element.get(at + i) != TAG[i]) {
                return false;
            }
        }
        return true;
    }

    /**
     * The content of a pickled Python {@code bytes} object, or null when {@code pickle} is not
     * one: after the optional PROTO and FRAME opcodes, SHORT_BINBYTES, BINBYTES or BINBYTES8 with
     * its length. A large object is written outside any frame, so the frame may be absent.
     */
    static ByteBuffer pickledBytes(byte[] pickle) {
        ByteBuffer in = ByteBuffer.wrap(pickle).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        if (in.remaining() >= 2 && (in.get(0) & 0xff) == 0x80) {
            in.position(2);
        }
        if (in.remaining() >= 9 && (in.get(in.position()) & 0xff) == 0x95) {
            in.position(in.position() + 9);
        }
        if (!in.hasRemaining()) {
            return null;
        }
        int opcode = in.get() & 0xff;
        long length;
        if (opcode == 'C' && in.remaining() >= 1) {
            length = in.get() & 0xff;
        } else if (opcode == 'B' && in.remaining() >= 4) {
            length = in.getInt() & 0xffffffffL;
        } else if (opcode == 0x8e && in.remaining() >= 8) {
            length = in.getLong();
        } else {
            return null;
        }
        if (length < 0 || length > in.remaining()) {
            return null;
        }
        ByteBuffer content = in.slice();
        content.limit((int) length);
        return content.order(java.nio.ByteOrder.BIG_ENDIAN);
    }
}

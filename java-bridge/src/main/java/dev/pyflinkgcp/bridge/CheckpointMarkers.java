package dev.pyflinkgcp.bridge;

import java.io.ByteArrayOutputStream;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.types.Row;

/**
 * What a marker operator puts into a writer's input, and when: the part the plain and the keyed
 * operator share.
 *
 * <p>A marker goes in just before each checkpoint barrier and once at the end of input. After the
 * end of input no record follows, so no later barrier (the final checkpoint) needs one; this rule
 * lives here only.
 *
 * <p>What a marker is depends on the records. A stream of pickled Python objects takes the pickle
 * of {@code (tag, id)}, which the Python side tells from any record by its tag. A typed stream
 * (records that are not pickled Python objects, such as {@code Types.STRING()} or a row type)
 * cannot carry a marker as a value of its own type, so every record goes to Python wrapped in the
 * row {@code (null, record)} and a marker is the row {@code (id, null)}; the record keeps its own
 * type inside the row ({@link #wrappedType}), so Python receives what it would have unwrapped.
 */
public final class CheckpointMarkers implements Serializable {

    private static final long serialVersionUID = 1L;

    /** The id a marker carries when the input has ended. */
    public static final long END_OF_INPUT = -1L;

    private final String tag;
    private final boolean typed;

    /** Set once the end-of-input marker went out: no record follows, so no marker is needed. */
    private transient boolean inputEnded;

    /**
     * @param tag the first item of a pickled marker, chosen by the Python side
     * @param typed whether the records are typed and go to Python wrapped
     */
    public CheckpointMarkers(String tag, boolean typed) {
        this.tag = tag;
        this.typed = typed;
    }

    /** Whether records go to Python wrapped in the row {@code (null, record)}. */
    public boolean typed() {
        return typed;
    }

    /** The marker due before the barrier of {@code checkpointId}, or null once the input ended. */
    public Object beforeBarrier(long checkpointId) {
        return inputEnded ? null : marker(checkpointId);
    }

    /** The end-of-input marker, or null when it already went out. */
    public Object atEndOfInput() {
        if (inputEnded) {
            return null;
        }
        inputEnded = true;
        return marker(END_OF_INPUT);
    }

    private Object marker(long id) {
        return typed ? Row.of(id, null) : pickle(tag, id);
    }

    /** A typed record as Python takes it: the row {@code (null, record)}. */
    public static Row wrap(Object record) {
        return Row.of(null, record);
    }

    /** The row {@code (marker: BIGINT, record: recordType)} that carries records and markers. */
    public static RowTypeInfo wrappedType(TypeInformation<?> recordType) {
        return new RowTypeInfo(
                new TypeInformation<?>[] {Types.LONG, recordType}, new String[] {"marker", "record"});
    }

    /** Pickle protocol 2 of {@code (tag, id)}: BINUNICODE, LONG1 (8 bytes), TUPLE2, STOP. */
    public static byte[] pickle(String tag, long id) {
        byte[] text = tag.getBytes(StandardCharsets.UTF_8);
        ByteArrayOutputStream out = new ByteArrayOutputStream(text.length + 20);
        out.write(0x80);
        out.write(2);
        out.write('X');
        writeLittleEndian(out, text.length, 4);
        out.write(text, 0, text.length);
        out.write(0x8a);
        out.write(8);
        writeLittleEndian(out, id, 8);
        out.write(0x86);
        out.write('.');
        return out.toByteArray();
    }

    private static void writeLittleEndian(ByteArrayOutputStream out, long value, int bytes) {
        for (int i = 0; i < bytes; i++) {
            out.write((int) (value >>> (8 * i)) & 0xff);
        }
    }
}

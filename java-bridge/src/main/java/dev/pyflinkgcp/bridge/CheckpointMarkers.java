package dev.pyflinkgcp.bridge;

import java.io.ByteArrayOutputStream;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;

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
 * cannot carry a marker as a value of its own type, so its records go as they are and a marker
 * is an element without a value whose watermark field says it is one ({@link
 * #bareMarkerWatermark}): PyFlink hands every element to Python as the row {@code (timestamp,
 * watermark, value)}, and Python reads the watermark only for an element without a value. No
 * record is wrapped, so Python decodes each as it would without markers.
 */
public final class CheckpointMarkers implements Serializable {

    private static final long serialVersionUID = 1L;

    /** The id a marker carries when the input has ended. */
    public static final long END_OF_INPUT = -1L;

    /**
     * The watermark of a bare marker of id 0: -2^62 milliseconds, about 146 million years before
     * 1970, which no stream's watermark reaches (Flink's watermarks are {@code Long.MIN_VALUE}
     * before the first, then event times). Python's {@code BARE_MARKER_WATERMARK} is the same.
     */
    public static final long BARE_MARKER_WATERMARK = Long.MIN_VALUE / 2;

    private final String tag;
    private final boolean typed;

    /** Set once the end-of-input marker went out: no record follows, so no marker is needed. */
    private transient boolean inputEnded;

    /**
     * @param tag the first item of a pickled marker, chosen by the Python side
     * @param typed whether the records are typed (a marker is then an element without a value)
     */
    public CheckpointMarkers(String tag, boolean typed) {
        this.tag = tag;
        this.typed = typed;
    }

    /** Whether the records are typed: a marker is then an element without a value. */
    public boolean typed() {
        return typed;
    }

    /** The id of the marker due before the barrier of {@code checkpointId}; null once the input
     * ended. */
    public Long idBeforeBarrier(long checkpointId) {
        return inputEnded ? null : checkpointId;
    }

    /** The id of the end-of-input marker, or null when it already went out. */
    public Long idAtEndOfInput() {
        if (inputEnded) {
            return null;
        }
        inputEnded = true;
        return END_OF_INPUT;
    }

    /** The pickled marker of {@code id}: the pickle of {@code (tag, id)}. */
    public byte[] pickled(long id) {
        return pickle(tag, id);
    }

    /** The watermark field of the bare marker of {@code id} (the end of input's included). */
    public static long bareMarkerWatermark(long id) {
        return BARE_MARKER_WATERMARK + id;
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

package dev.pyflinkgcp.bridge;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.operators.python.process.ExternalPythonProcessOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;

/**
 * The process-mode Python operator of a pyflink-gcp writer, telling the Python side which bundle
 * end is a checkpoint.
 *
 * <p>PyFlink ends a Python bundle at every checkpoint barrier, but also every N records and every
 * T milliseconds, and the Python side cannot tell these apart: a writer that must be durable at
 * each barrier has to wait for its writes at every bundle end. This operator puts a marker element
 * into the input just before the barrier's bundle end (and one at the end of input), so the
 * writer waits only there and lets writes stay in flight across ordinary bundle ends.
 *
 * <p>A marker is the pickle of the tuple {@code (tag, id)}: the tag the Python side chose and the
 * checkpoint id, or {@link #END_OF_INPUT}. The input type must therefore be Python's pickled byte
 * array, and the operator must head a chain of its own so PyFlink does not fuse it into the Python
 * operator before it (fusion copies it into a plain Python operator).
 */
public class CheckpointMarkerProcessOperator<OUT> extends ExternalPythonProcessOperator<byte[], OUT> {

    private static final long serialVersionUID = 1L;

    /** The id a marker carries when the input has ended. */
    public static final long END_OF_INPUT = -1L;

    private final String tag;

    /** Set once the end-of-input marker went out: no record follows, so no marker is needed. */
    private transient boolean inputEnded;

    public CheckpointMarkerProcessOperator(
            Configuration config,
            DataStreamPythonFunctionInfo pythonFunctionInfo,
            TypeInformation<byte[]> inputTypeInfo,
            TypeInformation<OUT> outputTypeInfo,
            String tag) {
        super(config, pythonFunctionInfo, inputTypeInfo, outputTypeInfo);
        this.tag = tag;
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        if (!inputEnded) {
            processElement(new StreamRecord<>(marker(tag, checkpointId)));
        }
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() throws Exception {
        if (!inputEnded) {
            inputEnded = true;
            processElement(new StreamRecord<>(marker(tag, END_OF_INPUT)));
        }
        super.endInput();
    }

    /** Pickle protocol 2 of {@code (tag, id)}: BINUNICODE, LONG1 (8 bytes), TUPLE2, STOP. */
    public static byte[] marker(String tag, long id) {
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

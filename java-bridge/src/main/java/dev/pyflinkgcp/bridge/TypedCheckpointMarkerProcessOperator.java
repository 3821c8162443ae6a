package dev.pyflinkgcp.bridge;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.operators.python.process.ExternalPythonProcessOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;

/**
 * {@link CheckpointMarkerProcessOperator} for a typed input stream (records that are not pickled
 * Python objects, such as {@code Types.STRING()} or a row type).
 *
 * <p>A marker cannot be a value of the stream's own type, so every element goes to Python wrapped
 * in a two-field row: {@code (null, record)} for a record and {@code (checkpoint id, null)} for a
 * marker ({@link CheckpointMarkerProcessOperator#END_OF_INPUT} at the end of input). The Python
 * runner is built for the wrapping row type, {@link #wrappedType}; the record keeps its own type
 * inside it, so the Python side receives exactly what it would have received unwrapped.
 */
public class TypedCheckpointMarkerProcessOperator<OUT>
        extends ExternalPythonProcessOperator<Object, OUT> {

    private static final long serialVersionUID = 1L;

    /** Set once the end-of-input marker went out: no record follows, so no marker is needed. */
    private transient boolean inputEnded;

    /**
     * @param recordType the input stream's type; the operator's runner takes {@link
     *     #wrappedType(TypeInformation)} of it
     */
    @SuppressWarnings("unchecked")
    public TypedCheckpointMarkerProcessOperator(
            Configuration config,
            DataStreamPythonFunctionInfo pythonFunctionInfo,
            TypeInformation<?> recordType,
            TypeInformation<OUT> outputTypeInfo) {
        super(
                config,
                pythonFunctionInfo,
                (TypeInformation<Object>) (TypeInformation<?>) wrappedType(recordType),
                outputTypeInfo);
    }

    /** The row {@code (marker: BIGINT, record: recordType)} that carries records and markers. */
    public static RowTypeInfo wrappedType(TypeInformation<?> recordType) {
        return new RowTypeInfo(
                new TypeInformation<?>[] {Types.LONG, recordType}, new String[] {"marker", "record"});
    }

    @Override
    public void processElement(StreamRecord<Object> element) throws Exception {
        super.processElement(element.copy(Row.of(null, element.getValue())));
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        if (!inputEnded) {
            super.processElement(new StreamRecord<>(Row.of(checkpointId, null)));
        }
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() throws Exception {
        if (!inputEnded) {
            inputEnded = true;
            super.processElement(
                    new StreamRecord<>(Row.of(CheckpointMarkerProcessOperator.END_OF_INPUT, null)));
        }
        super.endInput();
    }
}

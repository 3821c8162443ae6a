package dev.pyflinkgcp.bridge;

import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.RowTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.functions.python.DataStreamPythonFunctionInfo;
import org.apache.flink.streaming.api.operators.python.process.ExternalPythonKeyedProcessOperator;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.types.Row;

/**
 * {@link CheckpointMarkerProcessOperator} for a writer on a keyed stream.
 *
 * <p>The keyed operator's input is the row {@code (key, value)}, so a marker is the row of the
 * last key this subtask received and the pickled {@code (tag, id)}: a key that belongs to this
 * subtask, and a value the Python side can tell from a record. Before the first record there is
 * nothing to flush, and no marker is sent.
 *
 * <p>When the values are typed (not pickled Python objects), the operator is built with {@code
 * typedValues}: each value then goes to Python wrapped as in {@link
 * TypedCheckpointMarkerProcessOperator}, the row {@code (null, value)}, and a marker's value is
 * the row {@code (checkpoint id, null)}.
 */
public class KeyedCheckpointMarkerProcessOperator<OUT> extends ExternalPythonKeyedProcessOperator<OUT> {

    private static final long serialVersionUID = 1L;

    private final String tag;
    private final boolean typedValues;

    private transient Object lastKey;
    private transient boolean inputEnded;

    /**
     * @param inputTypeInfo the keyed stream's row {@code (key, value)}
     * @param typedValues whether the values are typed: the runner then takes the row {@code (key,
     *     (marker, value))}
     */
    public KeyedCheckpointMarkerProcessOperator(
            Configuration config,
            DataStreamPythonFunctionInfo pythonFunctionInfo,
            RowTypeInfo inputTypeInfo,
            TypeInformation<OUT> outputTypeInfo,
            String tag,
            boolean typedValues) {
        super(
                config,
                pythonFunctionInfo,
                typedValues ? wrapValues(inputTypeInfo) : inputTypeInfo,
                outputTypeInfo);
        this.tag = tag;
        this.typedValues = typedValues;
    }

    private static RowTypeInfo wrapValues(RowTypeInfo keyed) {
        return new RowTypeInfo(
                new TypeInformation<?>[] {
                    keyed.getTypeAt(0),
                    TypedCheckpointMarkerProcessOperator.wrappedType(keyed.getTypeAt(1))
                },
                keyed.getFieldNames());
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        Row row = element.getValue();
        lastKey = row.getField(0);
        if (typedValues) {
            element = element.copy(Row.of(lastKey, Row.of(null, row.getField(1))));
        }
        super.processElement(element);
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        if (!inputEnded) {
            mark(checkpointId);
        }
        super.prepareSnapshotPreBarrier(checkpointId);
    }

    @Override
    public void endInput() throws Exception {
        if (!inputEnded) {
            inputEnded = true;
            mark(CheckpointMarkerProcessOperator.END_OF_INPUT);
        }
        super.endInput();
    }

    private void mark(long id) throws Exception {
        if (lastKey != null) {
            Object marker =
                    typedValues ? Row.of(id, null) : CheckpointMarkerProcessOperator.marker(tag, id);
            super.processElement(new StreamRecord<>(Row.of(lastKey, marker)));
        }
    }
}

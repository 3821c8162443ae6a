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
 */
public class KeyedCheckpointMarkerProcessOperator<OUT> extends ExternalPythonKeyedProcessOperator<OUT> {

    private static final long serialVersionUID = 1L;

    private final String tag;

    private transient Object lastKey;
    private transient boolean inputEnded;

    public KeyedCheckpointMarkerProcessOperator(
            Configuration config,
            DataStreamPythonFunctionInfo pythonFunctionInfo,
            RowTypeInfo inputTypeInfo,
            TypeInformation<OUT> outputTypeInfo,
            String tag) {
        super(config, pythonFunctionInfo, inputTypeInfo, outputTypeInfo);
        this.tag = tag;
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        lastKey = element.getValue().getField(0);
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
            super.processElement(
                    new StreamRecord<>(
                            Row.of(lastKey, CheckpointMarkerProcessOperator.marker(tag, id))));
        }
    }
}

package dev.pyflinkgcp.bridge;

import java.util.function.Consumer;

import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.util.OutputTag;

/**
 * The committer operator's output: the records Python returns are committables it keeps, handed
 * to {@code keeper} instead of going downstream; everything else (watermarks, markers) passes.
 */
final class KeepingOutput<OUT> implements Output<StreamRecord<OUT>> {

    private final Output<StreamRecord<OUT>> downstream;
    private final Consumer<byte[]> keeper;

    KeepingOutput(Output<StreamRecord<OUT>> downstream, Consumer<byte[]> keeper) {
        this.downstream = downstream;
        this.keeper = keeper;
    }

    @Override
    public void collect(StreamRecord<OUT> record) {
        keeper.accept((byte[]) record.getValue());
    }

    @Override
    public <X> void collect(OutputTag<X> outputTag, StreamRecord<X> record) {
        downstream.collect(outputTag, record);
    }

    @Override
    public void emitWatermark(Watermark mark) {
        downstream.emitWatermark(mark);
    }

    @Override
    public void emitWatermarkStatus(WatermarkStatus watermarkStatus) {
        downstream.emitWatermarkStatus(watermarkStatus);
    }

    @Override
    public void emitLatencyMarker(LatencyMarker latencyMarker) {
        downstream.emitLatencyMarker(latencyMarker);
    }

    @Override
    public void emitRecordAttributes(RecordAttributes recordAttributes) {
        downstream.emitRecordAttributes(recordAttributes);
    }

    @Override
    public void emitWatermark(WatermarkEvent watermark) {
        downstream.emitWatermark(watermark);
    }

    @Override
    public void close() {
        downstream.close();
    }
}

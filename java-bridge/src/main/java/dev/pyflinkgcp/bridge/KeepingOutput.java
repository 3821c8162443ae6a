package dev.pyflinkgcp.bridge;

import java.util.function.BooleanSupplier;
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
 * to {@code keeper} instead of going downstream; side-output records (write results) go
 * downstream while {@code open} says so and to {@code dropped} after; everything else
 * (watermarks, markers) passes.
 */
final class KeepingOutput<OUT> implements Output<StreamRecord<OUT>> {

    private final Output<StreamRecord<OUT>> downstream;
    private final Consumer<byte[]> keeper;
    private final BooleanSupplier open;
    private final Runnable dropped;

    KeepingOutput(
            Output<StreamRecord<OUT>> downstream,
            Consumer<byte[]> keeper,
            BooleanSupplier open,
            Runnable dropped) {
        this.downstream = downstream;
        this.keeper = keeper;
        this.open = open;
        this.dropped = dropped;
    }

    @Override
    public void collect(StreamRecord<OUT> record) {
        keeper.accept((byte[]) record.getValue());
    }

    @Override
    public <X> void collect(OutputTag<X> outputTag, StreamRecord<X> record) {
        if (open.getAsBoolean()) {
            downstream.collect(outputTag, record);
        } else {
            dropped.run();
        }
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

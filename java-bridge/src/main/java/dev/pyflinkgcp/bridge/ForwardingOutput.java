package dev.pyflinkgcp.bridge;

import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.util.OutputTag;

/**
 * An operator output that passes everything to {@code downstream}. The outputs that keep some
 * records in their operator ({@link KeepingOutput}, {@link LineageState.Capturing}) override only
 * the collect methods they change, so a new kind of element Flink adds to {@link Output} is
 * forwarded in one place.
 */
abstract class ForwardingOutput<OUT> implements Output<StreamRecord<OUT>> {

    protected final Output<StreamRecord<OUT>> downstream;

    ForwardingOutput(Output<StreamRecord<OUT>> downstream) {
        this.downstream = downstream;
    }

    @Override
    public void collect(StreamRecord<OUT> record) {
        downstream.collect(record);
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

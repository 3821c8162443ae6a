package dev.pyflinkgcp.bridge;

import java.util.function.BooleanSupplier;
import java.util.function.Consumer;

import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.util.OutputTag;

/**
 * The committer operator's output: the records Python returns are committables it keeps, handed
 * to {@code keeper} instead of going downstream; side-output records (write results) go
 * downstream while {@code open} says so and to {@code dropped} after; everything else
 * (watermarks, markers) passes ({@link ForwardingOutput}).
 */
final class KeepingOutput<OUT> extends ForwardingOutput<OUT> {

    private final Consumer<byte[]> keeper;
    private final BooleanSupplier open;
    private final Runnable dropped;

    KeepingOutput(
            Output<StreamRecord<OUT>> downstream,
            Consumer<byte[]> keeper,
            BooleanSupplier open,
            Runnable dropped) {
        super(downstream);
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
}

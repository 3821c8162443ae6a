package dev.pyflinkgcp.bench;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Locale;
import org.apache.flink.api.common.functions.RuntimeContext;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.sink.RichSinkFunction;
import org.apache.flink.streaming.connectors.gcp.pubsub.PubSubSink;

/**
 * Runs Flink's {@link PubSubSink} unchanged (every call is passed on) and notes, per subtask, the
 * wall clock and CPU at its first record and after its close, the way the Python side's timed
 * writer factory does at its first writer and its close.
 *
 * <p>CPU is read from {@code /proc/<pid>/stat} (user + system, all threads), as the Python side
 * reads it: this JVM's own, and the emulator processes' whose pids it was given. The span line
 * also carries this JVM's Publish counts so far ({@link PublishCounter}); with several subtasks
 * the last one to close has the job's total.
 */
final class TimedSink extends RichSinkFunction<String> implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    private static final Object FILE_LOCK = new Object();

    private final PubSubSink<String> sink;
    private final String spansPath;
    private final long[] emulatorPids;
    private final int clockTicks;

    private transient boolean started;
    private transient double start;
    private transient String cpuFirst;
    private transient boolean counted;

    TimedSink(PubSubSink<String> sink, String spansPath, long[] emulatorPids, int clockTicks) {
        this.sink = sink;
        this.spansPath = spansPath;
        this.emulatorPids = emulatorPids;
        this.clockTicks = clockTicks;
    }

    @Override
    public void setRuntimeContext(RuntimeContext context) {
        super.setRuntimeContext(context);
        sink.setRuntimeContext(context);
    }

    @Override
    public void open(Configuration parameters) throws Exception {
        sink.open(parameters);
        counted = PublishCounter.attach(sink);
    }

    @Override
    public void invoke(String value, Context context) throws Exception {
        if (!started) {
            started = true;
            cpuFirst = cpu();
            start = System.currentTimeMillis() / 1000.0;
        }
        sink.invoke(value, context);
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) throws Exception {
        sink.snapshotState(context);
    }

    @Override
    public void initializeState(FunctionInitializationContext context) throws Exception {
        sink.initializeState(context);
    }

    @Override
    public void finish() throws Exception {
        sink.finish();
    }

    @Override
    public void close() throws Exception {
        sink.close();
        if (!started || spansPath == null) {
            return;
        }
        double end = System.currentTimeMillis() / 1000.0;
        String line = String.format(Locale.ROOT,
                "{\"start\": %.6f, \"end\": %.6f, \"cpu_first\": %s, \"cpu_last\": %s, "
                        + "\"publish_calls\": %d, \"published\": %d}%n",
                start, end, cpuFirst, cpu(), counted ? PublishCounter.calls() : -1,
                PublishCounter.messages());
        synchronized (FILE_LOCK) {
            Files.write(Path.of(spansPath), line.getBytes(StandardCharsets.UTF_8),
                    StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        }
    }

    /** A CPU reading in the Python side's format: emulator, JVM and (no) Python workers. */
    private String cpu() {
        double emulator = 0;
        for (long pid : emulatorPids) {
            emulator += cpuSeconds(Long.toString(pid));
        }
        return String.format(Locale.ROOT, "{\"emulator\": %.4f, \"jvm\": %.4f, \"workers\": {}}",
                emulator, cpuSeconds("self"));
    }

    /** User + system CPU seconds of a process (all its threads); 0 once it is gone. */
    private double cpuSeconds(String pid) {
        try {
            String stat = Files.readString(Path.of("/proc", pid, "stat"));
            String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return (Long.parseLong(fields[11]) + Long.parseLong(fields[12])) / (double) clockTicks;
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }
}

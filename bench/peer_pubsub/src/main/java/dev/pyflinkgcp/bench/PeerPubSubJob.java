package dev.pyflinkgcp.bench;

import com.google.cloud.NoCredentials;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.connectors.gcp.pubsub.PubSubSink;

/**
 * The Java side of bench/peer_pubsub.py: Apache Flink's own {@link PubSubSink} writing the same
 * ~170-byte JSON records as the Python side to one fixed topic of the Pub/Sub emulator, on a
 * local MiniCluster in this JVM, with a checkpoint every second.
 *
 * <p>First a throw-away job of the same shape publishes {@code --warmup-records} records to
 * {@code --warmup-topic} (a topic without subscriptions, so nothing is kept): the first job of a
 * JVM runs with cold classes and JIT, and the Python side warms its client JVM the same way. Then
 * it prints {@code warmed up} and waits for a line on its standard input (the driver reads the
 * emulator's message counter in between), and the measured job runs; each sink subtask appends its span (first record to the end of close)
 * and CPU readings to {@code --spans} as one JSON line, in the format the Python side's timed
 * writer factory writes, so the script computes both sides' figures with the same code.
 *
 * <p>Arguments: {@code --emulator host:port --project P --topic T --records N --parallelism P
 * --checkpoint-ms MS --spans FILE [--emulator-pids 1,2] [--clock-ticks 100]
 * [--warmup-topic T --warmup-records N]}.
 */
public final class PeerPubSubJob {

    private PeerPubSubJob() {}

    /** The record of index {@code i}, byte for byte what the Python side's json.dumps makes. */
    static final class ToJson implements MapFunction<Long, String> {
        private static final String PAYLOAD = "x".repeat(100);

        @Override
        public String map(Long i) {
            long topic = i % 16;
            return "{\"id\": "
                    + i
                    + ", \"topic\": \"peer-t"
                    + (topic < 10 ? "0" : "")
                    + topic
                    + "\", \"customer\": \"c"
                    + (i % 1000)
                    + "\", \"payload\": \""
                    + PAYLOAD
                    + "\"}";
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = parse(argv);
        String host = required(args, "emulator");
        String project = required(args, "project");
        int parallelism = Integer.parseInt(args.getOrDefault("parallelism", "1"));
        long checkpointMs = Long.parseLong(args.getOrDefault("checkpoint-ms", "1000"));
        long warmup = Long.parseLong(args.getOrDefault("warmup-records", "0"));
        if (warmup > 0) {
            run(host, project, required(args, "warmup-topic"), warmup, parallelism, checkpointMs,
                    null, new long[0], 100);
            PublishCounter.reset();
        }
        // The driver brackets the measured job with its emulator probes: tell it the warm-up is
        // over and wait for its go.
        System.out.println("warmed up");
        System.out.flush();
        if (new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine()
                == null) {
            throw new IllegalStateException("the driver closed standard input before its go");
        }
        String[] pids = args.getOrDefault("emulator-pids", "").split(",");
        long[] emulatorPids = new long[pids.length];
        int n = 0;
        for (String pid : pids) {
            if (!pid.isBlank()) {
                emulatorPids[n++] = Long.parseLong(pid.trim());
            }
        }
        run(host, project, required(args, "topic"), Long.parseLong(required(args, "records")),
                parallelism, checkpointMs, required(args, "spans"),
                java.util.Arrays.copyOf(emulatorPids, n),
                Integer.parseInt(args.getOrDefault("clock-ticks", "100")));
    }

    private static void run(String host, String project, String topic, long records,
            int parallelism, long checkpointMs, String spans, long[] emulatorPids, int clockTicks)
            throws Exception {
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createLocalEnvironment(parallelism, new Configuration());
        env.enableCheckpointing(checkpointMs);
        PubSubSink<String> sink = PubSubSink.newBuilder()
                .withSerializationSchema(new SimpleStringSchema())
                .withProjectName(project)
                .withTopicName(topic)
                .withHostAndPortForEmulator(host)
                .withCredentials(NoCredentials.getInstance())
                .build();
        env.fromSequence(0, records - 1)
                .name("records")
                .map(new ToJson())
                .name("to-json")
                .addSink(new TimedSink(sink, spans, emulatorPids, clockTicks))
                .name("PubSubSink");
        env.execute(spans == null ? "peer-pubsub-warm-up" : "peer-pubsub-" + topic);
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            out.put(argv[i].substring(2), argv[i + 1]);
        }
        return out;
    }

    private static String required(Map<String, String> args, String name) {
        String value = args.get(name);
        if (value == null) {
            throw new IllegalArgumentException("missing --" + name);
        }
        return value;
    }
}

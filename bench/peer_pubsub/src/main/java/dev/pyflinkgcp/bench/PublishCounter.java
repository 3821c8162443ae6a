package dev.pyflinkgcp.bench;

import com.google.api.core.ApiFuture;
import com.google.api.gax.rpc.ApiCallContext;
import com.google.api.gax.rpc.UnaryCallable;
import com.google.cloud.pubsub.v1.Publisher;
import com.google.cloud.pubsub.v1.stub.PublisherStub;
import com.google.pubsub.v1.PublishRequest;
import com.google.pubsub.v1.PublishResponse;
import java.lang.reflect.Field;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.streaming.connectors.gcp.pubsub.PubSubSink;

/**
 * Counts the Publish requests (and their messages) that Flink's {@link PubSubSink} sends, to
 * report messages per request beside the Python sink's.
 *
 * <p>{@link PubSubSink} builds its {@link Publisher} inside {@code open()} and exposes neither, so
 * {@link #attach} swaps, by reflection, the publisher's stub for one that counts each {@code
 * publishCallable().futureCall(...)} (one per batch the publisher sends; the library's retries
 * happen inside it) and passes every call on. Only request counts are added: no per-message work.
 * The counts are per JVM, which is the whole job on a local MiniCluster.
 */
final class PublishCounter {
    private static final AtomicLong CALLS = new AtomicLong();
    private static final AtomicLong MESSAGES = new AtomicLong();

    private PublishCounter() {}

    static long calls() {
        return CALLS.get();
    }

    static long messages() {
        return MESSAGES.get();
    }

    static void reset() {
        CALLS.set(0);
        MESSAGES.set(0);
    }

    /** Makes the open {@code sink}'s publisher count its Publish requests; false if it cannot. */
    static boolean attach(PubSubSink<?> sink) {
        try {
            Field publisherField = PubSubSink.class.getDeclaredField("publisher");
            publisherField.setAccessible(true);
            Object publisher = publisherField.get(sink);
            Field stubField = Publisher.class.getDeclaredField("publisherStub");
            stubField.setAccessible(true);
            PublisherStub stub = (PublisherStub) stubField.get(publisher);
            if (!(stub instanceof CountingStub)) {
                stubField.set(publisher, new CountingStub(stub));
            }
            return true;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return false;
        }
    }

    /** Passes every call to the publisher's own stub; counts Publish requests on the way. */
    private static final class CountingStub extends PublisherStub {
        private final PublisherStub inner;
        private final UnaryCallable<PublishRequest, PublishResponse> publish;

        CountingStub(PublisherStub inner) {
            this.inner = inner;
            UnaryCallable<PublishRequest, PublishResponse> callable = inner.publishCallable();
            this.publish = new UnaryCallable<>() {
                @Override
                public ApiFuture<PublishResponse> futureCall(
                        PublishRequest request, ApiCallContext context) {
                    CALLS.incrementAndGet();
                    MESSAGES.addAndGet(request.getMessagesCount());
                    return callable.futureCall(request, context);
                }
            };
        }

        @Override
        public UnaryCallable<PublishRequest, PublishResponse> publishCallable() {
            return publish;
        }

        @Override
        public void close() {
            inner.close();
        }

        @Override
        public void shutdown() {
            inner.shutdown();
        }

        @Override
        public boolean isShutdown() {
            return inner.isShutdown();
        }

        @Override
        public boolean isTerminated() {
            return inner.isTerminated();
        }

        @Override
        public void shutdownNow() {
            inner.shutdownNow();
        }

        @Override
        public boolean awaitTermination(long duration, TimeUnit unit) throws InterruptedException {
            return inner.awaitTermination(duration, unit);
        }
    }
}

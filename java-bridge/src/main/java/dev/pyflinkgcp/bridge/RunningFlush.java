package dev.pyflinkgcp.bridge;

import java.lang.reflect.Field;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.flink.streaming.api.operators.python.process.AbstractExternalPythonFunctionOperator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Lets a Python bundle that is still being flushed end before its operator closes, so that no
 * bundle reference is released twice.
 *
 * <p>Why: PyFlink ends a bundle ({@code invokeFinishBundle}) by running the runner's flush on a
 * private single-thread executor while the task thread waits for results. The wait can be
 * interrupted (a cancel, a failover), and the task thread then goes on to {@code close()} while
 * the flush still runs: the flush holds a reference to the slot's shared Python environment.
 * {@code close()} closes the runner, and when it is the slot's last user Beam's {@code
 * DefaultJobBundleFactory.close()} expires the environment ("Expiring environment ... with 1
 * remaining bundle references") and then releases the remaining references itself ({@code while
 * (client.unref() > 0)}). If the abandoned flush ends in between, its own release comes first,
 * the factory's loop takes the count below zero, and Beam throws "Reference count must not be
 * negative" from the task's cleanup: the TaskManager treats that as a fatal error and shuts
 * down. A committer, whose bundles are commits that last seconds, is the likeliest to be
 * interrupted mid-flush, which is why only exactly-once FILE_LOADS jobs were hit.
 *
 * <p>What this does: before the runner closes, the flush executor is shut down (no new flush)
 * and awaited for a bounded time, ignoring the interrupts a cancel keeps sending, so the flush
 * releases its reference before the factory counts them. The bound stays well below Flink's
 * task cancellation timeout (180 s by default), after which the TaskManager itself would be
 * ended. A flush that outlasts it is interrupted (it is then usually stuck sending to a Python
 * worker that died, holding a lock the close needs) and given a few seconds more; one that
 * outlasts that too is logged, and the close goes on as before.
 */
final class RunningFlush {

    /** How long a close waits for a running flush. */
    static final Duration WAIT = Duration.ofSeconds(30);

    /** How long a close waits, after interrupting it, for a flush that outlasted {@link #WAIT}. */
    static final Duration AFTER_INTERRUPT = Duration.ofSeconds(5);

    /** The message of Beam's error when a bundle reference is released twice. */
    static final String NEGATIVE_REFERENCE_COUNT = "Reference count must not be negative.";

    private static final Logger LOG = LoggerFactory.getLogger(RunningFlush.class);

    private static final Field FLUSH_POOL = flushPoolField();

    private RunningFlush() {}

    private static Field flushPoolField() {
        try {
            Field field =
                    AbstractExternalPythonFunctionOperator.class.getDeclaredField(
                            "flushThreadPool");
            field.setAccessible(true);
            return field;
        } catch (ReflectiveOperationException | RuntimeException e) {
            LOG.warn(
                    "PyFlink's AbstractExternalPythonFunctionOperator has no flushThreadPool"
                            + " field; closing an operator will not wait for a running flush",
                    e);
            return null;
        }
    }

    /**
     * Waits until the operator's running flush, if any, ended.
     *
     * @param operator the operator about to close
     * @param name the operator's name, for the log
     * @param wait how long to wait at most
     * @return whether no flush was still running when this returned
     */
    static boolean await(
            AbstractExternalPythonFunctionOperator<?> operator, String name, Duration wait) {
        ExecutorService pool = pool(operator);
        if (pool == null) {
            return true;
        }
        pool.shutdown();
        long started = System.nanoTime();
        boolean ended = awaitEnd(pool, wait);
        long waitedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        if (!ended) {
            ended = interruptFlush(pool, name, waitedMs);
        } else if (waitedMs >= 100) {
            LOG.info(
                    "{}: waited {} ms for the running Python bundle to end before closing",
                    name,
                    waitedMs);
        }
        return ended;
    }

    /**
     * Interrupts a flush that outlasted the wait and gives it a short while to end.
     *
     * <p>Why: such a flush is usually sending to a Python worker that is gone. Beam's outbound
     * observer then loops in {@code onNext} waiting for the dead stream to become ready, holding
     * the observer's monitor; the runner's close needs that monitor to send {@code onError}, so
     * it would block until Flink's cancellation watchdog ends the TaskManager. Interrupting the
     * flush thread makes {@code onNext} give up and release the monitor.
     *
     * @return whether the flush ended after the interrupt
     */
    private static boolean interruptFlush(ExecutorService pool, String name, long waitedMs) {
        pool.shutdownNow();
        boolean ended = awaitEnd(pool, AFTER_INTERRUPT);
        if (ended) {
            LOG.warn(
                    "{}: a Python bundle was still being flushed {} ms after the operator began"
                            + " to close; its flush was interrupted and ended",
                    name,
                    waitedMs);
        } else {
            LOG.warn(
                    "{}: a Python bundle was still being flushed {} ms after the operator began"
                            + " to close, and {} s after an interrupt; closing anyway",
                    name,
                    waitedMs,
                    AFTER_INTERRUPT.getSeconds());
        }
        return ended;
    }

    /**
     * Waits up to {@code wait} for the shut-down {@code pool} to end, ignoring interrupts: a
     * cancel interrupts the task thread repeatedly, so the wait goes on until the bound and the
     * interrupt is given back afterwards.
     *
     * @return whether the pool ended within the wait
     */
    private static boolean awaitEnd(ExecutorService pool, Duration wait) {
        long deadline = System.nanoTime() + wait.toNanos();
        boolean interrupted = false;
        try {
            while (true) {
                long left = deadline - System.nanoTime();
                try {
                    return pool.awaitTermination(Math.max(0L, left), TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    interrupted = true;
                    if (left <= 0) {
                        return false;
                    }
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static ExecutorService pool(AbstractExternalPythonFunctionOperator<?> operator) {
        if (FLUSH_POOL == null) {
            return null;
        }
        try {
            return (ExecutorService) FLUSH_POOL.get(operator);
        } catch (IllegalAccessException e) {
            return null;
        }
    }

    /**
     * Whether {@code error}, or one of its causes, is Beam's error for a bundle reference released
     * twice: what the wait prevents, and what a close must not let end the TaskManager when a
     * flush outlasted the wait.
     */
    static boolean isNegativeReferenceCount(Throwable error) {
        for (Throwable t = error; t != null; t = t.getCause()) {
            if (t instanceof IllegalStateException
                    && NEGATIVE_REFERENCE_COUNT.equals(t.getMessage())) {
                return true;
            }
            for (Throwable suppressed : t.getSuppressed()) {
                if (isNegativeReferenceCount(suppressed)) {
                    return true;
                }
            }
        }
        return false;
    }

    /**
     * Waits for the running flush, then closes the operator with {@code close}; Beam's
     * negative-reference-count error, which can only come from a flush that outlasted the wait,
     * is logged instead of thrown.
     *
     * @return whether the running flush, if any, ended within the wait
     */
    static boolean close(
            AbstractExternalPythonFunctionOperator<?> operator, String name, Closer close)
            throws Exception {
        boolean ended = await(operator, name, WAIT);
        try {
            close.close();
        } catch (Exception e) {
            if (!isNegativeReferenceCount(e)) {
                throw e;
            }
            LOG.warn(
                    "{}: Beam released a Python bundle reference twice while closing (a flush"
                            + " outlasted the wait); the environment is closed, the task goes on"
                            + " closing",
                    name,
                    e);
        }
        return ended;
    }

    /** The operator's own close, {@code super::close}. */
    @FunctionalInterface
    interface Closer {
        void close() throws Exception;
    }
}

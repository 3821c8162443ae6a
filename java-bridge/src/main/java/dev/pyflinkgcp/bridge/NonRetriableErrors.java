package dev.pyflinkgcp.bridge;

import java.io.Serializable;

import org.apache.flink.runtime.execution.SuppressRestartsException;
import org.apache.flink.util.ExceptionUtils;

/**
 * Tells a failure of the Python writer that a restart cannot fix from any other, and ends the job
 * on it without Flink's restart loop.
 *
 * <p>A configuration or contract error (a resolver returning None, a destination missing under
 * CREATE_NEVER, ...) fails the same way on every replay, so under a restart strategy (unbounded by
 * default once checkpointing is on) the job would restart forever, repeating the writes before the
 * failure each time. The Python side marks such an error with a fixed line as it leaves the writer;
 * PyFlink reports a Python failure as a Java exception whose message holds the Python traceback,
 * so the line is found in the message of one of the exception's causes. Flink does not restart a
 * job whose failure has a {@link SuppressRestartsException} in its cause chain, so a marked
 * failure is rethrown wrapped in one: the job fails once, and the Python error, traceback and
 * message unchanged, is its cause. An unmarked failure (transient, or a record rejected under
 * fail_job) is rethrown as it is and keeps the restart strategy.
 *
 * <p>A Python worker that cannot import pyflink or pyflink_gcp (the job's {@code
 * python.executable} is an interpreter without them) fails the same way on every restart too: it
 * ends the job at once, with a message that names the setting.
 *
 * <p>Every Python failure of the operator surfaces where a bundle ends ({@code invokeFinishBundle}:
 * by count from {@code processElement}, by time from a timer, before a barrier, at the end of
 * input, at the final watermark); handing an element to the runner ({@code processElement}) is
 * checked too.
 */
public final class NonRetriableErrors implements Serializable {

    private static final long serialVersionUID = 1L;

    /**
     * What a Python worker started with an interpreter lacking pyflink (or pyflink_gcp) reports:
     * the same on every restart, so it ends the job like a marked error.
     */
    static final String MISSING_PYFLINK = "No module named 'pyflink";

    private final String marker;

    /** @param marker the line a non-retriable Python error carries; null or empty: none is */
    public NonRetriableErrors(String marker) {
        this.marker = marker;
    }

    /**
     * The exception to throw for {@code failure}: a {@link SuppressRestartsException} around it
     * when it is marked non-retriable, else {@code failure} itself.
     */
    public Exception classify(Exception failure) {
        if (marker == null
                || marker.isEmpty()
                || ExceptionUtils.findThrowable(failure, SuppressRestartsException.class)
                        .isPresent()) {
            return failure;
        }
        if (ExceptionUtils.findThrowableWithMessage(failure, marker).isPresent()) {
            return new SuppressRestartsException(failure);
        }
        if (ExceptionUtils.findThrowableWithMessage(failure, MISSING_PYFLINK).isPresent()) {
            return new SuppressRestartsException(
                    new IllegalStateException(
                            "The Python workers cannot import pyflink or pyflink_gcp: they run"
                                    + " an interpreter without them (python.executable unset, or"
                                    + " set to another one). Set python.executable to the"
                                    + " interpreter of the environment that has pyflink and"
                                    + " pyflink-gcp installed; a restart cannot change that",
                            failure));
        }
        return failure;
    }
}

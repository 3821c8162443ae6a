package dev.pyflinkgcp.bridge;

import java.io.Serializable;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.python.PythonOptions;

/**
 * A writer operator's own bundle size and time, kept against the job's Python options.
 *
 * <p>The writer's bundle size and time are its flush thresholds, set on the operator's own copy of
 * the job configuration. When the job is executed, PyFlink adds the job's explicitly set Python
 * options to every Python operator's configuration ({@code PythonConfigUtil.configPythonOperator}),
 * so a job that sets {@code python.fn-execution.bundle.size} or {@code ...bundle.time} would
 * silently replace the writer's thresholds with its own. The operator takes its values when it is
 * built and puts them back in {@code open()}, before the runtime reads them; every other option
 * the job adds (its Python files, archives, executable) stays.
 */
final class BundleSettings implements Serializable {

    private static final long serialVersionUID = 1L;

    private final int size;
    private final long timeMillis;

    BundleSettings(Configuration config) {
        this.size = config.get(PythonOptions.MAX_BUNDLE_SIZE);
        this.timeMillis = config.get(PythonOptions.MAX_BUNDLE_TIME_MILLS);
    }

    /** Put the writer's values back into {@code config}, the operator's own configuration. */
    void restore(Configuration config) {
        config.set(PythonOptions.MAX_BUNDLE_SIZE, size);
        config.set(PythonOptions.MAX_BUNDLE_TIME_MILLS, timeMillis);
    }
}

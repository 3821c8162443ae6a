package dev.pyflinkgcp.bridge;

import java.lang.reflect.Field;

import org.apache.flink.api.dag.Transformation;
import org.apache.flink.streaming.api.operators.StreamOperatorFactory;
import org.apache.flink.streaming.api.transformations.OneInputTransformation;

/**
 * Rewires a writer's transformation in place when the job is executed, so that it runs the Python
 * functions before it inside its own checkpoint-marker operator (and back).
 *
 * <p>PyFlink's own chaining ({@code PythonOperatorChainingOptimizer}) replaces the input of a
 * transformation by reflection when it fuses the operators before it; this does the same for the
 * writer, and swaps its operator factory. Changing the transformation in place keeps its id, what
 * reads it (the discarding sink, a committer) and its managed memory declarations.
 */
public final class WriterFusion {

    private WriterFusion() {}

    /**
     * Let {@code writer} read {@code input} and run the operator {@code factory} makes.
     *
     * @param writer the writer's transformation
     * @param input what the first fused function read
     * @param factory the factory of the fused marker operator (or the writer's original one)
     */
    public static void rewire(
            OneInputTransformation<?, ?> writer,
            Transformation<?> input,
            StreamOperatorFactory<?> factory)
            throws ReflectiveOperationException {
        set(writer, "input", input);
        set(writer, "operatorFactory", factory);
    }

    /** Let {@code transformation} read {@code input}: a function put back before the writer. */
    public static void setInput(OneInputTransformation<?, ?> transformation, Transformation<?> input)
            throws ReflectiveOperationException {
        set(transformation, "input", input);
    }

    private static void set(OneInputTransformation<?, ?> target, String name, Object value)
            throws ReflectiveOperationException {
        Field field = OneInputTransformation.class.getDeclaredField(name);
        field.setAccessible(true);
        field.set(target, value);
    }
}

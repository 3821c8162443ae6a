package dev.pyflinkgcp.bridge;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.streaming.api.lineage.DatasetConfigFacet;
import org.apache.flink.streaming.api.lineage.DefaultLineageDataset;
import org.apache.flink.streaming.api.lineage.DefaultLineageVertex;
import org.apache.flink.streaming.api.lineage.LineageDatasetFacet;
import org.apache.flink.streaming.api.lineage.LineageVertex;
import org.apache.flink.streaming.api.lineage.LineageVertexProvider;

/**
 * The discarding sink that ends a pyflink-gcp sink's pipeline, naming the datasets the sink is
 * known to write to when the job is built (a Spanner sink's database).
 *
 * <p>The writing happens in the Python writer operator before it; this sink only closes the
 * pipeline, as Flink's own {@link DiscardingSink} does. Flink asks a sink that is a {@link
 * LineageVertexProvider} for its datasets when the sink is added to the stream, and hands them to
 * the listeners of {@code execution.job-status-changed-listeners} in the job's lineage graph
 * ({@code JobCreatedEvent}). That graph is built when the job is created, so destinations a
 * resolver names from the data are reported at run time by the Python side instead
 * ({@code pyflink_gcp.core.lineage}).
 *
 * <p>Each dataset has one facet, {@value #CONFIG_FACET}, a {@link DatasetConfigFacet} with the
 * same keys the Python side reports ({@code service}, {@code resource}, {@code sink}, {@code
 * writeMethod}).
 */
public class LineageDiscardingSink<IN> extends DiscardingSink<IN> implements LineageVertexProvider {

    private static final long serialVersionUID = 1L;

    /** The name of each dataset's configuration facet. */
    public static final String CONFIG_FACET = "config";

    private final ArrayList<String> namespaces;
    private final ArrayList<String> names;
    private final ArrayList<HashMap<String, String>> configs;

    /**
     * @param namespaces each dataset's namespace ({@code spanner})
     * @param names each dataset's name ({@code project.instance.database})
     * @param configs each dataset's configuration facet
     */
    public LineageDiscardingSink(
            List<String> namespaces, List<String> names, List<Map<String, String>> configs) {
        if (namespaces.size() != names.size() || names.size() != configs.size()) {
            throw new IllegalArgumentException(
                    "one namespace, name and configuration per dataset: got "
                            + namespaces.size()
                            + ", "
                            + names.size()
                            + " and "
                            + configs.size());
        }
        this.namespaces = new ArrayList<>(namespaces);
        this.names = new ArrayList<>(names);
        this.configs = new ArrayList<>();
        for (Map<String, String> config : configs) {
            this.configs.add(new HashMap<>(config));
        }
    }

    @Override
    public LineageVertex getLineageVertex() {
        DefaultLineageVertex vertex = new DefaultLineageVertex();
        for (int i = 0; i < names.size(); i++) {
            Map<String, LineageDatasetFacet> facets = new HashMap<>();
            facets.put(CONFIG_FACET, new ConfigFacet(configs.get(i)));
            vertex.addLineageDataset(
                    new DefaultLineageDataset(names.get(i), namespaces.get(i), facets));
        }
        return vertex;
    }

    /** A dataset's configuration: string keys and values. */
    private static final class ConfigFacet implements DatasetConfigFacet, Serializable {

        private static final long serialVersionUID = 1L;

        private final HashMap<String, String> config;

        ConfigFacet(Map<String, String> config) {
            this.config = new HashMap<>(config);
        }

        @Override
        public String name() {
            return CONFIG_FACET;
        }

        @Override
        public Map<String, String> config() {
            return Collections.unmodifiableMap(config);
        }
    }
}

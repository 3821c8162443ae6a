package dev.pyflinkgcp.bridge.table;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.table.api.ValidationException;

/**
 * The option list of the SQL connectors, read from the resource the bridge build generates from
 * the Python side's list ({@code pyflink_gcp/table/options.py}), so Java and Python never drift.
 *
 * <p>Flink's factory helper checks the keys (unknown and missing ones); this class checks the
 * values of every kind with the same rules and messages as the Python parser, and the
 * placeholders of templates against the table's columns, so a mistake fails the statement when
 * it is planned instead of a Python worker restarting forever.
 */
public final class TableOptions {

    /** Where the generated option list lives in the jar. */
    public static final String RESOURCE = "META-INF/pyflink-gcp/table-options.json";

    private static final Pattern DURATION = Pattern.compile("^\\s*(\\d+)\\s*(ms|s|min|h|d)\\s*$");
    private static final Pattern INTEGER = Pattern.compile("^\\s*-?\\d+\\s*$");
    private static final Pattern PATH =
            Pattern.compile("^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$");

    private static volatile JsonNode document;

    /** One option key of a connector, as the Python list declares it. */
    public static final class Spec {
        final String key;
        final String kind;
        final boolean required;
        final String defaultValue;
        final List<String> choices;
        final Long minimum;
        final Long maximum;
        final String[] requiredWhen;
        final String distinctFrom;

        Spec(JsonNode node) {
            key = node.get("key").asText();
            kind = node.get("kind").asText();
            required = node.get("required").asBoolean();
            defaultValue = text(node.get("default"));
            List<String> values = new ArrayList<>();
            node.get("choices").forEach(c -> values.add(c.asText()));
            choices = Collections.unmodifiableList(values);
            minimum = node.get("minimum").isNull() ? null : node.get("minimum").asLong();
            maximum = node.get("maximum").isNull() ? null : node.get("maximum").asLong();
            JsonNode when = node.get("required_when");
            requiredWhen =
                    when == null || when.isNull()
                            ? null
                            : new String[] {when.get(0).asText(), when.get(1).asText()};
            distinctFrom = text(node.get("distinct_from"));
        }

        /** Declared as a string option: values are checked here, with this module's messages. */
        ConfigOption<String> configOption() {
            return ConfigOptions.key(key).stringType().noDefaultValue();
        }
    }

    private final String identifier;
    private final Map<String, Spec> specs;
    private final boolean upserts;

    private TableOptions(String identifier, Map<String, Spec> specs, boolean upserts) {
        this.identifier = identifier;
        this.specs = specs;
        this.upserts = upserts;
    }

    /** Whether a table with a primary key takes a changelog (upserts and deletes). */
    public boolean upserts() {
        return upserts;
    }

    /** The identifiers of the connectors that take a changelog, in list order. */
    static List<String> upsertConnectors() {
        List<String> out = new ArrayList<>();
        load().get("connectors")
                .fields()
                .forEachRemaining(
                        e -> {
                            JsonNode flag = e.getValue().get("upserts");
                            if (flag != null && flag.asBoolean()) {
                                out.add(e.getKey());
                            }
                        });
        return out;
    }

    /** The options of {@code identifier}, from the jar's generated list. */
    public static TableOptions of(String identifier) {
        JsonNode connector = load().get("connectors").get(identifier);
        if (connector == null) {
            throw new IllegalStateException(
                    "connector '" + identifier + "' is not in " + RESOURCE + "; rebuild the bridge");
        }
        Map<String, Spec> specs = new LinkedHashMap<>();
        connector.get("options").forEach(node -> {
            Spec spec = new Spec(node);
            specs.put(spec.key, spec);
        });
        JsonNode flag = connector.get("upserts");
        return new TableOptions(identifier, specs, flag != null && flag.asBoolean());
    }

    /** The whole generated document (writer module, marker line, connectors). */
    static JsonNode load() {
        JsonNode loaded = document;
        if (loaded == null) {
            try (InputStream in = TableOptions.class.getClassLoader().getResourceAsStream(RESOURCE)) {
                if (in == null) {
                    throw new IllegalStateException(RESOURCE + " is missing from the bridge jar");
                }
                loaded = new ObjectMapper().readTree(in);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            document = loaded;
        }
        return loaded;
    }

    static String text(JsonNode node) {
        return node == null || node.isNull() ? null : node.asText();
    }

    public Set<ConfigOption<?>> required() {
        Set<ConfigOption<?>> out = new LinkedHashSet<>();
        specs.values().stream().filter(s -> s.required).forEach(s -> out.add(s.configOption()));
        return out;
    }

    public Set<ConfigOption<?>> optional() {
        Set<ConfigOption<?>> out = new LinkedHashSet<>();
        specs.values().stream().filter(s -> !s.required).forEach(s -> out.add(s.configOption()));
        return out;
    }

    /**
     * The committer's parallelism when the options name a write method that commits after the
     * checkpoint (0: the writer's), else -1. The connector's list entry says which ({@code
     * committing}).
     */
    public int committerParallelism(Map<String, String> options) {
        JsonNode committing = load().get("connectors").get(identifier).get("committing");
        if (committing == null || committing.isNull()) {
            return -1;
        }
        String value = value(options, committing.get("key").asText());
        JsonNode parallelism = value == null ? null : committing.get("values").get(value);
        return parallelism == null ? -1 : parallelism.asInt();
    }

    /** The option's value as set, else its default (null when neither). */
    public String value(Map<String, String> options, String key) {
        Spec spec = specs.get(key);
        String value = options.get(key);
        return value != null ? value : (spec == null ? null : spec.defaultValue);
    }

    /**
     * Checks every value against its kind, the conditional requirements and the templates'
     * placeholders.
     *
     * @throws ValidationException naming the option, the connector and what is expected
     */
    public void validate(Map<String, String> options, List<String> columns) {
        for (Spec spec : specs.values()) {
            String value = options.get(spec.key);
            if (value != null) {
                check(spec, value, columns);
            }
        }
        for (Spec spec : specs.values()) {
            String value = value(options, spec.key);
            if (spec.distinctFrom != null
                    && value != null
                    && value.equals(value(options, spec.distinctFrom))) {
                throw new ValidationException(
                        String.format(
                                "Options '%s' and '%s' of connector '%s' must differ, both are '%s'.",
                                spec.key, spec.distinctFrom, identifier, value));
            }
            if (spec.requiredWhen != null && value == null) {
                String other = spec.requiredWhen[0];
                if (spec.requiredWhen[1].equals(value(options, other))) {
                    throw new ValidationException(
                            String.format(
                                    "Option '%s' of connector '%s' is required when '%s' is '%s'.",
                                    spec.key, identifier, other, spec.requiredWhen[1]));
                }
            }
        }
    }

    private ValidationException invalid(String key, String expected, String value) {
        return new ValidationException(
                String.format(
                        "Invalid value for option '%s' of connector '%s': expected %s, got '%s'.",
                        key, identifier, expected, value));
    }

    private void check(Spec spec, String value, List<String> columns) {
        switch (spec.kind) {
            case "string":
                if (spec.minimum != null || spec.maximum != null) {
                    long size = value.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
                    long least = spec.minimum == null ? 0 : spec.minimum;
                    if (size < least || (spec.maximum != null && size > spec.maximum)) {
                        throw invalid(spec.key, textExpected(least, spec.maximum), value);
                    }
                }
                return;
            case "int":
                checkInt(spec, value);
                return;
            case "bool":
                String lower = value.trim().toLowerCase();
                if (!lower.equals("true") && !lower.equals("false")) {
                    throw invalid(spec.key, "true or false", value);
                }
                return;
            case "duration":
                long low = spec.minimum == null ? 0 : spec.minimum;
                Long millis = durationMillis(value);
                if (millis == null
                        || millis < low
                        || (spec.maximum != null && millis > spec.maximum)) {
                    throw invalid(spec.key, durationExpected(low, spec.maximum), value);
                }
                return;
            case "enum":
                if (!spec.choices.contains(value)) {
                    throw invalid(spec.key, "one of " + String.join(", ", spec.choices), value);
                }
                return;
            case "column":
            case "columns":
                String[] names = spec.kind.equals("columns") ? value.split(",") : new String[] {value};
                for (String name : names) {
                    String trimmed = spec.kind.equals("columns") ? name.trim() : name;
                    if (!columns.contains(trimmed)) {
                        throw invalid(
                                spec.key,
                                "a column of the table (" + String.join(", ", columns) + ")",
                                trimmed);
                    }
                }
                return;
            case "template":
                checkTemplate(spec.key, value, columns);
                return;
            default:
                throw new IllegalStateException("unknown option kind " + spec.kind);
        }
    }

    /** What a string option of {@code low}..{@code high} UTF-8 bytes expects (as in Python). */
    static String textExpected(long low, Long high) {
        return high == null
                ? "a text of at least " + low + " bytes"
                : "a text of " + low + " to " + high + " bytes";
    }

    /**
     * What a duration option of bounds {@code low}..{@code high} (milliseconds) expects: the
     * syntax, then the bounds that are not the syntax's own (the Python parser words it alike).
     */
    static String durationExpected(long low, Long high) {
        String least = low >= 1 ? " of at least " + low + "ms" : "";
        String most =
                high == null
                        ? ""
                        : (least.isEmpty() ? " of at most " : " and at most ") + high + "ms";
        return "a duration such as 500ms, 10s, 5min, 1h or 1d" + least + most;
    }

    private void checkInt(Spec spec, String value) {
        String bound =
                spec.minimum != null && spec.maximum != null
                        ? " in [" + spec.minimum + ", " + spec.maximum + "]"
                        : (spec.minimum != null ? " >= " + spec.minimum : "");
        if (!INTEGER.matcher(value).matches()) {
            throw invalid(spec.key, "an integer" + bound, value);
        }
        long number;
        try {
            number = Long.parseLong(value.trim());
        } catch (NumberFormatException e) {
            throw invalid(spec.key, "an integer" + bound, value);
        }
        if ((spec.minimum != null && number < spec.minimum)
                || (spec.maximum != null && number > spec.maximum)) {
            throw invalid(spec.key, "an integer" + bound, value);
        }
    }

    /** {@code 10s} in milliseconds; null when it is no duration of the options' syntax. */
    public static Long durationMillis(String value) {
        Matcher m = DURATION.matcher(value);
        if (!m.matches()) {
            return null;
        }
        long unit;
        switch (m.group(2)) {
            case "ms":
                unit = 1L;
                break;
            case "s":
                unit = 1_000L;
                break;
            case "min":
                unit = 60_000L;
                break;
            case "h":
                unit = 3_600_000L;
                break;
            default:
                unit = 86_400_000L;
        }
        try {
            return Math.multiplyExact(Long.parseLong(m.group(1)), unit);
        } catch (ArithmeticException | NumberFormatException e) {
            return null;
        }
    }

    /**
     * Scans a template as the Python templates parse it: literal text, {@code {{} and {@code }}}
     * as literal braces, {@code {path}} or {@code {path:spec}} with a dotted path of identifiers
     * and the spec running to the next {@code }}. The first segment of each path must be a
     * column or one of the time roots.
     */
    void checkTemplate(String key, String template, List<String> columns) {
        List<String> roots = new ArrayList<>();
        load().get("time_roots").forEach(r -> roots.add(r.asText()));
        int i = 0;
        int n = template.length();
        while (i < n) {
            char c = template.charAt(i);
            if (c == '{') {
                if (i + 1 < n && template.charAt(i + 1) == '{') {
                    i += 2;
                    continue;
                }
                int end = template.indexOf('}', i + 1);
                if (end < 0) {
                    throw badTemplate(key, "an unclosed '{' at position " + i);
                }
                String body = template.substring(i + 1, end);
                int colon = body.indexOf(':');
                String path = colon < 0 ? body : body.substring(0, colon);
                if (!PATH.matcher(path).matches()) {
                    throw badTemplate(
                            key,
                            "the placeholder '{" + body + "}' at position " + i
                                    + " does not start with a field path such as column or"
                                    + " column.field");
                }
                String root = path.split("\\.", 2)[0];
                if (!columns.contains(root) && !roots.contains(root)) {
                    throw new ValidationException(
                            String.format(
                                    "Unknown placeholder '{%s}' in option '%s' of connector '%s':"
                                            + " '%s' is neither a column of the table (%s) nor %s.",
                                    body,
                                    key,
                                    identifier,
                                    root,
                                    String.join(", ", columns),
                                    String.join(" or ", roots)));
                }
                i = end + 1;
            } else if (c == '}') {
                if (i + 1 < n && template.charAt(i + 1) == '}') {
                    i += 2;
                    continue;
                }
                throw badTemplate(key, "a single '}' at position " + i + " (write '}}' for a brace)");
            } else {
                i++;
            }
        }
    }

    private ValidationException badTemplate(String key, String detail) {
        return new ValidationException(
                String.format(
                        "Invalid template in option '%s' of connector '%s': %s.",
                        key, identifier, detail));
    }
}

package dev.pyflinkgcp.bridge.table;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ArrayNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.table.data.ArrayData;
import org.apache.flink.table.data.GenericArrayData;
import org.apache.flink.table.data.GenericMapData;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.MapData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.TimestampData;
import org.apache.flink.table.types.logical.ArrayType;
import org.apache.flink.table.types.logical.BigIntType;
import org.apache.flink.table.types.logical.LocalZonedTimestampType;
import org.apache.flink.table.types.logical.LogicalType;
import org.apache.flink.table.types.logical.LogicalTypeRoot;
import org.apache.flink.table.types.logical.MapType;
import org.apache.flink.table.types.logical.MultisetType;
import org.apache.flink.table.types.logical.RowType;
import org.apache.flink.table.types.logical.TimestampType;
import org.apache.flink.table.types.logical.utils.LogicalTypeChecks;

/**
 * How the sink's rows travel to the Python writer, and how Python learns their columns.
 *
 * <p>PyFlink 2.3's Python coders read every TIMESTAMP and TIMESTAMP_LTZ as precision 3, while
 * Java writes the declared precision: a TIMESTAMP(6) desynchronises the worker. So a top-level
 * timestamp column of precision above 3 is declared BIGINT in the writer's input and a chained
 * map turns its value into epoch microseconds (the Python side, told by the schema which columns
 * these are, makes a {@code datetime} with the microseconds again). Timestamps of precision
 * above 3 nested in a ROW, ARRAY or MAP are declared precision 3 and reach Python with
 * milliseconds: the map deep-copies such columns, because a binary row written at precision 6
 * must not be read as 3.
 */
final class TableRows {

    private static final int COPY = 0;
    private static final int MICROS = 1;
    private static final int DEEP = 2;

    private final RowType physical;
    private final RowType declared;
    private final int[] modes;

    TableRows(RowType physical) {
        this.physical = physical;
        List<RowType.RowField> fields = new ArrayList<>();
        modes = new int[physical.getFieldCount()];
        for (int i = 0; i < physical.getFieldCount(); i++) {
            RowType.RowField field = physical.getFields().get(i);
            LogicalType type = field.getType();
            if (isFineTimestamp(type)) {
                modes[i] = MICROS;
                fields.add(new RowType.RowField(field.getName(), new BigIntType(type.isNullable())));
            } else {
                LogicalType coarse = coarsened(type);
                modes[i] = coarse.equals(type) ? COPY : DEEP;
                fields.add(new RowType.RowField(field.getName(), coarse));
            }
        }
        this.declared = new RowType(physical.isNullable(), fields);
    }

    /** The row type the Python operator is declared with. */
    RowType declared() {
        return declared;
    }

    /** Whether the rows need the map (some column is converted). */
    boolean needsConversion() {
        for (int mode : modes) {
            if (mode != COPY) {
                return true;
            }
        }
        return false;
    }

    MapFunction<RowData, RowData> conversion() {
        return new Conversion(physical, modes);
    }

    private static boolean isFineTimestamp(LogicalType type) {
        LogicalTypeRoot root = type.getTypeRoot();
        return (root == LogicalTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE
                        || root == LogicalTypeRoot.TIMESTAMP_WITH_LOCAL_TIME_ZONE)
                && LogicalTypeChecks.getPrecision(type) > 3;
    }

    /** {@code type} with every timestamp of precision above 3 declared precision 3. */
    private static LogicalType coarsened(LogicalType type) {
        switch (type.getTypeRoot()) {
            case TIMESTAMP_WITHOUT_TIME_ZONE:
                return isFineTimestamp(type) ? new TimestampType(type.isNullable(), 3) : type;
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
                return isFineTimestamp(type)
                        ? new LocalZonedTimestampType(type.isNullable(), 3)
                        : type;
            case ROW:
                List<RowType.RowField> fields = new ArrayList<>();
                for (RowType.RowField f : ((RowType) type).getFields()) {
                    fields.add(new RowType.RowField(f.getName(), coarsened(f.getType())));
                }
                return new RowType(type.isNullable(), fields);
            case ARRAY:
                return new ArrayType(
                        type.isNullable(), coarsened(((ArrayType) type).getElementType()));
            case MAP:
                MapType map = (MapType) type;
                return new MapType(
                        type.isNullable(),
                        coarsened(map.getKeyType()),
                        coarsened(map.getValueType()));
            case MULTISET:
                return new MultisetType(
                        type.isNullable(), coarsened(((MultisetType) type).getElementType()));
            default:
                return type;
        }
    }

    /**
     * The columns as the Python side reads them: name, type (root, nullability, precision,
     * scale, nested types) and, for the converted timestamps, {@code "micros": true}; and the
     * primary key's columns (empty for an insert-only table).
     */
    String schemaJson(String sinkName, List<String> primaryKey) {
        ObjectMapper mapper = new ObjectMapper();
        ObjectNode root = mapper.createObjectNode();
        root.put("sink_name", sinkName);
        ArrayNode key = root.putArray("primary_key");
        primaryKey.forEach(key::add);
        ArrayNode columns = root.putArray("columns");
        for (int i = 0; i < physical.getFieldCount(); i++) {
            RowType.RowField field = physical.getFields().get(i);
            ObjectNode column = columns.addObject();
            column.put("name", field.getName());
            column.set("type", typeJson(mapper, field.getType()));
            column.put("micros", modes[i] == MICROS);
        }
        try {
            return mapper.writeValueAsString(root);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    private static ObjectNode typeJson(ObjectMapper mapper, LogicalType type) {
        ObjectNode node = mapper.createObjectNode();
        node.put("root", type.getTypeRoot().name());
        node.put("nullable", type.isNullable());
        node.put("sql", type.asSummaryString());
        switch (type.getTypeRoot()) {
            case DECIMAL:
                node.put("scale", LogicalTypeChecks.getScale(type));
                // fall through: a decimal has a precision too
            case TIME_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
                node.put("precision", LogicalTypeChecks.getPrecision(type));
                break;
            default:
                break;
        }
        switch (type.getTypeRoot()) {
            case ROW:
                ArrayNode fields = node.putArray("fields");
                for (RowType.RowField f : ((RowType) type).getFields()) {
                    ObjectNode field = fields.addObject();
                    field.put("name", f.getName());
                    field.set("type", typeJson(mapper, f.getType()));
                }
                break;
            case ARRAY:
                node.set("element", typeJson(mapper, ((ArrayType) type).getElementType()));
                break;
            case MULTISET:
                node.set("element", typeJson(mapper, ((MultisetType) type).getElementType()));
                break;
            case MAP:
                node.set("key", typeJson(mapper, ((MapType) type).getKeyType()));
                node.set("value", typeJson(mapper, ((MapType) type).getValueType()));
                break;
            default:
                break;
        }
        return node;
    }

    /** The chained map: micros for fine top-level timestamps, deep copies of nested ones. */
    private static final class Conversion implements MapFunction<RowData, RowData> {

        private static final long serialVersionUID = 1L;

        private final RowType physical;
        private final int[] modes;
        private transient RowData.FieldGetter[] getters;

        Conversion(RowType physical, int[] modes) {
            this.physical = physical;
            this.modes = modes;
        }

        @Override
        public RowData map(RowData row) {
            if (getters == null) {
                getters = new RowData.FieldGetter[modes.length];
                for (int i = 0; i < modes.length; i++) {
                    getters[i] = RowData.createFieldGetter(physical.getTypeAt(i), i);
                }
            }
            GenericRowData out = new GenericRowData(row.getRowKind(), modes.length);
            for (int i = 0; i < modes.length; i++) {
                if (row.isNullAt(i)) {
                    continue;
                }
                switch (modes[i]) {
                    case MICROS:
                        TimestampData t =
                                row.getTimestamp(
                                        i, LogicalTypeChecks.getPrecision(physical.getTypeAt(i)));
                        out.setField(i, t.getMillisecond() * 1000L + t.getNanoOfMillisecond() / 1000);
                        break;
                    case DEEP:
                        out.setField(i, copy(getters[i].getFieldOrNull(row), physical.getTypeAt(i)));
                        break;
                    default:
                        out.setField(i, getters[i].getFieldOrNull(row));
                }
            }
            return out;
        }

        /** A generic copy of a nested value, reading every timestamp at its own precision. */
        private static Object copy(Object value, LogicalType type) {
            if (value == null) {
                return null;
            }
            switch (type.getTypeRoot()) {
                case ROW:
                    RowType rowType = (RowType) type;
                    RowData row = (RowData) value;
                    GenericRowData out = new GenericRowData(row.getRowKind(), row.getArity());
                    for (int i = 0; i < row.getArity(); i++) {
                        LogicalType fieldType = rowType.getTypeAt(i);
                        Object field = RowData.createFieldGetter(fieldType, i).getFieldOrNull(row);
                        out.setField(i, copy(field, fieldType));
                    }
                    return out;
                case ARRAY:
                    return copyArray((ArrayData) value, ((ArrayType) type).getElementType());
                case MULTISET:
                case MAP:
                    LogicalType keyType =
                            type instanceof MapType
                                    ? ((MapType) type).getKeyType()
                                    : ((MultisetType) type).getElementType();
                    LogicalType valueType =
                            type instanceof MapType
                                    ? ((MapType) type).getValueType()
                                    : new org.apache.flink.table.types.logical.IntType(false);
                    MapData map = (MapData) value;
                    Object[] keys = copyArray(map.keyArray(), keyType).toObjectArray();
                    Object[] values = copyArray(map.valueArray(), valueType).toObjectArray();
                    Map<Object, Object> entries = new LinkedHashMap<>();
                    for (int i = 0; i < keys.length; i++) {
                        entries.put(keys[i], values[i]);
                    }
                    return new GenericMapData(entries);
                default:
                    return value;
            }
        }

        private static GenericArrayData copyArray(ArrayData array, LogicalType elementType) {
            ArrayData.ElementGetter getter = ArrayData.createElementGetter(elementType);
            Object[] out = new Object[array.size()];
            for (int i = 0; i < out.length; i++) {
                out[i] = copy(getter.getElementOrNull(array, i), elementType);
            }
            return new GenericArrayData(out);
        }
    }
}

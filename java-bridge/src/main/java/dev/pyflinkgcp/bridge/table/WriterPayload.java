package dev.pyflinkgcp.bridge.table;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * The Python function of the writer operator, as the bytes the Python worker unpickles.
 *
 * <p>PyFlink's worker runs {@code pickle.loads} on the function payload and uses the result as
 * the process function. A pickle that calls a module-level factory with strings
 * ({@code module.name(identifier, options, schema)}) therefore yields the writer the Python side
 * builds from the DDL's options: no Python runs at planning time, and the same bytes work from a
 * PyFlink program, a Java {@code TableEnvironment} or the SQL client. Written by hand in pickle
 * protocol 2 (GLOBAL takes a dotted module and a top-level name), so nothing beyond the JDK is
 * needed.
 */
final class WriterPayload {

    private WriterPayload() {}

    static byte[] pickle(
            String module, String name, String identifier, Map<String, String> options, String schema) {
        ByteArrayOutputStream out = new ByteArrayOutputStream(256);
        out.write(0x80); // PROTO 2
        out.write(2);
        out.write('c'); // GLOBAL module\nname\n
        writeAscii(out, module + "\n" + name + "\n");
        out.write('('); // MARK: the arguments
        unicode(out, identifier);
        out.write('}'); // EMPTY_DICT
        out.write('('); // MARK: its items
        for (Map.Entry<String, String> e : options.entrySet()) {
            unicode(out, e.getKey());
            unicode(out, e.getValue());
        }
        out.write('u'); // SETITEMS
        unicode(out, schema);
        out.write('t'); // TUPLE
        out.write('R'); // REDUCE
        out.write('.'); // STOP
        return out.toByteArray();
    }

    /** BINUNICODE: 'X', the UTF-8 length as a little-endian int32, the UTF-8 bytes. */
    private static void unicode(ByteArrayOutputStream out, String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        out.write('X');
        int length = bytes.length;
        for (int i = 0; i < 4; i++) {
            out.write((length >>> (8 * i)) & 0xff);
        }
        out.write(bytes, 0, bytes.length);
    }

    private static void writeAscii(ByteArrayOutputStream out, String text) {
        byte[] bytes = text.getBytes(StandardCharsets.US_ASCII);
        out.write(bytes, 0, bytes.length);
    }
}

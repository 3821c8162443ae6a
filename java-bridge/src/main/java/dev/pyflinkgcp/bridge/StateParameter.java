package dev.pyflinkgcp.bridge;

import java.util.Base64;
import java.util.List;

/**
 * How a marker operator hands the Python writer what it restored: an internal parameter whose
 * value is the restored elements, each base64-encoded, comma-separated (empty for none). The
 * lineage reports ({@link LineageState}) and the carried records ({@link CarryState}) both go
 * this way; each Python reader splits and decodes it.
 */
final class StateParameter {

    private StateParameter() {}

    /** {@code elements} as a parameter value: base64, comma-separated. */
    static String of(List<byte[]> elements) {
        StringBuilder out = new StringBuilder();
        for (byte[] element : elements) {
            if (out.length() > 0) {
                out.append(',');
            }
            out.append(Base64.getEncoder().encodeToString(element));
        }
        return out.toString();
    }
}

// Makes gzip=9 and gzip=13 uploads with the Android SDK's own encryption classes (EncryptUtils,
// SymmetricEncryptMode, Base64Coder from sensorsdata/sa-sdk-android, compiled unmodified), for keys
// given on the command line. The envelope and request assembly follows the SDK's EncryptDataOperation
// and TransportEncryption (module_common/.../data/adapter) and AnalyticsMessages.sendHttpRequest.
//
//   java Harness OUT.jsonl PKV TYPE PUBLIC_KEY [PKV TYPE PUBLIC_KEY ...]   (TYPE: RSA or EC)
import com.sensorsdata.analytics.android.sdk.encrypt.encryptor.SymmetricEncryptMode;
import com.sensorsdata.analytics.android.sdk.encrypt.utils.EncryptUtils;
import java.io.ByteArrayOutputStream;
import java.io.FileWriter;
import java.nio.charset.StandardCharsets;
import java.security.Security;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.GZIPOutputStream;

public class Harness {
    static byte[] gzip(String text) throws Exception {
        // As SAEventEncryptTools.gzipEventData: GZIPOutputStream over String.getBytes().
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        GZIPOutputStream out = new GZIPOutputStream(buffer);
        out.write(text.getBytes(StandardCharsets.UTF_8));
        out.finish();
        out.close();
        return buffer.toByteArray();
    }

    static String quote(String text) {
        return "\"" + text.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    /// android.net.Uri.encode: everything but A-Z a-z 0-9 _ - ! . ~ ' ( ) * is percent-encoded (UTF-8).
    static String uriEncode(String text) {
        StringBuilder out = new StringBuilder();
        for (byte b : text.getBytes(StandardCharsets.UTF_8)) {
            char c = (char) (b & 0xFF);
            if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || "_-!.~'()*".indexOf(c) >= 0) out.append(c);
            else out.append(String.format("%%%02X", b & 0xFF));
        }
        return out.toString();
    }

    static String record(String event, int n, long time) {
        return "{\"type\":\"track\",\"event\":\"" + event + "\",\"time\":" + time + ",\"distinct_id\":\"android-enc-" + n
            + "\",\"lib\":{\"$lib\":\"Android\",\"$lib_version\":\"6.8.0\",\"$lib_method\":\"code\"},"
            + "\"identities\":{\"$identity_android_id\":\"android-enc-" + n + "\",\"$identity_anonymous_id\":\"android-enc-" + n + "\"},"
            + "\"properties\":{\"$os\":\"Android\",\"n\":" + n + ",\"secret\":\"only the server reads this\"},\"_track_id\":" + (1000 + n) + "}";
    }

    public static void main(String[] args) throws Exception {
        Security.addProvider(new org.spongycastle.jce.provider.BouncyCastleProvider());
        Security.addProvider(new org.bouncycastle.jce.provider.BouncyCastleProvider());
        long time = 1795400000000L;
        try (FileWriter out = new FileWriter(args[0])) {
            for (int k = 1; k + 2 < args.length; k += 3) {
                int pkv = Integer.parseInt(args[k]);
                String type = args[k + 1];
                String publicKey = args[k + 2];
                // gzip=9: each record its own payload; two "processes" (two AES keys, two ekeys) give
                // two envelopes in one request, as rows stored by different app processes do.
                List<String> envelopes = new ArrayList<>();
                for (int process = 0; process < 2; process++) {
                    byte[] aesKey = EncryptUtils.generateSymmetricKey(SymmetricEncryptMode.AES);
                    String ekey = EncryptUtils.encryptAESKey(publicKey, aesKey, type);
                    if (ekey == null) throw new IllegalStateException("the SDK could not wrap a key with pkv " + pkv);
                    List<String> payloads = new ArrayList<>();
                    for (int i = 0; i < 2; i++) {
                        int n = pkv * 100 + process * 10 + i;
                        payloads.add(quote(EncryptUtils.symmetricEncrypt(aesKey, gzip(record("Encrypted9", n, time + n)), SymmetricEncryptMode.AES)));
                    }
                    envelopes.add("{\"ekey\":" + quote(ekey) + ",\"pkv\":" + pkv + ",\"payloads\":[" + String.join(",", payloads) + "],\"flush_time\":" + time + "}");
                }
                write(out, "gzip9-" + type + "-pkv" + pkv, "9", "[" + String.join(",", envelopes) + "]");
                // gzip=13: the whole batch (a JSON array, each record with _flush_time) is one payload.
                byte[] aesKey = EncryptUtils.generateSymmetricKey(SymmetricEncryptMode.AES);
                String ekey = EncryptUtils.encryptAESKey(publicKey, aesKey, type);
                StringBuilder batch = new StringBuilder("[");
                for (int i = 0; i < 3; i++) {
                    int n = pkv * 100 + 50 + i;
                    String r = record("Encrypted13", n, time + n);
                    if (i > 0) batch.append(",");
                    batch.append(r, 0, r.length() - 1).append(",\"_flush_time\":").append(time).append("}");
                }
                batch.append("]");
                String payload = EncryptUtils.symmetricEncrypt(aesKey, gzip(batch.toString()), SymmetricEncryptMode.AES);
                write(out, "gzip13-" + type + "-pkv" + pkv, "13",
                    "[{\"ekey\":" + quote(ekey) + ",\"pkv\":" + pkv + ",\"payloads\":" + quote(payload) + ",\"flush_time\":" + time + "}]");
            }
        }
    }

    /// One request as AnalyticsMessages.sendHttpRequest builds it: crc (String.hashCode of the data),
    /// gzip, data_list, appended with Uri.Builder, so the body is the encoded query.
    static void write(FileWriter out, String scenario, String gzip, String data) throws Exception {
        String body = "crc=" + uriEncode(String.valueOf(data.hashCode())) + "&gzip=" + gzip + "&data_list=" + uriEncode(data);
        out.write("{\"scenario\":" + quote(scenario) + ",\"method\":\"POST\",\"path\":\"/sa\",\"query\":\"project=production\",\"headers\":{},\"body\":" + quote(body) + "}\n");
    }
}

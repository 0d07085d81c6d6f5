// Drives the official Sensors Java SDK, unmodified, through ConcurrentLoggingConsumer, the consumer
// Sensors recommends for production: the files it writes are what `datongctl import` ships. Compiled
// by Tests/Fixtures/capture-logs.sh together with the SDK's own source (none of it is in this repo).
import com.sensorsdata.analytics.javasdk.SensorsAnalytics;
import com.sensorsdata.analytics.javasdk.consumer.ConcurrentLoggingConsumer;
import java.util.Arrays;
import java.util.Calendar;
import java.util.Date;
import java.util.HashMap;
import java.util.Map;
import java.util.TimeZone;

public class Logs {
    static Map<String, Object> props(Object... pairs) {
        Map<String, Object> map = new HashMap<>();
        for (int i = 0; i < pairs.length; i += 2) map.put((String) pairs[i], pairs[i + 1]);
        return map;
    }

    static Date at(int minute) {
        Calendar calendar = Calendar.getInstance(TimeZone.getTimeZone("UTC"));
        calendar.clear();
        calendar.set(2026, Calendar.NOVEMBER, 20, 8, minute, 15);
        return calendar.getTime();
    }

    public static void main(String[] args) throws Exception {
        // The SDK names the file PREFIX.yyyy-MM-dd.
        SensorsAnalytics sa = new SensorsAnalytics(new ConcurrentLoggingConsumer(args[0]));
        sa.track("java-log-anon", false, "ViewProduct", props("$time", at(1), "sku", "a-1", "price", 9.9, "title", "中文标题"));
        sa.trackSignUp("java-log-user", "java-log-anon");
        for (int i = 0; i < 3; i++) {
            sa.track("java-log-user", true, "BuyProduct", props("$time", at(2 + i), "n", i, "tags", Arrays.asList("x", "y")));
        }
        sa.track("java-log-user", true, "BuyProduct", props("$time", at(6), "$track_id", 4242));
        sa.profileSet("java-log-user", true, props("name", "Java Log"));
        sa.profileIncrement("java-log-user", true, props("orders", 3));
        sa.itemSet("book", "java-log-isbn", props("title", "Logs"));
        sa.shutdown();
    }
}

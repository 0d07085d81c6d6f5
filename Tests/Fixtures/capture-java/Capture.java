// Drives the official Sensors Java SDK against a capture server (Tests/Fixtures/capture-java.sh).
// Every call is one a server application makes in normal use; ids and values are made up.
import com.sensorsdata.analytics.javasdk.SensorsAnalytics;
import com.sensorsdata.analytics.javasdk.bean.SensorsAnalyticsIdentity;
import com.sensorsdata.analytics.javasdk.bean.schema.DetailSchema;
import com.sensorsdata.analytics.javasdk.bean.schema.IdentitySchema;
import com.sensorsdata.analytics.javasdk.bean.schema.ItemEventSchema;
import com.sensorsdata.analytics.javasdk.bean.schema.ItemSchema;
import com.sensorsdata.analytics.javasdk.bean.schema.UserEventSchema;
import com.sensorsdata.analytics.javasdk.bean.schema.UserSchema;
import com.sensorsdata.analytics.javasdk.consumer.BatchConsumer;
import com.sensorsdata.analytics.javasdk.consumer.DebugConsumer;
import java.util.Arrays;
import java.util.Date;
import java.util.HashMap;
import java.util.Map;

public class Capture {
    static Map<String, Object> props(Object... pairs) {
        Map<String, Object> map = new HashMap<>();
        for (int i = 0; i < pairs.length; i += 2) map.put((String) pairs[i], pairs[i + 1]);
        return map;
    }

    static String repeat(String s, int n) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < n; i++) b.append(s);
        return b.toString();
    }

    public static void main(String[] args) throws Exception {
        String url = args[0] + "/sa?project=default";
        // One millisecond for the calls that take a `$time` (increments and appends are stamped by the
        // SDK's clock: calls in a row mostly share a millisecond).
        Date same = new Date();

        // 1. BatchConsumer: one data_list of the calls below (bulk size above their count).
        SensorsAnalytics sa = new SensorsAnalytics(new BatchConsumer(url, 100));
        for (int i = 0; i < 5; i++) sa.profileIncrement("java-user-1", true, props("clicks", 1));
        sa.profileSet("java-user-1", true, props("s", "first", "$time", same));
        sa.profileSet("java-user-1", true, props("s", "second", "$time", same));
        sa.profileSet("java-user-1", true, props("n", 1));
        sa.profileIncrement("java-user-1", true, props("n", 2));
        sa.profileAppend("java-user-1", true, props("l", Arrays.asList("a")));
        sa.profileAppend("java-user-1", true, props("l", Arrays.asList("b")));
        sa.profileAppend("java-user-1", true, props("l", Arrays.asList("c")));
        sa.itemSet("book", "java-item-1", props("v", 1, "$time", same));
        sa.itemDelete("book", "java-item-1", props("$time", same));
        sa.itemSet("book", "java-item-1", props("v", 3, "$time", same));
        // Two purchases equal in everything the caller set; the caller names them by $track_id.
        sa.track("java-user-1", true, "Buy", props("price", 10, "$time", same, "$track_id", 1001));
        sa.track("java-user-1", true, "Buy", props("price", 10, "$time", same, "$track_id", 1002));
        // Strings as the SDK keeps them: cut to 8192 characters; Chinese text of 3,000 characters.
        sa.track("java-user-1", true, "Note", props("long", repeat("x", 10_000), "chinese", repeat("中", 3000),
            "tags", Arrays.asList(repeat("y", 9000))));
        sa.trackSignUp("java-user-2", "java-anon-2");
        sa.flush();

        // 2. ID-Mapping 3 and the multi-entity records (version 2.0, SensorsSchemaData).
        sa.bind(SensorsAnalyticsIdentity.builder().addIdentityProperty(SensorsAnalyticsIdentity.LOGIN_ID, "java-user-3")
            .addIdentityProperty(SensorsAnalyticsIdentity.MOBILE, "13800000003").build());
        sa.trackById(SensorsAnalyticsIdentity.builder().addIdentityProperty(SensorsAnalyticsIdentity.MOBILE, "13800000003").build(),
            "ViewPage", props("page", "home"));
        sa.track(UserEventSchema.init().addIdentityProperty(SensorsAnalyticsIdentity.LOGIN_ID, "java-user-3")
            .setEventName("SchemaBuy").addProperty("price", 12).start());
        sa.bind(IdentitySchema.init().addIdentityProperty(SensorsAnalyticsIdentity.LOGIN_ID, "java-user-4")
            .addIdentityProperty(SensorsAnalyticsIdentity.EMAIL, "u4@example.com").build());
        sa.profileSet(UserSchema.init().addIdentityProperty(SensorsAnalyticsIdentity.LOGIN_ID, "java-user-4")
            .addProperty("level", 5).start());
        sa.itemSet(ItemSchema.init().setSchema("products").setItemId("p-1").addProperty("title", "Car").start());
        sa.track(ItemEventSchema.init().setSchema("products").setEventName("Recall").setItemPair("p_id", "p-1")
            .addProperty("reason", "brakes").start());
        sa.detailSet(DetailSchema.init().setSchema("orders_detail").setDetailId("d-1")
            .identityMap(SensorsAnalyticsIdentity.builder().addIdentityProperty(SensorsAnalyticsIdentity.LOGIN_ID, "java-user-4").build().getIdentityMap())
            .addProperty("amount", 99).start());
        sa.detailDelete(DetailSchema.init().setSchema("orders_detail").setDetailId("d-1")
            .identityMap(SensorsAnalyticsIdentity.builder().addIdentityProperty(SensorsAnalyticsIdentity.LOGIN_ID, "java-user-4").build().getIdentityMap())
            .start());
        sa.itemDelete(ItemSchema.init().setSchema("products").setItemId("p-1").start());
        sa.itemSet(ItemSchema.init().setSchema("products").setItemId("p-2").addProperty("title", "Bike").start());
        sa.detailSet(DetailSchema.init().setSchema("orders_detail").setDetailId("d-2")
            .identityMap(SensorsAnalyticsIdentity.builder().addIdentityProperty(SensorsAnalyticsIdentity.LOGIN_ID, "java-user-4").build().getIdentityMap())
            .addProperty("amount", 5).start());
        sa.detailSet(DetailSchema.init().setSchema("parts_detail").setDetailId("d-3").setItemPair("p_id", "p-2")
            .addProperty("part", "wheel").start());
        sa.flush();
        sa.shutdown();

        // 3. DebugConsumer writing: it throws when the server refuses the record.
        SensorsAnalytics debug = new SensorsAnalytics(new DebugConsumer(url, true));
        debug.track("java-user-1", true, "DebugNote", props("long", repeat("x", 10_000)));
        debug.shutdown();
        System.out.println("capture-java: done");
    }
}

// Drives the official Sensors Go SDK (github.com/sensorsdata/sa-sdk-go), unmodified, through every
// consumer and call a Go server uses, against Tests/Fixtures/capture.py. Built by
// Tests/Fixtures/capture-go.sh inside a copy of the SDK's own source; none of the SDK is in this repo.
// The scenario is fixed (times included) so that a capture can be made again and compared.
package main

import (
	"fmt"
	"os"
	"time"

	sdk "github.com/sensorsdata/sa-sdk-go"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "capture-go:", err)
		os.Exit(1)
	}
}

func main() {
	base := os.Args[1] // e.g. http://127.0.0.1:8106
	// Date-time values: 670 ms, 600 ms, 6 ms and whole seconds, as Go formats them.
	at := func(ms int) time.Time { return time.Date(2026, 11, 20, 8, 30, 15, ms*1_000_000, time.UTC) }
	properties := map[string]interface{}{
		"price": 9.9, "tags": []string{"a", "b"}, "paid": true,
		"paid_at": at(670), "shipped_at": at(600), "packed_at": at(6), "ordered_at": at(0),
	}

	// DefaultConsumer, initialised without a project name: the URL's ?project= decides, and every
	// record says "project":"".
	plain, err := sdk.InitDefaultConsumer(base+"/sa?project=default", 5000)
	must(err)
	sa := sdk.InitSensorsAnalytics(plain, "", false)
	sa.RegisterSuperProperties(map[string]interface{}{"$app_name": "go-capture", "platform_type": "server"})
	must(sa.Track("go-anon-1", "BuyProduct", properties, false))
	must(sa.Track("go-user-1", "BuyProduct", map[string]interface{}{"price": 1}, true))
	must(sa.TrackSignup("go-user-1", "go-anon-1"))
	must(sa.ProfileSet("go-user-1", map[string]interface{}{"name": "Ada", "joined_at": at(670)}, true))
	must(sa.ProfileSetOnce("go-user-1", map[string]interface{}{"first_seen": "web"}, true))
	must(sa.ProfileIncrement("go-user-1", map[string]interface{}{"orders": 1}, true))
	must(sa.ProfileAppend("go-user-1", map[string]interface{}{"tags": []string{"vip"}}, true))
	must(sa.ProfileUnset("go-user-1", map[string]interface{}{"first_seen": true}, true))
	must(sa.ItemSet("book", "isbn-1", map[string]interface{}{"title": "Go"}))
	must(sa.ItemDelete("book", "isbn-2"))
	// ID-Mapping 3.
	login := sdk.Identity{Identities: map[string]string{sdk.LOGIN_ID: "go-user-2", sdk.MOBILE: "13800000000"}}
	must(sa.Bind(login))
	must(sa.TrackById(sdk.Identity{Identities: map[string]string{sdk.LOGIN_ID: "go-user-2"}}, "ViewProduct", map[string]interface{}{"sku": "x"}))
	must(sa.ProfileSetById(sdk.Identity{Identities: map[string]string{sdk.LOGIN_ID: "go-user-2"}}, map[string]interface{}{"level": 3}))
	must(sa.UnBind(sdk.Identity{Identities: map[string]string{sdk.MOBILE: "13800000000"}}))
	sa.Close()

	// A named project, and time_free for an import of history: an order of 2020 ($time in epoch
	// milliseconds, the type the SDK reads it as: track.go extractUserTime).
	named, err := sdk.InitDefaultConsumer(base+"/sa", 5000)
	must(err)
	history := sdk.InitSensorsAnalytics(named, "default", true)
	old := map[string]interface{}{"$time": time.Date(2020, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli(), "source": "import"}
	must(history.Track("go-anon-3", "OldOrder", old, false))
	history.Close()

	// BatchConsumer: one data_list of three.
	batch, err := sdk.InitBatchConsumer(base+"/sa?project=default", 3, 5000)
	must(err)
	batched := sdk.InitSensorsAnalytics(batch, "", false)
	for i := 0; i < 3; i++ {
		must(batched.Track("go-anon-4", "BatchEvent", map[string]interface{}{"n": i}, false))
	}
	batched.Close()

	// DebugConsumer: validate only, then write.
	dry, err := sdk.InitDebugConsumer(base+"/sa?project=default", false, 5000)
	must(err)
	checking := sdk.InitSensorsAnalytics(dry, "", false)
	must(checking.Track("go-anon-5", "DebugEvent", map[string]interface{}{"n": 1}, false))
	checking.Close()
	wet, err := sdk.InitDebugConsumer(base+"/sa?project=default", true, 5000)
	must(err)
	writing := sdk.InitSensorsAnalytics(wet, "", false)
	must(writing.Track("go-anon-5", "DebugEvent", map[string]interface{}{"n": 2}, false))
	writing.Close()
	fmt.Println("capture-go: done")
}

// Drives the official Sensors Go SDK (github.com/sensorsdata/sa-sdk-go), unmodified, through its
// LoggingConsumer: the file it writes is what `datongctl import` ships. Built by
// Tests/Fixtures/capture-logs.sh inside a copy of the SDK's own source; none of the SDK is in this repo.
package main

import (
	"fmt"
	"os"
	"time"

	sdk "github.com/sensorsdata/sa-sdk-go"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "capture-logs go:", err)
		os.Exit(1)
	}
}

func main() {
	// The SDK names the file PREFIX.YYYY-MM-DD (by hour with `true`).
	consumer, err := sdk.InitLoggingConsumer(os.Args[1], false)
	must(err)
	sa := sdk.InitSensorsAnalytics(consumer, "default", false)
	at := func(minute int) int64 { return time.Date(2026, 11, 20, 8, minute, 15, 0, time.UTC).UnixMilli() }
	must(sa.Track("go-log-anon", "ViewProduct", map[string]interface{}{"$time": at(1), "sku": "a-1", "price": 9.9, "title": "中文标题"}, false))
	must(sa.TrackSignup("go-log-user", "go-log-anon"))
	for i := 0; i < 3; i++ {
		must(sa.Track("go-log-user", "BuyProduct", map[string]interface{}{"$time": at(2 + i), "n": i, "tags": []string{"x", "y"}}, true))
	}
	must(sa.ProfileSet("go-log-user", map[string]interface{}{"name": "Go Log"}, true))
	must(sa.ProfileIncrement("go-log-user", map[string]interface{}{"orders": 3}, true))
	must(sa.ItemSet("book", "go-log-isbn", map[string]interface{}{"title": "Logs"}))
	login := sdk.Identity{Identities: map[string]string{sdk.LOGIN_ID: "go-log-user-2"}}
	must(sa.TrackById(login, "ViewProduct", map[string]interface{}{"$time": at(9), "sku": "b-2"}))
	sa.Close()
}

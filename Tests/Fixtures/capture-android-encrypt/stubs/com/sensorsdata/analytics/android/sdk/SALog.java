// The SDK's logger, reduced to printing: the encryption classes only log failures through it.
package com.sensorsdata.analytics.android.sdk;

public class SALog {
    public static void i(String tag, String message) { System.err.println(tag + ": " + message); }
    public static void i(String tag, Throwable error) { System.err.println(tag + ": " + error); }
    public static void d(String tag, String message) {}
    public static void printStackTrace(Exception error) { error.printStackTrace(); }
}

// The one method of android.text.TextUtils the SDK's EncryptUtils calls, as Android defines it.
package android.text;

public class TextUtils {
    public static boolean isEmpty(CharSequence text) {
        return text == null || text.length() == 0;
    }
}

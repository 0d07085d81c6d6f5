// Apps ship SpongyCastle (BouncyCastle renamed, provider name "SC") for the EC path; Debian ships
// BouncyCastle. This provider is named "SC" and offers BouncyCastle's own implementations, so the
// SDK's `KeyFactory.getInstance("EC", "SC")` and `Cipher.getInstance("ECIES", "SC")` run the same code.
package org.spongycastle.jce.provider;

import java.security.Provider;

public class BouncyCastleProvider extends Provider {
    public BouncyCastleProvider() {
        super("SC", "1.72", "BouncyCastle 1.72 under SpongyCastle's provider name");
        Provider bc = new org.bouncycastle.jce.provider.BouncyCastleProvider();
        for (Provider.Service service : bc.getServices()) {
            putService(new Provider.Service(this, service.getType(), service.getAlgorithm(), service.getClassName(), null, null) {
                @Override
                public Object newInstance(Object parameter) throws java.security.NoSuchAlgorithmException {
                    return service.newInstance(parameter);
                }
            });
        }
    }
}

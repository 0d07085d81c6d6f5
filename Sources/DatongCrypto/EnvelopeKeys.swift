import CCrypto
import Foundation
import Synchronization

/// A project's private key, parsed once from its PKCS#8 DER and kept in memory for the life of the
/// process: unwrapping an envelope's AES key then costs one RSA or ECDH operation, no parsing.
package final class EnvelopePrivateKey: @unchecked Sendable {
    // OpenSSL's EVP_PKEY is safe to use from several threads for these read-only operations
    // (each call makes its own EVP_PKEY_CTX); the pointer is never mutated after init.
    private let key: OpaquePointer
    package let type: KeyType
    package let pkv: Int
    /// AES keys already unwrapped, by their wrapped form. An SDK wraps one AES key per app process
    /// and sends the same `ekey` with every upload, so a device costs one RSA or ECDH operation per
    /// process, not one per request. Bounded: emptied when full.
    private let unwrapped = Mutex<[Data: [UInt8]]>([:])
    private static let maxCachedKeys = 8192

    package init(pkcs8DER: [UInt8], type: KeyType, pkv: Int) throws(CryptoFailure) {
        var parsed: OpaquePointer?
        pkcs8DER.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            parsed = d2i_AutoPrivateKey(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw CryptoFailure("the private key of pkv \(pkv) cannot be read") }
        key = parsed
        self.type = type
        self.pkv = pkv
    }

    deinit { EVP_PKEY_free(key) }

    /// The AES key an SDK wrapped in `ekey` (already base64-decoded): RSA PKCS#1 v1.5 or ECIES by
    /// this key's type, as the envelope does not say. A key of any length but 16, 24 or 32 bytes is
    /// a failure (OpenSSL 3.2+ answers a wrong PKCS#1 padding with random bytes, not an error).
    package func unwrap(_ ekey: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        let wrapped = Data(ekey)
        if let known = unwrapped.withLock({ $0[wrapped] }) { return known }
        let key = type == .rsa ? try rsaDecrypt(ekey) : try eciesDecrypt(ekey)
        guard [16, 24, 32].contains(key.count) else { throw CryptoFailure("the unwrapped key is \(key.count) bytes, not an AES key") }
        unwrapped.withLock { cache in
            if cache.count >= Self.maxCachedKeys { cache.removeAll(keepingCapacity: true) }
            cache[wrapped] = key
        }
        return key
    }

    private func rsaDecrypt(_ input: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new(key, nil) else { throw CryptoFailure("RSA context") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_decrypt_init(context) == 1, EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PADDING) == 1 else {
            throw CryptoFailure("RSA init")
        }
        var length = 0
        guard EVP_PKEY_decrypt(context, nil, &length, input, input.count) == 1 else { throw CryptoFailure("RSA size") }
        var output = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_decrypt(context, &output, &length, input, input.count) == 1 else { throw CryptoFailure("the RSA-wrapped key does not decrypt") }
        return Array(output[..<length])
    }

    /// ECIES as BouncyCastle's `IESEngine` (Android, through SpongyCastle) and Crypto++'s
    /// `ECIES<ECP>` with DHAES_MODE (iOS) make it: `ekey = V ‖ C ‖ T`, V the ephemeral point,
    /// Z the ECDH x-coordinate, Kx = KDF2-SHA1(V ‖ Z), MAC key = Kx[0..<16], C = K xor Kx[16...],
    /// T = HMAC-SHA1(MAC key, C ‖ L) with L eight zero bytes, or four for BouncyCastle's older
    /// engine (docs/PROTOCOL-ENCRYPTION.md section 2.3).
    private func eciesDecrypt(_ input: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        let pointLength = 65
        let tagLength = 20
        guard input.count > pointLength + tagLength, input[0] == 0x04 else { throw CryptoFailure("not an ECIES key for P-256") }
        let point = Array(input[..<pointLength])
        let ciphertext = Array(input[pointLength..<(input.count - tagLength)])
        let tag = Array(input[(input.count - tagLength)...])
        let peer = try Self.p256PublicKey(point)
        defer { EVP_PKEY_free(peer) }
        guard let context = EVP_PKEY_CTX_new(key, nil) else { throw CryptoFailure("ECDH context") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, peer) == 1 else {
            throw CryptoFailure("the ECIES point is not on the key's curve")
        }
        var secretLength = 0
        guard EVP_PKEY_derive(context, nil, &secretLength) == 1 else { throw CryptoFailure("ECDH size") }
        var secret = [UInt8](repeating: 0, count: secretLength)
        guard EVP_PKEY_derive(context, &secret, &secretLength) == 1 else { throw CryptoFailure("ECDH") }
        let derived = Self.kdf2SHA1(point + secret, length: 16 + ciphertext.count)
        let macKey = Array(derived[..<16])
        for lengthTag in [[UInt8](repeating: 0, count: 8), [UInt8](repeating: 0, count: 4)] {
            let expected = try Self.hmacSHA1(key: macKey, ciphertext + lengthTag)
            if CRYPTO_memcmp(expected, tag, tagLength) == 0 {
                return zip(ciphertext, derived[16...]).map { $0 ^ $1 }
            }
        }
        throw CryptoFailure("the ECIES tag does not match: the key was tampered with or is for another key pair")
    }

    /// An uncompressed P-256 point as a public key (the SubjectPublicKeyInfo DER of the point).
    private static func p256PublicKey(_ point: [UInt8]) throws(CryptoFailure) -> OpaquePointer {
        let prefix: [UInt8] = [
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D,
            0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ]
        let der = prefix + point
        var parsed: OpaquePointer?
        der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            parsed = d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw CryptoFailure("the ECIES point is not a P-256 point") }
        return parsed
    }

    /// KDF2 with SHA-1 and no extra input (ANSI X9.63): SHA1(seed ‖ counter) for counter 1, 2, …
    static func kdf2SHA1(_ seed: [UInt8], length: Int) -> [UInt8] {
        var output: [UInt8] = []
        var counter: UInt32 = 1
        while output.count < length {
            let block = seed + withUnsafeBytes(of: counter.bigEndian, Array.init)
            var digest = [UInt8](repeating: 0, count: 20)
            var size: UInt32 = 0
            _ = EVP_Digest(block, block.count, &digest, &size, EVP_sha1(), nil)
            output += digest
            counter += 1
        }
        return Array(output[..<length])
    }

    private static func hmacSHA1(key: [UInt8], _ data: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 20)
        var length: UInt32 = 0
        guard HMAC(EVP_sha1(), key, Int32(key.count), data, data.count, &digest, &length) != nil, length == 20 else {
            throw CryptoFailure("HMAC-SHA1")
        }
        return digest
    }
}

/// One AES payload of an envelope: base64 of IV[16] ‖ AES-CBC-PKCS#7(K, gzip(JSON)).
package enum EnvelopePayload {
    /// The gzip bytes inside `payload` (base64-decoded already), or a failure when it does not
    /// decrypt with `key` (a wrong key shows as bad padding).
    package static func decrypt(_ payload: [UInt8], key: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        guard payload.count >= 32, (payload.count - 16) % 16 == 0 else { throw CryptoFailure("a payload is not IV plus whole AES blocks") }
        let cipher: OpaquePointer? =
            switch key.count {
            case 16: EVP_aes_128_cbc()
            case 24: EVP_aes_192_cbc()
            default: EVP_aes_256_cbc()
            }
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoFailure("cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        let iv = Array(payload[..<16])
        guard EVP_DecryptInit_ex(context, cipher, nil, key, iv) == 1 else { throw CryptoFailure("AES init") }
        var output = [UInt8](repeating: 0, count: payload.count)
        var length: Int32 = 0
        let body = Array(payload[16...])
        guard EVP_DecryptUpdate(context, &output, &length, body, Int32(body.count)) == 1 else { throw CryptoFailure("AES") }
        var total = Int(length)
        let final = output.withUnsafeMutableBufferPointer { EVP_DecryptFinal_ex(context, $0.baseAddress! + total, &length) }
        guard final == 1 else { throw CryptoFailure("a payload does not decrypt with the envelope's key (bad padding)") }
        total += Int(length)
        return Array(output[..<total])
    }
}

import CCrypto
import Foundation

/// Why a cryptographic step failed. The message names the step, never a key.
package struct CryptoFailure: Error, CustomStringConvertible, Equatable {
    package let description: String

    package init(_ description: String) { self.description = description }
}

/// The two key types the Sensors SDKs wrap their AES keys with (docs/PROTOCOL-ENCRYPTION.md section 2).
package enum KeyType: String, Codable, Sendable, CaseIterable {
    /// RSA-2048, RSAES-PKCS1-v1_5 (`RSA+AES`).
    case rsa
    /// EC P-256, ECIES as BouncyCastle and Crypto++ do it (`EC+AES`).
    case ec

    /// The `key_v2.type` the SDKs read.
    package var sdkType: String { self == .rsa ? "RSA+AES" : "EC+AES" }
}

/// A key pair made by OpenSSL: the public key as the SDKs want it (base64 of the DER
/// SubjectPublicKeyInfo, no PEM armour) and the private key as PKCS#8 DER, which only ever leaves
/// memory sealed (`KeySealer`).
package struct GeneratedKeyPair: Sendable {
    package let type: KeyType
    package let publicKeyBase64: String
    package let privateKeyDER: [UInt8]

    /// A fresh pair: RSA-2048 or EC P-256 (prime256v1).
    package static func generate(_ type: KeyType) throws(CryptoFailure) -> GeneratedKeyPair {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, type == .rsa ? "RSA" : "EC", nil) else { throw CryptoFailure("no key context") }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_keygen_init(context) == 1 else { throw CryptoFailure("keygen init") }
        switch type {
        case .rsa: guard EVP_PKEY_CTX_set_rsa_keygen_bits(context, 2048) == 1 else { throw CryptoFailure("RSA key size") }
        case .ec: guard EVP_PKEY_CTX_set_group_name(context, "P-256") == 1 else { throw CryptoFailure("EC curve") }
        }
        var key: OpaquePointer?
        guard EVP_PKEY_generate(context, &key) == 1, let key else { throw CryptoFailure("key generation") }
        defer { EVP_PKEY_free(key) }
        return GeneratedKeyPair(
            type: type, publicKeyBase64: try Self.der(key, i2d_PUBKEY).base64EncodedString(),
            privateKeyDER: Array(try Self.der(key, i2d_PrivateKey)))
    }

    private static func der(
        _ key: OpaquePointer, _ encode: (OpaquePointer?, UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32
    ) throws(CryptoFailure) -> Data {
        let length = encode(key, nil)
        guard length > 0 else { throw CryptoFailure("key encoding") }
        var bytes = [UInt8](repeating: 0, count: Int(length))
        let written = bytes.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return encode(key, &cursor)
        }
        guard written == length else { throw CryptoFailure("key encoding") }
        return Data(bytes)
    }
}

/// Seals private keys at rest under the master key (`ENCRYPTION_MASTER_KEY`): AES-256-GCM with a
/// random 12-byte nonce, stored as nonce ‖ ciphertext ‖ tag. Without the master key a sealed key
/// is useless, which is the point: the database alone gives no one the power to read an app's data.
package struct KeySealer: Sendable {
    private let key: [UInt8]

    /// The master key is 32 bytes, given as base64 (`openssl rand -base64 32`).
    package init(masterKeyBase64: String) throws(CryptoFailure) {
        guard let key = Data(base64Encoded: masterKeyBase64.trimmingCharacters(in: .whitespacesAndNewlines)), key.count == 32 else {
            throw CryptoFailure("ENCRYPTION_MASTER_KEY must be 32 bytes in base64 (openssl rand -base64 32)")
        }
        self.key = Array(key)
    }

    /// `plaintext` sealed; `label` (project and pkv) is bound to it, so a sealed key cannot be moved
    /// to another row unnoticed.
    package func seal(_ plaintext: [UInt8], label: String) throws(CryptoFailure) -> [UInt8] {
        var nonce = [UInt8](repeating: 0, count: 12)
        guard RAND_bytes(&nonce, 12) == 1 else { throw CryptoFailure("random nonce") }
        let (ciphertext, tag) = try gcm(encrypt: true, nonce: nonce, input: plaintext, label: label, tag: nil)
        return nonce + ciphertext + tag
    }

    package func open(_ sealed: [UInt8], label: String) throws(CryptoFailure) -> [UInt8] {
        guard sealed.count > 28 else { throw CryptoFailure("sealed key too short") }
        let nonce = Array(sealed[..<12])
        let tag = Array(sealed[(sealed.count - 16)...])
        let body = Array(sealed[12..<(sealed.count - 16)])
        return try gcm(encrypt: false, nonce: nonce, input: body, label: label, tag: tag).output
    }

    private func gcm(encrypt: Bool, nonce: [UInt8], input: [UInt8], label: String, tag: [UInt8]?) throws(CryptoFailure) -> (output: [UInt8], tag: [UInt8]) {
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoFailure("cipher context") }
        defer { EVP_CIPHER_CTX_free(context) }
        let initialise = encrypt ? EVP_EncryptInit_ex : EVP_DecryptInit_ex
        let update = encrypt ? EVP_EncryptUpdate : EVP_DecryptUpdate
        guard initialise(context, EVP_aes_256_gcm(), nil, key, nonce) == 1 else { throw CryptoFailure("AES-GCM init") }
        var length: Int32 = 0
        let aad = Array(label.utf8)
        guard update(context, nil, &length, aad, Int32(aad.count)) == 1 else { throw CryptoFailure("AES-GCM label") }
        var output = [UInt8](repeating: 0, count: input.count + 16)
        guard update(context, &output, &length, input, Int32(input.count)) == 1 else { throw CryptoFailure("AES-GCM") }
        var total = Int(length)
        var tagOut = tag ?? [UInt8](repeating: 0, count: 16)
        if !encrypt {
            guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, 16, &tagOut) == 1 else { throw CryptoFailure("AES-GCM tag") }
        }
        let final = output.withUnsafeMutableBufferPointer { buffer in
            (encrypt ? EVP_EncryptFinal_ex : EVP_DecryptFinal_ex)(context, buffer.baseAddress! + total, &length)
        }
        guard final == 1 else { throw CryptoFailure(encrypt ? "AES-GCM final" : "the sealed key does not open with this master key") }
        total += Int(length)
        if encrypt {
            guard EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, 16, &tagOut) == 1 else { throw CryptoFailure("AES-GCM tag") }
        }
        return (Array(output[..<total]), tagOut)
    }
}

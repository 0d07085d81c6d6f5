import CCrypto
import CompressNIO
import DatongCrypto
import Foundation
import NIOCore

/// What an SDK with `enableEncrypt` does to its records (docs/PROTOCOL-ENCRYPTION.md sections 2 and 3),
/// for benchmarks that need many encrypted uploads: one AES-128 key per "process", wrapped for the
/// project's public key (RSA PKCS#1 v1.5, or ECIES as BouncyCastle makes it), each record gzipped and
/// AES-CBC encrypted with a random IV. The tests check Datong against the Android SDK's own output;
/// this is only a faster source of the same format.
package struct SDKEncryption {
    package let pkv: Int
    private let aesKey: [UInt8]
    package let ekey: String

    package init(publicKeyBase64: String, type: KeyType, pkv: Int) throws {
        self.pkv = pkv
        var key = [UInt8](repeating: 0, count: 16)
        guard RAND_bytes(&key, 16) == 1 else { throw CryptoFailure("random key") }
        aesKey = key
        guard let der = Data(base64Encoded: publicKeyBase64) else { throw CryptoFailure("public key") }
        var parsed: OpaquePointer?
        Array(der).withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            parsed = d2i_PUBKEY(nil, &cursor, buffer.count)
        }
        guard let publicKey = parsed else { throw CryptoFailure("public key") }
        defer { EVP_PKEY_free(publicKey) }
        ekey = Data(type == .rsa ? try Self.rsaWrap(key, publicKey) : try Self.eciesWrap(key, publicKey)).base64EncodedString()
    }

    /// A `gzip=9` form body: the records in one envelope, one payload each, with the crc.
    package func uploadBody(_ records: [[String: Any]]) throws -> [UInt8] {
        let payloads = try records.map { try payload(SDKTraffic.json($0)) }
        let envelope: [String: Any] = ["ekey": ekey, "pkv": pkv, "payloads": payloads, "flush_time": 1_795_400_000_000]
        let text = String(decoding: SDKTraffic.json([envelope]), as: UTF8.self)
        return Array("crc=\(SDKTraffic.javaHashCode(text))&gzip=9&data_list=\(SDKTraffic.formEncoded(text))".utf8)
    }

    private func payload(_ json: [UInt8]) throws -> String {
        var buffer = ByteBuffer(bytes: json)
        let gzipped = Array(try buffer.compress(with: .gzip()).readableBytesView)
        var iv = [UInt8](repeating: 0, count: 16)
        guard RAND_bytes(&iv, 16) == 1, let context = EVP_CIPHER_CTX_new() else { throw CryptoFailure("AES") }
        defer { EVP_CIPHER_CTX_free(context) }
        var out = [UInt8](repeating: 0, count: gzipped.count + 16)
        var length: Int32 = 0
        var total = 0
        guard EVP_EncryptInit_ex(context, EVP_aes_128_cbc(), nil, aesKey, iv) == 1,
            EVP_EncryptUpdate(context, &out, &length, gzipped, Int32(gzipped.count)) == 1
        else { throw CryptoFailure("AES") }
        total = Int(length)
        guard out.withUnsafeMutableBufferPointer({ EVP_EncryptFinal_ex(context, $0.baseAddress! + total, &length) }) == 1 else { throw CryptoFailure("AES") }
        total += Int(length)
        return Data(iv + out[..<total]).base64EncodedString()
    }

    private static func rsaWrap(_ key: [UInt8], _ publicKey: OpaquePointer) throws -> [UInt8] {
        guard let context = EVP_PKEY_CTX_new(publicKey, nil) else { throw CryptoFailure("RSA") }
        defer { EVP_PKEY_CTX_free(context) }
        var length = 0
        guard EVP_PKEY_encrypt_init(context) == 1, EVP_PKEY_CTX_set_rsa_padding(context, RSA_PKCS1_PADDING) == 1,
            EVP_PKEY_encrypt(context, nil, &length, key, key.count) == 1
        else { throw CryptoFailure("RSA") }
        var out = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_encrypt(context, &out, &length, key, key.count) == 1 else { throw CryptoFailure("RSA") }
        return Array(out[..<length])
    }

    /// ECIES: an ephemeral P-256 key, ECDH, KDF2-SHA1(V ‖ Z), C = K xor Kx[16...], T = HMAC-SHA1 over C ‖ 8 zero bytes.
    private static func eciesWrap(_ key: [UInt8], _ publicKey: OpaquePointer) throws -> [UInt8] {
        let ephemeral = try GeneratedKeyPair.generate(.ec)
        guard let point = Data(base64Encoded: ephemeral.publicKeyBase64).map({ Array($0.suffix(65)) }) else { throw CryptoFailure("EC") }
        var parsed: OpaquePointer?
        ephemeral.privateKeyDER.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            parsed = d2i_AutoPrivateKey(nil, &cursor, buffer.count)
        }
        guard let privateKey = parsed, let context = EVP_PKEY_CTX_new(privateKey, nil) else { throw CryptoFailure("EC") }
        defer {
            EVP_PKEY_CTX_free(context)
            EVP_PKEY_free(privateKey)
        }
        var secretLength = 32
        var secret = [UInt8](repeating: 0, count: 32)
        guard EVP_PKEY_derive_init(context) == 1, EVP_PKEY_derive_set_peer(context, publicKey) == 1,
            EVP_PKEY_derive(context, &secret, &secretLength) == 1
        else { throw CryptoFailure("ECDH") }
        var derived: [UInt8] = []
        var counter: UInt32 = 1
        while derived.count < 32 {
            let block = point + secret + withUnsafeBytes(of: counter.bigEndian, Array.init)
            var digest = [UInt8](repeating: 0, count: 20)
            var size: UInt32 = 0
            _ = EVP_Digest(block, block.count, &digest, &size, EVP_sha1(), nil)
            derived += digest
            counter += 1
        }
        let ciphertext = zip(key, derived[16...]).map { $0 ^ $1 }
        var tag = [UInt8](repeating: 0, count: 20)
        var tagLength: UInt32 = 0
        let macInput = ciphertext + [UInt8](repeating: 0, count: 8)
        guard HMAC(EVP_sha1(), Array(derived[..<16]), 16, macInput, macInput.count, &tag, &tagLength) != nil else { throw CryptoFailure("HMAC") }
        return point + ciphertext + tag
    }
}
